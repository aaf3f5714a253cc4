package sweep

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/benchmark"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
)

// SchemaVersion is Report.SchemaVersion, bumped on any incompatible change
// of the JSON (docs/netlab.md "Output" lists its keys).
const SchemaVersion = 1

// Report is a sweep's result: the host, the sweep's protocol settings,
// and a row per system and (workers, rate, loss, size).
type Report struct {
	SchemaVersion int      `json:"schema_version"`
	Kernel        string   `json:"kernel"`
	CPUs          int      `json:"cpus"`
	QueueNs       int64    `json:"queue_ns"`
	PacketSize    int      `json:"packet_size"`
	MessageSize   int      `json:"message_size"`
	WorkerArgs    []string `json:"worker_args"`
	// WirePackets: the links cut GSO/TSO datagrams into packets before
	// the loss rules (a sweep with loss; netlab.Lab.SetWirePackets).
	WirePackets  bool   `json:"wire_packets"`
	LoadAvgStart string `json:"load_avg_start"`
	LoadAvgEnd   string `json:"load_avg_end"`
	Rows         []*Row `json:"rows"`
}

// Row is one system's run in one row of the sweep.
type Row struct {
	System System `json:"system"`
	// WireBits is SwitchML's element width on the wire (32 or 16; 0 in
	// Gloo's and the ring's rows).
	WireBits int `json:"wire_bits"`
	Workers  int `json:"workers"`
	// Leaves is 0 for a row on one switch, K ≥ 2 for a two-level tree of
	// K leaves of Workers ÷ K workers each under a spine (SwitchML rows,
	// Config.Leaves), whose leaf–spine links run at SpineRateBps (0:
	// unshaped).
	Leaves       int    `json:"leaves"`
	SpineRateBps uint64 `json:"spine_rate_bps"`
	// GoMaxProcs is GOMAXPROCS of the row's Go processes (SwitchML's and
	// DDPSwml's; 0 in the other rows): Config.GoMaxProcs, or the share.
	GoMaxProcs  int     `json:"gomaxprocs"`
	RateBps     uint64  `json:"rate_bps"` // 0: unshaped
	Loss        float64 `json:"loss"`
	TensorBytes int     `json:"tensor_bytes"`
	Elements    int     `json:"elements"`
	Iters       int     `json:"iters"`
	Warmup      int     `json:"warmup"`
	// Times: the median is the slowest rank's median time per all-reduce
	// (the ring runs in one process: the median of whole all-reduces); the
	// minimum and maximum the extremes over ranks.
	benchmark.Times
	// CeilingATEPerSec is the system's link-rate ceiling (0 unshaped);
	// OfCeiling ATE/s ÷ it; VsGloo ATE/s ÷ Gloo's in the same row.
	CeilingATEPerSec float64  `json:"ceiling_ate_per_s"`
	OfCeiling        *float64 `json:"of_ceiling"`
	VsGloo           *float64 `json:"vs_gloo"`
	// LossInflation is the median ÷ the median of the same system's
	// loss-free row (same workers, rate and size) of this sweep; nil
	// without one.
	LossInflation *float64 `json:"loss_inflation"`
	// Packets the system's senders sent (SwitchML: the workers'; ring:
	// its ranks', acknowledgements included; Gloo: not counted).
	Packets uint64 `json:"packets"`
	// Retransmissions: SwitchML messages resent by the workers, ring
	// messages resent, Gloo TCP segments retransmitted (kernel).
	Retransmissions uint64 `json:"retransmissions"`
	// Messages are the messages first sent (SwitchML: the tensor's,
	// workers × all-reduces × ⌈size ÷ message⌉, warm-up included — a
	// worker's record has no message count; ring: its ranks' count),
	// RetransmissionsPerMessage Retransmissions ÷ Messages; 0 and nil for
	// Gloo.
	Messages                  uint64   `json:"messages"`
	RetransmissionsPerMessage *float64 `json:"retransmissions_per_message"`
	// Why SwitchML's workers resent (summed over them; zero otherwise).
	benchmark.ResendCauses
	// SwitchDrops are the software switch's non-zero drops by reason
	// (SwitchML).
	SwitchDrops map[string]uint64 `json:"switch_drops,omitempty"`
	// Kernel counters over the run (netlab.Counters): full socket receive
	// buffers (all namespaces, and the switch namespace's alone), tbf queue
	// drops (all, then worker → switch and switch → worker), and the loss
	// rules' drops.
	UDPRcvbufErrors       uint64 `json:"udp_rcvbuf_errors"`
	SwitchUDPRcvbufErrors uint64 `json:"switch_udp_rcvbuf_errors"`
	QueueDrops            uint64 `json:"queue_drops"`
	QueueDropsUp          uint64 `json:"queue_drops_up"`
	QueueDropsDown        uint64 `json:"queue_drops_down"`
	LossDrops             uint64 `json:"loss_drops"`
	// CPU per measured all-reduce, summed over the system's processes
	// (each measures itself around its calls, not its checks: SwitchML's
	// workers and Gloo's ranks; the ring runs in the sweep's process and is
	// not measured), in user and kernel mode; SwitchCPUNs is the switch
	// daemon's CPU over its life ÷ the all-reduces it served (warm-up
	// included; SwitchML only). Kernel time includes the network stack's
	// work done in the process's system calls (on a veth, often the
	// receiving side's too). 0 when not measured.
	CPUUserNs    int64  `json:"cpu_user_ns_per_call"`
	CPUSysNs     int64  `json:"cpu_sys_ns_per_call"`
	SwitchCPUNs  int64  `json:"switch_cpu_ns_per_call"`
	Verified     bool   `json:"verified"`
	ResultSHA256 string `json:"result_sha256,omitempty"`
	// ResultReproduced (SwitchML rows): whether every verified SwitchML row
	// of the sweep with the same workers, size and wire — at any rate, loss
	// and shape (one switch or a tree: integer sums are associative) —
	// has this row's result digest, bit for bit (docs/protocol.md
	// "Reproducible sums"); nil when no other such row ran.
	ResultReproduced *bool  `json:"result_reproduced"`
	LoadAvg          string `json:"load_avg"` // /proc/loadavg's first three fields at the start
	Error            string `json:"error,omitempty"`
	// Jobs is Config.Jobs in SwitchML rows, 1 in Gloo's and the ring's
	// (they run one job). With Jobs > 1 every field above is one SwitchML
	// job run alone first (session id 1, the workers' first addresses: the
	// baseline), and Shared the Jobs jobs then run at once.
	Jobs   int     `json:"jobs"`
	Shared *Shared `json:"shared,omitempty"`
	// DDP is a DDP row's training (DDPSwml, DDPGloo), nil in the others.
	// There Iters and Warmup are the timed and untimed training steps, the
	// times are per step (from zero_grad to the optimizer's step, every
	// step's all-reduces included), Elements the model's parameters and
	// TensorBytes the bytes a rank hands to all-reduce per step (2 per
	// parameter in 16 bits); ATE/s is parameters ÷ the median step, the
	// ceiling the all-reduce's alone (what a step of no arithmetic would
	// reach), VsGloo against DDPGloo's row of the same DDPConfig.DTypes
	// entry. The CPU columns are per step; the switch daemon's over its life
	// ÷ the steps (warm-up included). WireBits is the wire the swml
	// backend's gradients took (0: Gloo).
	DDP *DDPRow `json:"ddp,omitempty"`
}

