package swswitch

import (
	"fmt"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// SetUpstream makes job jobID a leaf of a spine switch (docs/switch.md
// "Switch hierarchy"): its completed slots go up to up.Addr as the writes of
// one worker of the spine's job, and the spine's results, which arrive on
// up.RecvQPNs, come down to the job's workers. Nil makes the job flat again.
// Call it after AddJob and before the job's workers learn their QPNs.
//
// With several cores, the spine's results for QP index i go to the core
// that owns QP index i's slots: RecvQPNs[i] is bound there.
func (s *Switch) SetUpstream(jobID uint32, up *switchmodel.Upstream) error {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	job, ok := s.jobs[jobID]
	if !ok {
		return fmt.Errorf("swswitch: set upstream of job %d: %w: job not installed", jobID, switchmodel.ErrUpstream)
	}
	if up != nil && up.Addr.IsValid() && up.Addr.Unmap().Is4() != s.cfg.Addr.Is4() {
		return fmt.Errorf("swswitch: set upstream of job %d: %w: spine address %v is not of the switch's family", jobID, switchmodel.ErrUpstream, up.Addr)
	}
	table := s.table.Load()
	if old := s.upstreams[jobID]; old != nil {
		table = table.withoutQPNs(old)
	}
	var recv []uint32
	if up != nil {
		recv = append([]uint32(nil), up.RecvQPNs...)
		var err error
		if table, err = table.withUpstream(job, recv); err != nil {
			return err
		}
	}
	for i, c := range s.cores {
		c.mu.Lock()
		err := c.eng.pipe.SetUpstream(jobID, up)
		c.mu.Unlock()
		if err != nil {
			for _, c := range s.cores[:i] {
				c.mu.Lock()
				_ = c.eng.pipe.SetUpstream(jobID, nil) // nil cannot fail for an installed job
				c.mu.Unlock()
			}
			return fmt.Errorf("swswitch: %w", err)
		}
	}
	s.table.Store(table)
	if up == nil {
		delete(s.upstreams, jobID)
	} else {
		s.upstreams[jobID] = recv
		s.log.Info("job is a leaf", "job", jobID, "spine", up.Addr, "spine_pool_base", up.PoolBase)
	}
	return nil
}

// withUpstream returns a copy of t with a leaf's receive QPNs bound: recv[i]
// to the core of job's QP index i.
func (t *coreTable) withUpstream(job *wire.Job, recv []uint32) (*coreTable, error) {
	n := t.clone()
	if t.cores == 1 {
		return n, nil
	}
	for i, qpn := range recv {
		core := n.coreOf(job.Workers[0].SwitchQPNs[i])
		if _, _, p4 := wire.P4AppQPNDecode(qpn); p4 || qpn > rdma.QPNMask {
			// A Tofino-encoded QPN is steered by its own bits.
			return nil, fmt.Errorf("swswitch: set upstream: %w: receive QPN %#x is not an opaque 24-bit QPN", switchmodel.ErrUpstream, qpn)
		}
		e, bound := n.qpns[qpn]
		if bound && int(e.core) != core {
			return nil, fmt.Errorf("swswitch: set upstream: %w: QPN %#x is bound to core %d, QP %d's slots to core %d",
				switchmodel.ErrConflict, qpn, e.core, i, core)
		}
		e.core = uint8(core)
		e.refs++
		n.qpns[qpn] = e
	}
	return n, nil
}

// clone returns a copy of t that can be changed.
func (t *coreTable) clone() *coreTable {
	n := &coreTable{cores: t.cores, next: t.next, qpns: make(map[uint32]qpnCore, len(t.qpns))}
	for q, c := range t.qpns {
		n.qpns[q] = c
	}
	return n
}

// withoutQPNs returns a copy of t with one reference to each of qpns
// dropped.
func (t *coreTable) withoutQPNs(qpns []uint32) *coreTable {
	n := t.clone()
	for _, qpn := range qpns {
		if e, ok := n.qpns[qpn]; ok {
			if e.refs--; e.refs <= 0 {
				delete(n.qpns, qpn)
			} else {
				n.qpns[qpn] = e
			}
		}
	}
	return n
}
