package aggregation

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs/verbstest"
)

// modelSwitch is the real switch pipeline (switchmodel.Pipeline, the same
// code the software switch runs on every packet) attached to a
// verbstest.Network, so that the engine's unit tests meet the switch's
// actual semantics, the per-QP result ordering rule of RDMASender included.
//
// The fake network carries whole RDMA WRITE messages; the switch works on
// packets. So each request message is cut into its packets (FIRST, MIDDLE…,
// LAST or ONLY, consecutive PSNs per source QP, the RETH on the first, the
// immediate on the last) and each is run through the pipeline; the result
// packets are put back together per worker QP as a UC responder does (a
// FIRST/ONLY starts a message, a MIDDLE/LAST must carry the next PSN, any gap
// discards the message in progress) and delivered as one message on LAST/ONLY.
// It implements control.Programmer.
//
// The fake network delivers messages one at a time, so the packets of two
// request messages do not interleave at the switch as they can on a wire,
// unless a test asks for it (interleave): that is how TestToyResultOrder
// meets the per-QP result ordering rule (switchmodel.ErrOutOfOrder).
//
// Tests with packet-level loss patterns run the real switch and the real
// soft NICs over memlink instead (lossBench, softCluster.setLoss); what
// stays here needs the message-level fake: the interleaving above, the
// per-call hooks (sawRequest, waitCalls) and whole-message drops
// (verbstest.Network.SetDrop).
//
// Concurrency: the pipeline runs on the network's delivery goroutine; AddJob
// and RemoveJob come from the controller's goroutines; mu serialises them.
type modelSwitch struct {
	net  *verbstest.Network
	addr netip.Addr

	mu   sync.Mutex
	pipe *switchmodel.Pipeline
	jobs map[uint32]*wire.Job
	// src maps a worker's (address, switch QPN) to its job, rank and QP
	// index; dst maps a worker's (address, QPN) to the same.
	src, dst map[qpEnd]jobRankQP
	// rxPSN is the next request PSN per worker QP: the fake wire has no
	// PSNs, so they are numbered here as a NIC's UC send queue does, one
	// per packet and every transmission new (the switch drops a packet
	// older than the newest it has seen on the QP).
	rxPSN map[qpEnd]uint32
	// out is the result message being put together per worker QP.
	out map[qpEnd]*resultAssembly
	md  switchmodel.Metadata
	buf []byte // one request packet
	res []byte // one result packet
	// skipped counts result packets the pipeline withheld
	// (switchmodel.ErrOutOfOrder).
	skipped int
	// requested is closed, per (job, rank), when the switch receives that
	// rank's first request: the test's hook that says a call has started
	// (and reached the wire).
	requested map[jobRank]chan struct{}
	seen      map[jobRank]bool

	// interleave, if set, reorders packets between two workers' messages
	// once (see interleaving).
	interleave *interleaving
}

type jobRank struct {
	job  uint32
	rank int
}

type qpEnd struct {
	addr netip.Addr
	qpn  uint32
}

type jobRankQP struct {
	job      *wire.Job
	rank, qp int
}

type resultAssembly struct {
	open    bool // a FIRST arrived and no gap since
	nextPSN uint32
	va      uint64
	rkey    uint32
	dmaLen  uint32
	payload []byte
}

var _ control.Programmer = (*modelSwitch)(nil)

// modelSwitchPool is the pipeline's pool size, which the controller must
// share. Slots hold at most 4 KiB per set, as on the software switch.
const modelSwitchPool = 4096

func newModelSwitch(n *verbstest.Network, addr netip.Addr) (*modelSwitch, error) {
	pipe, err := switchmodel.New(switchmodel.Config{PoolSize: modelSwitchPool})
	if err != nil {
		return nil, err
	}
	maxPkt := rdma.PacketLen(rdma.WriteOpcode(rdma.TransportUC, true, true, true), pipe.Config().MaxPayload)
	s := &modelSwitch{
		net: n, addr: addr, pipe: pipe,
		jobs: map[uint32]*wire.Job{}, src: map[qpEnd]jobRankQP{}, dst: map[qpEnd]jobRankQP{},
		rxPSN: map[qpEnd]uint32{}, out: map[qpEnd]*resultAssembly{},
		requested: map[jobRank]chan struct{}{}, seen: map[jobRank]bool{},
		buf: make([]byte, maxPkt), res: make([]byte, maxPkt),
	}
	if err := n.Attach(addr, s.handle); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *modelSwitch) AddJob(_ context.Context, job *wire.Job) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.pipe.AddJob(job); err != nil {
		return err
	}
	s.jobs[job.ID] = job
	for r, w := range job.Workers {
		for i, q := range w.SwitchQPNs {
			s.src[qpEnd{w.Addr, q}] = jobRankQP{job, r, i}
		}
		for i, q := range w.QPNs {
			s.dst[qpEnd{w.Addr, q}] = jobRankQP{job, r, i}
		}
	}
	return nil
}

