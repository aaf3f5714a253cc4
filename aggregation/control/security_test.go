package control

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
)

const testOperatorToken = "operator-secret-0123456789abcdef"

// A second client without the job's token can neither end, abort, attach
// to, nor list the job; the job keeps running and its ranks end it cleanly.
func TestJobTokenGuardsJob(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	as := e.registerAll(t, context.Background(), 1, 2, 2, nil)
	if len(as[0].token) != jobTokenSize || !tokenEqual(as[0].token, as[1].token) {
		t.Fatalf("job tokens %x, %x: want one %d-byte token for every rank", as[0].token, as[1].token, jobTokenSize)
	}
	other := e.registerAll(t, context.Background(), 2, 1, 1, func(r *Registration) { r.Addr = netip.MustParseAddr("127.0.0.9") })
	if tokenEqual(other[0].token, as[0].token) {
		t.Fatal("two jobs got the same token")
	}
	wrong := make([]byte, jobTokenSize)
	jobs := pb.NewJobClient(e.rawConn(t)) // the second client: no token
	ctx := context.Background()
	for name, tok := range map[string][]byte{"no token": nil, "zero token": wrong, "other job's token": other[0].token} {
		t.Run(name, func(t *testing.T) {
			_, err := jobs.EndSession(ctx, &pb.EndSessionRequest{JobId: as[0].JobID, Rank: 0, Abort: true, Reason: "attacker", JobToken: tok})
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "job_token") {
				t.Errorf("abort: %v; want PERMISSION_DENIED naming job_token", err)
			}
			_, err = jobs.EndSession(ctx, &pb.EndSessionRequest{JobId: as[0].JobID, Rank: 1, JobToken: tok})
			if status.Code(err) != codes.PermissionDenied {
				t.Errorf("end: %v; want PERMISSION_DENIED", err)
			}
			stream, err := jobs.KeepAlive(ctx, &pb.KeepAliveRequest{JobId: as[0].JobID, Rank: 0, JobToken: tok})
			if err == nil {
				_, err = stream.Recv()
			}
			if status.Code(err) != codes.PermissionDenied {
				t.Errorf("keep-alive: %v; want PERMISSION_DENIED", err)
			}
			list, err := jobs.ListJobs(ctx, &pb.ListJobsRequest{JobTokens: [][]byte{tok}})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range list.GetJobs() {
				if j.GetJobId() == as[0].JobID {
					t.Errorf("ListJobs showed job %d to a caller without its token: %v", j.GetJobId(), j)
				}
			}
		})
	}
	list, err := jobs.ListJobs(ctx, &pb.ListJobsRequest{})
	if err != nil || len(list.GetJobs()) != 0 || list.GetHiddenJobs() != 2 {
		t.Errorf("ListJobs without tokens = %v, %v; want no jobs, 2 hidden", list, err)
	}
	list, err = jobs.ListJobs(ctx, &pb.ListJobsRequest{JobTokens: [][]byte{other[0].token}})
	if err != nil || len(list.GetJobs()) != 1 || list.GetJobs()[0].GetJobId() != other[0].JobID || list.GetHiddenJobs() != 1 {
		t.Errorf("ListJobs with job %d's token = %v, %v; want that job alone, 1 hidden", other[0].JobID, list, err)
	}
	for _, a := range as {
		select {
		case <-a.Done():
			t.Fatalf("rank %d: job ended by a caller without its token: %v", a.Rank, a.Err())
		default:
		}
	}
	if _, _, live := e.prog.snapshot(); live != 2 {
		t.Fatalf("%d jobs on the switch, want 2", live)
	}
	endAll(t, e, as)
	endAll(t, e, other)
	for _, a := range append(as, other...) {
		<-a.Done()
		if a.Err() != nil {
			t.Errorf("rank %d: %v after a clean end", a.Rank, a.Err())
		}
	}
}

// The operator token (authorization: Bearer metadata) lists every job and
// ends one without its job token; a wrong operator token is nobody.
func TestOperatorToken(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.OperatorToken = testOperatorToken })
	as := e.registerAll(t, context.Background(), 1, 2, 1, nil)
	dial := func(token string) pb.JobClient {
		conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(OperatorCredentials(token, false)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pb.NewJobClient(conn)
	}
	ctx := context.Background()
	impostor := dial(testOperatorToken + "x")
	if list, err := impostor.ListJobs(ctx, &pb.ListJobsRequest{}); err != nil || len(list.GetJobs()) != 0 {
		t.Errorf("wrong operator token: ListJobs = %v, %v", list, err)
	}
	if _, err := impostor.EndSession(ctx, &pb.EndSessionRequest{JobId: as[0].JobID, Abort: true}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("wrong operator token: abort = %v", err)
	}
	op := dial(testOperatorToken)
	list, err := op.ListJobs(ctx, &pb.ListJobsRequest{})
	if err != nil || len(list.GetJobs()) != 1 || len(list.GetJobs()[0].GetSwitchQpns()) != 2 || list.GetHiddenJobs() != 0 {
		t.Fatalf("operator ListJobs = %v, %v", list, err)
	}
	if _, err := op.EndSession(ctx, &pb.EndSessionRequest{JobId: as[0].JobID, Abort: true, Reason: "maintenance"}); err != nil {
		t.Fatalf("operator abort: %v", err)
	}
	for _, a := range as {
		<-a.Done()
		if a.Err() == nil || !strings.Contains(a.Err().Error(), "maintenance") {
			t.Errorf("rank %d: Err = %v; want the operator's abort", a.Rank, a.Err())
		}
	}
	// Without TLS, gRPC refuses to send credentials that require it.
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(OperatorCredentials(testOperatorToken, true)))
	if err == nil {
		conn.Close()
		t.Error("grpc.NewClient accepted an operator token that requires TLS over plaintext")
	} else if !strings.Contains(err.Error(), "transport level security") {
		t.Errorf("plaintext with TLS-only operator token: %v", err)
	}
}

