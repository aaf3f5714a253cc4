package interop

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/swml-rdma/swml-rdma/verbs"
)

// The harness's "all" list and this registry must name the same scenarios.
func TestHarnessListsEveryScenario(t *testing.T) {
	b, err := os.ReadFile("../../testbed/soft-roce/qemu/harness.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)ALL_SCENARIOS=\((.*?)\)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no ALL_SCENARIOS in harness.sh")
	}
	listed := strings.Fields(string(m[1]))
	// The all-reduce scenarios are processes (switch daemon, workers)
	// that testbed/soft-roce/qemu/allreduce.sh runs in the guest; the
	// others are this package's registry, run by /bin/interop.
	sh, err := os.ReadFile("../../testbed/soft-roce/qemu/allreduce.sh")
	if err != nil {
		t.Fatal(err)
	}
	shell := map[string]bool{}
	for _, c := range regexp.MustCompile(`(?m)^([a-z0-9-]+)\)$`).FindAllSubmatch(sh, -1) {
		shell[string(c[1])] = true
	}
	if len(shell) == 0 {
		t.Fatal("no scenarios in allreduce.sh")
	}
	// A few scenarios are guest-init.sh's own (rdmadev: a test binary).
	gi, err := os.ReadFile("../../testbed/soft-roce/qemu/guest-init.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range regexp.MustCompile(`(?m)^\t([a-z0-9-]+)\) `).FindAllSubmatch(gi, -1) {
		shell[string(c[1])] = true
	}
	seen := map[string]bool{}
	for _, n := range listed {
		seen[n] = true
		if _, ok := Lookup(n); !ok && !shell[n] {
			t.Errorf("harness lists %q, which neither the registry nor allreduce.sh has", n)
		}
	}
	for _, n := range Names() {
		if !seen[n] {
			t.Errorf("registered scenario %q is not in the harness's ALL_SCENARIOS", n)
		}
	}
	if len(listed) == len(Names()) {
		t.Errorf("ALL_SCENARIOS runs no all-reduce scenario of allreduce.sh: %v", listed)
	}
}

func TestPackets(t *testing.T) {
	for _, tc := range []struct {
		n    int
		mtu  verbs.MTU
		want int
	}{{0, 256, 1}, {1, 256, 1}, {256, 256, 1}, {257, 256, 2}, {4096*5 - 4, 4096, 5}} {
		if got := packets(tc.n, tc.mtu); got != tc.want {
			t.Errorf("packets(%d, %d) = %d, want %d", tc.n, tc.mtu, got, tc.want)
		}
	}
}

func TestPayloadCheck(t *testing.T) {
	sizes := []int{10, 3}
	dst := make([]byte, 32)
	fill(dst[7:20], 5)
	if err := checkPayload(dst, sizes, 5); err != nil {
		t.Fatal(err)
	}
	dst[20] = 1
	if err := checkPayload(dst, sizes, 5); err == nil {
		t.Fatal("spill not detected")
	}
	dst[20], dst[9] = 0, dst[9]^1
	if err := checkPayload(dst, sizes, 5); err == nil {
		t.Fatal("corruption not detected")
	}
}
