package control

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

var (
	// ErrUnreachable is wrapped by Client errors when no controller answers
	// at the address.
	ErrUnreachable = errors.New("unreachable")
	// ErrJobEnded is wrapped by Assignment.Err when the job was aborted
	// (another rank died or aborted, a liveness timeout, controller
	// shutdown).
	ErrJobEnded = errors.New("job ended")
	// ErrControllerLost is wrapped by Assignment.Err when the KeepAlive
	// stream broke without an ENDED event: the controller died or the
	// network between them failed. The switch may still hold the job.
	ErrControllerLost = errors.New("lost the controller")
	// ErrMismatch is wrapped by Client errors when the ranks of a session
	// registered different parameters (tensor length, worker count, …) or
	// the callers of Agree passed different values; errors.As to
	// *MismatchError says which. Every rank that took part gets it.
	ErrMismatch = errors.New("ranks disagree")
	// ErrRegistrationTokenMissing is wrapped by Client errors when the
	// controller requires a registration token (Config.RegistrationToken)
	// and the call carried none.
	ErrRegistrationTokenMissing = errors.New("registration token missing")
	// ErrRegistrationTokenWrong is wrapped by Client errors when the call
	// carried a token that is not the controller's registration token.
	ErrRegistrationTokenWrong = errors.New("registration token wrong")
	// ErrSessionRunning is wrapped by Client errors when a registration
	// names a session id that a running job holds.
	ErrSessionRunning = errors.New("session already running")
	// ErrBadResponse is wrapped by Client errors when the controller's
	// answer contradicts itself (a broken or mismatched controller); the
	// rank aborts the job.
	ErrBadResponse = errors.New("inconsistent controller answer")
)

// google.rpc.ErrorInfo reasons of the controller's refusals that Client
// errors turn into sentinels; clients in other languages can match on
// them.
const (
	ErrorReasonTokenMissing   = "REGISTRATION_TOKEN_MISSING"
	ErrorReasonTokenWrong     = "REGISTRATION_TOKEN_WRONG"
	ErrorReasonSessionRunning = "SESSION_RUNNING"
	// ErrorReasonElementWidth: the switch cannot sum the job's element
	// width (RdmaSessionRequest.wire_bits); Client errors wrap
	// wire.ErrElementWidth.
	ErrorReasonElementWidth = "ELEMENT_WIDTH"
)

// reasonSentinels are the sentinels of the ErrorInfo reasons.
var reasonSentinels = map[string]error{
	ErrorReasonTokenMissing:   ErrRegistrationTokenMissing,
	ErrorReasonTokenWrong:     ErrRegistrationTokenWrong,
	ErrorReasonSessionRunning: ErrSessionRunning,
	ErrorReasonElementWidth:   wire.ErrElementWidth,
}

// sentinelFrom is the sentinel of a status's ErrorInfo reason, or nil.
func sentinelFrom(st *status.Status) error {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain {
			if err := reasonSentinels[info.GetReason()]; err != nil {
				return err
			}
		}
	}
	return nil
}

// ErrorReasonMismatch is the google.rpc.ErrorInfo reason of the
// INVALID_ARGUMENT a controller returns when ranks disagree; its metadata
// holds param, rank, value, first_rank and first_value (the fields of
// MismatchError). Clients in other languages can match on it.
const ErrorReasonMismatch = "PARAMETER_MISMATCH"

// errorDomain is the ErrorInfo domain of the controller's errors.
const errorDomain = "swml-rdma.control"

// MismatchError says which parameter two ranks disagree on. Param is the
// RdmaSessionRequest field ("tensor_bytes", "num_workers", "message_size",
// "packet_size", "qps", "dtype", "request_style", "address_family"),
// "rank" for a rank registered twice, or Agree's name. Values are as the
// controller printed them.
type MismatchError struct {
	SessionID  uint32
	Param      string
	Rank       int
	Value      string
	FirstRank  int
	FirstValue string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("session %d: rank %d has %s %s but rank %d has %s", e.SessionID, e.Rank, e.Param, e.Value, e.FirstRank, e.FirstValue)
}

