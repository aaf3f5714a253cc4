package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// run executes the CLI with args and returns stdout, stderr and the error.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	app := newApp()
	var out, errb bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errb
	app.ExitErrHandler = func(*cli.Context, error) {}
	err := app.Run(append([]string{"swml-rdma"}, args...))
	return out.String(), errb.String(), err
}

func TestWriteBWTable(t *testing.T) {
	out, _, err := run(t, "write-bw", "--iters", "50", "--size", "8KiB", "--mtu", "1024", "--client-addr", "127.13.1.2", "--server-addr", "127.13.1.3")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "#bytes") || !strings.Contains(out, "8192") || !strings.Contains(out, "BW [Gbit/s]") {
		t.Fatalf("unexpected output:\n%s", out)
	}
}

func TestWriteBWJSON(t *testing.T) {
	out, _, err := run(t, "write-bw", "--iters", "20", "--size", "4096", "--json", "--client-addr", "127.13.1.12", "--server-addr", "127.13.1.13")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Bytes    int64   `json:"bytes"`
		Messages int     `json:"messages"`
		Posted   int     `json:"posted"`
		Gbps     float64 `json:"gbit_per_s"`
		Sender   string  `json:"sender"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if res.Posted != 20 || res.Messages == 0 || res.Bytes != int64(res.Messages)*4096 || res.Sender != "soft:127.13.1.12" {
		t.Fatalf("result %+v", res)
	}
}

func TestWriteBWBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"mtu", []string{"--mtu", "1500"}, "256, 512, 1024, 2048 or 4096"},
		{"size zero", []string{"--size", "0"}, "positive byte count"},
		{"size junk", []string{"--size", "lots"}, "positive byte count"},
		{"address", []string{"--client-addr", "nic0"}, "not an IP address"},
		{"iters", []string{"--iters", "0"}, "--duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := run(t, append([]string{"write-bw"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// TestWriteBWDefaultDepth: README's `write-bw --size 1MiB --mtu 4096 --json`
// runs with the default --tx-depth (as many 1 MiB messages as fit the
// receiver's socket buffer), while an explicit depth that does not fit is
// refused.
func TestWriteBWDefaultDepth(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const cmd = "`--size 1MiB --mtu 4096 --json`"
	if !strings.Contains(string(readme), cmd) {
		t.Fatalf("README.md no longer shows write-bw %s: update this test to what it shows", cmd)
	}
	out, _, err := run(t, "write-bw", "--size", "1MiB", "--mtu", "4096", "--json", "--iters", "8", "--client-addr", "127.13.1.22", "--server-addr", "127.13.1.23")
	if err != nil {
		t.Fatalf("README's write-bw: %v", err)
	}
	if !strings.Contains(out, `"gbit_per_s"`) {
		t.Fatalf("not the JSON result:\n%s", out)
	}
	if _, _, err := run(t, "write-bw", "--size", "1MiB", "--tx-depth", "32"); err == nil || !strings.Contains(err.Error(), "give --tx-depth 4 or less") {
		t.Fatalf("explicit --tx-depth 32 with 1 MiB messages: %v", err)
	}
}
