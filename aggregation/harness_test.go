package aggregation

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/local"
	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
	"github.com/swml-rdma/swml-rdma/internal/ucstream"
	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// worker is one rank of a test job.
type worker struct {
	dev  verbs.Device
	cli  *control.Client
	sess *Session
}

// job is a set of workers joined to one session.
type job struct {
	workers []*worker
}

// openJob opens n sessions with cfg (Rank, Workers, Device and Controller
// filled in per rank) concurrently.
func openJob(t testing.TB, ctlAddr string, n int, cfg Config, newDev func(rank int) (verbs.Device, error)) *job {
	t.Helper()
	return openJobWith(t, ctlAddr, n, func(int) Config { return cfg }, newDev)
}

// openJobWith is openJob with a configuration per rank.
func openJobWith(t testing.TB, ctlAddr string, n int, cfgOf func(rank int) Config, newDev func(rank int) (verbs.Device, error)) *job {
	t.Helper()
	j := &job{workers: make([]*worker, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		dev, err := newDev(r)
		if err != nil {
			t.Fatalf("rank %d: device: %v", r, err)
		}
		cli, err := dialController(ctlAddr)
		if err != nil {
			t.Fatal(err)
		}
		w := &worker{dev: dev, cli: cli}
		j.workers[r] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfgOf(r)
			c.Rank, c.Workers, c.Device, c.Controller = r, n, dev, cli
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			w.sess, errs[r] = Open(ctx, c)
		}()
	}
	wg.Wait()
	t.Cleanup(func() { j.close(t) })
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Open: %v", r, err)
		}
	}
	return j
}

func (j *job) close(t testing.TB) {
	var wg sync.WaitGroup
	for _, w := range j.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w.sess != nil {
				w.sess.Close()
			}
			w.cli.Close()
			w.dev.Close()
		}()
	}
	wg.Wait()
}

// allReduce runs AllReduce on every worker concurrently, worker r on in[r]
// (in place); it returns each worker's error.
func (j *job) allReduce(ctx context.Context, in [][]float32) []error {
	errs := make([]error, len(j.workers))
	var wg sync.WaitGroup
	for r, w := range j.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = w.sess.AllReduce(ctx, in[r])
		}()
	}
	wg.Wait()
	return errs
}

func (j *job) allReduceInt32(ctx context.Context, in [][]int32) []error {
	errs := make([]error, len(j.workers))
	var wg sync.WaitGroup
	for r, w := range j.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = w.sess.AllReduceInt32(ctx, in[r])
		}()
	}
	wg.Wait()
	return errs
}

func noErrors(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// gradients makes n workers' tensors of length l: messages of different
// magnitudes (so the block exponents differ per message and per worker),
// some all-zero stretches, signs mixed.
func gradients(seed uint64, n, l int) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([][]float32, n)
	for r := range out {
		x := make([]float32, l)
		for i := range x {
			block := i / 97
			mag := math.Ldexp(1, (block*7+r*3)%40-20)
			if (block+r)%11 == 5 {
				continue // zeros
			}
			x[i] = float32((rng.Float64()*2 - 1) * mag)
		}
		out[r] = x
	}
	return out
}

// clone2 copies every worker's tensor (the inputs a call overwrites).
func clone2[T float32 | int32 | uint16](in [][]T) [][]T {
	out := make([][]T, len(in))
	for i, x := range in {
		out[i] = append([]T(nil), x...)
	}
	return out
}

