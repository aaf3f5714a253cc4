package p4rt

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCompiler is a stand-in for bf-p4c that records its arguments,
// writes a P4Info and a table summary with the given stage count, and
// fails when asked to. With -DPAYLOAD_1024 its P4Info names the
// profile's table, with -DWIRE_16 it declares the Processor lanes bit<16>,
// unless FAKE_NO_PROFILE is set.
const fakeCompiler = `#!/bin/sh
out=
p1024=
w16=
while [ $# -gt 0 ]; do
	echo "$1" >> "$FAKE_LOG"
	case "$1" in
	-o) out=$2 ;;
	--p4runtime-files) info=$2 ;;
	-DPAYLOAD_1024) p1024=1 ;;
	-DWIRE_16) w16=1 ;;
	esac
	shift
done
echo "--- end" >> "$FAKE_LOG"
[ -n "$FAKE_FAIL" ] && { echo "rdma_switch.p4(1): error: $FAKE_FAIL"; exit 1; }
mkdir -p "$out/pipe/logs"
echo "Number of stages in table allocation: $FAKE_STAGES" > "$out/pipe/logs/table_summary.log"
[ -z "$FAKE_NO_BIN" ] && echo bin > "$out/pipe/tofino.bin"
echo "pkg_info {}" > "$info"
[ -n "$p1024" ] && [ -z "$FAKE_NO_PROFILE" ] && echo 'tables { preamble { name: "Ingress.next_step.loopback_port" } }' >> "$info"
if [ -n "$w16" ] && [ -z "$FAKE_NO_PROFILE" ]; then lane=16; else lane=32; fi
printf 'type_info { structs { key: "value_pair_t" value { members {\n        name: "first"\n        type_spec { bitstring { bit {\n              bitwidth: %d\n        } } } } } } }\n' "$lane" >> "$info"
exit 0
`

func runBuild(t *testing.T, env ...string) (string, string, error) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	dir := t.TempDir()
	cc := filepath.Join(dir, "bf-p4c")
	if err := os.WriteFile(cc, []byte(fakeCompiler), 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "args.log")
	out := filepath.Join(dir, "out")
	cmd := exec.Command("bash", filepath.Join("..", "..", "..", "p4", "build.sh"), out)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "P4C=" + cc, "FAKE_LOG=" + log, "FAKE_STAGES=11"}, env...)
	b, err := cmd.CombinedOutput()
	args, _ := os.ReadFile(log)
	return string(b), string(args) + "\n" + out, err
}

