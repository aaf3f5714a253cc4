package control

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
)

// Hostile counts are refused at once, naming the limit, by RdmaSession,
// Barrier and Broadcast: num_workers = 2^32-1 used to make the timeout
// build a list of 4 billion missing ranks (out of memory).
func TestHostileCountsRefused(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.PoolSize = 1 << 20; c.SessionTimeout = time.Minute })
	conn := e.rawConn(t)
	sc, sy := pb.NewSessionClient(conn), pb.NewSyncClient(conn)
	ctx := context.Background()
	for _, n := range []uint32{4294967295, 10_000_000, DefaultMaxWorkers + 1} {
		req := p4appReq(1, 0, 1, 1)
		req.NumWorkers = n
		if _, err := sc.RdmaSession(ctx, req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "at most 256 workers per job") {
			t.Errorf("RdmaSession num_workers %d: %v; want INVALID_ARGUMENT naming the limit", n, err)
		}
		if _, err := sy.Barrier(ctx, &pb.BarrierRequest{NumWorkers: n}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "at most 256 workers per job") {
			t.Errorf("Barrier num_workers %d: %v", n, err)
		}
		if _, err := sy.Broadcast(ctx, &pb.BroadcastRequest{NumWorkers: n}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "at most 256 workers per job") {
			t.Errorf("Broadcast num_workers %d: %v", n, err)
		}
	}
	// 200k QPNs in one registration of a 256-worker job: 51 M QPs a job.
	req := testRawReq(2, 0, 256, 200_000)
	if _, err := sc.RdmaSession(ctx, req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "at most 1048576 QPs per job") {
		t.Errorf("200k QPs × 256 workers: %v", err)
	}
	// More slots than the pool holds: never servable.
	req = testRawReq(3, 0, 1, 1)
	req.MessageSize = 1 << 31
	if _, err := sc.RdmaSession(ctx, req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "the switch's pool has 1048576") {
		t.Errorf("2 GiB message: %v", err)
	}
	if got := e.metric(t, "swml_controller_sessions_pending"); got != 0 {
		t.Errorf("%v sessions pending after refusals", got)
	}
}

// testRawReq is a swml-rdma-style registration of q QPs.
func testRawReq(sid uint32, r, n, q int) *pb.RdmaSessionRequest {
	req := &pb.RdmaSessionRequest{SessionId: sid, Rank: uint32(r), NumWorkers: uint32(n), Ipv4: 0x7f000002 + uint32(r),
		PacketSizeBytes: 256, MessageSize: 256, Qpns: make([]uint32, q), Psns: make([]uint32, q)}
	for i := range q {
		req.Qpns[i] = uint32(0x100 + i)
	}
	return req
}

// With the largest job the switch serves and one rank present, the
// timeouts of RdmaSession and Barrier name the first 16 missing ranks and
// the count, in a message and a log line of bounded size.
func TestMissingRanksBounded(t *testing.T) {
	testutil.NoLeaks(t)
	const n = 65536
	var logs testutil.SyncBuffer
	e := startController(t, func(c *Config) {
		c.MaxWorkers = n
		c.SessionTimeout = 200 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	c := e.client(t)
	_, err := c.RegisterRDMA(context.Background(), testReg(1, 0, n, 1))
	const want = "65535 of 65536 ranks (the first 16: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, …) never registered within 200ms"
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), want) || len(err.Error()) > 400 {
		t.Errorf("registration timeout: %v; want DEADLINE_EXCEEDED containing %q, at most 400 bytes", err, want)
	}
	err = c.Barrier(context.Background(), 2, 5, n)
	const wantSync = "1 of 65536 workers arrived within 200ms; 65535 of 65536 ranks (the first 16: 0, 1, 2, 3, 4, 6, 7,"
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), wantSync) || len(err.Error()) > 400 {
		t.Errorf("barrier timeout: %v; want DEADLINE_EXCEEDED containing %q", err, wantSync)
	}
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if len(line) > 1000 {
			t.Errorf("log line of %d bytes: %.200s…", len(line), line)
		}
	}
	if !strings.Contains(logs.String(), "registration timed out") {
		t.Errorf("no timeout logged:\n%s", logs.String())
	}
}

