package local_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/local"
	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// Tree tests run on in-memory networks, one per test, so their addresses
// (127.14.6.x, kept for symmetry with the package's socket tests) never
// meet.

// treeInputs are calls × n tensors of length elems: values of mixed signs
// and magnitudes, a different block exponent per worker and message, so
// that the quantization scale and the exponent maxima matter.
func treeInputs(n, calls, elems int, seed uint64) [][][]float32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	in := make([][][]float32, calls)
	for c := range in {
		in[c] = make([][]float32, n)
		for r := range n {
			x := make([]float32, elems)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(12)-6))
			}
			in[c][r] = x
		}
	}
	return in
}

// runJob all-reduces every call's tensors on n workers, rank r on dev(r)
// registering with ctl(r), and returns what each rank got.
func runJob(t *testing.T, n int, wireBits int, dev func(r int) verbs.Device, ctl func(r int) string, in [][][]float32, onFail ...func()) [][][]float32 {
	t.Helper()
	out := make([][][]float32, len(in))
	for c := range in {
		out[c] = make([][]float32, n)
	}
	err := local.Parallel(n, func(r int) error {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
		defer cancel()
		s, err := aggregation.Open(ctx, aggregation.Config{Device: dev(r), ControllerAddr: ctl(r), SessionID: 7, Rank: r, Workers: n,
			QPs: 4, PacketSize: 256, PacketsPerMessage: 2, Wire: wireBits, RetransmitTimeout: 2 * time.Millisecond})
		if err != nil {
			return err
		}
		defer s.Close()
		for c := range in {
			x := append([]float32(nil), in[c][r]...)
			if err := s.AllReduce(ctx, x); err != nil {
				return fmt.Errorf("call %d: %w", c, err)
			}
			out[c][r] = x
		}
		return nil
	})
	if err != nil {
		for _, f := range onFail {
			f()
		}
		t.Fatal(err)
	}
	return out
}

// flatJob runs in on one switch of n workers over an in-memory network
// whose every link is link.
func flatJob(t *testing.T, n, wireBits int, link memlink.LinkConfig, in [][][]float32) [][][]float32 {
	t.Helper()
	mem, err := memlink.New(memlink.Config{Seed: 11, Link: link})
	if err != nil {
		t.Fatal(err)
	}
	sw := netip.MustParseAddr("127.14.6.1")
	ep, err := mem.Listen(netip.AddrPortFrom(sw, 0))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := local.Start(context.Background(), local.Config{Switch: swswitch.Config{Addr: sw, Endpoint: ep},
		Controller: control.Config{SessionTimeout: 20 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	devs := make([]verbs.Device, n)
	for r := range n {
		ep, err := mem.Listen(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 14, 6, byte(2 + r)}), 0))
		if err != nil {
			t.Fatal(err)
		}
		d, err := soft.Open(soft.Config{Endpoint: ep})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		devs[r] = d
	}
	return runJob(t, n, wireBits, func(r int) verbs.Device { return devs[r] }, func(int) string { return cl.ControllerAddr }, in)
}