func (s *modelSwitch) RemoveJob(_ context.Context, id uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pipe.RemoveJob(id)
	job := s.jobs[id]
	if job == nil {
		return nil
	}
	delete(s.jobs, id)
	for _, w := range job.Workers {
		for _, q := range w.SwitchQPNs {
			delete(s.src, qpEnd{w.Addr, q})
			delete(s.rxPSN, qpEnd{w.Addr, q})
		}
		for _, q := range w.QPNs {
			delete(s.dst, qpEnd{w.Addr, q})
			delete(s.out, qpEnd{w.Addr, q})
		}
	}
	return nil
}

// handle cuts a request message into packets and runs them through the
// pipeline, in order, on the delivery goroutine.
func (s *modelSwitch) handle(m *verbstest.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from := qpEnd{m.Src, m.DstQPN}
	who, known := s.src[from]
	ps := len(m.Payload) // a message nobody knows goes to the pipeline as one packet
	if known {
		ps = who.job.PacketSize
		k := jobRank{who.job.ID, who.rank}
		if !s.seen[k] {
			s.seen[k] = true
			if ch := s.requested[k]; ch != nil {
				close(ch)
			}
		}
	}
	pkts := 1
	if ps > 0 && len(m.Payload) > ps {
		pkts = (len(m.Payload) + ps - 1) / ps
	}
	for k := range pkts {
		lo, hi := k*ps, min((k+1)*ps, len(m.Payload))
		first, last := k == 0, k == pkts-1
		psn := s.rxPSN[from]
		s.rxPSN[from] = (psn + 1) & rdma.PSNMask
		f := rdma.PacketFields{
			BTH: rdma.BTHFields{
				Opcode: rdma.WriteOpcode(rdma.TransportUC, first, last, m.WithImm),
				PKey:   rdma.DefaultPKey, DestQP: m.DstQPN, PSN: psn,
			},
			RETH: rdma.RETHFields{VA: m.VA, RKey: m.RKey, DMALen: uint32(len(m.Payload))},
			Imm:  m.Imm,
		}
		n := rdma.PacketLen(f.BTH.Opcode, hi-lo)
		if n > len(s.buf) {
			s.pipe.Counters.Packets++
			s.pipe.Counters.Drops[switchmodel.DropLength]++
			return
		}
		off, err := f.Encode(s.buf, hi-lo)
		if err != nil {
			panic(fmt.Sprintf("model switch: encode a request packet: %v", err))
		}
		copy(s.buf[off:], m.Payload[lo:hi])
		if il := s.interleave; il != nil && known && !il.done && who.rank == il.holdRank && (il.holding || (pkts > 1 && k >= il.from)) {
			il.holding = true
			il.held = append(il.held, heldPacket{m.Src, append([]byte(nil), s.buf[:n]...)})
			continue
		}
		s.process(m.Src, s.buf[:n])
		if il := s.interleave; il != nil && known && !il.done && who.rank == il.triggerRank && k == 0 {
			if il.sent[m.RKey] {
				// triggerRank resends: the held packets overtake the
				// rest of its message.
				il.done = true
				for _, h := range il.held {
					s.process(h.src, h.b)
				}
				il.held = nil
			}
			il.sent[m.RKey] = true
		}
	}
}

