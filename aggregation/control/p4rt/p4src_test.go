package p4rt

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// p4Source is what the value and parser-depth tests read from the .p4
// files: constants, type widths, header layouts and parser state graphs.
// It is a reader for this program's own declarations (one per line, the
// style the program keeps), not a P4 front end; anything it cannot size or
// resolve fails the test rather than being skipped.
type p4Source struct {
	consts  map[string]int64             // const NAME = value (#define NAME number too)
	widths  map[string]int               // type name → bits (typedefs, headers)
	headers map[string]int               // header type → bits
	structs map[string]map[string]string // struct type → member → type
	parsers map[string]*p4Parser
	text    map[string]string // file → source, comments stripped
	raw     map[string]string // file → source as written
}

type p4Parser struct {
	name   string
	states map[string]*p4State
}

type p4State struct {
	name  string
	bits  int      // extracted + advanced
	next  []string // transition targets (accept included)
	parts []string // what was sized, for messages
}

var (
	reLineComment  = regexp.MustCompile(`//[^\n]*`)
	reBlockComment = regexp.MustCompile(`(?s)/\*.*?\*/`)
	reConst        = regexp.MustCompile(`(?m)^\s*const\s+[\w<>]+\s+(\w+)\s*=\s*(-?(?:0x[0-9A-Fa-f]+|\d+))\s*;`)
	reDefine       = regexp.MustCompile(`(?m)^#define\s+(\w+)\s+(\d+)\s*$`)
	reTypedef      = regexp.MustCompile(`(?m)^\s*typedef\s+(bit|int)<(\d+)>\s+(\w+)\s*;`)
	reAggregate    = regexp.MustCompile(`(?m)^(header|struct)\s+(\w+)\s*\{`)
	reMember       = regexp.MustCompile(`^\s*([\w<>]+)\s+(\w+)\s*;`)
	reParserDecl   = regexp.MustCompile(`(?m)^parser\s+(\w+)\s*\(`)
	reStateDecl    = regexp.MustCompile(`\bstate\s+(\w+)\s*\{`)
	reExtract      = regexp.MustCompile(`pkt\.extract\(\s*([\w.]+)\s*\)`)
	reAdvance      = regexp.MustCompile(`pkt\.advance\(\s*(\w+)\s*\)`)
	reTransition   = regexp.MustCompile(`\btransition\s+(\w+)\s*;`)
	reSelectCases  = regexp.MustCompile(`:\s*(\w+)\s*;`)
	reBitType      = regexp.MustCompile(`^(?:bit|int)<(\d+)>$`)
)

// TNA (tna.p4, Tofino 1) sizes of what the parsers extract besides the
// program's headers: ingress_intrinsic_metadata_t is 64 bits,
// egress_intrinsic_metadata_t 216 bits (27 B), PORT_METADATA_SIZE 64 bits,
// PortId_t 9 bits. bf-p4c counts the intrinsic metadata into the parse
// depth (bf-p4c's 371 B egress figure of the old parser = 27 + 14 + 330).
var tnaWidths = map[string]int{
	"ingress_intrinsic_metadata_t": 64,
	"egress_intrinsic_metadata_t":  216,
	"PortId_t":                     9,
	"MulticastGroupId_t":           16,
	"bool":                         1,
}

var tnaConsts = map[string]int64{"PORT_METADATA_SIZE": 64}

// braceBody returns the text between the '{' at open and its matching '}'.
func braceBody(s string, open int) (string, int, error) {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return s[open+1 : i], i, nil
			}
		}
	}
	return "", 0, fmt.Errorf("unbalanced braces from offset %d", open)
}

// readP4Source reads the default profile (no defines).
func readP4Source(t *testing.T) *p4Source {
	t.Helper()
	return readP4SourceProfile(t, nil)
}

