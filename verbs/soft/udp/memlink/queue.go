package memlink

import (
	"net/netip"
	"time"
)

// rxQueue is an endpoint's receive queue: a fixed number of datagram slots
// (one slab allocated up front) and a binary min-heap of the occupied
// ones by due time, then send order. No allocation per packet.
type rxQueue struct {
	slab []byte
	size int // bytes per slot
	free []int32
	heap []int32
	n    []int // datagram length per slot
	from []netip.AddrPort
	due  []time.Duration
	seq  []uint64
}

func (q *rxQueue) init(slots, size int) {
	q.slab = make([]byte, slots*size)
	q.size = size
	q.free = make([]int32, slots)
	for i := range q.free {
		q.free[i] = int32(slots - 1 - i)
	}
	q.heap = make([]int32, 0, slots)
	q.n = make([]int, slots)
	q.from = make([]netip.AddrPort, slots)
	q.due = make([]time.Duration, slots)
	q.seq = make([]uint64, slots)
}

func (q *rxQueue) len() int { return len(q.heap) }

// push copies b into a free slot; false if there is none.
func (q *rxQueue) push(b []byte, from netip.AddrPort, due time.Duration, seq uint64) bool {
	if len(q.free) == 0 {
		return false
	}
	s := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	q.n[s] = copy(q.slab[int(s)*q.size:], b)
	q.from[s], q.due[s], q.seq[s] = from, due, seq
	q.heap = append(q.heap, s)
	q.up(len(q.heap) - 1)
	return true
}

func (q *rxQueue) headDue() time.Duration { return q.due[q.heap[0]] }

// head returns the earliest datagram (valid until pop) and its source.
func (q *rxQueue) head() ([]byte, netip.AddrPort) {
	s := int(q.heap[0])
	return q.slab[s*q.size : s*q.size+q.n[s]], q.from[s]
}

func (q *rxQueue) pop() {
	s := q.heap[0]
	last := len(q.heap) - 1
	q.heap[0] = q.heap[last]
	q.heap = q.heap[:last]
	if last > 0 {
		q.down(0)
	}
	q.free = append(q.free, s)
}

func (q *rxQueue) less(i, j int) bool {
	a, b := q.heap[i], q.heap[j]
	if q.due[a] != q.due[b] {
		return q.due[a] < q.due[b]
	}
	return q.seq[a] < q.seq[b]
}

func (q *rxQueue) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			return
		}
		q.heap[i], q.heap[p] = q.heap[p], q.heap[i]
		i = p
	}
}

func (q *rxQueue) down(i int) {
	n := len(q.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && q.less(c+1, c) {
			c++
		}
		if !q.less(c, i) {
			return
		}
		q.heap[i], q.heap[c] = q.heap[c], q.heap[i]
		i = c
	}
}
