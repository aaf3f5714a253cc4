package instant_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/instant"
	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
)

// open starts an instant cluster and joins it with cfg (Device,
// ControllerAddr, Rank and Workers filled in).
func open(t *testing.T, cfg aggregation.Config) (*instant.Cluster, *aggregation.Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(20*time.Second))
	defer cancel()
	c, err := instant.Start(ctx, instant.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cfg.Device, cfg.ControllerAddr, cfg.Rank, cfg.Workers = c.Device, c.ControllerAddr, 0, 1
	s, err := aggregation.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return c, s
}

// inputs are n standard-normal floats, every 7th message's worth scaled
// down by 2^20 so that block exponents differ between messages.
func inputs(seed uint64, n, msgVals int) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
		if (i/msgVals)%7 == 3 {
			x[i] = float32(math.Ldexp(float64(x[i]), -20))
		}
	}
	return x
}

// TestSums: a one-worker job's all-reduce through the instant switch
// gives the input back (the sum over one worker): int32 exactly, float32
// within the block-floating-point bound of each message, 16-bit floats
// nearly all exactly, with message and packet writes; every request is
// answered and none dropped.
func TestSums(t *testing.T) {
	const n = 40000 // 9.8 messages of 4 KiB: the last one partial
	for _, writes := range []aggregation.Writes{aggregation.MessageWrites, aggregation.PacketWrites} {
		for _, dt := range []string{"float32", "int32", "bfloat16", "float16"} {
			t.Run(fmt.Sprintf("%v/%s", writes, dt), func(t *testing.T) {
				testutil.NoLeaks(t)
				cfg := aggregation.Config{SessionID: 1, QPs: 4, PacketSize: 256, PacketsPerMessage: 16, Writes: writes}
				if dt == "int32" {
					cfg.DType = wire.Int32
				}
				c, s := open(t, cfg)
				msgVals := 256 * 16 / 4
				ctx := context.Background()
				for call := range 3 {
					switch dt {
					case "float32":
						in := inputs(uint64(call), n, msgVals)
						out := append([]float32(nil), in...)
						if err := s.AllReduce(ctx, out); err != nil {
							t.Fatal(err)
						}
						checkFloat32(t, in, out, msgVals)
					case "int32":
						rng := rand.New(rand.NewPCG(uint64(call), 2))
						in := make([]int32, n)
						for i := range in {
							in[i] = int32(rng.Uint32())
						}
						out := append([]int32(nil), in...)
						if err := s.AllReduceInt32(ctx, out); err != nil {
							t.Fatal(err)
						}
						for i := range in {
							if out[i] != in[i] {
								t.Fatalf("call %d element %d: got %d, want %d", call, i, out[i], in[i])
							}
						}
					default:
						f := quant.BFloat16
						if dt == "float16" {
							f = quant.Float16
						}
						src := inputs(uint64(call), n, msgVals)
						in := make([]uint16, n)
						for i, v := range src {
							in[i] = f.FromFloat32(v)
						}
						out := append([]uint16(nil), in...)
						if err := s.AllReduce16(ctx, out, f); err != nil {
							t.Fatal(err)
						}
						check16(t, f, in, out, msgVals)
					}
				}
				// Nothing is lost; a resend can still happen (a result
				// behind a full poll batch taken for lost), and is
				// answered like any request.
				st, sw := s.Stats(), c.Switch.Stats()
				if st.AllReduces != 3 || st.Results != st.Messages {
					t.Errorf("session stats %+v: want 3 calls, a result per message", st)
				}
				if sw.Dropped() != 0 || sw.Results != sw.Requests || sw.Requests < st.Messages*16/uint64(packetsPerRequest(writes)) {
					t.Errorf("switch stats %+v for %d messages sent", sw, st.Messages)
				}
				if (writes == aggregation.PacketWrites) != (st.PacketWriteCalls == 3) {
					t.Errorf("%v writes: %d of 3 calls sent packet writes", writes, st.PacketWriteCalls)
				}
			})
		}
	}
}

