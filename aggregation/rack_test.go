package aggregation

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestRACKOrderGroups: a result of a message sent later is evidence of
// loss for a waiting message of the same ordering group only. Results of
// QPs that different software-switch cores complete overtake each other
// without loss (control.Assignment.OrderGroups); taken for evidence they
// would resend messages that are only behind another core's.
func TestRACKOrderGroups(t *testing.T) {
	now := time.Now()
	s := oneLane(&Session{cfg: Config{PacketsPerMessage: 4}})
	qps := []*qpState{{index: 0}, {index: 1}, {index: 2}, {index: 3}}
	s.eng.est.rack.groups(qps, []uint32{5, 7, 5, 7}) // two cores, numbered as the switch numbers them
	if qps[0].group != 0 || qps[1].group != 1 || qps[2].group != 0 || qps[3].group != 1 || len(s.eng.est.rack.latest) != 2 {
		t.Fatalf("groups %d %d %d %d (of %d), want 0 1 0 1 of 2", qps[0].group, qps[1].group, qps[2].group, qps[3].group, len(s.eng.est.rack.latest))
	}
	for _, st := range qps {
		st.timer.xmit = now
	}
	// QP 1's message, sent after the others, is back after 2 ms.
	later := now.Add(500 * time.Microsecond)
	qps[1].timer.xmit = later
	s.sampleRTT(qps[1], 2*time.Millisecond, later)
	if at, ok := s.lostAt(qps[3]); !ok || !at.Equal(now.Add(2500*time.Microsecond)) {
		t.Errorf("QP 3, same group as the later result: lost at %v (%v), want +2.5ms (its xmit + the result's 2 ms + min RTT/4)", at.Sub(now), ok)
	}
	for _, i := range []int{0, 2} {
		if at, ok := s.lostAt(qps[i]); ok {
			t.Errorf("QP %d, another group: lost at %v; a result of another core is no evidence", i, at.Sub(now))
		}
	}
	// Without groups every QP is in one: the same result is evidence for all.
	s2 := oneLane(&Session{cfg: Config{PacketsPerMessage: 4}})
	s2.eng.est.rack.groups(qps, nil)
	s2.sampleRTT(qps[1], 2*time.Millisecond, later)
	for _, i := range []int{0, 2, 3} {
		if _, ok := s2.lostAt(qps[i]); !ok {
			t.Errorf("one group: QP %d has no evidence from a later result", i)
		}
	}
}

// TestCoresOrderGroups: with the software switch on two and three cores,
// results of QPs of different cores overtake each other; the controller
// tells the workers which QPs share a core, and RACK takes no evidence
// across cores, so a loss-free job resends nothing on evidence and its
// adaptive writes stay message writes after the session's first call
// (packet writes, judged by their own packets; a tail held back behind
// another core's results may be resent there, and is no evidence of
// loss: fastRetransmit). (Taking every QP for one group, as
// before the groups, such jobs resent on false evidence and turned to
// packet writes without any loss.)
func TestCoresOrderGroups(t *testing.T) {
	t.Parallel()
	const n, q, ppm = 3, 8, 16
	for _, cores := range []int{2, 3} {
		t.Run(fmt.Sprintf("cores=%d", cores), func(t *testing.T) {
			net := byte(94 + cores)
			c := newSoftClusterWith(t, inMemory, net, 0, 0, clusterOpts{cores: cores})
			cfg := softConfig(uint32(net), 1024, ppm, q)
			j := openJob(t, c.ctlAddr, n, cfg, c.device(2))
			defer j.close(t)
			groups := j.workers[0].sess.assign.OrderGroups
			distinct := map[uint32]bool{}
			for _, g := range groups {
				distinct[g] = true
			}
			if len(groups) != q || len(distinct) != cores {
				t.Fatalf("order groups %v: want %d QPs in %d groups", groups, q, cores)
			}
			in := gradients(uint64(net), n, 64*ppm*1024/4)
			first := make([]uint64, n) // fast retransmissions in the first call
			for call := range 6 {
				out := clone2(in)
				noErrors(t, j.allReduce(context.Background(), out))
				checkSums(t, in, out, ppm*1024/4)
				if call == 0 {
					for r, w := range j.workers {
						first[r] = w.sess.Stats().FastRetransmissions
					}
				}
			}
			busy := 0
			for _, p := range c.sw.Stats().CorePackets {
				if p > 0 {
					busy++
				}
			}
			if busy != cores {
				t.Fatalf("%d of %d cores took requests: %v", busy, cores, c.sw.Stats().CorePackets)
			}
			for r, w := range j.workers {
				st := w.sess.Stats()
				if fast := st.FastRetransmissions - first[r]; fast != 0 || st.PacketWriteCalls != 1 {
					t.Errorf("rank %d, no loss: %d resends on evidence after the first call, %d calls of packet writes; want none, and packet writes in the session's first call only: %+v",
						r, fast, st.PacketWriteCalls, st)
				}
			}
		})
	}
}
