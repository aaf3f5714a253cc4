package p4rt

import (
	"math/rand"
	"net/netip"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// p4Receiver is a line-by-line Go transcription of rdma_receiver.p4's
// apply block and register actions (same names), with the stateful ALU's
// predicate output as the hardware returns it. It is not the P4 program:
// it checks that the rules written there — the checks moved before the
// register access, INVALID_PSN as "not valid", the room count, the
// predicate decode — give the model's drop reasons and pool indices. Keep
// it in step with rdma_receiver.p4.
type p4Receiver struct {
	poolBase, poolSlots uint32
	numQPs              uint32
	payload             int
	ranks               map[netip.Addr]int
	rxQPState           []struct{ nextPSN, room uint32 } // rx_qp_state
	rxPoolIndex         []uint32                         // rx_pool_index
	rxHighPSN           []uint32                         // rx_high_psn: PSN << 8 | 0x80, 0 = none
}

func newP4Receiver(job *wire.Job) *p4Receiver {
	q := len(job.Workers[0].QPNs)
	r := &p4Receiver{
		poolBase: job.PoolBase, poolSlots: job.PoolSlots, numQPs: uint32(q), payload: job.PacketSize,
		ranks:       map[netip.Addr]int{},
		rxQPState:   make([]struct{ nextPSN, room uint32 }, len(job.Workers)*q),
		rxPoolIndex: make([]uint32, len(job.Workers)*q),
		rxHighPSN:   make([]uint32, len(job.Workers)*q),
	}
	for i := range r.rxQPState {
		r.rxQPState[i].nextPSN = invalidPSN // the backend's install write
	}
	for rank, w := range job.Workers {
		r.ranks[w.Addr] = rank
	}
	return r
}

// predicate is RegisterAction.predicate(cmplo, cmphi): one-hot bit
// 2·cmphi + cmplo (types.p4 PRED_*).
func predicate(lo, hi bool) uint8 {
	b := 0
	if lo {
		b++
	}
	if hi {
		b += 2
	}
	return 1 << b
}

const (
	predLo   = 2
	predLoHi = 8
)

// receive returns the drop reason and the pool index.
func (r *p4Receiver) receive(src netip.Addr, pkt *rdma.Packet) (switchmodel.DropReason, uint32) {
	op := pkt.BTH.Opcode()
	// opcode_position
	if op.Transport() != rdma.TransportUC || !op.IsRDMAWrite() {
		return switchmodel.DropOpcode, 0
	}
	first := op.IsFirst()
	// receive_qp: (src, switch IP, QPN prefix), then qp_index < num_qps.
	rank, ok := r.ranks[src]
	qpn := pkt.BTH.DestQP()
	if !ok || qpn&0xFFFE00 != 0x800000|uint32(rank)<<16 {
		return switchmodel.DropUnknownQP, 0
	}
	qpIndex := qpn & 0x1FF
	// qp_room = num_qps − QPN[15:0] (16 bits): 0 or negative = out of range.
	if qpRoom := uint16(r.numQPs) - uint16(qpn); qpRoom == 0 || qpRoom&0x8000 != 0 {
		return switchmodel.DropUnknownQP, 0
	}
	idx := uint32(rank)*r.numQPs + qpIndex
	var rkey uint32
	if pkt.RETH != nil {
		rkey = pkt.RETH.RKey()
	}
	// set_qp: saturating subtractions from the job's pool index range
	// [pool_first_index, pool_end_index).
	below := satSub(2*r.poolBase, rkey)
	firstRoom := satSub(2*(r.poolBase+r.poolSlots), rkey)
	psn := pkt.BTH.PSN()
	lengthOK := len(pkt.Payload) == r.payload // ipv4.total_len == expected_len
	s := &r.rxQPState[idx]

	// rx_pool_index, beside rx_qp_state.
	var poolIndex uint32
	if first {
		r.rxPoolIndex[idx] = rkey // set_pool_index
	} else {
		r.rxPoolIndex[idx] += 2 // next_pool_index
	}
	poolIndex = r.rxPoolIndex[idx]

	// rx_high_psn (check_high_psn), beside rx_qp_state.
	psnKey := psn<<8 | 0x80   // psn_key = PSN ++ 0x80
	nextKey := psnKey + 0x100 // psn_key + 0x100 wraps the PSN at 2^24
	h := &r.rxHighPSN[idx]
	lo, hi := *h != 0, int32(psnKey-*h) < 0
	if !lo || !hi {
		*h = nextKey
	}
	staleVerdict := predicate(lo, hi)
	reason, pi := r.rxQPRules(s, first, lengthOK, below, firstRoom, psnKey, nextKey, poolIndex)
	if staleVerdict == predLoHi && reason == switchmodel.NotDropped {
		return switchmodel.DropStalePSN, 0
	}
	return reason, pi
}

// satSub is a |-| b (P4 saturating subtraction).
func satSub(a, b uint32) uint32 {
	if b > a {
		return 0
	}
	return a - b
}

// rxQPRules is rx_qp_state's part of the apply block; rx_qp_state holds
// PSN keys (psn_key form) and the room in pool index steps.
func (r *p4Receiver) rxQPRules(s *struct{ nextPSN, room uint32 }, first, lengthOK bool, below, firstRoom, psn, psnNext, poolIndex uint32) (switchmodel.DropReason, uint32) {

	invalidate := func() uint8 {
		v := predicate(s.nextPSN == psn, false)
		s.nextPSN = invalidPSN
		return v
	}
	switch {
	case first && !lengthOK:
		invalidate()
		return switchmodel.DropLength, 0
	case first && (below&0xFFFF != 0 || firstRoom&0xFFFF == 0):
		invalidate()
		return switchmodel.DropPoolRange, 0
	case first: // start_message
		s.nextPSN, s.room = psnNext, firstRoom
	case !lengthOK:
		if invalidate() == predLo {
			return switchmodel.DropLength, 0
		}
		return switchmodel.DropPSN, 0
	default: // continue_message
		lo, hi := s.nextPSN == psn, s.room > 2
		v := predicate(lo, hi)
		if lo && hi {
			s.nextPSN, s.room = psnNext, s.room-2
		} else {
			s.nextPSN = invalidPSN
		}
		switch {
		case v == predLo:
			return switchmodel.DropPoolRange, 0
		case v != predLoHi:
			return switchmodel.DropPSN, 0
		}
	}
	return switchmodel.NotDropped, poolIndex
}

// TestReceiverRulesMatchModel drives the Go model and the transcription of
// rdma_receiver.p4 with the same random request streams — in-order and
// gapped PSNs, pool indices inside, at the edges of and outside the job's
// range, wrong lengths, bad opcodes, unknown QPs — and requires the same
// verdict for every packet: the receiver's drop reason, or the same pool
// index.
func TestReceiverRulesMatchModel(t *testing.T) {
	const n, q, payload = 3, 2, 256
	job := &wire.Job{ID: 1, DType: wire.Int32, PacketSize: payload, PoolBase: 10, PoolSlots: 6}
	for r := 0; r < n; r++ {
		w := wire.Worker{Rank: r, Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(r + 2)}), MAC: []byte{2, 0, 0, 0, 0, byte(r + 2)}, RKey: 7}
		for i := 0; i < q; i++ {
			sq, _ := wire.P4AppQPN(r, i)
			w.QPNs = append(w.QPNs, 0x100+uint32(r*q+i))
			w.PSNs = append(w.PSNs, 0)
			w.SwitchQPNs = append(w.SwitchQPNs, sq)
		}
		job.Workers = append(job.Workers, w)
	}
	model, err := switchmodel.New(switchmodel.Config{PoolSize: 64, MaxPayload: 1024, MaxWorkers: 32})
	if err != nil {
		t.Fatal(err)
	}
	if err := model.AddJob(job); err != nil {
		t.Fatal(err)
	}
	p4 := newP4Receiver(job)

	ops := []rdma.Opcode{}
	for _, f := range []bool{true, false} {
		for _, l := range []bool{true, false} {
			for _, imm := range []bool{false, true} {
				if imm && !l {
					continue
				}
				ops = append(ops, rdma.WriteOpcode(rdma.TransportUC, f, l, imm))
			}
		}
	}
	rng := rand.New(rand.NewSource(15))
	nextPSN := make([]uint32, n*q)
	counts := map[switchmodel.DropReason]int{}
	buf := make([]byte, 2048)
	for k := 0; k < 200000; k++ {
		rank, qp := rng.Intn(n), rng.Intn(q)
		var op rdma.Opcode
		switch x := rng.Intn(100); {
		case x < 2:
			op = 0x24 // UC SEND ONLY: not a WRITE
		case x < 40:
			op = ops[rng.Intn(2)] // FIRST-ish: ONLY / ONLY WITH IMM or FIRST below
			if rng.Intn(2) == 0 {
				op = rdma.WriteOpcode(rdma.TransportUC, true, false, false)
			}
		default:
			op = ops[2+rng.Intn(len(ops)-2)]
		}
		qpn, _ := wire.P4AppQPN(rank, qp)
		switch rng.Intn(100) {
		case 0:
			qpn, _ = wire.P4AppQPN(rank, q+rng.Intn(3)) // a QP index the job has not
		case 1:
			qpn = rng.Uint32() & rdma.QPNMask
		}
		src := job.Workers[rank].Addr
		if rng.Intn(200) == 0 {
			src = netip.AddrFrom4([4]byte{10, 0, 0, 99})
		}
		qi := rank*q + qp
		psn := nextPSN[qi]
		if rng.Intn(20) == 0 {
			psn = (psn + uint32(rng.Intn(5)) - 2) & rdma.PSNMask // a gap or a repeat
		}
		if rng.Intn(500) == 0 {
			psn = rdma.PSNMask // the wrap
		}
		nextPSN[qi] = (psn + 1) & rdma.PSNMask
		// Pool indices around the job's range [20, 32): slots 9..16.
		rkey := uint32(2*(9+rng.Intn(8)) + rng.Intn(2))
		if rng.Intn(100) == 0 {
			rkey = rng.Uint32()
		}
		size := payload
		if rng.Intn(40) == 0 {
			size = 128
		}
		f := rdma.PacketFields{
			BTH:  rdma.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: qpn, PSN: psn},
			RETH: rdma.RETHFields{VA: 0, RKey: rkey, DMALen: uint32(size)},
			Imm:  0,
		}
		plen := size
		if !op.IsRDMAWrite() {
			plen = 16
		}
		nb := rdma.PacketLen(op, plen)
		if _, err := f.Encode(buf[:nb], plen); err != nil {
			t.Fatal(err)
		}
		var pkt rdma.Packet
		if err := pkt.Parse(buf[:nb]); err != nil {
			t.Fatal(err)
		}
		var md switchmodel.Metadata
		model.Process(src, &pkt, &md)
		want, wantPI := md.Reason, uint32(md.PoolIndex)
		switch want {
		case switchmodel.DropOpcode, switchmodel.DropUnknownQP, switchmodel.DropLength, switchmodel.DropPSN, switchmodel.DropPoolRange, switchmodel.DropStalePSN:
			wantPI = 0
		default: // passed the receiver (later controls may still drop)
			want = switchmodel.NotDropped
		}
		got, gotPI := p4.receive(src, &pkt)
		if got != want || gotPI != wantPI {
			t.Fatalf("packet %d (%v rank %d QP %d QPN %#x PSN %#x rkey %#x, %d B): model %v pool %d, rdma_receiver.p4 rules %v pool %d",
				k, op, rank, qp, qpn, psn, rkey, size, want, wantPI, got, gotPI)
		}
		counts[want]++
	}
	for _, r := range []switchmodel.DropReason{switchmodel.NotDropped, switchmodel.DropOpcode, switchmodel.DropUnknownQP, switchmodel.DropLength, switchmodel.DropPSN, switchmodel.DropPoolRange, switchmodel.DropStalePSN} {
		if counts[r] == 0 {
			t.Errorf("the stream never produced %v: the comparison does not cover it", r)
		}
	}
	t.Logf("verdicts: %v", counts)
}

