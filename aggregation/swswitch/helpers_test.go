package swswitch

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// Every test uses its own 127.77.<net>.0/24 so that tests of this and other
// packages, which all bind port 4791 on loopback, never collide: the switch
// is .1, workers .2 and up.
func addr(net, host int) netip.Addr { return netip.AddrFrom4([4]byte{127, 77, byte(net), byte(host)}) }

func newSwitch(t testing.TB, cfg Config) *Switch {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fabric is what a test's switch and workers exchange datagrams over:
// loopback sockets (mem nil) or a private in-memory network (memlink), where
// tests run in parallel. One test, two transports; and the switch's cores.
type fabric struct {
	mem   *memlink.Network
	cores int
}

// forFabrics runs f as the subtests "memory" (parallel; links losing the
// fraction loss each way; a switch of 3 cores behind one endpoint),
// "memory-1-core" (the same with one core) and "socket" (2 cores, a
// SO_REUSEPORT group where the kernel has one).
func forFabrics(t *testing.T, loss float64, f func(t *testing.T, fb fabric)) {
	for _, c := range []struct {
		name  string
		cores int
	}{{"memory", 3}, {"memory-1-core", 1}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			n, err := memlink.New(memlink.Config{Seed: 42, Link: memlink.LinkConfig{Loss: loss}})
			if err != nil {
				t.Fatal(err)
			}
			f(t, fabric{n, c.cores})
		})
	}
	t.Run("socket", func(t *testing.T) { f(t, fabric{cores: 2}) })
}

// newSwitch opens a switch on the fabric; over memory the socket's loss
// simulator gives way to the links' loss.
func (fb fabric) newSwitch(t testing.TB, cfg Config) *Switch {
	t.Helper()
	if fb.mem != nil {
		ep, err := fb.mem.Listen(netip.AddrPortFrom(cfg.Addr, uint16(cfg.Port)))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Endpoint, cfg.IngressLoss, cfg.EgressLoss = ep, 0, 0
	}
	if cfg.Cores == 0 {
		cfg.Cores = fb.cores
	}
	return newSwitch(t, cfg)
}

// lost is what the fabric lost on the way to sw and from it: the switch's
// drop simulator over sockets, the links in memory.
func (fb fabric) lost(sw *Switch, job *wire.Job) (in, out uint64) {
	st := sw.Stats()
	in, out = st.Drops(switchmodel.DropIngressLoss), st.Drops(switchmodel.DropEgressLoss)
	if fb.mem != nil {
		for _, w := range job.Workers {
			in += fb.mem.LinkStats(w.Addr, sw.Addr().Addr()).Lost
			out += fb.mem.LinkStats(sw.Addr().Addr(), w.Addr).Lost
		}
	}
	return in, out
}

// delivered is what the fabric delivered to sw from the workers ws: every
// packet they sent over sockets (loopback loses none; the switch's drop
// simulator counts what it drops as received), what their links delivered
// in memory.
func (fb fabric) delivered(sw *Switch, ws []*testWorker) uint64 {
	var n uint64
	for _, w := range ws {
		if fb.mem != nil {
			n += fb.mem.LinkStats(w.job.Workers[w.rank].Addr, sw.Addr().Addr()).Delivered
		} else {
			n += w.sent.Load()
		}
	}
	return n
}

// makeJob: worker r at addr(net, r+2), switch QPNs id<<12 | r·q+i.
func makeJob(id uint32, net, n, q int, poolBase, poolSlots uint32, payload int) *wire.Job {
	j := &wire.Job{ID: id, DType: wire.Int32, PacketSize: payload, PoolBase: poolBase, PoolSlots: poolSlots}
	for r := 0; r < n; r++ {
		w := wire.Worker{Rank: r, Addr: addr(net, r+2), RKey: 0x5000 + uint32(r)}
		for i := 0; i < q; i++ {
			w.QPNs = append(w.QPNs, 0x9000+uint32(i))
			w.PSNs = append(w.PSNs, uint32(77*r+i))
			w.SwitchQPNs = append(w.SwitchQPNs, id<<12|uint32(r*q+i))
		}
		j.Workers = append(j.Workers, w)
	}
	return j
}

