package plot

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNiceScale(t *testing.T) {
	for _, tt := range []struct{ v, max, step float64 }{{4.2, 5, 1}, {0.9, 1, 0.2}, {73e6, 80e6, 20e6}, {0, 1, 0.2}} {
		if m, s := NiceScale(tt.v); m != tt.max || s != tt.step {
			t.Errorf("NiceScale(%v) = %v, %v; want %v, %v", tt.v, m, s, tt.max, tt.step)
		}
	}
}

func TestFormatSI(t *testing.T) {
	for _, tt := range []struct {
		v    float64
		want string
	}{{2.776e9, "2.78G"}, {250e3, "250k"}, {1.5e6, "1.5M"}, {12, "12"}, {0, "0"}} {
		if got := FormatSI(tt.v); got != tt.want {
			t.Errorf("FormatSI(%v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

func TestBound(t *testing.T) {
	// 1 M elements at 2 G elements/s: half a millisecond.
	if p := Bound(8, 1<<20, 2<<30); p.X != 8 || p.Y != 2<<30 || p.MS != 0.48828125 || p.MSLow != p.MS || p.MSHigh != p.MS {
		t.Fatalf("Bound = %+v", p)
	}
}

// TestWriteFile: a worker sweep with a measured series and its bound is a
// well-formed SVG document with the title, the legend, one tick per
// worker count, a dot per measurement and the bound dashed.
// TestTitleSize: a title up to the width keeps 15 px; a longer one
// shrinks to fit, down to 10 px.
func TestTitleSize(t *testing.T) {
	for _, tc := range []struct{ n, want int }{{60, 15}, {112, 15}, {132, 12}, {168, 10}, {400, 10}} {
		if got := titleSize(strings.Repeat("x", tc.n)); got != tc.want {
			t.Errorf("a title of %d characters: %d px, want %d", tc.n, got, tc.want)
		}
	}
}

func TestWriteFile(t *testing.T) {
	sw := Series{Name: "SwitchML", Color: ColorSwitchML}
	ceil := Series{Name: "SwitchML ceiling", Color: ColorSwitchML, Dashed: true}
	for _, n := range []float64{256, 8, 64} {
		sw.Points = append(sw.Points, Point{X: n, MS: 0.38, MSLow: 0.37, MSHigh: 0.39, Y: 2.7e9})
		ceil.Points = append(ceil.Points, Bound(n, 1<<20, 2.9e9))
	}
	series := []Series{sw, ceil}
	SortByX(series)
	if p := series[0].Points; p[0].X != 8 || p[1].X != 64 || p[2].X != 256 {
		t.Fatalf("SortByX: %+v", p)
	}
	path := filepath.Join(t.TempDir(), "sweep.svg")
	if err := WriteFile(path, "a <sweep> & its bound", ATEAxes(), series); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	counts := map[string]int{}
	texts := ""
	for {
		tok, err := dec.Token()
		if err != nil {
			if err != io.EOF {
				t.Fatalf("not well-formed SVG: %v", err)
			}
			break
		}
		switch e := tok.(type) {
		case xml.StartElement:
			class := ""
			dashed := false
			for _, a := range e.Attr {
				switch a.Name.Local {
				case "class":
					class = a.Value
				case "stroke-dasharray":
					dashed = true
				}
			}
			counts[e.Name.Local+" "+class]++
			if dashed {
				counts["dashed "+class]++
			}
		case xml.CharData:
			texts += string(e) + "|"
		}
	}
	// Two panels: a dot per point and the legend's, and the bound's two
	// segments per panel plus its legend line, all dashed.
	if got := counts["circle series-SwitchML"]; got != 2*3+1 {
		t.Errorf("%d SwitchML dots, want 7", got)
	}
	if got := counts["dashed series-SwitchML-ceiling"]; got != 2*2+1 {
		t.Errorf("%d dashed ceiling lines, want 5", got)
	}
	for _, want := range []string{"a <sweep> & its bound|", "|8|", "|64|", "|256|", "|workers|", "ATE/s (tensor elements reduced per second)"} {
		if !strings.Contains(texts, want) {
			t.Errorf("plot text lacks %q: %s", want, texts)
		}
	}
}
