package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/swml-rdma/swml-rdma/aggregation/control/internal/spans"
	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
)

// fakeProgrammer records the jobs the controller installs.
type fakeProgrammer struct {
	mu      sync.Mutex
	jobs    map[uint32]*wire.Job
	added   []*wire.Job
	removed []uint32
	addErr  error
}

func newFakeProgrammer() *fakeProgrammer { return &fakeProgrammer{jobs: make(map[uint32]*wire.Job)} }

func (f *fakeProgrammer) AddJob(_ context.Context, j *wire.Job) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.addErr != nil {
		return f.addErr
	}
	if _, dup := f.jobs[j.ID]; dup {
		return fmt.Errorf("job %d installed twice", j.ID)
	}
	f.jobs[j.ID] = j
	f.added = append(f.added, j)
	return nil
}

func (f *fakeProgrammer) RemoveJob(_ context.Context, id uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.jobs, id)
	f.removed = append(f.removed, id)
	return nil
}

func (f *fakeProgrammer) snapshot() (added []*wire.Job, removed []uint32, live int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.added), slices.Clone(f.removed), len(f.jobs)
}

type testEnv struct {
	ctl  *Controller
	prog *fakeProgrammer
	reg  *prometheus.Registry
	addr string
}

func startController(t *testing.T, mutate func(*Config)) *testEnv {
	t.Helper()
	env := &testEnv{prog: newFakeProgrammer(), reg: prometheus.NewRegistry()}
	cfg := Config{
		Programmer:     env.prog,
		SwitchMAC:      net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01},
		SwitchIPv4:     netip.MustParseAddr("127.0.0.1"),
		PoolSize:       1024,
		SessionTimeout: 5 * time.Second,
		Registry:       env.reg,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	ctl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- ctl.Serve(lis) }()
	t.Cleanup(func() {
		ctl.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	env.ctl, env.addr = ctl, lis.Addr().String()
	return env
}

func (e *testEnv) client(t *testing.T) *Client {
	t.Helper()
	c, err := Dial(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (e *testEnv) rawConn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// metric reads one sample from the registry.
func (e *testEnv) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

// testReg is rank r of a session: worker r at 127.0.0.(2+r), q QPs,
// 1024-byte messages of 256-byte packets (ppm 4).
func testReg(sid uint32, r, n, q int) Registration {
	reg := Registration{
		SessionID:   sid,
		Rank:        r,
		NumWorkers:  n,
		MAC:         net.HardwareAddr{0x02, 0, 0, 0, 1, byte(r)},
		Addr:        netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + r)}),
		RKey:        0x1000 + uint32(r),
		PacketSize:  256,
		MessageSize: 1024,
		// odd ranks: a userspace NIC (the switch may send GSO)
		IgnoresIPv4ID: r%2 == 1,
	}
	for i := range q {
		reg.QPNs = append(reg.QPNs, uint32(0x100+r*q+i))
		reg.PSNs = append(reg.PSNs, uint32(0x5000+r*q+i))
	}
	return reg
}

