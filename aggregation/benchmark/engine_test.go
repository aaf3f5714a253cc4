package benchmark

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/instant"
	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
)

// engineSizes are BenchmarkEngineAlone's tensors, in bytes of float32.
var engineSizes = []int{1 << 20, 4 << 20, 16 << 20}

// BenchmarkEngineAlone is the worker engine alone on an instant switch
// (EngineAlone): one worker's float32 all-reduce, default session (8 QPs,
// 1 KiB packets, 16 KiB messages), message and packet writes. Metrics:
// elements/s and Gbit/s of tensor; allocs/msg, the heap objects the
// process allocated per message sent (exponent rounds included);
// x_copy_limit, ns/op ÷ the time of copy() of the tensor twice measured
// right after in the same sub-benchmark — the memory-bandwidth limit of
// quantizing (read 4 B, write 4 B per element) and dequantizing (the
// same). The copy/SIZE sub-benchmarks time that limit on its own.
//
//	go test -run '^$' -bench EngineAlone -cpuprofile /tmp/c.prof ./aggregation/benchmark/
func BenchmarkEngineAlone(b *testing.B) {
	for _, w := range []aggregation.Writes{aggregation.MessageWrites, aggregation.PacketWrites} {
		for _, size := range engineSizes {
			b.Run(fmt.Sprintf("%v/%dMiB", w, size>>20), func(b *testing.B) {
				benchEngine(b, w, size/4)
			})
		}
	}
	for _, size := range engineSizes {
		b.Run(fmt.Sprintf("copy/%dMiB", size>>20), func(b *testing.B) {
			src, dst := make([]byte, size), make([]byte, size)
			copy(dst, src)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for range b.N {
				copy(dst, src)
				copy(src, dst)
			}
		})
	}
}

func benchEngine(b *testing.B, w aggregation.Writes, elements int) {
	ctx := context.Background()
	cl, err := instant.Start(ctx, instant.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	s, err := aggregation.Open(ctx, aggregation.Config{Device: cl.Device, ControllerAddr: cl.ControllerAddr, SessionID: 1, Workers: 1, Writes: w})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	in := InputFloat32(0, elements)
	x := make([]float32, elements)
	copy(x, in)
	if err := s.AllReduce(ctx, x); err != nil { // warm-up: the first call has its own round-trip estimate
		b.Fatal(err)
	}
	st0, a0 := s.Stats(), mallocs()
	b.SetBytes(int64(4 * elements))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		// The sum over one worker is its input, within the quantizer's
		// bound: x is reduced again in place, and stays bounded.
		if err := s.AllReduce(ctx, x); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	a1, st1 := mallocs(), s.Stats()
	msgs := st1.Messages - st0.Messages
	if sw := cl.Switch.Stats(); sw.Dropped() != 0 || sw.Results != sw.Requests {
		b.Fatalf("switch %+v: the instant switch answers everything", sw)
	}
	perOp := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(elements)/perOp.Seconds(), "elements/s")
	b.ReportMetric(float64(elements)*32/perOp.Seconds()/1e9, "Gbit/s")
	b.ReportMetric(float64(a1-a0)/float64(max(msgs, 1)), "allocs/msg")
	// Nothing is lost, so every resend is spurious: a result still in the
	// CQ behind a full poll batch when the timers ran (docs/benchmarks.md
	// "Engine alone").
	b.ReportMetric(float64(st1.Retransmissions-st0.Retransmissions)/float64(b.N), "resends/op")
	b.ReportMetric(float64(perOp)/float64(CopyTime(4*elements, copyReps, 1)), "x_copy_limit")
	// The last result is the input quantized and dequantized b.N+1 times:
	// still the input within the quantizer's bound, compounded.
	e, err := quant.BlockExponent(in)
	if err != nil {
		b.Fatal(err)
	}
	sc, err := quant.NewScale(1, e)
	if err != nil {
		b.Fatal(err)
	}
	for i := range in {
		v := float64(in[i])
		if d := math.Abs(float64(x[i]) - v); d > float64(b.N+1)*sc.ErrorBound(math.Abs(v)) {
			b.Fatalf("element %d: %g after %d calls, input %g", i, x[i], b.N+1, in[i])
		}
	}
}

