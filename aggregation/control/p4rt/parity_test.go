package p4rt

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
)

// p4Dir is p4/rdma_switch relative to this package.
var p4Dir = filepath.Join("..", "..", "..", "p4", "rdma_switch")

// p4Control is what the parity test reads of one control declaration.
type p4Control struct {
	file      string
	comment   string            // the file's header comment
	tables    map[string]string // name → body
	actions   map[string][]string
	registers []string
	counters  []string
	instances map[string]string // instance → control type
}

var (
	reControl  = regexp.MustCompile(`(?m)^control\s+(\w+)\s*\(`)
	reTable    = regexp.MustCompile(`(?s)\btable\s+(\w+)\s*\{(.*?)\n    \}`)
	reAction   = regexp.MustCompile(`\baction\s+(\w+)\s*\(([^)]*)\)`)
	reRegister = regexp.MustCompile(`\bRegister<[^;\n]*?>\([^)]*\)\s+(\w+)\s*;`)
	reCounter  = regexp.MustCompile(`\bCounter<[^;\n]*?>\([^)]*\)\s+(\w+)\s*;`)
	reActions  = regexp.MustCompile(`actions\s*=\s*\{([^}]*)\}`)
	reInstance = regexp.MustCompile(`(?m)^\s+([A-Z]\w*)\(\)\s+(\w+)\s*;`)
	// A key is a field or a header's isValid(), which the P4Info names
	// hdr.x.$valid$.
	reKeyField  = regexp.MustCompile(`([\w.]+(?:\.isValid\(\))?)\s*:\s*(exact|ternary|lpm|range)\s*;`)
	reComment   = regexp.MustCompile(`(?s)^/\*(.*?)\*/`)
	reParamName = regexp.MustCompile(`(\w+)\s*$`)
)

// parseP4 reads every .p4 file of the program and splits it into controls.
func parseP4(t *testing.T) map[string]*p4Control {
	t.Helper()
	return parseP4Profile(t, nil)
}

// parseP4Profile is parseP4 for the program as the preprocessor gives it
// with the given macros defined (a p4Profiles value).
func parseP4Profile(t *testing.T, defines []string) map[string]*p4Control {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(p4Dir, "*.p4"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no .p4 files in %s: %v", p4Dir, err)
	}
	out := map[string]*p4Control{}
	defines = configurationMacros(t, defines)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		base := filepath.Base(f)
		guard := "_" + strings.ToUpper(strings.TrimSuffix(base, ".p4")) + "_P4_"
		if base != "rdma_switch.p4" && (!strings.Contains(src, "#ifndef "+guard) || !strings.Contains(src, "#define "+guard)) {
			t.Errorf("%s: no include guard %s", base, guard)
		}
		comment := ""
		if m := reComment.FindStringSubmatch(src); m != nil {
			comment = m[1]
		}
		if src, err = preprocessP4(src, defines); err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		locs := reControl.FindAllStringSubmatchIndex(src, -1)
		for i, l := range locs {
			end := len(src)
			if i+1 < len(locs) {
				end = locs[i+1][0]
			}
			body := src[l[0]:end]
			c := &p4Control{file: base, comment: comment, tables: map[string]string{}, actions: map[string][]string{}, instances: map[string]string{}}
			for _, m := range reTable.FindAllStringSubmatch(body, -1) {
				c.tables[m[1]] = m[2]
			}
			for _, m := range reAction.FindAllStringSubmatch(body, -1) {
				var params []string
				for _, p := range strings.Split(m[2], ",") {
					if p = strings.TrimSpace(p); p != "" {
						params = append(params, reParamName.FindString(p))
					}
				}
				c.actions[m[1]] = params
			}
			for _, m := range reRegister.FindAllStringSubmatch(body, -1) {
				c.registers = append(c.registers, m[1])
			}
			for _, m := range reCounter.FindAllStringSubmatch(body, -1) {
				c.counters = append(c.counters, m[1])
			}
			for _, m := range reInstance.FindAllStringSubmatch(body, -1) {
				c.instances[m[2]] = m[1]
			}
			out[src[l[2]:l[3]]] = c
		}
	}
	return out
}

