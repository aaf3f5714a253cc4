// Package perftest measures RDMA WRITE bandwidth between two verbs devices the
// way perftest's `ib_write_bw -c UC` does, and the same traffic pattern over
// bare batched UDP sockets as a baseline. The command `swml-rdma write-bw`
// and the soft-NIC benchmarks are built on it.
//
// Every message is an RDMA WRITE WITH IMMEDIATE, so the receiver sees one
// completion per delivered message: the result counts what arrived, not
// what was posted (UC has no retransmission; on loopback a receiver that
// falls behind loses datagrams).
//
// The ring all-reduce that `swml-rdma bench` compares SwitchML with lives
// in aggregation/ring.
package perftest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// Config is one bandwidth run.
type Config struct {
	Sender, Receiver verbs.Device
	Size             int           // message bytes
	Iters            int           // messages; 0 with Duration > 0 means run for Duration
	Duration         time.Duration // time limit
	MTU              verbs.MTU
	// Depth is the most messages in flight (posted, not yet completed at the
	// receiver); perftest's --tx-depth. Default 32.
	Depth int
	// Progress, if set, is called about every 100 ms with messages done.
	Progress func(done int)
}

// Result is what a run measured.
type Result struct {
	Bytes      int64         `json:"bytes"`      // payload bytes delivered
	Messages   int           `json:"messages"`   // messages delivered (completions)
	Posted     int           `json:"posted"`     // messages posted
	Lost       int           `json:"lost"`       // posted but never completed
	Packets    int64         `json:"packets"`    // packets delivered
	Elapsed    time.Duration `json:"elapsed_ns"` // first post to last completion
	Gbps       float64       `json:"gbit_per_s"` // payload Gbit/s
	PacketRate float64       `json:"packets_per_s"`
	MsgRate    float64       `json:"messages_per_s"`
	Size       int           `json:"size"`
	MTU        int           `json:"mtu"`
}

// ErrConfig: a Config that cannot run (size, count, devices).
var ErrConfig = errors.New("invalid configuration")

func (c *Config) check() error {
	if c.Sender == nil || c.Receiver == nil {
		return fmt.Errorf("perftest: %w: Sender and Receiver are required", ErrConfig)
	}
	if c.Size <= 0 || c.Size > 1<<30 {
		return fmt.Errorf("perftest: message size %d: %w: use 1 byte to 1 GiB", c.Size, ErrConfig)
	}
	if c.Iters < 0 || (c.Iters == 0 && c.Duration <= 0) {
		return fmt.Errorf("perftest: %w: neither Iters nor Duration is positive", ErrConfig)
	}
	if c.MTU == 0 {
		c.MTU = 1024
	}
	if err := c.MTU.Check(); err != nil {
		return err
	}
	if c.Depth <= 0 {
		c.Depth = 32
	}
	return nil
}

