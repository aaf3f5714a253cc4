package udp

import "net/netip"

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
// The packets that end a message (LAST or ONLY) also keep their order
// across a destination's streams, so the receiver sees messages complete
// in the order they were posted. A merged round may otherwise send one
// stream's LAST before an older message's: a batch that begins in the
// middle of one QP's message and holds another QP's whole message sends the
// younger message's FIRST first (the larger size wins the vote), its QP
// then heads the round of LASTs, and the younger message completes first.
// A worker's RACK takes a result that overtakes another for evidence of
// loss (results of one ordering group come back in order), so such a swap
// costs a spurious resend.
//
// The zero value is ready to use; it allocates only when a batch is larger,
// or has more destinations or streams, than any before. Not safe for
// concurrent use.
type Scheduler struct {
	sorted []Msg
	next   []int            // next packet of the same (destination, stream)
	dnext  []int            // next packet to the same destination
	dests  []schedList      // each destination's packets, through dnext
	addrs  []netip.AddrPort // dests[i]'s address
	queues []schedList      // a destination's streams' packets, through next
	ids    []uint32         // queues[i]'s stream
	endAt  []int            // the indexes of a destination's message ends, in order
}

// schedList is a list of packets of a batch, linked through one of
// Scheduler's next slices; -1 ends it.
type schedList struct{ head, tail int }

// Reserve allocates up front what Order needs per packet for batches of up
// to n packets (what it needs per destination and per stream grows on first
// use).
func (s *Scheduler) Reserve(n int) {
	if len(s.sorted) < n {
		s.sorted = make([]Msg, n)
		s.next = make([]int, n)
		s.dnext = make([]int, n)
	}
}

// Order returns msgs reordered as described for Scheduler; streams[i] names
// the ordered stream msgs[i] belongs to (with its destination), and ends[i]
// says whether msgs[i] ends a message (nil: none does). The result is msgs
// itself when no reordering can help, otherwise the Scheduler's own slice,
// valid until the next call; the Msgs are copied and share their buffers
// with msgs.
func (s *Scheduler) Order(msgs []Msg, streams []uint32, ends []bool) []Msg {
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
	s.Reserve(n)
	// Each destination's packets, in order, in one pass over msgs (a Msg
	// is large, an index small).
	s.dests, s.addrs = s.dests[:0], s.addrs[:0]
	d := 0
	for i := range msgs {
		s.dnext[i] = -1
		if d = schedFind(s.addrs, msgs[i].Addr, d); d < 0 {
			d = len(s.dests)
			s.dests, s.addrs = append(s.dests, schedList{i, i}), append(s.addrs, msgs[i].Addr)
		} else {
			s.dnext[s.dests[d].tail], s.dests[d].tail = i, i
		}
	}
	k := 0
	for _, d := range s.dests {
		// The destination's per-stream queues, in order of first
		// appearance.
		s.queues, s.ids, s.endAt = s.queues[:0], s.ids[:0], s.endAt[:0]
		left := 0
		q := 0
		for i := d.head; i >= 0; i = s.dnext[i] {
			left++
			s.next[i] = -1
			if q = schedFind(s.ids, streams[i], q); q < 0 {
				q = len(s.queues)
				s.queues, s.ids = append(s.queues, schedList{i, i}), append(s.ids, streams[i])
			} else {
				s.next[s.queues[q].tail], s.queues[q].tail = i, i
			}
			if ends != nil && ends[i] {
				s.endAt = append(s.endAt, i)
			}
		}
		// oldest: s.endAt[oldest] is the destination's oldest message end
		// not sent yet; an end goes only when it is the oldest.
		oldest := 0
		size := -1
		for left > 0 {
			if size < 0 {
				size = s.roundSize(msgs)
			}
			sent := 0
			// A stream held at an end may go once another's older end
			// went: pass over the streams again.
			for again := true; again; {
				held, endSent := false, false
				for qi := range s.queues {
					q := &s.queues[qi]
					for q.head >= 0 && msgs[q.head].N == size {
						if ends != nil && ends[q.head] {
							if q.head != s.endAt[oldest] {
								held = true
								break
							}
							oldest++
							endSent = true
						}
						s.sorted[k] = msgs[q.head]
						k++
						sent++
						q.head = s.next[q.head]
					}
				}
				again = held && endSent
			}
			left -= sent
			size = -1
			if sent == 0 {
				// Every head of the voted size is an end that waits for
				// an older one: the stream that holds the oldest end
				// sends what comes before it (or the end itself).
				q := schedFind(s.ids, streams[s.endAt[oldest]], 0)
				size = msgs[s.queues[q].head].N
			}
		}
	}
	return s.sorted[:k]
}

// schedFind returns the index of key in keys; -1 if it is not there.
// Batches mostly hold one destination's (or stream's) packets in a row, or
// destinations (streams) taking turns (the results of a broadcast), so the
// key of the packet before, keys[near], and the one after it are tried
// first.
func schedFind[K comparable](keys []K, key K, near int) int {
	n := len(keys)
	if n == 0 {
		return -1
	}
	if keys[near] == key {
		return near
	}
	after := near + 1
	if after == n {
		after = 0
	}
	if keys[after] == key {
		return after
	}
	for j := range keys {
		if keys[j] == key {
			return j
		}
	}
	return -1
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
