package swswitch

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// endToEnd is a job run through a switch by testWorkers.
type endToEnd struct {
	name            string
	net             int
	n, q, ppm       int
	payload         int
	rounds          int
	ingress, egress float64
}

// TestEndToEnd runs each job over both transports: the switch's own socket
// (with its drop simulator) and an in-memory network (lossy links).
func TestEndToEnd(t *testing.T) {
	for _, tc := range []endToEnd{
		{"1 worker", 1, 1, 2, 1, 256, 4, 0, 0},
		{"3 workers 3-packet messages", 2, 3, 2, 3, 1024, 6, 0, 0},
		{"33 workers", 3, 33, 1, 2, 256, 3, 0, 0},
		{"4 KiB packets", 4, 2, 1, 2, 4096, 3, 0, 0},
		{"5% ingress and egress loss", 5, 4, 2, 4, 512, 12, 0.05, 0.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forFabrics(t, tc.ingress, func(t *testing.T, fb fabric) { tc.run(t, fb) })
		})
	}
}

func (tc endToEnd) run(t *testing.T, fb fabric) { tc.runWidth(t, fb, 0) }

// runWidth runs the job with wire.Job.ElementBytes eb.
func (tc endToEnd) runWidth(t *testing.T, fb fabric, eb uint8) {
	reg := prometheus.NewPedanticRegistry()
	sw := fb.newSwitch(t, Config{Addr: addr(tc.net, 1), Model: switchmodel.Config{PoolSize: 256},
		IngressLoss: tc.ingress, EgressLoss: tc.egress, Seed: 42, Registry: reg})
	job := makeJob(7, tc.net, tc.n, tc.q, 16, uint32(tc.q*tc.ppm), tc.payload)
	if eb == 2 {
		job.DType, job.ElementBytes = wire.Float32, eb // int32 needs 32-bit lanes
	}
	if err := sw.AddJob(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	// Without loss nothing may be resent: the workers' timer only
	// guards against a hang, long enough that a loaded host does not
	// fire it (a spurious resend would be answered by a unicast and
	// fail the counters below).
	timeout := testutil.Scale(5 * time.Second)
	if tc.ingress > 0 {
		timeout = 20 * time.Millisecond
	}
	ws := runJob(t, sw, job, tc.ppm, tc.rounds, timeout)
	for _, w := range ws {
		w.close()
		if w.badICRC != 0 {
			t.Errorf("worker %d got %d results with a bad ICRC", w.rank, w.badICRC)
		}
	}
	if tc.ingress == 0 {
		// The counters of a sendmmsg move after the kernel delivered it.
		want := uint64(tc.n * tc.q * tc.ppm * tc.rounds)
		testutil.WaitFor(t, "the switch's results sent", func() bool { return sw.Stats().PacketsOut == want })
	}
	st := settled(t, sw, fb, ws)
	if tc.ingress > 0 {
		if in, out := fb.lost(sw, job); st.Model.Retransmissions == 0 || in == 0 || out == 0 {
			t.Errorf("loss not exercised: %d requests and %d results lost, %+v", in, out, st)
		}
	} else {
		want := uint64(tc.n * tc.q * tc.ppm * tc.rounds)
		if st.Model.Aggregated != want || st.Model.Completed != want/uint64(tc.n) || st.PacketsIn != want || st.PacketsOut != want {
			t.Errorf("counters %+v, want %d aggregated", st, want)
		}
		for r, v := range st.Model.Drops {
			if v != 0 {
				t.Errorf("%d drops for %v", v, switchmodel.DropReason(r))
			}
		}
	}
	if st.SlotsInUse != 0 || st.SlotsAllocated != uint64(tc.q*tc.ppm) || st.Jobs != 1 {
		t.Errorf("slots in use %d, allocated %d, jobs %d", st.SlotsInUse, st.SlotsAllocated, st.Jobs)
	}
	checkMetric(t, reg, "swml_switch_packets_total", "direction", "in", float64(st.PacketsIn))
	checkMetric(t, reg, "swml_switch_aggregated_total", "", "", float64(st.Model.Aggregated))
	checkMetric(t, reg, "swml_switch_drops_total", "reason", "ingress_loss", float64(st.Drops(switchmodel.DropIngressLoss)))
	checkMetric(t, reg, "swml_switch_slots_allocated", "", "", float64(tc.q*tc.ppm))
	checkMetric(t, reg, "swml_switch_cores", "", "", float64(fb.cores))
	checkMetric(t, reg, "swml_switch_datagrams_total", "direction", "in", float64(st.DatagramsIn))
	checkMetric(t, reg, "swml_switch_socket_calls_total", "direction", "out", float64(st.SendCalls))
	checkMetric(t, reg, "swml_switch_busy_polls_total", "outcome", "hit", float64(st.PollHits))
	if st.DatagramsIn == 0 || st.DatagramsIn > st.PacketsIn || st.RecvCalls == 0 || st.RecvCalls > st.DatagramsIn {
		t.Errorf("%d packets in %d datagrams in %d calls: want 1 ≤ calls ≤ datagrams ≤ packets", st.PacketsIn, st.DatagramsIn, st.RecvCalls)
	}
	for i, n := range st.CorePackets {
		checkMetric(t, reg, "swml_switch_core_packets_total", "core", strconv.Itoa(i), float64(n))
	}
}

func checkMetric(t *testing.T, reg *prometheus.Registry, name, label, value string, want float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && !hasLabel(m, label, value) {
				continue
			}
			var got float64
			if m.Counter != nil {
				got = m.Counter.GetValue()
			} else {
				got = m.Gauge.GetValue()
			}
			if got != want {
				t.Errorf("%s{%s=%q} = %v, want %v", name, label, value, got, want)
			}
			return
		}
	}
	t.Errorf("metric %s{%s=%q} missing", name, label, value)
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// TestForgedPackets: packets from an unregistered source or QPN, into
// another job's pool, or with a bad ICRC are dropped, counted, and never
// change any result.
func TestForgedPackets(t *testing.T) {
	const netA, ppm = 10, 2
	sw := newSwitch(t, Config{Addr: addr(netA, 1), Model: switchmodel.Config{PoolSize: 64}})
	a := makeJob(1, netA, 2, 1, 0, ppm, 256)
	b := makeJob(2, netA, 2, 1, 8, ppm, 256)
	for r := range b.Workers { // job B's workers at .20, .21
		b.Workers[r].Addr = addr(netA, 20+r)
	}
	ctx := context.Background()
	for _, j := range []*wire.Job{a, b} {
		if err := sw.AddJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	// A stranger impersonating job A's worker 0 (its QPN) from its own
	// address, sending round 0 with other values.
	stranger := newTestWorker(t, &wire.Job{ID: 1, PacketSize: 256, PoolBase: 0, Workers: []wire.Worker{{
		Addr: addr(netA, 99), QPNs: []uint32{1}, PSNs: []uint32{0}, SwitchQPNs: a.Workers[0].SwitchQPNs}}}, 0, ppm, sw)
	stranger.send(0, 0)
	stranger.job.Workers[0].SwitchQPNs = []uint32{0x777}
	stranger.send(0, 0)
	// Job B's worker 0 writing into job A's pool with its own QPN.
	intruder := newTestWorker(t, &wire.Job{ID: 2, PacketSize: 256, PoolBase: 0, Workers: []wire.Worker{{
		Addr: b.Workers[0].Addr, QPNs: []uint32{1}, PSNs: []uint32{0}, SwitchQPNs: b.Workers[0].SwitchQPNs}}}, 0, ppm, sw)
	// Its PSNs lie just behind the real worker's (which starts at 0): the
	// switch's high-water mark of that QP stays behind the real traffic.
	intruder.psn[0] = rdma.PSNMask - 15
	intruder.send(0, 0)
	// Job A's worker 0 itself with a corrupted ICRC: if it were accepted,
	// its real contribution would then look like a retransmission.
	w0 := newTestWorker(t, a, 0, ppm, sw)
	bad := w0.message(0, 0, 0)
	for _, m := range bad {
		m.Buf[m.Off+m.N-1] ^= 0x55
	}
	if _, err := w0.conn.WriteBatch(bad); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the forged packets dropped", func() bool {
		st := sw.Stats()
		return st.Drops(switchmodel.DropUnknownQP) == 2*ppm && st.Drops(switchmodel.DropPoolRange) == 1 &&
			st.Drops(switchmodel.DropPSN) == ppm-1 && st.Drops(switchmodel.DropICRC) == ppm
	})
	if st := sw.Stats(); st.Model.Aggregated != 0 || st.SlotsInUse != 0 {
		t.Fatalf("forged packets touched slots: %+v", st)
	}
	// Now the real jobs run, concurrently; results are exact.
	w0.close()
	intruder.close()
	done := make(chan struct{})
	go func() { defer close(done); runJob(t, sw, b, ppm, 4, 200*time.Millisecond) }()
	runJob(t, sw, a, ppm, 4, 200*time.Millisecond)
	<-done
	st := sw.Stats()
	if st.Model.Retransmissions != 0 || st.Drops(switchmodel.DropICRC) != ppm {
		t.Errorf("stats after the jobs: %+v", st)
	}
}

