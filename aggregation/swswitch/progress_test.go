package swswitch

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
)

// TestJobProgress: the switch's JobProgress (control.ProgressReporter)
// sums the slots and packet counts of every core: two of three workers
// send a message on each QP, the third on QP 0 only, and the job's partial
// sums then wait for the third on every other QP's slots.
func TestJobProgress(t *testing.T) {
	forFabrics(t, 0, func(t *testing.T, fb fabric) {
		const net, n, q, ppm = 14, 3, 4, 2
		sw := fb.newSwitch(t, Config{Addr: addr(net, 1), Model: switchmodel.Config{PoolSize: 64}})
		job := makeJob(1, net, n, q, 0, q*ppm, 256)
		if err := sw.AddJob(t.Context(), job); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		workers := make([]*testWorker, n)
		for r := range n {
			workers[r] = newTestWorker(t, job, r, ppm, sw)
		}
		for r := range 2 {
			for i := range q {
				workers[r].send(i, 0)
			}
		}
		workers[2].send(0, 0)
		const packets = (2*q + 1) * ppm
		testutil.WaitFor(t, fmt.Sprintf("the switch's count of the %d packets sent", packets), func() bool {
			pr, err := sw.JobProgress(t.Context(), job.ID)
			if err != nil || !pr.Activity {
				t.Fatalf("JobProgress: %+v, %v; want the job's progress with packet counts", pr, err)
			}
			var total uint64
			for _, r := range pr.Ranks {
				total += r.Packets
			}
			return total == packets
		})
		pr, _ := sw.JobProgress(t.Context(), job.ID)
		if pr.Aggregating != (q-1)*ppm || len(pr.Ranks) != n {
			t.Fatalf("%+v: want %d aggregating (slot, set) pairs and %d ranks", pr, (q-1)*ppm, n)
		}
		for r, want := range []struct {
			missing int
			packets uint64
		}{{0, q * ppm}, {0, q * ppm}, {(q - 1) * ppm, ppm}} {
			got := pr.Ranks[r]
			if got.Missing != want.missing || got.Packets != want.packets || got.LastPacket.Before(before) || got.LastPacket.After(time.Now()) {
				t.Errorf("rank %d: %+v; want missing %d, %d packets, the last since the test began", r, got, want.missing, want.packets)
			}
		}
		if err := sw.RemoveJob(t.Context(), job.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := sw.JobProgress(t.Context(), job.ID); !errors.Is(err, control.ErrJobNotInstalled) {
			t.Errorf("JobProgress of a removed job: %v; want control.ErrJobNotInstalled", err)
		}
	})
}