// Is makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// mismatchFrom rebuilds a MismatchError from a status's ErrorInfo.
func mismatchFrom(st *status.Status) *MismatchError {
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetReason() != ErrorReasonMismatch || info.GetDomain() != errorDomain {
			continue
		}
		md := info.GetMetadata()
		sid, _ := strconv.ParseUint(md["session"], 10, 32)
		rank, _ := strconv.Atoi(md["rank"])
		first, _ := strconv.Atoi(md["first_rank"])
		return &MismatchError{SessionID: uint32(sid), Param: md["param"], Rank: rank, Value: md["value"], FirstRank: first, FirstValue: md["first_value"]}
	}
	return nil
}

// Client is a worker's connection to the controller. Safe for concurrent
// use; Close it to release the connection and the KeepAlive streams of its
// assignments.
type Client struct {
	addr    string
	conn    *grpc.ClientConn
	session pb.SessionClient
	sync    pb.SyncClient
	jobs    pb.JobClient
	diag    *diagCreds // nil: Dial with the caller's options

	mu     sync.Mutex
	closed bool
	leases map[*Assignment]struct{}
	wg     sync.WaitGroup
}

// ClientConfig says how NewClient reaches the controller.
type ClientConfig struct {
	Addr string // host:port; "" is DefaultAddr
	// TLS, if set, dials the controller in TLS (the controller serves
	// it with a certificate and key); nil dials plaintext, as the
	// controller listens on loopback by default.
	TLS *ClientTLS
	// RegistrationToken, if set, is presented to a controller that
	// requires one (Config.RegistrationToken) on every call that needs it.
	RegistrationToken string
	// DialOptions are appended to the options NewClient builds.
	DialOptions []grpc.DialOption
}

// NewClient returns a Client for the controller cfg names. It does not
// connect yet: the first call does, and reports an unreachable controller,
// or a TLS failure as an error wrapping ErrTLS (a *TLSError).
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	d, err := newDiagCreds(cfg.Addr, cfg.TLS)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(d)}
	if cfg.RegistrationToken != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(RegistrationCredentials(cfg.RegistrationToken, cfg.TLS != nil)))
	}
	c, err := dial(cfg.Addr, append(opts, cfg.DialOptions...))
	if err != nil {
		return nil, err
	}
	c.diag = d
	return c, nil
}

// Dial returns a Client for the controller at addr (DefaultAddr if empty).
// It does not connect yet: the first call does, and reports an unreachable
// controller. Without options it uses plaintext, as NewClient with only
// Addr; opts replace that (NewClient builds TLS and token options).
func Dial(addr string, opts ...grpc.DialOption) (*Client, error) {
	if len(opts) == 0 {
		return NewClient(ClientConfig{Addr: addr})
	}
	if addr == "" {
		addr = DefaultAddr
	}
	return dial(addr, opts)
}

func dial(addr string, opts []grpc.DialOption) (*Client, error) {
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("control: controller address %q: %w", addr, err)
	}
	return &Client{
		addr:    addr,
		conn:    conn,
		session: pb.NewSessionClient(conn),
		sync:    pb.NewSyncClient(conn),
		jobs:    pb.NewJobClient(conn),
		leases:  make(map[*Assignment]struct{}),
	}, nil
}

// Close drops the KeepAlive streams of assignments not yet ended (the
// controller aborts those jobs: a worker that closes its client without
// EndSession is gone) and closes the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	for a := range c.leases {
		a.cancel()
	}
	c.mu.Unlock()
	c.wg.Wait()
	return c.conn.Close()
}