// registerAll registers n workers concurrently, each on its own client.
func (e *testEnv) registerAll(t *testing.T, ctx context.Context, sid uint32, n, q int, mutate func(*Registration)) []*Assignment {
	t.Helper()
	out := make([]*Assignment, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		c := e.client(t)
		reg := testReg(sid, r, n, q)
		if mutate != nil {
			mutate(&reg)
		}
		wg.Go(func() { out[r], errs[r] = c.RegisterRDMA(ctx, reg) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}

func endAll(t *testing.T, e *testEnv, as []*Assignment) {
	t.Helper()
	c := e.client(t)
	for _, a := range as {
		if err := c.EndSession(context.Background(), a); err != nil {
			t.Fatalf("end rank %d: %v", a.Rank, err)
		}
	}
}

func TestFourWorkersRegister(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	const n, q = 4, 3
	as := e.registerAll(t, context.Background(), 7, n, q, nil)

	added, _, _ := e.prog.snapshot()
	if len(added) != 1 {
		t.Fatalf("AddJob called %d times, want 1", len(added))
	}
	job := added[0]
	if err := job.Validate(); err != nil {
		t.Fatal(err)
	}
	if job.PacketSize != 256 || job.PoolSlots != q*4 || job.DType != wire.Float32 {
		t.Errorf("job = %+v; want 256-byte packets, %d slots", job, q*4)
	}
	seen := map[uint32]bool{}
	for r, a := range as {
		w := job.Workers[r]
		reg := testReg(7, r, n, q)
		if a.JobID != job.ID || a.Rank != r || a.NumWorkers != n || a.SessionID != 7 {
			t.Errorf("rank %d: assignment %+v", r, a)
		}
		if !slices.Equal(a.SwitchQPNs, w.SwitchQPNs) {
			t.Errorf("rank %d: switch QPNs %v, job says %v", r, a.SwitchQPNs, w.SwitchQPNs)
		}
		for _, qpn := range a.SwitchQPNs {
			if seen[qpn] {
				t.Errorf("switch QPN %#x handed out twice", qpn)
			}
			seen[qpn] = true
		}
		if w.Addr != reg.Addr || w.RKey != reg.RKey || !slices.Equal(w.QPNs, reg.QPNs) || !slices.Equal(w.PSNs, reg.PSNs) || w.MAC.String() != reg.MAC.String() ||
			w.IgnoresIPv4ID != reg.IgnoresIPv4ID {
			t.Errorf("rank %d: job worker %+v does not match registration %+v", r, w, reg)
		}
		if len(a.SwitchPSNs) != q {
			t.Errorf("rank %d: %d switch PSNs", r, len(a.SwitchPSNs))
		}
		for _, psn := range a.SwitchPSNs {
			if psn > 0xFFFFFF {
				t.Errorf("switch PSN %#x has more than 24 bits", psn)
			}
		}
		if a.SwitchAddr != netip.MustParseAddr("127.0.0.1") || a.SwitchMAC.String() != "02:00:00:00:00:01" {
			t.Errorf("switch endpoint %v %v", a.SwitchAddr, a.SwitchMAC)
		}
		if a.PoolBase != job.PoolBase || a.PoolSlots != job.PoolSlots || a.PacketSize != 256 || a.PacketsPerMessage != 4 {
			t.Errorf("rank %d: pool/packets %+v", r, a)
		}
		for i, idx := range a.QPPoolIndices {
			if want := wire.PoolIndex(2*job.PoolBase + uint32(i*4*2)); idx != want {
				t.Errorf("QP %d pool index %d, want %d", i, idx, want)
			}
		}
	}
	if got := e.metric(t, "swml_controller_sessions_active"); got != 1 {
		t.Errorf("sessions_active = %v", got)
	}
	if got := e.metric(t, "swml_controller_pool_slots_used"); got != q*4 {
		t.Errorf("pool_slots_used = %v", got)
	}
	if infos := e.ctl.Jobs(); len(infos) != 1 || infos[0].Job.ID != job.ID {
		t.Errorf("Jobs() = %+v", infos)
	}
	list, err := pb.NewJobClient(e.rawConn(t)).ListJobs(context.Background(), &pb.ListJobsRequest{JobTokens: [][]byte{as[0].token}})
	if err != nil || len(list.GetJobs()) != 1 {
		t.Fatalf("ListJobs: %v, %v", list, err)
	}
	if info := list.GetJobs()[0]; info.GetJobId() != job.ID || info.GetNumWorkers() != n || info.GetNumQps() != q ||
		info.GetPoolBase() != job.PoolBase || info.GetPoolSlots() != job.PoolSlots || len(info.GetSwitchQpns()) != n*q ||
		info.GetSwitchQpns()[q] != job.Workers[1].SwitchQPNs[0] || info.GetMessageSize() != 1024 {
		t.Errorf("ListJobs = %v", info)
	}

	endAll(t, e, as)
	for _, a := range as {
		<-a.Done()
		if a.Err() != nil {
			t.Errorf("rank %d: Err = %v after a clean end", a.Rank, a.Err())
		}
	}
	_, removed, live := e.prog.snapshot()
	if !slices.Equal(removed, []uint32{job.ID}) || live != 0 {
		t.Errorf("removed %v, %d live", removed, live)
	}
	if got := e.metric(t, "swml_controller_pool_slots_free"); got != 1024 {
		t.Errorf("pool_slots_free = %v after teardown", got)
	}
	if got := e.metric(t, "swml_controller_sessions_ended_total", "reason", "end"); got != 1 {
		t.Errorf("sessions_ended_total{reason=end} = %v", got)
	}
}

func TestMissingRankTimesOut(t *testing.T) {
	testutil.NoLeaks(t)
	const timeout = 300 * time.Millisecond
	e := startController(t, func(c *Config) { c.SessionTimeout = timeout })
	var wg sync.WaitGroup
	errs := make([]error, 2)
	start := time.Now()
	for r := range 2 {
		c := e.client(t)
		wg.Go(func() { _, errs[r] = c.RegisterRDMA(context.Background(), testReg(3, r, 4, 1)) })
	}
	wg.Wait()
	if el := time.Since(start); el > testutil.Scale(timeout+2*time.Second) { // only a hang fails
		t.Errorf("took %v, timeout %v", el, timeout)
	}
	for r, err := range errs {
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("rank %d: %v, want DeadlineExceeded", r, err)
		}
		if !strings.Contains(err.Error(), "ranks 2, 3 of 4 never registered within 300ms") {
			t.Errorf("rank %d: %v does not name the missing ranks", r, err)
		}
	}
	if added, _, _ := e.prog.snapshot(); len(added) != 0 {
		t.Errorf("AddJob called for an incomplete session")
	}
	if got := e.metric(t, "swml_controller_registration_timeouts_total"); got != 1 {
		t.Errorf("registration_timeouts_total = %v", got)
	}
	if got := e.metric(t, "swml_controller_sessions_pending"); got != 0 {
		t.Errorf("sessions_pending = %v after the timeouts", got)
	}
}

func TestCancelledWorkerLeaves(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	c := e.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.RegisterRDMA(ctx, testReg(9, 0, 2, 1))
	if status.Code(err) != codes.DeadlineExceeded && status.Code(err) != codes.Canceled {
		t.Fatalf("got %v, want the context's error", err)
	}
	testutil.WaitFor(t, "no session pending", func() bool { return e.metric(t, "swml_controller_sessions_pending") == 0 })
	// Rank 0 left: a new rank 0 is no duplicate, and the session completes.
	as := e.registerAll(t, context.Background(), 9, 2, 1, nil)
	endAll(t, e, as)
}

func TestRegistrationValidation(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.PoolSize = 64 })
	sc := pb.NewSessionClient(e.rawConn(t))
	good := func() *pb.RdmaSessionRequest {
		return &pb.RdmaSessionRequest{SessionId: 1, Rank: 0, NumWorkers: 1, Ipv4: 0x7f000002, PacketSize: pb.PacketSize_MTU_256, MessageSize: 1024, Qpns: []uint32{0x11}, Psns: []uint32{0}}
	}
	tests := []struct {
		name   string
		mutate func(*pb.RdmaSessionRequest)
		code   codes.Code
		want   string
	}{
		{"zero workers", func(r *pb.RdmaSessionRequest) { r.NumWorkers = 0 }, codes.InvalidArgument, "num_workers is 0"},
		{"rank out of range", func(r *pb.RdmaSessionRequest) { r.Rank = 1 }, codes.InvalidArgument, "rank 1 is out of range for 1 workers"},
		{"no QPs", func(r *pb.RdmaSessionRequest) { r.Qpns, r.Psns = nil, nil }, codes.InvalidArgument, "no QPNs"},
		{"PSN count", func(r *pb.RdmaSessionRequest) { r.Psns = nil }, codes.InvalidArgument, "1 QPNs but 0 PSNs"},
		{"wide QPN", func(r *pb.RdmaSessionRequest) { r.Qpns = []uint32{1 << 24} }, codes.InvalidArgument, "more than 24 bits"},
		{"MTU 128", func(r *pb.RdmaSessionRequest) { r.PacketSize = pb.PacketSize_MTU_128 }, codes.InvalidArgument, "packet size 128"},
		{"bad packet bytes", func(r *pb.RdmaSessionRequest) { r.PacketSizeBytes = 300 }, codes.InvalidArgument, "packet size 300"},
		{"zero message", func(r *pb.RdmaSessionRequest) { r.MessageSize = 0 }, codes.InvalidArgument, "message_size is 0"},
		{"message not multiple", func(r *pb.RdmaSessionRequest) { r.MessageSize = 1000 }, codes.InvalidArgument, "message_size 1000 is not a power-of-two multiple of the 256-byte packet size (e.g. 512 or 1024)"},
		{"message not power of two", func(r *pb.RdmaSessionRequest) { r.MessageSize = 768 }, codes.InvalidArgument, "(e.g. 512 or 1024)"},
		{"no address", func(r *pb.RdmaSessionRequest) { r.Ipv4 = 0 }, codes.InvalidArgument, "sent no address"},
		{"short gid", func(r *pb.RdmaSessionRequest) { r.Gid = []byte{1, 2, 3} }, codes.InvalidArgument, "gid has 3 bytes"},
		{"IPv6 without switch IPv6", func(r *pb.RdmaSessionRequest) { r.Gid = netip.MustParseAddr("fd00::2").AsSlice() }, codes.FailedPrecondition, "switch has no IPv6 address"},
		{"unknown dtype", func(r *pb.RdmaSessionRequest) { r.Dtype = 7 }, codes.InvalidArgument, "unknown dtype 7"},
		{"unknown op", func(r *pb.RdmaSessionRequest) { r.Op = 3 }, codes.InvalidArgument, "only sums"},
		{"wide mac", func(r *pb.RdmaSessionRequest) { r.Mac = 1 << 50 }, codes.InvalidArgument, "more than 48 bits"},
		{"wire_bits 8", func(r *pb.RdmaSessionRequest) { r.WireBits = 8 }, codes.InvalidArgument, "wire_bits 8: the wire carries 32-bit or 16-bit elements"},
		{"int32 on the 16-bit wire", func(r *pb.RdmaSessionRequest) { r.WireBits, r.Dtype = 16, pb.DataType_DATA_TYPE_INT32 },
			codes.InvalidArgument, "wire_bits 16 with DATA_TYPE_INT32: int32 needs the 32-bit wire"},
		// A job larger than the whole pool can never start: refused at
		// once, naming the pool's size.
		{"larger than the pool", func(r *pb.RdmaSessionRequest) {
			r.Qpns, r.Psns, r.MessageSize, r.PacketSizeBytes = []uint32{1, 2, 3, 4}, []uint32{0, 0, 0, 0}, 256*32, 256
		},
			codes.InvalidArgument, "needs 128 slots (4 QPs × 32 packets per message) but the switch's pool has 64"},
		{"larger than the pool p4app", func(r *pb.RdmaSessionRequest) {
			r.Qpns, r.Psns, r.MessageSize = []uint32{1, 2, 3, 4}, []uint32{0, 0, 0, 0}, 256*32
		},
			codes.InvalidArgument, "needs 128 slots (4 QPs × 32 packets per message) but the switch's pool has 64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := good()
			tc.mutate(req)
			_, err := sc.RdmaSession(context.Background(), req)
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Errorf("got %v; want %v containing %q", err, tc.code, tc.want)
			}
		})
	}
	// The ext packet_size_bytes carries sizes the enum lacks.
	req := good()
	req.PacketSizeBytes, req.MessageSize = 4096, 4096
	resp, err := sc.RdmaSession(context.Background(), req)
	if err != nil || resp.GetPacketSizeBytes() != 4096 || resp.GetPacketsPerMessage() != 1 {
		t.Fatalf("4096-byte packets: %v, %v", resp, err)
	}
	if _, err := sc.RdmaSession(context.Background(), req); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "already running as job") {
		t.Errorf("re-registering a running session: %v", err)
	}
}

