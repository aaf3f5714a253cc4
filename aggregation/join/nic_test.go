package join

import (
	"net/netip"
	"strings"
	"testing"
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
