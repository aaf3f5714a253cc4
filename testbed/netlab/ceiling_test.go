package netlab

import (
	"math"
	"testing"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"200mbit", 200e6, true},
		{"1gbit", 1e9, true},
		{"1Gbit/s", 1e9, true},
		{"500Mbit", 500e6, true},
		{"500mbps", 0, false}, // tc: megabytes per second
		{"2.5gbit", 2.5e9, true},
		{"750kbit", 750e3, true},
		{"1000000", 1e6, true},
		{"0", 0, true},
		{"unshaped", 0, true},
		{"none", 0, true},
		{"", 0, false},
		{"fast", 0, false},
		{"-1mbit", 0, false},
		{"10kbit", 0, false}, // below 100 kbit
		{"2000gbit", 0, false},
	} {
		got, err := ParseRate(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if err == nil {
			if back, err := ParseRate(FormatRate(got)); err != nil || back != got {
				t.Errorf("ParseRate(FormatRate(%d) = %q) = %d, %v", got, FormatRate(got), back, err)
			}
		}
	}
}

func TestRoCEMessageWire(t *testing.T) {
	// 16 packets of 1024 B: each Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 +
	// ICRC 4 = 58 B of headers; RETH (16) on the first, ImmDt (4) on the
	// last.
	if got, want := RoCEMessageWire(1024, 16), 16*(58+1024)+20; got != want {
		t.Errorf("RoCEMessageWire(1024, 16) = %d, want %d", got, want)
	}
	// A zero-length WRITE_ONLY_WITH_IMMEDIATE (the ring's acknowledgement).
	if got, want := RoCEMessageWire(0, 1), 78; got != want {
		t.Errorf("RoCEMessageWire(0, 1) = %d, want %d", got, want)
	}
}

func TestLinkCeilings(t *testing.T) {
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*want {
			t.Errorf("%s = %g, want %g", name, got, want)
		}
	}
	c := LinkCeilings(200e6, 4, 1024, 16384)
	msg := float64(16*(58+1024) + 20)
	near("SwitchML", c.SwitchML, 200e6*16384/msg/32)
	near("Gloo", c.Gloo, 200e6/1.5/32*1448/1514)
	near("Ring", c.Ring, 200e6/1.5/32*16384/(msg+78))
	// SwitchML's ceiling does not depend on the number of workers; a
	// ring's falls towards half the rate.
	c8 := LinkCeilings(200e6, 8, 1024, 16384)
	near("SwitchML at 8", c8.SwitchML, c.SwitchML)
	if !(c8.Gloo < c.Gloo) {
		t.Errorf("Gloo's ceiling at 8 workers %g, not below 4 workers' %g", c8.Gloo, c.Gloo)
	}
	// Two workers: a ring moves one tensor each way, as SwitchML does.
	c2 := LinkCeilings(1e9, 2, 1024, 16384)
	near("Gloo at 2", c2.Gloo, 1e9/32*1448/1514)
	if z := LinkCeilings(0, 4, 1024, 16384); z != (Ceilings{}) {
		t.Errorf("unshaped: %+v, want zero", z)
	}
}

func TestParseSNMP(t *testing.T) {
	in := "Ip: Forwarding DefaultTTL\nIp: 2 64\n" +
		"Tcp: RtoAlgorithm RetransSegs InErrs\nTcp: 1 17 0\n" +
		"Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\nUdp: 100 1 5 90 4 0\n"
	m, err := parseSNMP([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if m["Tcp.RetransSegs"] != 17 || m["Udp.RcvbufErrors"] != 4 || m["Ip.DefaultTTL"] != 64 {
		t.Errorf("parseSNMP: %v", m)
	}
	if _, err := parseSNMP([]byte("Udp: A B\nUdp: 1\n")); err == nil {
		t.Error("parseSNMP of a short values line: no error")
	}
}

func TestQdiscAndNftDrops(t *testing.T) {
	n, err := qdiscDrops([]byte(`[{"kind":"tbf","handle":"8002:","drops":7,"packets":5},{"kind":"pfifo","drops":3}]`))
	if err != nil || n != 10 {
		t.Errorf("qdiscDrops = %d, %v; want 10", n, err)
	}
	doc := `{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"table": {"family": "netdev", "name": "swlab"}},
	  {"rule": {"expr": [{"match": {}}, {"counter": {"packets": 12, "bytes": 900}}, {"drop": null}]}},
	  {"rule": {"expr": [{"counter": {"packets": 30, "bytes": 100}}, {"drop": null}]}}]}`
	if n, err := nftDrops([]byte(doc)); err != nil || n != 42 {
		t.Errorf("nftDrops = %d, %v; want 42", n, err)
	}
	if _, err := qdiscDrops([]byte("Error: Cannot find device")); err == nil {
		t.Error("qdiscDrops of text: no error")
	}
}

func TestLinkCeilingsFramed(t *testing.T) {
	// On a physical Ethernet port each 1024-byte packet costs 58 B of
	// headers and 24 B of framing: SwitchML's "92.6 % of 100 GbE", less
	// the RETH and ImmDt of each 16-packet message.
	c := LinkCeilingsFramed(100e9, 8, 1024, 16384, EthernetFraming)
	msg := float64(16*(58+24+1024) + 20)
	if got, want := c.SwitchML*32/100e9, 16384/msg; math.Abs(got-want) > 1e-12 {
		t.Errorf("efficiency %g, want %g", got, want)
	}
	for _, tc := range []struct {
		packet int
		paper  float64
	}{{256, 0.757}, {1024, 0.926}} {
		e := LinkCeilingsFramed(100e9, 8, tc.packet, 16*tc.packet, EthernetFraming).SwitchML * 32 / 100e9
		if math.Abs(e-tc.paper) > 0.005 {
			t.Errorf("%d-byte payload: efficiency %.4f, the paper's %.3f", tc.packet, e, tc.paper)
		}
	}
	if c0, c := LinkCeilingsFramed(1e9, 4, 1024, 16384, 0), LinkCeilings(1e9, 4, 1024, 16384); c0 != c {
		t.Errorf("no framing: %+v, LinkCeilings %+v", c0, c)
	}
}
