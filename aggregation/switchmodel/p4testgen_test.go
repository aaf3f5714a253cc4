package switchmodel

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// The tests p4testgen generated from p4/rdma_switch (scripts/p4.sh
// testgen) and the hash of the sources they came from.
const (
	p4Sources     = "../../p4/rdma_switch"
	p4TestgenDir  = "../../p4/testdata/p4testgen"
	p4TestgenHash = p4TestgenDir + "/SOURCES"
)

// p4SourcesHash is scripts/p4.sh sources-hash: SHA-256 of the
// `sha256sum *.p4` listing (name order, two spaces, newline per file).
func p4SourcesHash(dir string) (string, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.p4"))
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	var list strings.Builder
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&list, "%x  %s\n", sha256.Sum256(b), filepath.Base(n))
	}
	sum := sha256.Sum256([]byte(list.String()))
	return hex.EncodeToString(sum[:]), nil
}

// TestP4TestgenSourcesHash: the generated tests were written from the
// P4 sources as they are. A change to p4/rdma_switch needs the tests
// regenerated (scripts/p4.sh testgen, docs/p4.md "Generated tests").
func TestP4TestgenSourcesHash(t *testing.T) {
	want, err := os.ReadFile(p4TestgenHash)
	if err != nil {
		t.Fatalf("read the hash the tests were generated from: %v", err)
	}
	got, err := p4SourcesHash(p4Sources)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(want)) != got {
		t.Fatalf("p4/rdma_switch changed since the p4testgen tests were generated (%s records %s, the sources hash to %s): "+
			"run scripts/p4.sh testgen", p4TestgenHash, strings.TrimSpace(string(want)), got)
	}
}

// p4Profile is a compile profile of p4/rdma_switch (configuration.p4).
type p4Profile struct {
	name    string
	slots   uint32 // NUM_SLOTS
	payload int    // PAYLOAD_BYTES
	// chunk is CHUNK_BYTES in the profiles that aggregate chunk k in pipe
	// k (CHUNKED: the 1024 B and 16-bit profiles), 0 in the others.
	chunk int
	lane  int // value_t bytes: 4, or 2 in the 16-bit profile (wire.Job.ElementBytes)
}

var p4Profiles = []p4Profile{
	{"default", 8192, 256, 0, 4},
	{"test", 64, 256, 0, 4},
	{"payload1024", 8192, 1024, 256, 4},
	{"wire16", 8192, 256, 128, 2},
}

// bridgedPort reports whether the program's parser takes a packet from
// port as a bridged pass: the arrival pipe's recirculation port, and in
// the chunked profiles every port of the pipes after pipe 0 that hold
// chunks (pipes 1–3; the 16-bit profile's pipe 1).
func (prof p4Profile) bridgedPort(port int) bool {
	switch {
	case prof.chunk == 0:
		return port&0x7F == p4RecircLow
	case port == p4RecircLow:
		return true
	}
	pipe := port >> 7
	return pipe >= 1 && pipe < prof.payload/prof.chunk
}

// The P4 program's codes (types.p4, configuration.p4).
const (
	p4RecircLow      = 68 // RECIRC_PORT_LOW
	p4PassHarvest    = 1
	p4PassConsume    = 2
	p4InvalidPSN     = 0xFFFFFFFF
	p4BridgedLen     = 20
	p4IPv4LenNoExt   = 300
	p4DropNone       = 0
	roceUDPPort      = 4791
	ethTypeIPv4      = 0x0800
	ipProtoUDPNumber = 17
)

// p4Outcome is what the program did with a packet, read from the tool's
// trace: the action NextStep.step chose (none: the table did not run or
// missed), the last value written to drop_reason, and whether the parser
// dropped the packet.
type p4Outcome struct {
	step       string
	reason     DropReason
	parserDrop bool
}

var (
	traceStepRE   = regexp.MustCompile(`Ingress\.next_step\.step \| Key\(s\):[^\n]*?\| Chosen action: (\w+)`)
	traceReasonRE = regexp.MustCompile(`Computed: ig_md\.switchml_md\.drop_reason = (\d+);`)
)