// p4Profiles are the profiles p4/build.sh compiles, by their defines.
var p4Profiles = map[string][]string{
	"default":      nil,
	"test":         {"TEST_PROFILE"},
	"payload-1024": {"PAYLOAD_1024"},
	"wire-16":      {"WIRE_16"},
}

var (
	reDirective = regexp.MustCompile(`^\s*#\s*(ifdef|ifndef|else|endif|define|if|elif)\b\s*(\w*)`)
)

// preprocessP4 keeps the lines of text that the C preprocessor keeps with
// the given macros defined: #ifdef / #ifndef / #else / #endif (nested), and
// #define of a name (include guards). Anything else it cannot evaluate
// (#if, #elif) fails, so a profile is never read half-right.
func preprocessP4(text string, defines []string) (string, error) {
	defined := map[string]bool{}
	for _, d := range defines {
		defined[d] = true
	}
	type frame struct{ parentOn, on bool }
	var stack []frame
	on := true
	var out strings.Builder
	for i, line := range strings.Split(text, "\n") {
		m := reDirective.FindStringSubmatch(line)
		if m == nil {
			if on {
				out.WriteString(line)
			}
			out.WriteByte('\n')
			continue
		}
		switch m[1] {
		case "ifdef", "ifndef":
			cond := defined[m[2]]
			if m[1] == "ifndef" {
				cond = !cond
			}
			stack = append(stack, frame{parentOn: on, on: cond})
			on = on && cond
		case "else":
			if len(stack) == 0 {
				return "", fmt.Errorf("line %d: #else without #if", i+1)
			}
			f := &stack[len(stack)-1]
			f.on = !f.on
			on = f.parentOn && f.on
		case "endif":
			if len(stack) == 0 {
				return "", fmt.Errorf("line %d: #endif without #if", i+1)
			}
			on = stack[len(stack)-1].parentOn
			stack = stack[:len(stack)-1]
		case "define":
			if on {
				defined[m[2]] = true
				out.WriteString(line) // reDefine reads the values
			}
		default:
			return "", fmt.Errorf("line %d: cannot evaluate %q", i+1, strings.TrimSpace(line))
		}
		out.WriteByte('\n')
	}
	if len(stack) != 0 {
		return "", fmt.Errorf("%d unterminated #if", len(stack))
	}
	return out.String(), nil
}

// reMacro is a #define of a name without a value (a profile switch such as
// configuration.p4's CHUNKED).
var reMacro = regexp.MustCompile(`(?m)^#define\s+(\w+)\s*$`)

// configurationMacros adds to the given macros the value-less ones that
// configuration.p4 defines under them: every file includes it (through
// types.p4) before its own #ifdefs, so the C preprocessor sees them there.
func configurationMacros(t *testing.T, defines []string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p4Dir, "configuration.p4"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := preprocessP4(string(b), defines)
	if err != nil {
		t.Fatalf("configuration.p4: %v", err)
	}
	out := append([]string(nil), defines...)
	for _, m := range reMacro.FindAllStringSubmatch(s, -1) {
		if !strings.HasPrefix(m[1], "_") { // include guards
			out = append(out, m[1])
		}
	}
	return out
}