// DDPRow is what a DDP row's ranks (testbed/netlab/ddp_lab.py) report,
// summarised: the slowest rank's median of each time, losses averaged over
// the ranks.
type DDPRow struct {
	// DType is the gradients' dtype in the all-reduce: the DDPConfig.DTypes
	// entry, except in DDPGloo's bf16 rows, float16 (DDPConfig.DTypes).
	DType  string `json:"dtype"`
	Params int    `json:"params"`
	Layers int    `json:"layers"`
	Width  int    `json:"width"`
	Batch  int    `json:"batch"`
	// AllReduceBytesPerStep is Params × the dtype's size: what each rank
	// hands to all-reduce per step.
	AllReduceBytesPerStep int `json:"allreduce_bytes_per_step"`
	// FwdBwdNs is forward and backward of a timed step (the backward
	// returns when DDP's all-reduces are done), OptimizerNs the optimizer's
	// step; ComputeNs is forward and backward without all-reduce (DDP's
	// no_sync, every rank at once); ExposedCommNs is FwdBwdNs − ComputeNs
	// (at least 0): the part of a step that waits for the all-reduce.
	FwdBwdNs      int64 `json:"fwd_bwd_ns"`
	OptimizerNs   int64 `json:"optimizer_ns"`
	ComputeNs     int64 `json:"compute_ns"`
	ExposedCommNs int64 `json:"exposed_comm_ns"`
	// CPUNsPerStepPerRank is the ranks' CPU (user + kernel) per timed step
	// ÷ the ranks.
	CPUNsPerStepPerRank int64 `json:"cpu_ns_per_step_per_rank"`
	// LossFirst and LossLast are the first (warm-up) and the last step's
	// loss, each the mean over the ranks (each rank's own batch); the row
	// fails unless the loss decreased.
	LossFirst float64 `json:"loss_first"`
	LossLast  float64 `json:"loss_last"`
	// ParamsSHA256 is the digest of the final parameters (float32
	// little-endian), the same on every rank (else the row fails);
	// ParamL2 their Euclidean norm.
	ParamsSHA256 string  `json:"params_sha256"`
	ParamL2      float64 `json:"param_l2"`
	// LossVsGloo is LossLast ÷ DDPGloo's, ParamL2VsGloo |ParamL2 −
	// DDPGloo's| ÷ DDPGloo's, in the same comparison: how far the switch's
	// quantized sums took training from Gloo's (nil in DDPGloo's rows and
	// without one).
	LossVsGloo    *float64 `json:"loss_last_vs_gloo"`
	ParamL2VsGloo *float64 `json:"param_l2_vs_gloo"`
}