// Registration is what a worker tells the controller about itself.
type Registration struct {
	SessionID  uint32 // the same for every worker of a job
	Rank       int
	NumWorkers int
	MAC        net.HardwareAddr // the worker NIC's MAC (Tofino needs it)
	Addr       netip.Addr       // the worker NIC's RoCE address; IPv6 is sent as a GID
	RKey       uint32           // rkey of the worker's receive MR
	PacketSize int              // payload bytes per packet: 256, 512, 1024, 2048 or 4096
	// MessageSize is bytes per message, a power-of-two multiple of
	// PacketSize.
	MessageSize int
	// QPNs are the worker's QPs; PSNs[i] is the PSN QPNs[i] expects the
	// switch's first result to carry.
	QPNs  []uint32
	PSNs  []uint32
	DType wire.DType
	// TensorBytes is the length in bytes of the tensor every all-reduce of
	// the job reduces, when it is fixed (the CLI's --size); the controller
	// refuses ranks that register different lengths, naming both. 0: the
	// length varies per call (not checked at registration; see Agree).
	TensorBytes uint64
	// IgnoresIPv4ID says the worker's NIC cannot see the IPv4
	// Identification of what it receives (verbs.UDPDevice): the switch may
	// send it UDP GSO datagrams (RdmaSessionRequest.ignores_ipv4_id).
	IgnoresIPv4ID bool
	// NeedsPacketWrites says the worker's NIC wedges a UC QP when a
	// multi-packet WRITE to it loses a packet (verbs.UCTruncation): every
	// worker of the job must send packet writes
	// (RdmaSessionRequest.needs_packet_writes, Assignment.PacketWrites).
	NeedsPacketWrites bool
	// GapNotices says the worker takes gap notices (wire.GapNotice;
	// RdmaSessionRequest.gap_notices).
	GapNotices bool
	// WireBits is the element width on the wire, 32 (or 0) or 16
	// (RdmaSessionRequest.wire_bits); every worker of a job registers the
	// same. A switch that cannot sum 16-bit elements refuses the job with an
	// error wrapping wire.ErrElementWidth.
	WireBits int
	// NoKeepAlive skips the KeepAlive stream (a controller with liveness
	// checks on aborts the job after its liveness timeout).
	NoKeepAlive bool
}

// Assignment is the controller's answer: the job and what this worker
// needs to talk to the switch. Done and Err report the job's end while the
// KeepAlive stream is held.
type Assignment struct {
	SessionID  uint32
	JobID      uint32
	Rank       int
	NumWorkers int
	SwitchMAC  net.HardwareAddr
	SwitchAddr netip.Addr
	// SwitchQPNs[i] is the switch QPN the worker's QP i writes to;
	// SwitchPSNs[i] is the PSN QP i starts sending with.
	SwitchQPNs []uint32
	SwitchPSNs []uint32
	// The job owns slots [PoolBase, PoolBase+PoolSlots); QP i's first
	// packet uses pool index QPPoolIndices[i] (set 0).
	PoolBase          uint32
	PoolSlots         uint32
	QPPoolIndices     []wire.PoolIndex
	PacketSize        int
	PacketsPerMessage int
	// PacketWrites: a worker of the job registered NeedsPacketWrites, so
	// every worker sends packet writes (the same answer for every rank).
	PacketWrites bool
	// GapNotices: every worker of the job registered GapNotices and the
	// switch sends them (RdmaSessionResponse.gap_notices).
	GapNotices bool
	// WireBits is the job's element width on the wire, 32 or 16: what the
	// worker registered, as the controller echoed it.
	WireBits int
	// OrderGroups[i] is QP i's ordering group: results of one group come
	// back in the order the switch completes them, results of different
	// groups may overtake each other (the software switch on several
	// cores). Nil: one group.
	OrderGroups []uint32

	token  []byte // the job's secret; KeepAlive and EndSession carry it
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	ending bool // EndSession or Close cancelled the stream on purpose
	err    error
}

// Done is closed when the job ends, this rank ended its session, or the
// KeepAlive stream broke. Never closed with Registration.NoKeepAlive.
func (a *Assignment) Done() <-chan struct{} { return a.done }

