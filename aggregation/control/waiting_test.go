package control

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// progressProgrammer is a fakeProgrammer that reports the progress the
// test sets (a ProgressReporter, as the software switch is).
type progressProgrammer struct {
	*fakeProgrammer
	progress JobProgress
}

func (p *progressProgrammer) JobProgress(_ context.Context, jobID uint32) (JobProgress, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.jobs[jobID]; !ok {
		return JobProgress{}, fmt.Errorf("fake: job %d: %w", jobID, ErrJobNotInstalled)
	}
	return p.progress, nil
}

// TestWaitingForEndedRank: with a switch whose slots it cannot read, the
// controller names the ranks that ended their session while others call.
func TestWaitingForEndedRank(t *testing.T) {
	e := startController(t, nil)
	as := e.registerAll(t, context.Background(), 1, 3, 2, nil)
	c := e.client(t)
	w, err := c.WaitingFor(context.Background(), as[0])
	if err != nil || w.SlotsRead || len(w.Ranks) != 0 {
		t.Fatalf("before any end: %+v, %v; want no slots read, no rank", w, err)
	}
	if err := c.EndSession(context.Background(), as[2]); err != nil {
		t.Fatal(err)
	}
	w, err = c.WaitingFor(context.Background(), as[0])
	want := RankWait{Rank: 2, Addr: netip.AddrFrom4([4]byte{127, 0, 0, 4}), Ended: true}
	if err != nil || w.SlotsRead || len(w.Ranks) != 1 || w.Ranks[0] != want {
		t.Fatalf("after rank 2 ended: %+v, %v; want only %+v", w, err, want)
	}
}

// TestWaitingForSlots: with a switch whose slots it reads, the controller
// names the ranks missing from the job's partial sums, most missing first,
// with how long each has been silent.
func TestWaitingForSlots(t *testing.T) {
	p := &progressProgrammer{fakeProgrammer: newFakeProgrammer()}
	e := startController(t, func(c *Config) { c.Programmer = p })
	as := e.registerAll(t, context.Background(), 1, 3, 2, nil)
	p.mu.Lock()
	p.progress = JobProgress{Aggregating: 6, Activity: true, Ranks: []RankProgress{
		{Packets: 100, LastPacket: time.Now()},
		{Missing: 2, Packets: 90, LastPacket: time.Now().Add(-3 * time.Second)},
		{Missing: 6}, // never sent: silent since the job started
	}}
	p.mu.Unlock()
	c := e.client(t)
	w, err := c.WaitingFor(context.Background(), as[0])
	if err != nil {
		t.Fatal(err)
	}
	if !w.SlotsRead || w.Aggregating != 6 || len(w.Ranks) != 2 {
		t.Fatalf("%+v: want slots read, 6 aggregating, ranks 2 and 1", w)
	}
	r2, r1 := w.Ranks[0], w.Ranks[1]
	if r2.Rank != 2 || r2.MissingSlots != 6 || !r2.ActivityKnown || r2.Packets != 0 || r2.Addr != netip.AddrFrom4([4]byte{127, 0, 0, 4}) {
		t.Errorf("first: %+v; want rank 2, missing 6, no packet", r2)
	}
	if r1.Rank != 1 || r1.MissingSlots != 2 || r1.Packets != 90 || r1.Idle < 3*time.Second {
		t.Errorf("second: %+v; want rank 1, missing 2, 90 packets, silent for 3s or more", r1)
	}

	// A switch that counts no packets (the Tofino program): the slots
	// alone, no activity.
	p.mu.Lock()
	p.progress.Activity = false
	p.mu.Unlock()
	if w, err = c.WaitingFor(context.Background(), as[0]); err != nil {
		t.Fatal(err)
	}
	if !w.SlotsRead || len(w.Ranks) != 2 || w.Ranks[0].Rank != 2 || w.Ranks[0].ActivityKnown || w.Ranks[0].Idle != 0 {
		t.Errorf("%+v: want ranks 2 and 1 without activity", w)
	}
}

// TestWaitingForRefused: the question needs the job's token and a running
// job.
func TestWaitingForRefused(t *testing.T) {
	e := startController(t, nil)
	as := e.registerAll(t, context.Background(), 1, 2, 1, nil)
	c := e.client(t)
	forged := &Assignment{JobID: as[0].JobID, token: []byte("not the token")}
	if _, err := c.WaitingFor(context.Background(), forged); status.Code(err) != codes.PermissionDenied {
		t.Errorf("wrong token: %v; want PERMISSION_DENIED", err)
	}
	gone := &Assignment{JobID: 999, token: as[0].token}
	if _, err := c.WaitingFor(context.Background(), gone); status.Code(err) != codes.NotFound {
		t.Errorf("unknown job: %v; want NOT_FOUND", err)
	}
}

// orderProgrammer is a fakeProgrammer that reports ordering groups (an
// OrderReporter, as the software switch on several cores is).
type orderProgrammer struct {
	*fakeProgrammer
	groups []uint32
}

func (p *orderProgrammer) JobOrderGroups(jobID uint32) ([]uint32, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.jobs[jobID]; !ok {
		return nil, false
	}
	return p.groups, true
}

// TestOrderGroups: every rank learns the QPs' ordering groups from a switch
// that has several; a switch with one group, or none to report, sends none.
func TestOrderGroups(t *testing.T) {
	for _, c := range []struct {
		name   string
		groups []uint32
		want   []uint32
	}{
		{"two cores", []uint32{0, 1, 0}, []uint32{0, 1, 0}},
		{"one core", []uint32{2, 2, 2}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &orderProgrammer{fakeProgrammer: newFakeProgrammer(), groups: c.groups}
			e := startController(t, func(cfg *Config) { cfg.Programmer = p })
			for r, a := range e.registerAll(t, context.Background(), 1, 2, 3, nil) {
				if !slices.Equal(a.OrderGroups, c.want) {
					t.Errorf("rank %d: order groups %v, want %v", r, a.OrderGroups, c.want)
				}
			}
		})
	}
	e := startController(t, nil)
	for r, a := range e.registerAll(t, context.Background(), 1, 2, 3, nil) {
		if a.OrderGroups != nil {
			t.Errorf("no reporter: rank %d got order groups %v", r, a.OrderGroups)
		}
	}
	// A group per QP or nothing: another length is a broken controller.
	p := &orderProgrammer{fakeProgrammer: newFakeProgrammer(), groups: []uint32{0, 1}}
	e = startController(t, func(cfg *Config) { cfg.Programmer = p })
	c := e.client(t)
	_, err := c.RegisterRDMA(context.Background(), testReg(2, 0, 1, 3))
	if !errors.Is(err, ErrBadResponse) {
		t.Fatalf("2 order groups for 3 QPs: %v, want ErrBadResponse", err)
	}
	t.Log(err)
}