// process runs one request packet through the pipeline and sends its
// results.
func (s *modelSwitch) process(src netip.Addr, b []byte) {
	var pkt rdma.Packet
	if err := pkt.Parse(b); err != nil {
		panic(fmt.Sprintf("model switch: parse a request packet: %v", err))
	}
	s.pipe.Process(src, &pkt, &s.md)
	for d := 0; d < s.md.Dests(); d++ {
		rn, dst, err := s.pipe.EncodeResult(&s.md, d, s.res)
		if err == switchmodel.ErrOutOfOrder {
			s.skipped++
			continue
		}
		if err != nil {
			panic(fmt.Sprintf("model switch: encode a result: %v", err))
		}
		s.egress(dst, s.res[:rn])
	}
}

// interleaving makes two workers' packets interleave at the switch as they
// can on a wire, once, deterministically: from packet from of holdRank's
// first multi-packet request on, everything holdRank sends is held back;
// when triggerRank resends a message (a request with a pool index it sent
// before), the held packets are processed right after that resend's first
// packet, before the rest of it.
type interleaving struct {
	holdRank, from, triggerRank int

	holding, done bool
	held          []heldPacket
	sent          map[uint32]bool // triggerRank's request rkeys (pool indices)
}

type heldPacket struct {
	src netip.Addr
	b   []byte
}

// egress feeds one result packet to the worker QP's UC receive side, which
// delivers a whole message on LAST/ONLY.
func (s *modelSwitch) egress(dst netip.Addr, b []byte) {
	var pkt rdma.Packet
	if err := pkt.Parse(b); err != nil {
		panic(fmt.Sprintf("model switch: parse a result packet: %v", err))
	}
	to := qpEnd{dst, pkt.BTH.DestQP()}
	who, ok := s.dst[to]
	if !ok {
		panic(fmt.Sprintf("model switch: result for unknown worker QP %v/%d", dst, to.qpn))
	}
	a := s.out[to]
	if a == nil {
		a = &resultAssembly{}
		s.out[to] = a
	}
	op := pkt.BTH.Opcode()
	psn := pkt.BTH.PSN()
	switch {
	case op.IsFirst():
		a.open, a.va, a.rkey, a.dmaLen = true, pkt.RETH.VA(), pkt.RETH.RKey(), pkt.RETH.DMALen()
		a.payload = a.payload[:0]
	case !a.open || psn != a.nextPSN:
		a.open = false
		return
	}
	a.nextPSN = (psn + 1) & rdma.PSNMask
	a.payload = append(a.payload, pkt.Payload...)
	if !op.IsLast() {
		return
	}
	a.open = false
	if uint32(len(a.payload)) != a.dmaLen {
		return // a UC responder rejects a message of the wrong length
	}
	m := verbstest.Message{
		Src: s.addr, SrcQPN: who.job.Workers[who.rank].SwitchQPNs[who.qp],
		Dst: dst, DstQPN: to.qpn,
		RKey: a.rkey, VA: a.va, Payload: a.payload,
	}
	if pkt.ImmDt != nil {
		m.WithImm, m.Imm = true, pkt.ImmDt.Imm()
	}
	s.net.Send(m)
}

// counters returns the pipeline's counters and the result packets it
// withheld for the ordering rule.
func (s *modelSwitch) counters() (switchmodel.Counters, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pipe.Counters, s.skipped
}

// sawRequest returns a channel that is closed once the switch has received
// a request from rank of job (at once if it already has).
func (s *modelSwitch) sawRequest(job uint32, rank int) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := jobRank{job, rank}
	ch := s.requested[k]
	if ch == nil {
		ch = make(chan struct{})
		s.requested[k] = ch
		if s.seen[k] {
			close(ch)
		}
	}
	return ch
}

// waitCalls waits until the switch has received a request from each of
// ranks of job: their calls have started and are waiting for results.
func (c *toyCluster) waitCalls(t testing.TB, j *job, ranks ...int) {
	t.Helper()
	id := j.workers[0].sess.JobID()
	timeout := time.After(testutil.Scale(10 * time.Second))
	for _, r := range ranks {
		select {
		case <-c.sw.sawRequest(id, r):
		case <-timeout:
			t.Fatalf("rank %d of job %d sent nothing: its AllReduce did not start", r, id)
		}
	}
}

// setInterleave installs il (nil: none).
func (s *modelSwitch) setInterleave(il *interleaving) {
	s.mu.Lock()
	if il != nil {
		il.sent = map[uint32]bool{}
	}
	s.interleave = il
	s.mu.Unlock()
}
