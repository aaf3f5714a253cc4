package udp

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/bpf"

	"github.com/swml-rdma/swml-rdma/internal/testutil"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// TestListenGroup: the members share one address and port, a program that
// returns 1 sends every datagram to member 1, and the address is taken for
// plain endpoints and other groups until every member is closed.
// Addresses: 127.10.9.x.
func TestListenGroup(t *testing.T) {
	to1, err := bpf.Assemble([]bpf.Instruction{bpf.RetConstant{Val: 1}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Addr: netip.MustParseAddr("127.10.9.1"), BatchSize: 8}
	group, err := ListenGroup(cfg, 3, to1)
	if errors.Is(err, verbs.ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range group {
		if c.LocalAddr() != group[0].LocalAddr() {
			t.Fatalf("members at %v and %v", group[0].LocalAddr(), c.LocalAddr())
		}
	}
	if _, err := Listen(cfg); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("plain endpoint on a group's address: %v, want EADDRINUSE", err)
	}
	if _, err := ListenGroup(cfg, 2, to1); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("second group on a group's address: %v, want EADDRINUSE", err)
	}
	if err := group[0].SetSteering(nil); err == nil {
		t.Error("an empty steering program was accepted")
	}

	src := listen(t, "127.10.9.2", Config{BatchSize: 8})
	out := make([]Msg, 5)
	for i := range out {
		out[i] = Msg{Buf: make([]byte, 32), N: 32, Addr: group[0].LocalAddr()}
	}
	if _, err := src.WriteBatch(out); err != nil {
		t.Fatal(err)
	}
	in := make([]Msg, 8)
	for i := range in {
		in[i] = Msg{Buf: make([]byte, 64)}
	}
	// Datagrams that went to another member would leave member 1 waiting:
	// closing it ends the wait.
	stop := time.AfterFunc(testutil.Scale(5*time.Second), func() { group[1].Close() })
	defer stop.Stop()
	for got := 0; got < len(out); {
		n, err := group[1].ReadBatch(in)
		if err != nil {
			t.Fatalf("member 1: %d of %d datagrams, then %v", got, len(out), err)
		}
		got += n
	}
	for _, c := range group {
		c.Close()
	}
	c, err := Listen(cfg)
	if err != nil {
		t.Fatalf("address after the group closed: %v", err)
	}
	c.Close()
}