// p4Names expands the controls into the fully qualified names bf-p4c
// writes into the P4Info: Gress.instance….entity.
type p4Names struct {
	tables    map[string][]string // → key fields
	actions   map[string][]string // → params
	registers map[string]bool
	counters  map[string]bool
}

func expand(controls map[string]*p4Control) p4Names {
	n := p4Names{tables: map[string][]string{}, actions: map[string][]string{}, registers: map[string]bool{}, counters: map[string]bool{}}
	var walk func(prefix, ctl string)
	walk = func(prefix, ctl string) {
		c := controls[ctl]
		if c == nil {
			return
		}
		for t, body := range c.tables {
			var keys []string
			for _, m := range reKeyField.FindAllStringSubmatch(body, -1) {
				keys = append(keys, strings.Replace(m[1], ".isValid()", ".$valid$", 1))
			}
			n.tables[prefix+t] = keys
		}
		// bf-p4c's P4Info lists the actions tables can run; an action
		// only called from apply is inlined and has no P4Info entry.
		for _, body := range c.tables {
			if m := reActions.FindStringSubmatch(body); m != nil {
				for _, a := range strings.Split(m[1], ";") {
					a = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(a), "@defaultonly"))
					// NoAction is core.p4's, listed once at the top level.
					if a != "" && a != "NoAction" {
						n.actions[prefix+a] = c.actions[a]
					}
				}
			}
		}
		for _, r := range c.registers {
			n.registers[prefix+r] = true
		}
		for _, r := range c.counters {
			n.counters[prefix+r] = true
		}
		for inst, typ := range c.instances {
			walk(prefix+inst+".", typ)
		}
	}
	walk("Ingress.", "Ingress")
	walk("Egress.", "Egress")
	return n
}

// TestParityBackendNamesInP4 fails when a name the backend writes is not
// declared in the .p4 sources (or its key fields / parameters differ).
func TestParityBackendNamesInP4(t *testing.T) {
	n := expand(parseP4(t))
	tables, actions, registers, counters := usedEntities()
	for tb, fields := range tables {
		keys, ok := n.tables[tb]
		if !ok {
			t.Errorf("table %s (backend) is not declared in %s", tb, p4Dir)
			continue
		}
		if !reflect.DeepEqual(keys, fields) && !(len(keys) == 0 && len(fields) == 0) {
			t.Errorf("table %s: .p4 keys %v, backend %v", tb, keys, fields)
		}
	}
	for a, params := range actions {
		ps, ok := n.actions[a]
		if !ok {
			t.Errorf("action %s (backend) is not declared in %s", a, p4Dir)
			continue
		}
		if !reflect.DeepEqual(ps, params) {
			t.Errorf("action %s: .p4 parameters %v, backend %v", a, ps, params)
		}
	}
	for _, r := range registers {
		if !n.registers[r] {
			t.Errorf("register %s (backend) is not declared in %s", r, p4Dir)
		}
	}
	for _, c := range counters {
		if !n.counters[c] {
			t.Errorf("counter %s (backend) is not declared in %s", c, p4Dir)
		}
	}
}

// TestParityP4InfoFixture: the P4Info fixture — what bf-p4c writes for the
// default profile (scripts/p4.sh p4info, which CI checks against a fresh
// compile) — has exactly the .p4's tables, registers and counters, every
// action a table names, with the same keys and parameters.
func TestParityP4InfoFixture(t *testing.T) {
	compareP4InfoFixture(t, expand(parseP4(t)), loadFixture(t))
}

