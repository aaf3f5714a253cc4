package main

// The Go side of the C ABI: joining a job (the environment, the NIC, the
// sessions) and the handle tables. No cgo here, so it is tested with plain
// Go tests.
//
// Joining a job follows the rules cmd/swml-rdma/worker.go follows, from
// one place, aggregation/join (rank and size, the soft NIC's default
// address, the job's sessions, the soft or ibverbs NIC, waiting for the
// controller); aggregation.Config.Validate checks the rest.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/join"
	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// Codes of the C ABI (main.go's SWML_E… macros).
const (
	codeOK       = 0
	codePending  = 1
	codeInval    = -1
	codeClosed   = -2
	codePeer     = -3
	codeTimeout  = -4
	codeInternal = -5
	codeBroken   = -6
	codeHandle   = -7
	codeFork     = -8
	codeFail     = -9
	codeMismatch = -10

	dtypeFloat32  = 0
	dtypeInt32    = 1
	dtypeBFloat16 = 2 // through the 16-bit-wire session, else the float32 one (quant.BFloat16)
	dtypeFloat16  = 3 // through the 16-bit-wire session, else the float32 one (quant.Float16)

	// defaultConnectTimeout is how long swml_open waits for the
	// controller to accept connections ($SWML_CONNECT_TIMEOUT), as the
	// CLI's --connect-timeout.
	defaultConnectTimeout = 30 * time.Second
)

// abiError is an error with its code.
type abiError struct {
	code int
	msg  string
}

func (e *abiError) Error() string { return e.msg }

func code(err error) int {
	var ae *abiError
	switch {
	case errors.As(err, &ae):
		return ae.code
	case errors.Is(err, aggregation.ErrLengthMismatch):
		return codeMismatch
	case errors.Is(err, aggregation.ErrClosed):
		return codeClosed
	case errors.Is(err, aggregation.ErrBroken):
		return codeBroken
	case errors.Is(err, aggregation.ErrPeerTimeout), errors.Is(err, aggregation.ErrSwitchGone),
		errors.Is(err, control.ErrJobEnded), errors.Is(err, control.ErrControllerLost):
		return codePeer
	case errors.Is(err, context.DeadlineExceeded):
		return codeTimeout
	}
	return codeFail
}

func inval(format string, args ...any) error {
	return &abiError{codeInval, fmt.Sprintf(format, args...)}
}

// openArgs are swml_open's arguments; zero values come from the environment.
type openArgs struct {
	controller    string
	sessionID     int64 // < 0: $SWML_SESSION_ID, else 1
	rank, workers int   // < 0: the environment
	nic, addr     string
	device        string
	dtypes        int // bit 0: float32, bit 1: int32; 0: both
	timeout       time.Duration
	peerTimeout   time.Duration      // 0: $SWML_PEER_TIMEOUT, else the default
	qps, packet   int                // 0: $SWML_QPS / $SWML_PACKET_SIZE, else the defaults
	threads       int                // 0: $SWML_THREADS, else 1
	msgSize       int                // 0: $SWML_MSG_SIZE, else the job's default (aggregation.DefaultGeometry)
	writes        aggregation.Writes // from $SWML_WRITES (resolve), else auto
	noGapNotices  bool               // $SWML_GAP_NOTICES false
	// busyPoll is $SWML_BUSY_POLL (join.ParseBusyPoll); unset, the
	// userspace NIC does not busy-poll: the process is a training
	// program's, whose CPUs its model needs (docs/benchmarks.md
	// "Busy-polling the sockets").
	busyPoll time.Duration
	// wire is $SWML_WIRE (resolve): wireAuto (unset: bfloat16 and float16
	// on the 16-bit wire where the switch has one, float32 on the 32-bit
	// wire), wire16 (every float type on the 16-bit wire, or fail) or
	// wire32 (every type on the 32-bit wire).
	wire string
	// From the environment (resolve): TLS to the controller
	// ($SWML_TLS_CA, $SWML_TLS_CERT, $SWML_TLS_KEY, $SWML_TLS_SERVER_NAME;
	// nil: plaintext) and the registration token
	// ($SWML_REGISTRATION_TOKEN_FILE).
	tls               *control.ClientTLS
	registrationToken string
}

// The values of $SWML_WIRE.
const (
	wireAuto = "auto"
	wire16   = "16"
	wire32   = "32"
)

