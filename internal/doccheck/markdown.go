package doccheck

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Heading is one ATX heading of a Markdown document.
type Heading struct {
	Line int    // 1-based
	Text string // as written, without the leading #s
	Slug string // GitHub's anchor for it, duplicates suffixed -1, -2, …
}

// Link is one inline link or image target.
type Link struct {
	Line   int
	Target string // as written: path, path#anchor or #anchor
}

// Citation is a document named with a quoted part after it:
// docs/NAME.md "Section" (also with a comma or 's before the quote, several
// quotes joined by "and" or commas) or, in Markdown, [x](NAME.md) "Section".
type Citation struct {
	Line     int
	File     string   // as written
	Sections []string // quoted texts, whitespace collapsed
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	atxHeading = regexp.MustCompile(`^#{1,6}[ \t]+(.*?)[ \t]*#*[ \t]*$`)
	boldLeadIn = regexp.MustCompile(`^\s*(?:[-*+]\s+|\d+\.\s+)?\*\*(.+?)\*\*`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	slugDrop   = regexp.MustCompile(`[^\p{L}\p{M}\p{N}\p{Pc} -]`)
)

// prose is md with every line inside a fenced code block blanked, so that
// line numbers stay those of the file.
func prose(md string) []string {
	lines := strings.Split(md, "\n")
	in := false
	for i, l := range lines {
		if fence.MatchString(l) {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
		}
	}
	return lines
}

// Slug is GitHub's anchor for a heading's text: the rendered text (code
// spans, links and emphasis reduced to their words) lowercased, every
// character that is not a letter, mark, digit, connector, space or hyphen
// dropped, and each space made a hyphen.
func Slug(text string) string {
	text = inlineLink.ReplaceAllString(text, "$1")
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	text = strings.ToLower(text)
	text = slugDrop.ReplaceAllString(text, "")
	return strings.ReplaceAll(text, " ", "-")
}

// Headings are md's ATX headings outside fenced code, with their slugs.
func Headings(md string) []Heading {
	var hs []Heading
	seen := map[string]int{}
	for i, l := range prose(md) {
		m := atxHeading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := Slug(m[1])
		if n := seen[s]; n > 0 {
			seen[s] = n + 1
			s += "-" + strconv.Itoa(n)
		} else {
			seen[s] = 1
		}
		hs = append(hs, Heading{Line: i + 1, Text: m[1], Slug: s})
	}
	return hs
}

// Sections are the names a citation may quote: every heading's text and
// every bold lead-in's, outside fenced code.
func Sections(md string) []string {
	var out []string
	for _, h := range Headings(md) {
		out = append(out, h.Text)
	}
	for _, l := range prose(md) {
		if m := boldLeadIn.FindStringSubmatch(l); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// HasSection reports whether a heading or bold lead-in of md contains
// quoted.
func HasSection(md, quoted string) bool {
	for _, s := range Sections(md) {
		if strings.Contains(collapse(s), quoted) {
			return true
		}
	}
	return false
}

// Links are md's inline link and image targets outside code (fenced or
// spans), with their lines.
func Links(md string) []Link {
	text := proseText(md)
	var out []Link
	for _, m := range inlineLink.FindAllStringSubmatchIndex(text, -1) {
		out = append(out, Link{Line: lineOf(text, m[0]), Target: text[m[4]:m[5]]})
	}
	return out
}

// proseText is md outside fenced code with its code spans blanked
// (newlines kept, so line numbers hold): `[a](b)` or `a.md "S"` in code is
// an example, not a reference.
func proseText(md string) string {
	return codeSpan.ReplaceAllStringFunc(strings.Join(prose(md), "\n"), func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, s)
	})
}

// External reports whether a link target leaves the repository (a URL or
// a mail address), so that only relative targets are resolved.
func External(target string) bool {
	i := strings.IndexAny(target, ":/#")
	return i > 0 && target[i] == ':'
}

var (
	mdCitation = regexp.MustCompile(`(?:\]\(([A-Za-z0-9_./-]+\.md)\)|([A-Za-z0-9_./-]*[A-Za-z0-9_-]+\.md))` + quotedTail)
	goCitation = regexp.MustCompile(`(docs/[a-z0-9-]+\.md)` + quotedTail)
	quoted     = regexp.MustCompile(`"([^"]+)"`)
)

// quotedTail is one quoted part after a file name (docs/NAME.md "S",
// docs/NAME.md, "S", docs/NAME.md's "S"), and more joined by "and" or
// commas.
const quotedTail = `((?:'s|,)?\s+"[^"]+"(?:(?:,|\s+and)\s+"[^"]+")*)`

// MarkdownCitations are md's citations outside code: a .md file name or
// a link to one, followed by a quoted section.
func MarkdownCitations(md string) []Citation {
	text := proseText(md)
	var out []Citation
	for _, m := range mdCitation.FindAllStringSubmatchIndex(text, -1) {
		file := ""
		if m[2] >= 0 {
			file = text[m[2]:m[3]]
		} else {
			file = text[m[4]:m[5]]
		}
		out = append(out, Citation{Line: lineOf(text, m[0]), File: file, Sections: quotedParts(text[m[6]:m[7]])})
	}
	return out
}

// TextCitations are the docs/NAME.md citations in one piece of text (a Go
// comment or string), with or without a quoted section; line is added to
// the text's own line numbers.
func TextCitations(text string, line int) []Citation {
	var out []Citation
	for _, m := range regexp.MustCompile(`docs/[a-z0-9-]+\.md`).FindAllStringIndex(text, -1) {
		c := Citation{Line: line + strings.Count(text[:m[0]], "\n"), File: text[m[0]:m[1]]}
		if q := goCitation.FindStringSubmatchIndex(text[m[0]:]); q != nil && q[0] == 0 {
			c.Sections = quotedParts(text[m[0]+q[4] : m[0]+q[5]])
		}
		out = append(out, c)
	}
	return out
}

func quotedParts(tail string) []string {
	var out []string
	for _, q := range quoted.FindAllStringSubmatch(tail, -1) {
		out = append(out, collapse(q[1]))
	}
	return out
}

// collapse makes every run of white space (a wrapped line, a comment's
// continuation) one space.
func collapse(s string) string {
	return strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " ")
}

func lineOf(text string, off int) int {
	return 1 + strings.Count(text[:off], "\n")
}
