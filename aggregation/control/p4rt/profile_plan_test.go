package p4rt

import (
	"math/rand"
	"testing"
)

// This file transcribes the 1024 B profile's pass plan (p4/rdma_switch
// with -DPAYLOAD_1024: IngressParser's bridged states, Ingress' bridged
// branch, Processor, NextStep's PAYLOAD_1024 apply, the deparser's
// "emitted headers, then the unparsed tail") line by line into Go, and
// runs requests of several workers for many slots through four pipes whose
// ports are FIFO queues served in random order — the one ordering property
// the plan relies on (a Tofino port's queue is FIFO; nothing orders two
// different ports). Like TestReceiverRulesMatchModel it checks the rules,
// not the compiled program: no Tofino compiler is available here.

const (
	planPassRequest = 0 // PASS_REQUEST
	planPassHarvest = 1 // PASS_HARVEST
	planPassConsume = 2 // PASS_CONSUME
	planPassInsert  = 3 // PASS_HARVEST_INSERT

	planDecisionDrop      = 0
	planDecisionConsume   = 1
	planDecisionBroadcast = 2
	planDecisionUnicast   = 3

	planLanes = 64 // one 256 B window
)

type planBridged struct {
	pass, decision, chunk      int
	firstContribution, retrans bool
	poolIndex                  uint32
	ingressPort, worker        int
}

type planPacket struct {
	bridged *planBridged
	rank    int
	pool    uint32
	data    []uint32 // after the headers: windows still in the packet
	passes  int
}

type planResult struct {
	port, rank int
	decision   int
	pool       uint32
	data       []uint32
	passes     int
}

type planSwitch struct {
	n             int
	workerPorts   []int
	loopbackPort  func(pool uint32, rank int) int
	values        [4]map[uint32]*[planLanes / 2][2]uint32 // per pipe: pool index → 32 pairs
	bitmap        map[uint32]uint32
	contributions map[uint32]int
	queues        map[int][]*planPacket
	results       []planResult
	drops         int
}

func newPlanSwitch(n int, loopback func(uint32, int) int) *planSwitch {
	s := &planSwitch{n: n, loopbackPort: loopback, bitmap: map[uint32]uint32{}, contributions: map[uint32]int{}, queues: map[int][]*planPacket{}}
	for p := range s.values {
		s.values[p] = map[uint32]*[planLanes / 2][2]uint32{}
	}
	for r := 0; r < n; r++ {
		s.workerPorts = append(s.workerPorts, 4+4*r) // pipe 0
	}
	return s
}

// processor is Processor.apply for the 32 instances of one pipe.
func (s *planSwitch) processor(pipe int, pool uint32, window []uint32, pass int, retrans bool, bitmapBefore uint32) {
	regs := s.values[pipe][pool]
	if regs == nil {
		regs = new([planLanes / 2][2]uint32)
		for k := range regs {
			regs[k] = [2]uint32{0xBAD0BAD0, 0xBAD1BAD1} // stale values of an earlier use
		}
		s.values[pipe][pool] = regs
	}
	for k := 0; k < planLanes/2; k++ {
		v := &regs[k]
		first, second := &window[2*k], &window[2*k+1]
		switch {
		case pass == planPassHarvest:
			*first = v[0]
		case pass == planPassInsert:
			*second = v[1]
		case retrans:
			*second = v[1]
		case bitmapBefore == 0:
			v[0], v[1] = *first, *second
			*second = v[1]
		default:
			v[0] += *first
			v[1] += *second
			*second = v[1]
		}
	}
}

