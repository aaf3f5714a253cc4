package swswitch

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
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
	// A spine result can release the rest of its message: up to
	// packets-per-message broadcasts from one request.
	results := len(job.Workers) * int(job.PoolSlots) / len(job.Workers[0].SwitchQPNs)
	for i, c := range s.cores {
		c.mu.Lock()
		err := c.eng.pipe.SetUpstream(jobID, up)
		if err == nil && up != nil && results > c.eng.maxN {
			c.eng.maxN = results
			c.eng.grow(4 * results)
		}
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
	n := t.clone(0)
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

// UpstreamConfig makes a software switch a leaf of a spine switch.
type UpstreamConfig struct {
	// Client reaches the spine's controller.
	Client control.ClientConfig
	// Index is this leaf's rank among the spine job's workers, Leaves
	// their number.
	Index, Leaves int
}

var _ control.UpstreamJoiner = (*Switch)(nil)

// JoinUpstream registers job as worker Config.Upstream.Index of the spine's
// job of the same session, with QPs of the leaf's own (random QPNs and
// PSNs), and makes it a leaf of that job (SetUpstream) before it returns
// (control.UpstreamJoiner). A switch without Config.Upstream is no leaf:
// it returns a nil link.
func (s *Switch) JoinUpstream(ctx context.Context, job *wire.Job, us control.UpstreamSession) (control.UpstreamLink, error) {
	u := s.cfg.Upstream
	if u == nil {
		return nil, nil
	}
	q := len(job.Workers[0].SwitchQPNs)
	taken := make(map[uint32]bool, q*(len(job.Workers)+1))
	for _, w := range job.Workers {
		for _, qpn := range w.SwitchQPNs {
			taken[qpn] = true
		}
	}
	recv, psns := make([]uint32, q), make([]uint32, q)
	for i := range q {
		for {
			// Opaque QPNs (not Tofino-encoded: steered by their core
			// binding), none the job's own.
			qpn := 0x100 + rand.Uint32N(0x800000-0x100)
			if !taken[qpn] {
				recv[i], taken[qpn] = qpn, true
				break
			}
		}
		psns[i] = rand.Uint32N(rdma.PSNMask + 1)
	}
	a, err := s.spine.RegisterRDMA(ctx, control.Registration{
		SessionID: us.SessionID, Rank: u.Index, NumWorkers: u.Leaves, Addr: s.Addr().Addr(),
		PacketSize: job.PacketSize, MessageSize: us.MessageSize, QPNs: recv, PSNs: psns,
		DType: job.DType, TensorBytes: us.TensorBytes, WireBits: 8 * job.LaneBytes(),
	})
	if err != nil {
		return nil, fmt.Errorf("swswitch: job %d as leaf %d of %d: %w", job.ID, u.Index, u.Leaves, err)
	}
	abort := func(err error) (control.UpstreamLink, error) {
		_ = s.spine.Abort(context.WithoutCancel(ctx), a, fmt.Sprintf("leaf %d (%v) could not join: %v", u.Index, s.Addr().Addr(), err))
		return nil, err
	}
	if len(a.SwitchQPNs) != q || uint32(q*a.PacketsPerMessage) != job.PoolSlots {
		return abort(fmt.Errorf("swswitch: job %d as leaf %d: %w: the spine's job has %d QPs × %d packets, the leaf's %d slots",
			job.ID, u.Index, switchmodel.ErrUpstream, len(a.SwitchQPNs), a.PacketsPerMessage, job.PoolSlots))
	}
	if err := s.SetUpstream(job.ID, &switchmodel.Upstream{Addr: a.SwitchAddr, QPNs: a.SwitchQPNs, PSNs: a.SwitchPSNs,
		PoolBase: a.PoolBase, RecvQPNs: recv, RecvPSNs: psns}); err != nil {
		return abort(err)
	}
	s.linksMu.Lock()
	s.links[job.ID] = a
	s.linksMu.Unlock()
	s.log.Info("joined the spine's job", "job", job.ID, "spine_job", a.JobID, "leaf", u.Index, "leaves", u.Leaves)
	return spineLink{a, s, job.ID}, nil
}

// spineLink is a leaf job's control.UpstreamLink.
type spineLink struct {
	*control.Assignment
	s  *Switch
	id uint32
}

// Err says why the spine's job ended, naming the spine.
func (l spineLink) Err() error {
	err := l.Assignment.Err()
	if err == nil {
		return nil
	}
	return fmt.Errorf("spine switch %v (controller %s): %w", l.SwitchAddr, l.s.cfg.Upstream.Client.Addr, err)
}

// End leaves the spine's job: aborted with the leaf's reason, so that the
// other leaves' workers learn which switch ended it, or ended cleanly.
func (l spineLink) End(ctx context.Context, aborted bool, reason string) {
	if aborted {
		u := l.s.cfg.Upstream
		reason = fmt.Sprintf("leaf %d of %d (switch %v): %s", u.Index, u.Leaves, l.s.Addr().Addr(), reason)
	}
	l.s.leaveSpine(ctx, l.id, aborted, reason)
}

// leaveSpine ends job id's membership of its spine's job, if it has one.
func (s *Switch) leaveSpine(ctx context.Context, id uint32, aborted bool, reason string) {
	s.linksMu.Lock()
	a := s.links[id]
	delete(s.links, id)
	s.linksMu.Unlock()
	if a == nil {
		return
	}
	var err error
	if aborted {
		err = s.spine.Abort(ctx, a, reason)
	} else {
		err = s.spine.EndSession(ctx, a)
	}
	if err != nil {
		s.log.Warn("could not leave the spine's job", "job", id, "aborted", aborted, "err", err)
	}
}
