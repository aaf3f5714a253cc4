package join

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// RunConfig is the verified benchmark loop of one worker.
type RunConfig struct {
	Rank, Workers int
	Elements      int // tensor elements (4 bytes each)
	DType         wire.DType
	Warmup, Iters int // unmeasured, then measured all-reduces (Iters ≥ 1)
	// Observe, if set, gets the time of every all-reduce call, warm-up
	// included (a metrics histogram).
	Observe func(time.Duration)
}

// RunResult is what Run measured and checked.
type RunResult struct {
	// Times are the measured all-reduces' durations, in call order.
	Times []time.Duration
	// ResultSHA256 is the SHA-256 of the last result's elements
	// (little-endian): every rank of a job has the same, and a run under
	// loss has the loss-free run's.
	ResultSHA256 string
}

// Run all-reduces rank's deterministic input (MakeInputs) cfg.Warmup +
// cfg.Iters times on sess and checks every result against the reference
// built from every rank's input (Checker.SwitchML). A mismatch is an error
// that says RESULT MISMATCH. Run neither closes nor aborts sess: the caller
// ends the session (Abort on an error, so the other workers learn at once).
func Run(ctx context.Context, sess *aggregation.Session, cfg RunConfig) (RunResult, error) {
	if cfg.Iters < 1 || cfg.Warmup < 0 || cfg.Elements < 1 {
		return RunResult{}, fmt.Errorf("join: %d warm-up and %d measured all-reduces of %d elements: give iterations ≥ 1, warm-up ≥ 0, elements ≥ 1", cfg.Warmup, cfg.Iters, cfg.Elements)
	}
	if cfg.Rank < 0 || cfg.Rank >= cfg.Workers {
		return RunResult{}, fmt.Errorf("join: rank %d of %d workers", cfg.Rank, cfg.Workers)
	}
	n := cfg.Elements
	inputs, inputsI := MakeInputs(cfg.DType, cfg.Workers, n)
	check, err := NewChecker(cfg.DType, inputs, inputsI)
	if err != nil {
		return RunResult{}, err
	}
	var buf []float32
	var bufI []int32
	if cfg.DType == wire.Int32 {
		bufI = make([]int32, n)
	} else {
		buf = make([]float32, n)
	}
	res := RunResult{Times: make([]time.Duration, 0, cfg.Iters)}
	total := cfg.Warmup + cfg.Iters
	for it := range total {
		if cfg.DType == wire.Int32 {
			copy(bufI, inputsI[cfg.Rank])
		} else {
			copy(buf, inputs[cfg.Rank])
		}
		start := time.Now()
		if cfg.DType == wire.Int32 {
			err = sess.AllReduceInt32(ctx, bufI)
		} else {
			err = sess.AllReduce(ctx, buf)
		}
		elapsed := time.Since(start)
		if err != nil {
			return res, fmt.Errorf("all-reduce %d of %d (job %d): %w", it+1, total, sess.JobID(), err)
		}
		if cfg.Observe != nil {
			cfg.Observe(elapsed)
		}
		var out [][]float32
		var outI [][]int32
		if cfg.DType == wire.Int32 {
			outI = [][]int32{bufI}
		} else {
			out = [][]float32{buf}
		}
		if err := check.SwitchML(out, outI); err != nil {
			return res, fmt.Errorf("all-reduce %d of %d (job %d): RESULT MISMATCH: %w", it+1, total, sess.JobID(), err)
		}
		if it >= cfg.Warmup {
			res.Times = append(res.Times, elapsed)
		}
	}
	h := sha256.New()
	if cfg.DType == wire.Int32 {
		_ = binary.Write(h, binary.LittleEndian, bufI)
	} else {
		_ = binary.Write(h, binary.LittleEndian, buf)
	}
	res.ResultSHA256 = hex.EncodeToString(h.Sum(nil))
	return res, nil
}