// Ranks that disagree are told at once, both of them, with the exact
// mismatch (the first no longer waits for the session timeout), and the
// error says which parameter (MismatchError).
func TestMismatchedRanks(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.SessionTimeout = time.Minute }) // only a hang reaches it
	tests := []struct {
		name   string
		mutate func(*Registration)
		param  string
		want   string
	}{
		{"workers", func(r *Registration) { r.NumWorkers = 3 }, "num_workers", "rank 1 registered with num_workers 3 but rank 0 with 2"},
		{"packet size", func(r *Registration) { r.PacketSize, r.MessageSize = 512, 2048 }, "packet_size", "packet size 512 but rank 0 with 256"},
		{"message size", func(r *Registration) { r.MessageSize = 2048 }, "message_size", "message_size 2048 but rank 0 with 1024"},
		{"QP count", func(r *Registration) { r.QPNs, r.PSNs = []uint32{1, 2}, []uint32{1, 2} }, "qps", "QP count 2 but rank 0 with 1"},
		{"dtype", func(r *Registration) { r.DType = wire.Int32 }, "dtype", "dtype int32 but rank 0 with float32"},
		{"wire bits", func(r *Registration) { r.WireBits = 16 }, "wire_bits", "wire_bits 16 but rank 0 with 32"},
		{"tensor length", func(r *Registration) { r.TensorBytes = 8192 }, "tensor_bytes", "tensor length 8192 bytes but rank 0 with 4096 bytes"},
		{"tensor length undeclared", func(r *Registration) { r.TensorBytes = 0 }, "tensor_bytes", "tensor length (not declared) but rank 0 with 4096 bytes"},
		{"duplicate rank", func(r *Registration) { r.Rank = 0 }, "rank", "rank 0 registered twice"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sid := uint32(100 + i)
			c := e.client(t)
			first := make(chan error, 1)
			go func() {
				reg := testReg(sid, 0, 2, 1)
				reg.TensorBytes = 4096
				_, err := c.RegisterRDMA(context.Background(), reg)
				first <- err
			}()
			testutil.WaitFor(t, "one session pending", func() bool { return e.metric(t, "swml_controller_sessions_pending") == 1 })
			reg := testReg(sid, 1, 2, 1)
			reg.TensorBytes = 4096
			tc.mutate(&reg)
			_, err := c.RegisterRDMA(context.Background(), reg)
			for who, err := range map[string]error{"second rank": err, "first rank": <-first} {
				var mm *MismatchError
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) ||
					!errors.Is(err, ErrMismatch) || !errors.As(err, &mm) || mm.Param != tc.param || mm.SessionID != sid {
					t.Errorf("%s: got %v (%#v); want InvalidArgument containing %q, a MismatchError for %s", who, err, mm, tc.want, tc.param)
				}
			}
			if got := e.metric(t, "swml_controller_sessions_pending"); got != 0 {
				t.Errorf("%v sessions pending after the mismatch", got)
			}
		})
	}
	if _, _, live := e.prog.snapshot(); live != 0 {
		t.Errorf("%d jobs installed from mismatched sessions", live)
	}
}

