package join

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// TestOpenNICErrors: a bad kind or address fails naming the fix.
func TestOpenNICErrors(t *testing.T) {
	if _, err := OpenNIC(NICConfig{Kind: "dpdk", Addr: netip.MustParseAddr("127.0.0.2")}); err == nil || !strings.Contains(err.Error(), `"soft"`) {
		t.Fatalf("unknown kind: %v", err)
	}
	if _, err := OpenNIC(NICConfig{Kind: NICSoft}); err == nil || !strings.Contains(err.Error(), "own IP address") {
		t.Fatalf("no address: %v", err)
	}
}

// TestRunArgs: Run refuses nonsense before touching the session.
func TestRunArgs(t *testing.T) {
	var s *aggregation.Session
	for _, c := range []RunConfig{{Rank: 0, Workers: 1, Elements: 1, DType: wire.Float32, Iters: 0}, {Rank: 1, Workers: 1, Elements: 1, Iters: 1}} {
		if _, err := Run(t.Context(), s, c); err == nil {
			t.Fatalf("%+v: no error", c)
		}
	}
}