// settled waits until the switch has read every request the fabric
// delivered to it — every packet the workers sent, but those the links
// lost — and processed each (the workers have stopped; a late resend may
// still be on its way through the cores' queues), and returns its counters.
func settled(t testing.TB, sw *Switch, fb fabric, ws []*testWorker) Stats {
	t.Helper()
	var st Stats
	testutil.WaitFor(t, "the switch processing every request delivered to it", func() bool {
		st = sw.Stats()
		return st.PacketsIn == fb.delivered(sw, ws) && st.Model.Packets+st.Drops(switchmodel.DropIngressLoss) == st.PacketsIn
	})
	return st
}

// TestTwoJobs: jobs of different sizes and packet sizes run concurrently
// on one switch; removing one leaves the other running.
func TestTwoJobs(t *testing.T) {
	forFabrics(t, 0, func(t *testing.T, fb fabric) {
		const net = 11
		sw := fb.newSwitch(t, Config{Addr: addr(net, 1), Model: switchmodel.Config{PoolSize: 64}})
		a := makeJob(1, net, 2, 2, 0, 2*2, 1024)
		b := makeJob(2, net, 3, 1, 4, 3, 256)
		for r := range b.Workers {
			b.Workers[r].Addr = addr(net, 30+r)
		}
		ctx := context.Background()
		for _, j := range []*wire.Job{a, b} {
			if err := sw.AddJob(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan struct{})
		go func() { defer close(done); runJob(t, sw, b, 3, 8, 200*time.Millisecond) }()
		runJob(t, sw, a, 2, 8, 200*time.Millisecond)
		<-done
		if err := sw.RemoveJob(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if err := sw.RemoveJob(ctx, 2); err != nil {
			t.Fatal(err)
		}
		// A new job takes B's pool range and QPNs.
		c := makeJob(2, net, 2, 1, 4, 2, 512)
		for r := range c.Workers {
			c.Workers[r].Addr = addr(net, 40+r)
		}
		if err := sw.AddJob(ctx, c); err != nil {
			t.Fatal(err)
		}
		runJob(t, sw, c, 2, 3, 200*time.Millisecond)
		if st := sw.Stats(); st.Jobs != 2 || st.Model.Drops != [switchmodel.NumDropReasons]uint64{} {
			t.Errorf("stats %+v", st)
		}
	})
}

func TestAddJobErrors(t *testing.T) {
	const net = 12
	sw := newSwitch(t, Config{Addr: addr(net, 1), Model: switchmodel.Config{PoolSize: 16}})
	ctx := context.Background()
	v6 := makeJob(1, net, 1, 1, 0, 1, 256)
	v6.Workers[0].Addr = netip.AddrFrom16(addr(net, 2).As16())
	for _, tc := range []struct {
		name string
		job  *wire.Job
		want error
	}{
		{"nil", nil, wire.ErrBadJob},
		{"IPv6 worker on an IPv4 switch", func() *wire.Job {
			j := makeJob(1, net, 1, 1, 0, 1, 256)
			j.Workers[0].Addr = netip.MustParseAddr("fd00::2")
			return j
		}(), wire.ErrBadJob},
		{"pool beyond the switch", makeJob(1, net, 1, 1, 10, 10, 256), switchmodel.ErrCapacity},
	} {
		if err := sw.AddJob(ctx, tc.job); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// An IPv4-mapped IPv6 worker address is the IPv4 worker.
	if err := sw.AddJob(ctx, v6); err != nil {
		t.Errorf("IPv4-mapped worker: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := sw.AddJob(cctx, makeJob(2, net, 1, 1, 4, 1, 256)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "own IP address") {
		t.Errorf("New without address: %v", err)
	}
	if _, err := New(Config{Addr: addr(net, 1)}); err == nil {
		t.Error("a second switch on the same address")
	}
}

func TestCloseNoLeak(t *testing.T) {
	goroutines := testutil.SnapshotGoroutines()
	reg := prometheus.NewRegistry()
	var pcap bytes.Buffer
	capt, err := udp.NewCapture(&pcap)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := New(Config{Addr: addr(13, 1), Registry: reg, Capture: capt, Model: switchmodel.Config{PoolSize: 16}})
	if err != nil {
		t.Fatal(err)
	}
	job := makeJob(1, 13, 2, 1, 0, 1, 256)
	if err := sw.AddJob(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	ws := runJob(t, sw, job, 1, 2, 200*time.Millisecond)
	for _, w := range ws {
		w.close()
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := capt.Close(); err != nil {
		t.Fatal(err)
	}
	// 2 workers × 2 rounds in, 2 results × 2 rounds out.
	if got := capt.Packets(); got != 8 {
		t.Errorf("captured %d packets, want 8", got)
	}
	// The registry was handed back: a new switch can register on it.
	sw2 := newSwitch(t, Config{Addr: addr(13, 1), Registry: reg})
	sw2.Close()
	goroutines.Check(t)
}

// gsoRecorder is an in-memory endpoint that records AllowGSO calls.
type gsoRecorder struct {
	udp.Endpoint
	mu      sync.Mutex
	allowed map[netip.Addr]bool
}

func (g *gsoRecorder) AllowGSO(peer netip.Addr, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.allowed[peer] = ok
}

// TestAddJobDeclaresGSOPeers: a job's workers whose NIC ignores the IPv4
// Identification are declared to the endpoint as GSO peers, the others
// taken back, so a later rxe worker on a once-userspace address gets plain
// datagrams.
func TestAddJobDeclaresGSOPeers(t *testing.T) {
	const net = 13
	n, err := memlink.New(memlink.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := n.Listen(netip.AddrPortFrom(addr(net, 1), rdma.UDPPort))
	if err != nil {
		t.Fatal(err)
	}
	rec := &gsoRecorder{Endpoint: ep, allowed: map[netip.Addr]bool{}}
	sw := newSwitch(t, Config{Addr: addr(net, 1), Endpoint: rec, Model: switchmodel.Config{PoolSize: 16}})
	job := makeJob(1, net, 3, 1, 0, 4, 256)
	job.Workers[1].IgnoresIPv4ID = true
	if err := sw.AddJob(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	want := map[netip.Addr]bool{addr(net, 2): false, addr(net, 3): true, addr(net, 4): false}
	if !maps.Equal(rec.allowed, want) {
		t.Fatalf("AllowGSO calls %v, want %v", rec.allowed, want)
	}
	sw.RemoveJob(context.Background(), 1)
	job = makeJob(2, net, 2, 1, 4, 4, 256) // rank 1 at .3 is now a kernel NIC
	if err := sw.AddJob(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if rec.allowed[addr(net, 3)] {
		t.Fatal("a worker without IgnoresIPv4ID stays a GSO peer")
	}
}