// WriteBW runs one UC RDMA WRITE bandwidth test from Sender to Receiver.
func WriteBW(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.check(); err != nil {
		return Result{}, err
	}
	const lossTimeout = 200 * time.Millisecond
	res := Result{Size: cfg.Size, MTU: int(cfg.MTU)}
	var cleanup []func() error
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			_ = cleanup[i]() // teardown; the measurement's own error is the one to report
		}
	}()
	type side struct {
		mr      verbs.MR
		scq     verbs.CQ
		rcq     verbs.CQ
		qp      verbs.QP
		devAddr verbs.Device
	}
	open := func(d verbs.Device, access verbs.Access) (*side, error) {
		pd, err := d.AllocPD()
		if err != nil {
			return nil, err
		}
		cleanup = append(cleanup, pd.Close)
		mr, err := pd.AllocMR(cfg.Size, access)
		if err != nil {
			return nil, err
		}
		cleanup = append(cleanup, mr.Close)
		scq, err := d.CreateCQ(cfg.Depth * 2)
		if err != nil {
			return nil, err
		}
		cleanup = append(cleanup, scq.Close)
		rcq, err := d.CreateCQ(cfg.Depth * 2)
		if err != nil {
			return nil, err
		}
		cleanup = append(cleanup, rcq.Close)
		qp, err := pd.CreateUCQP(verbs.QPConfig{SendCQ: scq, RecvCQ: rcq, MaxSendWR: cfg.Depth, MaxRecvWR: cfg.Depth * 2})
		if err != nil {
			return nil, err
		}
		cleanup = append(cleanup, qp.Close)
		return &side{mr: mr, scq: scq, rcq: rcq, qp: qp, devAddr: d}, nil
	}
	s, err := open(cfg.Sender, verbs.AccessLocalWrite)
	if err != nil {
		return res, fmt.Errorf("perftest: sender: %w", err)
	}
	r, err := open(cfg.Receiver, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return res, fmt.Errorf("perftest: receiver: %w", err)
	}
	if err := verbs.Connect(s.qp, verbs.AccessRemoteWrite, verbs.RTRAttr{RemoteQPN: r.qp.QPN(), RemoteAddr: cfg.Receiver.Addr(), RecvPSN: 0, MTU: cfg.MTU}, 0); err != nil {
		return res, err
	}
	if err := verbs.Connect(r.qp, verbs.AccessRemoteWrite, verbs.RTRAttr{RemoteQPN: s.qp.QPN(), RemoteAddr: cfg.Sender.Addr(), RecvPSN: 0, MTU: cfg.MTU}, 0); err != nil {
		return res, err
	}
	recvs := make([]verbs.RecvWR, cfg.Depth*2)
	if _, err := r.qp.PostRecv(recvs); err != nil {
		return res, err
	}
	for i := range s.mr.Bytes() {
		s.mr.Bytes()[i] = byte(i)
	}
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWriteWithImm, Local: verbs.SGE{Length: uint32(cfg.Size), LKey: s.mr.LKey()}, RKey: r.mr.RKey()}}
	wcs := make([]verbs.Completion, cfg.Depth*2)
	pktsPerMsg := int64((cfg.Size + int(cfg.MTU) - 1) / int(cfg.MTU))

	start := time.Now()
	var deadline time.Time
	if cfg.Duration > 0 {
		deadline = start.Add(cfg.Duration)
	}
	lastProgress := start
	lastCompletion := start
	inflight := 0
	for {
		now := time.Now()
		stop := (cfg.Iters > 0 && res.Posted >= cfg.Iters) || (!deadline.IsZero() && now.After(deadline)) || ctx.Err() != nil
		if stop && inflight == 0 {
			break
		}
		if !stop && inflight < cfg.Depth {
			wr[0].ID = uint64(res.Posted)
			wr[0].Imm = uint32(res.Posted)
			if _, err := s.qp.PostSend(wr); err != nil {
				return res, err
			}
			res.Posted++
			inflight++
			continue
		}
		n, err := r.rcq.Poll(wcs)
		if err != nil {
			return res, err
		}
		if n == 0 {
			if time.Since(lastCompletion) > lossTimeout {
				// The rest of the window is lost (UC: no retransmission).
				res.Lost += inflight
				inflight = 0
				lastCompletion = time.Now()
				continue
			}
			waitCtx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			n, err = r.rcq.Wait(waitCtx, wcs)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				return res, err
			}
		}
		for i := 0; i < n; i++ {
			if err := wcs[i].Err(); err != nil {
				return res, err
			}
			res.Messages++
			res.Bytes += int64(cfg.Size)
		}
		if n > 0 {
			inflight -= n
			if inflight < 0 {
				inflight = 0
			}
			lastCompletion = time.Now()
			if _, err := r.qp.PostRecv(recvs[:n]); err != nil {
				return res, err
			}
		}
		if cfg.Progress != nil && time.Since(lastProgress) > 100*time.Millisecond {
			cfg.Progress(res.Messages)
			lastProgress = time.Now()
		}
	}
	res.Elapsed = lastCompletion.Sub(start)
	if res.Elapsed <= 0 {
		res.Elapsed = time.Since(start)
	}
	res.Packets = int64(res.Messages) * pktsPerMsg
	sec := res.Elapsed.Seconds()
	res.Gbps = float64(res.Bytes) * 8 / sec / 1e9
	res.PacketRate = float64(res.Packets) / sec
	res.MsgRate = float64(res.Messages) / sec
	return res, ctx.Err()
}

// PacketLen is the UDP payload of one full-MTU packet of a write (for
// baselines that must move the same datagrams).
func PacketLen(mtu verbs.MTU) int { return rdma.PacketLen(rdma.UCRDMAWriteMiddle, int(mtu)) }