// ingress runs one pass of pkt arriving on port through that port's pipe
// and queues what leaves (or records a result / drop).
func (s *planSwitch) ingress(port int, pkt *planPacket) {
	pipe := port >> 7
	pkt.passes++
	// IngressParser: the window is parsed from the packet, or inserted.
	var window, tail []uint32
	if pkt.bridged != nil && pkt.bridged.pass == planPassInsert {
		window = make([]uint32, planLanes)
		for i := range window {
			window[i] = 0xDEADBEEF // setValid(): undefined until written
		}
		tail = pkt.data
	} else {
		window, tail = append([]uint32(nil), pkt.data[:planLanes]...), pkt.data[planLanes:]
	}
	emit := func(next int) {
		if window != nil {
			pkt.data = append(window, tail...)
		} else {
			pkt.data = tail
		}
		s.queues[next] = append(s.queues[next], pkt)
	}
	b := pkt.bridged
	if b != nil {
		if pipe != b.chunk {
			panic("a pass ran in a pipe that does not hold its chunk")
		}
		bitmapBefore := uint32(0)
		if !b.firstContribution {
			bitmapBefore = 1
		}
		s.processor(pipe, b.poolIndex, window, b.pass, b.retrans, bitmapBefore)
		switch {
		case b.pass == planPassConsume && b.chunk != 3:
			window = nil
			next := (b.chunk+1)<<7 | port&0x7F
			b.chunk++
			emit(next)
		case b.pass == planPassConsume && b.decision == planDecisionConsume:
			s.drops++
		case b.pass == planPassConsume:
			b.pass = planPassHarvest
			emit(3<<7 | recircPortLow)
		case b.pass == planPassInsert:
			b.pass = planPassHarvest
			emit(b.chunk<<7 | recircPortLow)
		case b.chunk != 0:
			b.pass = planPassInsert
			next := (b.chunk-1)<<7 | recircPortLow
			b.chunk--
			emit(next)
		default:
			data := append(window, tail...)
			if b.decision == planDecisionBroadcast {
				for r, wp := range s.workerPorts {
					s.results = append(s.results, planResult{port: wp, rank: r, decision: b.decision, pool: b.poolIndex, data: data, passes: pkt.passes})
				}
			} else {
				s.results = append(s.results, planResult{port: b.ingressPort, rank: b.worker, decision: b.decision, pool: b.poolIndex, data: data, passes: pkt.passes})
			}
		}
		return
	}
	// Pass 0: BitmapChecker / WorkersCounter in short, then NextStep.
	bit := uint32(1) << pkt.rank
	before := s.bitmap[pkt.pool]
	s.bitmap[pkt.pool] |= bit
	retrans := before&bit != 0
	if !retrans {
		s.contributions[pkt.pool]++
	}
	complete := s.contributions[pkt.pool] == s.n
	last := !retrans && complete
	s.processor(0, pkt.pool, window, planPassRequest, retrans, before)
	decision := planDecisionConsume
	switch {
	case retrans && complete:
		decision = planDecisionUnicast
	case retrans:
		decision = planDecisionDrop
	case last:
		decision = planDecisionBroadcast
	}
	if decision == planDecisionDrop {
		s.drops++
		return
	}
	pkt.bridged = &planBridged{pass: planPassConsume, decision: decision, chunk: 1, firstContribution: before == 0, retrans: retrans, poolIndex: pkt.pool, ingressPort: port, worker: pkt.rank}
	window = nil
	emit(s.loopbackPort(pkt.pool, pkt.rank))
}

// run serves the port queues in random order until all are empty.
func (s *planSwitch) run(rng *rand.Rand) {
	for {
		var ports []int
		for p, q := range s.queues {
			if len(q) > 0 {
				ports = append(ports, p)
			}
		}
		if len(ports) == 0 {
			return
		}
		// Map order is random, but make the choice the seed's.
		for i := 1; i < len(ports); i++ {
			for j := i; j > 0 && ports[j] < ports[j-1]; j-- {
				ports[j], ports[j-1] = ports[j-1], ports[j]
			}
		}
		p := ports[rng.Intn(len(ports))]
		pkt := s.queues[p][0]
		s.queues[p] = s.queues[p][1:]
		s.ingress(p, pkt)
	}
}

