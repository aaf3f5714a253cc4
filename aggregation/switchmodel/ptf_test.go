package switchmodel

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// ptfTest is one test p4testgen wrote with its PTF back end
// (scripts/p4.sh testgen, docs/p4.md "Generated tests"): the control-plane
// state the path needs, one input packet, the expected packet (or none: a
// drop) and the tool's trace of the path it executed.
type ptfTest struct {
	name     string
	trace    string
	entries  []ptfEntry        // insertTableEntry
	defaults []ptfEntry        // overrideDefaultEntry (no keys)
	regs     map[string]ptfReg // setRegisterValue, by "register[index]"
	inPort   int
	in       []byte
	outPort  int // -1: no packet
	out      []byte
	care     []bool // per bit of out: false where set_do_not_care covers it
}

type ptfKey struct {
	field       string
	value, mask uint64
	hasMask     bool
}

type ptfEntry struct {
	table, action string
	keys          []ptfKey
	params        map[string]uint64
}

// ptfReg holds a register cell: the plain value under "", the fields of a
// pair register under their short names (first, next_psn, set0, …).
type ptfReg map[string]uint64

// reg returns field f of register name at index i, 0 when the test does
// not set it (the tool lists every cell the path reads).
func (t *ptfTest) reg(name string, i uint64, f string) uint64 {
	return t.regs[fmt.Sprintf("%s[%d]", name, i)][f]
}

// param returns the action parameter p of the first entry of table.
func (t *ptfTest) defaultParam(table, p string) (uint64, bool) {
	for _, e := range t.defaults {
		if e.table == table {
			v, ok := e.params[p]
			return v, ok
		}
	}
	return 0, false
}

var (
	ptfClassRE   = regexp.MustCompile(`(?m)^class (Test\d+)\(AbstractTest\):`)
	ptfRegRE     = regexp.MustCompile(`self\.setRegisterValue\('([^']+)', (\[[^\]]*\]|0x[0-9A-Fa-f]+), (\d+)\)`)
	ptfRegPairRE = regexp.MustCompile(`\('([^']+)', (0x[0-9A-Fa-f]+)\)`)
	ptfEntryRE   = regexp.MustCompile(`(?s)self\.insertTableEntry\(\s*'([^']+)',\s*\[(.*?)\],\s*'([^']+)',\s*\[(.*?)\]\s*\)`)
	ptfDefaultRE = regexp.MustCompile(`(?s)self\.overrideDefaultEntry\(\s*'([^']+)',\s*'([^']+)',\s*\[(.*?)\]\s*\)`)
	ptfKeyRE     = regexp.MustCompile(`gc\.KeyTuple\('([^']+)', (0x[0-9A-Fa-f]+|\d+)(?:, (0x[0-9A-Fa-f]+|\d+))?\)`)
	ptfDataRE    = regexp.MustCompile(`gc\.DataTuple\('([^']+)', (0x[0-9A-Fa-f]+|\d+)\)`)
	ptfInPortRE  = regexp.MustCompile(`ig_port = (\d+)`)
	ptfOutPortRE = regexp.MustCompile(`eg_port = (\d+)`)
	ptfPktRE     = regexp.MustCompile(`(?m)^\s*(pkt|exp_pkt) = b'((?:[^'\\]|\\.)*)'`)
	ptfCareRE    = regexp.MustCompile(`exp_pkt\.set_do_not_care\((\d+), (\d+)\)`)
)

// readPTF reads a gzipped PTF file of p4testgen tests.
func readPTF(path string) ([]ptfTest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return parsePTF(string(b))
}

func parsePTF(s string) ([]ptfTest, error) {
	locs := ptfClassRE.FindAllStringSubmatchIndex(s, -1)
	var tests []ptfTest
	for k, l := range locs {
		end := len(s)
		if k+1 < len(locs) {
			end = locs[k+1][0]
		}
		t, err := parsePTFTest(s[l[2]:l[3]], s[l[1]:end])
		if err != nil {
			return nil, err
		}
		tests = append(tests, t)
	}
	return tests, nil
}

