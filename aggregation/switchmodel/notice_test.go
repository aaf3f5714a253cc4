package switchmodel

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// TestGapNotice: a packet write that arrives after a PSN gap on its QP
// brings its sender a gap notice, a zero-length WRITE ONLY WITH IMMEDIATE
// on that QP's result stream naming the packet and the gap; nothing else
// does: no gap, a job without notices, a message write, a stale packet.
func TestGapNotice(t *testing.T) {
	const n, q, qp, rank = 3, 2, 1, 2
	newJob := func(notices bool) (*wire.Job, *Pipeline) {
		job := testJob(1, n, q, tBase, tSlots, 4*tVals)
		job.GapNotices = notices
		return job, mustPipeline(t, job)
	}
	const msg = 0x21
	id := func(k int) uint16 { return wire.PacketMsgID(msg, k, 4) }
	send := func(p *Pipeline, job *wire.Job, op rdma.Opcode, k int, psn uint32) *Metadata {
		t.Helper()
		r := req{op: op, qpn: job.Workers[rank].SwitchQPNs[qp], psn: psn, rkey: pi(tBase+uint32(k), 0), va: 0x1000 + uint64(k)*4*tVals,
			msgLen: 4 * tVals, imm: wire.MakeImm(id(k), 3, 0), payload: fill(tVals, 1)}
		if op == rdma.UCRDMAWriteFirst {
			r.msgLen = 2 * 4 * tVals
		}
		var md Metadata
		p.Process(job.Workers[rank].Addr, r.parsed(t), &md)
		return &md
	}
	job, p := newJob(true)
	w := job.Workers[rank]
	for k, psn := range []uint32{10, 11} {
		if md := send(p, job, rdma.UCRDMAWriteOnlyWithImm, k, psn); md.Notice || md.Decision != Consume {
			t.Fatalf("packet %d in sequence: notice %v, %v", k, md.Notice, md.Decision)
		}
	}
	// PSNs 12 and 13 lost: packet 4 (PSN 14) names the gap.
	md := send(p, job, rdma.UCRDMAWriteOnlyWithImm, 4, 14)
	if !md.Notice || md.Gap != 2 || md.Decision != Consume {
		t.Fatalf("after a gap of 2: notice %v gap %d, %v", md.Notice, md.Gap, md.Decision)
	}
	b := make([]byte, NoticeLen)
	nb, dst, err := p.EncodeNotice(md, b)
	if err != nil || dst != w.Addr || nb != NoticeLen {
		t.Fatalf("EncodeNotice: %d bytes to %v, %v", nb, dst, err)
	}
	var pk rdma.Packet
	if err := pk.Parse(b[:nb]); err != nil {
		t.Fatal(err)
	}
	if op := pk.BTH.Opcode(); op != rdma.UCRDMAWriteOnlyWithImm || pk.BTH.DestQP() != w.QPNs[qp] || pk.BTH.PSN() != w.PSNs[qp] {
		t.Errorf("notice %v to QPN %#x PSN %d, want WRITE ONLY WITH IMMEDIATE to %#x PSN %d", op, pk.BTH.DestQP(), pk.BTH.PSN(), w.QPNs[qp], w.PSNs[qp])
	}
	if pk.RETH == nil || pk.RETH.DMALen() != 0 || pk.RETH.RKey() != w.RKey || pk.RETH.VA() != 0x1000+4*4*tVals || len(pk.Payload) != 0 {
		t.Errorf("notice RETH %v, payload %d bytes: want length 0, the worker's rkey and the packet's address", pk.RETH, len(pk.Payload))
	}
	if imm := wire.Imm(pk.ImmDt.Imm()); imm != wire.GapNotice(id(4), 2, false) || imm.Gap() != 2 || imm.MsgID() != id(4) {
		t.Errorf("notice immediate %#x, want %#x", uint32(imm), uint32(wire.GapNotice(id(4), 2, false)))
	}
	if p.Counters.GapNotices != 1 {
		t.Errorf("GapNotices %d, want 1", p.Counters.GapNotices)
	}
	// The result stream's PSNs go on after the notice.
	for r := 0; r < n; r++ {
		if r == rank {
			continue
		}
		rq := req{op: rdma.UCRDMAWriteOnlyWithImm, qpn: job.Workers[r].SwitchQPNs[qp], psn: 7, rkey: pi(tBase+4, 0), va: 0x1000,
			msgLen: 4 * tVals, imm: wire.MakeImm(id(4), 0, 0), payload: fill(tVals, 1)}
		var md Metadata
		p.Process(job.Workers[r].Addr, rq.parsed(t), &md)
		if r == n-1 || (r == n-2 && rank == n-1) {
			res := emit(t, p, &md)
			if res[rank].psn != w.PSNs[qp]+1 {
				t.Errorf("result after the notice: PSN %d, want %d", res[rank].psn, w.PSNs[qp]+1)
			}
		}
	}
	// A stale packet (overtaken on the way) brings no notice; in
	// sequence again, none either.
	if md := send(p, job, rdma.UCRDMAWriteOnlyWithImm, 2, 12); md.Notice {
		t.Error("a stale packet brought a notice")
	}
	if md := send(p, job, rdma.UCRDMAWriteOnlyWithImm, 5, 15); md.Notice {
		t.Error("a packet in sequence brought a notice")
	}
	// A gap of more than MaxNoticeGap is named as MaxNoticeGap.
	if md := send(p, job, rdma.UCRDMAWriteOnlyWithImm, 6, 15+1+500); !md.Notice || md.Gap != 500 {
		t.Fatalf("gap of 500: notice %v gap %d", md.Notice, md.Gap)
	} else if _, _, err := p.EncodeNotice(md, b); err != nil || wire.Imm(rdma.ImmDt(b[rdma.BTHSize+rdma.RETHSize:]).Imm()).Gap() != wire.MaxNoticeGap {
		t.Errorf("gap of 500 encoded as %d (%v), want %d", wire.Imm(rdma.ImmDt(b[rdma.BTHSize+rdma.RETHSize:]).Imm()).Gap(), err, wire.MaxNoticeGap)
	}
	// A message write after a gap: its results are multi-packet messages,
	// which a one-packet notice would cut into.
	if md := send(p, job, rdma.UCRDMAWriteFirst, 8, 700); md.Notice {
		t.Error("a message write brought a notice")
	}
	// No notice is encoded while a multi-packet result message is open.
	md = send(p, job, rdma.UCRDMAWriteOnlyWithImm, 9, 800)
	if !md.Notice {
		t.Fatal("no notice after a gap")
	}
	p.Receiver.jobs[1].tx[rank*q+qp].open = true
	if _, _, err := p.EncodeNotice(md, b); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("notice into an open result message: %v, want ErrOutOfOrder", err)
	}
	// Without the job's notices, a gap brings none.
	job, p = newJob(false)
	send(p, job, rdma.UCRDMAWriteOnlyWithImm, 0, 10)
	if md = send(p, job, rdma.UCRDMAWriteOnlyWithImm, 3, 13); md.Notice {
		t.Error("a job without notices got one")
	}
	if _, _, err := p.EncodeNotice(md, b); !errors.Is(err, ErrNoResult) {
		t.Errorf("EncodeNotice without a notice: %v, want ErrNoResult", err)
	}
}

