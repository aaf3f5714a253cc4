package switchmodel

// Progress: what a job's slots say about its workers, for the controller
// to name the ranks a stalled job waits for (docs/control-plane.md "Who a
// stalled job waits for"). A (slot, set) pair whose WorkersCounter is not
// 0 holds a partial sum; the ranks whose BitmapChecker bit is clear in it
// have not contributed, and every other worker's message in that slot
// waits for them.

// JobProgress is a snapshot of one job's slots and workers.
type JobProgress struct {
	// Aggregating is the number of the job's (slot, set) pairs holding a
	// partial sum.
	Aggregating int
	// Ranks[r] is rank r's share.
	Ranks []RankProgress
}

// RankProgress is one rank's part in a JobProgress.
type RankProgress struct {
	// Missing is the number of aggregating (slot, set) pairs that lack
	// this rank's contribution.
	Missing int
	// Packets is the number of this rank's packets that reached the
	// job's QPs since AddJob; LastPacket the clock (SetClock) when the
	// last one did, 0 if none did.
	Packets    uint64
	LastPacket int64
}

// SetClock sets the time stamp the pipeline records as a rank's last
// packet (RankProgress.LastPacket) until the next SetClock: the runtime's
// clock, read once per batch, so that no packet pays for reading it.
func (p *Pipeline) SetClock(t int64) { p.Receiver.clock = t }

// JobProgress reads job id's slots and its workers' packet counts; false
// if the job is not installed. It walks the job's pool range, so it is a
// control-plane call, not one per packet.
func (p *Pipeline) JobProgress(id uint32) (JobProgress, bool) {
	j, ok := p.Receiver.jobs[id]
	if !ok {
		return JobProgress{}, false
	}
	pr := JobProgress{Ranks: make([]RankProgress, j.n)}
	for r, a := range j.ranks {
		pr.Ranks[r].Packets, pr.Ranks[r].LastPacket = a.packets, a.last
	}
	if j.n < 2 {
		return pr, true // one worker's contribution completes its slot at once
	}
	for slot := j.poolBase; slot < j.poolBase+j.poolSlots; slot++ {
		for set := range uint8(2) {
			if p.Counter.Missing(slot, set) == 0 {
				continue
			}
			pr.Aggregating++
			for r := range j.n {
				if p.Bitmap.Bitmap(slot, set, r)&(1<<(r&63)) == 0 {
					pr.Ranks[r].Missing++
				}
			}
		}
	}
	return pr, true
}