// session is one swml_open: the NIC and one aggregation session per dtype
// and wire: f32 float32 on the 32-bit wire, w16 floats on the 16-bit wire,
// i32 int32; nil where not opened (openArgs.dtypes, SWML_WIRE, or a switch
// without a 16-bit pipeline).
type session struct {
	rank, workers int
	job           *join.Job // the NIC, the controller client, the switch sessions
	f32, w16, i32 *aggregation.Session
	wire          string // openArgs.wire
}

var (
	tabMu    sync.Mutex
	nextID   int64 = 1
	sessions       = map[int64]*session{}
	handles        = map[int64]*aggregation.Handle{}
)

// getenv reads the environment. main.go points it at C's getenv: Go's
// os.Getenv sees only the environment as it was when the process started,
// not what the host program (Python's os.environ, setenv) set since.
var getenv = os.Getenv

// envInt reads a number from the environment; set is false when name is
// unset.
func envInt(name string) (n int, set bool, err error) {
	v := getenv(name)
	if v == "" {
		return 0, false, nil
	}
	if n, err = strconv.Atoi(v); err != nil {
		return 0, false, inval("swml: %s=%q in the environment is not a number", name, v)
	}
	return n, true, nil
}

func envDuration(name string) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, inval("swml: %s=%q in the environment: give a duration such as 10s", name, v)
	}
	return d, nil
}

// configEnv names the environment variable of each aggregation.Config
// field, for the errors of Config.Validate (aggregation.FieldError).
var configEnv = map[string]string{
	"Workers": "SWML_WORKERS", "Rank": "SWML_RANK", "QPs": "SWML_QPS", "Threads": "SWML_THREADS", "PacketSize": "SWML_PACKET_SIZE",
	"PacketsPerMessage": "SWML_MSG_SIZE", "PeerTimeout": "SWML_PEER_TIMEOUT", "Writes": "SWML_WRITES", "Wire": "SWML_WIRE",
}

// firstSet is the first non-empty string.
func firstSet(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// resolve fills the zero fields of o from the environment, then checks
// them by the rules the CLI uses too: join.Member for rank and size,
// join.DefaultSoftAddr, join.JobSessions, wire.MessagePackets and
// aggregation.Config.Validate.
func (o *openArgs) resolve() error {
	o.controller = firstSet(o.controller, getenv("SWML_CONTROLLER"), control.DefaultAddr)
	if _, _, err := net.SplitHostPort(o.controller); err != nil {
		return inval("swml: controller %q: give host:port, as passed to `swml-rdma switch --controller-addr`", o.controller)
	}
	if o.sessionID < 0 {
		n, set, err := envInt("SWML_SESSION_ID")
		if err != nil {
			return err
		}
		o.sessionID = 1
		if set {
			o.sessionID = int64(n)
		}
	}
	if _, _, err := join.JobSessions(o.sessionID); err != nil {
		return inval("swml: %v", err)
	}
	if err := o.controllerAccess(); err != nil {
		return err
	}
	if err := o.member(); err != nil {
		return err
	}
	if err := o.nicAddr(); err != nil {
		return err
	}
	if o.dtypes == 0 {
		o.dtypes = 3
	}
	if o.dtypes&^3 != 0 {
		return inval("swml: dtypes %#x: bit 0 float32 (and the 16-bit floats), bit 1 int32", o.dtypes)
	}
	switch o.wire = firstSet(getenv("SWML_WIRE"), wireAuto); o.wire {
	case wireAuto, wire16, wire32:
	default:
		return inval("swml: SWML_WIRE=%q: use auto (16-bit floats on the 16-bit wire where the switch has one), 16 or 32", o.wire)
	}
	if o.timeout <= 0 {
		o.timeout = 60 * time.Second
	}
	if v := getenv("SWML_BUSY_POLL"); v != "" {
		d, err := join.ParseBusyPoll(v)
		if err != nil {
			return inval("swml: SWML_BUSY_POLL=%v", err)
		}
		o.busyPoll = d
	} else if o.nic == join.NICSoft {
		o.busyPoll = -1
	}
	return o.protocol()
}

// controllerAccess resolves TLS and the registration token from the
// environment, naming the variable of what is wrong.
func (o *openArgs) controllerAccess() error {
	t := &control.ClientTLS{CAFile: getenv("SWML_TLS_CA"), CertFile: getenv("SWML_TLS_CERT"), KeyFile: getenv("SWML_TLS_KEY"), ServerName: getenv("SWML_TLS_SERVER_NAME")}
	switch {
	case *t == (control.ClientTLS{}):
	case (t.CertFile == "") != (t.KeyFile == ""):
		return inval("swml: SWML_TLS_CERT and SWML_TLS_KEY go together: set both (this rank's PEM certificate and its key) or neither")
	case t.CAFile == "" && t.CertFile == "":
		return inval("swml: SWML_TLS_SERVER_NAME applies to TLS: set SWML_TLS_CA too (the CA that signed the switch's --tls-cert)")
	default:
		if _, err := t.Config(); err != nil {
			return inval("swml: SWML_TLS_CA=%q, SWML_TLS_CERT=%q, SWML_TLS_KEY=%q: %v", t.CAFile, t.CertFile, t.KeyFile, err)
		}
		o.tls = t
	}
	if f := getenv("SWML_REGISTRATION_TOKEN_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return inval("swml: SWML_REGISTRATION_TOKEN_FILE: %v", err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		if o.registrationToken = strings.TrimSpace(line); o.registrationToken == "" {
			return inval("swml: SWML_REGISTRATION_TOKEN_FILE %s: the first line is empty; it holds the switch's registration token", f)
		}
	}
	return nil
}