// TestTailProbe: a packet write without payload is a tail probe: it adds
// nothing and never brings a result; its PSN shows a gap like any packet's,
// and when its sender's contribution is missing from its slot a notice
// says so. A job without notices drops it as the wrong length.
func TestTailProbe(t *testing.T) {
	const n = 3
	job, p := noticeJob(t, n)
	id := wire.PacketMsgID(0x11, 0, 4)
	slot := uint32(tBase)
	send := func(p *Pipeline, job *wire.Job, rank int, psn uint32, payload []int32) *Metadata {
		t.Helper()
		r := req{op: rdma.UCRDMAWriteOnlyWithImm, qpn: job.Workers[rank].SwitchQPNs[0], psn: psn, rkey: pi(slot, 1), va: 0x2000,
			msgLen: uint32(4 * len(payload)), imm: wire.MakeImm(id, int8(rank), 0), payload: payload}
		var md Metadata
		p.Process(job.Workers[rank].Addr, r.parsed(t), &md)
		return &md
	}
	check := func(what string, md *Metadata, d Decision, r DropReason, notice, missing bool, gap uint32) {
		t.Helper()
		if md.Decision != d || md.Reason != r || md.Notice != notice || md.Missing != missing || md.Gap != gap {
			t.Errorf("%s: %v (%v), notice %v missing %v gap %d; want %v (%v), notice %v missing %v gap %d",
				what, md.Decision, md.Reason, md.Notice, md.Missing, md.Gap, d, r, notice, missing, gap)
		}
	}
	check("rank 0's packet", send(p, job, 0, 10, fill(tVals, 1)), Consume, NotDropped, false, false, 0)
	check("rank 0's tail probe", send(p, job, 0, 11, nil), Drop, DropTailProbe, false, false, 0)
	check("rank 1's packet", send(p, job, 1, 20, fill(tVals, 2)), Consume, NotDropped, false, false, 0)
	// Rank 2's packet (PSN 30) lost: its tail probe shows the gap and
	// the missing contribution.
	slot = tBase + 1
	check("rank 2's packet of another slot", send(p, job, 2, 29, fill(tVals, 4)), Consume, NotDropped, false, false, 0)
	slot = tBase
	md := send(p, job, 2, 31, nil)
	check("rank 2's tail probe, its packet lost", md, Drop, DropTailProbeMissing, true, true, 1)
	b := make([]byte, NoticeLen)
	if nb, dst, err := p.EncodeNotice(md, b); err != nil || dst != job.Workers[2].Addr {
		t.Fatalf("EncodeNotice: %v to %v", err, dst)
	} else if imm := wire.Imm(rdma.ImmDt(b[rdma.BTHSize+rdma.RETHSize : nb]).Imm()); !imm.Missing() || imm.Gap() != 1 || imm.MsgID() != id {
		t.Errorf("notice immediate %#x: want the probe's id, missing, a gap of 1", uint32(imm))
	}
	if v := p.Processor.Value(tBase, 1, 0); v != 3 {
		t.Errorf("the slot holds %d after the tail probes, want 3: a probe added something", v)
	}
	check("rank 2's resend", send(p, job, 2, 32, fill(tVals, 4)), Broadcast, NotDropped, false, false, 0)
	check("rank 1's tail probe, slot complete", send(p, job, 1, 21, nil), Drop, DropTailProbe, false, false, 0)
	if p.Counters.TailProbes != 3 || p.Counters.Drops[DropTailProbeMissing] != 1 {
		t.Errorf("TailProbes %d, missing %d; want 3 and 1", p.Counters.TailProbes, p.Counters.Drops[DropTailProbeMissing])
	}
	// Without the job's notices a tail probe is a packet of the wrong
	// length.
	job = testJob(2, n, 1, tBase, tSlots, 4*tVals)
	p = mustPipeline(t, job)
	check("a tail probe, no notices", send(p, job, 0, 10, nil), Drop, DropLength, false, false, 0)
}

