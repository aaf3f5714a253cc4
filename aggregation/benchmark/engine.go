package benchmark

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/instant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// EngineAloneConfig is a run of the worker engine alone (EngineAlone).
type EngineAloneConfig struct {
	// Session is the worker's session: QPs, PacketSize,
	// PacketsPerMessage, DType, Writes and the rest of aggregation.Config
	// (Device, ControllerAddr, Rank and Workers are EngineAlone's; a job
	// of one worker; SessionID defaults to 1).
	Session aggregation.Config
	// Elements is the tensor's length (4-byte elements).
	Elements int
	// Warmup unmeasured and Iters measured all-reduces.
	Warmup, Iters int
	// Step, if set, is called after every verified all-reduce (progress).
	Step func()
}

// EngineAloneResult is what EngineAlone measured; every result was
// verified.
type EngineAloneResult struct {
	// Summary is the measured calls' times, ATE/s and Gbit/s of tensor.
	Summary
	// CPU is this process's CPU time in the measured calls (every
	// goroutine: the engine's, and the controller's keep-alive and the
	// garbage collector's, which are next to nothing); GbpsPerCore is the
	// tensor's bits all-reduced per second of it. Zero where getrusage is
	// not available.
	CPU         time.Duration
	GbpsPerCore float64
	// Messages and Packets are what the engine sent in the measured calls
	// (each QP's exponent round included); Allocs the heap objects the
	// process allocated in them, and AllocsPerMessage Allocs ÷ Messages.
	Messages, Packets uint64
	Allocs            uint64
	AllocsPerMessage  float64
	// CopyLimit is the memory-bandwidth limit of the work, measured in the
	// same run (CopyTime): quantizing reads 4 bytes and writes 4 per
	// element, dequantizing the same, so the engine can be no faster than
	// copy() of the tensor twice, on as many cores as the session has
	// lanes. LimitRatio is the median call's time ÷ CopyLimit: 1 would be
	// an engine bound by memory alone.
	CopyLimit  time.Duration
	LimitRatio float64
	// Session is the session's counters at the end, warm-up included;
	// Switch the instant switch's.
	Session aggregation.Stats
	Switch  instant.Stats
}