func TestConcurrentJobsDisjoint(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	var wg sync.WaitGroup
	var a2, a3 []*Assignment
	wg.Go(func() { a2 = e.registerAll(t, context.Background(), 1, 2, 4, nil) })
	wg.Go(func() { a3 = e.registerAll(t, context.Background(), 2, 3, 2, nil) })
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if a2[0].JobID == a3[0].JobID {
		t.Fatalf("both sessions got job %d", a2[0].JobID)
	}
	p2 := spans.Span{Base: a2[0].PoolBase, Size: a2[0].PoolSlots}
	p3 := spans.Span{Base: a3[0].PoolBase, Size: a3[0].PoolSlots}
	if p2.Size != 16 || p3.Size != 8 || p2.Overlaps(p3) {
		t.Errorf("pool ranges %v and %v overlap or have the wrong size", p2, p3)
	}
	qpns := map[uint32]uint32{}
	for _, as := range [][]*Assignment{a2, a3} {
		for _, a := range as {
			for _, q := range a.SwitchQPNs {
				if other, dup := qpns[q]; dup {
					t.Errorf("switch QPN %#x in jobs %d and %d", q, other, a.JobID)
				}
				qpns[q] = a.JobID
			}
		}
	}
	added, _, _ := e.prog.snapshot()
	for _, j := range added {
		if err := j.Validate(); err != nil {
			t.Error(err)
		}
	}
	endAll(t, e, a2)
	endAll(t, e, a3)
}