// checkSums checks every worker's result against the float64 sum of the
// inputs, within the quantizer's bound for the message the element is in,
// and that all workers' results are bit-identical.
func checkSums(t testing.TB, in, out [][]float32, msgVals int) {
	t.Helper()
	n := len(in)
	l := len(in[0])
	for lo := 0; lo < l; lo += msgVals {
		hi := min(lo+msgVals, l)
		e := quant.MinExponent
		for r := range n {
			er, err := quant.BlockExponent(in[r][lo:hi])
			if err != nil {
				t.Fatal(err)
			}
			e = max(e, er)
		}
		sc, err := quant.NewScale(n, e)
		if err != nil {
			t.Fatal(err)
		}
		for i := lo; i < hi; i++ {
			var exact, abs float64
			for r := range n {
				exact += float64(in[r][i])
				abs += math.Abs(float64(in[r][i]))
			}
			got := float64(out[0][i])
			if d := math.Abs(got - exact); d > sc.ErrorBound(abs) {
				t.Fatalf("element %d: got %g, exact %g: error %g above bound %g (e=%d)", i, got, exact, d, sc.ErrorBound(abs), e)
			}
			for r := 1; r < n; r++ {
				if math.Float32bits(out[r][i]) != math.Float32bits(out[0][i]) {
					t.Fatalf("element %d: rank %d got %g, rank 0 %g: workers disagree", i, r, out[r][i], out[0][i])
				}
			}
		}
	}
}

func sameBits(t testing.TB, what string, a, b []float32) {
	t.Helper()
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("%s: element %d: %g vs %g", what, i, a[i], b[i])
		}
	}
}

// int32Inputs makes n tensors whose sums wrap in places.
func int32Inputs(seed uint64, n, l int) [][]int32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([][]int32, n)
	for r := range out {
		x := make([]int32, l)
		for i := range x {
			x[i] = int32(rng.Uint32())
			if i%3 == 0 {
				x[i] >>= 20
			}
		}
		out[r] = x
	}
	return out
}

func checkInt32(t testing.TB, in, out [][]int32) {
	t.Helper()
	for i := range in[0] {
		var want int32
		for r := range in {
			want += in[r][i]
		}
		for r := range out {
			if out[r][i] != want {
				t.Fatalf("rank %d element %d: got %d, want %d", r, i, out[r][i], want)
			}
		}
	}
}

func addr4(a, b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{a, b, c, d}) }

// lossBench is the set-up of the loss tests: the real switch and soft NICs
// over an in-memory network whose links apply a deterministic loss pattern
// (softCluster.setLoss), 4 workers with 2 QPs of 16-packet messages, their
// inputs and the loss-free result (rank 0's, from a job at .2–.5) to
// compare lossy runs with, bit for bit. Tests open their lossy jobs at
// other addresses (device(10), device(20)).
type lossBench struct {
	c    *softCluster
	cfg  Config
	in   [][]float32
	want []float32
}

const lossBenchWorkers = 4

func newLossBench(t *testing.T, session uint32, seed uint64, elements int) lossBench {
	t.Helper()
	c := newSoftClusterWith(t, inMemory, byte(session), 0, 0, clusterOpts{qpns: control.QPNP4App})
	cfg := engineConfig(session)
	cfg.PacketsPerMessage = 16
	cfg.QPs = 2
	in := gradients(seed, lossBenchWorkers, elements)
	clean := openJob(t, c.ctlAddr, lossBenchWorkers, cfg, c.device(2))
	want := clone2(in)
	noErrors(t, clean.allReduce(context.Background(), want))
	return lossBench{c: c, cfg: cfg, in: in, want: want[0]}
}

// check runs calls all-reduces on j and compares every rank's result with
// the loss-free one.
func (b lossBench) check(t *testing.T, j *job, calls int, what string) {
	t.Helper()
	for range calls {
		got := clone2(b.in)
		noErrors(t, j.allReduce(context.Background(), got))
		for r := range got {
			sameBits(t, fmt.Sprintf("rank %d %s vs loss-free", r, what), got[r], b.want)
		}
	}
}

// transport is how a test's NICs and switch exchange datagrams: one test,
// two transports (as wireguard-go's genTestPair(tb, realSocket)).
type transport int

