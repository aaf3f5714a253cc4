package udp

import (
	"net/netip"
	"slices"
)

// Scheduler reorders a batch of packets so that WriteBatch with GSO sends it
// as few datagrams as possible. A batch usually holds several ordered
// streams to one destination (a NIC's QPs, the switch's results to one
// worker's QPs), each a run of messages: FIRST, equal-size MIDDLEs, LAST.
// Sent as posted, every message is three datagrams (the three have
// different sizes); merged in rounds of equal size (every stream's FIRSTs,
// then every stream's MIDDLEs, then its LASTs, …) a destination's batch is
// about three datagrams whatever the number of streams. Each stream keeps
// its own order, which is all UC needs: its PSNs stay in sequence.
//
// The zero value is ready to use; it allocates only when a batch is larger
// than any before. Not safe for concurrent use.
type Scheduler struct {
	sorted []Msg
	next   []int
	dests  []netip.AddrPort
	queues []schedQueue
}

// schedQueue is one (destination, stream)'s packets in a batch: a list
// through Scheduler.next.
type schedQueue struct {
	stream     uint32
	head, tail int
}

// Order returns msgs reordered as described for Scheduler; streams[i] names
// the ordered stream msgs[i] belongs to (with its destination). The result
// is msgs itself when no reordering can help, otherwise the Scheduler's own
// slice, valid until the next call; the Msgs are copied and share their
// buffers with msgs.
func (s *Scheduler) Order(msgs []Msg, streams []uint32) []Msg {
	n := len(msgs)
	if n <= 2 {
		return msgs
	}
	single := true
	for i := 1; i < n; i++ {
		if streams[i] != streams[0] || msgs[i].Addr != msgs[0].Addr {
			single = false
			break
		}
	}
	if single {
		return msgs
	}
	if len(s.sorted) < n {
		s.sorted = make([]Msg, n)
		s.next = make([]int, n)
	}
	s.dests = s.dests[:0]
	for i := range msgs {
		if !slices.Contains(s.dests, msgs[i].Addr) {
			s.dests = append(s.dests, msgs[i].Addr)
		}
	}
	k := 0
	for _, d := range s.dests {
		s.queues = s.queues[:0]
		left := 0
		for i := range msgs {
			if msgs[i].Addr != d {
				continue
			}
			left++
			s.next[i] = -1
			q := -1
			for j := range s.queues {
				if s.queues[j].stream == streams[i] {
					q = j
					break
				}
			}
			if q < 0 {
				s.queues = append(s.queues, schedQueue{stream: streams[i], head: i, tail: i})
				continue
			}
			s.next[s.queues[q].tail] = i
			s.queues[q].tail = i
		}
		for left > 0 {
			size := s.roundSize(msgs)
			for qi := range s.queues {
				q := &s.queues[qi]
				for q.head >= 0 && msgs[q.head].N == size {
					s.sorted[k] = msgs[q.head]
					k++
					left--
					q.head = s.next[q.head]
				}
			}
		}
	}
	return s.sorted[:k]
}

// roundSize picks the packet size of the next round: the size most queues
// have at their head (the larger on a tie), so that streams whose messages
// are at different stages (one at its LAST, the others in their MIDDLEs)
// do not split a run.
func (s *Scheduler) roundSize(msgs []Msg) int {
	size, votes := -1, 0
	for i := range s.queues {
		h := s.queues[i].head
		if h < 0 {
			continue
		}
		n := msgs[h].N
		v := 0
		for j := range s.queues {
			if hj := s.queues[j].head; hj >= 0 && msgs[hj].N == n {
				v++
			}
		}
		if v > votes || (v == votes && n > size) {
			size, votes = n, v
		}
	}
	return size
}
