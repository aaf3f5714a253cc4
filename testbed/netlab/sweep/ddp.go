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
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/benchmark"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
)

// ErrDDP is wrapped by a DDP row's error when a rank reports a failure of
// its own, a record that does not fit the row, ranks that disagree on the
// trained parameters, or a loss that did not decrease.
var ErrDDP = errors.New("DDP training failed")

// ddpResult is what ddp_lab.py (netlab.DDPScript) prints.
type ddpResult struct {
	Rank                  int       `json:"rank"`
	Backend               string    `json:"backend"`
	DType                 string    `json:"dtype"`
	WireBits              int       `json:"wire_bits"`
	Params                int       `json:"params"`
	AllReduceBytesPerStep int       `json:"allreduce_bytes_per_step"`
	StepNs                []int64   `json:"step_ns"`
	FwdBwdNs              []int64   `json:"fwd_bwd_ns"`
	OptimizerNs           []int64   `json:"optimizer_ns"`
	ComputeNs             []int64   `json:"compute_ns"`
	Losses                []float64 `json:"losses"`
	ParamsSHA256          string    `json:"params_sha256"`
	ParamL2               float64   `json:"param_l2"`
	CPUUserNs             int64     `json:"cpu_user_ns"`
	CPUSysNs              int64     `json:"cpu_sys_ns"`
	Error                 string    `json:"error"`
}

// ddpDType is the dtype sys sends for a DDPConfig.DTypes entry: Gloo's
// bf16 is float16 (DDPConfig.DTypes).
func ddpDType(sys System, dtype string) string {
	if sys == DDPGloo && dtype == DTypeBF16 {
		return DTypeFP16
	}
	return dtype
}

// ddpRow is a DDP row before its run: the model's size and the bytes its
// ranks all-reduce per step.
func (r *runner) ddpRow(sys System, dtype string, n int, rate uint64, loss float64) *Row {
	d := r.cfg.DDP
	dt := ddpDType(sys, dtype)
	params := d.Params()
	return &Row{System: sys, Workers: n, RateBps: rate, Loss: loss, TensorBytes: params * dtypeSize(dt), Elements: params,
		Iters: d.Steps, Warmup: d.Warmup, LoadAvg: loadAvg(), Jobs: 1,
		DDP: &DDPRow{DType: dt, Params: params, Layers: d.Layers, Width: d.Width, Batch: d.Batch, AllReduceBytesPerStep: params * dtypeSize(dt)}}
}

// ddpEnv is the environment of a DDP rank: Gloo's TCP (DDPGloo's, and the
// swml backend's inner group's) on the worker's link, one thread of
// arithmetic per rank, and for the swml backend the controller, this
// rank's RoCE address and where the swml package and libswml are.
func (r *runner) ddpEnv(sys System, ctl netip.AddrPort, addr netip.Addr) []string {
	env := append(os.Environ(), "GLOO_SOCKET_IFNAME="+netlab.WorkerIf, "OMP_NUM_THREADS=1")
	if sys != DDPSwml {
		return env
	}
	env = append(env, "SWML_CONTROLLER="+ctl.String(), "SWML_ADDR="+addr.String())
	if p := r.cfg.DDP.SwmlPythonPath; p != "" {
		if old := os.Getenv("PYTHONPATH"); old != "" {
			p += string(os.PathListSeparator) + old
		}
		env = append(env, "PYTHONPATH="+p)
	}
	if l := r.cfg.DDP.LibSwml; l != "" {
		env = append(env, "SWML_LIB="+l)
	}
	return env
}

// checkDDPPython checks, before any lab is built, that Config.Python
// imports torch.distributed and, for DDPSwml, the swml package with its
// library, in the environment its ranks get.
func (r *runner) checkDDPPython(ctx context.Context) error {
	for _, sys := range r.cfg.ddpSystems() {
		code := "import torch.distributed"
		if sys == DDPSwml {
			code += "; import swml; swml.load()"
		}
		cmd := exec.CommandContext(ctx, r.cfg.Python, "-c", code)
		cmd.Env = r.ddpEnv(sys, netip.AddrPort{}, netip.Addr{})
		if out, err := cmd.CombinedOutput(); err != nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			return fmt.Errorf("sweep: %s: %s cannot %q: %w: %s", sys, r.cfg.Python, code, err, lines[len(lines)-1])
		}
	}
	return nil
}

