package benchmark

import (
	"fmt"
	"net/netip"

	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// Link is the network of an Embedded job run over in-memory links
// (verbs/soft/udp/memlink) instead of loopback sockets: a star, every worker
// behind its own port of the switch, each direction of a port a FIFO at
// Rate behind a drop-tail queue of Buffer bytes (docs/bench.md "Linked
// mode").
//
// memlink's links are per (source, destination) address pair. SwitchML's
// packets go only between a worker and the switch, so the pairs (worker,
// switch) and (switch, worker) are that worker's uplink and downlink,
// exactly. The ring's packets go from a worker to its successor (data) and
// back (acknowledgements); in the star each crosses the sender's uplink and
// the receiver's downlink, two links of the same rate, each carrying one
// data flow, so one pair link at that rate carries the data as the two do.
// The acknowledgements ride their own pair links, not charged to the ports
// that carry data: they are 78 wire bytes per message (a zero-length WRITE
// WITH IMMEDIATE), 0.45 % of a 16 KiB message's, in the ring's favour.
type Link struct {
	// Rate is each port's rate in bits per second, in each direction; 0
	// runs the job over loopback sockets instead.
	Rate float64
	// Buffer is each port direction's drop-tail queue in bytes (default
	// DefaultPortBuffer), counted in full packets of the job's packet size
	// with their Ethernet, IPv4, UDP, BTH and ICRC bytes.
	Buffer int
}

// DefaultPortBuffer is a switch port's buffer in each direction: a 32-port
// switch's 16 MiB shared packet buffer (Broadcom Tomahawk's) divided among
// its ports. It holds the ring's send window (256 KiB of messages) with
// room to spare, so neither algorithm's window overflows it on its own.
const DefaultPortBuffer = 512 << 10

// LinkOverhead is the bytes a link counts per datagram beyond the RoCEv2
// packet memlink carries: the Ethernet, IPv4 and UDP headers, as the
// network lab's tbf counts them (docs/netlab.md "Link-rate ceilings").
const LinkOverhead = 14 + 20 + 8

// LinkTotals are the counters of the links one algorithm used, summed
// over them (memlink.LinkStats).
type LinkTotals struct {
	// Links counts the link directions that carried a packet: 2 per
	// worker for SwitchML (its uplink and downlink), and for the ring 2
	// per worker (to its successor, and acknowledgements to its
	// predecessor) or 2 in all with 2 workers.
	Links int
	// Packets counts the packets sent into them.
	Packets uint64
	// Lost counts packets the links dropped as EmbeddedConfig.Loss.
	Lost uint64
	// Queue counts packets dropped at a full port queue (drop-tail).
	Queue uint64
	// Overflow counts packets dropped at an endpoint's full receive queue
	// (a NIC or the switch not reading fast enough).
	Overflow uint64
	// MaxQueue is the most packets any of the links had waiting.
	MaxQueue int
}

func (t *LinkTotals) add(st memlink.LinkStats) {
	if st.Packets > 0 {
		t.Links++
	}
	t.Packets += st.Packets
	t.Lost += st.Lost
	t.Queue += st.QueueDrops
	t.Overflow += st.Overflow
	t.MaxQueue = max(t.MaxQueue, st.MaxQueue)
}

// queuePackets is the port buffer in full packets of packetSize payload
// bytes (at least one).
func (l Link) queuePackets(packetSize int) int {
	buf := l.Buffer
	if buf <= 0 {
		buf = DefaultPortBuffer
	}
	frame := LinkOverhead + rdma.BTHSize + packetSize + rdma.ICRCSize
	return max(buf/frame, 1)
}

// linkNet is an Embedded job's in-memory network: the switch's endpoint and
// the workers' NICs on it, and the links between them.
type linkNet struct {
	mem     *memlink.Network
	sw      netip.Addr
	workers []netip.Addr
}

// newLinkNet builds the star of l for a switch at sw and workers at
// workers: each worker's uplink and downlink drop loss of their packets,
// and a worker-to-worker pair link, which stands for two ports, drops
// 1 − (1 − loss)², as the two would.
func newLinkNet(l Link, sw netip.Addr, workers []netip.Addr, packetSize int, loss float64) (*linkNet, error) {
	q := l.queuePackets(packetSize)
	port := memlink.LinkConfig{Rate: l.Rate, Overhead: LinkOverhead, Queue: q, Loss: loss}
	twoPorts := port
	twoPorts.Loss = 1 - (1-loss)*(1-loss)
	// Every packet in flight to an endpoint waits in its receive queue:
	// the switch hears every worker's uplink, a NIC at most two pair links
	// and its downlink; room for all of them full, and a socket buffer's
	// worth more for a reader that falls behind.
	// PreciseTimers: packets reach their readers within tens of
	// microseconds of their wire time, not up to a millisecond after it
	// (docs/bench.md "Linked mode").
	mem, err := memlink.New(memlink.Config{Seed: 1, Link: twoPorts, PreciseTimers: true,
		RecvQueue: len(workers)*(q+1) + memlink.DefaultRecvQueue})
	if err != nil {
		return nil, fmt.Errorf("benchmark: link network: %w", err)
	}
	for _, w := range workers {
		if err := mem.SetLink(w, sw, port); err != nil {
			return nil, fmt.Errorf("benchmark: uplink of %v: %w", w, err)
		}
		if err := mem.SetLink(sw, w, port); err != nil {
			return nil, fmt.Errorf("benchmark: downlink of %v: %w", w, err)
		}
	}
	return &linkNet{mem: mem, sw: sw, workers: workers}, nil
}

// openNICs opens a userspace NIC per worker on the network; the caller
// closes them. On an error the ones already open are closed.
func (n *linkNet) openNICs() ([]*soft.Device, error) {
	devs := make([]*soft.Device, 0, len(n.workers))
	for r, a := range n.workers {
		ep, err := n.mem.Listen(netip.AddrPortFrom(a, 0))
		var d *soft.Device
		if err == nil {
			d, err = soft.Open(soft.Config{Endpoint: ep})
		}
		if err != nil {
			for _, d := range devs {
				d.Close()
			}
			return nil, fmt.Errorf("benchmark: worker %d NIC at %v: %w", r, a, err)
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// switchTotals are the counters of the worker–switch links (SwitchML's).
func (n *linkNet) switchTotals() LinkTotals {
	var t LinkTotals
	for _, w := range n.workers {
		t.add(n.mem.LinkStats(w, n.sw))
		t.add(n.mem.LinkStats(n.sw, w))
	}
	return t
}

// ringTotals are the counters of every worker-to-worker link (the ring's).
func (n *linkNet) ringTotals() LinkTotals {
	var t LinkTotals
	for _, a := range n.workers {
		for _, b := range n.workers {
			if a != b {
				t.add(n.mem.LinkStats(a, b))
			}
		}
	}
	return t
}
