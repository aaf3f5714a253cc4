package aggregation

import (
	"context"
	"fmt"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/instant"
)

// TestAllReduceAllocs: a call allocates nothing with one lane and a
// context that cannot be cancelled, with message writes and with packet
// writes, on either wire (the instant switch answers inside the engine's PostSend, so
// nothing else runs: every allocation is the engine's).
func TestAllReduceAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts: not in -short")
	}
	for _, c := range []struct {
		w    Writes
		wire int
	}{{MessageWrites, 32}, {PacketWrites, 32}, {MessageWrites, 16}, {PacketWrites, 16}} {
		w := c.w
		t.Run(fmt.Sprintf("%v/%d", w, c.wire), func(t *testing.T) {
			cl, err := instant.Start(context.Background(), instant.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			s, err := Open(context.Background(), Config{SessionID: 1, Rank: 0, Workers: 1, Device: cl.Device, ControllerAddr: cl.ControllerAddr, Writes: w, Wire: c.wire})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			x := make([]float32, 1<<16)
			for i := range x {
				x[i] = float32(i%97) - 48
			}
			call := func() {
				if err := s.AllReduce(context.Background(), x); err != nil {
					t.Fatal(err)
				}
			}
			call() // the first call sizes the scratch
			if n := testing.AllocsPerRun(20, call); n != 0 {
				t.Errorf("%v writes, %d-bit wire: %v allocations per call, want 0", w, c.wire, n)
			}
		})
	}
}
