package sweep

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/benchmark"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
)

// ErrGloo is wrapped by a row's error when a Gloo rank reports a failure
// of its own or a record that does not fit the row.
var ErrGloo = errors.New("gloo rank failed")

// glooResult is what gloo_allreduce.py (netlab.GlooScript) prints.
type glooResult struct {
	Rank         int     `json:"rank"`
	TimesNs      []int64 `json:"times_ns"`
	ResultSHA256 string  `json:"result_sha256"`
	Verified     bool    `json:"verified"`
	Error        string  `json:"error"`
	CPUUserNs    int64   `json:"cpu_user_ns"`
	CPUSysNs     int64   `json:"cpu_sys_ns"`
}

// runGloo runs torch.distributed's Gloo all_reduce, one Python process per
// worker namespace, rendezvous at worker 0, over the workers' links.
func (r *runner) runGloo(ctx context.Context, lab *netlab.Lab, row *Row) error {
	master := netip.AddrPortFrom(lab.WorkerAddrs[0], GlooPort).String()
	var procs []*proc
	defer func() { stopAll(procs) }()
	for i, ns := range lab.Workers {
		cmd := lab.Command(ctx, ns, r.cfg.Python, r.glooScript, "--rank", strconv.Itoa(i), "--workers", strconv.Itoa(row.Workers),
			"--master", master, "--elements", strconv.Itoa(row.Elements), "--iters", strconv.Itoa(row.Iters), "--warmup", strconv.Itoa(row.Warmup),
			"--timeout", strconv.Itoa(int(math.Ceil(r.cfg.Timeout.Seconds()))))
		cmd.Env = append(os.Environ(), "GLOO_SOCKET_IFNAME="+netlab.WorkerIf, "OMP_NUM_THREADS=1")
		p, err := startProc(cmd, fmt.Sprintf("gloo rank %d", i))
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	if err := waitAll(procs); err != nil {
		return err
	}
	var meds, mins, maxs []time.Duration
	for _, p := range procs {
		var res glooResult
		if err := json.Unmarshal(bytes.TrimSpace(p.stdout.Bytes()), &res); err != nil {
			return fmt.Errorf("%s: its JSON: %w", p.name, err)
		}
		switch {
		case res.Error != "":
			return fmt.Errorf("%s: %w: %s", p.name, ErrGloo, res.Error)
		case !res.Verified:
			return fmt.Errorf("%s: result not verified: %w", p.name, benchmark.ErrMismatch)
		case len(res.TimesNs) != row.Iters:
			return fmt.Errorf("%s: %w: %d times for %d all-reduces", p.name, ErrGloo, len(res.TimesNs), row.Iters)
		}
		if row.ResultSHA256 == "" {
			row.ResultSHA256 = res.ResultSHA256
		} else if res.ResultSHA256 != row.ResultSHA256 {
			return fmt.Errorf("%s: result digest %s is not rank 0's %s: %w", p.name, res.ResultSHA256, row.ResultSHA256, benchmark.ErrMismatch)
		}
		ts := make([]time.Duration, len(res.TimesNs))
		for i, t := range res.TimesNs {
			ts[i] = time.Duration(t)
		}
		s := benchmark.Summarize(ts, row.Elements)
		meds, mins, maxs = append(meds, s.Median), append(mins, s.Min), append(maxs, s.Max)
		row.CPUUserNs += res.CPUUserNs / int64(row.Iters)
		row.CPUSysNs += res.CPUSysNs / int64(row.Iters)
	}
	row.setTimes(slices.Max(meds), slices.Min(mins), slices.Max(maxs))
	row.Verified = true
	return nil
}
