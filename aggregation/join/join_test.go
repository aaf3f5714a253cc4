package join

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/local"
	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// joinAll joins ranks 0 … n-1 at once (soft NICs at 127.16.<net>.2, …).
func joinAll(ctl string, net byte, n int, sessions []Session) ([]*Job, []error) {
	jobs, errs := make([]*Job, n), make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			cfg := aggregation.Config{Rank: r, Workers: n, QPs: 2, PacketSize: 256, PacketsPerMessage: 4, PeerTimeout: 10 * time.Second}
			jobs[r], errs[r] = Join(context.Background(), Options{
				NIC:        NICConfig{Kind: NICSoft, Addr: netip.AddrFrom4([4]byte{127, 16, net, byte(2 + r)})},
				Controller: ctl, ConnectTimeout: 5 * time.Second, Session: cfg, Sessions: sessions,
			})
		})
	}
	wg.Wait()
	return jobs, errs
}

// TestJoin: two ranks join a job's float32, 16-bit-wire (optional) and
// int32 sessions in one call and all-reduce through each; at a switch
// that sums 32-bit lanes only the optional session is left out, on every
// rank, and the others work.
func TestJoin(t *testing.T) {
	for _, only32 := range []bool{false, true} {
		t.Run(fmt.Sprintf("only32=%v", only32), func(t *testing.T) {
			net := byte(10)
			if only32 {
				net = 11
			}
			lane := 0
			if only32 {
				lane = 4
			}
			cl, err := local.Start(context.Background(), local.Config{LaneBytes: lane, Switch: swswitch.Config{Addr: netip.AddrFrom4([4]byte{127, 16, net, 1})}})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			sessions := []Session{
				{ID: 1, DType: wire.Float32, Wire: 32, Name: "float32"},
				{ID: 1 | 1<<30, DType: wire.Float32, Wire: 16, Optional: true, Name: "16-bit-wire"},
				{ID: 2, DType: wire.Int32, Wire: 32, Name: "int32"},
			}
			jobs, errs := joinAll(cl.ControllerAddr, net, 2, sessions)
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			defer func() {
				for _, j := range jobs {
					j.Close()
				}
			}()
			for r, j := range jobs {
				if len(j.Sessions) != 3 || j.Sessions[0] == nil || j.Sessions[2] == nil || (j.Sessions[1] == nil) != only32 {
					t.Fatalf("rank %d: sessions %v, want the 16-bit one only where the switch sums 16-bit lanes", r, j.Sessions)
				}
			}
			var wg sync.WaitGroup
			res := make([][]float32, 2)
			ints := make([][]int32, 2)
			for r, j := range jobs {
				wg.Go(func() {
					x := []float32{1, 2, 3, float32(r)}
					if err := j.Sessions[0].AllReduce(context.Background(), x); err != nil {
						t.Errorf("rank %d float32: %v", r, err)
					}
					res[r] = x
					y := []int32{int32(r), 5}
					if err := j.Sessions[2].AllReduceInt32(context.Background(), y); err != nil {
						t.Errorf("rank %d int32: %v", r, err)
					}
					ints[r] = y
				})
			}
			wg.Wait()
			for r := range 2 {
				if fmt.Sprint(res[r]) != "[2 4 6 1]" || fmt.Sprint(ints[r]) != "[1 10]" {
					t.Errorf("rank %d: %v and %v, want [2 4 6 1] and [1 10]", r, res[r], ints[r])
				}
			}
		})
	}
}

// TestJoinStages: each stage's failure is a *JoinError naming it, with
// its cause: the NIC, the controller, a session the switch refuses.
func TestJoinStages(t *testing.T) {
	cfg := aggregation.Config{Workers: 1}
	_, err := Join(context.Background(), Options{NIC: NICConfig{Kind: "bogus"}, Session: cfg})
	var je *JoinError
	if !errors.As(err, &je) || je.Stage != StageNIC {
		t.Errorf("unknown NIC kind: %v, want a JoinError at %q", err, StageNIC)
	}
	_, err = Join(context.Background(), Options{NIC: NICConfig{Kind: NICSoft, Addr: netip.MustParseAddr("127.16.12.2")},
		Controller: "127.0.0.1:1", Session: cfg})
	if !errors.As(err, &je) || je.Stage != StageController || !errors.Is(err, ErrControllerUnreachable) {
		t.Errorf("no controller: %v, want a JoinError at %q wrapping ErrControllerUnreachable", err, StageController)
	}
	// A 16-bit session that is not optional fails the join at a switch
	// that sums 32-bit lanes only.
	cl, err := local.Start(context.Background(), local.Config{LaneBytes: 4, Switch: swswitch.Config{Addr: netip.MustParseAddr("127.16.13.1")}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, errs := joinAll(cl.ControllerAddr, 13, 1, []Session{{ID: 7, DType: wire.Float32, Wire: 16, Name: "16-bit-wire"}})
	if !errors.As(errs[0], &je) || je.Stage != StageSession || je.Session.ID != 7 || !errors.Is(errs[0], wire.ErrElementWidth) {
		t.Errorf("a refused session: %v, want a JoinError at %q for session 7 wrapping ErrElementWidth", errs[0], StageSession)
	}
}
