package aggregation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// wire16Config is softConfig on the 16-bit wire.
func wire16Config(session uint32, packet, ppm, q int) Config {
	cfg := softConfig(session, packet, ppm, q)
	cfg.Wire = 16
	cfg.PeerTimeout = time.Minute // a loaded host is slow, not lossy
	return cfg
}

// lossyReordering is a cluster option: every worker's links hold back a
// share of the packets (reordering), on top of the cluster's loss.
func lossyReordering(share float64) clusterOpts {
	return clusterOpts{link: func(netip.Addr) memlink.LinkConfig {
		return memlink.LinkConfig{Reorder: share, ReorderDelay: 300 * time.Microsecond}
	}}
}

// TestConfigWire: the element width is 32 (the default) or 16; int32
// needs the 32-bit wire, and the 16-bit wire holds at most
// wire.MaxWire16Workers workers (its headroom, and the length check's
// 1-bit digits below 2^15).
func TestConfigWire(t *testing.T) {
	base := Config{Workers: 2, DType: wire.Float32}
	for _, tc := range []struct {
		name    string
		mod     func(*Config)
		field   string
		wantMax int
	}{
		{"default", func(*Config) {}, "", 0},
		{"16", func(c *Config) { c.Wire = 16 }, "", 0},
		{"32", func(c *Config) { c.Wire = 32 }, "", 0},
		{"8", func(c *Config) { c.Wire = 8 }, "Wire", 0},
		{"int32 on 16", func(c *Config) { c.Wire, c.DType = 16, wire.Int32 }, "Wire", 0},
		{"16 at the limit", func(c *Config) { c.Wire, c.Workers, c.Rank = 16, wire.MaxWire16Workers, 1 }, "", 0},
		{"16 above the limit", func(c *Config) { c.Wire, c.Workers = 16, wire.MaxWire16Workers+1 }, "Workers", wire.MaxWire16Workers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.mod(&c)
			err := c.Validate()
			var fe *FieldError
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.field == "":
			case !errors.As(err, &fe) || fe.Field != tc.field || fe.Max != tc.wantMax || !errors.Is(err, ErrConfig):
				t.Fatalf("Validate: %v, want a FieldError on %s (Max %d)", err, tc.field, tc.wantMax)
			}
		})
	}
	if quant.MaxWorkersWire16 != wire.MaxWire16Workers {
		t.Fatalf("quant.MaxWorkersWire16 %d, wire.MaxWire16Workers %d: the scale and the controller disagree", quant.MaxWorkersWire16, wire.MaxWire16Workers)
	}
	if 2*lengthBits16 > 256 || wire.MaxWire16Workers >= 1<<15 {
		t.Fatalf("the 16-bit length header (%d B) must fit the smallest packet and its sums (≤ %d) an int16", 2*lengthBits16, wire.MaxWire16Workers)
	}
}

// bigError is |got − Σ in[r][i]|, the sum taken exactly (math/big).
func bigError(got float64, in []float64) float64 {
	sum := new(big.Float).SetPrec(2048)
	for _, v := range in {
		sum.Add(sum, new(big.Float).SetFloat64(v))
	}
	d := new(big.Float).SetPrec(2048).Sub(new(big.Float).SetFloat64(got), sum)
	f, _ := d.Abs(d).Float64()
	return f
}

