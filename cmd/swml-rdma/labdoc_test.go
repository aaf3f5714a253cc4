package main

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/swml-rdma/swml-rdma/testbed/netlab/sweep"
)

// jsonKeys are the keys encoding/json writes for a struct type: tagged or
// exported fields, embedded structs without a tag flattened in.
func jsonKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		if f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct {
			keys = append(keys, jsonKeys(f.Type)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		keys = append(keys, name)
	}
	return keys
}

// docLabKeys are the key lists of docs/netlab.md's "Output": the bullets
// "- Report:", "- Row:", "- Shared:", "- Job:" and "- DDP:", each the code-spans of
// its (wrapped) lines.
func docLabKeys(t *testing.T) map[string][]string {
	t.Helper()
	md, err := os.ReadFile("../../docs/netlab.md")
	if err != nil {
		t.Fatal(err)
	}
	_, out, ok := strings.Cut(string(md), "\n## Output\n")
	if !ok {
		t.Fatal("docs/netlab.md has no \"## Output\" section")
	}
	lists := map[string][]string{}
	bullet := regexp.MustCompile(`(?m)^- (Report|Row|Shared|Job|DDP):((?:.*\n)(?:  .*\n)*)`)
	for _, m := range bullet.FindAllStringSubmatch(out, -1) {
		for _, k := range regexp.MustCompile("`([a-z0-9_]+)`").FindAllStringSubmatch(m[2], -1) {
			lists[m[1]] = append(lists[m[1]], k[1])
		}
	}
	return lists
}

// TestLabDocJSONKeys: docs/netlab.md lists exactly the keys `swml-rdma lab
// --json` writes, in the order it writes them, for the report, a row, a
// row's shared run, one job of it and a DDP row's training.
func TestLabDocJSONKeys(t *testing.T) {
	doc := docLabKeys(t)
	for _, c := range []struct {
		list string
		typ  reflect.Type
	}{
		{"Report", reflect.TypeFor[sweep.Report]()},
		{"Row", reflect.TypeFor[sweep.Row]()},
		{"Shared", reflect.TypeFor[sweep.Shared]()},
		{"Job", reflect.TypeFor[sweep.Job]()},
		{"DDP", reflect.TypeFor[sweep.DDPRow]()},
	} {
		t.Run(c.list, func(t *testing.T) {
			want := jsonKeys(c.typ)
			if got := doc[c.list]; !slices.Equal(got, want) {
				t.Errorf("docs/netlab.md's %q keys:\n  %v\nthe JSON's (%v):\n  %v", c.list, got, c.typ, want)
			}
		})
	}
}