const (
	// inMemory: a memlink.Network per cluster; no sockets, no addresses
	// shared with other tests, links configurable (delay, rate, queue,
	// loss), so such tests run in parallel.
	inMemory transport = iota
	// sockets: UDP on loopback, as deployed (GSO/GRO where the kernel has
	// them); each test owns 127.88.<net>.0/24.
	sockets
)

func (tr transport) String() string {
	if tr == inMemory {
		return "memory"
	}
	return "socket"
}

// forTransports runs f as the subtests "memory" (parallel when parallel is
// set) and "socket".
func forTransports(t *testing.T, parallel bool, f func(t *testing.T, tr transport)) {
	for _, tr := range []transport{inMemory, sockets} {
		t.Run(tr.String(), func(t *testing.T) {
			if parallel && tr == inMemory {
				t.Parallel()
			}
			f(t, tr)
		})
	}
}

// softCluster is the real switch and controller (a local.Cluster whose
// workers the test opens itself: openJob, device) over one transport.
type softCluster struct {
	tr      transport
	net     byte
	sw      *swswitch.Switch
	ctl     *control.Controller
	swAddr  netip.Addr
	ctlAddr string
	ingress float64
	egress  float64
	link    func(worker netip.Addr) memlink.LinkConfig // nil: instant links

	// in memory
	mem     *memlink.Network
	mu      sync.Mutex
	results ucstream.Checker // every packet the switch sent, in order
	// setLoss's pattern: ranks by worker address, each stream's position.
	ranks           map[netip.Addr]int
	pos             map[lossStream]*lossPos
	lossIn, lossOut func(rank, qp, k, pkts int) bool
	silent          bool                         // setSilent: the links carry nothing
	seen            map[netip.Addr]bool          // workers whose requests reached the switch's link
	requested       map[netip.Addr]chan struct{} // sawRequest's channels
	// holdFn, when set, is the links' Hold hook (hold) as a test writes
	// it: toSwitch says the direction, rank is the worker's.
	holdFn func(toSwitch bool, rank int, p *rdma.Packet) memlink.HoldVerdict
}

// newSoftCluster starts the switch at 127.88.<net>.1, dropping the given
// fractions of requests and results (over sockets the switch's drop
// simulator, in memory the links to and from each worker), and its
// controller.
func newSoftCluster(t testing.TB, tr transport, net byte, ingressLoss, egressLoss float64) *softCluster {
	return newSoftClusterWith(t, tr, net, ingressLoss, egressLoss, clusterOpts{})
}

// clusterOpts are the in-memory options of a softCluster.
type clusterOpts struct {
	// mem configures the network (its Tap and Seed are the cluster's).
	mem memlink.Config
	// link, when set, is each worker's link to and from the switch (both
	// directions; the cluster's losses and loss pattern are added).
	link func(worker netip.Addr) memlink.LinkConfig
	// qpns is the controller's switch QPN scheme; setLoss needs
	// control.QPNP4App to tell a request's QP index.
	qpns control.QPNScheme
	// cores is the switch's Config.Cores (0: one).
	cores int
}