func traceOutcome(trace string) p4Outcome {
	var o p4Outcome
	if m := traceStepRE.FindAllStringSubmatch(trace, -1); m != nil {
		o.step = m[len(m)-1][1]
	}
	if m := traceReasonRE.FindAllStringSubmatch(trace, -1); m != nil {
		v, _ := strconv.Atoi(m[len(m)-1][1])
		o.reason = DropReason(v)
	}
	// An extraction failure of the ingress parser (the egress parser's
	// come from the tool's egress offset, replayHarvestUnicast).
	ingress, _, _ := strings.Cut(trace, "[Parser] EgressParser")
	o.parserDrop = strings.Contains(ingress, "[ExtractFailure]")
	return o
}

// decision is the model decision the step action stands for.
func (o p4Outcome) decision() (Decision, bool) {
	switch o.step {
	case "broadcast":
		return Broadcast, true
	case "unicast":
		return Unicast, true
	case "consume":
		return Consume, true
	case "drop", "drop_retransmit_incomplete":
		return Drop, true
	}
	return 0, false
}

// replayStats counts the replayed tests by kind, opcode, decision and
// drop reason (printed by TestP4TestgenReplay).
type replayStats struct {
	kinds     map[string]int
	opcodes   map[string]int
	decisions map[string]int
	reasons   map[string]int
	steps     map[string]int
}

func newReplayStats() *replayStats {
	return &replayStats{kinds: map[string]int{}, opcodes: map[string]int{}, decisions: map[string]int{},
		reasons: map[string]int{}, steps: map[string]int{}}
}

