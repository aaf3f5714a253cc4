package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
)

// GoCitations are the docs/NAME.md citations in a Go file's comments and
// string literals (error messages and flag usage cite documents too). A
// comment's lines are read as one text, so a quoted section may wrap.
func GoCitations(filename string, src []byte) ([]Citation, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("doccheck: parse %s: %w", filename, err)
	}
	var out []Citation
	for _, cg := range f.Comments {
		out = append(out, TextCitations(cg.Text(), fset.Position(cg.Pos()).Line)...)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		if s, err := strconv.Unquote(lit.Value); err == nil {
			out = append(out, TextCitations(s, fset.Position(lit.Pos()).Line)...)
		}
		return true
	})
	return out, nil
}
