package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchJSON(t *testing.T) {
	for _, dtype := range []string{"float32", "int32"} {
		t.Run(dtype, func(t *testing.T) {
			out, _, err := run(t, "bench", "--workers", "3", "--size", "40000", "--iters", "2", "--warmup", "1",
				"--packet-size", "256", "--msg-size", "1KiB", "--qps", "2", "--dtype", dtype, "--json", "--switch-addr", "127.13.2.1")
			if err != nil {
				t.Fatal(err)
			}
			var r benchResult
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out)
			}
			if !r.Verified || r.Workers != 3 || r.Elements != 10000 || r.Iters != 2 || r.DType != dtype || r.Packets == 0 ||
				r.MedianNs < r.MinNs || r.MaxNs < r.MedianNs || r.ATEPerSec <= 0 {
				t.Fatalf("result %+v", r)
			}
		})
	}
}

func TestBenchTableWithLoss(t *testing.T) {
	out, _, err := run(t, "bench", "--workers", "2", "--size", "64KiB", "--iters", "2", "--loss", "0.02", "--msg-size", "4KiB", "--switch-addr", "127.13.3.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2 workers", "loss 0.02", "ATE/s", "retransmissions", "true"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"workers", []string{"--workers", "0"}, "1 to 250 workers"},
		{"size zero", []string{"--size", "0"}, "positive byte count"},
		{"size odd", []string{"--size", "10"}, "multiple of 4"},
		{"packet size", []string{"--packet-size", "1000"}, "256, 512, 1024, 2048 and 4096"},
		{"msg size", []string{"--msg-size", "3000"}, "power of two"},
		{"dtype", []string{"--dtype", "float16"}, "use float32 or int32"},
		{"loss", []string{"--loss", "0.9"}, "[0, 0.5)"},
		{"positional", []string{"extra"}, "takes no arguments"},
		{"switch addr", []string{"--switch-addr", "::1"}, "IPv4 address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := run(t, append([]string{"bench"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
		})
	}
}
