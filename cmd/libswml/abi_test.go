package main

import (
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The C ABI exists three times: the C macros and exports of main.go, the Go
// constants of glue.go and the Python binding (python/swml/_lib.py). These
// tests read the sources and check that they agree.

const pythonBinding = "../../python/swml/_lib.py"

// abiConstants are the Go side of every C macro, by the macro's name.
var abiConstants = map[string]int{
	"SWML_OK": codeOK, "SWML_PENDING": codePending, "SWML_EINVAL": codeInval, "SWML_ECLOSED": codeClosed,
	"SWML_EPEER": codePeer, "SWML_ETIMEOUT": codeTimeout, "SWML_EINTERNAL": codeInternal, "SWML_EBROKEN": codeBroken,
	"SWML_EHANDLE": codeHandle, "SWML_EFORK": codeFork, "SWML_EFAIL": codeFail, "SWML_EMISMATCH": codeMismatch,
	"SWML_FLOAT32": dtypeFloat32, "SWML_INT32": dtypeInt32, "SWML_BFLOAT16": dtypeBFloat16, "SWML_FLOAT16": dtypeFloat16,
}

func readSource(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestABIConstants: the C macros, the Go constants and the Python
// constants (the macro's name without SWML_) have the same names and
// values.
func TestABIConstants(t *testing.T) {
	macros := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^#define (SWML_[A-Z0-9_]+)\s+(-?\d+)\s*$`).FindAllStringSubmatch(readSource(t, "main.go"), -1) {
		v, _ := strconv.Atoi(m[2])
		macros[m[1]] = v
	}
	py := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z][A-Z0-9_]*) = (-?\d+)\s*$`).FindAllStringSubmatch(readSource(t, pythonBinding), -1) {
		v, _ := strconv.Atoi(m[2])
		py[m[1]] = v
	}
	if len(macros) == 0 || len(py) == 0 {
		t.Fatalf("read %d C macros and %d Python constants: the sources changed shape; update this test", len(macros), len(py))
	}
	for name, v := range macros {
		if g, ok := abiConstants[name]; !ok || g != v {
			t.Errorf("C %s = %d, Go has %d (present %v)", name, v, g, ok)
		}
		if p, ok := py[strings.TrimPrefix(name, "SWML_")]; !ok || p != v {
			t.Errorf("C %s = %d, Python %s = %d (present %v)", name, v, strings.TrimPrefix(name, "SWML_"), p, ok)
		}
	}
	for name := range abiConstants {
		if _, ok := macros[name]; !ok {
			t.Errorf("Go has %s, the C header does not", name)
		}
	}
	for name, v := range py {
		if _, ok := macros["SWML_"+name]; !ok {
			t.Errorf("Python has %s = %d, the C header has no SWML_%s", name, v, name)
		}
	}
}

// cgoToCtypes is the ctypes type of each C type the exports use.
var cgoToCtypes = map[string]string{
	"*C.char": "ctypes.c_char_p", "C.int": "ctypes.c_int", "C.int64_t": "ctypes.c_int64", "*C.int64_t": "ctypes.POINTER(ctypes.c_int64)",
	"C.double": "ctypes.c_double", "C.size_t": "ctypes.c_size_t", "unsafe.Pointer": "ctypes.c_void_p",
}

// TestABIArgtypes: every //export of main.go has its Python argtypes, in
// the same order and of the matching ctypes types, and an int restype.
func TestABIArgtypes(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "main.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	exports := map[string][]string{} // name → ctypes of each parameter
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Doc == nil || !hasExport(fd) {
			continue
		}
		var params []string
		for _, p := range fd.Type.Params.List {
			var sb strings.Builder
			if err := printer.Fprint(&sb, fset, p.Type); err != nil {
				t.Fatal(err)
			}
			ct, ok := cgoToCtypes[sb.String()]
			if !ok {
				t.Fatalf("%s: parameter type %s has no ctypes mapping in this test: add it", fd.Name.Name, sb.String())
			}
			for range max(len(p.Names), 1) {
				params = append(params, ct)
			}
		}
		exports[fd.Name.Name] = params
	}
	if len(exports) == 0 {
		t.Fatal("no //export in main.go: the source changed shape; update this test")
	}
	py := readSource(t, pythonBinding)
	aliases := pythonAliases(py)
	argtypes := map[string][]string{}
	for _, m := range regexp.MustCompile(`lib\.(\w+)\.argtypes = \[(.*)\]`).FindAllStringSubmatch(py, -1) {
		var types []string
		for _, a := range splitTopLevel(m[2]) {
			if r, ok := aliases[a]; ok {
				a = r
			}
			types = append(types, a)
		}
		argtypes[m[1]] = types
	}
	restypeList := regexp.MustCompile(`(?s)for f in \(([^)]*)\):\s*\n\s*getattr\(lib, f\)\.restype = ctypes\.c_int`).FindStringSubmatch(py)
	if restypeList == nil {
		t.Fatal("python/swml/_lib.py sets no int restype list: the source changed shape; update this test")
	}
	for name, params := range exports {
		got, ok := argtypes[name]
		if !ok {
			t.Errorf("export %s has no argtypes in %s", name, pythonBinding)
			continue
		}
		if !slices.Equal(got, params) {
			t.Errorf("%s: Python argtypes %v, the export takes %v", name, got, params)
		}
		if !strings.Contains(restypeList[1], strconv.Quote(name)) {
			t.Errorf("%s: no int restype in %s", name, pythonBinding)
		}
	}
	for name := range argtypes {
		if _, ok := exports[name]; !ok {
			t.Errorf("Python sets argtypes of %s, which main.go does not export", name)
		}
	}
}

func hasExport(fd *ast.FuncDecl) bool {
	for _, c := range fd.Doc.List {
		if c.Text == "//export "+fd.Name.Name {
			return true
		}
	}
	return false
}

// pythonAliases reads assignments of ctypes names, `a, b = ctypes.x, ctypes.y`
// and `a = ctypes.x`.
func pythonAliases(py string) map[string]string {
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*([a-z_][\w, ]*) = (ctypes\..*)$`).FindAllStringSubmatch(py, -1) {
		names, vals := splitTopLevel(m[1]), splitTopLevel(m[2])
		if len(names) == len(vals) {
			for i, n := range names {
				out[n] = vals[i]
			}
		}
	}
	return out
}

// splitTopLevel splits s at the commas outside parentheses and brackets.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if rest := strings.TrimSpace(s[start:]); rest != "" {
		out = append(out, rest)
	}
	return out
}