// Err says why Done was closed: nil for a clean end, ErrJobEnded wrapped
// with the controller's reason for an abort, ErrControllerLost if the
// stream broke.
func (a *Assignment) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// RegisterRDMA registers the worker and waits until every rank of the
// session has (at most the controller's session timeout, or ctx). Unless
// r.NoKeepAlive, it then holds the job's KeepAlive stream until EndSession,
// Abort or Close.
func (c *Client) RegisterRDMA(ctx context.Context, r Registration) (*Assignment, error) {
	if r.Rank < 0 || r.NumWorkers <= 0 {
		return nil, fmt.Errorf("control: register: rank %d of %d workers: need 0 ≤ rank < workers", r.Rank, r.NumWorkers)
	}
	if !r.Addr.IsValid() {
		return nil, errors.New("control: register: no worker address: pass the RoCE NIC's IP")
	}
	if len(r.MAC) != 0 && len(r.MAC) != 6 {
		return nil, fmt.Errorf("control: register: MAC %v is not 48 bits", r.MAC)
	}
	req := &pb.RdmaSessionRequest{
		SessionId:         r.SessionID,
		Rank:              uint32(r.Rank),
		NumWorkers:        uint32(r.NumWorkers),
		Mac:               macToUint64(r.MAC),
		Rkey:              r.RKey,
		PacketSizeBytes:   uint32(r.PacketSize),
		MessageSize:       uint32(r.MessageSize),
		Qpns:              r.QPNs,
		Psns:              r.PSNs,
		TensorBytes:       r.TensorBytes,
		IgnoresIpv4Id:     r.IgnoresIPv4ID,
		NeedsPacketWrites: r.NeedsPacketWrites,
		GapNotices:        r.GapNotices,
		WireBits:          uint32(r.WireBits),
	}
	switch r.PacketSize { // for p4app controllers, which know only the enum
	case 256:
		req.PacketSize = pb.PacketSize_MTU_256
	case 512:
		req.PacketSize = pb.PacketSize_MTU_512
	case 1024:
		req.PacketSize = pb.PacketSize_MTU_1024
	}
	if r.DType == wire.Int32 {
		req.Dtype = pb.DataType_DATA_TYPE_INT32
	}
	if r.Addr.Is4() {
		req.Ipv4 = binary.BigEndian.Uint32(r.Addr.AsSlice())
	} else {
		req.Gid = r.Addr.AsSlice()
	}
	resp, err := c.session.RdmaSession(ctx, req)
	if err != nil {
		return nil, c.wrap("register", err)
	}
	a := &Assignment{
		SessionID:         uint32(resp.GetSessionId()),
		JobID:             resp.GetJobId(),
		Rank:              r.Rank,
		NumWorkers:        r.NumWorkers,
		SwitchMAC:         macFromUint64(resp.GetMac()),
		SwitchQPNs:        resp.GetQpns(),
		SwitchPSNs:        resp.GetPsns(),
		PoolBase:          resp.GetPoolBase(),
		PoolSlots:         resp.GetPoolSlots(),
		PacketSize:        int(resp.GetPacketSizeBytes()),
		PacketsPerMessage: int(resp.GetPacketsPerMessage()),
		PacketWrites:      resp.GetPacketWrites(),
		GapNotices:        resp.GetGapNotices(),
		WireBits:          int(resp.GetWireBits()),
		token:             resp.GetJobToken(),
		done:              make(chan struct{}),
	}
	if a.WireBits == 0 {
		a.WireBits = 32 // a controller without the field serves the 32-bit wire
	}
	if want := wireBitsOf(r.WireBits); a.WireBits != want {
		// A controller that predates wire_bits ignores it and programs a
		// 32-bit job: the worker's int16 lanes would be summed as int32.
		_, _ = c.jobs.EndSession(ctx, &pb.EndSessionRequest{JobId: a.JobID, Rank: uint32(a.Rank), Abort: true,
			Reason: fmt.Sprintf("rank %d registered a %d-bit wire, the controller set up %d bits", r.Rank, want, a.WireBits), JobToken: a.token})
		return nil, fmt.Errorf("control: register: session %d: %d-bit wire registered, the controller answered %d bits: %w",
			r.SessionID, want, a.WireBits, wire.ErrElementWidth)
	}
	if g := resp.GetQpOrderGroups(); len(g) > 0 {
		if len(g) != len(a.SwitchQPNs) {
			_, _ = c.jobs.EndSession(ctx, &pb.EndSessionRequest{JobId: a.JobID, Rank: uint32(a.Rank), Abort: true,
				Reason: fmt.Sprintf("rank %d got %d QP order groups for %d QPs", r.Rank, len(g), len(a.SwitchQPNs)), JobToken: a.token})
			return nil, fmt.Errorf("control: register: session %d: %d QP order groups for %d QPs: %w",
				r.SessionID, len(g), len(a.SwitchQPNs), ErrBadResponse)
		}
		a.OrderGroups = g
	}
	for _, p := range resp.GetQpPoolIndices() {
		a.QPPoolIndices = append(a.QPPoolIndices, wire.PoolIndex(p))
	}
	if gid := resp.GetGid(); len(gid) == 16 {
		a.SwitchAddr = netip.AddrFrom16([16]byte(gid)).Unmap()
	} else {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], resp.GetIpv4())
		a.SwitchAddr = netip.AddrFrom4(b)
	}
	if r.NoKeepAlive {
		a.cancel = func() {}
		return a, nil
	}
	if err := c.holdLease(ctx, a); err != nil {
		return nil, err
	}
	return a, nil
}