// Shared is a SwitchML row's N jobs run at once (Config.Jobs > 1) on one
// switch daemon over the same links: job j has session id j and its
// worker in each worker namespace binds that namespace's j-th address
// (netlab.Lab.Addrs); every worker process of every job starts together.
type Shared struct {
	Jobs []*Job `json:"jobs"`
	// ATEPerSec is the sum of the jobs' ATE/s; OfCeiling it ÷ the row's
	// ceiling (the jobs share the links, so theirs is one job's);
	// VsAlone it ÷ the solo job's ATE/s.
	ATEPerSec float64  `json:"ate_per_s"`
	OfCeiling *float64 `json:"of_ceiling"`
	VsAlone   float64  `json:"vs_alone"`
	// MinShare and MaxShare are the extremes of the jobs' shares;
	// EqualShare says whether every share is within ShareTolerance of 1.
	// Jain is Jain's fairness index of the jobs' ATE/s, (Σx)² ÷ (N·Σx²): 1
	// when equal, 1/N when one job has everything.
	MinShare   float64 `json:"min_share"`
	MaxShare   float64 `json:"max_share"`
	EqualShare bool    `json:"equal_share"`
	Jain       float64 `json:"jain_index"`
	// The switch's drops and the kernel's counters over the shared run,
	// as the row's own over the solo run.
	SwitchDrops           map[string]uint64 `json:"switch_drops,omitempty"`
	UDPRcvbufErrors       uint64            `json:"udp_rcvbuf_errors"`
	SwitchUDPRcvbufErrors uint64            `json:"switch_udp_rcvbuf_errors"`
	QueueDrops            uint64            `json:"queue_drops"`
	LossDrops             uint64            `json:"loss_drops"`
}

