package sweep

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/benchmark"
	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
)

// runSwitchML runs one SwitchML job alone: session id 1, every worker on
// its first address. The row gets its result.
func (r *runner) runSwitchML(ctx context.Context, lab *netlab.Lab, row *Row) error {
	jobs, drops, err := r.runSwitchMLJobs(ctx, lab, row, 1)
	if err != nil {
		return err
	}
	j := jobs[0]
	row.SwitchDrops = drops
	row.Times = j.Times
	row.Packets, row.Retransmissions, row.ResendCauses = j.Packets, j.Retransmissions, j.ResendCauses
	row.CPUUserNs, row.CPUSysNs, row.SwitchCPUNs = j.CPUUserNs, j.CPUSysNs, j.switchCPU
	row.setMessages(j.Messages)
	row.ResultSHA256, row.Verified = j.ResultSHA256, true
	return nil
}

// runShared runs row.Jobs SwitchML jobs at once after the row's solo job
// (whose result row holds) and fills sh with them and their shares.
func (r *runner) runShared(ctx context.Context, lab *netlab.Lab, row *Row, sh *Shared) error {
	jobs, drops, err := r.runSwitchMLJobs(ctx, lab, row, row.Jobs)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		// Every job's inputs are its ranks' (the same generator as the
		// solo job's), so every job's sum is the solo job's.
		if j.ResultSHA256 != row.ResultSHA256 {
			return fmt.Errorf("job %d: result digest %s is not the solo job's %s: %w", j.Job, j.ResultSHA256, row.ResultSHA256, benchmark.ErrMismatch)
		}
	}
	sh.Jobs, sh.SwitchDrops = jobs, drops
	sh.setShares(row.ATEPerSec)
	return nil
}

// runSwitchMLJobs runs n SwitchML jobs at once on one switch daemon (a
// fresh one, so that its drops are these jobs'): job j (1 … n) is session
// j, its rank i the worker process in worker namespace i bound to that
// namespace's j-th address, calling the controller at the switch's j-th
// address (the controller listens on all of them): the lab routes that
// from the worker's j-th address, which the controller requires to be
// the RoCE address registered. Every process of every job is started before
// any is waited for, rank by rank, so the jobs start together. Each
// worker verifies its every result; the ranks of a job must agree on the
// result's digest. It returns each job's result and the switch's non-zero
// drops by reason.
func (r *runner) runSwitchMLJobs(ctx context.Context, lab *netlab.Lab, row *Row, n int) ([]*Job, map[string]uint64, error) {
	if n > len(lab.Addrs) {
		return nil, nil, fmt.Errorf("%d jobs in a lab of %d addresses per worker: %w", n, len(lab.Addrs), netlab.ErrTooManyAddrs)
	}
	sws, err := r.startSwitches(ctx, lab)
	if err != nil {
		return nil, nil, err
	}
	defer stopAll(sws)
	var all []*proc
	defer func() { stopAll(all) }()
	byJob := make([][]*proc, n)
	for i, ns := range lab.Workers {
		for j := range n {
			ctl := netip.AddrPortFrom(lab.SwitchAddrs[j], ControllerPort).String()
			if len(lab.Leaves) > 0 { // one job (Config.Validate): rank i registers with its leaf
				_, leaf := lab.WorkerSwitch(i)
				ctl = netip.AddrPortFrom(leaf, ControllerPort).String()
			}
			args := append([]string{"worker", "--controller", ctl, "--session-id", strconv.Itoa(j + 1), "--addr", lab.Addrs[j][i].String(), "--rank", strconv.Itoa(i),
				"--workers", strconv.Itoa(row.Workers), "--size", strconv.Itoa(row.TensorBytes), "--iters", strconv.Itoa(row.Iters),
				"--warmup", strconv.Itoa(row.Warmup), "--packet-size", strconv.Itoa(r.cfg.PacketSize), "--msg-size", strconv.Itoa(r.cfg.MessageSize),
				"--wire", strconv.Itoa(row.WireBits), "--json", "--log-level", "warn"}, r.cfg.WorkerArgs...)
			name := fmt.Sprintf("worker rank %d", i)
			if n > 1 {
				name = fmt.Sprintf("job %d worker rank %d", j+1, i)
			}
			cmd := lab.Command(ctx, ns, r.cfg.Exe, args...)
			cmd.Env = r.goEnv(lab)
			p, err := startProc(cmd, name)
			if err != nil {
				return nil, nil, err
			}
			all = append(all, p)
			byJob[j] = append(byJob[j], p)
		}
	}
	if err := waitAll(all); err != nil {
		return nil, nil, err
	}
	cpu, drops, err := stopSwitches(sws)
	if err != nil {
		return nil, nil, err
	}
	switchCPU := int64(cpu) / int64(n*(row.Warmup+row.Iters))
	perCall := (row.TensorBytes + r.cfg.MessageSize - 1) / r.cfg.MessageSize
	jobs := make([]*Job, n)
	for j, procs := range byJob {
		job, err := jobOf(procs, row)
		if err != nil {
			return nil, nil, err
		}
		job.Job, job.SessionID, job.switchCPU = j+1, uint32(j+1), switchCPU
		job.Messages = uint64(row.Workers * (row.Warmup + row.Iters) * perCall)
		job.RetransmissionsPerMessage = perMessage(job.Retransmissions, job.Messages)
		jobs[j] = job
	}
	return jobs, drops, nil
}