// compareP4InfoFixture fails when a P4Info fixture's entities, keys or
// parameters differ from the .p4's (one profile's).
func compareP4InfoFixture(t *testing.T, n p4Names, info *P4Info) {
	t.Helper()
	ft, fa, fr, fc := info.entityNames()
	eq := func(kind string, p4 []string, fix []string) {
		sort.Strings(p4)
		sort.Strings(fix)
		if !reflect.DeepEqual(p4, fix) {
			t.Errorf("%s: .p4 declares %v\nP4Info fixture has %v", kind, p4, fix)
		}
	}
	eq("tables", keys(n.tables), ft)
	// bf-p4c lists every action, also those the apply blocks call
	// directly; the tables' actions must all be there.
	have := map[string]bool{}
	for _, a := range fa {
		have[a] = true
	}
	for a := range n.actions {
		if !have[a] {
			t.Errorf("action %s (.p4 table action) is not in the P4Info", a)
		}
	}
	eq("registers", keysB(n.registers), fr)
	eq("counters", keysB(n.counters), fc)
	for name, fields := range n.tables {
		tb, err := info.table(name)
		if err != nil {
			continue
		}
		var got []string
		for _, f := range tb.GetMatchFields() {
			got = append(got, f.GetName())
		}
		if !reflect.DeepEqual(got, fields) && !(len(got) == 0 && len(fields) == 0) {
			t.Errorf("table %s: .p4 keys %v, fixture %v", name, fields, got)
		}
	}
	for name, params := range n.actions {
		a, err := info.action(name)
		if err != nil {
			continue
		}
		var got []string
		for _, p := range a.GetParams() {
			got = append(got, p.GetName())
		}
		if !reflect.DeepEqual(got, params) && !(len(got) == 0 && len(params) == 0) {
			t.Errorf("action %s: .p4 parameters %v, fixture %v", name, params, got)
		}
	}
}

// TestParityModelControls: every control type of the Go switch model is a
// P4 control of the same name, whose header comment names the Go type, and
// the Go type's doc points back at the P4 control.
func TestParityModelControls(t *testing.T) {
	controls := parseP4(t)
	model := []reflect.Type{
		reflect.TypeOf(switchmodel.RDMAReceiver{}),
		reflect.TypeOf(switchmodel.BitmapChecker{}),
		reflect.TypeOf(switchmodel.WorkersCounter{}),
		reflect.TypeOf(switchmodel.Exponents{}),
		reflect.TypeOf(switchmodel.Processor{}),
		reflect.TypeOf(switchmodel.NextStep{}),
		reflect.TypeOf(switchmodel.RDMASender{}),
	}
	var names []string
	for _, ty := range model {
		names = append(names, ty.Name())
	}
	if !reflect.DeepEqual(names, modelControls) {
		t.Errorf("model control types %v, backend's modelControls %v", names, modelControls)
	}
	// The model's sources say "P4: p4/rdma_switch <Control>".
	modelSrc := ""
	goFiles, _ := filepath.Glob(filepath.Join("..", "..", "switchmodel", "*.go"))
	for _, f := range goFiles {
		b, _ := os.ReadFile(f)
		modelSrc += strings.Join(strings.Fields(strings.ReplaceAll(string(b), "//", " ")), " ") + "\n"
	}
	for _, name := range names {
		c, ok := controls[name]
		if !ok {
			t.Errorf("switchmodel.%s has no P4 control %s in %s", name, name, p4Dir)
			continue
		}
		if !strings.Contains(c.comment, "switchmodel."+name) {
			t.Errorf("%s: the header comment of control %s does not name switchmodel.%s", c.file, name, name)
		}
		if modelSrc != "" && !strings.Contains(modelSrc, "P4: p4/rdma_switch "+name) {
			t.Errorf("switchmodel.%s's doc does not point at p4/rdma_switch %s", name, name)
		}
	}
	// Ingress instantiates the ingress controls, Egress RDMASender.
	ing, eg := controls["Ingress"], controls["Egress"]
	if ing == nil || eg == nil {
		t.Fatal("no Ingress / Egress control")
	}
	count := map[string]int{}
	for _, typ := range ing.instances {
		count[typ]++
	}
	for _, name := range names[:6] {
		want := 1
		if name == "Processor" {
			want = numProcessors
		}
		if count[name] != want {
			t.Errorf("Ingress instantiates %s %d times, want %d", name, count[name], want)
		}
	}
	if eg.instances["rdma_sender"] != "RDMASender" {
		t.Errorf("Egress does not instantiate RDMASender as rdma_sender: %v", eg.instances)
	}
}

func keys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func keysB(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