// p4Sender is the transcription of rdma_sender.p4's tx_pos and psn
// registers for one job (index = rank·q + QP, the backend's psn_index).
type p4Sender struct {
	txPos []uint32 // tx_pos, TX_CLOSED at install
	psn   []uint32 // psn, the worker's PSN at install
}

// send returns in_order and, when in order, the result PSN: rdma_sender.p4's
// tx_step with eg_md.tx_next (pool index + 2, TX_CLOSED after a LAST/ONLY).
// A broadcast uses tx_start (FIRST/ONLY) / tx_continue (MIDDLE/LAST); a
// unicast (the answer to a retransmission) tx_start_unicast /
// tx_continue_unicast, which leave an open stream alone
// (switchmodel.RDMASender). TestSenderRegisterActions checks the .p4 has
// these four.
func (s *p4Sender) send(idx int, unicast, first, last bool, poolIndex uint32) (bool, uint32) {
	txNext := poolIndex + 2
	if last {
		txNext = txClosed
	}
	v := s.txPos[idx]
	switch {
	case first && unicast && v != txClosed: // tx_start_unicast: open, skip
		return false, 0
	case first: // tx_start, tx_start_unicast on a closed stream
		s.txPos[idx] = txNext
	case v == poolIndex: // tx_continue(_unicast)
		s.txPos[idx] = txNext
	case unicast && poolIndex < v: // tx_continue_unicast: behind (TX_CLOSED is above every index)
		return false, 0
	default:
		s.txPos[idx] = txClosed
		return false, 0 // results[RESULT_SKIPPED], drop
	}
	p := s.psn[idx] // next_psn: returns the old value, 32-bit increment
	s.psn[idx]++
	return true, p & rdma.PSNMask
}

