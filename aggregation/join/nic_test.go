package join

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestOpenNICErrors: a bad kind or address fails with its sentinel and a
// short message.
func TestOpenNICErrors(t *testing.T) {
	_, err := OpenNIC(NICConfig{Kind: "dpdk", Addr: netip.MustParseAddr("127.0.0.2")})
	if !errors.Is(err, ErrNICKind) {
		t.Fatalf("unknown kind: %v", err)
	}
	_, err = OpenNIC(NICConfig{Kind: NICSoft})
	if !errors.Is(err, ErrNICAddr) {
		t.Fatalf("no address: %v", err)
	}
	if len(err.Error()) > 100 || strings.Contains(err.Error(), "\n") {
		t.Errorf("error too long or on many lines: %q", err)
	}
}

// TestWaitForControllerUnreachable: a port nobody listens on fails with
// ErrControllerUnreachable once the timeout passes.
func TestWaitForControllerUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback: %v", err)
	}
	addr := lis.Addr().String()
	lis.Close()
	err = WaitForController(context.Background(), addr, 300*time.Millisecond, nil)
	if !errors.Is(err, ErrControllerUnreachable) {
		t.Fatalf("got %v, want ErrControllerUnreachable", err)
	}
}

func TestDefaultSoftAddr(t *testing.T) {
	for _, c := range []struct {
		rank int
		want string
	}{{0, "127.0.0.2"}, {252, "127.0.0.254"}, {253, ""}, {-1, ""}} {
		a, err := DefaultSoftAddr(c.rank)
		switch {
		case c.want == "" && !errors.Is(err, ErrNoDefaultAddr):
			t.Errorf("rank %d: got %v, %v; want ErrNoDefaultAddr", c.rank, a, err)
		case c.want != "" && (err != nil || a.String() != c.want):
			t.Errorf("rank %d: got %v, %v; want %s", c.rank, a, err, c.want)
		}
	}
}

func TestJobSessions(t *testing.T) {
	f, i, err := JobSessions(7)
	if err != nil || f != 7 || i != 7|1<<31 {
		t.Fatalf("JobSessions(7) = %#x, %#x, %v", f, i, err)
	}
	if w, err := JobSession16(7); err != nil || w != 7|1<<30 {
		t.Fatalf("JobSession16(7) = %#x, %v", w, err)
	}
	for _, id := range []int64{-1, MaxJobSessionID + 1} {
		if _, _, err := JobSessions(id); !errors.Is(err, ErrSessionID) {
			t.Errorf("JobSessions(%d): %v, want ErrSessionID", id, err)
		}
		if _, err := JobSession16(id); !errors.Is(err, ErrSessionID) {
			t.Errorf("JobSession16(%d): %v, want ErrSessionID", id, err)
		}
	}
}
