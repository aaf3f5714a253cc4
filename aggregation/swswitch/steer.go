package swswitch

import (
	"fmt"
	"net/netip"

	"golang.org/x/net/bpf"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// Two keys spread the switch over its cores (docs/switch.md, "Cores"):
//
//   - The core key (coreOf) says which core owns a request: a function of
//     the destination QPN of its BTH alone, equal for the switch QPNs that
//     every worker of a job uses for its QP i. QP i of every worker writes
//     the same slots (docs/protocol.md, "Setup": base_i), and MIDDLE and
//     LAST packets find their slot through the per-QP register of their
//     QPN, so one core sees every packet of a slot and of a QP's register,
//     and every result sent to a worker QP (its result PSNs).
//   - The reader key (readerOf) says which socket of a SO_REUSEPORT group
//     receives a datagram: the source address, so that every packet of one
//     worker is read by one goroutine in arrival order and handed to its
//     core in that order. It cannot be the core key: a worker's NIC sends
//     runs of packets of several QPs as one UDP GSO datagram (udp.Scheduler)
//     and the kernel picks the socket once per datagram, from its first
//     packet; a reader that split a datagram by QP while another reader
//     split the next one would reorder a QP's packets.

// DefaultMaxCores is the most cores a switch should be given: each core
// holds a pipeline of its own, pool registers included (docs/switch.md,
// "Cores").
const DefaultMaxCores = 8

// MaxCores bounds Config.Cores (a core index is a metric label and one
// byte of the steering table).
const MaxCores = 64

// defaultCores is one: more cores are the operator's choice until they are
// shown faster. Results of different QPs then leave from different cores
// and overtake each other, which the workers' RACK, whose evidence spans
// QPs, takes for loss (docs/switch.md, "Cores": spurious resends and a
// job that turns to packet writes without loss).
func defaultCores() int { return 1 }

// coreTable is the core key: the core of each switch QPN. It is replaced
// whole (copy on write) by AddJob and RemoveJob and read without a lock by
// the readers; Switch.jobsMu guards the replacing.
type coreTable struct {
	cores int
	// qpns holds the opaque switch QPNs (control.QPNOpaque) of installed
	// jobs. A P4AppQPN needs no entry: its QP index is in its bits.
	qpns map[uint32]qpnCore
	next int // the core of the next new QP index (round robin)
}

type qpnCore struct {
	core uint8
	refs int // installed jobs that use the QPN (with other worker addresses)
}

// coreOf is the core that owns a request with destination QPN qpn. A QPN no
// job uses goes to qpn mod cores, whose pipeline drops it as unknown.
func (t *coreTable) coreOf(qpn uint32) int {
	if t.cores == 1 {
		return 0
	}
	if _, i, ok := wire.P4AppQPNDecode(qpn); ok {
		return i % t.cores
	}
	if c, ok := t.qpns[qpn]; ok {
		return int(c.core)
	}
	return int(qpn % uint32(t.cores))
}

// coreOfPacket is coreOf for the datagram b (a BTH first); a datagram too
// short for a BTH goes to core 0, which counts it malformed.
func (t *coreTable) coreOfPacket(b []byte) int {
	if t.cores == 1 || len(b) < rdma.BTHSize {
		return 0
	}
	return t.coreOf(rdma.BTH(b).DestQP())
}

// withJob returns a copy of t with job's QPNs placed: for each QP index i,
// every worker's SwitchQPNs[i] on one core. A QPN that other jobs already
// use keeps its core (it cannot move: its register lives there), and fixes
// the core of its QP index; two such QPNs on different cores for one index
// make the job impossible to place (switchmodel.ErrConflict). New indices
// take the cores in turn. The job must be valid (wire.Job.Validate).
func (t *coreTable) withJob(job *wire.Job) (*coreTable, error) {
	n := t.clone(len(job.Workers) * len(job.Workers[0].SwitchQPNs))
	if t.cores == 1 {
		return n, nil
	}
	for i := range job.Workers[0].SwitchQPNs {
		core, from := -1, uint32(0)
		for _, w := range job.Workers {
			qpn := w.SwitchQPNs[i]
			c := -1
			if _, _, ok := wire.P4AppQPNDecode(qpn); ok {
				c = n.coreOf(qpn)
			} else if e, ok := n.qpns[qpn]; ok {
				c = int(e.core)
			}
			if c < 0 || c == core {
				continue
			}
			if core >= 0 {
				return nil, fmt.Errorf("swswitch: add job %d: %w: QP %d's switch QPNs %#x and %#x are bound to cores %d and %d; one slot's packets must reach one core",
					job.ID, switchmodel.ErrConflict, i, from, qpn, core, c)
			}
			core, from = c, qpn
		}
		if core < 0 {
			core = n.next
			n.next = (n.next + 1) % n.cores
		}
		for _, w := range job.Workers {
			qpn := w.SwitchQPNs[i]
			if _, _, ok := wire.P4AppQPNDecode(qpn); ok {
				continue
			}
			e := n.qpns[qpn]
			e.core = uint8(core)
			e.refs++
			n.qpns[qpn] = e
		}
	}
	return n, nil
}

// withoutJob returns a copy of t without job's references.
func (t *coreTable) withoutJob(job *wire.Job) *coreTable {
	var qpns []uint32
	for _, w := range job.Workers {
		qpns = append(qpns, w.SwitchQPNs...)
	}
	return t.withoutQPNs(qpns)
}

// withoutQPNs returns a copy of t with one reference to each of qpns
// dropped.
func (t *coreTable) withoutQPNs(qpns []uint32) *coreTable {
	n := t.clone(0)
	for _, qpn := range qpns {
		if e, ok := n.qpns[qpn]; ok {
			if e.refs--; e.refs <= 0 {
				delete(n.qpns, qpn)
			} else {
				n.qpns[qpn] = e
			}
		}
	}
	return n
}

// clone returns a copy of t that can be changed, with room for more QPNs.
func (t *coreTable) clone(more int) *coreTable {
	n := &coreTable{cores: t.cores, next: t.next, qpns: make(map[uint32]qpnCore, len(t.qpns)+more)}
	for q, c := range t.qpns {
		n.qpns[q] = c
	}
	return n
}

// readerKey is the low 32 bits of a source address, big-endian: for IPv4
// the address, for IPv6 its last 4 bytes (workers of one subnet differ
// there). The steering program loads the same 4 bytes (srcKeyOffset).
func readerKey(src netip.Addr) uint32 {
	src = src.Unmap()
	if src.Is4() {
		b := src.As4()
		return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	}
	b := src.As16()
	return uint32(b[12])<<24 | uint32(b[13])<<16 | uint32(b[14])<<8 | uint32(b[15])
}

// readerOf is the reader key: the socket of a group of readers that
// receives the datagrams from src. Consecutive worker addresses spread
// evenly.
func readerOf(src netip.Addr, readers int) int { return int(readerKey(src) % uint32(readers)) }

// srcKeyOffset is where readerKey's 4 bytes lie in the IP header: the last
// word of the source address (RFC 791 section 3.1, RFC 8200 section 3).
func srcKeyOffset(v6 bool) uint32 {
	if v6 {
		return 20
	}
	return 12
}

// skfNetOff is SKF_NET_OFF of linux/filter.h: a classic BPF load at
// skfNetOff+k reads byte k of the network (IP) header, wherever the packet
// data starts (a reuseport program starts at the UDP payload).
const skfNetOff = 0xFFF00000 // -0x100000

// readerProgram is readerOf as a classic BPF program for
// SO_ATTACH_REUSEPORT_CBPF (udp.ListenGroup): A = the 4 bytes at
// ipBase+srcKeyOffset, A %= readers, return A. The kernel's program uses
// ipBase skfNetOff; tests run it in golang.org/x/net/bpf's VM on an IP
// header at offset 0.
func readerProgram(readers int, v6 bool, ipBase uint32) []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: ipBase + srcKeyOffset(v6), Size: 4},
		bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: uint32(readers)},
		bpf.RetA{},
	}
}