// startSwitch starts a fresh switch daemon in the lab's switch namespace,
// its controller on every address of that namespace (ControllerPort).
func (r *runner) startSwitch(ctx context.Context, lab *netlab.Lab) (*proc, error) {
	listen := fmt.Sprintf(":%d", ControllerPort) // every address of the switch namespace: the switch's
	name := "switch"
	if len(lab.Leaves) > 0 {
		name = "spine switch"
	}
	cmd := lab.Command(ctx, lab.Switch, r.cfg.Exe, append([]string{"switch", "--addr", lab.SwitchAddr.String(), "--controller-addr", listen,
		"--log-level", "warn", "--json"}, r.cfg.SwitchArgs...)...)
	cmd.Env = r.goEnv(lab)
	return startProc(cmd, name)
}

// startSwitches starts the lab's switch daemons: the switch (startSwitch),
// or in a tree the spine (an ordinary switch) and then one leaf switch per
// leaf namespace, bound to the leaf's address with its controller on
// ControllerPort, joining the spine's controller as leaf j of the leaves
// with the ranks of its workers (docs/switch.md "Switch hierarchy"). On an
// error those started are ended again.
func (r *runner) startSwitches(ctx context.Context, lab *netlab.Lab) ([]*proc, error) {
	sw, err := r.startSwitch(ctx, lab)
	if err != nil {
		return nil, err
	}
	sws := []*proc{sw}
	if len(lab.Leaves) == 0 {
		return sws, nil
	}
	spine := netip.AddrPortFrom(lab.SwitchAddr, ControllerPort).String()
	// A leaf registers with the spine's controller once, when its last
	// worker registers: the spine must listen by then.
	if err := waitListening(ctx, lab, lab.Switch, spine, sw); err != nil {
		stopAll(sws)
		return nil, err
	}
	for j, ns := range lab.Leaves {
		args := append([]string{"switch", "--addr", lab.LeafAddrs[j].String(), "--controller-addr", fmt.Sprintf(":%d", ControllerPort),
			"--upstream", spine, "--leaves", strconv.Itoa(len(lab.Leaves)), "--leaf-index", strconv.Itoa(j),
			"--leaf-workers", strconv.Itoa(lab.WorkersPerLeaf()), "--log-level", "warn", "--json"}, r.cfg.SwitchArgs...)
		cmd := lab.Command(ctx, ns, r.cfg.Exe, args...)
		cmd.Env = r.goEnv(lab)
		p, err := startProc(cmd, fmt.Sprintf("leaf switch %d", j))
		if err != nil {
			stopAll(sws)
			return nil, err
		}
		sws = append(sws, p)
	}
	return sws, nil
}

