package p4rt

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

func loadFixture1024(t *testing.T) *P4Info {
	t.Helper()
	info, err := LoadP4Info("testdata/p4info_1024.txt")
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestParityProfile1024Constants: the PAYLOAD_1024 profile's constants in
// configuration.p4 / types.p4 agree with the backend's, and the 256 B
// profiles are untouched by it.
func TestParityProfile1024Constants(t *testing.T) {
	src := readP4SourceProfile(t, p4Profiles["payload-1024"])
	def := readP4Source(t)
	c := src.consts
	for name, want := range map[string]int64{
		"PAYLOAD_BYTES":        packetSize1024,
		"IPV4_LEN_NO_EXT":      20 + 8 + rdma.BTHSize + packetSize1024 + rdma.ICRCSize,
		"CHUNK_BYTES":          packetSize256,                  // one 256 B window per pass
		"NUM_CHUNKS":           packetSize1024 / packetSize256, // = Tofino 1's 4 pipes
		"LAST_CHUNK":           packetSize1024/packetSize256 - 1,
		"LOOPBACK_KEY_ENTRIES": loopbackKeyEntries,
		"LOOPBACK_KEY_LO":      loopbackKeyShift,
		"RECIRC_PORT_LOW":      recircPortLow,
		"RECIRC_PORT_PIPE0":    recircPortLow,
		"NUM_SLOTS":            def.consts["NUM_SLOTS"], // the controller's pool size does not change
		"VALUES_PER_PACKET":    packetSize256 / 4,       // per pass
	} {
		got, ok := c[name]
		if !ok {
			t.Errorf("PAYLOAD_1024: the .p4 has no %s", name)
		} else if got != want {
			t.Errorf("PAYLOAD_1024: %s = %d in the .p4, backend %d", name, got, want)
		}
	}
	// The key is LOOPBACK_KEY_HI..LO of the pool index, into a field as
	// wide as that slice, with one table entry per value.
	keyBits := c["LOOPBACK_KEY_HI"] - c["LOOPBACK_KEY_LO"] + 1
	if 1<<keyBits != loopbackKeyEntries {
		t.Errorf("loopback key slice [%d:%d] has %d values, LOOPBACK_KEY_ENTRIES %d", c["LOOPBACK_KEY_HI"], c["LOOPBACK_KEY_LO"], 1<<keyBits, loopbackKeyEntries)
	}
	if w, err := src.width(src.structs["ingress_metadata_t"]["loopback_key"]); err != nil || int64(w) != keyBits {
		t.Errorf("ingress_metadata_t.loopback_key is %d bits (%v), the key slice %d", w, err, keyBits)
	}
	// Passes: four distinct codes in pass_t.
	passes := map[int64]string{}
	for _, name := range []string{"PASS_REQUEST", "PASS_HARVEST", "PASS_CONSUME", "PASS_HARVEST_INSERT"} {
		v, ok := c[name]
		if !ok {
			t.Errorf("PAYLOAD_1024: no %s", name)
			continue
		}
		if other, dup := passes[v]; dup {
			t.Errorf("%s and %s are both %d", name, other, v)
		}
		if v >= 1<<src.widths["pass_t"] {
			t.Errorf("%s = %d does not fit pass_t (%d bits)", name, v, src.widths["pass_t"])
		}
		passes[v] = name
	}
	if 1<<src.widths["chunk_t"] != numPipes1024 {
		t.Errorf("chunk_t has %d values, the profile uses %d pipes", 1<<src.widths["chunk_t"], numPipes1024)
	}
	// The bridged header keeps its size: the egress parse depths are the
	// 256 B profile's.
	if src.headers["bridged_md_h"] != def.headers["bridged_md_h"] || src.headers["bridged_md_h"]%8 != 0 {
		t.Errorf("bridged_md_h: %d bits with PAYLOAD_1024, %d without (must be equal and byte aligned)", src.headers["bridged_md_h"], def.headers["bridged_md_h"])
	}
	// The 256 B profiles have none of it.
	for _, profile := range []string{"default", "test"} {
		s := readP4SourceProfile(t, p4Profiles[profile])
		if s.consts["PAYLOAD_BYTES"] != packetSize256 {
			t.Errorf("%s profile: PAYLOAD_BYTES = %d, want %d", profile, s.consts["PAYLOAD_BYTES"], packetSize256)
		}
		for _, name := range []string{"CHUNK_BYTES", "PASS_CONSUME", "LOOPBACK_KEY_ENTRIES"} {
			if _, ok := s.consts[name]; ok {
				t.Errorf("%s profile declares %s (PAYLOAD_1024 only)", profile, name)
			}
		}
	}
}

// TestParityProfile1024Names: the profile's table is declared in the .p4
// with the backend's key and parameters, only under PAYLOAD_1024, and the
// profile's P4Info fixture is exactly the profile's entities.
func TestParityProfile1024Names(t *testing.T) {
	n := expand(parseP4Profile(t, p4Profiles["payload-1024"]))
	if keys, ok := n.tables[tableLoopbackPort]; !ok || strings.Join(keys, ",") != fieldLoopbackKey {
		t.Errorf("PAYLOAD_1024: table %s keys %v (declared %v), backend %s", tableLoopbackPort, keys, ok, fieldLoopbackKey)
	}
	if ps := n.actions[actionSetLoopbackPort]; strings.Join(ps, ",") != strings.Join(paramsSetLoopbackPort, ",") {
		t.Errorf("PAYLOAD_1024: action %s parameters %v, backend %v", actionSetLoopbackPort, ps, paramsSetLoopbackPort)
	}
	tables, _, registers, counters := usedEntities()
	for tb := range tables {
		if _, ok := n.tables[tb]; !ok {
			t.Errorf("PAYLOAD_1024: table %s (backend) is not declared", tb)
		}
	}
	for _, r := range registers {
		if !n.registers[r] {
			t.Errorf("PAYLOAD_1024: register %s (backend) is not declared", r)
		}
	}
	for _, c := range counters {
		if !n.counters[c] {
			t.Errorf("PAYLOAD_1024: counter %s (backend) is not declared", c)
		}
	}
	for _, profile := range []string{"default", "test"} {
		if _, ok := expand(parseP4Profile(t, p4Profiles[profile])).tables[tableLoopbackPort]; ok {
			t.Errorf("%s profile declares %s", profile, tableLoopbackPort)
		}
	}
	info := loadFixture1024(t)
	compareP4InfoFixture(t, n, info)
	if info.packetSize() != packetSize1024 {
		t.Errorf("P4Info 1024 fixture: packetSize %d", info.packetSize())
	}
	if loadFixture(t).packetSize() != packetSize256 {
		t.Errorf("default P4Info fixture: packetSize %d", loadFixture(t).packetSize())
	}
	tb, _ := info.table(tableLoopbackPort)
	if tb.GetSize() != loopbackKeyEntries {
		t.Errorf("fixture %s size %d, LOOPBACK_KEY_ENTRIES %d", tableLoopbackPort, tb.GetSize(), loopbackKeyEntries)
	}
}

// config1024 is testConfig with the workers on pipe 0 ports and three
// loopback ports of pipe 1.
func config1024(info *P4Info) Config {
	cfg := testConfig(info)
	for a := range cfg.Ports {
		cfg.Ports[a] = uint32(a.As4()[3]) * 4 // 4, 8, 12, 16
	}
	cfg.LoopbackPorts = []uint32{136, 140, 144}
	return cfg
}

func job1024() *wire.Job {
	j := testJob()
	j.PacketSize = packetSize1024
	return j
}

// TestProgrammer1024Profile: with the 1024 B program's P4Info the backend
// writes every loopback_port key (spread over the configured pipe-1 ports
// the way loopbackPortFor says), accepts 1024 B jobs with the same
// per-job writes and multicast group as 256 B, and refuses 256 B jobs.
func TestProgrammer1024Profile(t *testing.T) {
	info := loadFixture1024(t)
	f, conn := startFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := config1024(info)
	p, err := New(ctx, conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.packetSize() != packetSize1024 {
		t.Fatalf("packetSize %d", p.packetSize())
	}
	f.mu.Lock()
	ports := map[uint64]uint64{}
	for _, u := range f.writes {
		te := u.GetEntity().GetTableEntry()
		if te == nil {
			continue
		}
		d := decodeEntry(t, info, te)
		if d.table != tableLoopbackPort {
			continue
		}
		if u.GetType() != p4v1.Update_INSERT || d.action != actionSetLoopbackPort {
			t.Errorf("loopback_port write %v %s", u.GetType(), d.action)
		}
		key := d.keys[fieldLoopbackKey][0]
		if _, dup := ports[key]; dup {
			t.Errorf("loopback_port key %d written twice", key)
		}
		ports[key] = d.params["port"]
	}
	f.mu.Unlock()
	if len(ports) != loopbackKeyEntries {
		t.Fatalf("%d loopback_port entries, want one per key (%d)", len(ports), loopbackKeyEntries)
	}
	perPort := map[uint64]int{}
	for key, port := range ports {
		perPort[port]++
		// A pool index whose key is this one takes this port.
		pool := uint32(key) << loopbackKeyShift
		if want := loopbackPortFor(pool, cfg.LoopbackPorts); uint64(want) != port {
			t.Errorf("key %d → port %d, loopbackPortFor(%d) = %d", key, port, pool, want)
		}
		if port>>7 != 1 {
			t.Errorf("key %d → port %d, not in pipe 1", key, port)
		}
	}
	if len(perPort) != len(cfg.LoopbackPorts) || perPort[136] != 6 || perPort[140] != 5 || perPort[144] != 5 {
		t.Errorf("keys per port %v, want 136:6 140:5 144:5", perPort)
	}
	// Both sets of one slot, and the 16 slots of a block, share a port.
	for slot := uint32(0); slot < 64; slot++ {
		a, b := loopbackPortFor(slot<<1, cfg.LoopbackPorts), loopbackPortFor(slot<<1|1, cfg.LoopbackPorts)
		if a != b || a != loopbackPortFor(slot&^15<<1, cfg.LoopbackPorts) {
			t.Errorf("slot %d: sets on ports %d, %d; block start on %d", slot, a, b, loopbackPortFor(slot&^15<<1, cfg.LoopbackPorts))
		}
	}

	j := testJob()
	if err := p.AddJob(ctx, j); !errors.Is(err, wire.ErrBadJob) || !strings.Contains(err.Error(), "1024 B") {
		t.Errorf("256 B job on the 1024 B program: %v", err)
	}
	if err := p.AddJob(ctx, job1024()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	if len(f.groups) != 1 {
		t.Fatalf("%d multicast groups", len(f.groups))
	}
	for _, g := range f.groups {
		var got []string
		for _, r := range g.GetReplicas() {
			got = append(got, fmt.Sprintf("%d@%d", r.GetInstance(), r.GetEgressPort()))
		}
		sort.Strings(got)
		if strings.Join(got, " ") != "0@4 1@8 2@12 3@16" {
			t.Errorf("multicast replicas (rank@port) %v: want one per worker on its pipe 0 port", got)
		}
	}
	f.mu.Unlock()
	if err := p.RemoveJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
}

// TestProgrammer1024ProfileRefusesConfigs: a Config that the profile
// cannot run is refused at New with an error naming the problem.
func TestProgrammer1024ProfileRefusesConfigs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w1 := netip.AddrFrom4([4]byte{10, 0, 0, 1})
	for _, tc := range []struct {
		name   string
		info   *P4Info
		change func(*Config)
		want   string
	}{
		{"no loopback ports", loadFixture1024(t), func(c *Config) { c.LoopbackPorts = nil }, "pass the loopback ports of pipe 1"},
		{"loopback port in pipe 2", loadFixture1024(t), func(c *Config) { c.LoopbackPorts = []uint32{260} }, "not in pipe 1"},
		{"loopback port in pipe 0", loadFixture1024(t), func(c *Config) { c.LoopbackPorts = []uint32{8} }, "not in pipe 1"},
		{"pipe 1 recirculation port", loadFixture1024(t), func(c *Config) { c.LoopbackPorts = []uint32{196} }, "recirculation port"},
		{"duplicate", loadFixture1024(t), func(c *Config) { c.LoopbackPorts = []uint32{136, 136} }, "twice"},
		{"too many", loadFixture1024(t), func(c *Config) {
			c.LoopbackPorts = nil
			for i := uint32(0); i < 17; i++ {
				c.LoopbackPorts = append(c.LoopbackPorts, 128+i)
			}
		}, "at most 16"},
		{"worker on pipe 1", loadFixture1024(t), func(c *Config) { c.Ports[w1] = 132 }, "pipe 0 ports"},
		{"worker on the recirculation port", loadFixture1024(t), func(c *Config) { c.Ports[w1] = 68 }, "pipe 0 ports"},
		{"loopback ports with the 256 B program", loadFixture(t), func(c *Config) {}, "for the 1024 B and 16-bit profiles"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, conn := startFake(t)
			cfg := config1024(tc.info)
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
