package interop

import (
	"os"
	"path"
	"regexp"
	"strings"
	"testing"
)

// The scenario list lives in harness.sh's ALL_SCENARIOS and
// EXTRA_SCENARIOS; this registry, allreduce.sh and guest-init.sh run them,
// and docs/testbed.md describes them. TestHarnessListsEveryScenario checks
// the registry and allreduce.sh against the harness; this test checks the
// guest's dispatch and the document.

func readTestbed(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// shellList is the words of NAME=( … ) in a shell script.
func shellList(t *testing.T, sh, name string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?s)` + name + `=\((.*?)\)`).FindStringSubmatch(sh)
	if m == nil {
		t.Fatalf("no %s in harness.sh", name)
	}
	return strings.Fields(m[1])
}

// TestGuestDispatchesEveryScenario: guest-init.sh's run_one sends every
// harness scenario where it is implemented: allreduce.sh's to allreduce.sh,
// the registry's to /bin/interop, the extras to their own case.
func TestGuestDispatchesEveryScenario(t *testing.T) {
	harness := readTestbed(t, "testbed/soft-roce/qemu/harness.sh")
	all, extra := shellList(t, harness, "ALL_SCENARIOS"), shellList(t, harness, "EXTRA_SCENARIOS")
	guest := readTestbed(t, "testbed/soft-roce/qemu/guest-init.sh")
	body := regexp.MustCompile(`(?s)run_one\(\) \{.*?case \$1 in\n(.*?)\n\s*esac`).FindStringSubmatch(guest)
	if body == nil {
		t.Fatal("no `case $1 in … esac` in guest-init.sh's run_one: the script changed shape; update this test")
	}
	// route is the command of the first case whose pattern matches name.
	type arm struct {
		patterns []string
		command  string
	}
	var arms []arm
	for _, m := range regexp.MustCompile(`(?m)^\t([a-z0-9*| -]+)\)(.*)$`).FindAllStringSubmatch(body[1], -1) {
		var pats []string
		for _, p := range strings.Split(m[1], "|") {
			pats = append(pats, strings.TrimSpace(p))
		}
		arms = append(arms, arm{pats, m[2]})
	}
	route := func(name string) (pattern, command string) {
		for _, a := range arms {
			for _, p := range a.patterns {
				if ok, _ := path.Match(p, name); ok {
					return p, a.command
				}
			}
		}
		return "", ""
	}
	allreduce := readTestbed(t, "testbed/soft-roce/qemu/allreduce.sh")
	for _, n := range all {
		pattern, command := route(n)
		_, registered := Lookup(n)
		switch {
		case registered && (pattern != "*" || !strings.Contains(command, "/bin/interop")):
			t.Errorf("registered scenario %s goes to %q (pattern %q), not to /bin/interop", n, command, pattern)
		case !registered && pattern == n && !strings.Contains(command, "allreduce.sh"):
			// guest-init.sh runs it itself (e.g. rdmadev: the package's
			// host tests on the guest's rxe).
		case !registered && !strings.Contains(command, "allreduce.sh"):
			t.Errorf("scenario %s goes to %q, not to allreduce.sh", n, command)
		case !registered && !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(n)+`\)$`).MatchString(allreduce):
			t.Errorf("scenario %s goes to allreduce.sh, which has no case for it", n)
		}
	}
	for _, n := range extra {
		pattern, command := route(n)
		if strings.Contains(command, "allreduce.sh") && regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(n)+`\)$`).MatchString(allreduce) {
			continue // an all-reduce measurement (allreduce-p4app-loss)
		}
		if pattern != n {
			t.Errorf("extra scenario %s has no case of its own in guest-init.sh (matched %q)", n, pattern)
		}
	}
}

// TestTestbedDocNamesEveryScenario: docs/testbed.md names every scenario
// the harness runs, and states no count of them that is not the harness's.
func TestTestbedDocNamesEveryScenario(t *testing.T) {
	harness := readTestbed(t, "testbed/soft-roce/qemu/harness.sh")
	all := shellList(t, harness, "ALL_SCENARIOS")
	doc := readTestbed(t, "docs/testbed.md")
	for _, n := range append(all, shellList(t, harness, "EXTRA_SCENARIOS")...) {
		if !strings.Contains(doc, "`"+n+"`") && !strings.Contains(doc, " "+n+" ") {
			t.Errorf("docs/testbed.md does not name the scenario %s", n)
		}
	}
	words := map[string]int{"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
		"eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16}
	for _, m := range regexp.MustCompile(`the ([a-z]+) scenarios`).FindAllStringSubmatch(doc, -1) {
		if n, ok := words[m[1]]; ok && n != len(all) {
			t.Errorf("docs/testbed.md says %q; harness.sh's ALL_SCENARIOS has %d", m[0], len(all))
		}
	}
}
