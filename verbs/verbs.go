package verbs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"time"
)

// Errors shared by every backend. Backends wrap them with the operation
// (fmt.Errorf("verbs: post send on QP %d: %w", qpn, ErrQueueFull)), so callers
// test with errors.Is.
var (
	// ErrNotSupported: the backend or a feature of it is not available in
	// this build or on this kernel (no RDMA, ibverbs not compiled in).
	ErrNotSupported = errors.New("not supported")
	// ErrNoDevice: the named device does not exist.
	ErrNoDevice = errors.New("no such RDMA device")
	// ErrClosed: the object (or its device) has been closed.
	ErrClosed = errors.New("closed")
	// ErrQueueFull: a send or receive queue has no room for the posted work
	// requests; nothing after the first rejected request was posted.
	ErrQueueFull = errors.New("work queue full")
	// ErrInvalidState: the QP is not in a state that allows the operation
	// (posting sends before RTS, a transition out of order).
	ErrInvalidState = errors.New("invalid QP state")
	// ErrInvalidArgument: a bad size, MTU, key, address range or opcode.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrTimeout: a blocking wait ran out of time.
	ErrTimeout = errors.New("timed out")
)

// Access is a memory-region access mask (IBV_ACCESS_*).
type Access uint32

const (
	AccessLocalWrite  Access = 1 << 0
	AccessRemoteWrite Access = 1 << 1
	AccessRemoteRead  Access = 1 << 2
)

func (a Access) String() string {
	s := ""
	add := func(n string) {
		if s != "" {
			s += "|"
		}
		s += n
	}
	if a&AccessLocalWrite != 0 {
		add("LOCAL_WRITE")
	}
	if a&AccessRemoteWrite != 0 {
		add("REMOTE_WRITE")
	}
	if a&AccessRemoteRead != 0 {
		add("REMOTE_READ")
	}
	if s == "" {
		return "NONE"
	}
	return s
}

// MTU is a path MTU in bytes: 256, 512, 1024, 2048 or 4096 (IBV_MTU_*).
type MTU int

// Valid reports whether m is one of the five InfiniBand path MTUs.
func (m MTU) Valid() bool {
	switch m {
	case 256, 512, 1024, 2048, 4096:
		return true
	}
	return false
}

// Check returns a descriptive error if m is not a valid path MTU.
func (m MTU) Check() error {
	if !m.Valid() {
		return fmt.Errorf("path MTU %d: %w: use 256, 512, 1024, 2048 or 4096", int(m), ErrInvalidArgument)
	}
	return nil
}

// Device is an open RDMA device bound to one local address (its RoCEv2 GID).
// Methods are safe for concurrent use. Closing a device closes nothing it
// created; close QPs, MRs, CQs and PDs first (libibverbs order).
type Device interface {
	// Name is the device name ("rxe0", "mlx5_0", "soft:127.0.0.2").
	Name() string
	// Addr is the IP address behind the GID this device sends from.
	Addr() netip.Addr
	AllocPD() (PD, error)
	// CreateCQ creates a completion queue with room for at least entries
	// completions.
	CreateCQ(entries int) (CQ, error)
	Close() error
}

// UCTruncation is implemented by devices whose UC responder cannot recover
// from a multi-packet RDMA WRITE that lost its tail. The IBA (class D1 error)
// has the responder abandon the partial message and accept the next FIRST or
// ONLY packet; Linux rxe instead drops that packet and stays "in message"
// until a MIDDLE or LAST with the expected PSN arrives, which for a lost LAST
// never happens: the QP then drops every later message until it is reset
// (rxe_resp.c: check_op_seq returns RESPST_ERR_MISSING_OPCODE_LAST_D1E, and
// do_class_d1e_error resets qp->resp.opcode only while a receive WQE is held,
// which WRITE FIRST/MIDDLE packets never hold). Users of multi-packet UC
// messages (SwitchML results) must send one-packet messages to such a device.
type UCTruncation interface {
	// UCTruncatedWriteWedges reports whether a UC QP of this device stops
	// accepting messages after a multi-packet WRITE loses a packet.
	UCTruncatedWriteWedges() bool
}

// PD is a protection domain. Safe for concurrent use.
type PD interface {
	// AllocMR allocates length bytes of memory outside the Go heap and
	// registers it zero-based: its IOVA is 0, so both local SGE addresses and
	// remote virtual addresses are offsets into Bytes().
	AllocMR(length int, access Access) (MR, error)
	// CreateUCQP creates an unreliable-connected queue pair in RESET state.
	CreateUCQP(cfg QPConfig) (QP, error)
	Close() error
}

