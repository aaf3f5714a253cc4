package soft

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/swml-rdma/swml-rdma/internal/testutil"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// stagedPair is two NICs with n connected QP pairs sharing one MR and one
// CQ per side.
type stagedPair struct {
	a, b       *Device
	mrA, mrB   verbs.MR
	cqA, cqB   verbs.CQ
	qpsA, qpsB []verbs.QP
}

func newStagedPair(t *testing.T, addrA, addrB string, n, mrSize int, mtu verbs.MTU) *stagedPair {
	t.Helper()
	p := &stagedPair{}
	side := func(addr string) (*Device, verbs.MR, verbs.CQ, []verbs.QP) {
		d, err := Open(Config{Addr: netip.MustParseAddr(addr)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		pd, _ := d.AllocPD()
		mr, err := pd.AllocMR(mrSize, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		cq, _ := d.CreateCQ(1024)
		qps := make([]verbs.QP, n)
		for i := range qps {
			if qps[i], err = pd.CreateUCQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxRecvWR: 64}); err != nil {
				t.Fatal(err)
			}
		}
		return d, mr, cq, qps
	}
	p.a, p.mrA, p.cqA, p.qpsA = side(addrA)
	p.b, p.mrB, p.cqB, p.qpsB = side(addrB)
	access := verbs.AccessRemoteWrite | verbs.AccessLocalWrite
	for i := range n {
		if err := verbs.Connect(p.qpsA[i], access, verbs.RTRAttr{RemoteQPN: p.qpsB[i].QPN(), RemoteAddr: p.b.Addr(), RecvPSN: uint32(1000 * i), MTU: mtu}, uint32(1000*i)); err != nil {
			t.Fatal(err)
		}
		if err := verbs.Connect(p.qpsB[i], access, verbs.RTRAttr{RemoteQPN: p.qpsA[i].QPN(), RemoteAddr: p.a.Addr(), RecvPSN: uint32(1000 * i), MTU: mtu}, uint32(1000*i)); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// TestPostSendStagedDoorbell posts a message on each of four QPs without
// the doorbell, then rings it: the four messages leave in one sendmmsg (as
// three GSO datagrams where GSO is on: every FIRST, every MIDDLE, every
// LAST), and the send completions come only then.
func TestPostSendStagedDoorbell(t *testing.T) {
	const n, msg = 4, 16 << 10
	p := newStagedPair(t, "127.11.31.1", "127.11.31.2", n, 2*n*msg, verbs.MTU(1024))
	fill(p.mrA.Bytes()[:n*msg], 5)
	for i := range n {
		if _, err := p.qpsB[i].PostRecv([]verbs.RecvWR{{ID: uint64(100 + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	before := p.a.Stats().Socket
	for i := range n {
		ss := p.qpsA[i].(*QP)
		wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWriteWithImm, Signaled: true, Imm: uint32(i),
			Local: verbs.SGE{Addr: uint64(i * msg), Length: msg, LKey: p.mrA.LKey()}, RemoteAddr: uint64(n*msg + i*msg), RKey: p.mrB.RKey()}
		if k, err := ss.PostSendStaged([]verbs.SendWR{wr}); k != 1 || err != nil {
			t.Fatalf("PostSendStaged on QP %d: %d, %v", i, k, err)
		}
	}
	if st := p.a.Stats().Socket; st.TxCalls != before.TxCalls || st.TxPackets != before.TxPackets {
		t.Fatalf("staged packets were sent before the doorbell: %+v", st)
	}
	wcs := make([]verbs.Completion, 8)
	if k, _ := p.cqA.Poll(wcs); k != 0 {
		t.Fatalf("%d send completions before the doorbell", k)
	}
	if err := p.qpsA[0].(*QP).Doorbell(); err != nil {
		t.Fatal(err)
	}
	st := p.a.Stats().Socket
	if calls := st.TxCalls - before.TxCalls; calls != 1 {
		t.Errorf("%d sendmmsg calls for the four messages, want 1", calls)
	}
	pkts := st.TxPackets - before.TxPackets
	if pkts != n*msg/1024 {
		t.Errorf("%d packets sent, want %d", pkts, n*msg/1024)
	}
	if c, ok := p.a.conn.(*udp.Conn); ok && gsoOn(c) {
		if d := st.TxDatagrams - before.TxDatagrams; d != 3 {
			t.Errorf("%d datagrams for the four messages, want 3 (FIRSTs, MIDDLEs, LASTs)", d)
		}
	}
	sends := map[uint64]bool{}
	for len(sends) < n {
		wc := waitOne(t, p.cqA)
		if wc.Opcode != verbs.WCRDMAWrite || wc.Status != verbs.WCSuccess {
			t.Fatalf("unexpected completion %+v", wc)
		}
		sends[wc.WRID] = true
	}
	recvs := map[uint64]bool{}
	for len(recvs) < n {
		wc := waitOne(t, p.cqB)
		if wc.Opcode != verbs.WCRecvRDMAWithImm || wc.ByteLen != msg || uint64(wc.Imm)+100 != wc.WRID {
			t.Fatalf("unexpected completion %+v", wc)
		}
		recvs[wc.WRID] = true
	}
	if !bytes.Equal(p.mrB.Bytes()[n*msg:], p.mrA.Bytes()[:n*msg]) {
		t.Fatal("received data differs from the data sent")
	}
	if s := p.b.Stats(); s.RxSequence != 0 || s.RxBadICRC != 0 || s.RxBadRange != 0 {
		t.Errorf("receiver drops: %+v", s)
	}
}

// TestPostSendRingsTheDoorbell: a plain PostSend sends what other QPs of
// the device staged, and their completions follow.
func TestPostSendRingsTheDoorbell(t *testing.T) {
	const msg = 4096
	p := newStagedPair(t, "127.11.31.3", "127.11.31.4", 2, 4*msg, verbs.MTU(1024))
	fill(p.mrA.Bytes()[:2*msg], 9)
	wr := func(i int) verbs.SendWR {
		return verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Signaled: true,
			Local: verbs.SGE{Addr: uint64(i * msg), Length: msg, LKey: p.mrA.LKey()}, RemoteAddr: uint64(2*msg + i*msg), RKey: p.mrB.RKey()}
	}
	if _, err := p.qpsA[0].(*QP).PostSendStaged([]verbs.SendWR{wr(0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.qpsA[1].PostSend([]verbs.SendWR{wr(1)}); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]bool{}
	for len(got) < 2 {
		got[waitOne(t, p.cqA).WRID] = true
	}
	// UC WRITE without immediate completes nothing at the receiver: wait
	// for its counters.
	testutil.WaitFor(t, "the receiver's two messages", func() bool { return p.b.Stats().RxMessages >= 2 })
	if !bytes.Equal(p.mrB.Bytes()[2*msg:], p.mrA.Bytes()[:2*msg]) {
		t.Fatal("received data differs from the data sent")
	}
}

// TestStagedSendAllocs: staging and sending packets allocates nothing once
// the queue's buffers exist.
func TestStagedSendAllocs(t *testing.T) {
	const n, msg = 4, 16 << 10
	p := newStagedPair(t, "127.11.31.5", "127.11.31.6", n, 2*n*msg, verbs.MTU(1024))
	wrs := make([][]verbs.SendWR, n)
	for i := range wrs {
		wrs[i] = []verbs.SendWR{{ID: uint64(i), Opcode: verbs.WRRDMAWrite,
			Local: verbs.SGE{Addr: uint64(i * msg), Length: msg, LKey: p.mrA.LKey()}, RemoteAddr: uint64(n*msg + i*msg), RKey: p.mrB.RKey()}}
	}
	qps := make([]*QP, n)
	for i := range qps {
		qps[i] = p.qpsA[i].(*QP)
	}
	round := func() {
		for i, q := range qps {
			if _, err := q.PostSendStaged(wrs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := qps[0].Doorbell(); err != nil {
			t.Fatal(err)
		}
	}
	round()
	if a := testing.AllocsPerRun(50, round); a != 0 {
		t.Errorf("%v allocations per round of %d messages (%d packets)", a, n, n*msg/1024)
	}
}

func gsoOn(c *udp.Conn) bool {
	gso, _ := c.Offloads()
	return gso
}
