package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress draws a one-line progress bar on a terminal: redrawn in place
// with \r, at most every progressInterval, and wiped by clear. On anything
// that is not a terminal (a file, a pipe, a test's buffer) it prints nothing.
// A nil *progress is valid and silent. Safe for concurrent use.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	total int
	done  int
	last  time.Time
	width int // characters of the last line drawn, 0 if nothing is shown
	start time.Time
	label string // the phase running now
}

const progressInterval = 100 * time.Millisecond

// newProgress returns a bar of total steps on w, or nil if w is not a
// terminal.
func newProgress(w io.Writer, total int) *progress {
	if !isTerminal(w) || total <= 0 {
		return nil
	}
	return newProgressTo(w, total)
}

// newProgressTo draws on w whatever it is (tests).
func newProgressTo(w io.Writer, total int) *progress {
	return &progress{w: w, total: total, start: time.Now()}
}

// phase names the phase that starts now (setting up the job, the first
// all-reduce of an algorithm: the first all-reduce of a large job can take
// a minute) and draws at once, so that the bar shows before its first
// step.
func (p *progress) phase(label string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label = label
	p.draw(time.Now())
}

// tick redraws every interval, so that the elapsed time moves during a
// long step, until stop is called.
func (p *progress) tick(interval time.Duration) (stop func()) {
	if p == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				p.mu.Lock()
				if p.width > 0 { // not after clear
					p.draw(now)
				}
				p.mu.Unlock()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// step records one finished step of the phase named label and redraws if
// the last drawing is old enough (or this was the last step).
func (p *progress) step(label string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = min(p.done+1, p.total)
	p.label = label
	now := time.Now()
	if now.Sub(p.last) < progressInterval && p.done < p.total {
		return
	}
	p.draw(now)
}

// draw draws the bar; p.mu is held.
func (p *progress) draw(now time.Time) {
	p.last = now
	const barWidth = 30
	fill := barWidth * p.done / p.total
	line := fmt.Sprintf("[%s%s] %3d%%  %d/%d  %s  %v", strings.Repeat("=", fill), strings.Repeat(" ", barWidth-fill),
		100*p.done/p.total, p.done, p.total, p.label, now.Sub(p.start).Round(time.Second))
	pad := ""
	if n := p.width - len([]rune(line)); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprint(p.w, "\r"+line+pad)
	p.width = len([]rune(line))
}

// clear wipes the bar so that what follows starts on a clean line.
func (p *progress) clear() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.width > 0 {
		fmt.Fprint(p.w, "\r"+strings.Repeat(" ", p.width)+"\r")
		p.width = 0
	}
}
