package control

// Job allocation: the last rank of a session is in, and its job is built
// and installed (docs/control-plane.md "Allocation").
//
//  1. allocJob, under Controller.mu, checks that the ranks' addresses are
//     free (Tofino QPNs) and that each client of the job has room in its
//     share of the pool, then takes a contiguous pool range (a p4app
//     session's reservation), a job id and token and, per rank, switch
//     QPNs and PSNs (drawSwitchQPs, randomQPN); wire.Job.Validate checks
//     the whole.
//  2. startJob installs it with Programmer.AddJob, outside the lock, files
//     it as running, starts its watches (liveness.go) and wakes the ranks.
//  3. Each rank's answer is response (buildResponse: the switch's side of
//     the connection and the rank's pool indices).
//
// A job that fails on the way, or ends (teardown.go), gives its slots and
// QPNs back in freeJob.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swml-rdma/swml-rdma/aggregation/control/internal/spans"
	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// startJob allocates and installs the job of a complete session, then
// wakes its waiters.
func (c *Controller) startJob(p *pendingSession) {
	defer c.starting.Done()
	c.mu.Lock()
	j, err := c.allocJob(p)
	c.mu.Unlock()
	var link UpstreamLink
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.SessionTimeout)
		spec := j.spec.Clone() // the backend may keep it
		err = c.cfg.Programmer.AddJob(ctx, &spec)
		if uj, ok := c.cfg.Programmer.(UpstreamJoiner); ok && err == nil {
			// A leaf's workers are answered once the spine's job exists
			// and the leaf is one of its workers.
			if link, err = uj.JoinUpstream(ctx, &spec, UpstreamSession{SessionID: p.id, MessageSize: p.params.messageSize,
				TensorBytes: p.params.tensorBytes}); err != nil {
				_ = c.cfg.Programmer.RemoveJob(ctx, j.id())
				err = fmt.Errorf("join the spine switch's job: %w", err)
			}
		}
		cancel()
		if or, ok := c.cfg.Programmer.(OrderReporter); ok && err == nil {
			j.orderGroups = orderGroups(or, j.id())
		}
		if err != nil {
			c.log.Error("switch refused job", "session", p.id, "job", j.id(), "err", err)
			err = refusal(p.id, j, err)
			c.mu.Lock()
			c.freeJob(j)
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	c.dropPending(p)
	if err == nil {
		c.jobs[j.id()] = j
		c.jobBySession[p.id] = j
		j.started = time.Now()
		c.stats.sessionsTotal++
		if c.cfg.LivenessTimeout > 0 && !p.params.p4app {
			j.liveness = time.AfterFunc(c.cfg.LivenessTimeout, func() { c.checkLiveness(j) })
		}
		if _, ok := c.cfg.Programmer.(ActivityReporter); ok && p.params.p4app && c.cfg.IdleTimeout > 0 {
			j.idle = time.AfterFunc(c.cfg.IdleTimeout, func() { c.checkIdle(j) })
		}
		if link != nil {
			j.upstream = link
			go c.watchUpstream(j, link)
		}
		c.log.Info("job started", "session", p.id, "job", j.id(), "workers", p.params.numWorkers,
			"qps", p.params.qps, "packet_size", p.params.packetSize, "pool_base", j.pool.Base, "pool_slots", j.pool.Size)
	}
	p.job, p.err = j, err
	close(p.done)
	c.mu.Unlock()
}

// refusal is a rank's error when the Programmer did not install job j:
// FAILED_PRECONDITION with reason ErrorReasonElementWidth when the switch
// cannot sum the job's element width (wire.ErrElementWidth: the request is
// valid, this switch is not built for it), UNAVAILABLE otherwise.
func refusal(sid uint32, j *job, err error) error {
	if errors.Is(err, wire.ErrElementWidth) {
		// The other width is the one to try: a Tofino program sums one.
		other := 32
		if j.spec.LaneBytes() == 4 {
			other = 16
		}
		return reasonError(codes.FailedPrecondition, ErrorReasonElementWidth, fmt.Sprintf(
			"session %d: the switch cannot sum %d-bit elements (job %d: %v); register the job for the %d-bit wire",
			sid, 8*j.spec.LaneBytes(), j.id(), err, other))
	}
	return status.Errorf(codes.Unavailable, "session %d: the switch did not install job %d: %v", sid, j.id(), err)
}