func TestTeardownReusesRange(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.PoolSize = 32 })
	first := e.registerAll(t, context.Background(), 1, 2, 4, nil) // 16 slots
	second := e.registerAll(t, context.Background(), 2, 2, 4, nil)
	// The pool is full now.
	c := e.client(t)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Go(func() { _, errs[r] = c.RegisterRDMA(context.Background(), testReg(3, r, 2, 4)) })
	}
	wg.Wait()
	for _, err := range errs {
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "0 of 32 slots are free") {
			t.Errorf("full pool: %v", err)
		}
	}
	// End the first job: only the second rank's EndSession removes it.
	resp, err := pb.NewJobClient(e.rawConn(t)).EndSession(context.Background(), &pb.EndSessionRequest{JobId: first[0].JobID, Rank: 0, JobToken: first[0].token})
	if err != nil || resp.GetEnded() || !slices.Equal(resp.GetPendingRanks(), []uint32{1}) {
		t.Fatalf("first EndSession: %v, %v", resp, err)
	}
	first[0].cancel() // what Client.EndSession does after the RPC
	if err := c.EndSession(context.Background(), first[1]); err != nil {
		t.Fatal(err)
	}
	_, removed, _ := e.prog.snapshot()
	if !slices.Contains(removed, first[0].JobID) {
		t.Fatalf("job %d not removed: %v", first[0].JobID, removed)
	}
	third := e.registerAll(t, context.Background(), 3, 2, 4, nil)
	// The pool range is reused; switch QPNs are drawn afresh per job (the
	// chance that 2 random 23-bit QPNs repeat both is 2^-46).
	if third[0].PoolBase != first[0].PoolBase || slices.Equal(third[0].SwitchQPNs, first[0].SwitchQPNs) {
		t.Errorf("new job got pool %d QPNs %v; want the freed pool %d and QPNs other than %v",
			third[0].PoolBase, third[0].SwitchQPNs, first[0].PoolBase, first[0].SwitchQPNs)
	}
	endAll(t, e, second)
	endAll(t, e, third)
}

func TestDeadWorkerAbortsJob(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	clients := []*Client{e.client(t), e.client(t), e.client(t)}
	as := make([]*Assignment, 3)
	var wg sync.WaitGroup
	for r, c := range clients {
		wg.Go(func() {
			var err error
			as[r], err = c.RegisterRDMA(context.Background(), testReg(5, r, 3, 2))
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	start := time.Now()
	clients[2].Close() // rank 2 dies without EndSession
	for _, a := range as[:2] {
		select {
		case <-a.Done():
		case <-time.After(2 * time.Second):
			t.Fatalf("rank %d not told within 2s", a.Rank)
		}
		if err := a.Err(); !errors.Is(err, ErrJobEnded) || !strings.Contains(err.Error(), "rank 2's keep-alive stream closed") {
			t.Errorf("rank %d: Err = %v", a.Rank, err)
		}
	}
	t.Logf("survivors told in %v", time.Since(start))
	testutil.WaitFor(t, "the job's end", func() bool { return len(e.ctl.Jobs()) == 0 })
	if _, removed, live := e.prog.snapshot(); len(removed) != 1 || live != 0 {
		t.Errorf("removed %v, %d live", removed, live)
	}
	if got := e.metric(t, "swml_controller_sessions_ended_total", "reason", "keepalive_lost"); got != 1 {
		t.Errorf("ended{keepalive_lost} = %v", got)
	}
	// The controller keeps serving: a new job on the same session id.
	as = e.registerAll(t, context.Background(), 5, 2, 1, nil)
	endAll(t, e, as)
}

func TestAbort(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	as := e.registerAll(t, context.Background(), 1, 2, 1, nil)
	if err := e.client(t).Abort(context.Background(), as[0], "NaN in the gradients"); err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		<-a.Done()
		if err := a.Err(); !errors.Is(err, ErrJobEnded) || !strings.Contains(err.Error(), "rank 0 aborted the job: NaN in the gradients") {
			t.Errorf("rank %d: %v", a.Rank, err)
		}
	}
}

func TestLivenessTimeout(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.LivenessTimeout = 200 * time.Millisecond })
	e.registerAll(t, context.Background(), 1, 2, 1, func(r *Registration) { r.NoKeepAlive = r.Rank == 1 })
	testutil.WaitFor(t, "the job's end", func() bool { return len(e.ctl.Jobs()) == 0 })
	if got := e.metric(t, "swml_controller_sessions_ended_total", "reason", "liveness_timeout"); got != 1 {
		t.Errorf("ended{liveness_timeout} = %v", got)
	}
}