// wire16Scale is the 16-bit wire's scale of an n-worker message whose
// largest block exponent is e.
func wire16Scale(t *testing.T, n int, e int8) quant.Scale {
	t.Helper()
	sc, err := quant.NewScaleWire16(n, e)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// checkWire16 checks float32 results of the 16-bit wire against the exact
// sum (math/big), within the bound of each message's scale, and that every
// rank has the same bits.
func checkWire16(t *testing.T, in, out [][]float32, msgVals int) {
	t.Helper()
	n, l := len(in), len(in[0])
	col := make([]float64, n)
	for lo := 0; lo < l; lo += msgVals {
		hi := min(lo+msgVals, l)
		e := quant.MinExponent
		for r := range n {
			er, err := quant.BlockExponent(in[r][lo:hi])
			if err != nil {
				t.Fatal(err)
			}
			e = max(e, er)
		}
		sc := wire16Scale(t, n, e)
		for i := lo; i < hi; i++ {
			abs := 0.0
			for r := range n {
				col[r] = float64(in[r][i])
				abs += math.Abs(col[r])
			}
			if d, b := bigError(float64(out[0][i]), col), sc.ErrorBound(abs); d > b {
				t.Fatalf("element %d: got %g: error %g above the 16-bit wire's bound %g (e=%d)", i, out[0][i], d, b, e)
			}
			for r := 1; r < n; r++ {
				if math.Float32bits(out[r][i]) != math.Float32bits(out[0][i]) {
					t.Fatalf("element %d: rank %d got %g, rank 0 %g: workers disagree", i, r, out[r][i], out[0][i])
				}
			}
		}
	}
}

// checkWire16Half is checkWire16 for results in format f (ErrorBound16).
func checkWire16Half(t *testing.T, f quant.Format, in, out [][]uint16, msgVals int) {
	t.Helper()
	n, l := len(in), len(in[0])
	col := make([]float64, n)
	for lo := 0; lo < l; lo += msgVals {
		hi := min(lo+msgVals, l)
		e := quant.MinExponent
		for r := range n {
			er, err := quant.BlockExponent16(in[r][lo:hi], f)
			if err != nil {
				t.Fatal(err)
			}
			e = max(e, er)
		}
		sc := wire16Scale(t, n, e)
		for i := lo; i < hi; i++ {
			abs := 0.0
			for r := range n {
				col[r] = float64(f.ToFloat32(in[r][i]))
				abs += math.Abs(col[r])
			}
			for r := range out {
				if out[r][i] != out[0][i] {
					t.Fatalf("%v element %d: rank %d got %#04x, rank 0 %#04x", f, i, r, out[r][i], out[0][i])
				}
			}
			if f == quant.Float16 && abs > 65000 {
				continue // the sum may overflow the format
			}
			got := float64(f.ToFloat32(out[0][i]))
			if d, b := bigError(got, col), sc.ErrorBound16(f, abs); d > b {
				t.Fatalf("%v element %d: got %g: error %g above the 16-bit wire's bound %g (e=%d)", f, i, got, d, b, e)
			}
		}
	}
}

// TestSoftWire16: float32, bfloat16 and float16 tensors on the 16-bit wire
// through the real software switch over the in-memory network, with 1 %
// loss each way and reordering, at n = 1, 2, 3 and 8: every result within
// the 16-bit wire's bound of the exact sum (math/big), bit-identical on
// every rank; ones and small integers, which fit the block's 15 − ⌈log2 n⌉
// bits, exactly (docs/quantization.md). Each message carries twice the
// elements of the 32-bit wire's, and int32 calls are refused.
func TestSoftWire16(t *testing.T) {
	for i, n := range []int{1, 2, 3, 8} {
		t.Run(fmt.Sprint("n", n), func(t *testing.T) {
			t.Parallel()
			c := newSoftClusterWith(t, inMemory, byte(130+i), 0.01, 0.01, lossyReordering(0.05))
			cfg := wire16Config(1, 256, 4, 3)
			cfg.RetransmitTimeout = 5 * time.Millisecond
			j := openJob(t, c.ctlAddr, n, cfg, c.device(2))
			const l = 3000 // several messages, the last one partial
			msgVals := 256 * 4 / 2

			in := gradients(uint64(n), n, l)
			out := clone2(in)
			noErrors(t, j.allReduce(context.Background(), out))
			checkWire16(t, in, out, msgVals)

			for _, f := range []quant.Format{quant.BFloat16, quant.Float16} {
				in16 := halfInputs(in, f)
				out16 := clone2(in16)
				noErrors(t, allReduce16(j, out16, f))
				checkWire16Half(t, f, in16, out16, msgVals)
			}

			// Exact: the values fit the block's 15 − ⌈log2 n⌉ bits.
			for name, gen := range map[string]func(r, k int) float32{
				"ones":    func(int, int) float32 { return 1 },
				"integer": func(r, k int) float32 { return float32((k*7+r*13)%201 - 100) },
			} {
				ex := make([][]float32, n)
				for r := range ex {
					ex[r] = make([]float32, l)
					for k := range ex[r] {
						ex[r][k] = gen(r, k)
					}
				}
				got := clone2(ex)
				noErrors(t, j.allReduce(context.Background(), got))
				for k := range l {
					var want float32
					for r := range ex {
						want += ex[r][k] // small integers: exact in float32
					}
					for r := range got {
						if got[r][k] != want {
							t.Fatalf("%s: rank %d element %d: got %v, want %v exactly", name, r, k, got[r][k], want)
						}
					}
				}
				for _, f := range []quant.Format{quant.BFloat16, quant.Float16} {
					h := halfInputs(ex, f)
					noErrors(t, allReduce16(j, h, f))
					for k := range l {
						var want float32
						for r := range ex {
							want += ex[r][k]
						}
						for r := range h {
							if g := f.ToFloat32(h[r][k]); g != f.ToFloat32(f.FromFloat32(want)) {
								t.Fatalf("%s %v: rank %d element %d: got %v, want %v", name, f, r, k, g, want)
							}
						}
					}
				}
			}

			st := j.workers[0].sess.Stats()
			if wantMsgs := (l + msgVals - 1) / msgVals; st.Results < uint64(wantMsgs) {
				t.Fatalf("rank 0: %d results: fewer than one call's %d messages", st.Results, wantMsgs)
			}
			if w := j.workers[0].sess.Wire(); w != 16 {
				t.Fatalf("Session.Wire() = %d, want 16", w)
			}
			err := j.workers[0].sess.AllReduceInt32(context.Background(), []int32{1, 2})
			if !errors.Is(err, ErrDType) || !strings.Contains(err.Error(), "32-bit wire") {
				t.Fatalf("AllReduceInt32 on a 16-bit session: %v, want ErrDType naming the 32-bit wire", err)
			}
			t.Logf("rank 0: %+v", st)
		})
	}
}

// TestSoftWire16Density: a 16-bit-wire call sends half the packets of the
// 32-bit wire's for the same tensor (round 0 aside): a 256-byte payload
// holds 128 values instead of 64.
func TestSoftWire16Density(t *testing.T) {
	c := newSoftCluster(t, inMemory, 136, 0, 0)
	const n, l = 2, 128 * 64 // 64 packets of 16-bit values
	in := gradients(3, n, l)
	packets := map[int]uint64{}
	for i, w := range []int{32, 16} {
		cfg := softConfig(uint32(1+i), 256, 1, 2)
		cfg.Wire = w
		j := openJob(t, c.ctlAddr, n, cfg, c.device(2+10*i))
		noErrors(t, j.allReduce(context.Background(), clone2(in)))
		st := j.workers[0].sess.Stats()
		packets[w] = st.Packets - st.Retransmissions - uint64(cfg.QPs) // less round 0
		j.close(t)
	}
	if packets[32] != 2*packets[16] || packets[16] != l/128 {
		t.Fatalf("tensor packets: %d on the 32-bit wire, %d on the 16-bit wire; want %d and %d", packets[32], packets[16], l/64, l/128)
	}
}

// TestSoftWire16LengthMismatch: on the 16-bit wire round 0's length check
// (1-bit digits in int16 lanes) tells every worker of different lengths,
// and with two workers names the other's length.
func TestSoftWire16LengthMismatch(t *testing.T) {
	c := newSoftCluster(t, inMemory, 137, 0, 0)
	for i, lens := range [][]int{{1000, 1001}, {100, 300, 200}, {5000, 5000, 5000 + 1<<16}, {3, 1 << 20}} {
		cfg := wire16Config(uint32(i+1), 256, 2, 2)
		cfg.PeerTimeout = 30 * time.Second
		j := openJob(t, c.ctlAddr, len(lens), cfg, c.device(2+10*i))
		in := make([][]float32, len(lens))
		for r, l := range lens {
			in[r] = gradients(uint64(r), 1, l)[0]
		}
		errs := j.allReduce(context.Background(), in)
		for r, err := range errs {
			if !errors.Is(err, ErrLengthMismatch) {
				t.Fatalf("lengths %v: rank %d: %v, want ErrLengthMismatch", lens, r, err)
			}
			if other := lens[1-r%2]; len(lens) == 2 && !strings.Contains(err.Error(), fmt.Sprintf("the other worker's %d", other)) {
				t.Fatalf("lengths %v: rank %d: %v does not name the other length %d", lens, r, err, other)
			}
		}
		j.close(t)
	}
}

// TestReproducibleWire16: the sums of the 16-bit wire are a function of
// the inputs, the worker count and the message size alone, as the 32-bit
// wire's (TestReproducible): the same float32, bfloat16 and float16
// tensors under random loss, reordering, QP counts, lanes, packet sizes
// (one message size), message or packet writes and resend granularity
// give the reference job's bits on every rank.
func TestReproducibleWire16(t *testing.T) {
	const n, l = 3, 7*reproMessage/2*3 + 77
	in := gradients(12, n, l)
	formats := []quant.Format{quant.BFloat16, quant.Float16}
	in16 := [][][]uint16{halfInputs(in, formats[0]), halfInputs(in, formats[1])}

	run := func(t *testing.T, net byte, c reproCase) ([][]float32, [][][]uint16) {
		o := clusterOpts{}
		if c.reorder > 0 {
			o = lossyReordering(c.reorder)
		}
		cl := newSoftClusterWith(t, inMemory, net, c.loss, c.loss, o)
		cfg := wire16Config(1, c.packet, c.ppm, c.qps)
		cfg.Writes, cfg.WholeMessageResend = c.writes, c.wholeResend
		j := openJobWith(t, cl.ctlAddr, n, func(r int) Config {
			rc := cfg
			rc.Threads = c.threads[r]
			return rc
		}, cl.device(2))
		defer j.close(t)
		out := clone2(in)
		noErrors(t, j.allReduce(context.Background(), out))
		var out16 [][][]uint16
		for k, f := range formats {
			h := clone2(in16[k])
			noErrors(t, allReduce16(j, h, f))
			out16 = append(out16, h)
		}
		return out, out16
	}

	ref := reproCase{qps: 1, packet: 1024, ppm: 1, threads: []int{1, 1, 1}, writes: MessageWrites}
	want, want16 := run(t, 140, ref)
	checkWire16(t, in, want, reproMessage/2)
	for seed := range uint64(4) {
		c := randomReproCase(rand.New(rand.NewPCG(seed, 0x16)), n)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			t.Log(c)
			got, got16 := run(t, byte(141+seed), c)
			for r := range got {
				sameBits(t, fmt.Sprintf("rank %d vs the reference", r), got[r], want[0])
				for k, f := range formats {
					for i := range got16[k][r] {
						if got16[k][r][i] != want16[k][0][i] {
							t.Fatalf("%v rank %d element %d: %#04x, the reference %#04x", f, r, i, got16[k][r][i], want16[k][0][i])
						}
					}
				}
			}
		})
	}
}