// TestSenderRegisterActions: rdma_sender.p4 declares exactly the tx_pos
// register actions p4Sender.send transcribes (tx_start, tx_continue and
// their unicast forms), and tx_step's entries choose them by decision and
// position as send does.
func TestSenderRegisterActions(t *testing.T) {
	src := readP4Source(t).text["rdma_sender.p4"]
	re := regexp.MustCompile(`RegisterAction<.*?>\(tx_pos\)\s+(\w+)`)
	var got []string
	for _, m := range re.FindAllStringSubmatch(src, -1) {
		got = append(got, m[1])
	}
	want := []string{"tx_start", "tx_continue", "tx_start_unicast", "tx_continue_unicast"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tx_pos register actions in rdma_sender.p4: %v, want %v (the transcription in p4Sender.send)", got, want)
	}
	for _, e := range []string{
		"(DECISION_BROADCAST, 1) : start()",
		"(DECISION_BROADCAST, 0) : continue_()",
		"(DECISION_UNICAST, 1)   : start_unicast()",
		"(DECISION_UNICAST, 0)   : continue_unicast()",
	} {
		if !strings.Contains(src, e) {
			t.Errorf("rdma_sender.p4 tx_step has no entry %q", e)
		}
	}
}

// TestSenderRulesMatchModel: random request streams with lost packets and
// retransmissions make slots of one message complete out of order; for
// every result packet the model encodes (or skips with ErrOutOfOrder), the
// transcription of rdma_sender.p4's tx_pos/psn must skip the same packets
// and give the same PSNs.
func TestSenderRulesMatchModel(t *testing.T) {
	const n, q, payload = 3, 2, 256
	job := &wire.Job{ID: 1, DType: wire.Int32, PacketSize: payload, PoolBase: 0, PoolSlots: 32}
	for r := 0; r < n; r++ {
		w := wire.Worker{Rank: r, Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(r + 2)}), MAC: []byte{2, 0, 0, 0, 0, byte(r + 2)}, RKey: 7}
		for i := 0; i < q; i++ {
			sq, _ := wire.P4AppQPN(r, i)
			w.QPNs = append(w.QPNs, 0x100+uint32(r*q+i))
			w.PSNs = append(w.PSNs, rdma.PSNMask-uint32(3*(r*q+i))) // wraps soon
			w.SwitchQPNs = append(w.SwitchQPNs, sq)
		}
		job.Workers = append(job.Workers, w)
	}
	model, err := switchmodel.New(switchmodel.Config{PoolSize: 64, MaxPayload: 1024, MaxWorkers: 32})
	if err != nil {
		t.Fatal(err)
	}
	if err := model.AddJob(job); err != nil {
		t.Fatal(err)
	}
	snd := &p4Sender{txPos: make([]uint32, n*q), psn: make([]uint32, n*q)}
	for r, w := range job.Workers {
		for i := range w.PSNs {
			snd.txPos[r*q+i] = txClosed
			snd.psn[r*q+i] = w.PSNs[i]
		}
	}
	rng := rand.New(rand.NewSource(15))
	reqPSN := make([]uint32, n*q)
	buf := make([]byte, 2048)
	out := make([]byte, 2048)
	var sent, skipped int
	for round := 0; round < 100000; round++ {
		// A message of ppm packets on QP i, set s: slots 4i+8s … (4 per message).
		i, set, ppm := rng.Intn(q), rng.Intn(2), 1<<rng.Intn(3)
		base := uint32(2*(4*i+8*set) + set)
		rank := rng.Intn(n)
		qi := rank*q + i
		qpn, _ := wire.P4AppQPN(rank, i)
		for k := 0; k < ppm; k++ {
			psn := reqPSN[qi]
			reqPSN[qi] = (psn + 1) & rdma.PSNMask
			if rng.Intn(8) == 0 {
				continue // lost on the way to the switch: a PSN gap
			}
			op := rdma.WriteOpcode(rdma.TransportUC, k == 0, k == ppm-1, k == ppm-1)
			f := rdma.PacketFields{
				BTH:  rdma.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: qpn, PSN: psn},
				RETH: rdma.RETHFields{RKey: base, DMALen: uint32(ppm * payload)},
				Imm:  uint32(round),
			}
			nb := rdma.PacketLen(op, payload)
			if _, err := f.Encode(buf[:nb], payload); err != nil {
				t.Fatal(err)
			}
			var pkt rdma.Packet
			if err := pkt.Parse(buf[:nb]); err != nil {
				t.Fatal(err)
			}
			var md switchmodel.Metadata
			model.Process(job.Workers[rank].Addr, &pkt, &md)
			for d := 0; d < md.Dests(); d++ {
				dest := d
				if md.Decision == switchmodel.Unicast {
					dest = md.Rank
				}
				nr, _, err := model.EncodeResult(&md, d, out)
				inOrder, psnP4 := snd.send(dest*q+md.QP, md.Decision == switchmodel.Unicast, md.First, md.Last, uint32(md.PoolIndex))
				switch {
				case err == switchmodel.ErrOutOfOrder:
					if inOrder {
						t.Fatalf("round %d: %v result pool %d to rank %d QP %d: model skips it, rdma_sender.p4 rules send it", round, md.Decision, md.PoolIndex, dest, md.QP)
					}
					skipped++
				case err != nil:
					t.Fatal(err)
				default:
					var res rdma.Packet
					if err := res.Parse(out[:nr]); err != nil {
						t.Fatal(err)
					}
					if !inOrder || res.BTH.PSN() != psnP4 {
						t.Fatalf("round %d: %v result pool %d to rank %d QP %d: model PSN %#x, rdma_sender.p4 rules in order %v PSN %#x", round, md.Decision, md.PoolIndex, dest, md.QP, res.BTH.PSN(), inOrder, psnP4)
					}
					sent++
				}
			}
		}
	}
	if sent == 0 || skipped == 0 {
		t.Errorf("sent %d, skipped %d: the stream does not exercise both", sent, skipped)
	}
	t.Logf("result packets: %d sent, %d skipped out of order", sent, skipped)
}