func TestBarrierAndBroadcast(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	const n, rounds = 16, 5
	clients := make([]*Client, 4)
	for i := range clients {
		clients[i] = e.client(t)
	}
	var arrived [rounds]int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for r := range n {
		c := clients[r%len(clients)]
		wg.Go(func() {
			for round := range rounds {
				mu.Lock()
				arrived[round]++
				mu.Unlock()
				if err := c.Barrier(context.Background(), 1, r, n); err != nil {
					t.Errorf("rank %d round %d: %v", r, round, err)
					return
				}
				mu.Lock()
				if arrived[round] != n {
					t.Errorf("rank %d left barrier %d after %d arrivals", r, round, arrived[round])
				}
				mu.Unlock()
				v, err := c.Broadcast(context.Background(), 1, r, n, 3, uint64(1000*round+r))
				if err != nil || v != uint64(1000*round+3) {
					t.Errorf("rank %d round %d: broadcast %d, %v; want the root's %d", r, round, v, err, 1000*round+3)
					return
				}
			}
		})
	}
	wg.Wait()
	// p4app's Barrier has no rank: count only.
	sy := pb.NewSyncClient(e.rawConn(t))
	wg.Go(func() {
		if _, err := sy.Barrier(context.Background(), &pb.BarrierRequest{NumWorkers: 2}); err != nil {
			t.Error(err)
		}
	})
	if _, err := sy.Barrier(context.Background(), &pb.BarrierRequest{NumWorkers: 2}); err != nil {
		t.Error(err)
	}
	wg.Wait()
}

func TestSyncErrors(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.SessionTimeout = 200 * time.Millisecond })
	c := e.client(t)
	var wg sync.WaitGroup
	var errs [2]error
	for r := range 2 {
		wg.Go(func() { errs[r] = c.Barrier(context.Background(), 4, r, 4) })
	}
	wg.Wait()
	for _, err := range errs {
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "barrier (session 4): 2 of 4 workers arrived within 200ms; ranks 2, 3 of 4 never arrived") {
			t.Errorf("barrier timeout: %v", err)
		}
	}
	if _, err := c.Broadcast(context.Background(), 4, 0, 2, 5, 1); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "root 5 is out of range") {
		t.Errorf("bad root: %v", err)
	}
	if err := c.Barrier(context.Background(), 4, 0, 0); status.Code(err) != codes.InvalidArgument {
		t.Errorf("zero workers: %v", err)
	}
	// A mismatched count fails the generation: the waiting call learns it
	// at once too.
	first := make(chan error, 1)
	go func() { _, err := c.Broadcast(context.Background(), 5, 0, 2, 0, 9); first <- err }()
	testutil.WaitFor(t, "the broadcast of session 5", func() bool {
		e.ctl.mu.Lock()
		defer e.ctl.mu.Unlock()
		return e.ctl.broadcasts[5] != nil
	})
	if _, err := c.Broadcast(context.Background(), 5, 1, 3, 0, 9); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "num_workers 3 but the 1 waiting call(s) say 2") {
		t.Errorf("mismatch: %v", err)
	}
	if err := <-first; status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "num_workers 3 but the 1 waiting call(s) say 2") {
		t.Errorf("waiting broadcast: %v; want the mismatch", err)
	}
	// A lone call times out naming the missing rank.
	if _, err := c.Broadcast(context.Background(), 6, 0, 2, 0, 9); status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "rank 1 of 2 never arrived") {
		t.Errorf("lone broadcast: %v", err)
	}
	if got := e.metric(t, "swml_controller_sync_timeouts_total"); got != 2 {
		t.Errorf("sync_timeouts_total = %v", got)
	}
}

func TestUdpSessionUnimplemented(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	_, err := pb.NewSessionClient(e.rawConn(t)).UdpSession(context.Background(), &pb.UdpSessionRequest{})
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "call RdmaSession") {
		t.Errorf("got %v", err)
	}
}

func TestUnreachableController(t *testing.T) {
	testutil.NoLeaks(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	c, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.RegisterRDMA(context.Background(), testReg(1, 0, 1, 1))
	if !errors.Is(err, ErrUnreachable) || status.Code(err) != codes.Unavailable ||
		!strings.Contains(err.Error(), "controller "+addr+" unreachable (") || strings.Contains(err.Error(), "--") {
		t.Errorf("got %v", err)
	}
}

func TestCloseWakesWaiters(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	running := e.registerAll(t, context.Background(), 1, 1, 1, nil)
	c := e.client(t)
	waiting := make(chan error, 1)
	go func() { _, err := c.RegisterRDMA(context.Background(), testReg(2, 0, 2, 1)); waiting <- err }()
	testutil.WaitFor(t, "one session pending", func() bool { return e.metric(t, "swml_controller_sessions_pending") == 1 })
	e.ctl.Close()
	if err := <-waiting; status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("waiting registration: %v", err)
	}
	<-running[0].Done()
	if err := running[0].Err(); !errors.Is(err, ErrJobEnded) {
		t.Errorf("running job: %v", err)
	}
	if _, removed, live := e.prog.snapshot(); len(removed) != 1 || live != 0 {
		t.Errorf("removed %v, %d live", removed, live)
	}
}

func TestAddJobFailure(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	e.prog.addErr = errors.New("table full")
	_, err := e.client(t).RegisterRDMA(context.Background(), testReg(1, 0, 1, 1))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "table full") {
		t.Errorf("got %v", err)
	}
	if got := e.metric(t, "swml_controller_pool_slots_used"); got != 0 {
		t.Errorf("pool_slots_used = %v after a failed AddJob", got)
	}
}

