package wire

import (
	"errors"
	"net"
	"net/netip"
	"reflect"
	"testing"
)

func TestPoolIndex(t *testing.T) {
	p := MakePoolIndex(1000, 1)
	if uint32(p) != 2001 || p.Slot() != 1000 || p.Set() != 1 {
		t.Fatalf("MakePoolIndex(1000, 1) = %d slot %d set %d", p, p.Slot(), p.Set())
	}
	if q := p.Add(3); q.Slot() != 1003 || q.Set() != 1 {
		t.Fatalf("packet 3 of the message: slot %d set %d", q.Slot(), q.Set())
	}
}

func TestImm(t *testing.T) {
	tests := []struct {
		id     uint16
		e0, e1 int8
		wire   uint32
	}{
		{0x1234, 5, 0, 0x12340500},
		{0xFFFF, -128, 127, 0xFFFF807F},
		{0, -1, -2, 0x0000FFFE},
	}
	for _, tt := range tests {
		i := MakeImm(tt.id, tt.e0, tt.e1)
		if uint32(i) != tt.wire || i.MsgID() != tt.id || i.E0() != tt.e0 || i.E1() != tt.e1 {
			t.Errorf("MakeImm(%#x, %d, %d) = %#08x (id %#x e0 %d e1 %d), want %#08x", tt.id, tt.e0, tt.e1, uint32(i), i.MsgID(), i.E0(), i.E1(), tt.wire)
		}
	}
	if got := MakeImm(7, 1, 1).WithExponents(-3, 2); got.MsgID() != 7 || got.E0() != -3 || got.E1() != 2 {
		t.Fatalf("WithExponents: %#x", uint32(got))
	}
}

func TestP4AppQPN(t *testing.T) {
	q, err := P4AppQPN(31, 511)
	if err != nil || q != 0x9F01FF {
		t.Fatalf("P4AppQPN(31, 511) = %#x, %v", q, err)
	}
	r, i, ok := P4AppQPNDecode(q)
	if !ok || r != 31 || i != 511 {
		t.Fatalf("decode %#x = %d %d %v", q, r, i, ok)
	}
	if _, err := P4AppQPN(32, 0); err == nil {
		t.Fatal("rank 32 accepted")
	}
	if _, _, ok := P4AppQPNDecode(0x000011); ok {
		t.Fatal("decoded a non-p4app QPN")
	}
}

func TestJobValidate(t *testing.T) {
	good := func() Job {
		return Job{ID: 1, PacketSize: 1024, PoolSlots: 8, Workers: []Worker{
			{Rank: 0, Addr: netip.MustParseAddr("127.0.0.2"), QPNs: []uint32{17}, PSNs: []uint32{0}, SwitchQPNs: []uint32{0x100}},
			{Rank: 1, Addr: netip.MustParseAddr("127.0.0.3"), QPNs: []uint32{17}, PSNs: []uint32{0}, SwitchQPNs: []uint32{0x101}},
		}}
	}
	j := good()
	if err := j.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Job){
		"no workers":  func(j *Job) { j.Workers = nil },
		"packet size": func(j *Job) { j.PacketSize = 1000 },
		"empty pool":  func(j *Job) { j.PoolSlots = 0 },
		"rank order":  func(j *Job) { j.Workers[1].Rank = 5 },
		"no address":  func(j *Job) { j.Workers[0].Addr = netip.Addr{} },
		"QP count":    func(j *Job) { j.Workers[1].QPNs = []uint32{1, 2} },
		"switch QPNs": func(j *Job) { j.Workers[0].SwitchQPNs = nil },
		"width 3":     func(j *Job) { j.ElementBytes = 3 },
		"width 8":     func(j *Job) { j.ElementBytes = 8 },
		"int32 on 16": func(j *Job) { j.DType, j.ElementBytes = Int32, 2 },
	} {
		j := good()
		mod(&j)
		if err := j.Validate(); !errors.Is(err, ErrBadJob) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
	for _, eb := range []uint8{0, 2, 4} {
		j := good()
		j.ElementBytes = eb
		if err := j.Validate(); err != nil {
			t.Errorf("ElementBytes %d: %v", eb, err)
		}
		if want := map[uint8]int{0: 4, 2: 2, 4: 4}[eb]; j.LaneBytes() != want {
			t.Errorf("ElementBytes %d: LaneBytes = %d, want %d", eb, j.LaneBytes(), want)
		}
	}
	if _, err := ParseDType("float64"); err == nil {
		t.Fatal("float64 accepted")
	}
}

// TestJobClone: the copy equals the job and shares no memory with it, so
// changing every slice of the original leaves the copy as it was.
func TestJobClone(t *testing.T) {
	orig := Job{ID: 7, DType: Int32, PacketSize: 256, ElementBytes: 4, PoolBase: 16, PoolSlots: 8, Workers: []Worker{
		{Rank: 0, Addr: netip.MustParseAddr("10.0.0.2"), MAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, RKey: 5,
			QPNs: []uint32{17, 18}, PSNs: []uint32{1, 2}, SwitchQPNs: []uint32{0x100, 0x101}},
		{Rank: 1, Addr: netip.MustParseAddr("10.0.0.3"), MAC: net.HardwareAddr{2, 0, 0, 0, 0, 3}, RKey: 6,
			QPNs: []uint32{19, 20}, PSNs: []uint32{3, 4}, SwitchQPNs: []uint32{0x102, 0x103}},
	}}
	c := orig.Clone()
	if !reflect.DeepEqual(c, orig) {
		t.Fatalf("clone %+v differs from %+v", c, orig)
	}
	want := orig.Clone()
	orig.ID, orig.PoolBase = 8, 99
	orig.Workers[0].Rank = 5
	for i := range orig.Workers {
		w := &orig.Workers[i]
		w.MAC[5] = 0xff
		w.QPNs[0], w.PSNs[0], w.SwitchQPNs[0] = 0, 0, 0
	}
	orig.Workers = append(orig.Workers, Worker{Rank: 2})
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("changing the original changed the clone: %+v, want %+v", c, want)
	}
}
