package p4rt

import (
	"encoding/binary"
	"math/rand"
	"net/netip"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// This file transcribes the chunked profiles' pass plan (p4/rdma_switch
// with CHUNKED, configuration.p4: IngressParser's bridged states, Ingress'
// bridged branch, Processor, NextStep's CHUNKED apply, the deparser's
// "emitted headers, then the unparsed tail") line by line into Go, and
// runs requests of several workers for many slots through the pipes whose
// ports are FIFO queues served in random order — the one ordering property
// the plan relies on (a Tofino port's queue is FIFO; nothing orders two
// different ports). Two profiles: PAYLOAD_1024 (four chunks of 64 int32
// lanes) and WIRE_16 (two chunks of 64 int16 lanes, each register half a
// 16-bit ALU). The results are compared with the Go switch model's
// (switchmodel.Pipeline on the same contributions). Like
// TestReceiverRulesMatchModel it checks the rules, not the compiled
// program.

// planProfile is what differs between the chunked profiles.
type planProfile struct {
	name      string
	chunks    int    // NUM_CHUNKS: pipes 0 … chunks−1
	laneBytes int    // value_t: 4 (bit<32>) or 2 (bit<16>)
	mask      uint32 // a lane's bits: the register halves wrap at this width
}

var (
	plan1024   = planProfile{name: "payload-1024", chunks: numPipes1024, laneBytes: 4, mask: 0xFFFFFFFF}
	planWire16 = planProfile{name: "wire-16", chunks: 2, laneBytes: 2, mask: 0xFFFF}
)

// passes is the ingress passes of a result: pass 0, a consume pass per
// further chunk, the last chunk's harvest, and an insert and a harvest
// pass per earlier chunk.
func (p planProfile) passes() int { return 3*p.chunks - 1 }

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
	prof          planProfile
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

func newPlanSwitch(prof planProfile, n int, loopback func(uint32, int) int) *planSwitch {
	s := &planSwitch{prof: prof, n: n, loopbackPort: loopback, bitmap: map[uint32]uint32{}, contributions: map[uint32]int{}, queues: map[int][]*planPacket{}}
	for p := range s.values {
		s.values[p] = map[uint32]*[planLanes / 2][2]uint32{}
	}
	for r := 0; r < n; r++ {
		s.workerPorts = append(s.workerPorts, 4+4*r) // pipe 0
	}
	return s
}

// processor is Processor.apply for the 32 instances of one pipe: the
// register actions write_read1, sum_read1 (each half added in an ALU of the
// lane's width: value_pair_t of two value_t), read0 and read1.
func (s *planSwitch) processor(pipe int, pool uint32, window []uint32, pass int, retrans bool, bitmapBefore uint32) {
	regs := s.values[pipe][pool]
	if regs == nil {
		regs = new([planLanes / 2][2]uint32)
		for k := range regs {
			regs[k] = [2]uint32{0xBAD0BAD0 & s.prof.mask, 0xBAD1BAD1 & s.prof.mask} // stale values of an earlier use
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
			v[0] = (v[0] + *first) & s.prof.mask
			v[1] = (v[1] + *second) & s.prof.mask
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
		case b.pass == planPassConsume && b.chunk != s.prof.chunks-1:
			window = nil
			next := (b.chunk+1)<<7 | port&0x7F
			b.chunk++
			emit(next)
		case b.pass == planPassConsume && b.decision == planDecisionConsume:
			s.drops++
		case b.pass == planPassConsume:
			b.pass = planPassHarvest
			emit((s.prof.chunks-1)<<7 | recircPortLow) // harvest_last_chunk: LAST_CHUNK ++ RECIRC_PORT_LOW
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

// planModel is the Go switch model with one job of n workers (one QP
// each) over slots slots, lanes of the profile's width, packets of the
// profile's payload: what the plan's results must equal.
type planModel struct {
	prof  planProfile
	model *switchmodel.Pipeline
	job   *wire.Job
	psn   []uint32
	buf   []byte
}

func newPlanModel(t *testing.T, prof planProfile, n int, slots uint32) *planModel {
	t.Helper()
	lanes := prof.chunks * planLanes
	job := &wire.Job{ID: 1, DType: wire.Float32, PacketSize: lanes * prof.laneBytes, PoolSlots: slots}
	if prof.laneBytes == 2 {
		job.ElementBytes = 2
	}
	for r := 0; r < n; r++ {
		sq, _ := wire.P4AppQPN(r, 0)
		job.Workers = append(job.Workers, wire.Worker{Rank: r, Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(r + 2)}),
			MAC: []byte{2, 0, 0, 0, 0, byte(r + 2)}, RKey: 7, QPNs: []uint32{0x100 + uint32(r)}, PSNs: []uint32{0}, SwitchQPNs: []uint32{sq}})
	}
	model, err := switchmodel.New(switchmodel.Config{PoolSize: slots, MaxPayload: job.PacketSize, MaxWorkers: 32})
	if err != nil {
		t.Fatal(err)
	}
	if err := model.AddJob(job); err != nil {
		t.Fatal(err)
	}
	return &planModel{prof: prof, model: model, job: job, psn: make([]uint32, n), buf: make([]byte, 2*job.PacketSize+256)}
}

// contribute sends rank's lanes for pool as one WRITE ONLY WITH IMMEDIATE
// through the model and returns the lanes of its Broadcast result, nil
// for any other decision.
func (m *planModel) contribute(t *testing.T, rank int, pool uint32, lanes []uint32) []uint32 {
	t.Helper()
	size := m.job.PacketSize
	op := rdma.WriteOpcode(rdma.TransportUC, true, true, true)
	f := rdma.PacketFields{
		BTH:  rdma.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: m.job.Workers[rank].SwitchQPNs[0], PSN: m.psn[rank]},
		RETH: rdma.RETHFields{RKey: pool, DMALen: uint32(size)},
	}
	m.psn[rank]++
	nb := rdma.PacketLen(op, size)
	b, err := f.Encode(m.buf[:nb], size)
	if err != nil {
		t.Fatal(err)
	}
	payload := m.buf[b : b+size]
	for i, v := range lanes {
		if m.prof.laneBytes == 2 {
			binary.BigEndian.PutUint16(payload[2*i:], uint16(v))
		} else {
			binary.BigEndian.PutUint32(payload[4*i:], v)
		}
	}
	var pkt rdma.Packet
	if err := pkt.Parse(m.buf[:nb]); err != nil {
		t.Fatal(err)
	}
	var md switchmodel.Metadata
	m.model.Process(m.job.Workers[rank].Addr, &pkt, &md)
	if md.Decision != switchmodel.Broadcast {
		return nil
	}
	out := make([]byte, 2*size+256)
	rn, _, err := m.model.EncodeResult(&md, 0, out)
	if err != nil {
		t.Fatal(err)
	}
	var res rdma.Packet
	if err := res.Parse(out[:rn]); err != nil {
		t.Fatal(err)
	}
	sums := make([]uint32, len(lanes))
	for i := range sums {
		if m.prof.laneBytes == 2 {
			sums[i] = uint32(binary.BigEndian.Uint16(res.Payload[2*i:]))
		} else {
			sums[i] = binary.BigEndian.Uint32(res.Payload[4*i:])
		}
	}
	return sums
}

// runPlan sends every worker's contribution (the profile's payload) to
// each of slots pool indexes, interleaved, plus one retransmission per
// slot after it completes, and checks every result against the Go switch
// model's. It returns the number of wrong results (for the negative
// control).
func runPlan(t *testing.T, prof planProfile, seed int64, loopback func(uint32, int) int, strict bool) int {
	const n, slots = 4, 48
	rng := rand.New(rand.NewSource(seed))
	s := newPlanSwitch(prof, n, loopback)
	m := newPlanModel(t, prof, n, slots)
	lanes := prof.chunks * planLanes
	want := map[uint32][]uint32{}
	for i := 0; i < slots; i++ {
		pool := uint32(i*2 + i%2)
		for r := 0; r < n; r++ {
			data := make([]uint32, lanes)
			for l := range data {
				data[l] = rng.Uint32() & prof.mask
				if l%7 == 0 { // lanes at the top of the range, whose sums wrap
					data[l] = prof.mask - uint32(rng.Intn(3))
				}
			}
			if sums := m.contribute(t, r, pool, data); sums != nil {
				want[pool] = sums
			}
			s.queues[s.workerPorts[r]] = append(s.queues[s.workerPorts[r]], &planPacket{rank: r, pool: pool, data: data})
		}
		if want[pool] == nil {
			t.Fatalf("pool %d: the model sent no Broadcast after %d contributions", pool, n)
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
			if res.passes != prof.passes() && strict {
				t.Errorf("pool %d: result after %d ingress passes, the plan has %d", res.pool, res.passes, prof.passes())
			}
			ok := len(res.data) == len(want[res.pool])
			for l := 0; ok && l < len(res.data); l++ {
				ok = res.data[l] == want[res.pool][l]
			}
			if !ok {
				wrong++
				if strict {
					t.Errorf("%s: pool %d rank %d (decision %d): result differs from the model's", prof.name, res.pool, res.rank, decision)
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
		s.queues[s.workerPorts[r]] = append(s.queues[s.workerPorts[r]], &planPacket{rank: r, pool: pool, data: make([]uint32, lanes)})
	}
	s.run(rng)
	check(planDecisionUnicast, 1)
	return wrong
}

// TestPlan1024SumsAcrossPipes: with the loopback port picked by pool index
// (NextStep.loopback_port as the backend fills it), every Broadcast and
// Unicast result is the model's sum of the workers' 1024 B contributions,
// leaves from the worker's pipe-0 port after 11 ingress passes, for any
// service order of the ports.
func TestPlan1024SumsAcrossPipes(t *testing.T) {
	ports := []uint32{136, 140, 144}
	byPool := func(pool uint32, _ int) int { return int(loopbackPortFor(pool, ports)) }
	for seed := int64(1); seed <= 20; seed++ {
		runPlan(t, plan1024, seed, byPool, true)
	}
}

// TestPlanWire16SumsAcrossPipes: the 16-bit profile's two chunks of 64
// int16 lanes, added in 16-bit register halves, give every Broadcast and
// Unicast result the model's 16-bit wrapping sums of the workers' 256 B
// contributions (lanes at the top of the range included, whose sums
// wrap), from the worker's pipe-0 port after 5 ingress passes.
func TestPlanWire16SumsAcrossPipes(t *testing.T) {
	ports := []uint32{136, 140, 144}
	byPool := func(pool uint32, _ int) int { return int(loopbackPortFor(pool, ports)) }
	for seed := int64(1); seed <= 20; seed++ {
		runPlan(t, planWire16, seed, byPool, true)
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
		wrong += runPlan(t, plan1024, seed, byRank, false)
	}
	if wrong == 0 {
		t.Error("with the port chosen by rank no result was wrong in 20 random schedules: the simulation does not exercise cross-port reordering")
	}
}
