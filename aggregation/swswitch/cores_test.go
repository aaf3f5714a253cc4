package swswitch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/bpf"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// ipHeader is the start of an IP header from src, as far as the reader
// program reads it (RFC 791 section 3.1, RFC 8200 section 3).
func ipHeader(src netip.Addr) []byte {
	if src.Is4() {
		h := make([]byte, 20)
		h[0] = 0x45
		a := src.As4()
		copy(h[12:16], a[:])
		return h
	}
	h := make([]byte, 40)
	h[0] = 0x60
	a := src.As16()
	copy(h[8:24], a[:])
	return h
}

// TestReaderProgram: the reader program, run in x/net/bpf's VM on IP
// headers, picks the reader readerOf picks, for every source of a table and
// every group size.
func TestReaderProgram(t *testing.T) {
	srcs := []netip.Addr{
		netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("10.0.0.17"),
		netip.MustParseAddr("192.168.255.254"), netip.MustParseAddr("255.255.255.255"), netip.MustParseAddr("0.0.0.1"),
		netip.MustParseAddr("fd00::2"), netip.MustParseAddr("fd00::3"), netip.MustParseAddr("2001:db8::ffff:fffe"),
		netip.MustParseAddr("fe80::1:2:3:4"),
	}
	for _, readers := range []int{1, 2, 3, 8, MaxCores} {
		seen := map[int]bool{}
		for _, src := range srcs {
			vm, err := bpf.NewVM(readerProgram(readers, src.Is6(), 0))
			if err != nil {
				t.Fatal(err)
			}
			// The program must not read past the header: append a BTH.
			got, err := vm.Run(append(ipHeader(src), make([]byte, rdma.BTHSize)...))
			if err != nil {
				t.Fatal(err)
			}
			if want := readerOf(src, readers); got != want {
				t.Errorf("%d readers, source %v: program %d, readerOf %d", readers, src, got, want)
			}
			seen[got] = true
		}
		if readers > 1 && len(seen) < 2 {
			t.Errorf("%d readers: every source on one reader", readers)
		}
	}
	// IPv4-mapped sources are the IPv4 ones.
	if readerOf(netip.MustParseAddr("::ffff:127.0.0.3"), 2) != readerOf(netip.MustParseAddr("127.0.0.3"), 2) {
		t.Error("an IPv4-mapped source has a reader of its own")
	}
}

