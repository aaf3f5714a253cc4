package netlab

import (
	"net/netip"
	"time"
)

// The lab's portable types: what a caller names on every system. The
// functions that build and run a lab need Linux (netlab_linux.go) and
// return ErrNotSupported elsewhere (netlab_other.go).

// Names inside the namespaces: every lab has its own switch namespace, so
// they never collide between labs.
const (
	// WorkerIf is the worker's end of its link, in its namespace (what
	// GLOO_SOCKET_IFNAME names).
	WorkerIf = "eth0"
	// BridgeIf is the bridge in the switch namespace, holding the
	// switch's address (in a tree: in each leaf's namespace, holding the
	// leaf's).
	BridgeIf = "br0"
	// UplinkIf is a leaf's end of its link to the spine, in the leaf's
	// namespace.
	UplinkIf = "up0"
)

// DefaultPrefix starts the name of every namespace a lab makes.
const DefaultPrefix = "swlab"

// DefaultSubnet holds the lab's addresses: the switch at .1, worker i at
// .2+i.
var DefaultSubnet = netip.MustParsePrefix("10.77.0.0/24")

// Config is the topology of a lab.
type Config struct {
	// Workers is the number of worker namespaces (1 to 250).
	Workers int
	// Prefix starts every namespace name (DefaultPrefix if empty): letters
	// and digits only.
	Prefix string
	// Subnet is the lab's IPv4 /24 or larger (DefaultSubnet if zero).
	Subnet netip.Prefix
	// AddrsPerWorker is how many address sets the lab has (0 means 1),
	// e.g. one per concurrent job whose processes each bind their own
	// address: set k is an address of every worker (Lab.Addrs[k]) and
	// one of the switch (Lab.SwitchAddrs[k]), and worker i reaches the
	// switch's k-th address from its own k-th. Hosts(Workers,
	// AddrsPerWorker) is at most MaxHosts.
	AddrsPerWorker int
	// Leaves, if 2 or more, makes the lab a two-level tree: that many
	// leaf namespaces, each the switch namespace of Workers ÷ Leaves
	// workers (contiguous: leaf j has workers j·w … j·w+w−1), and a spine
	// namespace joined to every leaf by a link of its own (Lab.ShapeSpine).
	// It must divide Workers, and AddrsPerWorker must be 1. 0: one switch.
	Leaves int
}

// Shaping is what every link direction does to its packets.
type Shaping struct {
	// RateBps is the rate in bits per second; 0 leaves the link unshaped
	// (veth at CPU speed, no qdisc).
	RateBps uint64
	// Queue is how long a full queue takes to drain at RateBps (tbf's
	// limit): packets that would wait longer are dropped. 0: 20 ms.
	Queue time.Duration
}

// DefaultQueue is Shaping.Queue's default.
const DefaultQueue = 20 * time.Millisecond

// Lab is a built topology; Close removes it.
type Lab struct {
	// Switch is the switch namespace's name; Workers[i] worker i's.
	Switch  string
	Workers []string
	// SwitchAddr is the switch's address (on BridgeIf); WorkerAddrs[i]
	// worker i's (on WorkerIf in Workers[i]).
	SwitchAddr  netip.Addr
	WorkerAddrs []netip.Addr
	// Address set k < Config.AddrsPerWorker: Addrs[k][i] is worker i's
	// k-th address (on WorkerIf in Workers[i]; the first primary, the
	// others secondaries of the subnet), SwitchAddrs[k] the switch's (on
	// BridgeIf). Addrs[0] is WorkerAddrs, SwitchAddrs[0] SwitchAddr. For
	// k ≥ 1 worker i's namespace routes SwitchAddrs[k] with Addrs[k][i] as
	// the preferred source, so a connection whose socket is not bound (a
	// gRPC client) to the switch's k-th address comes from the worker's
	// k-th. Host numbers in the subnet: the switch 1, then Addrs[k][i]
	// 2 + k·workers + i, then SwitchAddrs[1 …].
	Addrs       [][]netip.Addr
	SwitchAddrs []netip.Addr
	// A tree (Config.Leaves ≥ 2): Switch is the spine's namespace and
	// SwitchAddr the spine's address (on loopback there); Leaves[j] is
	// leaf j's namespace and LeafAddrs[j] its address (on BridgeIf).
	// Leaf j's namespace routes SwitchAddr over UplinkIf from LeafAddrs[j],
	// and the spine's routes LeafAddrs[j] over the link to leaf j: the
	// only routes between the levels, so workers reach their leaf only.
	// Host numbers: the spine 1, worker i 2 + i, leaf j 2 + workers + j.
	Leaves    []string
	LeafAddrs []netip.Addr

	prefix      string
	shaped      bool
	spineShaped bool
	lossy       bool
	wire        bool // SetWirePackets
	closed      bool
}

// WorkersPerLeaf is the number of workers under each leaf; 0 in a lab
// without leaves.
func (l *Lab) WorkersPerLeaf() int {
	if len(l.Leaves) == 0 {
		return 0
	}
	return len(l.Workers) / len(l.Leaves)
}

// WorkerSwitch is the namespace and address of worker i's switch: its
// leaf's in a tree, else the switch's.
func (l *Lab) WorkerSwitch(i int) (string, netip.Addr) {
	if len(l.Leaves) == 0 {
		return l.Switch, l.SwitchAddr
	}
	j := i / l.WorkersPerLeaf()
	return l.Leaves[j], l.LeafAddrs[j]
}

// Counters are the lab's kernel counters: sum over its namespaces.
type Counters struct {
	// UDPRcvbufErrors are datagrams dropped because a socket's receive
	// buffer was full; SwitchUDPRcvbufErrors those in the switch's
	// namespace (the switch's socket; in a tree the spine's and the
	// leaves').
	UDPRcvbufErrors, SwitchUDPRcvbufErrors uint64
	// TCPRetransSegs are TCP segments retransmitted (Gloo).
	TCPRetransSegs uint64
	// QueueDrops are packets the tbf qdiscs dropped (a full queue):
	// QueueDropsUp those of the worker → switch directions (the workers'
	// ends; in a tree also leaf → spine), QueueDropsDown those of switch →
	// worker (the switch's; in a tree also spine → leaf).
	QueueDrops, QueueDropsUp, QueueDropsDown uint64
	// LossDrops are packets the loss rules dropped.
	LossDrops uint64
}

// Sub is c − o, counter by counter.
func (c Counters) Sub(o Counters) Counters {
	return Counters{UDPRcvbufErrors: c.UDPRcvbufErrors - o.UDPRcvbufErrors, SwitchUDPRcvbufErrors: c.SwitchUDPRcvbufErrors - o.SwitchUDPRcvbufErrors,
		TCPRetransSegs: c.TCPRetransSegs - o.TCPRetransSegs, QueueDrops: c.QueueDrops - o.QueueDrops,
		QueueDropsUp: c.QueueDropsUp - o.QueueDropsUp, QueueDropsDown: c.QueueDropsDown - o.QueueDropsDown, LossDrops: c.LossDrops - o.LossDrops}
}