// readP4SourceProfile reads the program as the preprocessor gives it with
// the given macros defined (a p4Profiles value).
func readP4SourceProfile(t *testing.T, defines []string) *p4Source {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(p4Dir, "*.p4"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no .p4 files in %s: %v", p4Dir, err)
	}
	src := &p4Source{
		consts:  map[string]int64{},
		widths:  map[string]int{},
		headers: map[string]int{},
		structs: map[string]map[string]string{},
		parsers: map[string]*p4Parser{},
		text:    map[string]string{},
		raw:     map[string]string{},
	}
	for k, v := range tnaWidths {
		src.widths[k] = v
	}
	for k, v := range tnaConsts {
		src.consts[k] = v
	}
	defines = configurationMacros(t, defines)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(f)
		src.raw[base] = string(b)
		s, err := preprocessP4(string(b), defines)
		if err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		s = reBlockComment.ReplaceAllString(s, "")
		s = reLineComment.ReplaceAllString(s, "")
		src.text[base] = s
		for _, m := range reConst.FindAllStringSubmatch(s, -1) {
			v, err := strconv.ParseInt(m[2], 0, 64)
			if err != nil {
				t.Fatalf("%s: const %s = %s: %v", base, m[1], m[2], err)
			}
			if old, dup := src.consts[m[1]]; dup && old != v {
				t.Errorf("%s: const %s declared twice with different values (%d, %d)", base, m[1], old, v)
			}
			src.consts[m[1]] = v
		}
		for _, m := range reDefine.FindAllStringSubmatch(s, -1) {
			v, _ := strconv.ParseInt(m[2], 10, 64)
			src.consts[m[1]] = v
		}
		for _, m := range reTypedef.FindAllStringSubmatch(s, -1) {
			n, _ := strconv.Atoi(m[2])
			src.widths[m[3]] = n
		}
	}
	// Headers and structs after all typedefs are known.
	names := make([]string, 0, len(src.text))
	for n := range src.text {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, base := range names {
		s := src.text[base]
		for _, loc := range reAggregate.FindAllStringSubmatchIndex(s, -1) {
			kind, name := s[loc[2]:loc[3]], s[loc[4]:loc[5]]
			body, _, err := braceBody(s, loc[1]-1)
			if err != nil {
				t.Fatalf("%s: %s %s: %v", base, kind, name, err)
			}
			members := map[string]string{}
			bits := 0
			for _, line := range strings.Split(body, "\n") {
				m := reMember.FindStringSubmatch(line)
				if m == nil {
					if strings.TrimSpace(line) != "" {
						t.Fatalf("%s: %s %s: cannot read member line %q", base, kind, name, line)
					}
					continue
				}
				members[m[2]] = m[1]
				if kind == "header" {
					w, err := src.width(m[1])
					if err != nil {
						t.Fatalf("%s: header %s field %s: %v", base, name, m[2], err)
					}
					bits += w
				}
			}
			if kind == "header" {
				src.headers[name] = bits
				src.widths[name] = bits
			} else {
				src.structs[name] = members
			}
		}
	}
	for _, base := range names {
		s := src.text[base]
		for _, loc := range reParserDecl.FindAllStringSubmatchIndex(s, -1) {
			name := s[loc[2]:loc[3]]
			open := strings.Index(s[loc[1]:], "{")
			if open < 0 {
				t.Fatalf("%s: parser %s has no body", base, name)
			}
			body, _, err := braceBody(s, loc[1]+open)
			if err != nil {
				t.Fatalf("%s: parser %s: %v", base, name, err)
			}
			p, err := src.readParser(name, body)
			if err != nil {
				t.Fatalf("%s: %v", base, err)
			}
			src.parsers[name] = p
		}
	}
	return src
}

func (src *p4Source) width(typ string) (int, error) {
	if m := reBitType.FindStringSubmatch(typ); m != nil {
		return strconv.Atoi(m[1])
	}
	if w, ok := src.widths[typ]; ok {
		return w, nil
	}
	return 0, fmt.Errorf("unknown type %q", typ)
}