// Job is one job of a SwitchML run: its workers' records, summed and
// summarised as a row's are.
type Job struct {
	Job       int    `json:"job"` // 1 … N
	SessionID uint32 `json:"session_id"`
	// Times: the job's slowest rank's median, the extremes over its ranks.
	benchmark.Times
	// Share is ATE/s ÷ (the solo job's ATE/s ÷ N): 1 is an equal share of
	// what one job reaches alone on the same links.
	Share float64 `json:"share"`
	// LinkShare is ATE/s ÷ (the row's ceiling ÷ N): 1 is an equal share of
	// the links' rate (nil unshaped). Where one job alone stays below its
	// ceiling, N jobs may fill the links better, and Share exceeds 1
	// while LinkShare does not.
	LinkShare *float64 `json:"link_share"`
	// SpanNs is from the start of the job's first worker process to the
	// exit of its last, on the sweep's clock: where the jobs' spans differ
	// the faster job's all-reduces overlapped the other's, the slower
	// job's last ones may have run alone (and look better than shared).
	SpanNs                    int64    `json:"span_ns"`
	Packets                   uint64   `json:"packets"`
	Retransmissions           uint64   `json:"retransmissions"`
	Messages                  uint64   `json:"messages"`
	RetransmissionsPerMessage *float64 `json:"retransmissions_per_message"`
	benchmark.ResendCauses
	// CPU per measured all-reduce, summed over the job's workers (Row).
	CPUUserNs    int64  `json:"cpu_user_ns_per_call"`
	CPUSysNs     int64  `json:"cpu_sys_ns_per_call"`
	ResultSHA256 string `json:"result_sha256"`
	Verified     bool   `json:"verified"`
	// switchCPU is the switch daemon's CPU per all-reduce it served
	// (every job's: it is shared).
	switchCPU int64
}

// setTimes records a median (the slowest rank's) and the extremes of a
// row of r.Elements elements.
func (r *Row) setTimes(median, lo, hi time.Duration) {
	r.Times = benchmark.TimesOf(median, lo, hi, r.Elements)
}

// setMessages records the messages first sent and the retransmissions
// per message.
func (r *Row) setMessages(n uint64) {
	r.Messages, r.RetransmissionsPerMessage = n, perMessage(r.Retransmissions, n)
}

// perMessage is retransmissions ÷ messages, nil without messages.
func perMessage(retransmissions, messages uint64) *float64 {
	if messages == 0 {
		return nil
	}
	x := float64(retransmissions) / float64(messages)
	return &x
}

// setShares fills the jobs' shares of alone (the solo job's ATE/s), their
// sum, extremes and fairness index.
func (sh *Shared) setShares(alone float64) {
	n := float64(len(sh.Jobs))
	var sum, sq float64
	sh.MinShare, sh.MaxShare = math.Inf(1), math.Inf(-1)
	for _, j := range sh.Jobs {
		j.Share = j.ATEPerSec / (alone / n)
		sh.MinShare, sh.MaxShare = min(sh.MinShare, j.Share), max(sh.MaxShare, j.Share)
		sum += j.ATEPerSec
		sq += j.ATEPerSec * j.ATEPerSec
	}
	sh.ATEPerSec, sh.VsAlone = sum, sum/alone
	if sq > 0 {
		sh.Jain = sum * sum / (n * sq)
	}
	sh.EqualShare = sh.MinShare >= 1-ShareTolerance && sh.MaxShare <= 1+ShareTolerance
}

// compareRows fills the ceilings and the ratios of the systems of one
// row of a sweep with packetSize-byte packets in msgSize-byte messages:
// the all-reduces of one size, or the DDP systems of one dtype, each
// against Gloo (DDPGloo) in the same rows.
func compareRows(rows []*Row, packetSize, msgSize int) {
	var gloo *Row
	for _, row := range rows {
		if (row.System == Gloo || row.System == DDPGloo) && row.Error == "" {
			gloo = row
		}
	}
	for _, row := range rows {
		c := netlab.LinkCeilings(float64(row.RateBps), row.Workers, packetSize, msgSize)
		switch row.System {
		case SwitchML, DDPSwml:
			// The ceiling counts 4-byte elements; a 16-bit wire carries
			// twice as many per byte.
			row.CeilingATEPerSec = c.SwitchML * 32 / float64(cmp.Or(row.WireBits, 32))
			if row.Leaves > 0 && row.SpineRateBps > 0 {
				// A leaf sends every slot up as a one-packet WRITE ONLY
				// WITH IMMEDIATE (docs/switch.md "Switch hierarchy").
				up := float64(row.SpineRateBps) * float64(packetSize) / float64(netlab.RoCEMessageWire(packetSize, 1)) / 32 *
					32 / float64(cmp.Or(row.WireBits, 32))
				if row.CeilingATEPerSec == 0 || up < row.CeilingATEPerSec {
					row.CeilingATEPerSec = up
				}
			}
		case Gloo:
			row.CeilingATEPerSec = c.Gloo
		case DDPGloo:
			// Gloo moves the dtype's bytes: 16-bit gradients are twice
			// the elements per byte.
			row.CeilingATEPerSec = c.Gloo * 4 / float64(dtypeSize(row.DDP.DType))
		case Ring:
			row.CeilingATEPerSec = c.Ring
		}
		if row.Error != "" {
			continue
		}
		if row.CeilingATEPerSec > 0 {
			x := row.ATEPerSec / row.CeilingATEPerSec
			row.OfCeiling = &x
			if sh := row.Shared; sh != nil {
				y := sh.ATEPerSec / row.CeilingATEPerSec
				sh.OfCeiling = &y
				for _, j := range sh.Jobs {
					z := j.ATEPerSec / (row.CeilingATEPerSec / float64(len(sh.Jobs)))
					j.LinkShare = &z
				}
			}
		}
		if gloo != nil && row != gloo {
			x := row.ATEPerSec / gloo.ATEPerSec
			row.VsGloo = &x
			if d, g := row.DDP, gloo.DDP; d != nil && g != nil {
				l, p := d.LossLast/g.LossLast, math.Abs(d.ParamL2-g.ParamL2)/g.ParamL2
				d.LossVsGloo, d.ParamL2VsGloo = &l, &p
			}
		}
	}
}

