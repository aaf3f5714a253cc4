package swswitch

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

var (
	engineV4 = netip.MustParseAddrPort("127.77.200.1:4791")
	engineV6 = netip.MustParseAddrPort("[fd00::1]:4791")
)

// testEngine is an engine without a socket holding one IPv4 job (workers
// 127.77.200.2, .3) and one IPv6 job (fd00::2, ::3).
func testEngine(t testing.TB, local netip.AddrPort, policy ICRCPolicy) (*engine, []*wire.Job) {
	t.Helper()
	pipe, err := switchmodel.New(switchmodel.Config{PoolSize: 32, MaxPayload: 1024, MaxWorkers: 8})
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(local, policy, pipe, 16)
	a := makeJob(1, 200, 2, 1, 0, 4, 256)
	b := makeJob(2, 200, 2, 1, 8, 4, 256)
	for r := range b.Workers {
		b.Workers[r].Addr = netip.AddrFrom16([16]byte{0xfd, 15: byte(r + 2)})
	}
	for _, j := range []*wire.Job{a, b} {
		if err := pipe.AddJob(j); err != nil {
			t.Fatal(err)
		}
	}
	e.maxN = 2
	return e, []*wire.Job{a, b}
}

// datagram builds an ONLY-with-immediate request of job j's worker r into
// slot, sealed for a switch at local, with headroom.
func datagram(t testing.TB, j *wire.Job, r int, slot uint32, v int32, local netip.AddrPort) []byte {
	t.Helper()
	op := rdma.UCRDMAWriteOnlyWithImm
	f := rdma.PacketFields{
		BTH:  rdma.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: j.Workers[r].SwitchQPNs[0]},
		RETH: rdma.RETHFields{RKey: uint32(wire.MakePoolIndex(slot, 0)), DMALen: uint32(j.PacketSize)},
	}
	n := rdma.PacketLen(op, j.PacketSize)
	buf := make([]byte, rdma.ICRCHeadroom+n)
	off, err := f.Encode(buf[rdma.ICRCHeadroom:], j.PacketSize)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < j.PacketSize; i += 4 {
		binary.BigEndian.PutUint32(buf[rdma.ICRCHeadroom+off+i:], uint32(v))
	}
	var h rdma.ICRC
	fl := rdma.Flow{Src: j.Workers[r].Addr, Dst: local.Addr(), SrcPort: rdma.UDPPort, DstPort: local.Port(), DF: true}
	if err := h.SealHeadroom(&fl, buf, rdma.ICRCHeadroom); err != nil {
		t.Fatal(err)
	}
	return buf
}

func TestEngineICRC(t *testing.T) {
	for _, tc := range []struct {
		name    string
		local   netip.AddrPort
		policy  ICRCPolicy
		job     int
		corrupt bool
		want    switchmodel.DropReason
	}{
		{"IPv4 good", engineV4, ICRCVerify, 0, false, switchmodel.NotDropped},
		{"IPv4 bad, verified", engineV4, ICRCVerify, 0, true, switchmodel.DropICRC},
		{"IPv4 bad, IPv6-only policy", engineV4, ICRCVerifyIPv6, 0, true, switchmodel.NotDropped},
		{"IPv6 good", engineV6, ICRCVerifyIPv6, 1, false, switchmodel.NotDropped},
		{"IPv6 bad", engineV6, ICRCVerifyIPv6, 1, true, switchmodel.DropICRC},
		{"IPv6 bad, verify policy", engineV6, ICRCVerify, 1, true, switchmodel.DropICRC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, jobs := testEngine(t, tc.local, tc.policy)
			j := jobs[tc.job]
			slot := j.PoolBase
			for r := range 2 {
				b := datagram(t, j, r, slot, int32(r+1), tc.local)
				if tc.corrupt && r == 0 {
					b[len(b)-5] ^= 1 // a payload bit
				}
				e.input(netip.AddrPortFrom(j.Workers[r].Addr, rdma.UDPPort), b, rdma.ICRCHeadroom, len(b)-rdma.ICRCHeadroom)
			}
			p := e.pipe
			if tc.want == switchmodel.NotDropped {
				if e.nout != 2 || p.Counters.Completed != 1 {
					t.Fatalf("%d results, %d completed; counters %+v", e.nout, p.Counters.Completed, p.Counters)
				}
				// Each result carries an exact ICRC for its flow.
				for _, m := range e.out[:e.nout] {
					var h rdma.ICRC
					fl := rdma.Flow{Src: tc.local.Addr(), Dst: m.Addr.Addr(), SrcPort: tc.local.Port(), DstPort: rdma.UDPPort, DF: true}
					if err := h.VerifyHeadroom(&fl, m.Buf[:m.Off+m.N], m.Off); err != nil {
						t.Errorf("result to %v: %v", m.Addr, err)
					}
				}
				return
			}
			if p.Counters.Drops[tc.want] != 1 || e.nout != 0 || p.Counters.Aggregated != 1 {
				t.Fatalf("counters %+v, %d results", p.Counters, e.nout)
			}
		})
	}
}

