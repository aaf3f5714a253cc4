package udp

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/internal/testutil"
	"github.com/swml-rdma/swml-rdma/verbs"
)

func listen(t testing.TB, addr string, cfg Config) *Conn {
	t.Helper()
	cfg.Addr = netip.MustParseAddr(addr)
	c, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestBatchRoundTrip(t *testing.T) {
	a := listen(t, "127.10.0.2", Config{BatchSize: 8})
	b := listen(t, "127.10.0.3", Config{BatchSize: 8})
	const n = 20
	out := make([]Msg, n)
	for i := range out {
		out[i] = Msg{Buf: bytes.Repeat([]byte{byte(i)}, 100+i), N: 100 + i, Addr: b.LocalAddr()}
	}
	if sent, err := a.WriteBatch(out); err != nil || sent != n {
		t.Fatalf("WriteBatch = %d, %v", sent, err)
	}
	in := make([]Msg, 8)
	for i := range in {
		in[i].Buf = make([]byte, 2048)
	}
	got := 0
	for got < n {
		k, err := b.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range in[:k] {
			if m.N != 100+got || m.Buf[0] != byte(got) || m.Addr != a.LocalAddr() {
				t.Fatalf("datagram %d: len %d first %d from %v", got, m.N, m.Buf[0], m.Addr)
			}
			got++
		}
	}
	if s := b.Stats(); s.RxPackets != n {
		t.Fatalf("rx stats %+v", s)
	}
	if s := a.Stats(); s.TxPackets != n {
		t.Fatalf("tx stats %+v", s)
	}
}

func TestAddressInUse(t *testing.T) {
	listen(t, "127.10.0.2", Config{})
	_, err := Listen(Config{Addr: netip.MustParseAddr("127.10.0.2")})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("own address")) {
		t.Fatalf("second Listen: %v", err)
	}
}

// TestCloseUnblocksRead: Close ends a read asleep in the poller, and one
// that is polling its socket (Config.BusyPoll), at once.
func TestCloseUnblocksRead(t *testing.T) {
	t.Run("asleep", func(t *testing.T) {
		testCloseUnblocksRead(t, 0, func() { testutil.WaitBlocked(t, 1, "udp.(*Conn).ReadBatch") })
	})
	t.Run("polling", func(t *testing.T) { testCloseUnblocksRead(t, time.Hour, func() { waitPolling(t) }) })
}

func testCloseUnblocksRead(t *testing.T, poll time.Duration, wait func()) {
	c := listen(t, "127.10.0.4", Config{BusyPoll: poll})
	done := make(chan error)
	go func() {
		_, err := c.ReadBatch([]Msg{{Buf: make([]byte, 64)}})
		done <- err
	}()
	wait()
	c.Close()
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close: %v", err)
		}
	case <-time.After(testutil.Scale(5 * time.Second)):
		t.Fatal("ReadBatch still blocked after Close")
	}
}

func TestLossInjection(t *testing.T) {
	a := listen(t, "127.10.0.2", Config{SendLoss: 0.5, Seed: 7})
	b := listen(t, "127.10.0.3", Config{})
	msgs := make([]Msg, 200)
	for i := range msgs {
		msgs[i] = Msg{Buf: []byte{1, 2, 3, 4}, N: 4, Addr: b.LocalAddr()}
	}
	a.WriteBatch(msgs)
	s := a.Stats()
	if s.TxLossDropped == 0 || s.TxLossDropped == 200 || s.TxLossDropped+s.TxPackets != 200 {
		t.Fatalf("loss stats %+v", s)
	}
}

func TestAllocs(t *testing.T) {
	a := listen(t, "127.10.0.2", Config{})
	b := listen(t, "127.10.0.3", Config{})
	out := []Msg{{Buf: make([]byte, 1024), N: 1024, Addr: b.LocalAddr()}}
	in := []Msg{{Buf: make([]byte, 2048)}}
	if n := testing.AllocsPerRun(200, func() {
		a.WriteBatch(out)
		b.ReadBatch(in)
	}); n != 0 {
		t.Fatalf("%v allocations per round trip, want 0", n)
	}
}

func TestCaptureFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := NewCapture(f)
	if err != nil {
		t.Fatal(err)
	}
	a := listen(t, "127.10.0.2", Config{Capture: cp})
	b := listen(t, "127.10.0.3", Config{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		b.ReadBatch([]Msg{{Buf: make([]byte, 64)}})
	}()
	a.WriteBatch([]Msg{{Buf: make([]byte, 40), N: 40, Addr: b.LocalAddr()}})
	wg.Wait()
	if err := cp.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	// 24-byte file header + 16-byte record header + 14 + 20 + 8 + 40.
	if len(data) != 24+16+14+20+8+40 {
		t.Fatalf("pcap is %d bytes", len(data))
	}
}

// listenOffload opens an endpoint with GSO and GRO forced on, skipping the
// test on a kernel without them.
func listenOffload(t testing.TB, addr string, cfg Config) *Conn {
	t.Helper()
	cfg.Offload = OffloadOn
	cfg.Addr = netip.MustParseAddr(addr)
	c, err := Listen(cfg)
	if errors.Is(err, verbs.ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roceSizes are the datagram sizes of a 16-packet UC WRITE WITH IMM message
// with a 1024-byte MTU: FIRST (RETH), 14 × MIDDLE, LAST (ImmDt).
func roceSizes() []int {
	s := []int{1056}
	for range 14 {
		s = append(s, 1040)
	}
	return append(s, 1044)
}

// packet fills a datagram whose bytes identify it: index i, size n.
func packet(i, n int) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(i*7 + k)
	}
	b[0], b[1] = byte(i), byte(i>>8)
	return b
}

// readAll reads exactly want packets from c (bounded by a deadline).
func readAll(t *testing.T, c *Conn, want, bufLen int) []Msg {
	t.Helper()
	var got []Msg
	in := make([]Msg, 5) // fewer than a GRO datagram holds: exercises the carry-over
	for i := range in {
		in[i].Buf = make([]byte, bufLen)
		in[i].Off = 8
	}
	done := make(chan struct{})
	timer := time.AfterFunc(10*time.Second, func() { c.Close(); close(done) })
	defer timer.Stop()
	for len(got) < want {
		k, err := c.ReadBatch(in)
		if err != nil {
			select {
			case <-done:
				t.Fatalf("got %d of %d packets before the deadline", len(got), want)
			default:
			}
			t.Fatal(err)
		}
		for _, m := range in[:k] {
			got = append(got, Msg{Buf: append([]byte(nil), m.Bytes()...), N: m.N, Addr: m.Addr})
		}
	}
	return got
}

func TestGSOGROMixedSizes(t *testing.T) {
	a := listenOffload(t, "127.10.0.2", Config{})
	gro := listenOffload(t, "127.10.0.3", Config{})
	plain := listen(t, "127.10.0.4", Config{Offload: OffloadOff})
	var sizes []int
	for range 3 {
		sizes = append(sizes, roceSizes()...)
	}
	sizes = append(sizes, 1040, 1040, 200, 1040) // a short packet ends a GSO run
	var out []Msg
	var want [][]byte
	for i, n := range sizes {
		p := packet(i, n)
		want = append(want, p)
		// Runs to each receiver, interleaved per message.
		dst := gro.LocalAddr()
		if (i/16)%2 == 1 {
			dst = plain.LocalAddr()
		}
		out = append(out, Msg{Buf: append(make([]byte, 4), p...), Off: 4, N: n, Addr: dst})
	}
	if sent, err := a.WriteBatch(out); err != nil || sent != len(out) {
		t.Fatalf("WriteBatch = %d, %v", sent, err)
	}
	s := a.Stats()
	if s.TxPackets != uint64(len(out)) || s.TxGSODatagrams == 0 || s.TxDatagrams >= s.TxPackets {
		t.Fatalf("sender stats %+v: want %d packets in fewer GSO datagrams", s, len(out))
	}
	var wantGRO, wantPlain [][]byte
	for i, p := range want {
		if out[i].Addr == gro.LocalAddr() {
			wantGRO = append(wantGRO, p)
		} else {
			wantPlain = append(wantPlain, p)
		}
	}
	for _, r := range []struct {
		name string
		c    *Conn
		want [][]byte
	}{{"gro", gro, wantGRO}, {"plain", plain, wantPlain}} {
		got := readAll(t, r.c, len(r.want), 2048)
		for i, m := range got {
			if !bytes.Equal(m.Buf, r.want[i]) || m.Addr != a.LocalAddr() {
				t.Fatalf("%s: packet %d: %d bytes from %v, want %d bytes (first %x)", r.name, i, m.N, m.Addr, len(r.want[i]), r.want[i][:2])
			}
		}
		if st := r.c.Stats(); st.RxPackets != uint64(len(r.want)) {
			t.Fatalf("%s: rx stats %+v, want %d packets", r.name, st, len(r.want))
		}
	}
	if st := gro.Stats(); st.RxGRODatagrams == 0 || st.RxDatagrams >= st.RxPackets {
		t.Fatalf("GRO receiver stats %+v: no datagram held several packets", st)
	}
}