// TestBuildScriptCompilesBothProfiles: `make p4` runs the compiler four
// times (default, -DTEST_PROFILE, -DPAYLOAD_1024, -DWIRE_16) for TNA with
// P4Runtime output and leaves the default profile's P4Info where the
// controller reads it.
func TestBuildScriptCompilesBothProfiles(t *testing.T) {
	out, args, err := runBuild(t)
	if err != nil {
		t.Fatalf("build.sh: %v\n%s", err, out)
	}
	runs := strings.Split(strings.TrimSpace(args[:strings.LastIndex(args, "\n")]), "--- end")
	if len(runs) != 5 { // four runs and the empty tail
		t.Fatalf("compiler ran %d times, want 4:\n%s", len(runs)-1, args)
	}
	for i, r := range runs[:4] {
		for _, want := range []string{"--target\ntofino", "--arch\ntna", "-g", "--p4runtime-files", "--p4runtime-format\ntext", "rdma_switch.p4"} {
			if !strings.Contains(r, want) {
				t.Errorf("run %d lacks %q:\n%s", i, want, r)
			}
		}
		if strings.Contains(r, "-DTEST_PROFILE") != (i == 1) {
			t.Errorf("run %d: -DTEST_PROFILE present = %v, want %v", i, !(i == 1), i == 1)
		}
		if strings.Contains(r, "-DPAYLOAD_1024") != (i == 2) {
			t.Errorf("run %d: -DPAYLOAD_1024 present = %v, want %v", i, !(i == 2), i == 2)
		}
		if strings.Contains(r, "-DWIRE_16") != (i == 3) {
			t.Errorf("run %d: -DWIRE_16 present = %v, want %v", i, !(i == 3), i == 3)
		}
	}
	dir := args[strings.LastIndex(args, "\n")+1:]
	if _, err := os.Stat(filepath.Join(dir, "p4info.txt")); err != nil {
		t.Errorf("no P4Info for the controller: %v\n%s", err, out)
	}
	if !strings.Contains(out, "11 of 12 MAU stages") || !strings.Contains(out, "payload1024 profile: 11 of 12 MAU stages") ||
		!strings.Contains(out, "wire16 profile: 11 of 12 MAU stages") {
		t.Errorf("stage count not reported for every profile:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "payload1024", "p4info.txt")); err != nil {
		t.Errorf("no P4Info for the 1024 B profile: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "wire16", "p4info.txt")); err != nil {
		t.Errorf("no P4Info for the 16-bit profile: %v\n%s", err, out)
	}
}

// TestBuildScriptChecks1024Profile: a 1024 B build whose P4Info lacks the
// profile's table (the define did not take) fails.
func TestBuildScriptChecks1024Profile(t *testing.T) {
	out, _, err := runBuild(t, "FAKE_NO_PROFILE=1")
	if err == nil || !strings.Contains(out, "-DPAYLOAD_1024 did not take effect") {
		t.Errorf("1024 B P4Info without loopback_port: err %v, output:\n%s", err, out)
	}
}

// TestBuildScriptChecksWire16Profile: a 16-bit build whose P4Info declares
// 32-bit Processor lanes (the define did not take) fails.
func TestBuildScriptChecksWire16Profile(t *testing.T) {
	out, _, err := runBuild(t, "FAKE_NO_PROFILE=1")
	if err == nil || !strings.Contains(out, "-DWIRE_16 did not take effect") {
		t.Errorf("16-bit P4Info with 32-bit lanes: err %v, output:\n%s", err, out)
	}
}

func TestBuildScriptFailsOnTooManyStages(t *testing.T) {
	out, _, err := runBuild(t, "FAKE_STAGES=13")
	if err == nil || !strings.Contains(out, "uses 13 MAU stages; Tofino 1 has 12") {
		t.Errorf("13 stages: err %v, output:\n%s", err, out)
	}
}

func TestBuildScriptFailsOnCompilerError(t *testing.T) {
	out, _, err := runBuild(t, "FAKE_FAIL=boom")
	if err == nil || !strings.Contains(out, "FAILED") {
		t.Errorf("compiler error: err %v, output:\n%s", err, out)
	}
}

// TestBuildScriptFailsWithoutBinary: a compile that writes no tofino.bin
// (bfas did not run) fails.
func TestBuildScriptFailsWithoutBinary(t *testing.T) {
	out, _, err := runBuild(t, "FAKE_NO_BIN=1")
	if err == nil || !strings.Contains(out, "no tofino.bin written") {
		t.Errorf("no tofino.bin: err %v, output:\n%s", err, out)
	}
}

// TestBuildScriptWithoutCompilerFailsInCI: with CI set, a missing
// compiler is a failure (CI compiles every profile).
func TestBuildScriptWithoutCompilerFailsInCI(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	if _, err := exec.LookPath("bf-p4c"); err == nil {
		t.Skip("a bf-p4c is installed")
	}
	cmd := exec.Command("bash", filepath.Join("..", "..", "..", "p4", "build.sh"), t.TempDir())
	cmd.Env = []string{"PATH=" + t.TempDir() + ":/usr/bin:/bin", "CI=1"}
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "no Tofino compiler") {
		t.Errorf("CI without a compiler: err %v, output:\n%s", err, b)
	}
}

func TestBuildScriptWithoutCompilerSaysSo(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	cmd := exec.Command("bash", filepath.Join("..", "..", "..", "p4", "build.sh"), t.TempDir())
	cmd.Env = []string{"PATH=" + t.TempDir() + ":/usr/bin:/bin"}
	if _, err := exec.LookPath("bf-p4c"); err == nil {
		t.Skip("a bf-p4c is installed")
	}
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "no Tofino compiler") || !strings.Contains(string(b), "Nothing was compiled") {
		t.Errorf("without a compiler: err %v, output:\n%s", err, b)
	}
}