// allocJob picks the job id, pool range, switch QPNs and PSNs. Holds c.mu.
func (c *Controller) allocJob(p *pendingSession) (*job, error) {
	prm := p.params
	ppm := prm.ppm()
	need := uint32(prm.qps * ppm) // ≤ PoolSize: parseRegistration
	if c.cfg.QPNScheme == QPNP4App {
		for r := range prm.numWorkers {
			if other, busy := c.p4appAddrs[p.regs[r].addr]; busy {
				c.releasePending(p)
				return nil, status.Errorf(codes.FailedPrecondition,
					"session %d: rank %d's address %v is already in job %d; with Tofino QPNs a worker address can be in one job at a time — end job %d or give this worker another address",
					p.id, r, p.regs[r].addr, other, other)
			}
		}
	}
	var clients []string
	for r := range prm.numWorkers {
		if cl := p.regs[r].client; !slices.Contains(clients, cl) {
			clients = append(clients, cl)
		}
	}
	for _, cl := range clients {
		used := c.clientSlots[cl]
		if cl == p.charged {
			used -= p.reserved.Size // the reservation becomes this job's range
		}
		if c.clientShareLimited() && used+need > c.cfg.MaxClientSlots {
			c.releasePending(p)
			return nil, errClientShare(p.id, cl, need, used, c.cfg.MaxClientSlots)
		}
	}
	pool, ok := p.reserved, prm.p4app
	if !ok {
		pool, ok = c.pool.Alloc(need)
	}
	if !ok {
		free, largest := c.pool.Available()
		return nil, status.Errorf(codes.ResourceExhausted,
			"session %d: pool exhausted: the job needs %d slots (%d QPs × %d packets per message) but %d of %d slots are free (largest free range %d); end another job, use fewer QPs or smaller messages, or give the switch a larger pool",
			p.id, need, prm.qps, ppm, free, c.cfg.PoolSize, largest)
	}
	j := &job{
		sessionID:  p.id,
		params:     prm,
		pool:       pool,
		token:      newJobToken(),
		switchPSNs: make([][]uint32, prm.numWorkers),
		ended:      make([]bool, prm.numWorkers),
		attached:   make([]bool, prm.numWorkers),
		streamOpen: make([]bool, prm.numWorkers),
		done:       make(chan struct{}),
	}
	if c.cfg.QPNScheme == QPNOpaque && !prm.p4app && uint64(len(c.qpnsInUse))+uint64(prm.numWorkers*prm.qps) > (opaqueQPNHi-opaqueQPNLo)/2 {
		// Half full at most, so random picks find a free QPN quickly.
		c.pool.Free(pool)
		return nil, status.Errorf(codes.ResourceExhausted, "session %d: out of switch QPNs for %d workers × %d QPs; end other jobs", p.id, prm.numWorkers, prm.qps)
	}
	if p.reserved.Size != 0 {
		c.uncharge(p.charged, p.reserved.Size)
		p.reserved, p.charged = spans.Span{}, ""
	}
	for _, cl := range clients {
		c.clientSlots[cl] += need
	}
	j.clients = clients
	for c.jobs[c.nextJobID] != nil || c.nextJobID == 0 {
		c.nextJobID++
	}
	j.spec = wire.Job{
		ID:           c.nextJobID,
		DType:        prm.dtype,
		PacketSize:   prm.packetSize,
		ElementBytes: prm.elementBytes,
		PoolBase:     pool.Base,
		PoolSlots:    pool.Size,
		Workers:      make([]wire.Worker, prm.numWorkers),
	}
	c.nextJobID++
	gn, _ := c.cfg.Programmer.(GapNoticer)
	j.spec.GapNotices = gn != nil && gn.SendsGapNotices()
	for r := range prm.numWorkers {
		reg := p.regs[r]
		j.spec.GapNotices = j.spec.GapNotices && reg.gapNotices
		sq, psns := reg.switchQPNs, reg.switchPSNs
		if sq == nil {
			sq, psns = c.drawSwitchQPs(r, prm.qps)
		}
		j.switchPSNs[r] = psns
		j.packetWrites = j.packetWrites || reg.needsPacketWrites
		j.spec.Workers[r] = wire.Worker{
			Rank:       r,
			Addr:       reg.addr,
			MAC:        reg.mac,
			RKey:       reg.rkey,
			QPNs:       reg.qpns,
			PSNs:       reg.psns,
			SwitchQPNs: sq,

			IgnoresIPv4ID: reg.ignoresIPv4ID,
		}
		if c.cfg.QPNScheme == QPNP4App {
			c.p4appAddrs[reg.addr] = j.spec.ID
		}
	}
	if err := j.spec.Validate(); err != nil {
		c.freeJob(j)
		return nil, status.Errorf(codes.Internal, "session %d: %v", p.id, err)
	}
	return j, nil
}

