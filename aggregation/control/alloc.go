package control

import (
	"fmt"
	"sort"
)

// span is a half-open range [base, base+size).
type span struct{ base, size uint32 }

func (s span) end() uint32 { return s.base + s.size }

// rangeAlloc hands out contiguous ranges of [lo, hi) first fit, so a range
// freed by a finished job is the first one the next job gets. Not safe for
// concurrent use; the controller holds its lock.
type rangeAlloc struct {
	lo, hi uint32
	used   []span // sorted by base, disjoint
}

func newRangeAlloc(lo, hi uint32) rangeAlloc { return rangeAlloc{lo: lo, hi: hi} }

// alloc returns the lowest free range of n units.
func (a *rangeAlloc) alloc(n uint32) (span, bool) {
	if n == 0 {
		return span{}, false
	}
	next := a.lo
	for i, u := range a.used {
		if u.base-next >= n {
			s := span{next, n}
			a.used = append(a.used, span{})
			copy(a.used[i+1:], a.used[i:])
			a.used[i] = s
			return s, true
		}
		next = u.end()
	}
	if a.hi-next >= n {
		s := span{next, n}
		a.used = append(a.used, s)
		return s, true
	}
	return span{}, false
}

// allocAt takes [base, base+n) if it is free.
func (a *rangeAlloc) allocAt(base, n uint32) (span, bool) {
	if n == 0 || base < a.lo || base > a.hi || a.hi-base < n {
		return span{}, false
	}
	s := span{base, n}
	i := sort.Search(len(a.used), func(i int) bool { return a.used[i].base >= base })
	if i > 0 && a.used[i-1].end() > base || i < len(a.used) && a.used[i].base < s.end() {
		return span{}, false
	}
	a.used = append(a.used, span{})
	copy(a.used[i+1:], a.used[i:])
	a.used[i] = s
	return s, true
}

// free releases a range alloc returned; freeing an unknown range panics,
// since that is a controller bug that would corrupt other jobs' ranges.
func (a *rangeAlloc) free(s span) {
	i := sort.Search(len(a.used), func(i int) bool { return a.used[i].base >= s.base })
	if i == len(a.used) || a.used[i] != s {
		panic(fmt.Sprintf("control: free of unallocated range [%d, %d)", s.base, s.end()))
	}
	a.used = append(a.used[:i], a.used[i+1:]...)
}

// inUse is the number of allocated units.
func (a *rangeAlloc) inUse() uint32 {
	var n uint32
	for _, u := range a.used {
		n += u.size
	}
	return n
}

// free units in total and the largest contiguous free range.
func (a *rangeAlloc) available() (total, largest uint32) {
	next := a.lo
	for _, u := range a.used {
		gap := u.base - next
		total += gap
		largest = max(largest, gap)
		next = u.end()
	}
	gap := a.hi - next
	return total + gap, max(largest, gap)
}
