package p4rt

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// TestParityDropReasons: every switchmodel.DropReason has a types.p4
// constant DROP_<NAME> (NAME = the reason's metric label, upper case) with
// the same code, the P4 declares no other DROP_ code, and the drop
// counters are large enough to be indexed by every code.
func TestParityDropReasons(t *testing.T) {
	src := readP4Source(t)
	want := map[string]int64{}
	for r := switchmodel.DropReason(0); r < switchmodel.NumDropReasons; r++ {
		want["DROP_"+strings.ToUpper(r.String())] = int64(r)
	}
	checkCodes(t, src, "DROP_", want)
	if n := src.consts["NUM_DROP_CODES"]; n < int64(switchmodel.NumDropReasons) {
		t.Errorf("NUM_DROP_CODES = %d, smaller than switchmodel.NumDropReasons %d: the drops counters cannot count every reason", n, switchmodel.NumDropReasons)
	}
}

// TestParityDecisions: DECISION_<NAME> = switchmodel.Decision codes.
func TestParityDecisions(t *testing.T) {
	src := readP4Source(t)
	want := map[string]int64{}
	for _, d := range []switchmodel.Decision{switchmodel.Drop, switchmodel.Consume, switchmodel.Broadcast, switchmodel.Unicast} {
		want["DECISION_"+strings.ToUpper(d.String())] = int64(d)
	}
	checkCodes(t, src, "DECISION_", want)
	if n := src.consts["NUM_DECISION_CODES"]; n != int64(len(want)) {
		t.Errorf("NUM_DECISION_CODES = %d, the model has %d decisions", n, len(want))
	}
}

func checkCodes(t *testing.T, src *p4Source, prefix string, want map[string]int64) {
	t.Helper()
	for name, code := range want {
		got, ok := src.consts[name]
		if !ok {
			t.Errorf("types.p4 has no %s (the model's code %d)", name, code)
			continue
		}
		if got != code {
			t.Errorf("%s = %d in the .p4, %d in the model", name, got, code)
		}
	}
	for name := range src.consts {
		if strings.HasPrefix(name, prefix) && !strings.HasPrefix(name, "NUM_") {
			if _, ok := want[name]; !ok {
				t.Errorf("the .p4 declares %s = %d, which the model does not have", name, src.consts[name])
			}
		}
	}
}

// reOpcodeEntry is one const entry of RDMAReceiver.opcode_position.
var reOpcodeEntry = regexp.MustCompile(`(UC_RDMA_WRITE_\w+)\s*:\s*set_position\(\s*(true|false)\s*,\s*(true|false)\s*,\s*(true|false)\s*,\s*([\w\s+]+?)\s*\)`)