// startTree starts leaves × perLeaf workers under a spine on an in-memory
// network whose every link is link.
func startTree(t *testing.T, leaves, perLeaf, cores int, link memlink.LinkConfig) *local.Tree {
	t.Helper()
	mem, err := memlink.New(memlink.Config{Seed: 13, Link: link})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := local.StartTree(context.Background(), local.TreeConfig{Leaves: leaves, WorkersPerLeaf: perLeaf,
		SpineAddr: netip.MustParseAddr("127.14.6.1"), Memory: mem, Switch: swswitch.Config{Cores: cores},
		Controller: control.Config{SessionTimeout: 20 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func treeJob(t *testing.T, tr *local.Tree, wireBits int, in [][][]float32) [][][]float32 {
	t.Helper()
	return runJob(t, tr.Workers(), wireBits, func(r int) verbs.Device { return tr.NICs[r] }, tr.ControllerAddr, in, func() {
		for i, l := range tr.Leaves {
			st := l.Switch.Stats()
			t.Logf("leaf %d: %+v", i, st.Totals())
		}
		st := tr.Spine.Switch.Stats()
		t.Logf("spine: %+v", st.Totals())
	})
}

// TestTreeBitIdentical: the same tensors all-reduced through a flat switch
// and through a two-level tree give every worker the same bits (integer
// addition is associative, and every worker quantizes for the job's total
// worker count): 2 leaves × 2 workers without loss, 2 × 3 with 1.5 % loss
// on every link (worker–leaf and leaf–spine, both ways), float32 on the
// 32-bit wire and on the 16-bit one; and 2 × 2 with loss on switches of one
// and of two cores (the spine's results steered to the core of their QP
// index). Four QPs, so that each core's ordering group has two.
func TestTreeBitIdentical(t *testing.T) {
	testutil.NoLeaks(t)
	for _, tc := range []struct {
		leaves, perLeaf, wire int
		loss                  float64
		cores                 int
	}{
		{2, 2, 32, 0, 1},
		{2, 2, 16, 0, 1},
		{2, 3, 32, 0.015, 1},
		{2, 3, 16, 0.015, 1},
		{2, 2, 32, 0.015, 2},
		{2, 2, 32, 0.015, 1},
	} {
		t.Run(fmt.Sprintf("%dx%d/wire%d/loss%g/cores%d", tc.leaves, tc.perLeaf, tc.wire, tc.loss, tc.cores), func(t *testing.T) {
			n := tc.leaves * tc.perLeaf
			in := treeInputs(n, 3, 3000, uint64(n*tc.wire))
			link := memlink.LinkConfig{Loss: tc.loss}
			want := flatJob(t, n, tc.wire, link, in)
			tr := startTree(t, tc.leaves, tc.perLeaf, tc.cores, link)
			got := treeJob(t, tr, tc.wire, in)
			for c := range in {
				for r := range n {
					for i := range got[c][r] {
						if math.Float32bits(got[c][r][i]) != math.Float32bits(want[c][r][i]) {
							t.Fatalf("call %d rank %d element %d: tree %v, flat %v", c, r, i, got[c][r][i], want[c][r][i])
						}
					}
				}
			}
			var up, spine uint64
			for _, l := range tr.Leaves {
				st := l.Switch.Stats()
				up += st.Model.UpstreamWrites
				spine += st.Model.SpineResults
			}
			if up == 0 || spine == 0 {
				t.Fatalf("the leaves sent %d writes up and took %d spine results", up, spine)
			}
			sst := tr.Spine.Switch.Stats()
			t.Logf("leaves: %d writes up, %d spine results; spine: %+v", up, spine, sst.Totals())
		})
	}
}

// TestTreeSpineLost: when the spine goes away, every worker's all-reduce
// fails with an error that names the spine, not a hang.
func TestTreeSpineLost(t *testing.T) {
	testutil.NoLeaks(t)
	tr := startTree(t, 2, 1, 1, memlink.LinkConfig{})
	const n = 2
	opened := make(chan struct{}, n)
	spineGone := make(chan struct{})
	go func() {
		for range n {
			<-opened
		}
		tr.Spine.Close()
		close(spineGone)
	}()
	err := local.Parallel(n, func(r int) error {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
		defer cancel()
		s, err := aggregation.Open(ctx, aggregation.Config{Device: tr.NICs[r], ControllerAddr: tr.ControllerAddr(r), SessionID: 9, Rank: r, Workers: n,
			QPs: 1, PacketSize: 256, PacketsPerMessage: 1})
		if err != nil {
			return err
		}
		defer s.Close()
		opened <- struct{}{}
		<-spineGone
		x := make([]float32, 1000)
		for {
			if err := s.AllReduce(ctx, x); err != nil {
				return err
			}
		}
	})
	if err == nil || !errors.Is(err, control.ErrJobEnded) || !strings.Contains(err.Error(), "spine switch 127.14.6.1") {
		t.Fatalf("workers after the spine went away: %v; want an ended job naming the spine", err)
	}
	t.Log(err)
}

// TestTreeLeafLost: when a leaf goes away, its workers' job ends, and
// every other leaf's workers fail with an error that names the lost leaf:
// no worker hangs.
func TestTreeLeafLost(t *testing.T) {
	testutil.NoLeaks(t)
	tr := startTree(t, 2, 1, 1, memlink.LinkConfig{})
	const n = 2
	opened := make(chan struct{}, n)
	leafGone := make(chan struct{})
	go func() {
		for range n {
			<-opened
		}
		tr.Leaves[1].Close()
		close(leafGone)
	}()
	errs := make([]error, n)
	local.Parallel(n, func(r int) error {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
		defer cancel()
		s, err := aggregation.Open(ctx, aggregation.Config{Device: tr.NICs[r], ControllerAddr: tr.ControllerAddr(r), SessionID: 9, Rank: r, Workers: n,
			QPs: 1, PacketSize: 256, PacketsPerMessage: 1})
		if err != nil {
			errs[r] = err
			return err
		}
		defer s.Close()
		opened <- struct{}{}
		<-leafGone
		x := make([]float32, 1000)
		for {
			if err := s.AllReduce(ctx, x); err != nil {
				errs[r] = err
				return err
			}
		}
	})
	if !errors.Is(errs[0], control.ErrJobEnded) || !strings.Contains(errs[0].Error(), "leaf 1 of 2 (switch 127.14.8.1)") {
		t.Errorf("rank 0, on the other leaf: %v; want an ended job naming the lost leaf", errs[0])
	}
	if errs[1] == nil || errors.Is(errs[1], context.DeadlineExceeded) {
		t.Errorf("rank 1, on the lost leaf: %v; want the job's end", errs[1])
	}
	t.Logf("rank 0: %v", errs[0])
	t.Logf("rank 1: %v", errs[1])
}