// remedies say, in the environment's terms, what to do about the errors
// of joining a job whose fix the library leaves to its caller.
var remedies = []struct {
	err error
	fix string
}{
	{control.ErrRegistrationTokenMissing, "the switch requires its registration token: set SWML_REGISTRATION_TOKEN_FILE to the file its --registration-token-file reads"},
	{control.ErrRegistrationTokenWrong, "SWML_REGISTRATION_TOKEN_FILE holds another token than the switch's: set it to the file its --registration-token-file reads"},
	{control.ErrSessionRunning, "set SWML_SESSION_ID to another id (every concurrent job needs its own), or wait for that job to end"},
	{control.ErrUnreachable, "the controller stopped answering: is `swml-rdma switch` still running at SWML_CONTROLLER?"},
	{wire.ErrElementWidth, "the switch sums another element width: set SWML_WIRE=auto (bf16/fp16 fall back to the 32-bit wire), or 16 for a 16-bit-only switch"},
}

// tlsRemedies are the fixes of control.TLSError's problems.
var tlsRemedies = map[control.TLSProblem]string{
	control.TLSControllerSpeaksTLS: "set SWML_TLS_CA to the CA that signed the switch's --tls-cert",
	control.TLSControllerPlaintext: "the switch serves no TLS: unset SWML_TLS_CA, SWML_TLS_CERT and SWML_TLS_KEY, or start it with --tls-cert and --tls-key",
	control.TLSUnknownAuthority:    "set SWML_TLS_CA to the CA that signed the switch's --tls-cert",
	control.TLSNameMismatch:        "set SWML_CONTROLLER to a name or address the switch's certificate holds, or SWML_TLS_SERVER_NAME to one",
	control.TLSClientCertRequired:  "the switch verifies clients (--tls-client-ca): set SWML_TLS_CERT and SWML_TLS_KEY to a certificate that CA signed",
	control.TLSClientCertRefused:   "set SWML_TLS_CERT and SWML_TLS_KEY to a certificate signed by a CA in the switch's --tls-client-ca",
}

// remedy is "; " and the fix for err, or "".
func remedy(err error) string {
	var te *control.TLSError
	if errors.As(err, &te) {
		if fix, ok := tlsRemedies[te.Problem]; ok {
			return "; " + fix
		}
		return ""
	}
	var me *control.MismatchError
	if errors.As(err, &me) {
		if v, ok := mismatchEnv[me.Param]; ok {
			return "; " + v
		}
	}
	for _, r := range remedies {
		if errors.Is(err, r.err) {
			return "; " + r.fix
		}
	}
	return ""
}

// mismatchEnv say what to make equal on every rank for each parameter
// ranks must agree on (control.MismatchError.Param).
var mismatchEnv = map[string]string{
	"qps": "set the same SWML_QPS on every rank", "packet_size": "set the same SWML_PACKET_SIZE on every rank",
	"message_size": "set the same SWML_MSG_SIZE on every rank", "num_workers": "every rank must have the same world size",
	"wire_bits": "set the same SWML_WIRE on every rank",
}

// member resolves rank and size (join.Member: the arguments, then
// SWML_RANK/SWML_WORKERS, Open MPI's variables, torchrun's).
func (o *openArgs) member() error {
	var e join.Explicit
	if o.rank >= 0 {
		e.Rank = &o.rank
	}
	if o.workers >= 0 {
		e.Workers = &o.workers
	}
	e.RankName, e.WorkersName, e.Getenv = "rank", "world size", getenv
	m, err := join.Member(e)
	if err != nil {
		return inval("swml: %v", err)
	}
	o.rank, o.workers = m.Rank, m.Workers
	return nil
}