// The QPs that waiting registrations hold are bounded in total, not only
// the number of sessions: 256 sessions of 200k QPNs each held 2.5 GB.
func TestPendingQPsBounded(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.MaxPendingQPs = 8; c.SessionTimeout = time.Minute })
	c := e.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	waiting := make(chan error, 2)
	for sid := range uint32(2) {
		go func() {
			_, err := c.RegisterRDMA(ctx, testReg(10+sid, 0, 2, 4)) // rank 1 never comes
			waiting <- err
		}()
	}
	testutil.WaitFor(t, "8 pending QPs", func() bool { return e.ctl.pendingQPsNow() == 8 })
	_, err := c.RegisterRDMA(context.Background(), testReg(12, 0, 2, 1))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "already hold 8 QPs and this one brings 1 (the controller holds 8 QPs of waiting registrations)") {
		t.Errorf("ninth pending QP: %v; want RESOURCE_EXHAUSTED naming the limit", err)
	}
	// One job of more QPs than the bound can never wait whole.
	if _, err := c.RegisterRDMA(context.Background(), testReg(13, 0, 3, 3)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "3 workers × 3 QPs: the controller holds at most 8 QPs per job") {
		t.Errorf("9-QP job: %v", err)
	}
	cancel()
	for range 2 {
		if err := <-waiting; status.Code(err) != codes.Canceled {
			t.Errorf("cancelled registration: %v", err)
		}
	}
	testutil.WaitFor(t, "no pending QPs", func() bool { return e.ctl.pendingQPsNow() == 0 })
	as := e.registerAll(t, context.Background(), 12, 2, 4, nil)
	if n := e.ctl.pendingQPsNow(); n != 0 {
		t.Errorf("%d pending QPs counted after the job started", n)
	}
	endAll(t, e, as)
}

func (c *Controller) pendingQPsNow() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pendingQPs
}

// Barrier generations are bounded in number like pending sessions.
func TestSyncGenerationsBounded(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.MaxPendingSessions = 2; c.SessionTimeout = time.Minute })
	c := e.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for sid := range uint32(2) {
		go func() { _ = c.Barrier(ctx, 20+sid, 0, 2) }()
	}
	testutil.WaitFor(t, "two barriers waiting", func() bool {
		e.ctl.mu.Lock()
		defer e.ctl.mu.Unlock()
		return len(e.ctl.barriers) == 2
	})
	if err := c.Barrier(context.Background(), 22, 0, 2); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "2 barriers are already waiting") {
		t.Errorf("third barrier generation: %v; want RESOURCE_EXHAUSTED", err)
	}
	cancel()
	testutil.WaitFor(t, "no barrier waiting", func() bool {
		e.ctl.mu.Lock()
		defer e.ctl.mu.Unlock()
		return len(e.ctl.barriers) == 0
	})
}

// Agree: equal values pass; a different value fails every caller at once
// with the exact mismatch.
func TestAgree(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.SessionTimeout = time.Minute })
	c := e.client(t)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Go(func() { errs[r] = c.Agree(context.Background(), 3, r, 2, "tensor length", 4096) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d, equal lengths: %v", r, err)
		}
	}
	first := make(chan error, 1)
	go func() { first <- c.Agree(context.Background(), 3, 0, 2, "tensor length", 4096) }()
	testutil.WaitFor(t, "rank 0 waiting at barrier 3", func() bool {
		e.ctl.mu.Lock()
		defer e.ctl.mu.Unlock()
		return e.ctl.barriers[3] != nil
	})
	second := c.Agree(context.Background(), 3, 1, 2, "tensor length", 1024)
	for who, err := range map[string]error{"first": <-first, "second": second} {
		var mm *MismatchError
		if !errors.As(err, &mm) || mm.Param != "tensor length" || mm.Value != "1024" || mm.FirstValue != "4096" || mm.Rank != 1 || mm.FirstRank != 0 ||
			!strings.Contains(err.Error(), "rank 1 passed tensor length 1024 but rank 0 passed 4096") {
			t.Errorf("%s caller: %v (%#v); want the mismatch", who, err, mm)
		}
	}
}

