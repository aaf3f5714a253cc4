package control

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// leafProgrammer is a fake leaf switch: its JoinUpstream records the
// session and returns a link the test ends.
type leafProgrammer struct {
	*fakeProgrammer
	mu       sync.Mutex
	sessions []UpstreamSession
	link     *fakeLink
	joinErr  error
}

type fakeLink struct {
	done chan struct{}
	err  error
}

func (l *fakeLink) Done() <-chan struct{}             { return l.done }
func (l *fakeLink) Err() error                        { return l.err }
func (l *fakeLink) End(context.Context, bool, string) {}

func (p *leafProgrammer) JoinUpstream(_ context.Context, _ *wire.Job, s UpstreamSession) (UpstreamLink, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.joinErr != nil {
		return nil, p.joinErr
	}
	p.sessions = append(p.sessions, s)
	return p.link, nil
}

// TestLeafRanks: a leaf's controller takes its share of a job's ranks as
// its switch job's ranks, refuses the others, joins the spine before it
// answers, and aborts the job when the spine's job ends first.
func TestLeafRanks(t *testing.T) {
	lp := &leafProgrammer{fakeProgrammer: newFakeProgrammer(), link: &fakeLink{done: make(chan struct{})}}
	env := startController(t, func(c *Config) {
		c.Programmer = lp
		c.Ranks = RankRange{First: 2, Count: 2}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err := env.client(t).RegisterRDMA(ctx, testReg(1, 0, 4, 1))
	if err == nil || !strings.Contains(err.Error(), "serves ranks 2..3") {
		t.Fatalf("rank 0 at the leaf of ranks 2-3: %v", err)
	}
	as := make([]*Assignment, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		c := env.client(t)
		wg.Go(func() { as[i], errs[i] = c.RegisterRDMA(ctx, testReg(1, 2+i, 4, 1)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	added, _, _ := lp.snapshot()
	if len(added) != 1 || len(added[0].Workers) != 2 || added[0].Workers[0].Addr != testReg(1, 2, 4, 1).Addr {
		t.Fatalf("the leaf's job: %+v", added)
	}
	if len(lp.sessions) != 1 || lp.sessions[0].SessionID != 1 || lp.sessions[0].MessageSize != 1024 {
		t.Fatalf("JoinUpstream: %+v", lp.sessions)
	}
	// The spine's job ends first: the leaf's job is aborted, naming it.
	lp.link.err = errors.New("spine gone")
	close(lp.link.done)
	for _, a := range as {
		select {
		case <-a.Done():
		case <-ctx.Done():
			t.Fatal("the leaf's job outlived its spine's")
		}
		if err := a.Err(); !errors.Is(err, ErrJobEnded) || !strings.Contains(err.Error(), "the spine's job ended: spine gone") {
			t.Fatalf("rank %d: %v", a.Rank, err)
		}
	}
	if got := env.metric(t, "swml_controller_sessions_ended_total", "reason", endReasonUpstream); got != 1 {
		t.Errorf("sessions ended for upstream_lost: %v", got)
	}
}

// TestLeafJoinFails: a leaf that cannot join its spine's job fails the
// session on every rank and removes the job it installed.
func TestLeafJoinFails(t *testing.T) {
	lp := &leafProgrammer{fakeProgrammer: newFakeProgrammer(), joinErr: errors.New("no spine")}
	env := startController(t, func(c *Config) { c.Programmer = lp })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := env.client(t).RegisterRDMA(ctx, testReg(1, 0, 1, 1))
	if err == nil || !strings.Contains(err.Error(), "join the spine switch's job: no spine") {
		t.Fatalf("register: %v", err)
	}
	if _, removed, live := lp.snapshot(); live != 0 || len(removed) != 1 {
		t.Fatalf("after a failed join: %d jobs installed, %d removed", live, len(removed))
	}
}
