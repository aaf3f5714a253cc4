package doccheck

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The tests below read the repository itself: every reference a document
// or a Go file makes must resolve in a clone, with nothing outside it.

// repoRoot is the directory of go.mod above the test's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// docFiles are the documents whose links are checked, relative to the
// root: README.md and docs/*.md.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs/*.md under %s: %v", root, err)
	}
	out := []string{"README.md"}
	for _, f := range files {
		out = append(out, "docs/"+filepath.Base(f))
	}
	return out
}

// docs caches the documents read, by path relative to the root.
type docs struct {
	t     *testing.T
	root  string
	cache map[string]string
}

func (d *docs) read(rel string) (string, bool) {
	if s, ok := d.cache[rel]; ok {
		return s, true
	}
	b, err := os.ReadFile(filepath.Join(d.root, filepath.FromSlash(rel)))
	if err != nil {
		return "", false
	}
	d.cache[rel] = string(b)
	return string(b), true
}

// resolve is target (relative to the document from) as a path relative to
// the root; ok is false when it leaves the repository.
func resolve(from, target string) (string, bool) {
	p := path.Clean(path.Join(path.Dir(from), target))
	return p, p != ".." && !strings.HasPrefix(p, "../") && !path.IsAbs(p)
}

func (d *docs) hasAnchor(rel, anchor string) bool {
	md, _ := d.read(rel)
	for _, h := range Headings(md) {
		if h.Slug == anchor {
			return true
		}
	}
	return false
}

// TestMarkdownLinks: every relative link and image in README.md and
// docs/*.md names a file of the repository, and every #anchor a heading of
// the Markdown file it points into.
func TestMarkdownLinks(t *testing.T) {
	root := repoRoot(t)
	d := &docs{t: t, root: root, cache: map[string]string{}}
	checked := 0
	for _, file := range docFiles(t, root) {
		md, _ := d.read(file)
		for _, l := range Links(md) {
			if External(l.Target) {
				continue
			}
			checked++
			p, anchor, _ := strings.Cut(l.Target, "#")
			rel := file
			if p != "" {
				var ok bool
				if rel, ok = resolve(file, p); !ok {
					t.Errorf("%s:%d: link %q leaves the repository", file, l.Line, l.Target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
					t.Errorf("%s:%d: link %q: no file %s in the repository", file, l.Line, l.Target, rel)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(rel, ".md") {
				t.Errorf("%s:%d: link %q: an anchor into a file that is not Markdown cannot be checked", file, l.Line, l.Target)
			} else if !d.hasAnchor(rel, anchor) {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", file, l.Line, l.Target, rel, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the link parser is broken")
	}
}

// citedDoc is the document a citation names, relative to the root: a
// path from the root (docs/…) or one relative to the citing document.
func (d *docs) citedDoc(from, file string) (string, bool) {
	for _, cand := range []string{file, path.Join(path.Dir(from), file)} {
		if rel, ok := resolve(".", cand); ok {
			if _, found := d.read(rel); found {
				return rel, true
			}
		}
	}
	return "", false
}

func (d *docs) checkCitation(where string, from string, c Citation) {
	rel, ok := d.citedDoc(from, c.File)
	if !ok {
		d.t.Errorf("%s:%d: cites %s, which is not in the repository", where, c.Line, c.File)
		return
	}
	md, _ := d.read(rel)
	for _, s := range c.Sections {
		if !HasSection(md, s) {
			d.t.Errorf("%s:%d: cites %s %q: no heading or bold lead-in of %s contains it", where, c.Line, c.File, s, rel)
		}
	}
}

// TestMarkdownCitations: a document named with a quoted section after it
// (protocol.md "Loss recovery", [benchmarks.md](benchmarks.md) "Loss")
// exists, and so does the section.
func TestMarkdownCitations(t *testing.T) {
	root := repoRoot(t)
	d := &docs{t: t, root: root, cache: map[string]string{}}
	n := 0
	for _, file := range docFiles(t, root) {
		md, _ := d.read(file)
		for _, c := range MarkdownCitations(md) {
			n++
			d.checkCitation(file, file, c)
		}
	}
	if n == 0 {
		t.Fatal("no quoted citation found in the documents: the parser is broken")
	}
}

// TestGoCitations: every docs/NAME.md a Go comment or string names exists,
// and so does every section quoted after it.
func TestGoCitations(t *testing.T) {
	root := repoRoot(t)
	d := &docs{t: t, root: root, cache: map[string]string{}}
	sections := 0
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if name := e.Name(); p != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || ownTest(root, p) {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		cites, err := GoCitations(rel, src)
		if err != nil {
			return err
		}
		for _, c := range cites {
			sections += len(c.Sections)
			d.checkCitation(filepath.ToSlash(rel), ".", c)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sections == 0 {
		t.Fatal("no quoted section found in any Go citation: the parser is broken")
	}
}

// TestNoDesignNotesCited: no document or source file cites the design
// notes, which live outside the repository; the facts they held are in
// docs/.
func TestNoDesignNotesCited(t *testing.T) {
	root := repoRoot(t)
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if name := e.Name(); p != root && strings.HasPrefix(name, ".") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".md", ".proto", ".p4", ".sh", ".py":
		default:
			return nil
		}
		if ownTest(root, p) {
			return nil // this package names what it looks for
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "DESIGN"+".md") {
				t.Errorf("%s:%d: cites the design notes, which a clone lacks: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// ownTest reports whether p is a test file of this package, whose fixtures
// cite on purpose.
func ownTest(root, p string) bool {
	rel, _ := filepath.Rel(root, p)
	return filepath.ToSlash(filepath.Dir(rel)) == "internal/doccheck" && strings.HasSuffix(p, "_test.go")
}

// TestTestbedScenarioCount: every "N scenarios" in docs/testbed.md is the
// number of scenarios harness.sh runs by default (ALL_SCENARIOS).
func TestTestbedScenarioCount(t *testing.T) {
	root := repoRoot(t)
	d := &docs{t: t, root: root, cache: map[string]string{}}
	harness, ok := d.read("testbed/soft-roce/qemu/harness.sh")
	if !ok {
		t.Fatal("no testbed/soft-roce/qemu/harness.sh")
	}
	m := regexp.MustCompile(`(?s)\nALL_SCENARIOS=\((.*?)\)`).FindStringSubmatch(harness)
	if m == nil {
		t.Fatal("no ALL_SCENARIOS=( … ) in harness.sh: the script changed shape; update this test")
	}
	want := len(strings.Fields(m[1]))
	md, _ := d.read("docs/testbed.md")
	counts := regexp.MustCompile(`\b(\d+) scenarios\b`).FindAllStringSubmatch(md, -1)
	if len(counts) == 0 {
		t.Fatal("docs/testbed.md states no count of scenarios")
	}
	for _, c := range counts {
		if n, _ := strconv.Atoi(c[1]); n != want {
			t.Errorf("docs/testbed.md says %q; harness.sh's ALL_SCENARIOS has %d", c[0], want)
		}
	}
}