// EngineAlone runs the worker engine alone: one worker's session on an
// instant switch (aggregation/instant), which answers every write inside
// the engine's PostSend with the result the switch pipeline would send a
// one-worker job, so what is measured is the engine — quantization,
// dequantization, its loop, timers and completions — and the one copy of
// each message that an RNIC's DMA makes, on the caller's goroutine: what a
// host with a real RNIC would pay. Every result is checked like Run's.
// Everything it opened is closed when it returns.
func EngineAlone(ctx context.Context, cfg EngineAloneConfig) (EngineAloneResult, error) {
	if cfg.Session.SessionID == 0 {
		cfg.Session.SessionID = 1
	}
	if cfg.Iters < 1 || cfg.Warmup < 0 {
		return EngineAloneResult{}, fmt.Errorf("benchmark: %d warm-up and %d measured all-reduces: give iterations ≥ 1, warm-up ≥ 0", cfg.Warmup, cfg.Iters)
	}
	in, err := NewInputsWire(cfg.Session.DType, cfg.Session.Wire, 1, cfg.Elements)
	if err != nil {
		return EngineAloneResult{}, err
	}
	cl, err := instant.Start(ctx, instant.Config{})
	if err != nil {
		return EngineAloneResult{}, err
	}
	defer cl.Close()
	sc := cfg.Session
	sc.Device, sc.ControllerAddr, sc.Rank, sc.Workers = cl.Device, cl.ControllerAddr, 0, 1
	s, err := aggregation.Open(ctx, sc)
	if err != nil {
		return EngineAloneResult{}, err
	}
	defer s.Close()
	res := EngineAloneResult{}
	times := make([]time.Duration, 0, cfg.Iters)
	var buf []float32
	var bufI []int32
	if in.dtype == wire.Int32 {
		bufI = make([]int32, cfg.Elements)
	} else {
		buf = make([]float32, cfg.Elements)
	}
	for it := range cfg.Warmup + cfg.Iters {
		if in.dtype == wire.Int32 {
			copy(bufI, in.inI[0])
		} else {
			copy(buf, in.in[0])
		}
		// The counters are read outside the timed call: ReadMemStats
		// stops the world (runtime/metrics' counters lag behind).
		st0, a0 := s.Stats(), mallocs()
		u0, s0 := processCPU()
		start := time.Now()
		if in.dtype == wire.Int32 {
			err = s.AllReduceInt32(ctx, bufI)
		} else {
			err = s.AllReduce(ctx, buf)
		}
		elapsed := time.Since(start)
		u1, s1 := processCPU()
		a1, st1 := mallocs(), s.Stats()
		if err != nil {
			return res, fmt.Errorf("engine alone: all-reduce %d of %d: %w", it+1, cfg.Warmup+cfg.Iters, err)
		}
		if err := in.check.SwitchML([][]float32{buf}, [][]int32{bufI}); err != nil {
			return res, fmt.Errorf("engine alone: all-reduce %d of %d: %w: %w", it+1, cfg.Warmup+cfg.Iters, ErrMismatch, err)
		}
		if it >= cfg.Warmup {
			times = append(times, elapsed)
			res.CPU += u1 - u0 + s1 - s0
			res.Messages += st1.Messages - st0.Messages
			res.Packets += st1.Packets - st0.Packets
			res.Allocs += a1 - a0
		}
		if cfg.Step != nil {
			cfg.Step()
		}
	}
	res.Summary, res.Session, res.Switch = Summarize(times, cfg.Elements), s.Stats(), cl.Switch.Stats()
	if res.Messages > 0 {
		res.AllocsPerMessage = float64(res.Allocs) / float64(res.Messages)
	}
	if res.CPU > 0 {
		res.GbpsPerCore = float64(cfg.Elements) * 4 * 8 * float64(cfg.Iters) / res.CPU.Seconds() / 1e9
	}
	res.CopyLimit = CopyTime(4*cfg.Elements, copyReps, cfg.Session.Threads)
	res.LimitRatio = float64(res.Median) / float64(res.CopyLimit)
	return res, nil
}

// copyReps is how many times CopyTime copies: enough for the fastest to
// be an undisturbed one on a shared host.
const copyReps = 9

// CopyTime is the time copy() takes to copy bytes bytes twice, the
// fastest of reps runs (at least one), in buffers faulted in beforehand:
// the memory-bandwidth limit of quantizing and dequantizing a tensor of
// that size (EngineAloneResult.CopyLimit). With cores > 1 as many
// goroutines copy a contiguous share each, as the lanes of a session
// (Config.Threads) split a tensor: the limit of that many cores, which a
// host's memory may hold well below cores times one core's.
func CopyTime(bytes, reps, cores int) time.Duration {
	src, dst := make([]byte, bytes), make([]byte, bytes)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	best := time.Duration(1<<63 - 1)
	for range max(reps, 1) {
		start := time.Now()
		copyTwice(dst, src, cores)
		best = min(best, time.Since(start))
	}
	return best
}

// copyTwice copies src to dst and back, on cores goroutines (at least
// one, the caller's) that take a contiguous share each.
func copyTwice(dst, src []byte, cores int) {
	cores = max(cores, 1)
	twice := func(k int) {
		lo, hi := k*len(src)/cores, (k+1)*len(src)/cores
		copy(dst[lo:hi], src[lo:hi])
		copy(src[lo:hi], dst[lo:hi])
	}
	var wg sync.WaitGroup
	for k := 1; k < cores; k++ {
		wg.Go(func() { twice(k) })
	}
	twice(0)
	wg.Wait()
}

// mallocs is the heap objects the process has allocated so far.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}
