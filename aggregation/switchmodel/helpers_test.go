package switchmodel

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// testJob builds a job of n workers with q QPs each: worker r is
// 127.0.<id>.<r+2>, its switch QPNs are id<<12 | r·q+i, its own QPNs
// 0x8000 + r·q + i, its result PSNs start at 1000·(r+1) + i.
func testJob(id uint32, n, q int, poolBase, poolSlots uint32, payload int) *wire.Job {
	j := &wire.Job{ID: id, DType: wire.Int32, PacketSize: payload, PoolBase: poolBase, PoolSlots: poolSlots}
	for r := 0; r < n; r++ {
		w := wire.Worker{
			Rank: r,
			Addr: netip.AddrFrom4([4]byte{127, 0, byte(id), byte(r + 2)}),
			RKey: 0xAB00 + uint32(r),
		}
		for i := 0; i < q; i++ {
			w.QPNs = append(w.QPNs, 0x8000+uint32(r*q+i))
			w.PSNs = append(w.PSNs, uint32(1000*(r+1)+i))
			w.SwitchQPNs = append(w.SwitchQPNs, id<<12|uint32(r*q+i))
		}
		j.Workers = append(j.Workers, w)
	}
	return j
}

// req describes one request packet.
type req struct {
	op      rdma.Opcode
	qpn     uint32
	psn     uint32
	rkey    uint32 // FIRST/ONLY
	va      uint64
	msgLen  uint32
	imm     wire.Imm // LAST/ONLY with immediate
	payload []int32
}

func (q req) bytes(t testing.TB) []byte {
	t.Helper()
	pl := make([]byte, 4*len(q.payload))
	for i, v := range q.payload {
		binary.BigEndian.PutUint32(pl[4*i:], uint32(v))
	}
	f := rdma.PacketFields{
		BTH:  rdma.BTHFields{Opcode: q.op, PKey: 0xFFFF, DestQP: q.qpn, PSN: q.psn},
		RETH: rdma.RETHFields{VA: q.va, RKey: q.rkey, DMALen: q.msgLen},
		Imm:  uint32(q.imm),
	}
	b := make([]byte, rdma.PacketLen(q.op, len(pl)))
	off, err := f.Encode(b, len(pl))
	if err != nil {
		t.Fatal(err)
	}
	copy(b[off:], pl)
	return b
}

func (q req) parsed(t testing.TB) *rdma.Packet {
	t.Helper()
	var p rdma.Packet
	if err := p.Parse(q.bytes(t)); err != nil {
		t.Fatal(err)
	}
	return &p
}

func fill(n int, v int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// result is a decoded result packet.
type result struct {
	dst     netip.Addr
	op      rdma.Opcode
	qpn     uint32
	psn     uint32
	va      uint64
	rkey    uint32
	msgLen  uint32
	imm     wire.Imm
	payload []int32
}

func (r result) String() string {
	return fmt.Sprintf("%v %v qpn %#x psn %d imm %#x", r.dst, r.op, r.qpn, r.psn, uint32(r.imm))
}

// emit encodes every result packet of md and decodes it back.
func emit(t testing.TB, p *Pipeline, md *Metadata) []result {
	t.Helper()
	var out []result
	for d := 0; d < md.Dests(); d++ {
		b := make([]byte, md.ResultLen())
		n, dst, err := p.EncodeResult(md, d, b)
		if err != nil {
			t.Fatal(err)
		}
		var pk rdma.Packet
		if err := pk.Parse(b[:n]); err != nil {
			t.Fatal(err)
		}
		r := result{dst: dst, op: pk.BTH.Opcode(), qpn: pk.BTH.DestQP(), psn: pk.BTH.PSN()}
		if pk.RETH != nil {
			r.va, r.rkey, r.msgLen = pk.RETH.VA(), pk.RETH.RKey(), pk.RETH.DMALen()
		}
		if pk.ImmDt != nil {
			r.imm = wire.Imm(pk.ImmDt.Imm())
		}
		for i := 0; i+4 <= len(pk.Payload); i += 4 {
			r.payload = append(r.payload, int32(binary.BigEndian.Uint32(pk.Payload[i:])))
		}
		out = append(out, r)
	}
	return out
}

func mustPipeline(t testing.TB, jobs ...*wire.Job) *Pipeline {
	t.Helper()
	p, err := New(Config{PoolSize: 64, MaxPayload: 1024, MaxWorkers: 128})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if err := p.AddJob(j); err != nil {
			t.Fatal(err)
		}
	}
	return p
}