// runPlan sends every worker's 1024 B contribution to each of slots pool
// indexes, interleaved, plus one retransmission per slot after it
// completes, and checks every result. It returns the number of wrong
// results (for the negative control).
func runPlan(t *testing.T, seed int64, loopback func(uint32, int) int, strict bool) int {
	const n, slots = 4, 48
	rng := rand.New(rand.NewSource(seed))
	s := newPlanSwitch(n, loopback)
	want := map[uint32][]uint32{}
	for i := 0; i < slots; i++ {
		pool := uint32(i*2 + i%2)
		want[pool] = make([]uint32, 4*planLanes)
		for r := 0; r < n; r++ {
			data := make([]uint32, 4*planLanes)
			for l := range data {
				data[l] = rng.Uint32()
				want[pool][l] += data[l]
			}
			s.queues[s.workerPorts[r]] = append(s.queues[s.workerPorts[r]], &planPacket{rank: r, pool: pool, data: data})
		}
	}
	s.run(rng)
	wrong := 0
	check := func(decision int, perSlot int) {
		got := map[uint32]int{}
		for _, res := range s.results {
			if res.decision != decision {
				continue
			}
			got[res.pool]++
			if res.port>>7 != 0 || res.port != s.workerPorts[res.rank] {
				t.Errorf("pool %d: result to port %d (rank %d)", res.pool, res.port, res.rank)
			}
			if res.passes != 11 && strict {
				t.Errorf("pool %d: result after %d ingress passes, the plan has 11", res.pool, res.passes)
			}
			ok := len(res.data) == len(want[res.pool])
			for l := 0; ok && l < len(res.data); l++ {
				ok = res.data[l] == want[res.pool][l]
			}
			if !ok {
				wrong++
				if strict {
					t.Errorf("pool %d rank %d (decision %d): result differs from the sum of the contributions", res.pool, res.rank, decision)
				}
			}
		}
		if len(got) != len(want) {
			t.Errorf("%d slots got decision-%d results, want %d", len(got), decision, len(want))
		}
		for pool, c := range got {
			if c != perSlot {
				t.Errorf("pool %d: %d decision-%d results, want %d", pool, c, decision, perSlot)
			}
		}
	}
	check(planDecisionBroadcast, n)
	if s.drops != slots*(n-1) {
		t.Errorf("%d consumed/dropped, want %d (n−1 Consume per slot)", s.drops, slots*(n-1))
	}
	// A retransmission into each completed slot: read-only passes, one
	// Unicast answer with the same sums.
	s.results = nil
	for pool := range want {
		r := int(pool) % n
		s.queues[s.workerPorts[r]] = append(s.queues[s.workerPorts[r]], &planPacket{rank: r, pool: pool, data: make([]uint32, 4*planLanes)})
	}
	s.run(rng)
	check(planDecisionUnicast, 1)
	return wrong
}

// TestPlan1024SumsAcrossPipes: with the loopback port picked by pool index
// (NextStep.loopback_port as the backend fills it), every Broadcast and
// Unicast result is the exact sum of the workers' 1024 B contributions,
// leaves from the worker's pipe-0 port after 11 ingress passes, for any
// service order of the ports.
func TestPlan1024SumsAcrossPipes(t *testing.T) {
	ports := []uint32{136, 140, 144}
	byPool := func(pool uint32, _ int) int { return int(LoopbackPortFor(pool, ports)) }
	for seed := int64(1); seed <= 20; seed++ {
		runPlan(t, seed, byPool, true)
	}
}

// TestPlan1024OrderMatters is the negative control: picking the loopback
// port by worker rank (different queues for the contributions to one slot)
// lets a later contribution reach pipe k before the first one, which then
// overwrites it — the reason loopback_port is keyed by pool index.
func TestPlan1024OrderMatters(t *testing.T) {
	byRank := func(_ uint32, rank int) int { return 128 + 4*rank }
	wrong := 0
	for seed := int64(1); seed <= 20; seed++ {
		wrong += runPlan(t, seed, byRank, false)
	}
	if wrong == 0 {
		t.Error("with the port chosen by rank no result was wrong in 20 random schedules: the simulation does not exercise cross-port reordering")
	}
}
