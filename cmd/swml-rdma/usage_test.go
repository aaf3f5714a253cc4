package main

import (
	"testing"
)

// TestUsageErrorTexts pins every form of the flag package's and
// urfave/cli's errors that usageError rewrites: the whole line, so that a
// dependency that changes its wording fails here instead of printing a
// half-rewritten message.
func TestUsageErrorTexts(t *testing.T) {
	for _, c := range []struct {
		env  [2]string
		args []string
		want string
	}{
		{args: []string{"bench", "--iters", "abc"}, want: "invalid value \"abc\" for --iters: parse error; `swml-rdma bench --help` lists the flags"},
		{args: []string{"bench", "--iterations", "3"}, want: "flag provided but not defined: --iterations; `swml-rdma bench --help` lists the flags"},
		{args: []string{"write-bw", "--mtu"}, want: "flag needs an argument: --mtu; `swml-rdma write-bw --help` lists the flags"},
		{args: []string{"switch", "--controller", "127.0.0.1:50099"}, want: "flag provided but not defined: --controller (did you mean --controller-addr?); `swml-rdma switch --help` lists the flags"},
		{args: []string{"worker", "--controller-addr", "127.0.0.1:50099"}, want: "flag provided but not defined: --controller-addr (did you mean --controller?); `swml-rdma worker --help` lists the flags"},
		{args: []string{"--verbose"}, want: "flag provided but not defined: --verbose; `swml-rdma --help` lists the flags"},
		{env: [2]string{"SWML_WARMUP", "abc"}, args: []string{"bench"},
			want: "could not parse \"abc\" as int value from environment variable \"SWML_WARMUP\" for --warmup; `swml-rdma bench --help` lists the flags"},
	} {
		t.Run(c.want, func(t *testing.T) {
			if c.env[0] != "" {
				t.Setenv(c.env[0], c.env[1])
			}
			_, _, err := run(t, c.args...)
			if err == nil || err.Error() != c.want || exitCode(err) != exitUsage {
				t.Fatalf("swml-rdma %v: %v (exit %d)\nwant %s", c.args, err, exitCode(err), c.want)
			}
		})
	}
}