func parseUint(s string) uint64 {
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), map[bool]int{true: 16, false: 10}[strings.HasPrefix(s, "0x")], 64)
	if err != nil {
		panic(fmt.Sprintf("ptf: number %q: %v", s, err))
	}
	return v
}

func parsePTFTest(name, body string) (ptfTest, error) {
	t := ptfTest{name: name, regs: map[string]ptfReg{}, outPort: -1}
	code := body
	if parts := strings.SplitN(body, "'''", 3); len(parts) == 3 {
		t.trace, code = parts[1], parts[2]
	}
	for _, m := range ptfRegRE.FindAllStringSubmatch(code, -1) {
		r := ptfReg{}
		if strings.HasPrefix(m[2], "[") {
			for _, p := range ptfRegPairRE.FindAllStringSubmatch(m[2], -1) {
				r[p[1][strings.LastIndexByte(p[1], '.')+1:]] = parseUint(p[2])
			}
		} else {
			r[""] = parseUint(m[2])
		}
		t.regs[m[1]+"["+m[3]+"]"] = r
	}
	for _, m := range ptfEntryRE.FindAllStringSubmatch(code, -1) {
		e := ptfEntry{table: m[1], action: m[3], params: map[string]uint64{}}
		for _, k := range ptfKeyRE.FindAllStringSubmatch(m[2], -1) {
			key := ptfKey{field: k[1], value: parseUint(k[2])}
			if k[3] != "" {
				key.mask, key.hasMask = parseUint(k[3]), true
			}
			e.keys = append(e.keys, key)
		}
		for _, d := range ptfDataRE.FindAllStringSubmatch(m[4], -1) {
			e.params[d[1]] = parseUint(d[2])
		}
		t.entries = append(t.entries, e)
	}
	for _, m := range ptfDefaultRE.FindAllStringSubmatch(code, -1) {
		e := ptfEntry{table: m[1], action: m[2], params: map[string]uint64{}}
		for _, d := range ptfDataRE.FindAllStringSubmatch(m[3], -1) {
			e.params[d[1]] = parseUint(d[2])
		}
		t.defaults = append(t.defaults, e)
	}
	m := ptfInPortRE.FindStringSubmatch(code)
	if m == nil {
		return t, fmt.Errorf("ptf %s: no ig_port", name)
	}
	t.inPort = int(parseUint(m[1]))
	if m := ptfOutPortRE.FindStringSubmatch(code); m != nil {
		t.outPort = int(parseUint(m[1]))
	}
	for _, p := range ptfPktRE.FindAllStringSubmatch(code, -1) {
		b, err := pyBytes(p[2])
		if err != nil {
			return t, fmt.Errorf("ptf %s: %s: %w", name, p[1], err)
		}
		if p[1] == "pkt" {
			t.in = b
		} else {
			t.out = b
		}
	}
	if t.in == nil || (t.outPort >= 0) != (t.out != nil) {
		return t, fmt.Errorf("ptf %s: packets missing (in %d B, out port %d, out %d B)", name, len(t.in), t.outPort, len(t.out))
	}
	if t.out != nil {
		t.care = make([]bool, 8*len(t.out))
		for i := range t.care {
			t.care[i] = true
		}
		for _, c := range ptfCareRE.FindAllStringSubmatch(code, -1) {
			off, n := int(parseUint(c[1])), int(parseUint(c[2]))
			for i := off; i < off+n && i < len(t.care); i++ {
				t.care[i] = false
			}
		}
	}
	return t, nil
}

// pyBytes decodes the body of a Python bytes literal (\xHH escapes,
// the usual backslash escapes and plain characters).
func pyBytes(s string) ([]byte, error) {
	var b bytes.Buffer
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(s) {
			return nil, fmt.Errorf("bytes literal ends in a backslash")
		}
		i++
		switch s[i] {
		case 'x':
			if i+3 > len(s) {
				return nil, fmt.Errorf("short \\x escape")
			}
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return nil, err
			}
			b.WriteByte(byte(v))
			i += 2
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case '0':
			b.WriteByte(0)
		case '\\', '\'', '"':
			b.WriteByte(s[i])
		default:
			return nil, fmt.Errorf("escape \\%c", s[i])
		}
	}
	return b.Bytes(), nil
}