// clientShareLimited: the operator gave one client less than the whole
// pool. Without that, a full pool is reported as such, not as a client's
// share.
func (c *Controller) clientShareLimited() bool { return c.cfg.MaxClientSlots < c.cfg.PoolSize }

// errClientShare is the RESOURCE_EXHAUSTED of a client whose share of the
// pool (MaxClientSlots) the job would exceed.
func errClientShare(sid uint32, client string, need, used, limit uint32) error {
	return status.Errorf(codes.ResourceExhausted,
		"session %d: client %s already holds %d pool slots and the job needs %d more; one client may hold %d (the switch's --client-pool-share): end one of its jobs or wait",
		sid, client, used, need, limit)
}

// uncharge takes n slots off client's count, dropping a client that holds
// none so that the table does not grow with clients gone. Holds c.mu.
func (c *Controller) uncharge(client string, n uint32) {
	if c.clientSlots[client] <= n {
		delete(c.clientSlots, client)
		return
	}
	c.clientSlots[client] -= n
}

// drawSwitchQPs picks rank's switch QPNs and PSNs. Holds c.mu.
func (c *Controller) drawSwitchQPs(rank, q int) (qpns, psns []uint32) {
	qpns, psns = make([]uint32, q), make([]uint32, q)
	for i := range q {
		if c.cfg.QPNScheme == QPNOpaque {
			qpns[i] = c.randomQPN()
		} else {
			qpns[i], _ = wire.P4AppQPN(rank, i) // bounds checked in parseRegistration
		}
		psns[i] = rand.Uint32() & rdma.PSNMask
	}
	return qpns, psns
}

// randomQPN picks an unused opaque switch QPN and marks it used; the space
// is at most half full (allocJob), so this takes two tries on average.
// Holds c.mu.
func (c *Controller) randomQPN() uint32 {
	for {
		q := opaqueQPNLo + rand.Uint32N(opaqueQPNHi-opaqueQPNLo)
		if _, used := c.qpnsInUse[q]; !used {
			c.qpnsInUse[q] = struct{}{}
			return q
		}
	}
}

// freeJob returns a job's pool range and QPNs. Holds c.mu.
func (c *Controller) freeJob(j *job) {
	c.pool.Free(j.pool)
	for _, cl := range j.clients {
		c.uncharge(cl, j.pool.Size)
	}
	j.clients = nil
	for _, w := range j.spec.Workers {
		if c.cfg.QPNScheme == QPNOpaque {
			for _, q := range w.SwitchQPNs {
				delete(c.qpnsInUse, q)
			}
		}
		if c.p4appAddrs[w.Addr] == j.id() {
			delete(c.p4appAddrs, w.Addr)
		}
	}
}

// response is rank's answer to RdmaSession.
func (c *Controller) response(j *job, rank int) *pb.RdmaSessionResponse {
	resp := c.buildResponse(j.sessionID, j.params, j.pool, j.spec.Workers[rank].SwitchQPNs, j.switchPSNs[rank])
	resp.JobId = j.id()
	resp.JobToken = slices.Clone(j.token)
	resp.PacketWrites = j.packetWrites
	resp.GapNotices = j.spec.GapNotices
	resp.QpOrderGroups = slices.Clone(j.orderGroups)
	return resp
}

// buildResponse is an RdmaSession answer without the job's id and token
// (which an early p4app answer cannot have yet).
func (c *Controller) buildResponse(sid uint32, prm sessionParams, pool spans.Span, qpns, psns []uint32) *pb.RdmaSessionResponse {
	ppm := prm.ppm()
	idx := make([]uint32, prm.qps)
	for i := range idx {
		idx[i] = uint32(wire.MakePoolIndex(pool.Base+uint32(i*ppm), 0))
	}
	resp := &pb.RdmaSessionResponse{
		SessionId:         uint64(sid),
		Mac:               macToUint64(c.cfg.SwitchMAC),
		Rkey:              uint32(wire.MakePoolIndex(pool.Base, 0)),
		Qpns:              slices.Clone(qpns),
		Psns:              slices.Clone(psns),
		PoolBase:          pool.Base,
		PoolSlots:         pool.Size,
		PacketSizeBytes:   uint32(prm.packetSize),
		QpPoolIndices:     idx,
		NumWorkers:        uint32(prm.numWorkers),
		PacketsPerMessage: uint32(ppm),
		WireBits:          8 * uint32(prm.elementBytes),
	}
	if c.cfg.SwitchIPv4.IsValid() {
		resp.Ipv4 = binary.BigEndian.Uint32(c.cfg.SwitchIPv4.AsSlice())
	}
	if prm.v6 {
		resp.Gid = c.cfg.SwitchIPv6.AsSlice()
	}
	return resp
}