// nicAddr resolves the NIC kind, device and address (SWML_NIC, SWML_DEVICE,
// SWML_ADDR; soft's default address by rank).
func (o *openArgs) nicAddr() error {
	o.nic = firstSet(o.nic, getenv("SWML_NIC"), join.NICSoft)
	o.addr = firstSet(o.addr, getenv("SWML_ADDR"))
	o.device = firstSet(o.device, getenv("SWML_DEVICE"))
	switch {
	case o.nic != join.NICSoft && o.nic != join.NICIbverbs:
		return inval("swml: nic %q: use %s (userspace NIC) or %s", o.nic, join.NICSoft, join.NICIbverbs)
	case o.addr == "" && o.nic == join.NICIbverbs:
		return inval("swml: nic ibverbs needs an address (SWML_ADDR): the local IP whose RoCE v2 GID to use")
	case o.addr == "":
		a, err := join.DefaultSoftAddr(o.rank)
		if err != nil {
			return inval("swml: %v; set SWML_ADDR", err)
		}
		o.addr = a.String()
	}
	if ip, err := netip.ParseAddr(o.addr); err != nil || ip.IsUnspecified() {
		return inval("swml: address %q: give this worker's own IP, e.g. 127.0.0.2 on one host", o.addr)
	}
	return nil
}

// protocol resolves the protocol's parameters (SWML_QPS, SWML_THREADS, SWML_PACKET_SIZE,
// SWML_MSG_SIZE, SWML_PEER_TIMEOUT, SWML_WRITES, SWML_GAP_NOTICES) and
// checks them as Open will, naming the variable.
func (o *openArgs) protocol() error {
	var err error
	if o.peerTimeout == 0 {
		if o.peerTimeout, err = envDuration("SWML_PEER_TIMEOUT"); err != nil {
			return err
		}
	}
	for _, v := range []struct {
		dst  *int
		name string
	}{{&o.qps, "SWML_QPS"}, {&o.threads, "SWML_THREADS"}, {&o.packet, "SWML_PACKET_SIZE"}, {&o.msgSize, "SWML_MSG_SIZE"}} {
		if *v.dst == 0 {
			if *v.dst, _, err = envInt(v.name); err != nil {
				return err
			}
		}
	}
	if o.packet == 0 {
		o.packet = aggregation.DefaultPacketSize
	}
	if err := wire.CheckPacketSize(o.packet); err != nil {
		return inval("swml: SWML_PACKET_SIZE: %v", err)
	}
	if o.msgSize == 0 {
		_, ppm := aggregation.DefaultGeometry(o.workers)
		o.msgSize = o.packet * ppm
	}
	if _, err := wire.MessagePackets(o.msgSize, o.packet); err != nil {
		return inval("swml: SWML_MSG_SIZE: %v", err)
	}
	if w := getenv("SWML_WRITES"); w != "" {
		if o.writes, err = aggregation.ParseWrites(w); err != nil {
			return inval("swml: SWML_WRITES: %v", err)
		}
	}
	if g := getenv("SWML_GAP_NOTICES"); g != "" {
		on, err := strconv.ParseBool(g)
		if err != nil {
			return inval("swml: SWML_GAP_NOTICES %q: give true or false", g)
		}
		o.noGapNotices = !on
	}
	cfg := o.config()
	if o.wire == wire16 {
		cfg.Wire = 16 // the float sessions'
	}
	if err := cfg.Validate(); err != nil {
		var fe *aggregation.FieldError
		if errors.As(err, &fe) && configEnv[fe.Field] != "" {
			return inval("swml: %s: %v is %v: %s", configEnv[fe.Field], fe.Field, fe.Value, fe.Reason)
		}
		return inval("swml: %v", err)
	}
	return nil
}

// config is the part of the sessions' aggregation.Config o sets.
func (o *openArgs) config() aggregation.Config {
	return aggregation.Config{ControllerAddr: o.controller, Rank: o.rank, Workers: o.workers,
		QPs: o.qps, Threads: o.threads, PacketSize: o.packet, PacketsPerMessage: o.msgSize / o.packet, PeerTimeout: o.peerTimeout, Writes: o.writes, NoGapNotices: o.noGapNotices}
}

