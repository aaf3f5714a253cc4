// Package spans allocates contiguous ranges of switch resources: the
// controller's aggregator pool slots and the P4Runtime programmer's
// QP-state register entries. Both hand out the lowest free range (first
// fit), so a range freed by a finished job is the first one the next job
// gets.
//
// Concurrency: an Allocator is not safe for concurrent use; its owner holds
// its own lock.
package spans

import (
	"fmt"
	"sort"
)

// Span is the half-open range [Base, Base+Size).
type Span struct{ Base, Size uint32 }

// End is Base+Size, the first unit past the span.
func (s Span) End() uint32 { return s.Base + s.Size }

// Overlaps says whether s and o share a unit.
func (s Span) Overlaps(o Span) bool {
	return s.Size != 0 && o.Size != 0 && s.Base < o.End() && o.Base < s.End()
}

func (s Span) String() string { return fmt.Sprintf("[%d, %d)", s.Base, s.End()) }

// Allocator hands out disjoint spans of [lo, hi). The zero value has an
// empty range; use New.
type Allocator struct {
	lo, hi uint32
	used   []Span // sorted by Base, disjoint
}

// New returns an allocator of [lo, hi), all free.
func New(lo, hi uint32) Allocator { return Allocator{lo: lo, hi: hi} }

// Alloc returns the lowest free span of n units; false if n is 0 or no
// free range is long enough.
func (a *Allocator) Alloc(n uint32) (Span, bool) {
	if n == 0 {
		return Span{}, false
	}
	next := a.lo
	for i, u := range a.used {
		if u.Base-next >= n {
			return a.insert(i, Span{next, n}), true
		}
		next = u.End()
	}
	if a.hi-next >= n {
		return a.insert(len(a.used), Span{next, n}), true
	}
	return Span{}, false
}

// AllocAt takes [base, base+n) if it lies in the range and is free.
func (a *Allocator) AllocAt(base, n uint32) (Span, bool) {
	if n == 0 || base < a.lo || base > a.hi || a.hi-base < n {
		return Span{}, false
	}
	s := Span{base, n}
	i := sort.Search(len(a.used), func(i int) bool { return a.used[i].Base >= base })
	if i > 0 && a.used[i-1].End() > base || i < len(a.used) && a.used[i].Base < s.End() {
		return Span{}, false
	}
	return a.insert(i, s), true
}

func (a *Allocator) insert(i int, s Span) Span {
	a.used = append(a.used, Span{})
	copy(a.used[i+1:], a.used[i:])
	a.used[i] = s
	return s
}

// Free releases a span Alloc or AllocAt returned. Freeing anything else
// panics: that is a bug in the owner that would hand another job's units
// out twice.
func (a *Allocator) Free(s Span) {
	i := sort.Search(len(a.used), func(i int) bool { return a.used[i].Base >= s.Base })
	if i == len(a.used) || a.used[i] != s {
		panic(fmt.Sprintf("spans: free of unallocated range %v", s))
	}
	a.used = append(a.used[:i], a.used[i+1:]...)
}

// InUse is the number of allocated units.
func (a *Allocator) InUse() uint32 {
	var n uint32
	for _, u := range a.used {
		n += u.Size
	}
	return n
}

// Available is the number of free units in total and the length of the
// largest free span.
func (a *Allocator) Available() (total, largest uint32) {
	next := a.lo
	for _, u := range a.used {
		gap := u.Base - next
		total += gap
		largest = max(largest, gap)
		next = u.End()
	}
	gap := a.hi - next
	return total + gap, max(largest, gap)
}