// delivered is a complete result message as a UC receiver sees it; its
// payload holds the elements of the job's wire width (int32, or int16
// sign-extended).
type delivered struct {
	qp      int
	imm     wire.Imm
	va      uint64
	payload []int32
}

// putLane writes v as a big-endian lane of lane bytes (4, or 2: v's low
// 16 bits), getLane reads one back sign-extended.
func putLane(b []byte, lane int, v int32) {
	if lane == 2 {
		binary.BigEndian.PutUint16(b, uint16(v))
		return
	}
	binary.BigEndian.PutUint32(b, uint32(v))
}

func getLane(b []byte, lane int) int32 {
	if lane == 2 {
		return int32(int16(binary.BigEndian.Uint16(b)))
	}
	return int32(binary.BigEndian.Uint32(b))
}

// testWorker is a minimal SwitchML worker over a udp.Conn: it sends
// request messages with sealed ICRCs and reassembles result messages the
// way a UC QP does (consecutive PSNs from FIRST to LAST, else the message is
// dropped), verifying each result's ICRC exactly.
type testWorker struct {
	t       testing.TB
	job     *wire.Job
	rank    int
	conn    udp.Endpoint
	sw      netip.AddrPort
	ppm     int
	out     chan delivered
	wg      sync.WaitGroup
	mu      sync.Mutex
	psn     []uint32
	badICRC int
	sent    atomic.Uint64 // datagrams sent
	lane    int           // bytes per element: job.LaneBytes()
}

func newTestWorker(t testing.TB, job *wire.Job, rank, ppm int, sw *Switch) *testWorker {
	t.Helper()
	var (
		c   udp.Endpoint
		err error
	)
	if ep, ok := sw.conns[0].(*memlink.Endpoint); ok {
		c, err = ep.Network().Listen(netip.AddrPortFrom(job.Workers[rank].Addr, rdma.UDPPort))
	} else {
		c, err = udp.Listen(udp.Config{Addr: job.Workers[rank].Addr, BatchSize: 16})
	}
	if err != nil {
		t.Fatal(err)
	}
	w := &testWorker{t: t, job: job, rank: rank, conn: c, sw: sw.Addr(), ppm: ppm, out: make(chan delivered, 1024),
		psn: make([]uint32, len(job.Workers[rank].QPNs)), lane: job.LaneBytes()}
	w.wg.Add(1)
	go w.read(job.Workers[rank])
	t.Cleanup(w.close)
	return w
}

func (w *testWorker) close() {
	w.conn.Close()
	w.wg.Wait()
}

type ucState struct {
	active  bool
	next    uint32
	va      uint64
	length  uint32 // RETH DMA length: a message that overruns it or ends short is dropped, as rxe does
	payload []int32
}

