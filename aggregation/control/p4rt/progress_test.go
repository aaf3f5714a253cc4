package p4rt

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
)

// TestJobProgress reads a job's slot registers back: the (slot, set) pairs
// whose missing count is not 0 hold partial sums, and the ranks whose bit
// their set's bitmap lacks are the ones they wait for.
func TestJobProgress(t *testing.T) {
	info := loadFixture(t)
	f, conn := startFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := New(ctx, conn, testConfig(info))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	job := testJob() // 4 workers, slots [16, 22)
	if err := p.AddJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	pr, err := p.JobProgress(ctx, job.ID)
	if err != nil || pr.Aggregating != 0 || pr.Activity || len(pr.Ranks) != 4 {
		t.Fatalf("a cleared job: %+v, %v; want 4 ranks, nothing aggregating, no packet counts", pr, err)
	}
	// Slot 17 set 1 has ranks 0 and 1 (2 missing); slot 20 set 0 has
	// ranks 0, 1 and 3 (1 missing); slot 21's set 0 bitmap is stale
	// (its count is 0: complete).
	set := func(reg string, idx int64, vals ...uint64) {
		t.Helper()
		e, err := p.registerEntry(reg, idx, vals...)
		if err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		f.registers[[2]int64{regID(t, info, reg), idx}] = e.GetData()
		f.mu.Unlock()
	}
	set(registerBitmap, 17, 0b1111, 0b0011)
	set(registerMissing, 17*2+1, 2)
	set(registerBitmap, 20, 0b1011, 0)
	set(registerMissing, 20*2, 1)
	set(registerBitmap, 21, 0b0001, 0)
	pr, err = p.JobProgress(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	var missing []int
	for _, r := range pr.Ranks {
		missing = append(missing, r.Missing)
	}
	if pr.Aggregating != 2 || len(missing) != 4 || missing[0] != 0 || missing[1] != 0 || missing[2] != 2 || missing[3] != 1 {
		t.Errorf("aggregating %d, missing by rank %v; want 2 and [0 0 2 1]", pr.Aggregating, missing)
	}
	if err := p.RemoveJob(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.JobProgress(ctx, job.ID); !errors.Is(err, control.ErrJobNotInstalled) {
		t.Errorf("JobProgress of a removed job: %v; want control.ErrJobNotInstalled", err)
	}
}
