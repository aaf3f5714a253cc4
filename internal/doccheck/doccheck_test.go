package doccheck

import (
	"reflect"
	"testing"
)

func TestSlug(t *testing.T) {
	for _, c := range []struct{ name, heading, want string }{
		{"plain", "Link-rate ceilings", "link-rate-ceilings"},
		{"punctuation dropped", "Engine alone: the worker engine on an instant switch", "engine-alone-the-worker-engine-on-an-instant-switch"},
		{"code span", "End to end: `swml-rdma bench` (4 workers, 64 MiB)", "end-to-end-swml-rdma-bench-4-workers-64-mib"},
		{"symbols leave their spaces", "Userspace NIC vs bare batched UDP (target ≥ 0.7)", "userspace-nic-vs-bare-batched-udp-target--07"},
		{"underscore kept", "Controller — `swml_controller_…`", "controller--swml_controller_"},
		{"link text", "See [the lab](netlab.md)", "see-the-lab"},
		{"non-ASCII letters kept", "Größe ×2", "größe-2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Slug(c.heading); got != c.want {
				t.Errorf("Slug(%q) = %q, want %q", c.heading, got, c.want)
			}
		})
	}
}

func TestHeadings(t *testing.T) {
	md := "# Top\n\ntext\n\n```sh\n# not a heading\n```\n\n## Loss\n\n#not-a-heading\n\n### Loss\n"
	var got []Heading
	got = append(got, Headings(md)...)
	want := []Heading{{1, "Top", "top"}, {9, "Loss", "loss"}, {13, "Loss", "loss-1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Headings = %+v, want %+v", got, want)
	}
}

func TestLinks(t *testing.T) {
	md := "See [a](a.md#x) and ![plot](img/p.svg),\n`[code](no.md)` [wrapped\ntext](b.md \"title\") [web](https://example.com).\n```\n[fenced](no.md)\n```\n"
	got := Links(md)
	want := []Link{{1, "a.md#x"}, {1, "img/p.svg"}, {2, "b.md"}, {3, "https://example.com"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Links = %+v, want %+v", got, want)
	}
	for target, ext := range map[string]bool{"https://x.org/a": true, "mailto:a@b": true, "a.md#x:y": false, "../b.md": false, "#top": false} {
		if External(target) != ext {
			t.Errorf("External(%q) = %v, want %v", target, !ext, ext)
		}
	}
}

func TestSections(t *testing.T) {
	md := "# Doc\n\n**Known limit (rxe): it wedges.** Text.\n\n- **Bound.** Text.\n\n```\n**fenced**\n```\n"
	for _, c := range []struct {
		quoted string
		want   bool
	}{
		{"Doc", true}, {"Known limit", true}, {"Bound", true}, {"fenced", false}, {"known limit", false}, {"Text", false},
	} {
		if got := HasSection(md, c.quoted); got != c.want {
			t.Errorf("HasSection(%q) = %v, want %v", c.quoted, got, c.want)
		}
	}
}

func TestCitations(t *testing.T) {
	md := "as [benchmarks.md](benchmarks.md) \"Switch cores\" says; protocol.md \"Loss\nrecovery\", Bound;\n" +
		"docs/testbed.md, \"Known limit\" and \"The rule\"; a file.md without a quote; `code.md \"S\"`.\n"
	got := MarkdownCitations(md)
	want := []Citation{
		{1, "benchmarks.md", []string{"Switch cores"}},
		{1, "protocol.md", []string{"Loss recovery"}},
		{3, "docs/testbed.md", []string{"Known limit", "The rule"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MarkdownCitations = %+v, want %+v", got, want)
	}

	src := []byte("package p\n\n// Measured in docs/benchmarks.md \"Loss\n// recovery\", mechanism 3; see docs/bench.md.\nvar x = \"see (docs/testbed.md \\\"Known limit\\\")\"\n\n// docs/netlab.md's \"Output\" lists them.\nvar y int\n")
	cites, err := GoCitations("p.go", src)
	if err != nil {
		t.Fatal(err)
	}
	wantGo := []Citation{
		{3, "docs/benchmarks.md", []string{"Loss recovery"}},
		{4, "docs/bench.md", nil},
		{7, "docs/netlab.md", []string{"Output"}},
		{5, "docs/testbed.md", []string{"Known limit"}}, // strings after comments
	}
	if !reflect.DeepEqual(cites, wantGo) {
		t.Errorf("GoCitations = %+v, want %+v", cites, wantGo)
	}
}