// packetsPerRequest is the packets of one write: a message's 16, or one.
func packetsPerRequest(w aggregation.Writes) int {
	if w == aggregation.PacketWrites {
		return 1
	}
	return 16
}

// checkFloat32 checks out against in (one worker's sum is its input)
// within the quantizer's bound for the message each element is in.
func checkFloat32(t *testing.T, in, out []float32, msgVals int) {
	t.Helper()
	for lo := 0; lo < len(in); lo += msgVals {
		hi := min(lo+msgVals, len(in))
		e, err := quant.BlockExponent(in[lo:hi])
		if err != nil {
			t.Fatal(err)
		}
		sc, err := quant.NewScale(1, e)
		if err != nil {
			t.Fatal(err)
		}
		for i := lo; i < hi; i++ {
			x := float64(in[i])
			if d := math.Abs(float64(out[i]) - x); d > sc.ErrorBound(math.Abs(x)) {
				t.Fatalf("element %d: got %g, want %g: error %g above the bound %g", i, out[i], x, d, sc.ErrorBound(math.Abs(x)))
			}
		}
	}
}

// check16 checks 16-bit results: out is in's float32 result (within the
// quantizer's bound) rounded back to f, so it is in[i] or, where the
// quantization error crosses a rounding boundary, one of its neighbours;
// all but a few elements must come back exactly.
func check16(t *testing.T, f quant.Format, in, out []uint16, msgVals int) {
	t.Helper()
	mant := 7 // bfloat16's mantissa bits
	if f == quant.Float16 {
		mant = 10
	}
	exact := 0
	for lo := 0; lo < len(in); lo += msgVals {
		hi := min(lo+msgVals, len(in))
		e, err := quant.BlockExponent16(in[lo:hi], f)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := quant.NewScale(1, e)
		if err != nil {
			t.Fatal(err)
		}
		for i := lo; i < hi; i++ {
			if out[i] == in[i] {
				exact++
				continue
			}
			x, got := float64(f.ToFloat32(in[i])), float64(f.ToFloat32(out[i]))
			// One step of f from x: a relative 2^-mant, or the smallest
			// float16 subnormal.
			step := max(math.Ldexp(math.Abs(x), -mant), math.Ldexp(1, -24))
			if d := math.Abs(got - x); d > sc.ErrorBound(math.Abs(x))+step {
				t.Fatalf("element %d: got %g, want %g: error %g above the bound %g and a step of %v", i, got, x, d, sc.ErrorBound(math.Abs(x)), f)
			}
		}
	}
	if exact < len(in)*99/100 {
		t.Fatalf("%d of %d elements came back exactly; a one-worker sum should give nearly all back", exact, len(in))
	}
}

// TestMoreWorkersRefused: the switch serves one-worker jobs, and says so
// to the controller (AddJob) and through it to a worker (Open).
func TestMoreWorkersRefused(t *testing.T) {
	testutil.NoLeaks(t)
	sw, err := instant.NewSwitch(instant.DefaultSwitchAddr)
	if err != nil {
		t.Fatal(err)
	}
	j := twoWorkerJob()
	if err := sw.AddJob(context.Background(), &j); !errors.Is(err, instant.ErrWorkers) {
		t.Fatalf("AddJob of 2 workers: %v, want ErrWorkers", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(20*time.Second))
	defer cancel()
	c, err := instant.Start(ctx, instant.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = aggregation.Open(ctx, aggregation.Config{Device: c.Device, ControllerAddr: c.ControllerAddr, SessionID: 1, Rank: 0, Workers: 2})
	if err == nil {
		t.Fatal("Open of a 2-worker job succeeded")
	}
	t.Log(err)
}

func twoWorkerJob() wire.Job {
	w := func(r int) wire.Worker {
		return wire.Worker{Rank: r, Addr: instant.DefaultWorkerAddr, QPNs: []uint32{0x12}, PSNs: []uint32{0}, SwitchQPNs: []uint32{uint32(0x100 + r)}}
	}
	return wire.Job{ID: 1, PacketSize: 256, PoolSlots: 16, Workers: []wire.Worker{w(0), w(1)}}
}
