package switchmodel

import (
	"slices"
	"testing"
)

// TestJobProgress checks that a job's progress names the ranks missing
// from its partial sums and stamps each rank's last packet with the clock.
func TestJobProgress(t *testing.T) {
	job := testJob(1, 3, 2, 0, 4, 4*tVals)
	p := mustPipeline(t, job)
	var md Metadata
	psn := make([]uint32, 3)
	send := func(rank, qp int, slot uint32, set uint8) {
		t.Helper()
		q := only(slot, set, int32(rank))
		q.qpn, q.psn = job.Workers[rank].SwitchQPNs[qp], psn[rank]
		psn[rank]++
		p.Process(job.Workers[rank].Addr, q.parsed(t), &md)
		if md.Decision == Drop {
			t.Fatalf("rank %d slot %d set %d dropped: %v", rank, slot, set, md.Reason)
		}
	}
	type want struct {
		aggregating int
		missing     []int
		packets     []uint64
		last        []int64
	}
	check := func(step string, w want) {
		t.Helper()
		pr, ok := p.JobProgress(job.ID)
		if !ok {
			t.Fatalf("%s: job not installed", step)
		}
		var missing []int
		var packets []uint64
		var last []int64
		for _, r := range pr.Ranks {
			missing, packets, last = append(missing, r.Missing), append(packets, r.Packets), append(last, r.LastPacket)
		}
		if pr.Aggregating != w.aggregating || !slices.Equal(missing, w.missing) || !slices.Equal(packets, w.packets) || !slices.Equal(last, w.last) {
			t.Fatalf("%s: aggregating %d missing %v packets %v last %v; want %d %v %v %v",
				step, pr.Aggregating, missing, packets, last, w.aggregating, w.missing, w.packets, w.last)
		}
	}
	check("installed", want{0, []int{0, 0, 0}, []uint64{0, 0, 0}, []int64{0, 0, 0}})
	p.SetClock(100)
	send(0, 0, 0, 0)
	send(0, 1, 2, 0)
	p.SetClock(200)
	send(1, 0, 0, 0)
	// Slot 0 set 0 waits for rank 2, slot 2 set 0 for ranks 1 and 2.
	check("two ranks in", want{2, []int{0, 1, 2}, []uint64{2, 1, 0}, []int64{100, 200, 0}})
	p.SetClock(300)
	send(2, 0, 0, 0) // completes slot 0
	check("slot 0 done", want{1, []int{0, 1, 1}, []uint64{2, 1, 1}, []int64{100, 200, 300}})
	send(2, 1, 2, 0)
	send(1, 1, 2, 0) // completes slot 2
	check("all done", want{0, []int{0, 0, 0}, []uint64{2, 2, 2}, []int64{100, 300, 300}})
	// The next round of slot 0 (set 1) clears set 0's bits as it goes.
	send(1, 0, 0, 1)
	check("next round", want{1, []int{1, 0, 1}, []uint64{2, 3, 2}, []int64{100, 300, 300}})
	if n, ok := p.JobPackets(job.ID); !ok || n != 7 {
		t.Errorf("JobPackets = %d, %v; want 7", n, ok)
	}
	p.RemoveJob(job.ID)
	if _, ok := p.JobProgress(job.ID); ok {
		t.Error("JobProgress of a removed job: ok")
	}
}
