package benchmark

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/local"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// AllReducer is one rank's all-reduce: an *aggregation.Session, or a rank
// of the ring all-reduce (*ring.Rank of aggregation/ring).
type AllReducer = aggregation.AllReducer

// ErrMismatch is wrapped by Run's error when a result is wrong.
var ErrMismatch = errors.New("RESULT MISMATCH")

// Bound is how close a float32 result must be to the float64 sum of the
// inputs (int32 results must be exact either way).
type Bound int

const (
	// QuantizationBound: SwitchML's block floating point, within the
	// quantization error bound (docs/quantization.md).
	QuantizationBound Bound = iota
	// Float32Bound: an all-reduce that adds in float32 (the ring), within
	// float32 rounding of the sum.
	Float32Bound
)

// Inputs are every rank's deterministic input of a job and the check of a
// result against them. Build them once to share them between runs (the
// reference bound depends only on the inputs); Run builds its own if
// Config.Inputs is nil. Safe for concurrent use: nothing changes them.
type Inputs struct {
	dtype   wire.DType
	workers int
	in      [][]float32
	inI     [][]int32
	check   *Checker
}

// NewInputs makes the inputs of a job of workers ranks (MakeInputs) and
// their Checker, on the 32-bit wire.
func NewInputs(dtype wire.DType, workers, elements int) (*Inputs, error) {
	return NewInputsWire(dtype, 32, workers, elements)
}

// NewInputsWire is NewInputs for a job whose elements travel in
// wireBits-bit lanes (aggregation.Config.Wire), whose bound the Checker
// applies.
func NewInputsWire(dtype wire.DType, wireBits, workers, elements int) (*Inputs, error) {
	if workers < 1 || elements < 1 {
		return nil, fmt.Errorf("benchmark: inputs of %d workers × %d elements: give at least 1 of each", workers, elements)
	}
	in := &Inputs{dtype: dtype, workers: workers}
	in.in, in.inI = MakeInputs(dtype, workers, elements)
	var err error
	if in.check, err = NewCheckerWire(dtype, wireBits, in.in, in.inI); err != nil {
		return nil, err
	}
	return in, nil
}

// Elements is the length of each rank's input.
func (in *Inputs) Elements() int {
	if in.dtype == wire.Int32 {
		return len(in.inI[0])
	}
	return len(in.in[0])
}

// Config is one run of the verified benchmark loop.
type Config struct {
	// Workers is the job's size, Elements its tensor's length (4-byte
	// elements), DType its element type. Unused when Inputs is set.
	Workers, Elements int
	DType             wire.DType
	// Wire is the job's element width on the wire, 32 (0) or 16 bits:
	// the bound of SwitchML's results. Unused when Inputs is set.
	Wire int
	// Inputs, if set, are the job's inputs and reference (NewInputs).
	Inputs *Inputs
	// Ranks are the ranks of Run's reducers, reducers[i] being rank
	// Ranks[i]; nil means reducers[i] is rank i.
	Ranks []int
	// Warmup unmeasured, then Iters (≥ 1) measured all-reduces.
	Warmup, Iters int
	// Bound is the check of float32 results.
	Bound Bound
	// Label, if set, names the run in errors: "all-reduce 3 of 12 (Label)".
	Label string
	// Observe, if set, gets the time of every all-reduce (warm-up
	// included): from the start of the calls to the return of the last.
	Observe func(time.Duration)
	// Step, if set, is called after every verified all-reduce (progress).
	Step func()
	// Buffers, if set, holds the buffers the reducers all-reduce in (one
	// tensor per reducer), kept for the next Run with the same Buffers:
	// two runs of one job, one after the other (SwitchML, then the ring
	// baseline), then hold one set of tensors instead of the first run's
	// left for the garbage collector beside the second's. nil: Run
	// allocates its own.
	Buffers *Buffers
}

// Buffers are the tensors Run all-reduces in, reused between runs. Not
// safe for concurrent use: one Run at a time.
type Buffers struct {
	f [][]float32
	i [][]int32
}

// get returns n reducers' buffers of elements elements of dtype, reusing
// what b holds when it fits.
func (b *Buffers) get(dtype wire.DType, n, elements int) ([][]float32, [][]int32) {
	fits := func(l int) bool { return l == n }
	if dtype == wire.Int32 {
		if !fits(len(b.i)) || len(b.i[0]) != elements {
			b.f, b.i = nil, make([][]int32, n) // drop the other type's first
			for k := range b.i {
				b.i[k] = make([]int32, elements)
			}
		}
		return make([][]float32, n), b.i
	}
	if !fits(len(b.f)) || len(b.f[0]) != elements {
		b.i, b.f = nil, make([][]float32, n)
		for k := range b.f {
			b.f[k] = make([]float32, elements)
		}
	}
	return b.f, make([][]int32, n)
}

// Result is what Run measured and checked.
type Result struct {
	// Times are the measured all-reduces' durations, in call order.
	Times []time.Duration
	// CPUUser and CPUSys are this process's CPU time (every thread, user
	// and kernel mode) inside the measured all-reduces — the calls alone,
	// not the checks between them: with one reducer, what one rank costs
	// its host; in-process (bench), every rank's and the switch's. The
	// kernel's part includes the network stack's work done in this
	// process's system calls (on veth and loopback, often the receiver's
	// too). Zero where getrusage is not available.
	CPUUser, CPUSys time.Duration
	// ResultSHA256 is the SHA-256 of the last result's elements
	// (little-endian): every rank of a job has the same, and a run under
	// loss has the loss-free run's.
	ResultSHA256 string
}

