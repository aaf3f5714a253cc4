package p4rt

import (
	"context"
	"errors"
	"fmt"
	"io"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
)

var _ control.ProgressReporter = (*Programmer)(nil)

// JobProgress reads job id's slot registers over P4Runtime
// (control.ProgressReporter): WorkersCounter's missing count of each
// (slot, set) pair of its pool range and BitmapChecker's bitmap pair of
// each slot. A pair whose count is not 0 holds a partial sum that lacks
// every rank whose bit (1 << rank) its set's bitmap lacks
// (docs/control-plane.md "Who a stalled job waits for"). The program
// counts no packets per rank, so Activity is false. The registers are read
// while packets may change them: a snapshot of a stalled job, whose slots
// do not move, is exact.
func (p *Programmer) JobProgress(ctx context.Context, jobID uint32) (control.JobProgress, error) {
	p.mu.Lock()
	ij := p.jobs[jobID]
	p.mu.Unlock()
	if ij == nil {
		return control.JobProgress{}, fmt.Errorf("p4rt: progress of job %d: %w", jobID, control.ErrJobNotInstalled)
	}
	job := &ij.job
	lo, hi := int64(job.PoolBase), int64(job.PoolBase)+int64(job.PoolSlots)
	missing, err := p.readRegister(ctx, registerMissing, 2*lo, 2*hi)
	if err != nil {
		return control.JobProgress{}, err
	}
	bitmaps, err := p.readRegister(ctx, registerBitmap, lo, hi)
	if err != nil {
		return control.JobProgress{}, err
	}
	out := control.JobProgress{Ranks: make([]control.RankProgress, len(job.Workers))}
	if len(job.Workers) < 2 {
		return out, nil // one worker's contribution completes its slot at once
	}
	for s := lo; s < hi; s++ {
		for set := range int64(2) {
			if m := missing[2*s+set]; len(m) == 0 || m[0] == 0 {
				continue
			}
			out.Aggregating++
			var bits uint64
			if b := bitmaps[s]; len(b) == 2 {
				bits = b[set] // bitmap_pair_t {set0, set1}
			}
			for r := range out.Ranks {
				if bits&(1<<r) == 0 {
					out.Ranks[r].Missing++
				}
			}
		}
	}
	return out, nil
}

// readRegister reads cells [lo, hi) of register name in one Read: each
// cell's values (one per member of a struct cell), by index.
func (p *Programmer) readRegister(ctx context.Context, name string, lo, hi int64) (map[int64][]uint64, error) {
	r, err := p.info.register(name)
	if err != nil {
		return nil, err
	}
	req := &p4v1.ReadRequest{DeviceId: p.cfg.DeviceID}
	for i := lo; i < hi; i++ {
		req.Entities = append(req.Entities, &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: &p4v1.RegisterEntry{
			RegisterId: r.GetPreamble().GetId(), Index: &p4v1.Index{Index: i},
		}}})
	}
	rc, err := p.client.Read(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("p4rt: read register %s[%d, %d): %w", name, lo, hi, err)
	}
	out := make(map[int64][]uint64, hi-lo)
	for {
		resp, err := rc.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("p4rt: read register %s[%d, %d): %w", name, lo, hi, err)
		}
		for _, e := range resp.GetEntities() {
			re := e.GetRegisterEntry()
			if re == nil || re.GetRegisterId() != r.GetPreamble().GetId() {
				continue
			}
			var vals []uint64
			if st := re.GetData().GetStruct(); st != nil {
				for _, m := range st.GetMembers() {
					vals = append(vals, decodeUint(m.GetBitstring()))
				}
			} else {
				vals = []uint64{decodeUint(re.GetData().GetBitstring())}
			}
			out[re.GetIndex().GetIndex()] = vals
		}
	}
}