func TestGROSplitsLastShort(t *testing.T) {
	a := listenOffload(t, "127.10.0.2", Config{})
	b := listenOffload(t, "127.10.0.3", Config{})
	sizes := []int{1000, 1000, 1000, 1000, 1000, 300}
	var out []Msg
	for i, n := range sizes {
		out = append(out, Msg{Buf: packet(i, n), N: n, Addr: b.LocalAddr()})
	}
	if _, err := a.WriteBatch(out); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, b, len(sizes), 1100)
	for i, m := range got {
		if !bytes.Equal(m.Buf, packet(i, sizes[i])) {
			t.Fatalf("packet %d: %d bytes, want %d", i, m.N, sizes[i])
		}
	}
	if st := b.Stats(); st.RxDatagrams != 1 || st.RxGRODatagrams != 1 || st.RxPackets != 6 {
		t.Fatalf("rx stats %+v: want one GRO datagram of 6 packets", st)
	}
	if st := a.Stats(); st.TxDatagrams != 1 || st.TxCalls != 1 {
		t.Fatalf("tx stats %+v: want one GSO datagram", st)
	}
}

func TestGROPacketLargerThanBuffer(t *testing.T) {
	a := listenOffload(t, "127.10.0.2", Config{})
	b := listenOffload(t, "127.10.0.3", Config{})
	out := []Msg{
		{Buf: packet(0, 600), N: 600, Addr: b.LocalAddr()},
		{Buf: packet(1, 600), N: 600, Addr: b.LocalAddr()},
		{Buf: packet(2, 100), N: 100, Addr: b.LocalAddr()},
	}
	if _, err := a.WriteBatch(out); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, b, 1, 8+500) // room for 500 bytes: only the short one fits
	if len(got) != 1 || got[0].N != 100 {
		t.Fatalf("got %d packets, first %d bytes", len(got), got[0].N)
	}
	if st := b.Stats(); st.RxTruncated != 2 {
		t.Fatalf("rx stats %+v: want 2 truncated", st)
	}
}