// With a registration token, creating or joining a job and the sync
// calls need it (or the operator token).
func TestRegistrationToken(t *testing.T) {
	testutil.NoLeaks(t)
	const tok, op = "registration-token-0123456789", "operator-token-0123456789"
	e := startController(t, func(c *Config) { c.RegistrationToken = tok; c.OperatorToken = op; c.SessionTimeout = time.Minute })
	dial := func(token string) *Client {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if token != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(RegistrationCredentials(token, false)))
		}
		c, err := Dial(e.addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for _, bad := range []struct {
		token string
		want  error
		text  string
	}{
		{"", ErrRegistrationTokenMissing, "requires its registration token and the call carried none"},
		{"wrong-token-0123456789", ErrRegistrationTokenWrong, "the call's token is not this controller's registration token"},
	} {
		c := dial(bad.token)
		_, err := c.RegisterRDMA(context.Background(), testReg(1, 0, 1, 1))
		if status.Code(err) != codes.Unauthenticated || !errors.Is(err, bad.want) || !strings.Contains(err.Error(), bad.text) {
			t.Errorf("RdmaSession with token %q: %v; want UNAUTHENTICATED wrapping %v, saying %q", bad.token, err, bad.want, bad.text)
		}
		if err := c.Barrier(context.Background(), 1, 0, 1); status.Code(err) != codes.Unauthenticated || !errors.Is(err, bad.want) {
			t.Errorf("Barrier with token %q: %v", bad.token, err)
		}
		if _, err := c.Broadcast(context.Background(), 1, 0, 1, 0, 1); status.Code(err) != codes.Unauthenticated || !errors.Is(err, bad.want) {
			t.Errorf("Broadcast with token %q: %v", bad.token, err)
		}
	}
	for _, good := range []string{tok, op} {
		c := dial(good)
		a, err := c.RegisterRDMA(context.Background(), testReg(2, 0, 1, 1))
		if err != nil {
			t.Fatalf("with token %q: %v", good, err)
		}
		if err := c.Barrier(context.Background(), 2, 0, 1); err != nil {
			t.Errorf("Barrier with token %q: %v", good, err)
		}
		if err := c.EndSession(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
}

// One client (a caller address) holds at most MaxClientSlots of the pool;
// another client is not affected.
func TestClientPoolShare(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.PoolSize = 64; c.MaxClientSlots = 16; c.SessionTimeout = time.Minute })
	c := e.client(t)                                           // from 127.0.0.1
	as := e.registerAll(t, context.Background(), 1, 1, 4, nil) // 4 QPs × 4 packets: 16 slots
	if _, err := c.RegisterRDMA(context.Background(), testReg(2, 0, 1, 1)); status.Code(err) != codes.ResourceExhausted ||
		!strings.Contains(err.Error(), "client 127.0.0.1 already holds 16 pool slots and the job needs 4 more; one client may hold 16") {
		t.Errorf("beyond the share: %v; want RESOURCE_EXHAUSTED naming the client and the share", err)
	}
	if _, err := c.RegisterRDMA(context.Background(), testReg(3, 0, 1, 8)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "one client may hold 16 of the pool's 64") {
		t.Errorf("job larger than the share: %v; want INVALID_ARGUMENT", err)
	}
	// Another client (another source address) has its own share.
	other, err := Dial(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 9)}}
		return d.DialContext(ctx, "tcp", addr)
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	b, err := other.RegisterRDMA(context.Background(), testReg(4, 0, 1, 4))
	if err != nil {
		t.Fatalf("another client: %v", err)
	}
	endAll(t, e, as)
	// The first client's slots came back with its job.
	a2, err := c.RegisterRDMA(context.Background(), testReg(2, 0, 1, 1))
	if err != nil {
		t.Fatalf("after its job ended: %v", err)
	}
	endAll(t, e, []*Assignment{a2, b})
	e.ctl.mu.Lock()
	defer e.ctl.mu.Unlock()
	if len(e.ctl.clientSlots) != 0 {
		t.Errorf("slots still charged after every job ended: %v", e.ctl.clientSlots)
	}
}