// readParser sizes every state of a parser body. An extract argument is
// hdr.<member> (a member of the parser's header struct header_t) or an
// intrinsic metadata parameter; anything else fails.
func (src *p4Source) readParser(name, body string) (*p4Parser, error) {
	p := &p4Parser{name: name, states: map[string]*p4State{}}
	hdrStruct := src.structs["header_t"]
	if hdrStruct == nil {
		return nil, fmt.Errorf("parser %s: no struct header_t", name)
	}
	params := map[string]string{"ig_intr_md": "ingress_intrinsic_metadata_t", "eg_intr_md": "egress_intrinsic_metadata_t"}
	for _, loc := range reStateDecl.FindAllStringSubmatchIndex(body, -1) {
		sname := body[loc[2]:loc[3]]
		sbody, _, err := braceBody(body, loc[1]-1)
		if err != nil {
			return nil, fmt.Errorf("parser %s state %s: %v", name, sname, err)
		}
		st := &p4State{name: sname}
		for _, m := range reExtract.FindAllStringSubmatch(sbody, -1) {
			arg := m[1]
			var typ string
			if strings.HasPrefix(arg, "hdr.") {
				typ = hdrStruct[strings.TrimPrefix(arg, "hdr.")]
			} else {
				typ = params[arg]
			}
			w, ok := src.headers[typ]
			if !ok {
				w, ok = tnaWidths[typ]
			}
			if !ok {
				return nil, fmt.Errorf("parser %s state %s: cannot size extract(%s) (type %q)", name, sname, arg, typ)
			}
			st.bits += w
			st.parts = append(st.parts, arg)
		}
		for _, m := range reAdvance.FindAllStringSubmatch(sbody, -1) {
			v, ok := src.consts[m[1]]
			if !ok {
				n, err := strconv.Atoi(m[1])
				if err != nil {
					return nil, fmt.Errorf("parser %s state %s: cannot size advance(%s)", name, sname, m[1])
				}
				v = int64(n)
			}
			st.bits += int(v)
			st.parts = append(st.parts, "advance("+m[1]+")")
		}
		if i := strings.Index(sbody, "transition select"); i >= 0 {
			open := strings.Index(sbody[i:], "{")
			cases, _, err := braceBody(sbody, i+open)
			if err != nil {
				return nil, fmt.Errorf("parser %s state %s: %v", name, sname, err)
			}
			for _, m := range reSelectCases.FindAllStringSubmatch(cases, -1) {
				st.next = append(st.next, m[1])
			}
		} else if m := reTransition.FindStringSubmatch(sbody); m != nil {
			st.next = []string{m[1]}
		}
		if len(st.next) == 0 {
			return nil, fmt.Errorf("parser %s state %s: no transition found", name, sname)
		}
		if st.bits%8 != 0 {
			return nil, fmt.Errorf("parser %s state %s: extracts %d bits, not whole bytes", name, sname, st.bits)
		}
		p.states[sname] = st
	}
	if p.states["start"] == nil {
		return nil, fmt.Errorf("parser %s: no start state", name)
	}
	return p, nil
}

// parsePath is one path from start to accept: the states after start and
// the bytes extracted along it.
type parsePath struct {
	states []string
	bytes  int
}

func (p parsePath) key() string {
	if len(p.states) == 0 {
		return "-"
	}
	return strings.Join(p.states, " ")
}

// paths enumerates every path from start to accept (the parse graphs are
// acyclic; a loop is an error, as it would need a bound).
func (p *p4Parser) paths() ([]parsePath, error) {
	var out []parsePath
	var walk func(name string, seen map[string]bool, trail []string, bits int) error
	walk = func(name string, seen map[string]bool, trail []string, bits int) error {
		if name == "accept" || name == "reject" {
			tr := append([]string(nil), trail...)
			if len(tr) > 0 {
				tr = tr[1:] // drop start
			}
			out = append(out, parsePath{states: tr, bytes: bits / 8})
			return nil
		}
		st := p.states[name]
		if st == nil {
			return fmt.Errorf("parser %s: transition to unknown state %s", p.name, name)
		}
		if seen[name] {
			return fmt.Errorf("parser %s: loop through state %s", p.name, name)
		}
		seen[name] = true
		defer delete(seen, name)
		done := map[string]bool{}
		for _, n := range st.next {
			if done[n] {
				continue
			}
			done[n] = true
			if err := walk(n, seen, append(trail, name), bits+st.bits); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk("start", map[string]bool{}, nil, 0); err != nil {
		return nil, err
	}
	return out, nil
}