// MR is a registered memory region. Bytes stays valid until Close; the caller
// owns synchronisation between its own accesses and remote writes (a write is
// visible once its completion, or the completion of a later write with
// immediate on the same QP, has been polled).
type MR interface {
	Bytes() []byte
	LKey() uint32
	RKey() uint32
	// IOVA is the address of Bytes()[0] as remote peers name it: 0.
	IOVA() uint64
	Access() Access
	Close() error
}

// QPConfig sizes a queue pair.
type QPConfig struct {
	SendCQ    CQ
	RecvCQ    CQ
	MaxSendWR int // outstanding send work requests; default 256
	MaxRecvWR int // outstanding receive work requests; default 256
}

// QPState is a queue-pair state (IBV_QPS_*).
type QPState int

const (
	QPStateReset QPState = iota
	QPStateInit
	QPStateRTR
	QPStateRTS
	QPStateError
)

func (s QPState) String() string {
	switch s {
	case QPStateReset:
		return "RESET"
	case QPStateInit:
		return "INIT"
	case QPStateRTR:
		return "RTR"
	case QPStateRTS:
		return "RTS"
	case QPStateError:
		return "ERROR"
	}
	return fmt.Sprintf("QPState(%d)", int(s))
}

// RTRAttr is what a UC QP needs to receive from its peer.
type RTRAttr struct {
	RemoteQPN  uint32     // 24-bit QPN of the peer QP
	RemoteAddr netip.Addr // the peer's IP (its RoCEv2 GID)
	RecvPSN    uint32     // PSN of the first packet expected (rq_psn)
	MTU        MTU        // path MTU
}

// QP is an unreliable-connected queue pair. PostSend and PostRecv may be
// called from different goroutines, but each from at most one at a time.
type QP interface {
	QPN() uint32
	State() QPState
	// Init moves RESET → INIT, granting remote peers access (normally
	// AccessRemoteWrite).
	Init(access Access) error
	// ReadyToReceive moves INIT → RTR.
	ReadyToReceive(attr RTRAttr) error
	// ReadyToSend moves RTR → RTS; sendPSN is the PSN of the first packet sent.
	ReadyToSend(sendPSN uint32) error
	// PostSend posts a chain of send work requests (one doorbell). It returns
	// how many were posted; on error the rest were not.
	PostSend(wrs []SendWR) (int, error)
	// PostRecv posts receive work requests; each is consumed by an incoming
	// RDMA WRITE WITH IMMEDIATE (or a SEND).
	PostRecv(wrs []RecvWR) (int, error)
	Close() error
}

// Connect moves qp RESET → INIT → RTR → RTS.
func Connect(qp QP, access Access, rtr RTRAttr, sendPSN uint32) error {
	if err := qp.Init(access); err != nil {
		return err
	}
	if err := qp.ReadyToReceive(rtr); err != nil {
		return err
	}
	return qp.ReadyToSend(sendPSN)
}

// WROpcode is a send work-request opcode (IBV_WR_*).
type WROpcode uint8

const (
	WRRDMAWrite        WROpcode = iota // IBV_WR_RDMA_WRITE
	WRRDMAWriteWithImm                 // IBV_WR_RDMA_WRITE_WITH_IMM
	WRSend                             // IBV_WR_SEND
	WRSendWithImm                      // IBV_WR_SEND_WITH_IMM
)