func (w *testWorker) read(me wire.Worker) {
	defer w.wg.Done()
	qpOf := map[uint32]int{}
	for i, q := range me.QPNs {
		qpOf[q] = i
	}
	st := make([]ucState, len(me.QPNs))
	in := make([]udp.Msg, 16)
	for i := range in {
		in[i] = udp.Msg{Buf: make([]byte, 8192), Off: rdma.ICRCHeadroom}
	}
	var icrc rdma.ICRC
	var pk rdma.Packet
	for {
		n, err := w.conn.ReadBatch(in)
		if err != nil {
			return
		}
		for _, m := range in[:n] {
			f := rdma.Flow{Src: m.Addr.Addr(), Dst: me.Addr, SrcPort: m.Addr.Port(), DstPort: rdma.UDPPort, DF: true}
			if icrc.VerifyHeadroom(&f, m.Buf[:m.Off+m.N], m.Off) != nil || pk.Parse(m.Bytes()) != nil {
				w.mu.Lock()
				w.badICRC++
				w.mu.Unlock()
				continue
			}
			qp, ok := qpOf[pk.BTH.DestQP()]
			if !ok {
				continue
			}
			s := &st[qp]
			op := pk.BTH.Opcode()
			if op.IsFirst() {
				*s = ucState{active: true, va: pk.RETH.VA(), length: pk.RETH.DMALen()}
				if pk.RETH.RKey() != me.RKey {
					s.active = false
					continue
				}
			} else if !s.active || pk.BTH.PSN() != s.next {
				s.active = false
				continue
			}
			s.next = (pk.BTH.PSN() + 1) & rdma.PSNMask
			for i := 0; i+w.lane <= len(pk.Payload); i += w.lane {
				s.payload = append(s.payload, getLane(pk.Payload[i:], w.lane))
			}
			if len(s.payload)*w.lane > int(s.length) || op.IsLast() && len(s.payload)*w.lane != int(s.length) {
				s.active = false
				continue
			}
			if op.IsLast() {
				s.active = false
				select {
				case w.out <- delivered{qp: qp, imm: wire.Imm(pk.ImmDt.Imm()), va: s.va, payload: s.payload}:
				default: // nobody listens any more
				}
			}
		}
	}
}

// value is element e of packet k of worker r's message on QP i in round.
func value(r, round, i, k, e int) int32 {
	return int32(r*1_000_003+round*7919+i*131+k*17+e) * 40503
}

func exponent(r, round int) int8 { return int8((r*5+round*3)%17 - 8) }

// message builds the datagrams (with sealed ICRCs) of worker w's message
// on QP i for round, with the given first PSN.
func (w *testWorker) message(i, round int, psn uint32) []udp.Msg {
	me := w.job.Workers[w.rank]
	vals := w.job.PacketSize / w.lane
	slot := w.job.PoolBase + uint32(i*w.ppm)
	rkey := uint32(wire.MakePoolIndex(slot, uint8(round&1)))
	msgs := make([]udp.Msg, w.ppm)
	var icrc rdma.ICRC
	for k := 0; k < w.ppm; k++ {
		first, last := k == 0, k == w.ppm-1
		op := rdma.WriteOpcode(rdma.TransportUC, first, last, true)
		f := rdma.PacketFields{
			BTH:  rdma.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: me.SwitchQPNs[i], PSN: (psn + uint32(k)) & rdma.PSNMask},
			RETH: rdma.RETHFields{VA: uint64(i * w.ppm * w.job.PacketSize), RKey: rkey, DMALen: uint32(w.ppm * w.job.PacketSize)},
			Imm:  uint32(wire.MakeImm(uint16(round), exponent(w.rank, round), int8(-w.rank))),
		}
		n := rdma.PacketLen(op, w.job.PacketSize)
		buf := make([]byte, rdma.ICRCHeadroom+n)
		off, err := f.Encode(buf[rdma.ICRCHeadroom:], w.job.PacketSize)
		if err != nil {
			w.t.Error(err)
			return nil
		}
		pl := buf[rdma.ICRCHeadroom+off:]
		for e := 0; e < vals; e++ {
			putLane(pl[w.lane*e:], w.lane, value(w.rank, round, i, k, e))
		}
		fl := rdma.Flow{Src: me.Addr, Dst: w.sw.Addr(), SrcPort: rdma.UDPPort, DstPort: w.sw.Port(), DF: true}
		if err := icrc.SealHeadroom(&fl, buf, rdma.ICRCHeadroom); err != nil {
			w.t.Error(err)
			return nil
		}
		msgs[k] = udp.Msg{Buf: buf, Off: rdma.ICRCHeadroom, N: n, Addr: w.sw}
	}
	return msgs
}