// A switch that cannot sum the job's element width refuses it with
// wire.ErrElementWidth: every rank gets FAILED_PRECONDITION naming the
// width, and a Client error wrapping the same sentinel.
func TestElementWidthRefused(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	e.prog.addErr = fmt.Errorf("test switch: 16-bit lanes: %w", wire.ErrElementWidth)
	reg := testReg(1, 0, 1, 1)
	reg.WireBits = 16
	_, err := e.client(t).RegisterRDMA(context.Background(), reg)
	if status.Code(err) != codes.FailedPrecondition || !errors.Is(err, wire.ErrElementWidth) ||
		!strings.Contains(err.Error(), "the switch cannot sum 16-bit elements") || !strings.Contains(err.Error(), "test switch") {
		t.Errorf("got %v; want FAILED_PRECONDITION wrapping wire.ErrElementWidth naming the width and the switch", err)
	}
	if got := e.metric(t, "swml_controller_pool_slots_used"); got != 0 {
		t.Errorf("pool_slots_used = %v after a refused width", got)
	}
}

// The registered width reaches the switch (wire.Job.ElementBytes) and
// comes back in every rank's answer; 0 is the 32-bit wire.
func TestWireBits(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	for _, tc := range []struct {
		sid           uint32
		bits          int
		wantBits      int
		wantElemBytes uint8
	}{{41, 0, 32, 4}, {42, 32, 32, 4}, {43, 16, 16, 2}} {
		t.Run(fmt.Sprint(tc.bits), func(t *testing.T) {
			as := e.registerAll(t, context.Background(), tc.sid, 3, 1, func(r *Registration) { r.WireBits = tc.bits })
			defer endAll(t, e, as)
			for _, a := range as {
				if a.WireBits != tc.wantBits {
					t.Errorf("rank %d: WireBits %d, want %d", a.Rank, a.WireBits, tc.wantBits)
				}
			}
			e.prog.mu.Lock()
			j := e.prog.jobs[as[0].JobID]
			e.prog.mu.Unlock()
			if j == nil || j.ElementBytes != tc.wantElemBytes {
				t.Errorf("installed job %+v; want ElementBytes %d", j, tc.wantElemBytes)
			}
			list, err := pb.NewJobClient(e.rawConn(t)).ListJobs(context.Background(), &pb.ListJobsRequest{JobTokens: [][]byte{as[0].token}})
			if err != nil || len(list.GetJobs()) != 1 || list.GetJobs()[0].GetWireBits() != uint32(tc.wantBits) {
				t.Errorf("ListJobs = %v, %v; want the job with wire_bits %d", list, err, tc.wantBits)
			}
		})
	}
}

// The 16-bit wire's headroom holds wire.MaxWire16Workers workers; a
// controller that serves more refuses a larger 16-bit job at once.
func TestWire16WorkerLimit(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.MaxWorkers = 2 * wire.MaxWire16Workers })
	sc := pb.NewSessionClient(e.rawConn(t))
	req := &pb.RdmaSessionRequest{SessionId: 1, NumWorkers: wire.MaxWire16Workers + 1, Ipv4: 0x7f000002, PacketSizeBytes: 256,
		MessageSize: 256, Qpns: []uint32{0x11}, Psns: []uint32{0}, WireBits: 16}
	_, err := sc.RdmaSession(context.Background(), req)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "the 16-bit wire holds at most 16384 workers") {
		t.Errorf("16-bit job of %d workers: %v", wire.MaxWire16Workers+1, err)
	}
}

func TestP4AppQPNs(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, func(c *Config) { c.QPNScheme = QPNP4App })
	as := e.registerAll(t, context.Background(), 1, 2, 3, nil)
	for _, a := range as {
		for i, q := range a.SwitchQPNs {
			if want, _ := wire.P4AppQPN(a.Rank, i); q != want {
				t.Errorf("rank %d QP %d: %#x, want %#x", a.Rank, i, q, want)
			}
		}
	}
	// Worker 127.0.0.2 is busy in job 1: the same address cannot join another.
	_, err := e.client(t).RegisterRDMA(context.Background(), testReg(2, 0, 1, 1))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "already in job") {
		t.Errorf("got %v", err)
	}
	endAll(t, e, as)
	if _, err := New(Config{Programmer: e.prog, SwitchIPv4: netip.MustParseAddr("127.0.0.1"), PoolSize: 8, QPNScheme: QPNP4App}); err != nil {
		t.Fatal(err)
	}
}

func TestIPv6Workers(t *testing.T) {
	testutil.NoLeaks(t)
	// The test dials over IPv4 loopback, so its fd00:: addresses are not
	// the caller's: the operator's flag lets them register.
	e := startController(t, func(c *Config) {
		c.SwitchIPv6 = netip.MustParseAddr("fd00::1")
		c.AllowAddressMismatch = true
	})
	as := e.registerAll(t, context.Background(), 1, 2, 1, func(r *Registration) {
		r.Addr = netip.MustParseAddr(fmt.Sprintf("fd00::%d", 2+r.Rank))
	})
	if as[0].SwitchAddr != netip.MustParseAddr("fd00::1") {
		t.Errorf("switch address %v", as[0].SwitchAddr)
	}
	added, _, _ := e.prog.snapshot()
	if got := added[0].Workers[1].Addr; got != netip.MustParseAddr("fd00::3") {
		t.Errorf("worker 1 address %v", got)
	}
	endAll(t, e, as)
}

