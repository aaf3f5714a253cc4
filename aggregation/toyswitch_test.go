package aggregation

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs/verbstest"
)

// toySwitch is a message-level SwitchML switch on a verbstest.Network, for
// unit tests of the engine: per (slot, set) a bitmap of contributors, an
// int32 sum and the max exponents; a new contribution clears the worker's
// bit in the other set; the last one multicasts; a retransmission into a
// completed (slot, set) is answered to its sender alone. Messages travel
// whole on the fake wire, so the slot of a message is the slot of its
// first packet. It implements control.Programmer.
type toySwitch struct {
	net  *verbstest.Network
	addr netip.Addr

	mu    sync.Mutex
	jobs  map[uint32]*toyJob
	qps   map[toyKey]toyQP
	slots map[uint64]*toySlot // by job<<32 | pool index
	// counters
	retransmissions, unicasts, multicasts, unknown int

	// Deterministic loss patterns (nil: none). lossIn returns the index
	// of the first lost packet of a pkts-packet request from rank on QP
	// qp (the switch's UC receiver then drops the rest), or -1; lossOut
	// says whether a pkts-packet result to rank on QP qp, for the request
	// with pool index pi, is lost.
	lossIn  func(rank, qp, pkts int) int
	lossOut func(rank, qp int, pi wire.PoolIndex, pkts int) bool
}

type toyKey struct {
	src netip.Addr
	qpn uint32
}

type toyQP struct {
	job        *toyJob
	rank, qpIx int
}

type toyJob struct{ spec *wire.Job }

type toySlot struct {
	seen     uint64 // worker bitmap (tests stay ≤ 64 workers)
	count    int
	complete bool
	sum      []byte
	e0, e1   int8
}

var _ control.Programmer = (*toySwitch)(nil)

func newToySwitch(n *verbstest.Network, addr netip.Addr) (*toySwitch, error) {
	s := &toySwitch{net: n, addr: addr, jobs: map[uint32]*toyJob{}, qps: map[toyKey]toyQP{}, slots: map[uint64]*toySlot{}}
	if err := n.Attach(addr, s.handle); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *toySwitch) AddJob(_ context.Context, job *wire.Job) error {
	if len(job.Workers) > 64 {
		return fmt.Errorf("toy switch: %d workers: at most 64", len(job.Workers))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j := &toyJob{spec: job}
	s.jobs[job.ID] = j
	for r, w := range job.Workers {
		for i, q := range w.SwitchQPNs {
			s.qps[toyKey{w.Addr, q}] = toyQP{job: j, rank: r, qpIx: i}
		}
	}
	return nil
}

func (s *toySwitch) RemoveJob(_ context.Context, id uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil {
		return nil
	}
	delete(s.jobs, id)
	for k, q := range s.qps {
		if q.job == j {
			delete(s.qps, k)
		}
	}
	for k := range s.slots {
		if uint32(k>>32) == id {
			delete(s.slots, k)
		}
	}
	return nil
}

func (s *toySwitch) handle(m *verbstest.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.qps[toyKey{m.Src, m.DstQPN}]
	if !ok || !m.WithImm {
		s.unknown++
		return
	}
	job := q.job.spec
	ps := job.PacketSize
	if ps <= 0 || len(m.Payload)%ps != 0 {
		s.unknown++
		return
	}
	pkts := len(m.Payload) / ps
	pi := wire.PoolIndex(m.RKey)
	if pi.Slot() < job.PoolBase || pi.Add(pkts-1).Slot() >= job.PoolBase+job.PoolSlots {
		s.unknown++
		return
	}
	// A message arrives whole (the fake network has no packets), so its
	// packets' slots are processed together: the result goes out when
	// they are all complete, as one message like the request.
	whole := pkts
	if s.lossIn != nil {
		if k := s.lossIn(q.rank, q.qpIx, pkts); k >= 0 && k < pkts {
			// Packets 0..k-1 are aggregated; their partial result
			// would not complete any UC receive, so none is sent.
			pkts = k
		}
	}
	bit := uint64(1) << q.rank
	imm := wire.Imm(m.Imm)
	retx, completed := true, false
	slots := make([]*toySlot, pkts)
	for k := range pkts {
		key := uint64(job.ID)<<32 | uint64(pi.Add(k))
		sl := s.slots[key]
		if sl == nil {
			sl = &toySlot{}
			s.slots[key] = sl
		}
		slots[k] = sl
		if sl.seen&bit != 0 {
			continue
		}
		retx = false
		if other := s.slots[key^1]; other != nil {
			other.seen &^= bit
		}
		if sl.complete || sl.count == 0 {
			sl.complete, sl.count = false, 0
			sl.sum = append(sl.sum[:0], make([]byte, ps)...)
			sl.e0, sl.e1 = -128, -128
		}
		sl.seen |= bit
		sl.count++
		p := m.Payload[k*ps : (k+1)*ps]
		for i := 0; i+4 <= len(p); i += 4 {
			v := binary.BigEndian.Uint32(sl.sum[i:]) + binary.BigEndian.Uint32(p[i:])
			binary.BigEndian.PutUint32(sl.sum[i:], v)
		}
		if k == pkts-1 {
			sl.e0, sl.e1 = max(sl.e0, imm.E0()), max(sl.e1, imm.E1())
		}
		if sl.count == len(job.Workers) {
			sl.complete = true
			completed = true
		}
	}
	if retx && pkts > 0 {
		s.retransmissions++
	}
	if pkts < whole {
		return
	}
	for _, sl := range slots {
		if !sl.complete {
			return
		}
	}
	last := slots[pkts-1]
	sum := make([]byte, 0, len(m.Payload))
	for _, sl := range slots {
		sum = append(sum, sl.sum...)
	}
	res := imm.WithExponents(last.e0, last.e1)
	if completed {
		s.multicasts++
		for r := range job.Workers {
			s.send(job, r, q.qpIx, m, sum, res)
		}
		return
	}
	s.unicasts++
	s.send(job, q.rank, q.qpIx, m, sum, res)
}

func (s *toySwitch) send(job *wire.Job, rank, qpIx int, req *verbstest.Message, sum []byte, imm wire.Imm) {
	if s.lossOut != nil && s.lossOut(rank, qpIx, wire.PoolIndex(req.RKey), len(sum)/job.PacketSize) {
		return
	}
	w := job.Workers[rank]
	s.net.Send(verbstest.Message{
		Src: s.addr, SrcQPN: w.SwitchQPNs[qpIx],
		Dst: w.Addr, DstQPN: w.QPNs[qpIx],
		WithImm: true, Imm: uint32(imm),
		RKey: w.RKey, VA: req.VA, Payload: sum,
	})
}

func (s *toySwitch) counters() (retx, unicasts, multicasts, unknown int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retransmissions, s.unicasts, s.multicasts, s.unknown
}