// TestEngineAlone: every call of the run is verified, and the run reports
// what the engine sent, what the switch answered and the copy limit.
func TestEngineAlone(t *testing.T) {
	for _, dt := range []wire.DType{wire.Float32, wire.Int32} {
		for _, w := range []aggregation.Writes{aggregation.MessageWrites, aggregation.PacketWrites} {
			t.Run(fmt.Sprintf("%v/%v", dt, w), func(t *testing.T) {
				// Everything EngineAlone opens is closed when it returns.
				testutil.NoLeaks(t)
				const elements, iters = 50000, 3
				sess := aggregation.Config{DType: dt, Writes: w, QPs: 2, PacketSize: 256, PacketsPerMessage: 4}
				res, err := EngineAlone(context.Background(), EngineAloneConfig{Session: sess, Elements: elements, Warmup: 1, Iters: iters})
				if err != nil {
					t.Fatal(err)
				}
				// 50000 elements in 256-element messages: 196 messages and
				// 2 exponent rounds per call, 4 packets each (and any
				// spurious resend's: nothing is lost, but a result behind
				// a full poll batch can be taken for lost).
				if res.Messages != iters*198 || res.Packets < 4*res.Messages {
					t.Errorf("messages %d, packets %d: want %d and 4 each", res.Messages, res.Packets, iters*198)
				}
				perRequest := uint64(4)
				if w == aggregation.PacketWrites {
					perRequest = 1
				}
				if sw := res.Switch; sw.Dropped() != 0 || sw.Results != sw.Requests || sw.Requests < (iters+1)*198*4/perRequest {
					t.Errorf("switch %+v: want every request of the 4 calls answered", sw)
				}
				if res.Median <= 0 || res.ATEPerSec <= 0 || res.CopyLimit <= 0 || res.LimitRatio <= 0 || res.AllocsPerMessage != float64(res.Allocs)/float64(res.Messages) {
					t.Errorf("result %+v", res)
				}
			})
		}
	}
	if _, err := EngineAlone(context.Background(), EngineAloneConfig{Elements: 10, Iters: 0}); err == nil {
		t.Error("0 iterations accepted")
	}
}

// BenchmarkEngineCores is the engine alone on two cores, 16 MiB of
// float32 with message writes: one session with one lane and with two
// (Config.Threads), two one-lane sessions each all-reducing half the
// tensor on its own goroutine (what two cores give two engines that
// share nothing but the instant switch), and copy() of the tensor twice
// on one and on two cores (CopyTime), the memory-bandwidth limit.
//
//	go test -run '^$' -bench EngineCores -count 5 ./aggregation/benchmark/
func BenchmarkEngineCores(b *testing.B) {
	const elements = 4 << 20
	in := InputFloat32(0, elements)
	open := func(b *testing.B, cl *instant.Cluster, id uint32, threads int) *aggregation.Session {
		s, err := aggregation.Open(context.Background(), aggregation.Config{Device: cl.Device, ControllerAddr: cl.ControllerAddr, SessionID: id, Workers: 1, Threads: threads, Writes: aggregation.MessageWrites})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	run := func(b *testing.B, sessions []*aggregation.Session) {
		ctx := context.Background()
		x := make([]float32, elements)
		copy(x, in)
		part := elements / len(sessions)
		call := func() {
			var wg sync.WaitGroup
			for k := 1; k < len(sessions); k++ {
				wg.Go(func() {
					if err := sessions[k].AllReduce(ctx, x[k*part:(k+1)*part]); err != nil {
						b.Error(err)
					}
				})
			}
			if err := sessions[0].AllReduce(ctx, x[:part]); err != nil {
				b.Error(err)
			}
			wg.Wait()
		}
		call() // warm-up
		b.SetBytes(4 * elements)
		b.ResetTimer()
		for range b.N {
			call()
		}
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed()/time.Duration(b.N))/float64(CopyTime(4*elements, copyReps, 2)), "x_copy2_limit")
	}
	for _, c := range []struct {
		name              string
		sessions, threads int
	}{{"lanes=1", 1, 1}, {"lanes=2", 1, 2}, {"sessions=2", 2, 1}} {
		b.Run(c.name, func(b *testing.B) {
			cl, err := instant.Start(context.Background(), instant.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			var ss []*aggregation.Session
			for k := range c.sessions {
				ss = append(ss, open(b, cl, uint32(k+1), c.threads))
			}
			run(b, ss)
		})
	}
	for _, cores := range []int{1, 2} {
		b.Run(fmt.Sprintf("copy/cores=%d", cores), func(b *testing.B) {
			src, dst := make([]byte, 4*elements), make([]byte, 4*elements)
			copyTwice(dst, src, cores)
			b.SetBytes(4 * elements)
			b.ResetTimer()
			for range b.N {
				copyTwice(dst, src, cores)
			}
		})
	}
}