// TestParityOpcodes: the UC RDMA WRITE opcodes of headers.p4 are rdma's,
// opcode_position's (first, last, has_imm) entries are rdma.Opcode's
// IsFirst/IsLast/HasImm for each, and both parsers extract the RETH and
// the ImmDt exactly for the opcodes that have them (rdma.Opcode HasRETH,
// HasImm).
func TestParityOpcodes(t *testing.T) {
	src := readP4Source(t)
	ops := map[string]rdma.Opcode{}
	for _, first := range []bool{true, false} {
		for _, last := range []bool{true, false} {
			for _, imm := range []bool{false, true} {
				if imm && !last {
					continue
				}
				name := "UC_RDMA_WRITE_"
				switch {
				case first && last:
					name += "ONLY"
				case first:
					name += "FIRST"
				case last:
					name += "LAST"
				default:
					name += "MIDDLE"
				}
				if imm {
					name += "_WITH_IMMEDIATE"
				}
				ops[name] = rdma.WriteOpcode(rdma.TransportUC, first, last, imm)
			}
		}
	}
	for name, op := range ops {
		got, ok := src.consts[name]
		if !ok {
			t.Errorf("headers.p4 has no %s (%#x, %v)", name, uint8(op), op)
			continue
		}
		if got != int64(op) {
			t.Errorf("%s = %#x in the .p4, rdma says %#x (%v)", name, got, uint8(op), op)
		}
	}

	entries := reOpcodeEntry.FindAllStringSubmatch(src.text["rdma_receiver.p4"], -1)
	if len(entries) != len(ops) {
		t.Errorf("opcode_position has %d const entries, want one per UC RDMA WRITE opcode (%d)", len(entries), len(ops))
	}
	for _, e := range entries {
		op, ok := ops[e[1]]
		if !ok {
			t.Errorf("opcode_position entry for unknown opcode %s", e[1])
			continue
		}
		if (e[2] == "true") != op.IsFirst() || (e[3] == "true") != op.IsLast() || (e[4] == "true") != op.HasImm() {
			t.Errorf("opcode_position %s = (first %s, last %s, imm %s), rdma says (%v, %v, %v)", e[1], e[2], e[3], e[4], op.IsFirst(), op.IsLast(), op.HasImm())
		}
		// The IPv4 total length of a request with the job's payload:
		// IPv4 20 + UDP 8 + the opcode's headers + payload + ICRC 4.
		var n int64
		for _, term := range strings.Split(e[5], "+") {
			term = strings.TrimSpace(term)
			v, ok := src.consts[term]
			if !ok {
				var err error
				if v, err = strconv.ParseInt(term, 0, 64); err != nil {
					t.Fatalf("opcode_position %s: cannot evaluate %q", e[1], e[5])
				}
			}
			n += v
		}
		if want := int64(20+8+rdma.BTHSize+op.HeadersLen()+rdma.ICRCSize) + src.consts["PAYLOAD_BYTES"]; n != want {
			t.Errorf("opcode_position %s: IPv4 total length %d (%s), want %d", e[1], n, e[5], want)
		}
	}

	// Each parser's BTH state: opcode → the headers extracted until the
	// payload (or accept).
	for parser, bth := range map[string]string{"IngressParser": "parse_bth", "EgressParser": "parse_result"} {
		p := src.parsers[parser]
		if p == nil {
			t.Fatalf("no parser %s", parser)
		}
		cases := selectCases(t, src.text["parsers.p4"], parser, bth)
		for name, op := range ops {
			target, ok := cases[name]
			if !ok {
				t.Errorf("%s.%s: no transition for %s", parser, bth, name)
				continue
			}
			var got []string
			for s := target; s != "accept"; {
				st := p.states[s]
				if st == nil {
					t.Fatalf("%s: unknown state %s", parser, s)
				}
				got = append(got, st.parts...)
				if len(st.next) != 1 {
					t.Fatalf("%s state %s: more than one transition after the BTH", parser, s)
				}
				s = st.next[0]
			}
			has := func(h string) bool {
				for _, g := range got {
					if g == h {
						return true
					}
				}
				return false
			}
			if has("hdr.ib_reth") != op.HasRETH() || has("hdr.ib_immediate") != op.HasImm() {
				t.Errorf("%s extracts %v after the BTH for %s; rdma says RETH %v, ImmDt %v", parser, got, name, op.HasRETH(), op.HasImm())
			}
		}
	}
}

// selectCases reads the select cases (label → state) of one parser state.
func selectCases(t *testing.T, text, parser, state string) map[string]string {
	t.Helper()
	i := strings.Index(text, "parser "+parser+"(")
	if i < 0 {
		t.Fatalf("no parser %s", parser)
	}
	j := strings.Index(text[i:], "state "+state+" {")
	if j < 0 {
		t.Fatalf("parser %s has no state %s", parser, state)
	}
	body, _, err := braceBody(text, i+j+len("state "+state+" "))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`(\w+)\s*:\s*(\w+)\s*;`).FindAllStringSubmatch(body, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// TestParityStateEncodings: the register values the backend writes mean
// what the .p4 reads them as (invalid receiver QP, closed sender stream,
// unset exponent), and the SALU predicate codes are one-hot as the
// hardware returns them.
func TestParityStateEncodings(t *testing.T) {
	src := readP4Source(t)
	for name, want := range map[string]int64{
		"INVALID_PSN":    invalidPSN,
		"TX_CLOSED":      txClosed,
		"EXPONENT_UNSET": math.MinInt8,
		"PRED_NONE":      1,
		"PRED_LO":        2,
		"PRED_HI":        4,
		"PRED_LO_HI":     8,
		"RESULT_SENT":    0,
		"RESULT_SKIPPED": 1,
	} {
		got, ok := src.consts[name]
		if !ok {
			t.Errorf("the .p4 has no %s", name)
		} else if got != want {
			t.Errorf("%s = %#x in the .p4, backend/model %#x", name, got, want)
		}
	}
	if e := uint8(exponentUnset); int8(e) != math.MinInt8 {
		t.Errorf("backend exponentUnset %#x is not int8 −128", exponentUnset)
	}
	if invalidPSN <= rdma.PSNMask {
		t.Errorf("INVALID_PSN %#x is a valid 24-bit PSN: an invalid QP would accept a packet", invalidPSN)
	}
	if src.consts["IPV4_LEN_NO_EXT"] != 20+8+rdma.BTHSize+src.consts["PAYLOAD_BYTES"]+4 {
		t.Errorf("IPV4_LEN_NO_EXT = %d, want IPv4 20 + UDP 8 + BTH %d + payload %d + ICRC 4", src.consts["IPV4_LEN_NO_EXT"], rdma.BTHSize, src.consts["PAYLOAD_BYTES"])
	}
	if src.consts["PAYLOAD_BYTES"] != packetSize256 {
		t.Errorf("PAYLOAD_BYTES = %d, the backend accepts %d B jobs", src.consts["PAYLOAD_BYTES"], packetSize256)
	}
}