func (s *replayStats) String() string {
	var b strings.Builder
	for _, m := range []struct {
		name string
		m    map[string]int
	}{{"kind", s.kinds}, {"opcode", s.opcodes}, {"decision", s.decisions}, {"drop reason", s.reasons}, {"NextStep.step", s.steps}} {
		keys := make([]string, 0, len(m.m))
		for k := range m.m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(&b, "%-14s", m.name+":")
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%d", k, m.m[k])
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// TestP4TestgenReplay replays every test p4testgen generated from
// p4/rdma_switch through the Go model (docs/p4.md "Generated tests"): the
// test's receive_qp entry becomes a job, its register values the model's
// state, and the model's decision, drop reason and recirculated packet
// must be the program's, bit for bit outside the tool's don't-care masks.
func TestP4TestgenReplay(t *testing.T) {
	total := 0
	for _, prof := range p4Profiles {
		files, err := filepath.Glob(filepath.Join(p4TestgenDir, prof.name, "*.py.gz"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("%s: no generated tests under %s (scripts/p4.sh testgen)", prof.name, p4TestgenDir)
		}
		stats := newReplayStats()
		n := 0
		for _, f := range files {
			tests, err := readPTF(f)
			if err != nil {
				t.Fatal(err)
			}
			run := strings.TrimSuffix(filepath.Base(f), ".py.gz")
			for i := range tests {
				tc := &tests[i]
				if err := replayP4Test(prof, tc, stats); err != nil {
					t.Errorf("%s/%s %s: %v", prof.name, run, tc.name, err)
				}
				n++
			}
		}
		total += n
		t.Logf("profile %s: %d tests\n%s", prof.name, n, stats)
	}
	if total < 200 {
		t.Errorf("%d generated tests over the profiles; the replay's target is at least 200 (scripts/p4.sh testgen)", total)
	}
}

// replayP4Test runs one generated test through the model and compares.
func replayP4Test(prof p4Profile, tc *ptfTest, st *replayStats) error {
	o := traceOutcome(tc.trace)
	st.steps[orNone(o.step)]++
	if prof.bridgedPort(tc.inPort) {
		return replayBridged(prof, tc, o, st)
	}
	fr, ok := parseP4Request(tc)
	if !ok {
		// ARP, ICMP, forwarding, short frames: outside the model.
		st.kinds["not RoCE for the switch"]++
		if _, isDecision := o.decision(); isDecision {
			return fmt.Errorf("NextStep decided (%s) for a packet that is not RoCE for the switch IP", o.step)
		}
		return nil
	}
	st.opcodes[fmt.Sprintf("%#02x", fr.opcode)]++
	return replayRequest(prof, tc, o, fr, st)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// p4Request is what the program's parser took from a front-port frame
// bound for the switch IP: IPv4 (IHL 5, not a fragment), UDP to 4791, a
// BTH.
type p4Request struct {
	opcode   uint8
	src, dst netip.Addr
	qpn      uint32
	totalLen int
}

func parseP4Request(tc *ptfTest) (p4Request, bool) {
	var r p4Request
	b := tc.in
	if len(b) < 14+20+8+12 || binary.BigEndian.Uint16(b[12:]) != ethTypeIPv4 {
		return r, false
	}
	ip := b[14:]
	if ip[0]&0x0F != 5 || binary.BigEndian.Uint16(ip[6:])&0x1FFF != 0 || ip[9] != ipProtoUDPNumber {
		return r, false
	}
	if binary.BigEndian.Uint16(ip[22:]) != roceUDPPort {
		return r, false
	}
	swIP, _ := tc.defaultParam("Ingress.arp_icmp_responder.switch_address", "switch_ip")
	r.src = netip.AddrFrom4([4]byte(ip[12:16]))
	r.dst = netip.AddrFrom4([4]byte(ip[16:20]))
	if binary.BigEndian.Uint32(ip[16:20]) != uint32(swIP) {
		return r, false
	}
	bth := ip[28:]
	r.opcode = bth[0]
	r.qpn = binary.BigEndian.Uint32(bth[4:8]) & 0xFFFFFF
	r.totalLen = int(binary.BigEndian.Uint16(ip[2:]))
	return r, true
}

// p4Job is the job a test's receive_qp entry describes (set_qp's
// parameters, as p4rt.Programmer writes them), if the packet matches it.
type p4Job struct {
	rank, n, q int
	qpBase     uint64
	first, end uint64 // pool index units
	mgid       uint64
}

func matchReceiveQP(tc *ptfTest, fr p4Request) (p4Job, bool) {
	for _, e := range tc.entries {
		if e.table != "Ingress.rdma_receiver.receive_qp" || e.action != "Ingress.rdma_receiver.set_qp" {
			continue
		}
		hit := true
		for _, k := range e.keys {
			var v uint64
			switch k.field {
			case "hdr.ipv4.src_addr":
				v = uint64(binary.BigEndian.Uint32(fr.src.AsSlice()))
			case "hdr.ipv4.dst_addr":
				v = uint64(binary.BigEndian.Uint32(fr.dst.AsSlice()))
			case "hdr.ib_bth.dst_qp":
				v = uint64(fr.qpn)
			}
			mask := ^uint64(0)
			if k.hasMask {
				mask = k.mask
			}
			if v&mask != k.value&mask {
				hit = false
			}
		}
		if !hit {
			continue
		}
		p := e.params
		return p4Job{rank: int(p["worker_id"]), n: int(p["num_workers"]), q: int(p["num_qps"]), qpBase: p["qp_base"],
			first: p["pool_first_index"], end: p["pool_end_index"], mgid: p["mgid"]}, true
	}
	return p4Job{}, false
}

// workerAddr is the address of rank r in a replayed job: the request's
// source for the sender, distinct addresses for the others.
func workerAddr(r, rank int, src netip.Addr) netip.Addr {
	if r == rank {
		return src
	}
	a := netip.AddrFrom4([4]byte{198, 18, byte(r >> 8), byte(r)})
	if a == src {
		a = netip.AddrFrom4([4]byte{198, 19, byte(r >> 8), byte(r)})
	}
	return a
}

// errUnreachable marks a test whose register values no sequence of
// packets and controller writes produces; it is counted, not compared.
type errUnreachable string

func (e errUnreachable) Error() string { return string(e) }

// buildModel installs the test's job (lanes of lane bytes, the profile's
// value_t) in a fresh model and sets the registers the path reads.
func buildModel(cfg Config, lane int, tc *ptfTest, fr p4Request, j p4Job) (*Pipeline, error) {
	p, err := New(cfg)
	if err != nil {
		return nil, err
	}
	job := &wire.Job{ID: 1, DType: wire.Int32, PacketSize: cfg.MaxPayload,
		PoolBase: uint32(j.first / 2), PoolSlots: uint32((j.end - j.first) / 2)}
	if lane == 2 {
		job.DType, job.ElementBytes = wire.Float32, 2 // int32 needs 32-bit lanes
	}
	for r := 0; r < j.n; r++ {
		w := wire.Worker{Rank: r, Addr: workerAddr(r, j.rank, fr.src), RKey: 0x1000 + uint32(r)}
		for i := 0; i < j.q; i++ {
			qpn, err := wire.P4AppQPN(r, i)
			if err != nil {
				return nil, err
			}
			w.QPNs = append(w.QPNs, 0x100000+uint32(r<<9|i))
			w.PSNs = append(w.PSNs, 0)
			w.SwitchQPNs = append(w.SwitchQPNs, qpn)
		}
		job.Workers = append(job.Workers, w)
	}
	if err := p.AddJob(job); err != nil {
		return nil, fmt.Errorf("install the test's job: %w", err)
	}
	je := p.Receiver.jobs[1]
	// Per-QP state: the program's registers at qp_base + QP index
	// (receive_qp's set_qp), the model's at rank·q + QP index.
	qpi := uint64(fr.qpn & 0xFFFF)
	if qpi < uint64(j.q) {
		idx := (j.qpBase + qpi) & 0xFFFF
		rx := &je.rx[j.rank*j.q+int(qpi)]
		next := tc.reg("Ingress.rdma_receiver.rx_qp_state", idx, "next_psn")
		room := tc.reg("Ingress.rdma_receiver.rx_qp_state", idx, "room")
		pool := tc.reg("Ingress.rdma_receiver.rx_pool_index", idx, "")
		high := tc.reg("Ingress.rdma_receiver.rx_high_psn", idx, "")
		first := fr.opcode == 0x26 || fr.opcode == 0x2A || fr.opcode == 0x2B
		if next != p4InvalidPSN && !first {
			// A valid QP holds the pool index of its last packet and the
			// steps left to the range's end (set by start_message and
			// kept by continue_message): room = end − pool index.
			if pool < j.first || pool >= j.end || room != j.end-pool {
				return nil, errUnreachable(fmt.Sprintf("rx_qp_state room %#x with pool index %#x in [%#x, %#x)", room, pool, j.first, j.end))
			}
			rx.valid = true
			rx.nextPSN = uint32(next>>8) & rdma.PSNMask
			rx.poolIndex = wire.PoolIndex(pool)
		}
		if high != 0 {
			rx.seen, rx.highPSN = true, uint32(high>>8)&rdma.PSNMask
		}
	}
	// Per (slot, set) state: BitmapChecker by slot, the others by pool
	// index (= slot·2 + set, the model's index too).
	for key, r := range tc.regs {
		name, idxStr, _ := strings.Cut(strings.TrimSuffix(key, "]"), "[")
		idx, _ := strconv.ParseUint(idxStr, 10, 64)
		switch {
		case name == "Ingress.bitmap_checker.bitmap":
			if idx >= uint64(cfg.PoolSize) {
				continue
			}
			p.Bitmap.bits[idx*2*uint64(p.Bitmap.words)] = r["set0"]
			p.Bitmap.bits[(idx*2+1)*uint64(p.Bitmap.words)] = r["set1"]
		case name == "Ingress.workers_counter.missing":
			if idx < uint64(len(p.Counter.missing)) {
				p.Counter.missing[idx] = uint32(r[""])
			}
		case strings.HasPrefix(name, "Ingress.processor") && strings.HasSuffix(name, ".values"):
			k, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, "Ingress.processor"), ".values"))
			if err != nil || k >= p.Processor.stride || idx >= uint64(cfg.PoolSize)*2 {
				continue
			}
			if lane == 2 {
				// Lanes 2k and 2k+1 of chunk 0 (pipe 0's registers): the
				// model's word k/2 holds lanes 4(k/2) … 4(k/2)+3 from its
				// high quarter down.
				w := &p.Processor.vec[int(idx)*p.Processor.stride+k/2]
				shift := 32 * uint(1-k%2)
				*w = *w&^(0xFFFFFFFF<<shift) | (r["first"]&0xFFFF<<16|r["second"]&0xFFFF)<<shift
				continue
			}
			p.Processor.vec[int(idx)*p.Processor.stride+k] = r["first"]<<32 | r["second"]&0xFFFFFFFF
		}
	}
	return p, nil
}

// replayRequest: a request from a front port to the switch IP.
func replayRequest(prof p4Profile, tc *ptfTest, o p4Outcome, fr p4Request, st *replayStats) error {
	j, hit := matchReceiveQP(tc, fr)
	// The program draws 0 under P4TESTGEN: a nonzero threshold drops every
	// request the receiver accepts, after the receiver (R18). The model's
	// own drop simulator takes that source.
	threshold, _ := tc.defaultParam("Ingress.ingress_drop_sim.drop_probability", "drop_threshold")
	cfg := Config{PoolSize: prof.slots, MaxPayload: prof.payload, MaxWorkers: 32,
		IngressLoss: func() bool { return threshold != 0 }}
	var p *Pipeline
	var err error
	if hit {
		p, err = buildModel(cfg, prof.lane, tc, fr, j)
		var u errUnreachable
		if errors.As(err, &u) {
			st.kinds["unreachable register state"]++
			return nil
		}
		if err != nil {
			return err
		}
	} else {
		p, err = New(cfg)
		if err != nil {
			return err
		}
	}
	zeroUnsetExponents(p, tc)
	st.kinds["request"]++

	// The model's input: what the software switch reads from the frame.
	var md Metadata
	var pkt rdma.Packet
	f, ferr := rdma.ParseFrame(tc.in, true)
	if ferr == nil {
		ferr = pkt.Parse(f.UDPPayload)
	}
	modelDecision, modelReason := Drop, DropMalformed
	if ferr == nil {
		p.Process(f.Src, &pkt, &md)
		modelDecision, modelReason = md.Decision, md.Reason
	}
	st.decisions[modelDecision.String()]++
	if modelDecision == Drop {
		st.reasons[modelReason.String()]++
	}

	p4Decision, decided := o.decision()
	switch {
	case o.parserDrop && !decided:
		// The program's parser dropped a frame too short for its headers
		// or payload (R19: not counted per reason); the model drops it as
		// malformed or by length.
		if modelDecision != Drop {
			return fmt.Errorf("the parser dropped the packet, the model decided %v", modelDecision)
		}
		if tc.outPort >= 0 {
			return fmt.Errorf("the parser dropped the packet but the tool expects it on port %d", tc.outPort)
		}
		st.kinds["parser drop"]++
		return nil
	case !decided:
		return fmt.Errorf("NextStep did not decide (step %q) on a RoCE request to the switch IP", o.step)
	}
	if ferr != nil {
		// The software switch never hands the model a frame it cannot
		// parse (DropMalformed); the program checks none of what makes it
		// malformed here (docs/p4.md "Generated tests": the frame length
		// against the IPv4 total length, the IPv4 version, the UDP
		// length, BTH TVer and PadCount) and decides on the headers.
		what := fmt.Sprintf("malformed (%v)", ferr)
		if fr.totalLen > len(tc.in)-14 {
			what = "frame shorter than its IPv4 total length"
		}
		st.kinds[fmt.Sprintf("model: %s; program: %v", what, p4Decision)]++
		return nil
	}
	if p4Decision != modelDecision {
		return fmt.Errorf("decision: program %v (reason %v), model %v (reason %v)", p4Decision, o.reason, modelDecision, modelReason)
	}
	if p4Decision == Drop && o.reason != modelReason {
		return fmt.Errorf("drop reason: program %v, model %v", o.reason, modelReason)
	}
	return compareRequestOutput(prof, tc, p, &pkt, &md, j, st)
}

// zeroUnsetExponents: AddJob leaves the model's Exponents "unset" (−128);
// the switch's registers are 0 where the controller wrote nothing and the
// tool set no value, and the tool sets every cell the path reads.
func zeroUnsetExponents(p *Pipeline, tc *ptfTest) {
	for i := range p.Exponents.imm {
		p.Exponents.imm[i] = expState{}
	}
	for key, r := range tc.regs {
		name, idxStr, _ := strings.Cut(strings.TrimSuffix(key, "]"), "[")
		idx, _ := strconv.ParseUint(idxStr, 10, 64)
		if idx >= uint64(len(p.Exponents.imm)) {
			continue
		}
		switch name {
		case "Ingress.exponents.max_e0":
			p.Exponents.imm[idx].e0 = int8(r[""])
		case "Ingress.exponents.max_e1":
			p.Exponents.imm[idx].e1 = int8(r[""])
		case "Ingress.exponents.msg_id":
			p.Exponents.imm[idx].msgID = uint16(r[""])
		}
	}
}

// compareRequestOutput: a Consume or Drop leaves nothing; a Broadcast or
// Unicast leaves the frame with the bridged header in front, towards the
// harvest pass (256 B profiles: the arrival pipe's recirculation port) or
// pipe 1's loopback port (chunked profiles), the slot's second halves in
// the odd lanes of the first 256 B chunk.
func compareRequestOutput(prof p4Profile, tc *ptfTest, p *Pipeline, pkt *rdma.Packet, md *Metadata, j p4Job, st *replayStats) error {
	if prof.chunk != 0 {
		// Pass 0 of the chunked profiles sends every accepted request on
		// (consume passes included) to pipe 1's loopback port.
		return compareChunkedOutput(prof, tc, p, md, j, st)
	}
	if md.Decision != Broadcast && md.Decision != Unicast {
		if tc.outPort >= 0 {
			return fmt.Errorf("model decision %v, the tool expects a packet on port %d", md.Decision, tc.outPort)
		}
		return nil
	}
	if tc.outPort < 0 {
		return fmt.Errorf("model decision %v, the tool expects no packet", md.Decision)
	}
	if want := tc.inPort&0x180 | p4RecircLow; tc.outPort != want {
		return fmt.Errorf("output port %d, want the recirculation port %d", tc.outPort, want)
	}
	want := make([]byte, 0, p4BridgedLen+len(tc.in))
	want = append(want, bridged256(md, j, tc.inPort)...)
	frame := slices.Clone(tc.in)
	ipv4Rechecksum(frame[14:34])
	// The Processors on the request pass: lane 2k keeps the request's
	// value, lane 2k+1 becomes the slot's (write/sum/read1).
	off := payloadOffset(pkt)
	secondHalves(frame[off:off+prof.payload], p, md)
	want = append(want, frame...)
	return compareMasked(tc, want, st)
}

func compareChunkedOutput(prof p4Profile, tc *ptfTest, p *Pipeline, md *Metadata, j p4Job, st *replayStats) error {
	if md.Decision == Drop {
		if tc.outPort >= 0 {
			return fmt.Errorf("model drop, the tool expects a packet on port %d", tc.outPort)
		}
		return nil
	}
	key := uint64(md.PoolIndex>>5) & 0xF
	port := -1
	for _, e := range tc.entries {
		if e.table == "Ingress.next_step.loopback_port" && len(e.keys) == 1 && e.keys[0].value == key && e.action == "Ingress.next_step.set_loopback_port" {
			port = int(e.params["port"])
		}
	}
	if port < 0 {
		if tc.outPort >= 0 {
			return fmt.Errorf("no loopback_port entry for key %d, the tool expects a packet on port %d", key, tc.outPort)
		}
		return nil
	}
	if tc.outPort < 0 && strings.Contains(tc.trace, "[Drop packet smaller than") {
		// The tool's PTF back end dropped what the program sent (its
		// trace: "Drop packet smaller than 240 for PTF", printed with a
		// larger size); the port the program set is still compared.
		m := traceEgressPortRE.FindStringSubmatch(tc.trace)
		if m == nil || m[1] != strconv.Itoa(port) {
			return fmt.Errorf("the program did not set loopback port %d (trace: %v)", port, m)
		}
		st.kinds["tool: PTF drop of the pass-0 packet; port compared"]++
		return nil
	}
	if tc.outPort != port {
		return fmt.Errorf("output port %d, want loopback port %d", tc.outPort, port)
	}
	b := bridged256(md, j, tc.inPort)
	b[0] = p4PassConsume
	b[4], b[5], b[6] = 1, 0, 0 // chunk 1
	if md.FirstContribution {
		b[5] = 1
	}
	if md.Retransmission {
		b[6] = 1
	}
	var pkt rdma.Packet
	f, _ := rdma.ParseFrame(tc.in, true)
	_ = pkt.Parse(f.UDPPayload)
	frame := slices.Clone(tc.in)
	ipv4Rechecksum(frame[14:34])
	off := payloadOffset(&pkt)
	// Chunk 0 leaves the packet (hdr.payload.setInvalid): the next pipes
	// parse the next chunks.
	want := append(b, frame[:off]...)
	want = append(want, frame[off+prof.chunk:]...)
	return compareMasked(tc, want, st)
}

// bridged256 is bridged_md_h (headers.p4) as NextStep's
// recirculate_for_harvest writes it for md.
func bridged256(md *Metadata, j p4Job, inPort int) []byte {
	b := make([]byte, p4BridgedLen)
	b[0] = p4PassHarvest
	b[1] = byte(md.Decision)
	if md.First {
		b[2] = 1
	}
	if md.Last {
		b[3] = 1
	}
	b[7] = byte(md.Rank)
	binary.BigEndian.PutUint16(b[8:], uint16(md.QP))
	binary.BigEndian.PutUint16(b[10:], uint16(j.mgid))
	binary.BigEndian.PutUint16(b[12:], uint16(md.PoolIndex))
	binary.BigEndian.PutUint16(b[14:], md.Imm.MsgID())
	b[16] = byte(md.Imm.E0())
	b[17] = byte(md.Imm.E1())
	binary.BigEndian.PutUint16(b[18:], uint16(inPort))
	return b
}

// secondHalves writes the slot's odd lanes (the second halves the
// Processors return on a request pass) into a 256 B payload window.
func secondHalves(w []byte, p *Pipeline, md *Metadata) {
	for k := 0; k < 32; k++ {
		binary.BigEndian.PutUint32(w[4*(2*k+1):], uint32(p.Processor.Value(md.slot, md.set, 2*k+1)))
	}
}

func ipv4Rechecksum(h []byte) {
	h[10], h[11] = 0, 0
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s > 0xFFFF {
		s = s&0xFFFF + s>>16
	}
	binary.BigEndian.PutUint16(h[10:], ^uint16(s))
}

// compareMasked compares want with the tool's expected packet, bit by bit
// outside its don't-care ranges.
func compareMasked(tc *ptfTest, want []byte, st *replayStats) error {
	st.kinds["output frame compared"]++
	if len(want) != len(tc.out) {
		return fmt.Errorf("output length: tool %d B, model %d B", len(tc.out), len(want))
	}
	for i := range tc.care {
		if !tc.care[i] {
			continue
		}
		if (want[i/8]^tc.out[i/8])&(0x80>>(i%8)) != 0 {
			return fmt.Errorf("output bit %d (byte %d): tool %#02x, model %#02x", i, i/8, tc.out[i/8], want[i/8])
		}
	}
	return nil
}

// replayBridged: a packet on a recirculation port (a harvest pass of the
// 256 B profiles, a consume or harvest pass of the chunked profiles). The
// tool makes up its bridged header; the step the program took must be the
// one the header's pass and decision select.
func replayBridged(prof p4Profile, tc *ptfTest, o p4Outcome, st *replayStats) error {
	if len(tc.in) < p4BridgedLen || o.parserDrop {
		st.kinds["bridged: parser drop"]++
		if tc.outPort >= 0 {
			return fmt.Errorf("a short bridged pass expected on port %d", tc.outPort)
		}
		return nil
	}
	pass, decision := tc.in[0]&3, tc.in[1]&3
	if prof.chunk != 0 {
		st.kinds["bridged chunked: "+orNone(o.step)]++
		return nil
	}
	switch {
	case pass == p4PassHarvest && decision == byte(Broadcast):
		if o.step != "harvest_broadcast" {
			return fmt.Errorf("harvest pass of a broadcast: step %q", o.step)
		}
		// Multicast: the tool models the replication as a drop.
		if tc.outPort >= 0 {
			return fmt.Errorf("harvest_broadcast: the tool expects a unicast packet on port %d", tc.outPort)
		}
		st.kinds["harvest: broadcast (multicast, not modelled by the tool)"]++
	case pass == p4PassHarvest && decision != byte(Unicast):
		// The request pass writes a harvest header only for Broadcast and
		// Unicast; the step is still the program's (harvest_unicast).
		if o.step != "harvest_unicast" {
			return fmt.Errorf("harvest pass (decision %d): step %q", decision, o.step)
		}
		st.kinds["harvest: decision no request pass writes"]++
	case pass == p4PassHarvest:
		if o.step != "harvest_unicast" {
			return fmt.Errorf("harvest pass (decision %d): step %q", decision, o.step)
		}
		return replayHarvestUnicast(tc, st)
	default:
		if o.step != "" && o.step != "NoAction" {
			return fmt.Errorf("bridged pass %d: step %q", pass, o.step)
		}
		st.kinds["bridged: not a harvest pass"]++
	}
	return nil
}

// replayHarvestUnicast: the harvest pass of a unicast result leaves
// ingress towards the sender's port (bridged ingress_port). The tool's
// expected packet after egress is not compared: its egress parser reads
// the bridged header at the offset where the ingress parser stopped, not
// at the start of the packet the ingress deparser wrote (the trace shows
// other values extracted than emitted), so its result frames are the
// input minus 21 B or garbage (docs/p4.md "Generated tests"). What
// ingress decided is checked from the trace: the egress port it set.
func replayHarvestUnicast(tc *ptfTest, st *replayStats) error {
	inPort := int(binary.BigEndian.Uint16(tc.in[18:]) & 0x1FF)
	m := traceEgressPortRE.FindStringSubmatch(tc.trace)
	if m == nil {
		st.kinds["harvest: unicast, dropped before egress"]++
		return nil
	}
	if port, _ := strconv.Atoi(m[1]); port != inPort {
		return fmt.Errorf("harvest_unicast set egress port %d, the bridged ingress port is %d", port, inPort)
	}
	st.kinds["harvest: unicast to the bridged ingress port"]++
	return nil
}

var traceEgressPortRE = regexp.MustCompile(`\*eg_intr_md\.egress_port = (\d+);`)

// payloadOffset is where a parsed request's payload starts in its frame:
// Ethernet, IPv4 (IHL 5), UDP, BTH and the extension headers.
func payloadOffset(pkt *rdma.Packet) int {
	return 14 + 20 + 8 + rdma.BTHSize + len(pkt.RETH) + len(pkt.ImmDt)
}
