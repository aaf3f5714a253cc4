package control

// p4app-switchML workers (docs/interop.md; docs/control-plane.md
// "Teardown rule" says how the controller treats them): their request has
// no packet_size_bytes. They address pool indices from 0, register one
// after another (rank 0 before the others, which wait in a Barrier) and
// never end their session, so:
//
//   - their session reserves slots [0, need) at its first registration
//     (reserveP4App), and each rank is answered at once, with switch QPNs
//     and PSNs drawn then (rendezvous.go);
//   - a rank 0 ends the p4app jobs in its way, as p4app's own controller
//     does, and never a swml-rdma job (replaceP4AppJobs);
//   - what a session took before its job existed is given back when it
//     fails or empties (releasePending).

import (
	"cmp"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swml-rdma/swml-rdma/aggregation/control/internal/spans"
)

// reserveP4App takes slots [0, need) for a p4app session, whose workers
// address pool indices from 0, and charges them to client. Holds c.mu.
func (c *Controller) reserveP4App(p *pendingSession, need uint32, client string) error {
	if used := c.clientSlots[client]; c.clientShareLimited() && used+need > c.cfg.MaxClientSlots {
		return errClientShare(p.id, client, need, used, c.cfg.MaxClientSlots)
	}
	var ok bool
	if p.reserved, ok = c.pool.AllocAt(0, need); !ok {
		holders, listed := "", 0
		for _, j := range c.sortedJobs() {
			if !j.pool.Overlaps(spans.Span{Base: 0, Size: need}) {
				continue
			}
			if listed++; listed > 4 {
				holders += " …"
				break
			}
			holders += fmt.Sprintf(" job %d (session %d, %s)", j.id(), j.sessionID, j.params.style())
		}
		if holders == "" {
			holders = " a p4app session still waiting for its ranks"
		}
		return status.Errorf(codes.ResourceExhausted,
			"session %d: p4app-style workers (no packet_size_bytes) address pool indices from slot 0, and slots [0, %d) are not all free (%d QPs × %d packets per message); held by%s. A p4app rank 0 ends p4app jobs in its way, never swml-rdma jobs: end those or send packet_size_bytes (swml-rdma workers do)",
			p.id, need, p.params.qps, p.params.ppm(), holders)
	}
	p.charged = client
	c.clientSlots[client] += need
	return nil
}

// replaceP4AppJobs clears the way for a new p4app job, as p4app-switchML's
// own controller does on every rank-0 RdmaSession (clear_rdma_workers): a
// p4app job always starts at slot 0, so running p4app jobs whose slots
// overlap [0, need) or that run under session sid are ended, and waiting
// p4app sessions in the way fail. Its workers never end their session, so
// without this the next p4app job would wait for IdleTimeout. It does
// nothing when a swml-rdma job holds any of those slots: those are never
// touched, and the registration is refused naming them.
func (c *Controller) replaceP4AppJobs(sid uint32, need uint32) {
	span := spans.Span{Base: 0, Size: need}
	c.mu.Lock()
	var victims []*job
	for _, j := range c.sortedJobs() {
		inWay := j.pool.Overlaps(span) || j.sessionID == sid
		if !inWay {
			continue
		}
		if !j.params.p4app {
			c.mu.Unlock()
			return
		}
		victims = append(victims, j)
	}
	for _, p := range c.pending {
		if p.id == sid && p.regs[0] == nil {
			continue // this rank 0 is joining it
		}
		if p.params.p4app && !p.starting && (p.reserved.Overlaps(span) || p.id == sid) {
			c.failPending(p, status.Errorf(codes.Aborted,
				"session %d: a new p4app-switchML job's rank 0 registered (session %d) and took its slots, as p4app's own controller does; start this job again", p.id, sid))
		}
	}
	c.mu.Unlock()
	for _, j := range victims {
		c.endJob(j, true, fmt.Sprintf("a new p4app-switchML job's rank 0 registered (session %d) and needs slots [0, %d): p4app workers never end their session, so the old job is ended, as p4app's own controller does", sid, need), endReasonReplaced)
	}
}

// sortedJobs is c.jobs by id. Holds c.mu.
func (c *Controller) sortedJobs() []*job {
	js := make([]*job, 0, len(c.jobs))
	for _, j := range c.jobs {
		js = append(js, j)
	}
	slices.SortFunc(js, func(a, b *job) int { return cmp.Compare(a.id(), b.id()) })
	return js
}

// releasePending frees what a p4app session took before its job existed:
// the reserved slots and the ranks' switch QPNs. Holds c.mu.
func (c *Controller) releasePending(p *pendingSession) {
	if p.reserved.Size != 0 {
		c.pool.Free(p.reserved)
		c.uncharge(p.charged, p.reserved.Size)
		p.reserved = spans.Span{}
	}
	for _, reg := range p.regs {
		c.releaseRegQPNs(reg)
	}
}

// releaseRegQPNs gives back the switch QPNs drawn for reg at registration
// (p4app; opaque QPNs are marked in use). Holds c.mu.
func (c *Controller) releaseRegQPNs(reg *registration) {
	if c.cfg.QPNScheme == QPNOpaque {
		for _, q := range reg.switchQPNs {
			delete(c.qpnsInUse, q)
		}
	}
	reg.switchQPNs = nil
}
