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
	if strings.Join(listed, " ") == "" || len(listed) != len(Names()) {
		t.Fatalf("harness lists %v, registry has %v", listed, Names())
	}
	for _, n := range listed {
		if _, ok := Lookup(n); !ok {
			t.Errorf("harness lists %q, which is not registered", n)
		}
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
