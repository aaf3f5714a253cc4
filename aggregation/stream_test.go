package aggregation

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// TestSoftResultStream runs the real NICs and the real switch
// over in-memory links that lose nothing but make the workers' timers fire
// while the switch is still sending a message — a slow peer, or links
// shaped to 200 Mbit/s whose queues hold a whole round — and checks every
// packet the switch emits, per (worker, QP): a FIRST is never followed by
// another FIRST/ONLY before its LAST, a MIDDLE/LAST never comes without a
// FIRST, PSNs never skip (ucstream.Checker). The retransmission answers
// must wait for the message in flight, not cut into it.
func TestSoftResultStream(t *testing.T) {
	slow := addr4(127, 88, 0, 5) // rank 3 of a job whose NICs start at .2
	for _, tc := range []struct {
		name string
		net  byte
		link func(netip.Addr) memlink.LinkConfig
	}{
		{"slow-peer", 70, func(a netip.Addr) memlink.LinkConfig {
			if a.As4()[3] == slow.As4()[3] {
				return memlink.LinkConfig{Delay: 3 * time.Millisecond}
			}
			return memlink.LinkConfig{}
		}},
		{"shaped-200Mbit", 71, func(netip.Addr) memlink.LinkConfig {
			return memlink.LinkConfig{Rate: 200e6, Overhead: 42, Delay: 20 * time.Microsecond}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n, l = 4, 30_000
			// Receive queues big enough that nothing overflows even when
			// the timers fire again and again (slow -race builds): the
			// run is loss-free, so every break would be the switch's.
			c := newSoftClusterWith(t, inMemory, tc.net, 0, 0, clusterOpts{mem: memlink.Config{RecvQueue: 1 << 15, MaxDatagram: 1100}, link: tc.link})
			cfg := softConfig(1, 1024, 8, 4)
			// Timers that fire while the slowest worker's slots still
			// complete: a timeout under the time to result.
			cfg.RetransmitTimeout = time.Millisecond
			cfg.MaxRetransmitTimeout = 2 * time.Millisecond
			// The default AdaptiveWrites: spurious resends can make a
			// worker signal loss, and then every worker changes mode
			// in the same call (adaptState).
			j := openJob(t, c.ctlAddr, n, cfg, c.device(2))
			in := gradients(24, n, l)
			for range 2 {
				out := clone2(in)
				noErrors(t, j.allReduce(context.Background(), out))
				checkSums(t, in, out, 1024*8/4)
			}
			var resent uint64
			for _, w := range j.workers {
				resent += w.sess.Stats().Retransmissions
			}
			up, down := c.linkStats()
			pkts, breaks := c.streamBreaks()
			t.Logf("%d result packets, %d resends; links up %+v, down %+v", pkts, resent, up, down)
			if up.Lost+up.QueueDrops+up.Overflow+down.Lost+down.QueueDrops+down.Overflow != 0 {
				t.Fatal("the links lost packets: the run must be loss-free")
			}
			if resent == 0 {
				t.Fatal("no worker resent anything: the test checks nothing")
			}
			if len(breaks) > 0 {
				t.Fatalf("%d breaks in the switch's result streams without loss, first: %s", len(breaks), breaks[0])
			}
		})
	}
}
