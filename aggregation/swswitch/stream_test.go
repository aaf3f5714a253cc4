package swswitch

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/internal/ucstream"
	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// simWorker is one worker of streamSim: its socket's queue of request
// datagrams (all its QPs, in the order posted) and, per QP, the round in
// progress and a UC receiver of the results.
type simWorker struct {
	w       *testWorker
	queue   []udp.Msg
	round   []int
	psn     []uint32 // next request PSN per QP
	rx      []ucRx
	rounds  int
	qpIndex map[uint32]int
}

// ucRx is a strict UC responder: a FIRST while a message is open drops both.
type ucRx struct {
	open    bool
	nextPSN uint32
	pkts    int
}

func (sw *simWorker) post(qp int) {
	sw.queue = append(sw.queue, sw.w.message(qp, sw.round[qp], sw.psn[qp])...)
	sw.psn[qp] = (sw.psn[qp] + uint32(sw.w.ppm)) & rdma.PSNMask
}

// deliver runs a result packet through the QP's UC receiver and starts the
// next round when it completes the current one.
func (sw *simWorker) deliver(p *rdma.Packet) {
	qp, ok := sw.qpIndex[p.BTH.DestQP()]
	if !ok {
		return
	}
	r := &sw.rx[qp]
	op, psn := p.BTH.Opcode(), p.BTH.PSN()
	inSeq := psn == r.nextPSN
	r.nextPSN = (psn + 1) & rdma.PSNMask
	switch {
	case op.IsFirst() && r.open:
		r.open = false // IBA: the open message and this FIRST are both dropped
		return
	case op.IsFirst():
		r.open, r.pkts = true, 0
	case !r.open || !inSeq:
		r.open = false
		return
	}
	r.pkts++
	if !op.IsLast() {
		return
	}
	r.open = false
	if r.pkts == sw.w.ppm && int(wire.Imm(p.ImmDt.Imm()).MsgID()) == sw.round[qp] && sw.round[qp] < sw.rounds {
		sw.round[qp]++
		if sw.round[qp] < sw.rounds {
			sw.post(qp)
		}
	}
}

func (sw *simWorker) finished() bool {
	for _, r := range sw.round {
		if r < sw.rounds {
			return false
		}
	}
	return true
}

// TestResultStream runs the switch engine under seeded schedules of four
// workers with two QPs each: the workers' packets reach the switch in every
// interleaving their sockets allow, and workers whose timer fires early
// resend a message the switch is still broadcasting (spurious
// retransmissions, as on a busy host). Nothing is lost, so the emitted
// stream to every worker QP must never leave a message mid-way: a FIRST is
// never followed by another FIRST/ONLY before its LAST (ucstream.Checker). Before the rule
// that a unicast answer waits for an open message (switchmodel.RDMASender)
// the unicast replay's FIRST cut into the broadcast, and the
// strict UC receivers here then never complete.
func TestResultStream(t *testing.T) {
	const workers, qps, ppm, rounds = 4, 2, 4, 12
	for seed := range uint64(40) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			t.Parallel()
			streamSim(t, seed, workers, qps, ppm, rounds)
		})
	}
}

func streamSim(t *testing.T, seed uint64, n, q, ppm, rounds int) {
	local := netip.MustParseAddrPort("127.77.201.1:4791")
	pipe, err := switchmodel.New(switchmodel.Config{PoolSize: 64, MaxPayload: 1024, MaxWorkers: 8})
	if err != nil {
		t.Fatal(err)
	}
	job := makeJob(1, 201, n, q, 0, uint32(q*ppm), 256)
	if err := pipe.AddJob(job); err != nil {
		t.Fatal(err)
	}
	e := newEngine(local, ICRCVerify, pipe, 64)
	e.maxN = n
	rng := rand.New(rand.NewPCG(seed, 24))
	ws := make([]*simWorker, n)
	for r := range ws {
		me := job.Workers[r]
		sw := &simWorker{
			w:     &testWorker{t: t, job: job, rank: r, sw: local, ppm: ppm, lane: job.LaneBytes()},
			round: make([]int, q), psn: make([]uint32, q), rx: make([]ucRx, q), rounds: rounds,
			qpIndex: map[uint32]int{},
		}
		for i, qpn := range me.QPNs {
			sw.qpIndex[qpn] = i
			sw.rx[i].nextPSN = me.PSNs[i]
			sw.psn[i] = uint32(1000 * (r + 1))
			sw.post(i)
		}
		ws[r] = sw
	}
	var check ucstream.Checker
	var pkt rdma.Packet
	resends := 0
	for step := 0; ; step++ {
		if step > 200_000 {
			t.Fatalf("no progress after %d steps (%d resends); stream breaks: %q", step, resends, check.Breaks)
		}
		done := true
		for _, sw := range ws {
			done = done && sw.finished()
		}
		if done {
			break
		}
		sw := ws[rng.IntN(n)]
		if rng.IntN(20) == 0 {
			// This worker's timer fires early on a QP whose round is in
			// progress: the whole message again, with new PSNs.
			if i := rng.IntN(q); sw.round[i] < rounds {
				sw.post(i)
				resends++
			}
			continue
		}
		if len(sw.queue) == 0 {
			continue
		}
		m := sw.queue[0]
		sw.queue = sw.queue[1:]
		e.input(netip.AddrPortFrom(job.Workers[sw.w.rank].Addr, rdma.UDPPort), m.Buf, m.Off, m.N)
		for _, o := range e.schedule() {
			check.Observe(o.Addr.Addr(), o.Bytes())
			if err := pkt.Parse(o.Bytes()); err != nil {
				t.Fatal(err)
			}
			for _, dst := range ws {
				if job.Workers[dst.w.rank].Addr == o.Addr.Addr() {
					dst.deliver(&pkt)
				}
			}
		}
		e.nout = 0
	}
	if check.NumBreaks() > 0 {
		t.Fatalf("%d stream breaks in %d result packets without loss (%d resends), first: %s", check.NumBreaks(), check.Packets, resends, check.Breaks[0])
	}
	if resends == 0 {
		t.Fatal("the schedule resent nothing: the test checks nothing")
	}
}
