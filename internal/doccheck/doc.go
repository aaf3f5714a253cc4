// Package doccheck reads the repository's Markdown and Go sources for the
// references they make to documents, so that a test can prove that every
// reference resolves in a clone: relative links and #anchors in docs/*.md
// and README.md, and citations of the form docs/NAME.md "Section" in Go
// comments and strings.
//
// Anchors follow GitHub's heading slugs (Slug). A quoted section names a
// heading or a bold lead-in (a paragraph or list item that opens with
// **Label**), since the documents use both as named parts: it resolves when
// one of them contains the quoted text, case-sensitively.
//
// The functions are pure: they parse the bytes they are given and touch no
// file; the tests in this package walk the repository. Safe for concurrent
// use.
package doccheck