// TestReusePortSteering: over real sockets, the kernel runs the reader
// program (SKF_NET_OFF loads from the IP header) and every datagram from a
// source reaches the group member readerOf names.
func TestReusePortSteering(t *testing.T) {
	const net, readers = 40, 3
	prog, err := bpf.Assemble(readerProgram(readers, false, skfNetOff))
	if err != nil {
		t.Fatal(err)
	}
	group, err := udp.ListenGroup(udp.Config{Addr: addr(net, 1), BatchSize: 8, Offload: udp.OffloadOff}, readers, prog)
	if errors.Is(err, verbs.ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range group {
		defer c.Close()
	}
	// A second group cannot join the first.
	if g2, err := udp.ListenGroup(udp.Config{Addr: addr(net, 1)}, 2, prog); err == nil {
		for _, c := range g2 {
			c.Close()
		}
		t.Fatal("a second group on a taken address")
	}
	const sources, each = 7, 5
	for h := range sources {
		src := addr(net, 2+h)
		c, err := udp.Listen(udp.Config{Addr: src, BatchSize: 8})
		if err != nil {
			t.Fatal(err)
		}
		msgs := make([]udp.Msg, each)
		for i := range msgs {
			msgs[i] = udp.Msg{Buf: make([]byte, 64), N: 64, Addr: group[0].LocalAddr()}
		}
		if _, err := c.WriteBatch(msgs); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	// A member that waits for datagrams that went elsewhere is unblocked
	// by closing the group.
	stop := time.AfterFunc(testutil.Scale(5*time.Second), func() {
		for _, c := range group {
			c.Close()
		}
	})
	defer stop.Stop()
	got := make([]int, sources)
	in := make([]udp.Msg, 64)
	for i := range in {
		in[i] = udp.Msg{Buf: make([]byte, 128)}
	}
	for r, c := range group {
		want := 0
		for h := range sources {
			if readerOf(addr(net, 2+h), readers) == r {
				want += each
			}
		}
		for received := 0; received < want; {
			n, err := c.ReadBatch(in)
			if err != nil {
				t.Fatalf("member %d: %d of %d datagrams, then %v", r, received, want, err)
			}
			for _, m := range in[:n] {
				if w := readerOf(m.Addr.Addr(), readers); w != r {
					t.Errorf("datagram from %v at member %d, readerOf says %d", m.Addr, r, w)
				}
				got[int(m.Addr.Addr().As4()[3])-2]++
			}
			received += n
		}
	}
	for h, n := range got {
		if n != each {
			t.Errorf("source %v: %d of %d datagrams received", addr(net, 2+h), n, each)
		}
	}
}

// TestCoreTable: every worker's QPN of QP i is bound to one core, QP
// indices take the cores in turn, P4AppQPNs by their QP bits, shared QPNs
// keep their core until their last job goes, and a job whose QP would need
// two cores is refused.
func TestCoreTable(t *testing.T) {
	t0 := &coreTable{cores: 3, qpns: map[uint32]qpnCore{}}
	a := makeJob(1, 50, 4, 5, 0, 5, 256)
	t1, err := t0.withJob(a)
	if err != nil {
		t.Fatal(err)
	}
	used := map[int]bool{}
	for i := range 5 {
		c := t1.coreOf(a.Workers[0].SwitchQPNs[i])
		used[c] = true
		for _, w := range a.Workers {
			if got := t1.coreOf(w.SwitchQPNs[i]); got != c {
				t.Errorf("QP %d: worker %d's QPN on core %d, worker 0's on %d", i, w.Rank, got, c)
			}
		}
	}
	if len(used) != 3 {
		t.Errorf("5 QPs on cores %v, want all 3", used)
	}
	// Job b shares worker 0's QPNs of a (other addresses): they keep
	// their cores, and b's other workers follow them.
	b := makeJob(2, 51, 2, 2, 8, 2, 256)
	b.Workers[0].SwitchQPNs = slices.Clone(a.Workers[0].SwitchQPNs[:2])
	t2, err := t1.withJob(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if got, want := t2.coreOf(b.Workers[1].SwitchQPNs[i]), t1.coreOf(a.Workers[0].SwitchQPNs[i]); got != want {
			t.Errorf("job b QP %d on core %d, its shared QPN on %d", i, got, want)
		}
	}
	// A job that ties QPNs of two cores into one QP is refused.
	c := makeJob(3, 52, 2, 1, 12, 1, 256)
	c.Workers[0].SwitchQPNs[0] = a.Workers[0].SwitchQPNs[0]
	c.Workers[1].SwitchQPNs[0] = a.Workers[0].SwitchQPNs[1]
	if _, err := t2.withJob(c); !errors.Is(err, switchmodel.ErrConflict) {
		t.Errorf("a QP across two cores: %v, want ErrConflict", err)
	}
	// Removing a keeps the QPNs b still uses where they were.
	t3 := t2.withoutJob(a)
	for i := range 2 {
		if got, want := t3.coreOf(b.Workers[0].SwitchQPNs[i]), t2.coreOf(b.Workers[0].SwitchQPNs[i]); got != want {
			t.Errorf("after a left, b's QP %d moved from core %d to %d", i, want, got)
		}
	}
	if _, ok := t3.qpns[a.Workers[1].SwitchQPNs[0]]; ok {
		t.Error("a QPN of a removed job stays bound")
	}
	if len(t2.withoutJob(a).withoutJob(b).qpns) != 0 {
		t.Error("bindings left after every job went")
	}
	// P4AppQPNs: QP i on core i mod cores, whatever the rank.
	p := makeJob(4, 53, 3, 4, 16, 4, 256)
	for r := range p.Workers {
		for i := range 4 {
			p.Workers[r].SwitchQPNs[i], _ = wire.P4AppQPN(r, i)
		}
	}
	t4, err := t0.withJob(p)
	if err != nil {
		t.Fatal(err)
	}
	for r := range p.Workers {
		for i := range 4 {
			if got := t4.coreOf(p.Workers[r].SwitchQPNs[i]); got != i%3 {
				t.Errorf("P4App rank %d QP %d on core %d, want %d", r, i, got, i%3)
			}
		}
	}
	if len(t4.qpns) != 0 {
		t.Error("P4AppQPNs took table entries")
	}
}

// sentPacket is a request of worker rank.
type sentPacket struct {
	rank int
	msg  udp.Msg
}

// adversarialStream is what a job's workers send, as one sequence: per
// round, every worker's message on every QP, interleaved across workers
// and QPs, with messages cut short or with two packets swapped (then sent
// again whole, with new PSNs, as a worker's timer would), and packets
// duplicated and delivered late, between the worker's later messages of
// the round or of the next one. Every worker ends each QP's round with an
// intact copy, so every slot completes before its set is used again: the
// one promise workers make (docs/protocol.md, "Sets and bitmaps (switch side)").
func adversarialStream(t *testing.T, job *wire.Job, swAddr netip.AddrPort, ppm, rounds int, seed uint64) []sentPacket {
	rng := rand.New(rand.NewPCG(seed, 0xc0de))
	n, q := len(job.Workers), len(job.Workers[0].QPNs)
	ws := make([]*testWorker, n)
	psn := make([][]uint32, n)
	late := make([][]sentPacket, n) // per worker, for its next round
	for r := range ws {
		ws[r] = &testWorker{t: t, job: job, rank: r, sw: swAddr, ppm: ppm, lane: job.LaneBytes()}
		psn[r] = make([]uint32, q)
		for i := range psn[r] {
			psn[r][i] = rng.Uint32() & rdma.PSNMask
		}
	}
	var out []sentPacket
	for round := range rounds {
		streams := make([][]sentPacket, n)
		for r := range n {
			// chunks are whole sends (a message, cut or not) and late
			// duplicates, which never land inside a message.
			var chunks [][]sentPacket
			prev := late[r]
			late[r] = nil
			for _, i := range rng.Perm(q) {
				for intact := false; !intact; {
					msg := ws[r].message(i, round, psn[r][i])
					psn[r][i] = (psn[r][i] + uint32(ppm)) & rdma.PSNMask
					intact = true
					var pkts []sentPacket
					for k := 0; k < len(msg); k++ {
						switch rng.IntN(16) {
						case 0: // the rest of the message is lost
							intact = false
							k = len(msg)
							continue
						case 1:
							if k+1 < len(msg) {
								msg[k], msg[k+1] = msg[k+1], msg[k]
								intact = false
							}
						case 2:
							late[r] = append(late[r], sentPacket{r, msg[k]})
						}
						pkts = append(pkts, sentPacket{r, msg[k]})
					}
					chunks = append(chunks, pkts)
				}
			}
			for _, p := range prev {
				chunks = slices.Insert(chunks, rng.IntN(len(chunks)+1), []sentPacket{p})
			}
			if round == rounds-1 {
				for _, p := range late[r] {
					chunks = append(chunks, []sentPacket{p})
				}
			}
			for _, c := range chunks {
				streams[r] = append(streams[r], c...)
			}
		}
		// Interleave the workers, keeping each one's order.
		for left := true; left; {
			left = false
			for _, r := range rng.Perm(n) {
				if len(streams[r]) == 0 {
					continue
				}
				left = true
				take := 1 + rng.IntN(min(len(streams[r]), 2*ppm))
				out = append(out, streams[r][:take]...)
				streams[r] = streams[r][take:]
			}
		}
	}
	return out
}

// streamKey is one result stream: a worker QP.
type streamKey struct {
	dst netip.Addr
	qpn uint32
}

// modelResults runs the sequence through one pipeline: the result packets
// (without ICRC) of each stream, in order.
func modelResults(t *testing.T, cfg switchmodel.Config, job *wire.Job, seq []sentPacket) (map[streamKey][][]byte, int) {
	pipe, err := switchmodel.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := pipe.AddJob(job); err != nil {
		t.Fatal(err)
	}
	res := map[streamKey][][]byte{}
	var pkt rdma.Packet
	var md switchmodel.Metadata
	buf := make([]byte, 8192)
	total := 0
	for _, p := range seq {
		if err := pkt.Parse(p.msg.Bytes()); err != nil {
			t.Fatal(err)
		}
		pipe.Process(job.Workers[p.rank].Addr, &pkt, &md)
		for d := 0; d < md.Dests(); d++ {
			n, dst, err := pipe.EncodeResult(&md, d, buf)
			if err == switchmodel.ErrOutOfOrder {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			k := streamKey{dst, rdma.BTH(buf).DestQP()}
			res[k] = append(res[k], slices.Clone(buf[:n-rdma.ICRCSize]))
			total++
		}
	}
	return res, total
}

// TestCoresAdversarial: a job's packets in adversarial orders (reordered,
// duplicated, late, cut short and resent) through switches of 1, 2 and 3
// cores give, on every worker QP, the very result packets one pipeline
// gives for the same sequence, and every result carries an exact sum of one
// round. Each core owns whole QPs and slots (coreTable), and one reader
// hands each core its packets in arrival order, so splitting the switch
// changes no decision.
func TestCoresAdversarial(t *testing.T) {
	const (
		n, q, ppm, rounds = 3, 5, 4, 8
		payload           = 256
	)
	model := switchmodel.Config{PoolSize: 64, MaxPayload: 1024, MaxWorkers: 8}
	for _, seed := range []uint64{1, 2, 3} {
		for _, cores := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("seed %d %d cores", seed, cores), func(t *testing.T) {
				t.Parallel()
				net := 60 + int(seed)
				job := makeJob(9, net, n, q, 8, q*ppm, payload)
				swAddr := netip.AddrPortFrom(addr(net, 1), rdma.UDPPort)
				seq := adversarialStream(t, job, swAddr, ppm, rounds, seed)
				want, total := modelResults(t, model, job, seq)

				mem, err := memlink.New(memlink.Config{Seed: seed, RecvQueue: len(seq) + 16})
				if err != nil {
					t.Fatal(err)
				}
				ep, err := mem.Listen(swAddr)
				if err != nil {
					t.Fatal(err)
				}
				sw := newSwitch(t, Config{Endpoint: ep, Cores: cores, Model: model})
				if err := sw.AddJob(t.Context(), job); err != nil {
					t.Fatal(err)
				}
				var mu sync.Mutex
				got := map[streamKey][][]byte{}
				received := 0
				eps := make([]udp.Endpoint, n)
				var wg sync.WaitGroup
				for r := range n {
					if eps[r], err = mem.Listen(netip.AddrPortFrom(job.Workers[r].Addr, rdma.UDPPort)); err != nil {
						t.Fatal(err)
					}
					wg.Go(func() {
						in := make([]udp.Msg, 16)
						for i := range in {
							in[i] = udp.Msg{Buf: make([]byte, 8192)}
						}
						for {
							k, err := eps[r].ReadBatch(in)
							if err != nil {
								return
							}
							mu.Lock()
							for _, m := range in[:k] {
								b := m.Bytes()
								key := streamKey{m.Addr.Addr(), rdma.BTH(b).DestQP()}
								key.dst = job.Workers[r].Addr
								got[key] = append(got[key], slices.Clone(b[:len(b)-rdma.ICRCSize]))
								received++
							}
							mu.Unlock()
						}
					})
				}
				for _, p := range seq {
					if _, err := eps[p.rank].WriteBatch([]udp.Msg{p.msg}); err != nil {
						t.Fatal(err)
					}
				}
				testutil.WaitFor(t, "every result the model gives", func() bool { mu.Lock(); defer mu.Unlock(); return received >= total })
				st := sw.Stats()
				for _, e := range eps {
					e.Close()
				}
				wg.Wait()
				if received != total {
					t.Fatalf("%d result packets, the model gives %d", received, total)
				}
				for k, w := range want {
					g := got[k]
					if len(g) != len(w) {
						t.Errorf("worker %v QPN %#x: %d result packets, the model gives %d", k.dst, k.qpn, len(g), len(w))
						continue
					}
					for i := range w {
						if string(g[i]) != string(w[i]) {
							t.Errorf("worker %v QPN %#x: result %d differs from the model's", k.dst, k.qpn, i)
							break
						}
					}
				}
				checkExactSums(t, job, want, ppm, rounds)
				if st.Model.Retransmissions == 0 || st.Drops(switchmodel.DropPSN) == 0 || st.Drops(switchmodel.DropStalePSN) == 0 {
					t.Errorf("the sequence did not exercise resends, PSN gaps and stale packets: %+v", st.Model)
				}
				busy := 0
				for _, p := range st.CorePackets {
					if p > 0 {
						busy++
					}
				}
				if busy != cores {
					t.Errorf("%d of %d cores saw packets: %v", busy, cores, st.CorePackets)
				}
			})
		}
	}
}

// checkExactSums: every result packet's payload is, element for element,
// the sum over the workers of one round's values of one packet of its QP.
func checkExactSums(t *testing.T, job *wire.Job, res map[streamKey][][]byte, ppm, rounds int) {
	t.Helper()
	n := len(job.Workers)
	vals := job.PacketSize / 4
	qpOf := map[uint32]int{}
	for i, qpn := range job.Workers[0].QPNs {
		qpOf[qpn] = i
	}
	checked := 0
	for k, pkts := range res {
		i := qpOf[k.qpn]
		for _, b := range pkts {
			pl := b[len(b)-job.PacketSize:]
			match := false
			for round := 0; round < rounds && !match; round++ {
				for p := 0; p < ppm && !match; p++ {
					match = true
					for e := 0; e < vals && match; e++ {
						var want int32
						for r := range n {
							want += value(r, round, i, p, e)
						}
						match = int32(binary.BigEndian.Uint32(pl[4*e:])) == want
					}
				}
			}
			if !match {
				t.Errorf("worker %v QP %d: a result that is no round's exact sum", k.dst, i)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Error("no results to check")
	}
}