// TestOffloadLossAndCapture: the loss simulators and the pcap capture act
// on packets, not on GSO/GRO datagrams.
func TestOffloadLossAndCapture(t *testing.T) {
	for _, mode := range []Offload{OffloadOff, OffloadOn} {
		t.Run(mode.String(), func(t *testing.T) {
			var txCap, rxCap bytes.Buffer
			tc, _ := NewCapture(&txCap)
			rc, _ := NewCapture(&rxCap)
			cfgA := Config{SendLoss: 0.3, Seed: 3, Capture: tc, Offload: mode}
			cfgB := Config{RecvLoss: 0.3, Seed: 4, Capture: rc, Offload: mode}
			var a, b *Conn
			if mode == OffloadOn {
				a, b = listenOffload(t, "127.10.0.2", cfgA), listenOffload(t, "127.10.0.3", cfgB)
			} else {
				a, b = listen(t, "127.10.0.2", cfgA), listen(t, "127.10.0.3", cfgB)
			}
			const n = 160
			var out []Msg
			for i := range n {
				out = append(out, Msg{Buf: packet(i, 1040), N: 1040, Addr: b.LocalAddr()})
			}
			if _, err := a.WriteBatch(out); err != nil {
				t.Fatal(err)
			}
			sa := a.Stats()
			if sa.TxLossDropped == 0 || sa.TxLossDropped+sa.TxPackets != n || tc.Packets() != n {
				t.Fatalf("sender: stats %+v, captured %d, want %d packets in all", sa, tc.Packets(), n)
			}
			// Receive until every sent packet is accounted for.
			in := make([]Msg, 16)
			for i := range in {
				in[i].Buf = make([]byte, 2048)
			}
			delivered := 0
			prev := -1
			for {
				sb := b.Stats()
				if sb.RxPackets == sa.TxPackets && delivered+int(sb.RxLossDropped) == int(sb.RxPackets) {
					break
				}
				k, err := b.ReadBatch(in)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range in[:k] {
					idx := int(m.Buf[0]) | int(m.Buf[1])<<8
					if idx <= prev || !bytes.Equal(m.Bytes(), packet(idx, 1040)) {
						t.Fatalf("packet %d after %d, or corrupted", idx, prev)
					}
					prev = idx
				}
				delivered += k
			}
			sb := b.Stats()
			if sb.RxLossDropped == 0 || rc.Packets() != sb.RxPackets {
				t.Fatalf("receiver: stats %+v, captured %d", sb, rc.Packets())
			}
		})
	}
}

func TestOffloadAllocs(t *testing.T) {
	a := listenOffload(t, "127.10.0.2", Config{})
	b := listenOffload(t, "127.10.0.3", Config{})
	var out []Msg
	for _, n := range roceSizes() {
		out = append(out, Msg{Buf: make([]byte, n), N: n, Addr: b.LocalAddr()})
	}
	in := make([]Msg, 16)
	for i := range in {
		in[i].Buf = make([]byte, 2048)
	}
	if n := testing.AllocsPerRun(100, func() {
		a.WriteBatch(out)
		for got := 0; got < len(out); {
			k, _ := b.ReadBatch(in)
			got += k
		}
	}); n != 0 {
		t.Fatalf("%v allocations per message, want 0", n)
	}
}

func TestOffloadAuto(t *testing.T) {
	gso, gro := Probe()
	c := listen(t, "127.10.0.5", Config{})
	if g, r := c.Offloads(); g != gso || r != gro {
		t.Fatalf("loopback endpoint: GSO %v GRO %v, kernel supports %v %v", g, r, gso, gro)
	}
	off := listen(t, "127.10.0.6", Config{Offload: OffloadOff})
	if g, r := off.Offloads(); g || r {
		t.Fatalf("OffloadOff endpoint: GSO %v GRO %v", g, r)
	}
	if _, err := Listen(Config{Addr: netip.MustParseAddr("127.10.0.7"), Offload: 9}); err == nil {
		t.Fatal("unknown Offload accepted")
	}
}

