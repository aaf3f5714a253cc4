package memlink

import (
	"net/netip"
	"time"
)

// rxQueue is an endpoint's receive queue: up to a fixed number of datagram
// slots, allocated in chunks as the queue first grows (so a generous limit
// costs memory only when used), and a binary min-heap of the occupied ones
// by due time, then (Config.SourceOrder) source, then send order. No
// allocation per packet.
type rxQueue struct {
	chunks [][]byte
	size   int // bytes per slot
	slots  int // the limit
	free   []int32
	heap   []int32
	n      []int // datagram length per slot
	from   []netip.AddrPort
	due    []time.Duration
	seq    []uint64
	// bySource breaks ties of due time by source address before send
	// order (Config.SourceOrder).
	bySource bool
}

// chunkSlots is the number of slots allocated at a time.
const chunkSlots = 256

func (q *rxQueue) init(slots, size int, bySource bool) {
	q.size, q.slots, q.bySource = size, slots, bySource
	q.free = make([]int32, 0, slots)
	q.heap = make([]int32, 0, slots)
	q.n = make([]int, slots)
	q.from = make([]netip.AddrPort, slots)
	q.due = make([]time.Duration, slots)
	q.seq = make([]uint64, slots)
}

func (q *rxQueue) len() int { return len(q.heap) }

// push copies b into a free slot; false if there is none.
func (q *rxQueue) push(b []byte, from netip.AddrPort, due time.Duration, seq uint64) bool {
	if len(q.free) == 0 && !q.grow() {
		return false
	}
	s := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	q.n[s] = copy(q.slot(s), b)
	q.from[s], q.due[s], q.seq[s] = from, due, seq
	q.heap = append(q.heap, s)
	q.up(len(q.heap) - 1)
	return true
}

// grow allocates the next chunk of slots; false at the limit.
func (q *rxQueue) grow() bool {
	first := len(q.chunks) * chunkSlots
	if first >= q.slots {
		return false
	}
	k := min(chunkSlots, q.slots-first)
	q.chunks = append(q.chunks, make([]byte, k*q.size))
	for i := first + k - 1; i >= first; i-- {
		q.free = append(q.free, int32(i))
	}
	return true
}

func (q *rxQueue) slot(s int32) []byte {
	c := q.chunks[int(s)/chunkSlots]
	o := int(s) % chunkSlots * q.size
	return c[o : o+q.size]
}

func (q *rxQueue) headDue() time.Duration { return q.due[q.heap[0]] }

// head returns the earliest datagram (valid until pop) and its source.
func (q *rxQueue) head() ([]byte, netip.AddrPort) {
	s := q.heap[0]
	return q.slot(s)[:q.n[s]], q.from[s]
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
	if q.bySource {
		if c := q.from[a].Compare(q.from[b]); c != 0 {
			return c < 0
		}
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