// wireBitsOf is the element width a Registration.WireBits asks for: 16, or
// 32 for 0 and 32 (any other width the controller refuses).
func wireBitsOf(b int) int {
	if b == 16 {
		return 16
	}
	return 32
}

// holdLease opens the KeepAlive stream and waits for ATTACHED.
func (c *Client) holdLease(ctx context.Context, a *Assignment) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errors.New("control: register: client closed")
	}
	sctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	c.leases[a] = struct{}{}
	c.wg.Add(1)
	c.mu.Unlock()

	attached := make(chan error, 1)
	go func() {
		defer c.wg.Done()
		defer func() {
			c.mu.Lock()
			delete(c.leases, a)
			c.mu.Unlock()
			cancel()
			close(a.done)
		}()
		stream, err := c.jobs.KeepAlive(sctx, &pb.KeepAliveRequest{JobId: a.JobID, Rank: uint32(a.Rank), JobToken: a.token})
		if err == nil {
			_, err = stream.Recv()
		}
		attached <- err
		if err != nil {
			return
		}
		ev, err := stream.Recv()
		a.mu.Lock()
		defer a.mu.Unlock()
		switch {
		case err == nil && ev.GetAborted():
			a.err = fmt.Errorf("control: job %d: %s: %w", a.JobID, ev.GetReason(), ErrJobEnded)
		case err == nil, a.ending:
		default:
			a.err = fmt.Errorf("control: job %d: keep-alive to controller %s: %w: %w", a.JobID, c.addr, ErrControllerLost, err)
		}
	}()
	select {
	case err := <-attached:
		if err != nil {
			return c.wrap(fmt.Sprintf("keep-alive for job %d", a.JobID), err)
		}
		return nil
	case <-ctx.Done():
		cancel()
		return fmt.Errorf("control: keep-alive for job %d: %w", a.JobID, ctx.Err())
	}
}

// EndSession tells the controller this rank is done with the job; the
// controller removes the job once every rank has ended. It releases the
// KeepAlive stream.
func (c *Client) EndSession(ctx context.Context, a *Assignment) error {
	return c.end(ctx, a, false, "")
}

// Abort ends the job for every rank now; the others' Assignment.Err names
// reason.
func (c *Client) Abort(ctx context.Context, a *Assignment, reason string) error {
	return c.end(ctx, a, true, reason)
}

func (c *Client) end(ctx context.Context, a *Assignment, abort bool, reason string) error {
	_, err := c.jobs.EndSession(ctx, &pb.EndSessionRequest{JobId: a.JobID, Rank: uint32(a.Rank), Abort: abort, Reason: reason, JobToken: a.token})
	if err != nil {
		return c.wrap(fmt.Sprintf("end job %d", a.JobID), err)
	}
	if !abort {
		a.mu.Lock()
		a.ending = true
		a.mu.Unlock()
		a.cancel()
	}
	return nil
}

// Barrier returns when numWorkers workers of the session have called it
// (rank lets a timeout name the missing ranks).
func (c *Client) Barrier(ctx context.Context, sessionID uint32, rank, numWorkers int) error {
	r := uint32(rank)
	_, err := c.sync.Barrier(ctx, &pb.BarrierRequest{NumWorkers: uint32(numWorkers), SessionId: sessionID, Rank: &r})
	if err != nil {
		return c.wrap("barrier", err)
	}
	return nil
}

// Agree returns when numWorkers workers of the session have called it with
// the same value (a Barrier that checks, e.g., the length of the tensor
// each rank is about to all-reduce). If a caller passes another value,
// every caller waiting and that one fail at once with an error wrapping
// ErrMismatch (a *MismatchError with Param name). Every rank must pass the
// same name.
func (c *Client) Agree(ctx context.Context, sessionID uint32, rank, numWorkers int, name string, value uint64) error {
	r := uint32(rank)
	_, err := c.sync.Barrier(ctx, &pb.BarrierRequest{NumWorkers: uint32(numWorkers), SessionId: sessionID, Rank: &r, AgreeValue: &value, AgreeName: name})
	if err != nil {
		return c.wrap("agree on "+name, err)
	}
	return nil
}