// open joins the job (join.Join); it returns the session's id.
func open(o openArgs) (int64, error) {
	if err := o.resolve(); err != nil {
		return 0, err
	}
	timeout, err := envDuration("SWML_CONNECT_TIMEOUT")
	if err != nil {
		return 0, err
	}
	if timeout == 0 {
		timeout = defaultConnectTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	cfg := o.config()
	// Non-finite gradients come back NaN on every rank (fp16 loss
	// scaling skips the step) instead of failing the job.
	cfg.PropagateNonFinite = true
	f32ID, i32ID, _ := join.JobSessions(o.sessionID) // resolve checked the id
	w16ID, _ := join.JobSession16(o.sessionID)
	// Every rank opens the sessions in the same order (float32, 16-bit
	// wire, int32): each Open waits for every rank of its session.
	var list []join.Session
	var f32, w16, i32 = -1, -1, -1
	if o.dtypes&1 != 0 && o.wire != wire16 {
		f32 = len(list)
		list = append(list, join.Session{ID: f32ID, DType: wire.Float32, Wire: 32, Name: "float32"})
	}
	if o.dtypes&1 != 0 && o.wire != wire32 && (o.wire == wire16 || o.workers <= wire.MaxWire16Workers) {
		// With SWML_WIRE=auto a switch that sums 32-bit lanes only refuses
		// every rank alike, so every rank sends its 16-bit floats through
		// the float32 session.
		w16 = len(list)
		list = append(list, join.Session{ID: w16ID, DType: wire.Float32, Wire: 16, Optional: o.wire == wireAuto, Name: "16-bit-wire"})
	}
	if o.dtypes&2 != 0 {
		i32 = len(list)
		list = append(list, join.Session{ID: i32ID, DType: wire.Int32, Wire: 32, Name: "int32"})
	}
	j, err := join.Join(ctx, join.Options{
		NIC:        join.NICConfig{Kind: o.nic, Addr: netip.MustParseAddr(o.addr).Unmap(), Device: o.device, BusyPoll: o.busyPoll},
		Controller: o.controller, ConnectTimeout: timeout, TLS: o.tls, RegistrationToken: o.registrationToken,
		Log:     slog.New(slog.NewTextHandler(os.Stderr, nil)).With("rank", o.rank),
		Session: cfg, Sessions: list,
	})
	if err != nil {
		return 0, o.joinError(err)
	}
	s := &session{rank: o.rank, workers: o.workers, job: j, wire: o.wire}
	at := func(i int) *aggregation.Session {
		if i < 0 {
			return nil
		}
		return j.Sessions[i]
	}
	s.f32, s.w16, s.i32 = at(f32), at(w16), at(i32)
	tabMu.Lock()
	id := nextID
	nextID++
	sessions[id] = s
	tabMu.Unlock()
	return id, nil
}

// joinError renders a join.Join error in libswml's terms: the variables
// that change it, and what to do.
func (o openArgs) joinError(err error) error {
	var je *join.JoinError
	if !errors.As(err, &je) {
		return fmt.Errorf("swml: %w", err)
	}
	switch je.Stage {
	case join.StageNIC:
		if errors.Is(je.Err, verbs.ErrNotSupported) {
			return fmt.Errorf("swml: %w; set SWML_NIC=soft, or `make libswml-ibverbs` builds libswml with the ibverbs backend", je.Err)
		}
		return fmt.Errorf("swml: %w", je.Err)
	case join.StageController:
		if errors.Is(je.Err, join.ErrControllerUnreachable) {
			return &abiError{codeTimeout, fmt.Sprintf("swml: rank %d: %v; start `swml-rdma switch` there first (SWML_CONTROLLER sets the address, SWML_CONNECT_TIMEOUT the wait)", o.rank, je.Err)}
		}
		return fmt.Errorf("swml: %w", je.Err)
	}
	return fmt.Errorf("swml: join the %s session %#x at %s as rank %d of %d: %w%s", je.Session.Name, je.Session.ID, o.controller, o.rank, o.workers, je.Err, remedy(je.Err))
}

func lookup(id int64) (*session, error) {
	tabMu.Lock()
	s := sessions[id]
	tabMu.Unlock()
	if s == nil {
		return nil, &abiError{codeHandle, fmt.Sprintf("swml: no open session %d (closed, or never opened)", id)}
	}
	return s, nil
}

// allReduceAsync queues an all-reduce of count elements at ptr. ptr is
// memory the caller owns (not Go's); see main.go "Buffer ownership".
func allReduceAsync(sid int64, ptr unsafe.Pointer, count int64, dtype int) (int64, error) {
	s, err := lookup(sid)
	if err != nil {
		return 0, err
	}
	if ptr == nil || count <= 0 {
		return 0, inval("swml: all-reduce of %d elements at %p: pass a buffer of at least one element", count, ptr)
	}
	if count > 1<<40 {
		return 0, inval("swml: all-reduce of %d elements: too large", count)
	}
	var h *aggregation.Handle
	switch dtype {
	case dtypeFloat32:
		a := s.floatSession(dtype)
		if a == nil {
			return 0, inval("swml: float32 all-reduce on a session opened without float32 (dtypes bit 0)")
		}
		h = a.AllReduceAsync(context.Background(), unsafe.Slice((*float32)(ptr), count))
	case dtypeInt32:
		if s.i32 == nil {
			return 0, inval("swml: int32 all-reduce on a session opened without int32 (dtypes bit 1)")
		}
		h = s.i32.AllReduceInt32Async(context.Background(), unsafe.Slice((*int32)(ptr), count))
	case dtypeBFloat16, dtypeFloat16:
		a := s.floatSession(dtype)
		if a == nil {
			return 0, inval("swml: 16-bit float all-reduce on a session opened without float32 (dtypes bit 0), whose sessions it uses")
		}
		f := quant.BFloat16
		if dtype == dtypeFloat16 {
			f = quant.Float16
		}
		h = a.AllReduce16Async(context.Background(), unsafe.Slice((*uint16)(ptr), count), f)
	default:
		return 0, inval("swml: dtype %d: use SWML_FLOAT32 (0), SWML_INT32 (1), SWML_BFLOAT16 (2) or SWML_FLOAT16 (3)", dtype)
	}
	tabMu.Lock()
	id := nextID
	nextID++
	handles[id] = h
	tabMu.Unlock()
	return id, nil
}

// floatSession is the session that all-reduces a float dtype: the 16-bit
// wire's for bfloat16 and float16 where it is open, and for float32 with
// SWML_WIRE=16; the 32-bit wire's otherwise. nil if neither is open.
func (s *session) floatSession(dtype int) *aggregation.Session {
	if s.w16 != nil && (dtype != dtypeFloat32 || s.wire == wire16) {
		return s.w16
	}
	return s.f32
}

// wireBits is the element width on the wire, 32 or 16, of session sid's
// all-reduces of dtype.
func wireBits(sid int64, dtype int) (int, error) {
	s, err := lookup(sid)
	if err != nil {
		return 0, err
	}
	switch dtype {
	case dtypeInt32:
		if s.i32 == nil {
			return 0, inval("swml: session %d was opened without int32 (dtypes bit 1)", sid)
		}
		return s.i32.Wire(), nil
	case dtypeFloat32, dtypeBFloat16, dtypeFloat16:
		a := s.floatSession(dtype)
		if a == nil {
			return 0, inval("swml: session %d was opened without float32 (dtypes bit 0)", sid)
		}
		return a.Wire(), nil
	}
	return 0, inval("swml: dtype %d: use SWML_FLOAT32 (0), SWML_INT32 (1), SWML_BFLOAT16 (2) or SWML_FLOAT16 (3)", dtype)
}

// wait waits up to timeout seconds (< 0: forever, 0: test) for handle id.
// A done handle is released: waiting on it again is codeHandle.
func wait(id int64, timeout float64) (done bool, err error) {
	tabMu.Lock()
	h := handles[id]
	tabMu.Unlock()
	if h == nil {
		return false, &abiError{codeHandle, fmt.Sprintf("swml: no pending all-reduce %d (already waited for, or never started)", id)}
	}
	switch {
	case timeout < 0:
		<-h.Done()
	case timeout > 0:
		t := time.NewTimer(time.Duration(timeout * float64(time.Second)))
		select {
		case <-h.Done():
		case <-t.C:
		}
		t.Stop()
	}
	done, err = h.Test()
	if done {
		tabMu.Lock()
		delete(handles, id)
		tabMu.Unlock()
	}
	return done, err
}

// closeSession closes (reason "") or aborts session id and releases it.
func closeSession(id int64, reason string) error {
	s, err := lookup(id)
	if err != nil {
		return err
	}
	tabMu.Lock()
	delete(sessions, id)
	tabMu.Unlock()
	if reason != "" {
		return s.job.Abort(reason)
	}
	return s.job.Close()
}