// Run all-reduces the inputs of its reducers' ranks cfg.Warmup + cfg.Iters
// times, all reducers of one all-reduce at once, and checks every result
// against the reference built from every rank's input. A wrong result is an
// error wrapping ErrMismatch ("RESULT MISMATCH"). Run neither closes nor aborts what it
// calls: after an error the caller ends its sessions (Abort, so the other
// workers of a job learn at once).
func Run(ctx context.Context, reducers []AllReducer, cfg Config) (Result, error) {
	if cfg.Iters < 1 || cfg.Warmup < 0 {
		return Result{}, fmt.Errorf("benchmark: %d warm-up and %d measured all-reduces: give iterations ≥ 1, warm-up ≥ 0", cfg.Warmup, cfg.Iters)
	}
	in := cfg.Inputs
	if in == nil {
		var err error
		if in, err = NewInputsWire(cfg.DType, cfg.Wire, cfg.Workers, cfg.Elements); err != nil {
			return Result{}, err
		}
	}
	ranks := cfg.Ranks
	if ranks == nil {
		for r := range reducers {
			ranks = append(ranks, r)
		}
	}
	if len(ranks) != len(reducers) || len(reducers) == 0 {
		return Result{}, fmt.Errorf("benchmark: %d reducers for ranks %v: give one reducer per rank, at least one", len(reducers), ranks)
	}
	for _, r := range ranks {
		if r < 0 || r >= in.workers {
			return Result{}, fmt.Errorf("benchmark: rank %d of %d workers", r, in.workers)
		}
	}
	n := in.Elements()
	// One buffer per reducer, refilled from its rank's input before each
	// call.
	b := cfg.Buffers
	if b == nil {
		b = new(Buffers)
	}
	bufs, bufsI := b.get(in.dtype, len(reducers), n)
	call := func(i int) error {
		if in.dtype == wire.Int32 {
			return reducers[i].AllReduceInt32(ctx, bufsI[i])
		}
		return reducers[i].AllReduce(ctx, bufs[i])
	}
	errs := make([]error, in.workers) // by rank, for local.JoinErrors
	res := Result{Times: make([]time.Duration, 0, cfg.Iters)}
	total := cfg.Warmup + cfg.Iters
	name := func(it int) string {
		if cfg.Label != "" {
			return fmt.Sprintf("all-reduce %d of %d (%s)", it+1, total, cfg.Label)
		}
		return fmt.Sprintf("all-reduce %d of %d", it+1, total)
	}
	for it := range total {
		for i, r := range ranks {
			if in.dtype == wire.Int32 {
				copy(bufsI[i], in.inI[r])
			} else {
				copy(bufs[i], in.in[r])
			}
		}
		var err error
		u0, s0 := processCPU()
		start := time.Now()
		if len(reducers) == 1 {
			err = call(0) // a worker process: its own error, no rank to name
		} else {
			clear(errs)
			err = local.Parallel(len(reducers), func(i int) error {
				errs[ranks[i]] = call(i)
				return nil
			})
			if err == nil {
				err = local.JoinErrors(errs)
			}
		}
		elapsed := time.Since(start)
		u1, s1 := processCPU()
		if err != nil {
			return res, fmt.Errorf("%s: %w", name(it), err)
		}
		if cfg.Observe != nil {
			cfg.Observe(elapsed)
		}
		check := in.check.SwitchML
		if cfg.Bound == Float32Bound {
			check = in.check.Ring
		}
		if err := check(bufs, bufsI); err != nil {
			return res, fmt.Errorf("%s: %w: %w", name(it), ErrMismatch, err)
		}
		if it >= cfg.Warmup {
			res.Times = append(res.Times, elapsed)
			res.CPUUser += u1 - u0
			res.CPUSys += s1 - s0
		}
		if cfg.Step != nil {
			cfg.Step()
		}
	}
	if in.dtype == wire.Int32 {
		res.ResultSHA256 = resultSHA256(len(bufsI[0]), func(k int) uint32 { return uint32(bufsI[0][k]) })
	} else {
		res.ResultSHA256 = resultSHA256(len(bufs[0]), func(k int) uint32 { return math.Float32bits(bufs[0][k]) })
	}
	return res, nil
}

// Summary is what a benchmark reports of a run's times.
type Summary struct {
	Median, Min, Max, Mean time.Duration
	// ATEPerSec is all-reduced tensor elements per second at the median
	// time, Gbps the tensor's bits per second (4-byte elements).
	ATEPerSec, Gbps float64
}

// Summarize summarizes the times of all-reduces of a tensor of elements
// 4-byte elements; times is not changed. The median of an even count is
// the upper middle one. The zero Summary if times is empty.
func Summarize(times []time.Duration, elements int) Summary {
	if len(times) == 0 {
		return Summary{}
	}
	t := slices.Sorted(slices.Values(times))
	s := Summary{Min: t[0], Max: t[len(t)-1], Median: t[len(t)/2]}
	var sum time.Duration
	for _, d := range t {
		sum += d
	}
	s.Mean = sum / time.Duration(len(t))
	med := s.Median.Seconds()
	s.ATEPerSec = float64(elements) / med
	s.Gbps = float64(elements) * 4 * 8 / med / 1e9
	return s
}

// resultSHA256 is the SHA-256 of n 4-byte elements, little-endian, hashed
// through a small buffer: encoding the whole tensor at once (binary.Write)
// would allocate a copy of it.
func resultSHA256(n int, elem func(int) uint32) string {
	h := sha256.New()
	buf := make([]byte, 0, 64<<10)
	for k := range n {
		buf = binary.LittleEndian.AppendUint32(buf, elem(k))
		if len(buf) == cap(buf) {
			h.Write(buf)
			buf = buf[:0]
		}
	}
	h.Write(buf)
	return hex.EncodeToString(h.Sum(nil))
}