// TestResultProbe: a tail probe with e1 = wire.ResultProbe is answered as a
// resend of its packet would be — nothing while the slot waits for another
// worker, a whole packet's result to its sender alone once the slot is
// complete — and, like any tail probe, with a notice when its sender's
// contribution is missing; it adds nothing to the slot.
func TestResultProbe(t *testing.T) {
	job, p := noticeJob(t, 3)
	id := wire.PacketMsgID(0x21, 0, 4)
	send := func(rank int, psn uint32, payload []int32, e1 int8) *Metadata {
		t.Helper()
		r := req{op: rdma.UCRDMAWriteOnlyWithImm, qpn: job.Workers[rank].SwitchQPNs[0], psn: psn, rkey: pi(tBase, 1), va: 0x3000,
			msgLen: uint32(4 * len(payload)), imm: wire.MakeImm(id, int8(rank), e1), payload: payload}
		var md Metadata
		p.Process(job.Workers[rank].Addr, r.parsed(t), &md)
		return &md
	}
	check := func(what string, md *Metadata, d Decision, r DropReason, notice bool) {
		t.Helper()
		if md.Decision != d || md.Reason != r || md.Notice != notice {
			t.Errorf("%s: %v (%v), notice %v; want %v (%v), notice %v", what, md.Decision, md.Reason, md.Notice, d, r, notice)
		}
	}
	check("rank 0's packet", send(0, 10, fill(tVals, 1), 0), Consume, NotDropped, false)
	check("rank 0's result probe, slot incomplete", send(0, 11, nil, wire.ResultProbe), Drop, DropRetransmitIncomplete, false)
	check("rank 2's result probe, its packet lost", send(2, 30, nil, wire.ResultProbe), Drop, DropTailProbeMissing, true)
	check("rank 1's packet", send(1, 20, fill(tVals, 2), 0), Consume, NotDropped, false)
	check("rank 2's resend", send(2, 31, fill(tVals, 4), 0), Broadcast, NotDropped, false)
	md := send(0, 12, nil, wire.ResultProbe)
	check("rank 0's result probe, slot complete", md, Unicast, NotDropped, false)
	if md.Dests() != 1 {
		t.Fatalf("the answer goes to %d workers, want its sender alone", md.Dests())
	}
	b := make([]byte, 4096)
	nb, dst, err := p.EncodeResult(md, 0, b)
	if err != nil || dst != job.Workers[0].Addr {
		t.Fatalf("EncodeResult: %v to %v", err, dst)
	}
	off := rdma.BTHSize + rdma.RETHSize
	if l := rdma.RETH(b[rdma.BTHSize:]).DMALen(); l != 4*tVals {
		t.Errorf("the answer's RETH length %d, want a whole packet's %d", l, 4*tVals)
	}
	if imm := wire.Imm(rdma.ImmDt(b[off:]).Imm()); imm.MsgID() != id {
		t.Errorf("the answer's message id %#x, want the probe's %#x", imm.MsgID(), id)
	}
	off += rdma.ImmDtSize
	if nb < off+4*tVals {
		t.Fatalf("the answer is %d bytes, want a payload of %d", nb, 4*tVals)
	}
	for i := range tVals {
		if v := int32(binary.BigEndian.Uint32(b[off+4*i:])); v != 7 {
			t.Fatalf("the answer's element %d is %d, want the sum 7", i, v)
		}
	}
	if p.Counters.ResultProbes != 3 || p.Counters.TailProbes != 3 {
		t.Errorf("ResultProbes %d, TailProbes %d; want 3 and 3", p.Counters.ResultProbes, p.Counters.TailProbes)
	}
	// A plain tail probe into the complete slot still brings nothing.
	check("rank 1's tail probe, slot complete", send(1, 21, nil, 0), Drop, DropTailProbe, false)
}

// noticeJob is a job of n workers, one QP each, that takes gap notices,
// and a pipeline that runs it.
func noticeJob(t *testing.T, n int) (*wire.Job, *Pipeline) {
	t.Helper()
	job := testJob(1, n, 1, tBase, tSlots, 4*tVals)
	job.GapNotices = true
	return job, mustPipeline(t, job)
}