// FuzzInput feeds arbitrary bytes from arbitrary sources to the switch's
// packet entry point: it must never panic nor emit more results than a job
// has workers; with seal set the fuzzer's bytes get a valid ICRC, so they
// reach the pipeline.
func FuzzInput(f *testing.F) {
	e, jobs := testEngine(f, engineV4, ICRCVerify)
	for r := range 2 {
		b := datagram(f, jobs[0], r, 1, 5, engineV4)
		f.Add(b[rdma.ICRCHeadroom:], uint8(r), true)
		f.Add(b[rdma.ICRCHeadroom:], uint8(r), false)
	}
	for _, op := range []rdma.Opcode{rdma.UCRDMAWriteFirst, rdma.UCRDMAWriteMiddle, rdma.UCRDMAWriteLast, rdma.UCRDMAWriteLastWithImm, rdma.RCAcknowledge, rdma.CNP} {
		pf := rdma.PacketFields{BTH: rdma.BTHFields{Opcode: op, DestQP: jobs[0].Workers[0].SwitchQPNs[0]}, RETH: rdma.RETHFields{RKey: 3}}
		b := make([]byte, rdma.PacketLen(op, 256))
		if _, err := pf.Encode(b, 256); err == nil {
			f.Add(b, uint8(0), true)
		}
	}
	f.Add([]byte{}, uint8(3), true)
	srcs := []netip.AddrPort{
		netip.AddrPortFrom(jobs[0].Workers[0].Addr, 4791),
		netip.AddrPortFrom(jobs[0].Workers[1].Addr, 4791),
		netip.AddrPortFrom(jobs[1].Workers[0].Addr, 4791),
		netip.MustParseAddrPort("127.77.200.99:1234"),
		{},
	}
	f.Fuzz(func(t *testing.T, data []byte, src uint8, seal bool) {
		from := srcs[int(src)%len(srcs)]
		buf := make([]byte, rdma.ICRCHeadroom+len(data))
		copy(buf[rdma.ICRCHeadroom:], data)
		if seal && len(data) >= rdma.BTHSize+rdma.ICRCSize && from.Addr().IsValid() {
			var h rdma.ICRC
			fl := rdma.Flow{Src: from.Addr(), Dst: engineV4.Addr(), SrcPort: from.Port(), DstPort: engineV4.Port(), DF: true}
			_ = h.SealHeadroom(&fl, buf, rdma.ICRCHeadroom)
		}
		e.nout = 0
		e.input(from, buf, rdma.ICRCHeadroom, len(data))
		if e.nout > 2 {
			t.Fatalf("%d results for one packet", e.nout)
		}
		if got := len(e.schedule()); got != e.nout {
			t.Fatalf("schedule returned %d of %d results", got, e.nout)
		}
	})
}