// newSoftClusterWith is newSoftCluster with options.
func newSoftClusterWith(t testing.TB, tr transport, net byte, ingressLoss, egressLoss float64, o clusterOpts) *softCluster {
	t.Helper()
	c := &softCluster{tr: tr, net: net, swAddr: addr4(127, 88, net, 1), ingress: ingressLoss, egress: egressLoss, link: o.link,
		ranks: map[netip.Addr]int{}, pos: map[lossStream]*lossPos{},
		seen: map[netip.Addr]bool{}, requested: map[netip.Addr]chan struct{}{}}
	sc := swswitch.Config{Addr: c.swAddr, IngressLoss: ingressLoss, EgressLoss: egressLoss, Seed: uint64(net), Cores: o.cores}
	if tr == inMemory {
		mc := o.mem
		sc.IngressLoss, sc.EgressLoss = 0, 0
		mc.Seed = uint64(net)
		mc.Tap = func(src, dst netip.AddrPort, pkt []byte) {
			c.mu.Lock()
			defer c.mu.Unlock()
			switch {
			case src.Addr() == c.swAddr:
				c.results.Observe(dst.Addr(), pkt)
			case dst.Addr() == c.swAddr && !c.seen[src.Addr()]:
				c.seen[src.Addr()] = true
				if ch := c.requested[src.Addr()]; ch != nil {
					close(ch)
				}
			}
		}
		mem, err := memlink.New(mc)
		if err != nil {
			t.Fatal(err)
		}
		c.mem = mem
		if sc.Endpoint, err = mem.Listen(netip.AddrPortFrom(c.swAddr, 0)); err != nil {
			t.Fatal(err)
		}
	}
	lc := local.Config{
		Switch:     sc,
		Controller: control.Config{SessionTimeout: 20 * time.Second, AllowAddressMismatch: true, QPNScheme: o.qpns},
	}
	var lis *bufconn.Listener
	if tr == inMemory {
		// No socket at all: the cluster can run in a testing/synctest
		// bubble (inBubble).
		lis = bufconn.Listen(1 << 20)
		lc.ControllerListener = lis
	}
	cl, err := local.Start(context.Background(), lc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	c.sw, c.ctl, c.ctlAddr = cl.Switch, cl.Controller, cl.ControllerAddr
	if lis != nil {
		c.ctlAddr = memController(t, lis)
	}
	return c
}

// memControllers are the in-memory listeners of the in-memory clusters'
// controllers (and of their proxies: newControllerProxy), by the name a
// test dials (dialController).
var (
	memControllers   sync.Map // name → *bufconn.Listener
	memControllerSeq atomic.Uint64
)

// memController names lis for dialController until the test ends.
func memController(t testing.TB, lis *bufconn.Listener) string {
	name := fmt.Sprintf("memory-controller-%d", memControllerSeq.Add(1))
	memControllers.Store(name, lis)
	t.Cleanup(func() { memControllers.Delete(name) })
	return name
}

// dialController is a client of the controller at addr: over its
// in-memory listener when memController named one, else over TCP.
func dialController(addr string) (*control.Client, error) {
	v, ok := memControllers.Load(addr)
	if !ok {
		return control.Dial(addr)
	}
	lis := v.(*bufconn.Listener)
	return control.Dial("passthrough:///"+addr,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// inBubble runs f inside a testing/synctest bubble over an in-memory
// cluster, whose links, NICs, switch and controller then run on the
// bubble's virtual clock: a timer the test waits for (a PeerTimeout, a
// context's deadline) fires as soon as every goroutine waits, instead of
// after its real duration. Over sockets f runs as it is: a goroutine
// blocked in the kernel is not durably blocked, and would stop the clock
// for good (docs/sim.md). Tests that measure how the engine behaves on a
// loaded host's real clock stay out of bubbles.
func inBubble(t *testing.T, tr transport, f func(t *testing.T)) {
	t.Helper()
	if tr != inMemory {
		f(t)
		return
	}
	synctest.Test(t, f)
}

// device gives rank r of a job the NIC at 127.88.<net>.<first+r>.
func (c *softCluster) device(first int) func(int) (verbs.Device, error) {
	return func(r int) (verbs.Device, error) {
		a := addr4(127, 88, c.net, byte(first+r))
		if c.tr == sockets {
			return soft.Open(soft.Config{Addr: a})
		}
		var lc memlink.LinkConfig
		if c.link != nil {
			lc = c.link(a)
		}
		up, down := lc, lc
		up.Loss, down.Loss = c.ingress, c.egress
		up.Drop, down.Drop = c.drop, c.drop
		up.Hold, down.Hold = c.hold, c.hold
		c.mu.Lock()
		c.ranks[a] = r
		c.mu.Unlock()
		if err := c.mem.SetLink(a, c.swAddr, up); err != nil {
			return nil, err
		}
		if err := c.mem.SetLink(c.swAddr, a, down); err != nil {
			return nil, err
		}
		ep, err := c.mem.Listen(netip.AddrPortFrom(a, 0))
		if err != nil {
			return nil, err
		}
		return soft.Open(soft.Config{Endpoint: ep})
	}
}

// lossStream is one direction of one QP's packets on the in-memory wire.
type lossStream struct {
	src, dst netip.Addr
	qpn      uint32
}

// lossPos is where a stream stands: packet k of a pkts-packet message.
type lossPos struct{ k, pkts int }

// setLoss installs a deterministic loss pattern on an in-memory cluster's
// links (nil: none): in says whether packet k of a pkts-packet request from
// rank on QP index qp is lost before the switch sees it, out whether packet
// k of a pkts-packet result to rank on QP index qp is lost after the switch
// sent it. A request's QP index comes from its switch QPN (the cluster must
// use control.QPNP4App), a result's from the worker QPN (a soft NIC
// numbers a fresh device's QPs from 17, in the order the session creates
// them). Positions count every packet, lost or not.
func (c *softCluster) setLoss(in, out func(rank, qp, k, pkts int) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lossIn, c.lossOut = in, out
}

// drop is the links' Drop hook: setLoss's pattern. It runs under the
// network's lock, so packets come one at a time in send order.
func (c *softCluster) drop(src, dst netip.AddrPort, b []byte) bool {
	var p rdma.Packet
	if p.Parse(b) != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.silent {
		return true
	}
	key := lossStream{src.Addr(), dst.Addr(), p.BTH.DestQP()}
	pos := c.pos[key]
	if pos == nil {
		pos = &lossPos{}
		c.pos[key] = pos
	}
	op := p.BTH.Opcode()
	switch {
	case op.IsFirst() && op.IsLast():
		*pos = lossPos{0, 1}
	case op.IsFirst():
		*pos = lossPos{0, max(1, int(p.RETH.DMALen())/max(1, len(p.Payload)))}
	default:
		pos.k++
	}
	if src.Addr() == c.swAddr {
		r, ok := c.ranks[dst.Addr()]
		qp := int(p.BTH.DestQP()) - 17
		return ok && c.lossOut != nil && qp >= 0 && c.lossOut(r, qp, pos.k, pos.pkts)
	}
	r, qp, ok := wire.P4AppQPNDecode(p.BTH.DestQP())
	return ok && c.lossIn != nil && c.lossIn(r, qp, pos.k, pos.pkts)
}

// setSilent makes an in-memory cluster's links carry nothing (true) or
// carry again (false): the data path of a switch that died.
func (c *softCluster) setSilent(silent bool) {
	c.mu.Lock()
	c.silent = silent
	c.mu.Unlock()
}

// sawRequest returns a channel that is closed once the switch's link has
// carried a request from the worker at a (at once if it has).
func (c *softCluster) sawRequest(a netip.Addr) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.requested[a]
	if ch == nil {
		ch = make(chan struct{})
		c.requested[a] = ch
		if c.seen[a] {
			close(ch)
		}
	}
	return ch
}

// waitCalls waits until an in-memory cluster's switch has been sent a
// request by each of ranks of j: their calls have started and wait for
// results.
func (c *softCluster) waitCalls(t testing.TB, j *job, ranks ...int) {
	t.Helper()
	timeout := time.After(testutil.Scale(10 * time.Second))
	for _, r := range ranks {
		select {
		case <-c.sawRequest(j.workers[r].dev.Addr()):
		case <-timeout:
			t.Fatalf("rank %d sent nothing: its AllReduce did not start", r)
		}
	}
}

// interleaving makes two workers' request packets interleave at the
// switch as they can on a wire, once, deterministically: from packet from
// of holdRank's first multi-packet request on, everything holdRank sends
// is held back (memlink's Hold); when triggerRank resends a message (a
// request to a buffer, rkey and address, it wrote before), the held packets reach
// the switch right after that resend's first packet, before the rest.
type interleaving struct {
	holdRank, from, triggerRank int

	k             int // holdRank's packet within its message
	holding, done bool
	sent          map[remoteBuf]bool // triggerRank's requests' buffers
}

// remoteBuf is where a request writes: its RETH's rkey and address.
type remoteBuf struct {
	rkey uint32
	va   uint64
}

// setInterleave installs il on an in-memory cluster.
func (c *softCluster) setInterleave(il *interleaving) {
	il.sent = map[remoteBuf]bool{}
	c.setHold(il.verdict)
}

// setHold installs f as the links' Hold hook (nil: none).
func (c *softCluster) setHold(f func(toSwitch bool, rank int, p *rdma.Packet) memlink.HoldVerdict) {
	c.mu.Lock()
	c.holdFn = f
	c.mu.Unlock()
}

// hold is the links' Hold hook: setHold's function, given the packet and
// its worker's rank. It runs under the network's lock, in send order.
func (c *softCluster) hold(src, dst netip.AddrPort, b []byte) memlink.HoldVerdict {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holdFn == nil {
		return memlink.Pass
	}
	var p rdma.Packet
	if p.Parse(b) != nil {
		return memlink.Pass
	}
	toSwitch := dst.Addr() == c.swAddr
	worker := dst.Addr()
	if toSwitch {
		worker = src.Addr()
	}
	r, ok := c.ranks[worker]
	if !ok {
		return memlink.Pass
	}
	return c.holdFn(toSwitch, r, &p)
}

// verdict is the interleaving's Hold verdict on a packet.
func (il *interleaving) verdict(toSwitch bool, r int, p *rdma.Packet) memlink.HoldVerdict {
	if il.done || !toSwitch {
		return memlink.Pass
	}
	op := p.BTH.Opcode()
	switch {
	case r == il.holdRank:
		if op.IsFirst() {
			il.k = 0
		} else {
			il.k++
		}
		if il.holding || (il.k >= il.from && !(op.IsFirst() && op.IsLast())) {
			il.holding = true
			return memlink.HoldBack
		}
	case r == il.triggerRank && op.IsFirst():
		buf := remoteBuf{p.RETH.RKey(), p.RETH.VA()}
		if il.sent[buf] && il.holding {
			il.done = true
			return memlink.Release
		}
		il.sent[buf] = true
	}
	return memlink.Pass
}

// lost is the number of requests and results dropped on purpose so far.
func (c *softCluster) lost() (requests, results uint64) {
	st := c.sw.Stats()
	requests, results = st.Drops(switchmodel.DropIngressLoss), st.Drops(switchmodel.DropEgressLoss)
	if c.tr == inMemory {
		up, down := c.linkStats()
		requests += up.Lost
		results += down.Lost
	}
	return requests, results
}

// linkStats sums the in-memory links of all workers, to the switch (up)
// and from it (down).
func (c *softCluster) linkStats() (up, down memlink.LinkStats) {
	add := func(s *memlink.LinkStats, x memlink.LinkStats) {
		s.Packets += x.Packets
		s.Bytes += x.Bytes
		s.Delivered += x.Delivered
		s.Lost += x.Lost
		s.QueueDrops += x.QueueDrops
		s.Overflow += x.Overflow
		s.NoEndpoint += x.NoEndpoint
		s.TooBig += x.TooBig
		s.MaxQueue = max(s.MaxQueue, x.MaxQueue)
	}
	for h := 2; h < 256; h++ {
		a := addr4(127, 88, c.net, byte(h))
		add(&up, c.mem.LinkStats(a, c.swAddr))
		add(&down, c.mem.LinkStats(c.swAddr, a))
	}
	return up, down
}

// streamBreaks returns the breaks in the switch's result streams seen so
// far (in memory; none is observed over sockets).
func (c *softCluster) streamBreaks() (packets int, breaks []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.results.Packets, append([]string(nil), c.results.Breaks...)
}
