package control

// A session, from its ranks' first RdmaSession to the end of its job
// (docs/control-plane.md "Sequence of a session"), and the state it passes
// through: sessionParams (what the ranks agree on), registration (one
// rank's call), pendingSession (the ranks so far) and job (a running job).
// Follow one job through the controller in these files:
//
//	register.go    one rank's request on its own (parseRegistration): who
//	               it is, its QPs, packet and message sizes, the reduction,
//	               its address
//	rendezvous.go  the ranks meet (rdmaSession): each registration joins
//	               its pending session and is checked against the first
//	               rank's; the last one starts the job, the others wait;
//	               a session that never fills expires
//	alloc.go       the job is built and installed (startJob, allocJob):
//	               pool range within each client's share, switch QPNs and
//	               PSNs, Programmer.AddJob; every rank gets its answer
//	liveness.go    the running job is watched: each rank's KeepAlive
//	               stream, the liveness timeout, a p4app job's idle check
//	waiting.go     a stalled job: which ranks it waits for (WaitingFor),
//	               from the switch's slots and the ranks' sessions
//	teardown.go    the job ends (endJob): every rank's EndSession, an
//	               abort, or one of the watches above
//	list.go        ListJobs: the running jobs a caller may see
//
// and p4app.go, what p4app-switchML workers need on the way: slots from 0
// reserved at their first registration, p4app jobs in the way replaced.

import (
	"net"
	"net/netip"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/control/internal/spans"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// sessionParams are what every rank of a session must agree on.
type sessionParams struct {
	numWorkers  int
	packetSize  int
	messageSize int
	qps         int
	dtype       wire.DType
	// elementBytes is the element width on the wire, 4 or 2
	// (RdmaSessionRequest.wire_bits / 8, wire.Job.ElementBytes).
	elementBytes uint8
	v6           bool
	// tensorBytes is the tensor length every call reduces, 0 if not
	// declared (RdmaSessionRequest.tensor_bytes).
	tensorBytes uint64
	// p4app: the request has no packet_size_bytes, as p4app-switchML's
	// workers send it. Such a rank is answered at once (p4app's workers
	// call RdmaSession one after another between barriers, not together),
	// its job's pool starts at slot 0 (they address pool indices from 0),
	// and it holds no KeepAlive stream (IdleTimeout supervises the job).
	p4app bool
}

// ppm is the packets per message: the pool slots each QP of the job holds.
func (p sessionParams) ppm() int { return p.messageSize / p.packetSize }

// style names the session's kind of workers, for messages.
func (p sessionParams) style() string {
	if p.p4app {
		return "p4app-switchML workers"
	}
	return "swml-rdma workers"
}

// registration is one rank's RdmaSession call.
type registration struct {
	rank   int
	client string // clientOf the call: who is charged the job's slots
	addr   netip.Addr
	mac    net.HardwareAddr
	rkey   uint32
	qpns   []uint32
	psns   []uint32
	// ignoresIPv4ID: RdmaSessionRequest.ignores_ipv4_id.
	ignoresIPv4ID bool
	// needsPacketWrites: RdmaSessionRequest.needs_packet_writes.
	needsPacketWrites bool
	// gapNotices: RdmaSessionRequest.gap_notices.
	gapNotices bool
	// switchQPNs and switchPSNs are drawn at registration for p4app
	// sessions (the answer cannot wait for the job); nil otherwise.
	switchQPNs []uint32
	switchPSNs []uint32
}

// pendingSession collects registrations until all ranks are in. Guarded by
// Controller.mu except done, job and err, which startJob writes once before
// closing done.
type pendingSession struct {
	id        uint32
	params    sessionParams
	firstRank int // whose parameters the session took, for mismatch errors
	regs      map[int]*registration
	reserved  spans.Span // p4app: slots [0, need), taken when the session opened
	charged   string     // p4app: the client charged for reserved
	heldQPs   int        // QPs of regs, counted in Controller.pendingQPs
	starting  bool       // all ranks in, or timed out; nobody may leave
	timer     *time.Timer
	done      chan struct{}
	job       *job
	err       error
}

// job is a running job. spec is immutable after startJob; the rest is
// guarded by Controller.mu, except done/aborted/reason which endJob writes
// before closing done.
type job struct {
	spec       wire.Job
	sessionID  uint32
	params     sessionParams
	pool       spans.Span // slots
	clients    []string   // distinct clients of its ranks, each charged pool.Size
	token      []byte     // the job's secret (RdmaSessionResponse.job_token)
	idle       *time.Timer
	packets    uint64 // p4app jobs: JobPackets at the last idle check
	switchPSNs [][]uint32
	// packetWrites: a rank registered needs_packet_writes, so every rank
	// sends packet writes (RdmaSessionResponse.packet_writes).
	packetWrites bool
	// orderGroups: RdmaSessionResponse.qp_order_groups, from an
	// OrderReporter after AddJob; nil: one group.
	orderGroups []uint32
	ended       []bool // rank called EndSession
	attached    []bool // rank opened a KeepAlive stream at some point
	streamOpen  []bool
	ending      bool
	liveness    *time.Timer
	started     time.Time // installed on the switch
	done        chan struct{}
	aborted     bool
	reason      string

	// upstream: a leaf's membership of its spine's job (JoinUpstream),
	// nil on a switch that is no leaf; set before the job is filed.
	upstream UpstreamLink
}

func (j *job) id() uint32 { return j.spec.ID }
