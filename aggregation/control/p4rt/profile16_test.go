package p4rt

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

func loadFixtureWire16(t *testing.T) *P4Info {
	t.Helper()
	info, err := LoadP4Info("testdata/p4info_wire16.txt")
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestParityProfileWire16Constants: the WIRE_16 profile's constants and
// types agree with the backend's (256 B payloads of 128 int16 lanes, two
// 128 B chunks, the Processor entry two bit<16> halves), and the 32-bit
// profiles keep int32 lanes.
func TestParityProfileWire16Constants(t *testing.T) {
	src := readP4SourceProfile(t, p4Profiles["wire-16"])
	def := readP4Source(t)
	p1024 := readP4SourceProfile(t, p4Profiles["payload-1024"])
	c := src.consts
	for name, want := range map[string]int64{
		"PAYLOAD_BYTES":        packetSize256,
		"IPV4_LEN_NO_EXT":      20 + 8 + rdma.BTHSize + packetSize256 + rdma.ICRCSize,
		"VALUES_PER_PACKET":    packetSize256 / 2,
		"CHUNK_BYTES":          packetSize256 / 2, // 64 int16 lanes per pass: the 32 Processors' halves
		"NUM_CHUNKS":           2,                 // pipes 0 and 1
		"LAST_CHUNK":           1,
		"LOOPBACK_KEY_ENTRIES": loopbackKeyEntries,
		"LOOPBACK_KEY_LO":      loopbackKeyShift,
		"RECIRC_PORT_LOW":      recircPortLow,
		"RECIRC_PORT_PIPE0":    recircPortLow,
		"NUM_SLOTS":            def.consts["NUM_SLOTS"],
	} {
		got, ok := c[name]
		if !ok {
			t.Errorf("WIRE_16: the .p4 has no %s", name)
		} else if got != want {
			t.Errorf("WIRE_16: %s = %d in the .p4, backend %d", name, got, want)
		}
	}
	// The lane width: PAYLOAD_BYTES / VALUES_PER_PACKET, value_t, and the
	// Processor register's halves (what P4Info.elementBytes reads).
	for _, p := range []struct {
		name  string
		src   *p4Source
		bytes int
	}{{"wire-16", src, 2}, {"default", def, 4}, {"payload-1024", p1024, 4}} {
		// (The 1024 B profile's VALUES_PER_PACKET counts one pass's chunk.)
		if got := p.src.consts["PAYLOAD_BYTES"] / p.src.consts["VALUES_PER_PACKET"]; p.name != "payload-1024" && got != int64(p.bytes) {
			t.Errorf("%s: PAYLOAD_BYTES / VALUES_PER_PACKET = %d B a lane, want %d", p.name, got, p.bytes)
		}
		if w := p.src.widths["value_t"]; w != 8*p.bytes {
			t.Errorf("%s: value_t is %d bits, want %d", p.name, w, 8*p.bytes)
		}
		pair := p.src.structs["value_pair_t"]
		if pair["first"] != "value_t" || pair["second"] != "value_t" || len(pair) != 2 {
			t.Errorf("%s: value_pair_t is %v, want {first, second value_t}", p.name, pair)
		}
	}
	if src.headers["payload_h"] != 8*int(c["CHUNK_BYTES"]) {
		t.Errorf("WIRE_16: payload_h is %d bits, one chunk window is %d B", src.headers["payload_h"], c["CHUNK_BYTES"])
	}
	if 1<<src.widths["chunk_t"] < c["NUM_CHUNKS"] {
		t.Errorf("chunk_t (%d bits) cannot hold %d chunks", src.widths["chunk_t"], c["NUM_CHUNKS"])
	}
	if src.headers["bridged_md_h"] != def.headers["bridged_md_h"] {
		t.Errorf("bridged_md_h: %d bits with WIRE_16, %d without (the egress parse depths assume one size)", src.headers["bridged_md_h"], def.headers["bridged_md_h"])
	}
}

// TestParityProfileWire16Names: the profile declares the loopback_port
// table with the backend's key and parameters, its P4Info fixture is
// exactly its entities, and the backend reads each fixture's profile:
// lane width, payload size and name.
func TestParityProfileWire16Names(t *testing.T) {
	n := expand(parseP4Profile(t, p4Profiles["wire-16"]))
	if keys, ok := n.tables[tableLoopbackPort]; !ok || strings.Join(keys, ",") != fieldLoopbackKey {
		t.Errorf("WIRE_16: table %s keys %v (declared %v), backend %s", tableLoopbackPort, keys, ok, fieldLoopbackKey)
	}
	if ps := n.actions[actionSetLoopbackPort]; strings.Join(ps, ",") != strings.Join(paramsSetLoopbackPort, ",") {
		t.Errorf("WIRE_16: action %s parameters %v, backend %v", actionSetLoopbackPort, ps, paramsSetLoopbackPort)
	}
	tables, _, registers, counters := usedEntities()
	for tb := range tables {
		if _, ok := n.tables[tb]; !ok {
			t.Errorf("WIRE_16: table %s (backend) is not declared", tb)
		}
	}
	for _, r := range registers {
		if !n.registers[r] {
			t.Errorf("WIRE_16: register %s (backend) is not declared", r)
		}
	}
	for _, c := range counters {
		if !n.counters[c] {
			t.Errorf("WIRE_16: counter %s (backend) is not declared", c)
		}
	}
	info := loadFixtureWire16(t)
	compareP4InfoFixture(t, n, info)
	for _, f := range []struct {
		name    string
		info    *P4Info
		bytes   int
		size    int
		profile string
	}{
		{"p4info_wire16.txt", info, 2, packetSize256, "16-bit"},
		{"p4info.txt", loadFixture(t), 4, packetSize256, "256 B"},
		{"p4info_1024.txt", loadFixture1024(t), 4, packetSize1024, "1024 B"},
	} {
		if got := f.info.elementBytes(); got != f.bytes {
			t.Errorf("%s: ElementBytes %d, want %d", f.name, got, f.bytes)
		}
		if got := f.info.packetSize(); got != f.size {
			t.Errorf("%s: packetSize %d, want %d", f.name, got, f.size)
		}
		if got := f.info.profile(); got != f.profile {
			t.Errorf("%s: Profile %q, want %q", f.name, got, f.profile)
		}
	}
	// Every Processor's register has the same halves.
	for k := 0; k < numProcessors; k++ {
		if _, ws, err := info.registerLayout(registerProcessor(k)); err != nil || len(ws) != 2 || ws[0] != 16 || ws[1] != 16 {
			t.Errorf("fixture %s: layout %v (%v), want [16 16]", registerProcessor(k), ws, err)
		}
	}
}

func jobWire16() *wire.Job {
	j := testJob()
	j.DType, j.ElementBytes = wire.Float32, 2
	return j
}

// TestProgrammerWire16Profile: with the 16-bit program's P4Info the
// backend writes the loopback_port keys as for the 1024 B profile, installs
// 16-bit jobs of 256 B packets, and refuses 32-bit jobs with
// wire.ErrElementWidth naming both widths; the 32-bit programs refuse
// 16-bit jobs the same way.
func TestProgrammerWire16Profile(t *testing.T) {
	info := loadFixtureWire16(t)
	f, conn := startFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := New(ctx, conn, config1024(info))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.elementBytes() != 2 || p.packetSize() != packetSize256 {
		t.Fatalf("elementBytes %d, packetSize %d", p.elementBytes(), p.packetSize())
	}
	f.mu.Lock()
	keys := 0
	for _, u := range f.writes {
		if te := u.GetEntity().GetTableEntry(); te != nil && decodeEntry(t, info, te).table == tableLoopbackPort && u.GetType() == p4v1.Update_INSERT {
			keys++
		}
	}
	f.mu.Unlock()
	if keys != loopbackKeyEntries {
		t.Errorf("%d loopback_port entries, want %d", keys, loopbackKeyEntries)
	}

	for _, tc := range []struct {
		name string
		job  func() *wire.Job
		want error
		text string
	}{
		{"32-bit float32", testJob, wire.ErrElementWidth, "32-bit elements: the 16-bit program sums 16-bit lanes"},
		{"32-bit int32", func() *wire.Job { j := testJob(); j.DType = wire.Int32; return j }, wire.ErrElementWidth, "32-bit elements"},
		{"16-bit 1024 B", func() *wire.Job { j := jobWire16(); j.PacketSize = packetSize1024; return j }, wire.ErrBadJob, "256 B"},
	} {
		err := p.AddJob(ctx, tc.job())
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s job on the 16-bit program: %v, want %v saying %q", tc.name, err, tc.want, tc.text)
		}
		if tc.want == wire.ErrElementWidth && len(err.Error()) >= 120 {
			t.Errorf("%s: error of %d characters", tc.name, len(err.Error()))
		}
	}
	j := jobWire16()
	if err := p.AddJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if got := p.jobIDs(); len(got) != 1 || got[0] != j.ID {
		t.Errorf("Jobs %v after adding job %d", got, j.ID)
	}
	f.mu.Lock()
	groups := len(f.groups)
	f.mu.Unlock()
	if groups != 1 {
		t.Errorf("%d multicast groups", groups)
	}
	if err := p.RemoveJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}

	// The 32-bit programs refuse a 16-bit job before anything is written.
	for _, tc := range []struct {
		name string
		info *P4Info
		cfg  func(*P4Info) Config
		job  func() *wire.Job
		text string
	}{
		{"256 B", loadFixture(t), testConfig, jobWire16, "16-bit elements: the 256 B program sums 32-bit lanes"},
		{"1024 B", loadFixture1024(t), config1024, func() *wire.Job { j := jobWire16(); j.PacketSize = packetSize1024; return j }, "16-bit elements: the 1024 B program sums 32-bit lanes"},
	} {
		f, conn := startFake(t)
		p, err := New(ctx, conn, tc.cfg(tc.info))
		if err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		before := len(f.writes)
		f.mu.Unlock()
		err = p.AddJob(ctx, tc.job())
		if !errors.Is(err, wire.ErrElementWidth) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("16-bit job on the %s program: %v, want ErrElementWidth saying %q", tc.name, err, tc.text)
		}
		f.mu.Lock()
		if len(f.writes) != before {
			t.Errorf("%s program: the refused job wrote %d updates", tc.name, len(f.writes)-before)
		}
		f.mu.Unlock()
		p.Close()
	}
}

// TestProgrammerWire16ProfileRefusesConfigs: the 16-bit program needs the
// pipe-1 loopback ports and workers on pipe 0 as the 1024 B one does, and
// says which profile it is.
func TestProgrammerWire16ProfileRefusesConfigs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no loopback ports", func(c *Config) { c.LoopbackPorts = nil }, "16-bit profile: pass the loopback ports of pipe 1"},
		{"loopback port in pipe 2", func(c *Config) { c.LoopbackPorts = []uint32{260} }, "not in pipe 1"},
		{"worker on pipe 1", func(c *Config) {
			for a := range c.Ports {
				c.Ports[a] = 132
				break
			}
		}, "the 16-bit profile needs workers on pipe 0 ports"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, conn := startFake(t)
			cfg := config1024(loadFixtureWire16(t))
			tc.change(&cfg)
			p, err := New(ctx, conn, cfg)
			if err == nil {
				p.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}
