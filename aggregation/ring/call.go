package ring

// A call: AllReduce checks its input, hands the tensor to the rank's engine
// (engine.go) and waits for its result; one call at a time per rank. An
// error other than bad input leaves the rank broken (ErrBroken
// afterwards): the ranks no longer agree on where they are.

import (
	"context"
	"errors"
	"fmt"
)

// ringCall is a call handed to the engine: the caller's context and
// tensor (f or i), and where the engine sends its result.
type ringCall struct {
	ctx    context.Context
	f      []float32
	i      []int32
	result chan error
}

// AllReduce replaces x by the element-wise float32 sum of every rank's x.
// Every rank must call it with a tensor of the same length; the results are
// bit-identical on all ranks (each element is summed once, in ring order, and
// then copied). x must not be touched until AllReduce returns. An error
// other than bad input breaks the rank (ErrBroken afterwards).
func (rr *Rank) AllReduce(ctx context.Context, x []float32) error {
	return rr.do(ctx, x, nil)
}

// AllReduceInt32 is AllReduce for int32 (exact, wrapping on overflow).
func (rr *Rank) AllReduceInt32(ctx context.Context, x []int32) error {
	return rr.do(ctx, nil, x)
}

// do is AllReduce and AllReduceInt32: bad input is refused before the
// engine sees it (the rank stays usable); otherwise the call is handed to
// the engine, woken through the waker, and the caller waits for its
// result or for the engine to end.
func (rr *Rank) do(ctx context.Context, f []float32, iv []int32) error {
	n := len(f) + len(iv)
	if n == 0 {
		return errors.New("ring: all-reduce of an empty tensor: pass at least one element")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ring: rank %d: all-reduce not started: %w", rr.rank, err)
	}
	if rr.size == 1 {
		rr.cnt.allReduces.Add(1)
		return nil
	}
	m := ceilDiv(ceilDiv(n, rr.size), rr.vals)
	if items := 2 * (rr.size - 1) * m; items >= ringMaxItems {
		return fmt.Errorf("ring: all-reduce of %d elements in %d-byte messages is %d messages per rank, more than the %d the immediate can number: raise the message size", n, rr.msgBytes, items, ringMaxItems)
	}
	rr.callMu.Lock()
	defer rr.callMu.Unlock()
	if rr.closing.Load() {
		return ErrClosed
	}
	c := &rr.call
	c.ctx, c.f, c.i = ctx, f, iv
	select {
	case <-rr.engineDone:
		return rr.engineGone()
	case rr.reqs <- c:
	}
	rr.waker.Fire()
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, rr.waker.Fire)
		defer stop()
	}
	select {
	case err := <-c.result:
		c.ctx, c.f, c.i = nil, nil, nil
		return err
	case <-rr.engineDone:
		select {
		case err := <-c.result:
			return err
		default:
		}
		return rr.engineGone()
	}
}

// engineGone is a call's error once the engine has ended: ErrBroken with
// the failure that ended it, or ErrClosed.
func (rr *Rank) engineGone() error {
	if rr.broken != nil {
		return fmt.Errorf("%w: %w", ErrBroken, rr.broken)
	}
	return ErrClosed
}