// refuse16 is a switch without a 16-bit pipeline: it installs 32-bit jobs
// on the software switch and refuses the others, as the Tofino program's
// programmer does.
type refuse16 struct{ *swswitch.Switch }

func (p refuse16) AddJob(ctx context.Context, job *wire.Job) error {
	if job.LaneBytes() != 4 {
		return fmt.Errorf("add job %d: %d-bit lanes: %w", job.ID, 8*job.LaneBytes(), wire.ErrElementWidth)
	}
	return p.Switch.AddJob(ctx, job)
}

// TestSoftWire16Refused: a switch that cannot sum 16-bit lanes refuses a
// 16-bit job at the rendezvous, so every rank's Open fails with an error
// wrapping wire.ErrElementWidth, alike; the same workers then run the job
// on the 32-bit wire (the fallback libswml makes).
func TestSoftWire16Refused(t *testing.T) {
	mem, err := memlink.New(memlink.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	swAddr := addr4(127, 88, 138, 1)
	ep, err := mem.Listen(netip.AddrPortFrom(swAddr, 0))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := swswitch.New(swswitch.Config{Addr: swAddr, Endpoint: ep})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	ccfg := control.Config{Programmer: refuse16{sw}, PoolSize: sw.Config().Model.PoolSize, SessionTimeout: 20 * time.Second, AllowAddressMismatch: true}
	ccfg.SetSwitchAddr(swAddr)
	ctl, err := control.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- ctl.Serve(lis) }()
	defer func() {
		ctl.Close()
		<-served
	}()
	dev := func(r int) (verbs.Device, error) {
		a := addr4(127, 88, 138, byte(2+r))
		ep, err := mem.Listen(netip.AddrPortFrom(a, 0))
		if err != nil {
			return nil, err
		}
		return soft.Open(soft.Config{Endpoint: ep})
	}

	const n = 3
	devs := make([]verbs.Device, n)
	clis := make([]*control.Client, n)
	for r := range n {
		if devs[r], err = dev(r); err != nil {
			t.Fatal(err)
		}
		defer devs[r].Close()
		if clis[r], err = control.Dial(lis.Addr().String()); err != nil {
			t.Fatal(err)
		}
		defer clis[r].Close()
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			cfg := wire16Config(1, 256, 2, 2)
			cfg.Rank, cfg.Workers, cfg.Device, cfg.Controller = r, n, devs[r], clis[r]
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := Open(ctx, cfg)
			if err == nil {
				s.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, wire.ErrElementWidth) {
			t.Fatalf("rank %d: Open on the 16-bit wire of a 32-bit switch: %v, want wire.ErrElementWidth", r, err)
		}
		t.Logf("rank %d: %v", r, err)
	}

	// The fallback: the same job on the 32-bit wire.
	j := &job{workers: make([]*worker, n)}
	for r := range n {
		wg.Go(func() {
			cfg := softConfig(2, 256, 2, 2)
			cfg.Rank, cfg.Workers, cfg.Device, cfg.Controller = r, n, devs[r], clis[r]
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := Open(ctx, cfg)
			j.workers[r], errs[r] = &worker{sess: s}, err
		})
	}
	wg.Wait()
	noErrors(t, errs)
	defer func() {
		for _, w := range j.workers {
			w.sess.Close()
		}
	}()
	in := gradients(5, n, 1000)
	out := clone2(in)
	noErrors(t, j.allReduce(context.Background(), out))
	checkSums(t, in, out, 256*2/4)
}