// TestGROBuffers: an endpoint with fewer GRO buffers (a NIC's 4, here the
// fewest, 1) owns only those and still receives every packet, whole and in
// order, of coalesced runs and of single datagrams from a sender without
// GSO.
func TestGROBuffers(t *testing.T) {
	a := listenOffload(t, "127.10.0.2", Config{})
	plain := listen(t, "127.10.0.4", Config{Offload: OffloadOff})
	for _, tc := range []struct{ want, got int }{{0, groMaxDatagrams}, {4, 4}, {1, 1}, {1000, DefaultBatchSize}} {
		c := listenOffload(t, "127.10.0.5", Config{GROBuffers: tc.want})
		if len(c.rbig) != tc.got {
			t.Fatalf("GROBuffers %d: %d buffers, want %d", tc.want, len(c.rbig), tc.got)
		}
		c.Close()
	}
	b := listenOffload(t, "127.10.0.3", Config{GROBuffers: 1})
	var sizes []int
	for range 4 {
		sizes = append(sizes, roceSizes()...)
	}
	var fromA, fromPlain []Msg
	for i, n := range sizes {
		fromA = append(fromA, Msg{Buf: packet(i, n), N: n, Addr: b.LocalAddr()})
		fromPlain = append(fromPlain, Msg{Buf: packet(1000+i, n), N: n, Addr: b.LocalAddr()})
	}
	for _, s := range []struct {
		c    *Conn
		msgs []Msg
	}{{a, fromA}, {plain, fromPlain}} {
		if sent, err := s.c.WriteBatch(s.msgs); err != nil || sent != len(s.msgs) {
			t.Fatalf("WriteBatch = %d, %v", sent, err)
		}
		got := readAll(t, b, len(s.msgs), 2048)
		for i, m := range got {
			if !bytes.Equal(m.Buf, s.msgs[i].Buf) || m.Addr != s.c.LocalAddr() {
				t.Fatalf("packet %d from %v: %d bytes from %v, want %d bytes", i, s.c.LocalAddr(), m.N, m.Addr, s.msgs[i].N)
			}
		}
	}
	if st := b.Stats(); st.RxPackets != uint64(2*len(sizes)) || st.RxGRODatagrams == 0 {
		t.Fatalf("rx stats %+v: want %d packets, some coalesced", st, 2*len(sizes))
	}
}

// TestReadLent: ReadLent hands over the packets of GRO datagrams where
// they lie (Off 0, not the caller's buffer), the same bytes and counts as
// ReadBatch, carrying packets over between calls; without GRO it fills the
// caller's buffers as ReadBatch does. Neither allocates.
func TestReadLent(t *testing.T) {
	a := listenOffload(t, "127.10.0.2", Config{})
	gro := listenOffload(t, "127.10.0.3", Config{})
	plain := listen(t, "127.10.0.4", Config{Offload: OffloadOff})
	sizes := append(roceSizes(), 1040, 1040, 300)
	for _, tc := range []struct {
		name string
		c    *Conn
		lent bool
	}{{"gro", gro, true}, {"plain", plain, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var out []Msg
			for i, n := range sizes {
				out = append(out, Msg{Buf: packet(i, n), N: n, Addr: tc.c.LocalAddr()})
			}
			own := make([]Msg, 5) // fewer than a GRO datagram holds: exercises the carry-over
			for i := range own {
				own[i] = Msg{Buf: make([]byte, 2048), Off: 8}
			}
			in := make([]Msg, len(own))
			got := 0
			check := func() {
				copy(in, own)
				k, err := tc.c.ReadLent(in)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range in[:k] {
					if !bytes.Equal(m.Bytes(), out[got].Buf) || m.Addr != a.LocalAddr() {
						t.Fatalf("packet %d: %d bytes from %v, want %d bytes from %v", got, m.N, m.Addr, sizes[got], a.LocalAddr())
					}
					isOwn := false
					for _, o := range own {
						isOwn = isOwn || &o.Buf[0] == &m.Buf[0]
					}
					if lent := !isOwn; lent != tc.lent || (lent && (m.Off != 0 || len(m.Buf) != m.N)) {
						t.Fatalf("packet %d: lent %v (Off %d, %d-byte Buf), want lent %v with Off 0 and a Buf of just the packet", got, lent, m.Off, len(m.Buf), tc.lent)
					}
					got++
				}
			}
			if _, err := a.WriteBatch(out); err != nil {
				t.Fatal(err)
			}
			timer := time.AfterFunc(10*time.Second, func() { tc.c.Close() })
			defer timer.Stop()
			for got < len(sizes) {
				check()
			}
			if st := tc.c.Stats(); st.RxPackets != uint64(len(sizes)) {
				t.Fatalf("rx stats %+v, want %d packets", st, len(sizes))
			}
			if n := testing.AllocsPerRun(20, func() {
				got = 0
				if _, err := a.WriteBatch(out); err != nil {
					t.Fatal(err)
				}
				for got < len(sizes) {
					check()
				}
			}); n != 0 {
				t.Fatalf("%v allocations per batch, want 0", n)
			}
		})
	}
}
