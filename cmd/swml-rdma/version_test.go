package main

import "testing"

// TestVersionFlag checks that --version (and -v) print the version that
// `make build` stamps with -ldflags "-X main.version=…" (scripts/test.sh
// checks the stamped binary itself).
func TestVersionFlag(t *testing.T) {
	defer func(v string) { version = v }(version)
	version = "v1.2.3-4-gabcdef0-dirty"
	for _, flag := range []string{"--version", "-v"} {
		t.Run(flag, func(t *testing.T) {
			out, _, err := run(t, flag)
			if err != nil {
				t.Fatal(err)
			}
			if want := "swml-rdma version v1.2.3-4-gabcdef0-dirty\n"; out != want {
				t.Fatalf("%s printed %q, want %q", flag, out, want)
			}
		})
	}
}