// TestSchedule: results are grouped by destination and merged across QPs
// in rounds of equal size, keeping every (destination, QP)'s order.
func TestSchedule(t *testing.T) {
	e0, _ := testEngine(t, engineV4, ICRCVerify)
	e := newEngine(engineV4, ICRCVerify, e0.pipe, 64)
	type pkt struct {
		dst  byte
		qpn  uint32
		size int
		seq  int // order within (dst, qpn)
	}
	var in []pkt
	seq := map[[2]uint32]int{}
	// Two workers × three QPs, each a FIRST, two MIDDLEs and a LAST, the
	// QPs and workers interleaved as slots complete; then a unicast replay
	// of QP 0 to worker 2 (a second message on the same QP).
	sizes := []int{1056, 1040, 1040, 1044}
	for _, size := range sizes {
		for qp := uint32(1); qp <= 3; qp++ {
			for _, dst := range []byte{2, 3} {
				key := [2]uint32{uint32(dst), qp}
				in = append(in, pkt{dst, qp, size, seq[key]})
				seq[key]++
			}
		}
	}
	for _, size := range sizes {
		key := [2]uint32{2, 1}
		in = append(in, pkt{2, 1, size, seq[key]})
		seq[key]++
	}
	e.nout = 0
	for _, p := range in {
		m := &e.out[e.nout]
		m.N = p.size
		m.Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 77, 200, p.dst}), rdma.UDPPort)
		b := m.Bytes()
		clear(b)
		rdma.BTH(b).Encode(&rdma.BTHFields{Opcode: rdma.UCRDMAWriteMiddle, DestQP: p.qpn, PSN: uint32(p.seq)})
		e.nout++
	}
	out := e.schedule()
	if len(out) != len(in) {
		t.Fatalf("%d packets out of %d", len(out), len(in))
	}
	next := map[[2]uint32]uint32{}
	runs := 0
	for i, m := range out {
		bth := rdma.BTH(m.Bytes())
		key := [2]uint32{uint32(m.Addr.Addr().As4()[3]), bth.DestQP()}
		if bth.PSN() != next[key] {
			t.Fatalf("packet %d: %v QP %d PSN %d, want %d", i, m.Addr, key[1], bth.PSN(), next[key])
		}
		next[key]++
		if i > 0 && m.Addr != out[i-1].Addr {
			for _, prev := range out[:i-1] {
				if prev.Addr == m.Addr {
					t.Fatalf("packet %d: destination %v not contiguous", i, m.Addr)
				}
			}
		}
		if i == 0 || m.Addr != out[i-1].Addr || m.N != out[i-1].N {
			runs++
		}
	}
	// Worker 3: F×3, M×6, L×3. Worker 2: the same, then QP 1's replay
	// (F, M×2, L).
	if runs != 3+3+3 {
		t.Fatalf("%d runs of equal size, want 9", runs)
	}
	if a := testing.AllocsPerRun(100, func() { e.schedule() }); a != 0 {
		t.Errorf("schedule allocates %v times per batch", a)
	}
}

func TestEngineAllocs(t *testing.T) {
	e, jobs := testEngine(t, engineV4, ICRCVerify)
	var bufs [2][]byte
	for r := range 2 {
		bufs[r] = datagram(t, jobs[0], r, 2, int32(r), engineV4)
	}
	from := [2]netip.AddrPort{netip.AddrPortFrom(jobs[0].Workers[0].Addr, 4791), netip.AddrPortFrom(jobs[0].Workers[1].Addr, 4791)}
	allocs := testing.AllocsPerRun(100, func() {
		e.nout = 0
		for r := range 2 {
			e.input(from[r], bufs[r], rdma.ICRCHeadroom, len(bufs[r])-rdma.ICRCHeadroom)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per round", allocs)
	}
}

// TestVerifierUncached: with the flow cache full, a request from a new
// source is verified without it: in place with headroom, or in two passes
// when it has none (a packet lent by a GRO socket, udp.Lender); a good
// ICRC passes, a corrupted one is dropped.
func TestVerifierUncached(t *testing.T) {
	_, jobs := testEngine(t, engineV4, ICRCVerify)
	j := jobs[0]
	v := verifier{local: engineV4, policy: ICRCVerify}
	for i := range maxFlows {
		v.flows.get(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 77, byte(i >> 8), byte(i)}), rdma.UDPPort), func() rdma.Flow {
			return rdma.Flow{Src: netip.AddrFrom4([4]byte{10, 77, 0, 1}), Dst: engineV4.Addr(), SrcPort: rdma.UDPPort, DstPort: engineV4.Port()}
		})
	}
	src := netip.AddrPortFrom(j.Workers[0].Addr, rdma.UDPPort)
	for _, lent := range []bool{false, true} {
		for _, corrupt := range []bool{false, true} {
			b := datagram(t, j, 0, j.PoolBase, 5, engineV4)
			if corrupt {
				b[len(b)-5] ^= 1
			}
			off := rdma.ICRCHeadroom
			if lent {
				b, off = b[rdma.ICRCHeadroom:], 0
			}
			want := switchmodel.NotDropped
			if corrupt {
				want = switchmodel.DropICRC
			}
			if got := v.check(src, b, off, len(b)-off); got != want {
				t.Errorf("lent %v, corrupt %v: %v, want %v", lent, corrupt, got, want)
			}
		}
	}
	if len(v.flows.flows) != maxFlows {
		t.Errorf("the cache grew to %d flows past its %d", len(v.flows.flows), maxFlows)
	}
}