// dtypeSize is the bytes of one element of a DDPConfig.DTypes dtype.
func dtypeSize(dtype string) int {
	if dtype == DTypeFloat32 {
		return 4
	}
	return 2
}

// lossInflation fills LossInflation of every lossy row that has a
// loss-free twin.
// reproduced sets Row.ResultReproduced on SwitchML rows: the workers' inputs
// depend only on the rank and the size, and integer sums do not depend on
// arrival order, loss or rate, so every verified row of the same workers and
// size must have the same digest. A row that differs fails, naming the row
// it differs from, and the error wraps benchmark.ErrMismatch.
func reproduced(rows []*Row) error {
	type key struct{ workers, size, wire int }
	groups := map[key][]*Row{}
	var keys []key
	for _, r := range rows {
		if r.System != SwitchML || r.Error != "" || !r.Verified || r.ResultSHA256 == "" {
			continue
		}
		k := key{r.Workers, r.TensorBytes, r.WireBits}
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r)
	}
	var errs []error
	for _, k := range keys {
		g := groups[k]
		if len(g) < 2 {
			continue
		}
		same := true
		for _, r := range g[1:] {
			if r.ResultSHA256 != g[0].ResultSHA256 {
				same = false
				r.Error = fmt.Sprintf("result %.12s… is not the %s, %s, loss %g row's %.12s…", r.ResultSHA256,
					g[0].Shape(), netlab.FormatRate(g[0].RateBps), g[0].Loss, g[0].ResultSHA256)
				errs = append(errs, fmt.Errorf("SwitchML, %s at %s, loss %g: %s: %w", r.Shape(),
					netlab.FormatRate(r.RateBps), r.Loss, r.Error, benchmark.ErrMismatch))
			}
		}
		for _, r := range g {
			r.ResultReproduced = &same
		}
	}
	return errors.Join(errs...)
}

// Shape is the row's workers and switches: "8 workers" on one switch, "8
// workers (2 leaves × 4)" on a tree.
func (r *Row) Shape() string {
	if r.Leaves == 0 {
		return fmt.Sprintf("%d workers", r.Workers)
	}
	return fmt.Sprintf("%d workers (%d leaves × %d)", r.Workers, r.Leaves, r.Workers/r.Leaves)
}

func lossInflation(rows []*Row) {
	for _, r := range rows {
		if r.Loss == 0 || r.Error != "" {
			continue
		}
		for _, z := range rows {
			if z.Loss == 0 && z.Error == "" && z.System == r.System && z.WireBits == r.WireBits && z.Workers == r.Workers && z.Leaves == r.Leaves && z.RateBps == r.RateBps && z.TensorBytes == r.TensorBytes {
				x := float64(r.MedianNs) / float64(z.MedianNs)
				r.LossInflation = &x
			}
		}
	}
}