// waitListening waits until a TCP connection to addr from namespace ns
// succeeds (at most 30 s), or p, which is to listen there, has exited.
func waitListening(ctx context.Context, lab *netlab.Lab, ns, addr string, p *proc) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := lab.Do(ns, func() error {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				_ = c.Close() // a probe: nothing was sent
			}
			return err
		})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: its controller %s not listening after 30s: %w", p.name, addr, err)
		}
		if syscall.Kill(p.cmd.Process.Pid, 0) != nil {
			return p.failure(fmt.Errorf("exited before its controller listened on %s", addr))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stopSwitches ends the daemons startSwitches started, the leaves before
// the spine, and returns their CPU summed and their drops summed by
// reason.
func stopSwitches(sws []*proc) (time.Duration, map[string]uint64, error) {
	var cpu time.Duration
	drops := map[string]uint64{}
	for i := len(sws) - 1; i >= 0; i-- {
		c, d, err := stopSwitch(sws[i])
		if err != nil {
			return 0, nil, err
		}
		cpu += c
		for reason, v := range d {
			drops[reason] += v
		}
	}
	return cpu, drops, nil
}

// stopSwitch ends a switch daemon with SIGTERM, on which it prints its
// final counters (swswitch.Totals), and returns its CPU over its life
// (user + kernel) and its non-zero drops by reason.
func stopSwitch(sw *proc) (time.Duration, map[string]uint64, error) {
	sw.terminate()
	if err := sw.cmd.Wait(); err != nil {
		return 0, nil, sw.failure(err)
	}
	var cpu time.Duration
	if ps := sw.cmd.ProcessState; ps != nil {
		cpu = ps.UserTime() + ps.SystemTime()
	}
	var totals swswitch.Totals
	if err := json.Unmarshal(sw.stdout.Bytes(), &totals); err != nil {
		return 0, nil, fmt.Errorf("switch: its final counters: %w", err)
	}
	drops := map[string]uint64{}
	for reason, v := range totals.Drops {
		if v > 0 {
			drops[reason] = v
		}
	}
	return cpu, drops, nil
}

// jobOf sums and summarises the worker records of one job's processes:
// the slowest rank's median, the extremes over ranks, every rank verified
// and agreeing on the result's digest.
func jobOf(procs []*proc, row *Row) (*Job, error) {
	job := &Job{}
	var meds, mins, maxs []time.Duration
	for _, p := range procs {
		var res benchmark.WorkerRecord
		if err := json.Unmarshal(p.stdout.Bytes(), &res); err != nil {
			return nil, fmt.Errorf("%s: its JSON: %w", p.name, err)
		}
		if !res.Verified {
			return nil, fmt.Errorf("%s: result not verified: %w", p.name, benchmark.ErrMismatch)
		}
		if job.ResultSHA256 == "" {
			job.ResultSHA256 = res.ResultSHA256
		} else if res.ResultSHA256 != job.ResultSHA256 {
			return nil, fmt.Errorf("%s: result digest %s is not rank 0's %s: %w", p.name, res.ResultSHA256, job.ResultSHA256, benchmark.ErrMismatch)
		}
		meds = append(meds, time.Duration(res.MedianNs))
		mins = append(mins, time.Duration(res.MinNs))
		maxs = append(maxs, time.Duration(res.MaxNs))
		job.Packets += res.Packets
		job.Retransmissions += res.Retransmissions
		job.ResendCauses.Add(res.ResendCauses)
		job.CPUUserNs += res.CPUUserNs / int64(row.Iters)
		job.CPUSysNs += res.CPUSysNs / int64(row.Iters)
	}
	job.Times = benchmark.TimesOf(slices.Max(meds), slices.Min(mins), slices.Max(maxs), row.Elements)
	first := slices.MinFunc(procs, func(a, b *proc) int { return a.started.Compare(b.started) }).started
	last := slices.MaxFunc(procs, func(a, b *proc) int { return a.exited.Compare(b.exited) }).exited
	job.SpanNs = int64(last.Sub(first))
	job.Verified = true
	return job, nil
}