func (o WROpcode) String() string {
	switch o {
	case WRRDMAWrite:
		return "RDMA_WRITE"
	case WRRDMAWriteWithImm:
		return "RDMA_WRITE_WITH_IMM"
	case WRSend:
		return "SEND"
	case WRSendWithImm:
		return "SEND_WITH_IMM"
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// SGE is one scatter/gather element: Length bytes at Addr (an offset into the
// zero-based MR identified by LKey).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is one send work request with a single SGE.
type SendWR struct {
	ID         uint64
	Opcode     WROpcode
	Local      SGE
	RemoteAddr uint64 // RETH va
	RKey       uint32 // RETH rkey
	Imm        uint32 // immediate, host order (sent big-endian)
	// Signaled requests a completion on the send CQ.
	Signaled bool
}

// RecvWR is one receive work request. For RDMA WRITE WITH IMMEDIATE the
// payload goes to the RETH address, so Local may be empty.
type RecvWR struct {
	ID    uint64
	Local SGE
}

// WCOpcode is the kind of a completion (IBV_WC_*).
type WCOpcode uint8

const (
	WCRDMAWrite       WCOpcode = iota // a posted write finished (send CQ)
	WCSend                            // a posted send finished (send CQ)
	WCRecv                            // a SEND arrived (recv CQ)
	WCRecvRDMAWithImm                 // a WRITE WITH IMMEDIATE arrived (recv CQ)
)

func (o WCOpcode) String() string {
	switch o {
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCSend:
		return "SEND"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCStatus is a completion status (IBV_WC_*); 0 is success.
type WCStatus uint8

const (
	WCSuccess          WCStatus = 0
	WCLocLenErr        WCStatus = 1
	WCLocQPOpErr       WCStatus = 2
	WCLocProtErr       WCStatus = 4
	WCWRFlushErr       WCStatus = 5
	WCRemAccessErr     WCStatus = 10
	WCGeneralErr       WCStatus = 21
	WCStatusUnknownMax WCStatus = 255
)

var wcStatusNames = map[WCStatus]string{
	0: "SUCCESS", 1: "LOC_LEN_ERR", 2: "LOC_QP_OP_ERR", 3: "LOC_EEC_OP_ERR",
	4: "LOC_PROT_ERR", 5: "WR_FLUSH_ERR", 6: "MW_BIND_ERR", 7: "BAD_RESP_ERR",
	8: "LOC_ACCESS_ERR", 9: "REM_INV_REQ_ERR", 10: "REM_ACCESS_ERR", 11: "REM_OP_ERR",
	12: "RETRY_EXC_ERR", 13: "RNR_RETRY_EXC_ERR", 14: "LOC_RDD_VIOL_ERR",
	15: "REM_INV_RD_REQ_ERR", 16: "REM_ABORT_ERR", 17: "INV_EECN_ERR",
	18: "INV_EEC_STATE_ERR", 19: "FATAL_ERR", 20: "RESP_TIMEOUT_ERR", 21: "GENERAL_ERR",
	22: "TM_ERR", 23: "TM_RNDV_INCOMPLETE",
}

// String returns the libibverbs name without the IBV_WC_ prefix.
func (s WCStatus) String() string {
	if n, ok := wcStatusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// Completion is one work completion.
type Completion struct {
	WRID    uint64
	Opcode  WCOpcode
	Status  WCStatus
	QPN     uint32 // local QP the work belonged to
	ByteLen uint32 // bytes received (recv) or sent
	Imm     uint32 // immediate, host order; valid when HasImm
	HasImm  bool
}

// Err returns nil for a successful completion, else an error naming the status.
func (c *Completion) Err() error {
	if c.Status == WCSuccess {
		return nil
	}
	return fmt.Errorf("verbs: completion wr_id %d on QP %d: %s", c.WRID, c.QPN, c.Status)
}

// CQ is a completion queue. Poll, RequestNotify and Wait may be called from
// one goroutine at a time; Notifications from any.
//
// Completion notification is libibverbs': RequestNotify arms the CQ
// (ibv_req_notify_cq), and the next completion added to it afterwards puts
// one event on Notifications (the completion channel, ibv_get_cq_event). A
// completion that was already in the CQ raises no event, so a waiter arms,
// polls once more, and only then blocks (Await does this).
type CQ interface {
	// Poll moves up to len(wcs) completions into wcs without blocking.
	Poll(wcs []Completion) (int, error)
	// RequestNotify arms the completion notification for the next
	// completion (any, not only solicited ones). One event per arming.
	RequestNotify() error
	// Notifications is the CQ's completion channel. It holds at most one
	// event; an event can be stale (its completions already polled), so
	// a receiver polls after each and re-arms before blocking again.
	Notifications() <-chan struct{}
	// Wait blocks until at least one completion is available (then polls it
	// like Poll) or ctx is done (then returns ctx.Err()).
	Wait(ctx context.Context, wcs []Completion) (int, error)
	Close() error
}

// BusyPoller is implemented by CQs that Await polls for a while before it
// arms their completion notification. Where a blocking wake-up costs more
// than a poll (libibverbs: ibv_req_notify_cq, a read of the completion
// channel's fd, ibv_get_cq_event and ibv_ack_cq_events, and a goroutine
// hand-off; a poll is one read of the CQ's ring in user memory), a
// completion that arrives within a few microseconds is cheaper to catch by
// polling, as RDMA libraries poll before they sleep.
type BusyPoller interface {
	// BusyPoll is how long Await polls an empty CQ before it arms it;
	// 0 or less: not at all.
	BusyPoll() time.Duration
}

// Await polls cq into wcs; if it is empty, it polls it for up to its
// BusyPoll (a BusyPoller), then arms the completion notification, polls
// once more, and blocks until an event arrives (and polls again) or wake
// is ready, which returns 0, nil. It allocates nothing: an engine calls it
// with a resettable event as wake, a caller with a context passes
// ctx.Done() (CQ.Wait is that).
func Await(cq CQ, wcs []Completion, wake <-chan struct{}) (int, error) {
	if n, err := cq.Poll(wcs); n > 0 || err != nil {
		return n, err
	}
	if b, ok := cq.(BusyPoller); ok {
		if spin := b.BusyPoll(); spin > 0 {
			if n, woken, err := busyPoll(cq, wcs, wake, spin); n > 0 || err != nil || woken {
				return n, err
			}
		}
	}
	for {
		if err := cq.RequestNotify(); err != nil {
			return 0, err
		}
		if n, err := cq.Poll(wcs); n > 0 || err != nil {
			return n, err
		}
		select {
		case <-cq.Notifications():
		case <-wake:
			return 0, nil
		}
		if n, err := cq.Poll(wcs); n > 0 || err != nil {
			return n, err
		}
	}
}

// Wait is CQ.Wait for a backend whose CQ needs nothing more than Await:
// it waits with ctx.Done() as the wake-up and returns ctx's error when that
// ended the wait.
func Wait(ctx context.Context, cq CQ, wcs []Completion) (int, error) {
	n, err := Await(cq, wcs, ctx.Done())
	if n == 0 && err == nil {
		return 0, ctx.Err()
	}
	return n, err
}

// busyPoll polls cq until it yields completions, wake is ready (woken) or
// spin has passed. Every few polls it yields the processor to runnable
// goroutines (which may be the ones that complete the work: a userspace
// NIC's) and reads the clock, and it stops at once when wake is ready, so
// a bounded spin neither starves the producer nor delays a timer or an
// abort. Not at every poll: where the clock is not in the vDSO (a guest on
// an emulated HPET) a read is a system call, dearer than a poll, and the
// scheduler reads it whenever the goroutine yields (its timers).
func busyPoll(cq CQ, wcs []Completion, wake <-chan struct{}, spin time.Duration) (n int, woken bool, err error) {
	const every = 16
	deadline := time.Now().Add(spin)
	for i := 1; ; i++ {
		select {
		case <-wake:
			return 0, true, nil
		default:
		}
		if n, err := cq.Poll(wcs); n > 0 || err != nil {
			return n, false, err
		}
		if i%every == 0 {
			if !time.Now().Before(deadline) {
				return 0, false, nil
			}
			runtime.Gosched()
		}
	}
}

// UDPDevice is implemented by devices that speak RoCEv2 through a UDP
// socket (verbs/soft.Device). Such a device cannot see the IPv4 header of
// what it receives, so it checks ICRCs as if the Identification were 0,
// whatever the sender's kernel wrote there: peers may send it UDP GSO
// datagrams over IPv4, whose segments the kernel numbers 0, 1, 2, …
// (verbs/soft/udp.Offload). AllowGSO(peer) declares the same of a peer (a
// switch: the software switch reads a UDP socket, the Tofino program never
// parses the ICRC), and the device then sends it GSO datagrams too.
type UDPDevice interface {
	Device
	AllowGSO(peer netip.Addr)
}

// StagedSender is implemented by QPs whose sends can be staged and sent
// later together with the other QPs' of the same device (verbs/soft.QP):
// PostSendStaged builds and queues the packets of wrs, and Doorbell sends
// everything staged on the device, by any of its QPs, in as few system
// calls as possible. A caller that drives many QPs stages every message
// that is ready and rings the doorbell once per pass; without it, every
// PostSend is a system call of its own.
type StagedSender interface {
	// PostSendStaged is PostSend without the doorbell. Signaled
	// completions come after the packets are sent.
	PostSendStaged(wrs []SendWR) (int, error)
	// Doorbell sends every packet staged on the QP's device.
	Doorbell() error
}