// Broadcast returns root's value to every worker once all numWorkers have
// called it.
func (c *Client) Broadcast(ctx context.Context, sessionID uint32, rank, numWorkers, root int, value uint64) (uint64, error) {
	resp, err := c.sync.Broadcast(ctx, &pb.BroadcastRequest{Value: value, Rank: uint32(rank), NumWorkers: uint32(numWorkers), Root: uint32(root), SessionId: sessionID})
	if err != nil {
		return 0, c.wrap("broadcast", err)
	}
	return resp.GetValue(), nil
}

// rpcError keeps the gRPC status (status.Code works on it) with a readable
// message.
type rpcError struct {
	msg         string
	st          *status.Status
	unreachable bool
	mismatch    *MismatchError // when the status carries one
	tls         *TLSError      // when TLS explains a failed connection
	sentinel    error          // of the status's ErrorInfo reason, if any
}

func (e *rpcError) Error() string              { return e.msg }
func (e *rpcError) GRPCStatus() *status.Status { return e.st }
func (e *rpcError) Is(target error) bool {
	return e.unreachable && target == ErrUnreachable || e.sentinel != nil && target == e.sentinel
}

// Unwrap gives errors.As the *MismatchError or *TLSError.
func (e *rpcError) Unwrap() error {
	switch {
	case e.mismatch != nil:
		return e.mismatch
	case e.tls != nil:
		return e.tls
	}
	return nil
}

func (c *Client) wrap(op string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("control: %s: %w", op, err)
	}
	if st.Code() == codes.Unavailable && c.conn.GetState() != connectivity.Ready {
		if c.diag != nil {
			if te := c.diag.diagnose(); te != nil {
				return &rpcError{msg: fmt.Sprintf("control: %s: %v", op, te), st: st, tls: te}
			}
		}
		return &rpcError{
			msg:         fmt.Sprintf("control: %s: controller %s unreachable (%s)", op, c.addr, st.Message()),
			st:          st,
			unreachable: true,
		}
	}
	return &rpcError{msg: fmt.Sprintf("control: %s: %s", op, st.Message()), st: st, mismatch: mismatchFrom(st), sentinel: sentinelFrom(st)}
}

// RankWait is one rank a job waits for (Client.WaitingFor).
type RankWait struct {
	Rank int
	Addr netip.Addr // the rank's RoCE address
	// MissingSlots is the number of the job's partial sums on the switch
	// that lack this rank's contribution.
	MissingSlots int
	// ActivityKnown: Packets counts the rank's packets that reached the
	// switch and Idle is how long ago the last one did (since the job
	// started when none did); false where the switch counts none (the
	// Tofino program).
	ActivityKnown bool
	Packets       uint64
	Idle          time.Duration
	// Ended: the rank ended its session while the others still call.
	Ended bool
}

// Waiting is the controller's answer to WaitingFor.
type Waiting struct {
	// SlotsRead: the controller read the job's slots on the switch (a
	// ProgressReporter); false where it could not, and then Ranks holds
	// only ranks that ended their session.
	SlotsRead bool
	// Aggregating is the number of the job's (slot, set) pairs holding a
	// partial sum.
	Aggregating int
	// Ranks are the ranks the job waits for, most missing slots first.
	Ranks []RankWait
}

// WaitingFor asks the controller which ranks a's job waits for: what a
// worker whose message got no result calls to name the rank that holds
// the job up.
func (c *Client) WaitingFor(ctx context.Context, a *Assignment) (Waiting, error) {
	resp, err := c.jobs.WaitingFor(ctx, &pb.WaitingForRequest{JobId: a.JobID, Rank: uint32(a.Rank), JobToken: a.token})
	if err != nil {
		return Waiting{}, c.wrap(fmt.Sprintf("ask who job %d waits for", a.JobID), err)
	}
	w := Waiting{SlotsRead: resp.GetSlotsRead(), Aggregating: int(resp.GetAggregating())}
	for _, rw := range resp.GetWaiting() {
		addr, _ := netip.AddrFromSlice(rw.GetAddr())
		w.Ranks = append(w.Ranks, RankWait{
			Rank: int(rw.GetRank()), Addr: addr.Unmap(), MissingSlots: int(rw.GetMissingSlots()),
			ActivityKnown: rw.GetActivityKnown(), Packets: rw.GetPackets(),
			Idle: time.Duration(rw.GetIdleMs()) * time.Millisecond, Ended: rw.GetEnded(),
		})
	}
	return w, nil
}
