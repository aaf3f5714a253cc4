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
	testutil.WaitFor(t, "the network's counters", func() bool { return ok(n.Stats()) })
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

// TestCQNotification: the fake CQ's completion channel follows
// libibverbs: an event only for a completion after RequestNotify, one per
// arming; verbs.Await blocks on it and returns the completion, or 0 when
// woken.
func TestCQNotification(t *testing.T) {
	n := verbstest.NewNetwork()
	defer n.Close()
	a := newEnd(t, n, netip.MustParseAddr("10.0.0.1"))
	b := newEnd(t, n, netip.MustParseAddr("10.0.0.2"))
	connect(t, a, b)
	write := func(id uint64) {
		t.Helper()
		if _, err := b.qp.PostRecv([]verbs.RecvWR{{ID: id}}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.qp.PostSend([]verbs.SendWR{{ID: id, Opcode: verbs.WRRDMAWriteWithImm, Local: verbs.SGE{Addr: 0, Length: 8, LKey: a.mr.LKey()}, RKey: b.mr.RKey()}}); err != nil {
			t.Fatal(err)
		}
	}
	event := func() bool {
		select {
		case <-b.cq.Notifications():
			return true
		default:
			return false
		}
	}
	wcs := make([]verbs.Completion, 4)
	write(1)
	if k, err := verbs.Await(b.cq, wcs, nil); k != 1 || err != nil || wcs[0].WRID != 1 {
		t.Fatalf("Await = %d, %v", k, err)
	}
	if event() {
		t.Fatal("an event for a completion that came before the CQ was armed")
	}
	if err := b.cq.RequestNotify(); err != nil {
		t.Fatal(err)
	}
	write(2)
	select {
	case <-b.cq.Notifications():
	case <-time.After(10 * time.Second): // a hang bound: delivery is asynchronous
		t.Fatal("no event for a completion of an armed CQ")
	}
	write(3)
	got := 0
	for deadline := time.Now().Add(10 * time.Second); got < 2 && time.Now().Before(deadline); {
		k, _ := b.cq.Poll(wcs[got:])
		got += k
	}
	if got != 2 || event() {
		t.Fatalf("%d completions polled (want 2), or two events for one arming", got)
	}
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	if k, err := verbs.Await(b.cq, wcs, wake); k != 0 || err != nil {
		t.Fatalf("woken Await = %d, %v; want 0, nil", k, err)
	}
}