// runDDP trains the model of Config.DDP with DistributedDataParallel, one
// Python process per worker namespace, rendezvous at worker 0; for DDPSwml
// through a fresh switch daemon in the switch namespace, whose CPU and
// drops the row gets.
func (r *runner) runDDP(ctx context.Context, lab *netlab.Lab, row *Row) error {
	backend := "gloo"
	var sw *proc
	if row.System == DDPSwml {
		backend = "swml"
		var err error
		if sw, err = r.startSwitch(ctx, lab); err != nil {
			return err
		}
		defer stopAll([]*proc{sw})
	}
	d := r.cfg.DDP
	master := netip.AddrPortFrom(lab.WorkerAddrs[0], GlooPort).String()
	ctl := netip.AddrPortFrom(lab.SwitchAddr, ControllerPort)
	var procs []*proc
	defer func() { stopAll(procs) }()
	for i, ns := range lab.Workers {
		cmd := lab.Command(ctx, ns, r.cfg.Python, r.ddpScript, "--backend", backend, "--rank", strconv.Itoa(i), "--workers", strconv.Itoa(row.Workers),
			"--master", master, "--dtype", row.DDP.DType, "--layers", strconv.Itoa(d.Layers), "--width", strconv.Itoa(d.Width),
			"--batch", strconv.Itoa(d.Batch), "--steps", strconv.Itoa(d.Steps), "--warmup", strconv.Itoa(d.Warmup),
			"--compute-steps", strconv.Itoa(d.ComputeSteps), "--timeout", strconv.Itoa(int(math.Ceil(r.cfg.Timeout.Seconds()))))
		cmd.Env = r.ddpEnv(row.System, ctl, lab.WorkerAddrs[i])
		if row.System == DDPSwml {
			cmd.Env = append(cmd.Env, r.goMaxProcsVar(lab)) // libswml's runtime
		}
		p, err := startProc(cmd, fmt.Sprintf("%s rank %d", row.System, i))
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	if err := waitAll(procs); err != nil {
		return err
	}
	results := make([]ddpResult, len(procs))
	for i, p := range procs {
		if err := json.Unmarshal(bytes.TrimSpace(p.stdout.Bytes()), &results[i]); err != nil {
			return fmt.Errorf("%s: its JSON: %w", p.name, err)
		}
	}
	if err := row.setDDP(results); err != nil {
		return err
	}
	if sw != nil {
		cpu, drops, err := stopSwitch(sw)
		if err != nil {
			return err
		}
		row.SwitchCPUNs, row.SwitchDrops = int64(cpu)/int64(d.Warmup+d.Steps), drops
	}
	return nil
}

// setDDP fills a DDP row from its ranks' records: the slowest rank's
// median of each time, the extremes of the step times over the ranks, CPU
// per step summed over the ranks, losses averaged over them. The ranks
// must agree on the model, the wire and the final parameters (bit for
// bit: both backends give every rank the same sums), and the mean loss
// must have decreased; else the row fails with ErrDDP.
func (row *Row) setDDP(results []ddpResult) error {
	d := row.DDP
	var meds, mins, maxs, fwdBwd, opt, compute []time.Duration
	var cpu int64
	for i, res := range results {
		name := fmt.Sprintf("%s rank %d", row.System, i)
		switch {
		case res.Error != "":
			return fmt.Errorf("%s: %w: %s", name, ErrDDP, res.Error)
		case res.Params != d.Params || res.DType != d.DType:
			return fmt.Errorf("%s: %w: %d parameters of %s, the row's %d of %s", name, ErrDDP, res.Params, res.DType, d.Params, d.DType)
		case len(res.StepNs) != row.Iters || len(res.FwdBwdNs) != row.Iters || len(res.OptimizerNs) != row.Iters ||
			len(res.Losses) != row.Warmup+row.Iters || len(res.ComputeNs) == 0:
			return fmt.Errorf("%s: %w: %d step times and %d losses for %d timed of %d steps", name, ErrDDP, len(res.StepNs), len(res.Losses), row.Iters,
				row.Warmup+row.Iters)
		case i > 0 && res.ParamsSHA256 != results[0].ParamsSHA256:
			return fmt.Errorf("%s: parameters %.12s… are not rank 0's %.12s…: %w (%w)", name, res.ParamsSHA256, results[0].ParamsSHA256, ErrDDP,
				benchmark.ErrMismatch)
		case i > 0 && res.WireBits != results[0].WireBits:
			return fmt.Errorf("%s: %w: a %d-bit wire, rank 0's %d", name, ErrDDP, res.WireBits, results[0].WireBits)
		}
		s := durations(res.StepNs)
		meds, mins, maxs = append(meds, median(s)), append(mins, slices.Min(s)), append(maxs, slices.Max(s))
		fwdBwd, opt, compute = append(fwdBwd, median(durations(res.FwdBwdNs))), append(opt, median(durations(res.OptimizerNs))),
			append(compute, median(durations(res.ComputeNs)))
		cpu += res.CPUUserNs + res.CPUSysNs
		row.CPUUserNs += res.CPUUserNs / int64(row.Iters)
		row.CPUSysNs += res.CPUSysNs / int64(row.Iters)
	}
	n := len(results)
	row.Times = benchmark.TimesOf(slices.Max(meds), slices.Min(mins), slices.Max(maxs), row.Elements)
	row.Gbps = row.ATEPerSec * float64(8*dtypeSize(d.DType)) / 1e9
	row.WireBits = results[0].WireBits
	d.FwdBwdNs, d.OptimizerNs, d.ComputeNs = int64(slices.Max(fwdBwd)), int64(slices.Max(opt)), int64(slices.Max(compute))
	d.ExposedCommNs = max(0, d.FwdBwdNs-d.ComputeNs)
	d.CPUNsPerStepPerRank = cpu / int64(row.Iters) / int64(n)
	for _, res := range results {
		d.LossFirst += res.Losses[0] / float64(n)
		d.LossLast += res.Losses[len(res.Losses)-1] / float64(n)
	}
	d.ParamsSHA256, d.ParamL2 = results[0].ParamsSHA256, results[0].ParamL2
	if !(d.LossLast < d.LossFirst) {
		return fmt.Errorf("%s: %w: the mean loss did not decrease over %d steps (%.6g, then %.6g)", row.System, ErrDDP, row.Warmup+row.Iters,
			d.LossFirst, d.LossLast)
	}
	row.Verified = true
	return nil
}

func durations(ns []int64) []time.Duration {
	ds := make([]time.Duration, len(ns))
	for i, x := range ns {
		ds[i] = time.Duration(x)
	}
	return ds
}

// median is the median of ds as benchmark.Summarize takes it (the upper
// of the middle two of an even count), as the other rows' times are; ds
// must not be empty.
func median(ds []time.Duration) time.Duration {
	return benchmark.Summarize(ds, 1).Median
}