func (w *testWorker) send(i, round int) {
	w.mu.Lock()
	psn := w.psn[i]
	w.psn[i] = (psn + uint32(w.ppm)) & rdma.PSNMask
	w.mu.Unlock()
	n, err := w.conn.WriteBatch(w.message(i, round, psn))
	w.sent.Add(uint64(n))
	if err != nil {
		w.t.Error(err)
	}
}

// run performs rounds of all-reduce on every QP, resending a QP's message
// after timeout, and checks every result against the exact sum.
func (w *testWorker) run(ctx context.Context, rounds int, timeout time.Duration) error {
	q := len(w.job.Workers[w.rank].QPNs)
	n := len(w.job.Workers)
	for round := 0; round < rounds; round++ {
		done := make([]bool, q)
		for i := 0; i < q; i++ {
			w.send(i, round)
		}
		left := q
		tick := time.NewTimer(timeout)
		for left > 0 {
			select {
			case d := <-w.out:
				if d.imm.MsgID() != uint16(round) || done[d.qp] {
					continue // stale or duplicate
				}
				if err := w.check(d, round, n); err != nil {
					return err
				}
				done[d.qp] = true
				left--
			case <-tick.C:
				for i := 0; i < q; i++ {
					if !done[i] {
						w.send(i, round)
					}
				}
				tick.Reset(timeout)
			case <-ctx.Done():
				return fmt.Errorf("worker %d round %d: %w (%d QPs missing)", w.rank, round, ctx.Err(), left)
			}
		}
		tick.Stop()
	}
	return nil
}

// check compares a result with the sum of every worker's values, wrapped
// to the job's lane width (the switch adds int16 lanes modulo 2^16).
func (w *testWorker) check(d delivered, round, n int) error {
	vals := w.job.PacketSize / w.lane
	if len(d.payload) != w.ppm*vals {
		return fmt.Errorf("worker %d round %d QP %d: %d values, want %d", w.rank, round, d.qp, len(d.payload), w.ppm*vals)
	}
	if d.va != uint64(d.qp*w.ppm*w.job.PacketSize) {
		return fmt.Errorf("worker %d round %d QP %d: va %#x", w.rank, round, d.qp, d.va)
	}
	var e0, e1 int8 = -128, -128
	for r := 0; r < n; r++ {
		e0, e1 = max(e0, exponent(r, round)), max(e1, int8(-r))
	}
	if d.imm != wire.MakeImm(uint16(round), e0, e1) {
		return fmt.Errorf("worker %d round %d QP %d: imm %#x, want %#x", w.rank, round, d.qp, uint32(d.imm), uint32(wire.MakeImm(uint16(round), e0, e1)))
	}
	for k := 0; k < w.ppm; k++ {
		for e := 0; e < vals; e++ {
			var want int32
			for r := 0; r < n; r++ {
				want += value(r, round, d.qp, k, e)
			}
			if w.lane == 2 {
				want = int32(int16(want)) // the low 16 bits of each value sum to the low 16 bits of the sum
			}
			if got := d.payload[k*vals+e]; got != want {
				return fmt.Errorf("worker %d round %d QP %d packet %d element %d: %d, want %d", w.rank, round, d.qp, k, e, got, want)
			}
		}
	}
	return nil
}

// runJob runs every worker of a job concurrently.
func runJob(t testing.TB, sw *Switch, job *wire.Job, ppm, rounds int, timeout time.Duration) []*testWorker {
	t.Helper()
	ws := make([]*testWorker, len(job.Workers))
	for r := range ws {
		ws[r] = newTestWorker(t, job, r, ppm, sw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make(chan error, len(ws))
	for _, w := range ws {
		go func() { errs <- w.run(ctx, rounds, timeout) }()
	}
	var first error
	for range ws {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	if first != nil {
		t.Fatalf("job %d: %v", job.ID, first)
	}
	return ws
}
