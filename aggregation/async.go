package aggregation

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/swml-rdma/swml-rdma/aggregation/quant"
)

// Asynchronous all-reduces.
//
// AllReduceAsync and AllReduceInt32Async queue a call and return at once with
// a Handle; one goroutine per session runs the queued calls one after the
// other, in the order they were queued (the order every worker must agree
// on, as for AllReduce). Several calls can therefore be in flight on one
// session, as a training framework needs: DDP hands over each gradient
// bucket as soon as the backward pass has filled it and waits for all of
// them at the end.
//
// Buffer ownership: from the call to AllReduceAsync until its Handle is done
// (Done closed, Wait or Test returning done), the session owns x: it reads x
// and overwrites it with the result. The caller must not read, write, free
// or reuse x in that time, and must keep it alive (for memory that Go does
// not manage, e.g. a tensor handed over through the C ABI, the caller keeps
// the allocation alive; Go only ever copies between x and the session's
// registered buffer, so x need not be registered or pinned). After the
// handle is done the session never touches x again, even if the call
// failed. Wait(ctx) returning because ctx ended does not end the call: the
// session still owns x until Done is closed; cancel the call through the
// context given to AllReduceAsync, or Close/Abort the session, which fails
// every queued call promptly.
//
// Do not mix synchronous and asynchronous calls that may overlap on one
// session: their relative order would be undefined, and every worker must
// issue the same sequence.

// Handle is the pending result of one asynchronous all-reduce.
type Handle struct {
	done chan struct{}
	err  error // set before done is closed
}

// Done is closed when the call has finished, successfully or not.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Err is the call's result once Done is closed (nil: x holds the sum); nil
// before.
func (h *Handle) Err() error {
	select {
	case <-h.done:
		return h.err
	default:
		return nil
	}
}

// Test reports whether the call has finished, and its result if it has.
func (h *Handle) Test() (done bool, err error) {
	select {
	case <-h.done:
		return true, h.err
	default:
		return false, nil
	}
}

// Wait blocks until the call has finished and returns its result, or until
// ctx ends: then it returns an error wrapping ctx.Err() and the call goes on
// (the session still owns the buffer; see "Buffer ownership" above).
func (h *Handle) Wait(ctx context.Context) error {
	select {
	case <-h.done:
		return h.err
	default:
	}
	select {
	case <-h.done:
		return h.err
	case <-ctx.Done():
		return fmt.Errorf("aggregation: stopped waiting for an all-reduce that is still running (the session still owns its buffer): %w", ctx.Err())
	}
}

func (h *Handle) finish(err error) {
	h.err = err
	close(h.done)
}

// asyncCall is one queued call.
type asyncCall struct {
	ctx context.Context
	f   []float32
	i   []int32
	x16 []uint16     // AllReduce16Async
	f16 quant.Format // x16's format
	h   *Handle
}

// asyncQueue is a session's queue of asynchronous calls; its runner
// goroutine starts with the first call and ends when the session closes.
type asyncQueue struct {
	mu      sync.Mutex
	calls   []asyncCall
	started bool
	closed  bool          // the runner has seen Close: new calls fail at once
	signal  chan struct{} // one token: calls were queued
}

// AllReduceAsync queues AllReduce(ctx, x) and returns at once. The session
// owns x until the handle is done (see "Buffer ownership" in async.go's
// package comment). Input errors (wrong session dtype, empty or non-finite
// x) are the handle's result, checked when the call runs.
func (s *Session) AllReduceAsync(ctx context.Context, x []float32) *Handle {
	return s.enqueue(asyncCall{ctx: ctx, f: x})
}

// AllReduceInt32Async queues AllReduceInt32(ctx, x) and returns at once.
// Otherwise as AllReduceAsync.
func (s *Session) AllReduceInt32Async(ctx context.Context, x []int32) *Handle {
	return s.enqueue(asyncCall{ctx: ctx, i: x})
}

func (s *Session) enqueue(c asyncCall) *Handle {
	c.h = &Handle{done: make(chan struct{})}
	if c.ctx == nil {
		c.ctx = context.Background()
	}
	q := &s.async
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		c.h.finish(ErrClosed)
		return c.h
	}
	q.calls = append(q.calls, c)
	if !q.started {
		q.started = true
		q.signal = make(chan struct{}, 1)
		go s.runAsync()
	}
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
	return c.h
}

// runAsync runs the queued calls in order until the session closes; then it
// fails what is left with ErrClosed.
func (s *Session) runAsync() {
	q := &s.async
	for {
		q.mu.Lock()
		var c asyncCall
		ok := len(q.calls) > 0
		if ok {
			c = q.calls[0]
			q.calls[0] = asyncCall{}
			q.calls = q.calls[1:]
		}
		q.mu.Unlock()
		if ok {
			var err error
			if c.x16 != nil {
				err = s.AllReduce16(c.ctx, c.x16, c.f16)
			} else if c.f != nil {
				err = s.AllReduce(c.ctx, c.f)
			} else {
				err = s.AllReduceInt32(c.ctx, c.i)
			}
			c.h.finish(err)
			continue
		}
		select {
		case <-q.signal:
		case <-s.stopWatch: // Close or Abort
			q.mu.Lock()
			q.closed = true
			rest := q.calls
			q.calls = nil
			q.mu.Unlock()
			for _, c := range rest {
				c.h.finish(ErrClosed)
			}
			return
		}
	}
}

// WaitAll waits for every handle and returns the first error met (nil when
// all succeeded), joined with ctx's error if ctx ended first.
func WaitAll(ctx context.Context, hs ...*Handle) error {
	var errs []error
	for _, h := range hs {
		if err := h.Wait(ctx); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return errors.Join(errs...)
}
