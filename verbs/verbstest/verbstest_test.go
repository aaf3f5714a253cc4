package verbstest_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/internal/testutil"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/verbstest"
)

type end struct {
	dev verbs.Device
	mr  verbs.MR
	cq  verbs.CQ
	qp  verbs.QP
}

func newEnd(t *testing.T, n *verbstest.Network, addr netip.Addr) *end {
	t.Helper()
	dev, err := n.NewDevice(addr)
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := dev.AllocPD()
	mr, err := pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	cq, _ := dev.CreateCQ(16)
	qp, err := pd.CreateUCQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	return &end{dev, mr, cq, qp}
}

func connect(t *testing.T, a, b *end) {
	t.Helper()
	for _, p := range [][2]*end{{a, b}, {b, a}} {
		err := verbs.Connect(p[0].qp, verbs.AccessRemoteWrite, verbs.RTRAttr{RemoteQPN: p[1].qp.QPN(), RemoteAddr: p[1].dev.Addr(), MTU: 1024}, 0)
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestWriteWithImm(t *testing.T) {
	n := verbstest.NewNetwork()
	defer n.Close()
	a := newEnd(t, n, netip.MustParseAddr("10.0.0.1"))
	b := newEnd(t, n, netip.MustParseAddr("10.0.0.2"))
	connect(t, a, b)
	copy(a.mr.Bytes()[100:], "hello")
	if _, err := b.qp.PostRecv([]verbs.RecvWR{{ID: 9}}); err != nil {
		t.Fatal(err)
	}
	wr := verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWriteWithImm, Local: verbs.SGE{Addr: 100, Length: 5, LKey: a.mr.LKey()},
		RemoteAddr: 2000, RKey: b.mr.RKey(), Imm: 0xdeadbeef, Signaled: true}
	if _, err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.Completion, 4)
	if k, err := a.cq.Wait(context.Background(), wcs); err != nil || k != 1 || wcs[0].Opcode != verbs.WCRDMAWrite {
		t.Fatalf("send completion: %d %v %+v", k, err, wcs[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	k, err := b.cq.Wait(ctx, wcs)
	if err != nil || k != 1 {
		t.Fatal(k, err)
	}
	if c := wcs[0]; c.WRID != 9 || c.Opcode != verbs.WCRecvRDMAWithImm || !c.HasImm || c.Imm != 0xdeadbeef || c.ByteLen != 5 {
		t.Fatalf("recv completion %+v", c)
	}
	if !bytes.Equal(b.mr.Bytes()[2000:2005], []byte("hello")) {
		t.Fatal("payload not written")
	}

	// No receive posted: dropped, counted as rejected. A bad rkey too.
	a.qp.PostSend([]verbs.SendWR{wr})
	wr.RKey = 12345
	a.qp.PostSend([]verbs.SendWR{wr})
	waitStats(t, n, func(s verbstest.Stats) bool { return s.Rejected == 2 })
	// Loss.
	n.SetDrop(func(*verbstest.Message) bool { return true })
	a.qp.PostSend([]verbs.SendWR{wr})
	waitStats(t, n, func(s verbstest.Stats) bool { return s.Dropped == 1 })
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := b.cq.Wait(ctx, wcs); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unexpected completion: %v", err)
	}
}

func waitStats(t *testing.T, n *verbstest.Network, ok func(verbstest.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(testutil.Scale(5 * time.Second)) // bounds a hang
	for !ok(n.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", n.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestQPStateChecks(t *testing.T) {
	n := verbstest.NewNetwork()
	defer n.Close()
	a := newEnd(t, n, netip.MustParseAddr("10.0.0.1"))
	if _, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite}}); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("send in RESET: %v", err)
	}
	if err := a.qp.ReadyToSend(0); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("RESET → RTS: %v", err)
	}
	if _, err := n.NewDevice(netip.MustParseAddr("10.0.0.1")); err == nil {
		t.Fatal("duplicate address accepted")
	}
}
