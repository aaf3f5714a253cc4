package ring

// Counters: each rank's Stats, and their sum over the ring.

import "sync/atomic"

// Stats counts one rank's traffic (or, from Ring.Stats, all ranks').
type Stats struct {
	AllReduces      uint64 `json:"all_reduces"`
	Messages        uint64 `json:"messages"`        // data messages sent, first transmissions
	Retransmissions uint64 `json:"retransmissions"` // data messages resent after a timeout
	Packets         uint64 `json:"packets"`         // packets sent: data, retransmissions and acks
	Acks            uint64 `json:"acks"`            // acknowledgements sent
	Duplicates      uint64 `json:"duplicates"`      // data messages received again (acknowledged, not consumed)
	Stray           uint64 `json:"stray"`           // messages or acks that belonged to no call in progress
}

// add adds o's counts to s.
func (s *Stats) add(o Stats) {
	s.AllReduces += o.AllReduces
	s.Messages += o.Messages
	s.Retransmissions += o.Retransmissions
	s.Packets += o.Packets
	s.Acks += o.Acks
	s.Duplicates += o.Duplicates
	s.Stray += o.Stray
}

// ringCounters are a rank's live counters, which Stats reads.
type ringCounters struct {
	allReduces, messages, retransmissions, packets, acks, duplicates, stray atomic.Uint64
}

// Stats sums every rank's counters.
func (r *Ring) Stats() Stats {
	var s Stats
	for _, rr := range r.ranks {
		s.add(rr.Stats())
	}
	return s
}

// Stats returns a snapshot of this rank's counters.
func (rr *Rank) Stats() Stats {
	c := &rr.cnt
	return Stats{AllReduces: c.allReduces.Load(), Messages: c.messages.Load(), Retransmissions: c.retransmissions.Load(),
		Packets: c.packets.Load(), Acks: c.acks.Load(), Duplicates: c.duplicates.Load(), Stray: c.stray.Load()}
}