// selfSigned is a server certificate for 127.0.0.1 (testutil.WritePKI)
// and a pool of the CA that signed it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	p := testutil.WritePKI(t)
	cert, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(p.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("%s holds no certificate", p.CA)
	}
	return cert, pool
}

// A controller serving TLS runs a job for TLS clients and the operator
// token works over it; a plaintext client gets nowhere.
func TestTLSControlPlane(t *testing.T) {
	testutil.NoLeaks(t)
	cert, pool := selfSigned(t)
	e := startController(t, func(c *Config) {
		c.OperatorToken = testOperatorToken
		c.ServerOptions = append(c.ServerOptions, grpc.Creds(credentials.NewServerTLSFromCert(&cert)))
	})
	creds := credentials.NewClientTLSFromCert(pool, "")
	as := make([]*Assignment, 2)
	errs := make(chan error, 2)
	for r := range 2 {
		c, err := Dial(e.addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			var err error
			as[r], err = c.RegisterRDMA(context.Background(), testReg(1, r, 2, 1))
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("register over TLS: %v", err)
		}
	}
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(creds), grpc.WithPerRPCCredentials(OperatorCredentials(testOperatorToken, true)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	list, err := pb.NewJobClient(conn).ListJobs(context.Background(), &pb.ListJobsRequest{})
	if err != nil || len(list.GetJobs()) != 1 {
		t.Fatalf("operator over TLS: ListJobs = %v, %v", list, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pb.NewJobClient(e.rawConn(t)).ListJobs(ctx, &pb.ListJobsRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext client against a TLS controller: %v; want UNAVAILABLE", err)
	}
	c, err := Dial(e.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, a := range as {
		if err := c.EndSession(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
}

// A worker must register the address it calls from (any loopback address
// when it calls over loopback), unless the operator allows a mismatch.
func TestRegisteredAddressMustMatchPeer(t *testing.T) {
	testutil.NoLeaks(t)
	for _, allow := range []bool{false, true} {
		e := startController(t, func(c *Config) { c.AllowAddressMismatch = allow })
		reg := testReg(1, 0, 1, 1)
		reg.Addr = netip.MustParseAddr("192.0.2.7") // not this caller's (loopback) address
		a, err := e.client(t).RegisterRDMA(context.Background(), reg)
		if !allow {
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "--allow-address-mismatch") ||
				!strings.Contains(err.Error(), "192.0.2.7") || !strings.Contains(err.Error(), "127.0.0.1") {
				t.Errorf("mismatched address: %v; want PERMISSION_DENIED naming both addresses and the flag", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("with AllowAddressMismatch: %v", err)
		}
		endAll(t, e, []*Assignment{a})
	}
}

func TestDuplicateQPNsRefused(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	reg := testReg(1, 0, 1, 3)
	reg.QPNs[2] = reg.QPNs[0]
	_, err := e.client(t).RegisterRDMA(context.Background(), reg)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "QPs 0 and 2 both have QPN 0x100") {
		t.Errorf("duplicate QPN: %v", err)
	}
	if _, _, live := e.prog.snapshot(); live != 0 {
		t.Errorf("%d jobs installed", live)
	}
}

// Sessions beyond MaxPendingSessions are refused with RESOURCE_EXHAUSTED
// until a waiting one leaves.
func TestPendingSessionsBounded(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.MaxPendingSessions = 2 })
	c := e.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	waiting := make(chan error, 2)
	for sid := range uint32(2) {
		go func() {
			_, err := c.RegisterRDMA(ctx, testReg(10+sid, 0, 2, 1)) // rank 1 never comes
			waiting <- err
		}()
	}
	// waitPending waits until the controller holds want waiting sessions.
	waitPending := func(want int, what string) {
		t.Helper()
		testutil.WaitFor(t, fmt.Sprintf("%d sessions pending %s", want, what), func() bool {
			e.ctl.mu.Lock()
			defer e.ctl.mu.Unlock()
			return len(e.ctl.pending) == want
		})
	}
	waitPending(2, "while two registrations wait")
	_, err := c.RegisterRDMA(context.Background(), testReg(12, 0, 2, 1))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "2 sessions are already waiting") {
		t.Errorf("third pending session: %v; want RESOURCE_EXHAUSTED", err)
	}
	cancel()
	for range 2 {
		if err := <-waiting; status.Code(err) != codes.Canceled {
			t.Errorf("cancelled registration: %v", err)
		}
	}
	// With the waiting sessions gone, a new one is accepted. The client
	// sees the cancellation before the controller's handlers do: wait for
	// them to drop their sessions.
	waitPending(0, "after their registrations were cancelled")
	as := e.registerAll(t, context.Background(), 12, 1, 1, nil)
	endAll(t, e, as)
}

// Switch QPNs are random per job, unique, outside the Tofino encoding, and
// a job's switch PSNs are random too.
func TestSwitchQPNsRandomPerJob(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	var psns []uint32
	var prev []uint32
	for sid := range uint32(4) {
		as := e.registerAll(t, context.Background(), sid+1, 2, 4, nil)
		seen := map[uint32]bool{}
		var all []uint32
		for _, a := range as {
			for i, q := range a.SwitchQPNs {
				if q < opaqueQPNLo || q >= opaqueQPNHi {
					t.Errorf("QPN %#x outside [%#x, %#x)", q, opaqueQPNLo, opaqueQPNHi)
				}
				if seen[q] {
					t.Errorf("job %d: QPN %#x handed out twice", a.JobID, q)
				}
				seen[q] = true
				all = append(all, q)
				psns = append(psns, a.SwitchPSNs[i])
			}
		}
		// The same job shape gets other QPNs each time (the chance that 8
		// random 23-bit QPNs repeat is 2^-184).
		if slices.Equal(all, prev) {
			t.Errorf("job %d got the previous job's QPNs %#x", as[0].JobID, all)
		}
		prev = all
		endAll(t, e, as)
	}
	// 32 random 24-bit PSNs: more than 2 equal is a broken generator.
	count := map[uint32]int{}
	for _, p := range psns {
		count[p]++
		if count[p] > 2 {
			t.Errorf("PSN %#x repeated %d times in %d", p, count[p], len(psns))
		}
	}
	if e.ctl.qpnsInUseLen() != 0 {
		t.Errorf("%d QPNs still marked in use after every job ended", e.ctl.qpnsInUseLen())
	}
}

func (c *Controller) qpnsInUseLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.qpnsInUse)
}

// p4appReq is a registration as p4app-switchML's worker sends it: no
// packet_size_bytes, the packet size in the enum.
func p4appReq(sid uint32, r, n, q int) *pb.RdmaSessionRequest {
	req := &pb.RdmaSessionRequest{SessionId: sid, Rank: uint32(r), NumWorkers: uint32(n), Ipv4: 0x7f000002 + uint32(r),
		Rkey: 0x100 + uint32(r), PacketSize: pb.PacketSize_MTU_256, MessageSize: 1024}
	for i := range q {
		req.Qpns = append(req.Qpns, uint32(0x11+i))
		req.Psns = append(req.Psns, uint32(0x11+i)/2)
	}
	return req
}

// A p4app rank is answered before the other ranks register; a session that
// never completes gives back its reserved slots [0, …) and QPNs; the two
// request styles cannot share a session.
func TestP4AppEarlyAnswer(t *testing.T) {
	testutil.NoLeaks(t)
	// The session timeout must outlast the checks before it on a loaded
	// machine; the loop below waits for it.
	e := startController(t, func(c *Config) { c.SessionTimeout = 2 * time.Second; c.PoolSize = 8 })
	sc := pb.NewSessionClient(e.rawConn(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := sc.RdmaSession(ctx, p4appReq(5, 0, 2, 2)) // rank 1 never comes
	if err != nil {
		t.Fatalf("p4app rank 0 alone: %v; want an answer at once", err)
	}
	if len(resp.GetQpns()) != 2 || resp.GetPoolBase() != 0 || resp.GetJobId() != 0 || len(resp.GetJobToken()) != 0 {
		t.Errorf("early answer %v: want 2 QPNs, pool from 0, no job id or token yet", resp)
	}
	// Slots [0, 8) are reserved: another p4app session's rank other than
	// 0 cannot start one (only a rank 0 replaces p4app state, as in
	// p4app), a swml-rdma rank cannot join this session.
	if _, err := sc.RdmaSession(ctx, p4appReq(6, 1, 2, 2)); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "slots [0, 8)") {
		t.Errorf("second p4app session: %v", err)
	}
	ours := p4appReq(5, 1, 2, 2)
	ours.PacketSizeBytes = 256
	if _, err := sc.RdmaSession(ctx, ours); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "p4app-style") {
		t.Errorf("mixed styles: %v", err)
	}
	// The mismatch failed session 5: its reservation is gone, a new
	// p4app job of one rank starts and gets slot 0.
	resp, err = sc.RdmaSession(ctx, p4appReq(7, 0, 1, 2))
	if err != nil || resp.GetJobId() == 0 || resp.GetPoolBase() != 0 {
		t.Errorf("one-rank p4app job: %v, %v", resp, err)
	}
	if n := e.ctl.qpnsInUseLen(); n != 2 {
		t.Errorf("%d switch QPNs in use, want the running job's 2", n)
	}
}
