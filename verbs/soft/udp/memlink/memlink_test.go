package memlink

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

var (
	addrA = netip.MustParseAddrPort("10.0.0.1:4791")
	addrB = netip.MustParseAddrPort("10.0.0.2:4791")
)

func newNet(t *testing.T, cfg Config) *Network {
	t.Helper()
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func listen(t *testing.T, n *Network, a netip.AddrPort) *Endpoint {
	t.Helper()
	e, err := n.Listen(a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// packets returns k datagrams of size bytes to dst, datagram i filled with
// byte i.
func packets(k, size int, dst netip.AddrPort) []udp.Msg {
	msgs := make([]udp.Msg, k)
	for i := range msgs {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(i)
		}
		msgs[i] = udp.Msg{Buf: b, N: size, Addr: dst}
	}
	return msgs
}

func recvBufs(k int) []udp.Msg {
	msgs := make([]udp.Msg, k)
	for i := range msgs {
		msgs[i] = udp.Msg{Buf: make([]byte, 2048), Off: 16}
	}
	return msgs
}

// ids returns the first byte of each received datagram.
func ids(msgs []udp.Msg) []int {
	out := make([]int, len(msgs))
	for i := range msgs {
		out[i] = int(msgs[i].Bytes()[0])
	}
	return out
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRateAndQueue: on a manual clock a 1 byte/µs link with a queue of two
// sends five 1000-byte datagrams of one batch as: one on the wire, two
// waiting, two dropped at the tail; they arrive 1, 2 and 3 ms (+ 500 µs of
// delay) after the send, and a datagram sent once the queue has drained is
// served at once. The three carried spent 3 ms on the wire and 3 ms
// waiting behind it.
func TestRateAndQueue(t *testing.T) {
	clk := &ManualClock{}
	n := newNet(t, Config{Clock: clk})
	a, b := listen(t, n, addrA), listen(t, n, addrB)
	if err := n.SetLink(addrA.Addr(), addrB.Addr(), LinkConfig{Rate: 8e6, Queue: 2, Delay: 500 * time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	if k, err := a.WriteBatch(packets(5, 1000, addrB)); k != 5 || err != nil {
		t.Fatalf("WriteBatch: %d, %v", k, err)
	}
	st := n.LinkStats(addrA.Addr(), addrB.Addr())
	if st.Packets != 5 || st.QueueDrops != 2 || st.Delivered != 3 || st.MaxQueue != 2 {
		t.Fatalf("link stats %+v, want 5 packets, 2 queue drops, 3 delivered, queue peak 2", st)
	}
	// 1 ms on the wire each; the second waited 1 ms behind it, the third 2.
	if st.Busy != 3*time.Millisecond || st.Wait != 3*time.Millisecond {
		t.Fatalf("link stats %+v, want 3 ms busy and 3 ms waited", st)
	}
	in := recvBufs(8)
	for _, step := range []struct {
		at   time.Duration
		want []int
	}{
		{1500 * time.Microsecond, []int{0}},
		{3500 * time.Microsecond, []int{1, 2}},
	} {
		clk.Advance(step.at - clk.Now())
		k, err := b.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(in[:k]); !equal(got, step.want) {
			t.Fatalf("at %v: got datagrams %v, want %v", step.at, got, step.want)
		}
		if in[0].Addr != addrA || in[0].N != 1000 {
			t.Fatalf("at %v: from %v, %d bytes", step.at, in[0].Addr, in[0].N)
		}
	}
	if b.rx.len() != 0 {
		t.Fatalf("%d datagrams left", b.rx.len())
	}
	// The queue has drained: the next one waits for nothing but its own
	// 1 ms on the wire and the delay.
	a.WriteBatch(packets(1, 1000, addrB))
	if due := b.rx.headDue(); due != clk.Now()+1500*time.Microsecond {
		t.Fatalf("due at %v, want %v", due, clk.Now()+1500*time.Microsecond)
	}
}

// TestLossSeeded: loss draws are a function of the seed and the send order.
func TestLossSeeded(t *testing.T) {
	run := func(seed uint64) []int {
		n := newNet(t, Config{Seed: seed, Link: LinkConfig{Loss: 0.3}})
		a, b := listen(t, n, addrA), listen(t, n, addrB)
		a.WriteBatch(packets(50, 100, addrB))
		in := recvBufs(64)
		k, err := b.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		if st := n.LinkStats(addrA.Addr(), addrB.Addr()); st.Lost+uint64(k) != 50 || st.Lost == 0 {
			t.Fatalf("link stats %+v with %d received", st, k)
		}
		return ids(in[:k])
	}
	x, y, z := run(1), run(1), run(2)
	if !equal(x, y) {
		t.Fatalf("one seed, two patterns: %v vs %v", x, y)
	}
	if equal(x, z) {
		t.Fatalf("seeds 1 and 2 lose the same datagrams %v", x)
	}
}

// TestDropAndReorder: the Drop hook removes exactly the datagrams it names;
// Reorder holds datagrams back so that later ones overtake them.
func TestDropAndReorder(t *testing.T) {
	clk := &ManualClock{}
	n := newNet(t, Config{Clock: clk, Seed: 3})
	a, b := listen(t, n, addrA), listen(t, n, addrB)
	n.SetLink(addrA.Addr(), addrB.Addr(), LinkConfig{
		Drop:    func(_, _ netip.AddrPort, p []byte) bool { return p[0]%4 == 3 },
		Reorder: 0.5, ReorderDelay: time.Millisecond,
	})
	a.WriteBatch(packets(12, 100, addrB))
	clk.Advance(time.Millisecond)
	in := recvBufs(16)
	k, err := b.ReadBatch(in)
	if err != nil {
		t.Fatal(err)
	}
	got := ids(in[:k])
	seen := map[int]bool{}
	ordered := true
	for i, id := range got {
		if id%4 == 3 {
			t.Fatalf("datagram %d passed the Drop hook", id)
		}
		seen[id] = true
		ordered = ordered && (i == 0 || got[i-1] < id)
	}
	if len(seen) != 9 || ordered {
		t.Fatalf("got %v: want the 9 datagrams the hook keeps, some overtaken", got)
	}
}

// TestHold: datagrams Hold keeps back reach the receiver right after the
// one it releases them with, in the order held, from their own sender,
// and nothing is lost or duplicated.
func TestHold(t *testing.T) {
	addrC := netip.MustParseAddrPort("10.0.0.3:4791")
	clk := &ManualClock{}
	n := newNet(t, Config{Clock: clk})
	a, b, c := listen(t, n, addrA), listen(t, n, addrB), listen(t, n, addrC)
	hold := func(_, _ netip.AddrPort, p []byte) HoldVerdict {
		switch p[0] {
		case 1, 2:
			return HoldBack
		case 4:
			return Release
		}
		return Pass
	}
	n.SetLink(addrA.Addr(), addrB.Addr(), LinkConfig{Hold: hold})
	n.SetLink(addrC.Addr(), addrB.Addr(), LinkConfig{Hold: hold})
	a.WriteBatch(packets(4, 100, addrB)) // 0, 1 and 2 held, 3
	from := packets(6, 100, addrB)
	c.WriteBatch(from[4:]) // 4 releases, 5
	clk.Advance(time.Millisecond)
	in := recvBufs(16)
	k, err := b.ReadBatch(in)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(in[:k]), []int{0, 3, 4, 1, 2, 5}; !equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	for i, m := range in[:k] {
		if want := map[bool]netip.AddrPort{true: addrC, false: addrA}[m.Bytes()[0] >= 4]; m.Addr != want {
			t.Errorf("datagram %d from %v, want %v", ids(in[i : i+1])[0], m.Addr, want)
		}
	}
	if st := n.LinkStats(addrA.Addr(), addrB.Addr()); st.Held != 2 || st.Delivered != 4 {
		t.Fatalf("link stats %+v: want 2 held, 4 delivered", st)
	}
}

// TestRealClock: with real time a delayed datagram arrives after its
// delay, and Close wakes a blocked reader.
func TestRealClock(t *testing.T) {
	n := newNet(t, Config{Link: LinkConfig{Delay: 20 * time.Millisecond}})
	a, b := listen(t, n, addrA), listen(t, n, addrB)
	start := time.Now()
	a.WriteBatch(packets(2, 100, addrB))
	in := recvBufs(4)
	got := 0
	for got < 2 {
		k, err := b.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		got += k
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("delivered after %v, before the 20 ms delay", d)
	}
	errc := make(chan error)
	go func() {
		_, err := b.ReadBatch(in)
		errc <- err
	}()
	b.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadBatch after Close: %v", err)
	}
	if k, err := a.WriteBatch(packets(1, 100, addrB)); k != 1 || err != nil {
		t.Fatalf("WriteBatch to a closed endpoint: %d, %v (a network loses it)", k, err)
	}
	if st := n.LinkStats(addrA.Addr(), addrB.Addr()); st.NoEndpoint != 1 {
		t.Fatalf("link stats %+v, want 1 to no endpoint", st)
	}
}

// TestPreciseTimers: with Config.PreciseTimers, on real time, a reader
// gets every datagram of a rate-limited link in order and none before its
// time on the wire (1 ms each at 10 Mbit/s: the first due within
// preciseWait, the last beyond it), and a reader waiting for one returns
// net.ErrClosed when its endpoint closes.
func TestPreciseTimers(t *testing.T) {
	n := newNet(t, Config{PreciseTimers: true, Link: LinkConfig{Rate: 10e6}})
	a, b := listen(t, n, addrA), listen(t, n, addrB)
	const k, size = 5, 1250 // 1 ms each on the wire
	start := time.Now()
	a.WriteBatch(packets(k, size, addrB))
	in := recvBufs(k)
	var got []int
	for len(got) < k {
		m, err := b.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ids(in[:m])...)
		if d, due := time.Since(start), time.Duration(len(got))*time.Millisecond; d < due {
			t.Fatalf("datagram %d read %v after the send, before its wire time %v", len(got)-1, d, due)
		}
	}
	if !equal(got, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("read %v, want 0 … 4 in order", got)
	}
	a.WriteBatch(packets(1, size, addrB))
	errc := make(chan error)
	go func() {
		_, err := b.ReadBatch(in)
		errc <- err
	}()
	b.Close()
	if err := <-errc; err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadBatch waiting for a datagram when its endpoint closed: %v", err)
	}
}

// TestLimits: addresses, sizes, full receive queues.
func TestLimits(t *testing.T) {
	n := newNet(t, Config{RecvQueue: 4, MaxDatagram: 1000})
	a, b := listen(t, n, addrA), listen(t, n, addrB)
	if _, err := n.Listen(addrA); !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("second Listen on %v: %v", addrA, err)
	}
	if _, err := n.Listen(netip.AddrPort{}); !errors.Is(err, ErrBadAddress) {
		t.Fatalf("Listen on the zero address: %v", err)
	}
	if _, err := New(Config{Link: LinkConfig{Loss: 1}}); err == nil {
		t.Fatal("loss 1 accepted")
	}
	a.WriteBatch(packets(6, 100, addrB))
	a.WriteBatch(packets(1, 1001, addrB))
	st := n.LinkStats(addrA.Addr(), addrB.Addr())
	if st.Overflow != 2 || st.TooBig != 1 || st.Delivered != 4 {
		t.Fatalf("link stats %+v, want 2 overflowing, 1 too big, 4 delivered", st)
	}
	// As udp.Conn with GRO: a datagram that does not fit the next Msg is
	// counted and dropped.
	small := []udp.Msg{{Buf: make([]byte, 200)}, {Buf: make([]byte, 50)}}
	k, err := b.ReadBatch(small)
	if err != nil || k != 1 || b.Stats().RxTruncated != 3 {
		t.Fatalf("ReadBatch into a short buffer: %d, %v, %+v", k, err, b.Stats())
	}
	if _, err := a.WriteBatch([]udp.Msg{{Buf: make([]byte, 10), Off: 5, N: 6, Addr: addrB}}); err == nil {
		t.Fatal("WriteBatch past the buffer accepted")
	}
}

// TestAllocs: a batch through a link, rate-limited, costs no allocation.
func TestAllocs(t *testing.T) {
	clk := &ManualClock{}
	n := newNet(t, Config{Clock: clk, Link: LinkConfig{Rate: 1e9, Queue: 64, Delay: time.Microsecond}})
	a, b := listen(t, n, addrA), listen(t, n, addrB)
	out := packets(16, 1024, addrB)
	in := recvBufs(16)
	a.WriteBatch(out) // the link is created on first use
	clk.Advance(time.Second)
	b.ReadBatch(in)
	allocs := testing.AllocsPerRun(100, func() {
		a.WriteBatch(out)
		clk.Advance(time.Millisecond)
		if k, _ := b.ReadBatch(in); k != 16 {
			t.Fatalf("%d datagrams", k)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per batch, want 0", allocs)
	}
}

// TestSourceOrder: datagrams due at the same instant are read in send
// order, or with SourceOrder by source address (each source's in its send
// order) whichever source sent first.
func TestSourceOrder(t *testing.T) {
	addrC := netip.MustParseAddrPort("10.0.0.3:4791")
	for _, tc := range []struct {
		bySource bool
		want     []int
	}{{false, []int{1, 0, 1, 0}}, {true, []int{0, 0, 1, 1}}} {
		clk := &ManualClock{}
		n := newNet(t, Config{Clock: clk, SourceOrder: tc.bySource, Link: LinkConfig{Delay: time.Millisecond}})
		a, b, c := listen(t, n, addrA), listen(t, n, addrB), listen(t, n, addrC)
		// B sends before A, each twice, interleaved: all due at 1 ms.
		for range 2 {
			for _, e := range []*Endpoint{b, a} {
				if _, err := e.WriteBatch(packets(1, 100, addrC)); err != nil {
					t.Fatal(err)
				}
			}
		}
		clk.Advance(time.Millisecond)
		in := recvBufs(8)
		k, err := c.ReadBatch(in)
		if err != nil || k != 4 {
			t.Fatalf("ReadBatch: %d, %v", k, err)
		}
		var got []int
		for _, m := range in[:k] {
			got = append(got, int(m.Addr.Addr().As4()[3]-1)) // 0: A, 1: B
		}
		if !equal(got, tc.want) {
			t.Errorf("SourceOrder %v: sources %v, want %v (0: A, 1: B)", tc.bySource, got, tc.want)
		}
	}
}

// TestRateFraction: a link whose packets take a fraction of a nanosecond
// more than whole ones on the wire keeps its rate over many packets: 1000
// datagrams of 1106 bytes at 100 Gbit/s take 88.48 µs, not 88 µs.
func TestRateFraction(t *testing.T) {
	clk := &ManualClock{}
	n := newNet(t, Config{Clock: clk, RecvQueue: 2048, Link: LinkConfig{Rate: 100e9}})
	a, b := listen(t, n, addrA), listen(t, n, addrB)
	if _, err := a.WriteBatch(packets(1000, 1106, addrB)); err != nil {
		t.Fatal(err)
	}
	var last time.Duration
	for b.rx.len() > 0 {
		last = b.rx.headDue()
		b.rx.pop()
	}
	if want := 88480 * time.Nanosecond; last < want-time.Nanosecond || last > want {
		t.Fatalf("last datagram due at %v, want %v", last, want)
	}
}
