package p4rt

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Tofino 1 parse-depth window of the egress parser (bf-p4c's Tofino
// PardeSpec: maxParseDepth(EGRESS) = 160 B, minParseDepth(EGRESS) = 65 B,
// which bf-p4c meets by padding; ingress has no maximum).
const (
	egressMaxParseDepth = 160
	egressMinParseDepth = 65
)

// reDepthLine is one row of the "Parse depth" tables in parsers.p4's
// header comment: " *   [1024|w16] <Parser>  <states after start | (…)>  <bytes>";
// rows marked 1024 are the PAYLOAD_1024 profile's, w16 the WIRE_16
// profile's, the others the 256 B profiles' (default and test: the same
// parsers).
var reDepthLine = regexp.MustCompile(`(?m)^ \*\s+(?:(1024|w16)\s+)?(IngressParser|EgressParser)\s+(.*?)\s+(\d+)\s*$`)

// TestParserDepth computes, from the .p4 declarations, the bytes every
// parser path extracts (as bf-p4c counts them: intrinsic metadata
// included) and checks that (1) no egress path exceeds Tofino 1's 160 B,
// (2) the egress parser never reaches the payload, (3) the table in
// parsers.p4's header comment states every path with its depth, and no
// other.
func TestParserDepth(t *testing.T) {
	for _, profile := range []string{"default", "test", "payload-1024", "wire-16"} {
		t.Run(profile, func(t *testing.T) {
			src := readP4SourceProfile(t, p4Profiles[profile])
			mark := map[string]string{"payload-1024": "1024", "wire-16": "w16"}[profile]
			documented := map[string]int{}
			for _, m := range reDepthLine.FindAllStringSubmatch(src.raw["parsers.p4"], -1) {
				if m[1] != mark {
					continue
				}
				n, _ := strconv.Atoi(m[4])
				path := m[3]
				if strings.HasPrefix(path, "(") { // "(start only: …)"
					path = "-"
				}
				documented[m[2]+" "+path] = n
			}
			if len(documented) == 0 {
				t.Errorf("parsers.p4 has no parse-depth table for the %s profile in its header comment", profile)
			}
			checkParserDepth(t, src, documented)
		})
	}
}

func checkParserDepth(t *testing.T, src *p4Source, documented map[string]int) {
	computed := map[string]int{}
	for _, name := range []string{"IngressParser", "EgressParser"} {
		p := src.parsers[name]
		if p == nil {
			t.Fatalf("no parser %s in %s", name, p4Dir)
		}
		paths, err := p.paths()
		if err != nil {
			t.Fatal(err)
		}
		max := 0
		for _, pp := range paths {
			computed[name+" "+pp.key()] = pp.bytes
			if pp.bytes > max {
				max = pp.bytes
			}
			t.Logf("%-13s %-90s %4d B", name, pp.key(), pp.bytes)
		}
		if name == "EgressParser" {
			if max > egressMaxParseDepth {
				t.Errorf("EgressParser: longest path %d B exceeds Tofino 1's maximum parse depth (%d B)", max, egressMaxParseDepth)
			}
			for _, pp := range paths {
				for _, s := range pp.states {
					for _, part := range p.states[s].parts {
						if part == "hdr.payload" {
							t.Errorf("EgressParser path %s extracts the payload; results are written in ingress, egress must leave it unparsed", pp.key())
						}
					}
				}
			}
		}
	}
	var missing, wrong, extra []string
	for k, v := range computed {
		d, ok := documented[k]
		switch {
		case !ok:
			missing = append(missing, fmt.Sprintf("%s = %d B", k, v))
		case d != v:
			wrong = append(wrong, fmt.Sprintf("%s: comment says %d B, declarations give %d B", k, d, v))
		}
	}
	for k := range documented {
		if _, ok := computed[k]; !ok {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(wrong)
	sort.Strings(extra)
	for _, m := range missing {
		t.Errorf("parsers.p4 does not state the depth of path %s", m)
	}
	for _, w := range wrong {
		t.Errorf("parsers.p4 depth table: %s", w)
	}
	for _, e := range extra {
		t.Errorf("parsers.p4 depth table lists %q, which is not a path of the parser", e)
	}
}

// TestParserDepthReader checks the reader itself on sizes bf-p4c
// reported: the old egress parser (bridged, Ethernet, IPv4, UDP,
// BTH, RETH, ImmDt, payload) measured 371 B.
func TestParserDepthReader(t *testing.T) {
	src := readP4Source(t)
	// The bridged header of that time was 14 B; it is 20 B now (one byte
	// per field ingress fills from metadata, headers.p4).
	if got := src.headers["bridged_md_h"]; got != 20*8 {
		t.Errorf("bridged_md_h = %d bits, want 20 B", got)
	}
	sum := 14 * 8
	for _, h := range []string{"egress_intrinsic_metadata_t", "ethernet_h", "ipv4_h", "udp_h", "ib_bth_h", "ib_reth_h", "ib_immediate_h", "payload_h"} {
		w, err := src.width(h)
		if err != nil {
			t.Fatal(err)
		}
		sum += w
	}
	if sum/8 != 371 {
		t.Errorf("old egress longest path = %d B by this reader, bf-p4c reported 371 B", sum/8)
	}
	for h, want := range map[string]int{"ethernet_h": 14, "ipv4_h": 20, "udp_h": 8, "ib_bth_h": 12, "ib_reth_h": 16, "ib_immediate_h": 4, "arp_h": 28, "icmp_h": 4} {
		if got := src.headers[h]; got != want*8 {
			t.Errorf("%s = %d bits, want %d B", h, got, want)
		}
	}
	if got, want := src.headers["payload_h"], int(src.consts["PAYLOAD_BYTES"])*8; got != want {
		t.Errorf("payload_h = %d bits, PAYLOAD_BYTES = %d B", got, want/8)
	}
	// The 1024 B profile parses one 256 B chunk per pass.
	src1024 := readP4SourceProfile(t, p4Profiles["payload-1024"])
	if got, want := src1024.headers["payload_h"], int(src1024.consts["CHUNK_BYTES"])*8; got != want || want != 256*8 {
		t.Errorf("PAYLOAD_1024: payload_h = %d bits, CHUNK_BYTES = %d B (want 256)", got, want/8)
	}
	if got := src1024.consts["PAYLOAD_BYTES"]; got != src1024.consts["CHUNK_BYTES"]*src1024.consts["NUM_CHUNKS"] {
		t.Errorf("PAYLOAD_1024: PAYLOAD_BYTES %d ≠ CHUNK_BYTES %d × NUM_CHUNKS %d", got, src1024.consts["CHUNK_BYTES"], src1024.consts["NUM_CHUNKS"])
	}
	// The 16-bit profile parses one 128 B chunk (64 int16 lanes) per pass.
	src16 := readP4SourceProfile(t, p4Profiles["wire-16"])
	if got, want := src16.headers["payload_h"], int(src16.consts["CHUNK_BYTES"])*8; got != want || want != 128*8 {
		t.Errorf("WIRE_16: payload_h = %d bits, CHUNK_BYTES = %d B (want 128)", got, want/8)
	}
	if got := src16.consts["PAYLOAD_BYTES"]; got != src16.consts["CHUNK_BYTES"]*src16.consts["NUM_CHUNKS"] || got != packetSize256 {
		t.Errorf("WIRE_16: PAYLOAD_BYTES %d ≠ CHUNK_BYTES %d × NUM_CHUNKS %d, or ≠ %d", got, src16.consts["CHUNK_BYTES"], src16.consts["NUM_CHUNKS"], packetSize256)
	}
}
