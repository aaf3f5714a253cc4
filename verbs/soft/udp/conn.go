package udp

import (
	"net/netip"
	"time"
)

// DefaultBatchSize is the number of datagrams moved per system call.
const DefaultBatchSize = 64

// Config configures an endpoint.
type Config struct {
	// Addr is the local address to bind (IPv4 or IPv6, not unspecified).
	Addr netip.Addr
	// Port defaults to 4791 (RoCEv2).
	Port int
	// BatchSize is the most datagrams per recvmmsg/sendmmsg (default 64).
	BatchSize int
	// SocketBuffer sets SO_RCVBUF and SO_SNDBUF in bytes (default 4 MiB;
	// forced past rmem_max when running as root).
	SocketBuffer int
	// Capture, when set, receives a copy of every datagram sent and received.
	Capture *Capture
	// RecvLoss and SendLoss drop that fraction of datagrams (0 ≤ p < 1)
	// after receiving and instead of sending, from a generator seeded with
	// Seed. For tests and demos.
	RecvLoss, SendLoss float64
	Seed               uint64
	// Offload selects UDP GSO and GRO (default OffloadAuto).
	Offload Offload
	// GROBuffers is the number of 64 KiB receive buffers of a GRO endpoint:
	// the most datagrams one recvmmsg returns, each up to 64 segments
	// (default 16, at most BatchSize). They are most of an endpoint's
	// memory: a NIC with few peers (the switch, a ring neighbour), whose
	// datagrams arrive coalesced, needs fewer than a switch.
	GROBuffers int
	// BusyPoll is how long a read that finds the socket empty keeps
	// trying, giving the CPU away between tries, before it sleeps in the
	// runtime's poller; 0 or less: it sleeps at once. See busyPoller.
	BusyPoll time.Duration
}

// DefaultBusyPoll is the BusyPoll of an endpoint that is its process's one
// busy socket — a worker's NIC, the switch daemon's socket — on a host it
// shares with its peers: about what a sleep and a wake-up cost on a
// virtual machine (docs/benchmarks.md "Busy-polling the sockets"). Not for
// many endpoints in one process (the embedded bench): there a wake-up is a
// goroutine's, which costs less than the polling.
const DefaultBusyPoll = 50 * time.Microsecond

// BusyPollOrDefault is a process's setting of its socket's BusyPoll (the
// worker's and the switch's --busy-poll): 0 (auto) is DefaultBusyPoll,
// negative (off) is 0.
func BusyPollOrDefault(d time.Duration) time.Duration {
	if d == 0 {
		return DefaultBusyPoll
	}
	return max(d, 0)
}

// Msg is one datagram of a batch: its bytes are Buf[Off:Off+N]. For
// ReadBatch the datagram is stored at Buf[Off:] and N and Addr are set; for
// WriteBatch Buf[Off:Off+N] is sent to Addr. Off leaves headroom in front of
// the datagram (rdma.ICRCHeadroom lets the ICRC be computed in one pass).
type Msg struct {
	Buf  []byte
	Off  int
	N    int
	Addr netip.AddrPort
}

// Bytes returns the datagram, Buf[Off:Off+N].
func (m *Msg) Bytes() []byte { return m.Buf[m.Off : m.Off+m.N] }

// Stats are the endpoint's counters.
type Stats struct {
	RxPackets, RxBytes uint64
	TxPackets, TxBytes uint64
	RxLossDropped      uint64 // dropped by RecvLoss
	TxLossDropped      uint64 // dropped by SendLoss
	RxTruncated        uint64 // datagrams larger than the buffer given
	// Kernel datagrams and system calls. With GSO one datagram sent
	// carries several packets (TxGSODatagrams counts those), and with GRO
	// one datagram received may hold several (RxGRODatagrams).
	TxDatagrams, TxCalls, TxGSODatagrams uint64
	RxDatagrams, RxCalls, RxGRODatagrams uint64
	// Reads that found the socket empty and polled it (Config.BusyPoll):
	// RxPollHits ended with a datagram, RxPollMisses slept after all.
	RxPollHits, RxPollMisses uint64
}