// p4app workers never end their session; a new p4app job's
// rank 0 ends the p4app jobs in its way, as p4app's controller does, and
// never a job of swml-rdma workers.
func TestP4AppBackToBack(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.PoolSize = 64; c.SessionTimeout = time.Minute })
	sc := pb.NewSessionClient(e.rawConn(t))
	ctx := context.Background()
	// p4appJob registers a 2-rank p4app job as p4app's workers do: rank 0,
	// then rank 1 (its call installs the job).
	p4appJob := func(sid uint32) uint32 {
		t.Helper()
		if _, err := sc.RdmaSession(ctx, p4appReq(sid, 0, 2, 2)); err != nil {
			t.Fatalf("p4app session %d rank 0: %v", sid, err)
		}
		resp, err := sc.RdmaSession(ctx, p4appReq(sid, 1, 2, 2))
		if err != nil || resp.GetPoolBase() != 0 {
			t.Fatalf("p4app session %d rank 1: %v, %v", sid, resp, err)
		}
		return resp.GetJobId()
	}
	first := p4appJob(1)
	// A swml-rdma job beside it (first fit: after the p4app job's [0, 8)).
	swml := e.registerAll(t, ctx, 50, 2, 2, nil)
	if swml[0].PoolBase < 8 {
		t.Fatalf("swml-rdma job at slot %d, inside the p4app job", swml[0].PoolBase)
	}
	// The next p4app job, under another session id and then the same one,
	// starts at once.
	second := p4appJob(2)
	third := p4appJob(2)
	_, removed, _ := e.prog.snapshot()
	if !slicesContainsAll(removed, first, second) || third == second {
		t.Errorf("removed jobs %v; want the old p4app jobs %d and %d removed, job %d new", removed, first, second, third)
	}
	if got := e.metric(t, "swml_controller_sessions_ended_total", "reason", "replaced"); got != 2 {
		t.Errorf("sessions_ended_total{reason=replaced} = %v, want 2", got)
	}
	// The swml-rdma job is untouched.
	select {
	case <-swml[0].Done():
		t.Fatalf("swml-rdma job ended: %v", swml[0].Err())
	default:
	}
	if jobs := e.ctl.Jobs(); len(jobs) != 2 {
		t.Errorf("%d jobs running, want the swml-rdma job and the last p4app job", len(jobs))
	}
	// A p4app job that needs slots a swml-rdma job holds is refused, naming
	// it, and ends nothing.
	big := p4appReq(3, 0, 1, 8) // [0, 32)
	_, err := sc.RdmaSession(ctx, big)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "swml-rdma workers") || !strings.Contains(err.Error(), "never swml-rdma jobs") {
		t.Errorf("p4app job over a swml-rdma job's slots: %v; want RESOURCE_EXHAUSTED naming it", err)
	}
	if jobs := e.ctl.Jobs(); len(jobs) != 2 {
		t.Errorf("%d jobs running after the refusal, want 2", len(jobs))
	}
	endAll(t, e, swml)
}

func slicesContainsAll(s []uint32, vs ...uint32) bool {
	for _, v := range vs {
		found := false
		for _, x := range s {
			found = found || x == v
		}
		if !found {
			return false
		}
	}
	return true
}

// A p4app rank 0 that joins a session another rank opened joins it (it
// replaces only p4app state that is not its own session's), and one that
// registers again (a restarted rank 0) starts the session afresh.
func TestP4AppRankZeroJoinsOrRestarts(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.PoolSize = 64; c.SessionTimeout = time.Minute })
	sc := pb.NewSessionClient(e.rawConn(t))
	ctx := context.Background()
	if _, err := sc.RdmaSession(ctx, p4appReq(1, 1, 2, 2)); err != nil {
		t.Fatalf("rank 1 first: %v", err)
	}
	resp, err := sc.RdmaSession(ctx, p4appReq(1, 0, 2, 2))
	if err != nil || resp.GetJobId() == 0 {
		t.Fatalf("rank 0 joining: %v, %v; want the job started", resp, err)
	}
	// A restarted rank 0 of a new session ends that job and starts over.
	if _, err := sc.RdmaSession(ctx, p4appReq(2, 0, 2, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.RdmaSession(ctx, p4appReq(2, 0, 2, 2)); err != nil {
		t.Fatalf("rank 0 again: %v; want the session restarted", err)
	}
	resp, err = sc.RdmaSession(ctx, p4appReq(2, 1, 2, 2))
	if err != nil || resp.GetJobId() == 0 {
		t.Fatalf("rank 1: %v, %v", resp, err)
	}
	if jobs := e.ctl.Jobs(); len(jobs) != 1 || jobs[0].SessionID != 2 {
		t.Errorf("jobs %+v; want only session 2's", jobs)
	}
}