func TestNewRejectsBadConfig(t *testing.T) {
	p := newFakeProgrammer()
	v4 := netip.MustParseAddr("127.0.0.1")
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no programmer", Config{SwitchIPv4: v4, PoolSize: 1}, "Programmer is nil"},
		{"no address", Config{Programmer: p, PoolSize: 1}, "switch has no address"},
		{"v6 as v4", Config{Programmer: p, SwitchIPv4: netip.MustParseAddr("::1"), PoolSize: 1}, "not an IPv4 address"},
		{"no pool", Config{Programmer: p, SwitchIPv4: v4}, "PoolSize 0"},
		{"bad mac", Config{Programmer: p, SwitchIPv4: v4, PoolSize: 1, SwitchMAC: net.HardwareAddr{1}}, "not a 48-bit MAC"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v; want %q", err, tc.want)
			}
		})
	}
}

// TestPacketWritesAgreed: one rank whose NIC needs packet writes makes the
// whole job send them (every rank's Assignment says so); a job without such
// a rank does not.
func TestPacketWritesAgreed(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	for _, tc := range []struct {
		name  string
		sid   uint32
		needs int // the rank that needs packet writes; -1: none
	}{{"one rank needs them", 31, 2}, {"no rank needs them", 32, -1}} {
		t.Run(tc.name, func(t *testing.T) {
			as := e.registerAll(t, context.Background(), tc.sid, 3, 1, func(r *Registration) {
				r.NeedsPacketWrites = r.Rank == tc.needs
			})
			defer endAll(t, e, as)
			for _, a := range as {
				if a.PacketWrites != (tc.needs >= 0) {
					t.Errorf("rank %d: PacketWrites %v, want %v", a.Rank, a.PacketWrites, tc.needs >= 0)
				}
			}
		})
	}
}

// A registration under the session id of a running job fails with an
// error wrapping ErrSessionRunning that names the job, so that a front
// end can name its own session id setting.
func TestSessionRunningTyped(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	as := e.registerAll(t, context.Background(), 7, 1, 1, nil)
	_, err := e.client(t).RegisterRDMA(context.Background(), testReg(7, 0, 1, 1))
	if !errors.Is(err, ErrSessionRunning) || status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), fmt.Sprintf("session 7 is already running as job %d", as[0].JobID)) {
		t.Errorf("second registration of session 7: %v; want FAILED_PRECONDITION wrapping ErrSessionRunning naming the job", err)
	}
	endAll(t, e, as)
}

// preWireBitsController answers RdmaSession as a controller without the
// wire_bits field does (it never echoes it) and records EndSession calls.
type preWireBitsController struct {
	pb.UnimplementedSessionServer
	pb.UnimplementedJobServer
	mu     sync.Mutex
	aborts []*pb.EndSessionRequest
}

func (s *preWireBitsController) RdmaSession(_ context.Context, req *pb.RdmaSessionRequest) (*pb.RdmaSessionResponse, error) {
	return &pb.RdmaSessionResponse{SessionId: uint64(req.GetSessionId()), JobId: 9, Ipv4: 0x7f000001, Qpns: []uint32{0x100}, Psns: []uint32{0},
		PacketSizeBytes: req.GetPacketSizeBytes(), PacketsPerMessage: 4, NumWorkers: req.GetNumWorkers(), JobToken: []byte("token")}, nil
}

func (s *preWireBitsController) EndSession(_ context.Context, req *pb.EndSessionRequest) (*pb.EndSessionResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aborts = append(s.aborts, req)
	return &pb.EndSessionResponse{}, nil
}

// A controller that predates wire_bits would program a 32-bit job for a
// 16-bit worker: the Client refuses its answer with wire.ErrElementWidth
// and aborts the job; a 32-bit registration is served as before.
func TestClientRefusesUnechoedWireBits(t *testing.T) {
	testutil.NoLeaks(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	old := &preWireBitsController{}
	pb.RegisterSessionServer(srv, old)
	pb.RegisterJobServer(srv, old)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	c, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	reg := testReg(1, 0, 1, 1)
	reg.NoKeepAlive, reg.WireBits = true, 16
	if _, err := c.RegisterRDMA(context.Background(), reg); !errors.Is(err, wire.ErrElementWidth) ||
		!strings.Contains(err.Error(), "16-bit wire registered, the controller answered 32 bits") {
		t.Errorf("16-bit registration answered without wire_bits: %v; want wire.ErrElementWidth", err)
	}
	old.mu.Lock()
	if len(old.aborts) != 1 || !old.aborts[0].GetAbort() || old.aborts[0].GetJobId() != 9 {
		t.Errorf("EndSession calls %v; want one abort of job 9", old.aborts)
	}
	old.mu.Unlock()
	reg.WireBits = 0
	if a, err := c.RegisterRDMA(context.Background(), reg); err != nil || a.WireBits != 32 {
		t.Errorf("32-bit registration: %+v, %v; want WireBits 32", a, err)
	}
}
