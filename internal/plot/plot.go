// Package plot draws the benchmarks' sweeps as SVG: two panels side by
// side, time per all-reduce (median, with a min–max bar) and a second
// measure (ATE/s, or the inflation over the loss-free time), against the
// swept variable (worker count on a log₂ axis, or one evenly spaced tick per
// value), one series per algorithm and each one's bound (a link-rate
// ceiling) dashed. `swml-rdma bench --plot`, `swml-rdma lab --plot` and
// the simulation's `-plot` (docs/sim.md "Plots") draw through it, so the
// three read alike.
//
// The plot is a display list written out as SVG, which every browser and
// document tool renders; convert it (rsvg-convert, inkscape) for a raster
// image. Nothing here is shared or mutable after Layout returns: a Drawing
// may be written from any goroutine.
package plot

import (
	"bufio"
	"cmp"
	"encoding/xml"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Width and Height are a plot's size in SVG pixels.
const (
	Width  = 960
	Height = 440
)

// Series is one curve: an algorithm's measurements, or a bound drawn
// dashed, without dots or min–max bars.
type Series struct {
	Name   string
	Color  color.RGBA
	Points []Point
	Dashed bool
}

// Point is one measurement: X is the swept value (worker count, loss
// rate), MS the median time per all-reduce in milliseconds with its
// minimum and maximum, Y the right panel's value.
type Point struct {
	X                 float64
	MS, MSLow, MSHigh float64
	Y                 float64
}

// Bound is the point of a link-rate ceiling at x: ceiling elements per
// second on the right, the time elements take at it on the left.
func Bound(x float64, elements int, ceiling float64) Point {
	t := float64(elements) / ceiling * 1e3
	return Point{X: x, MS: t, MSLow: t, MSHigh: t, Y: ceiling}
}

// Axes names the x axis (log₂-spaced when LogX, else one evenly spaced
// tick per value) and the right panel, whose values RightFormat writes.
type Axes struct {
	X           string
	LogX        bool
	Right       string
	RightFormat func(float64) string
}

// ATEAxes are the axes of a worker sweep: ATE/s against workers.
func ATEAxes() Axes {
	return Axes{X: "workers", LogX: true, Right: "ATE/s (tensor elements reduced per second)", RightFormat: FormatSI}
}

// The series colors, one per system, the same in every plot.
var (
	ColorSwitchML = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	ColorRing     = color.RGBA{0xff, 0x7f, 0x0e, 0xff}
	ColorGloo     = color.RGBA{0x2c, 0xa0, 0x2c, 0xff}
	ColorWire16   = color.RGBA{0x94, 0x67, 0xbd, 0xff}
	// ColorSharedJobs is SwitchML's jobs when several share the switches.
	ColorSharedJobs = color.RGBA{0xd6, 0x27, 0x28, 0xff}

	colorAxis = color.RGBA{0x22, 0x22, 0x22, 0xff}
	colorGrid = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	colorText = color.RGBA{0x22, 0x22, 0x22, 0xff}
)

// SortByX orders every series' points by X, as the lines join them.
func SortByX(series []Series) {
	for i := range series {
		slices.SortFunc(series[i].Points, func(a, b Point) int { return cmp.Compare(a.X, b.X) })
	}
}

// WriteFile lays the series out under title and writes the SVG to path.
func WriteFile(path, title string, ax Axes, series []Series) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	err = Layout(title, ax, series).WriteSVG(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// Drawing is a display list in pixel coordinates (origin top left).
type Drawing struct {
	w, h   int
	shapes []shape
}

type shapeKind int

const (
	shapeLine shapeKind = iota
	shapeDot
	shapeRect
	shapeText
)

type shape struct {
	kind           shapeKind
	x1, y1, x2, y2 float64 // line ends; rect corners; dot/text position in x1, y1
	width          float64 // line width; dot radius
	color          color.RGBA
	text           string
	dashed         bool   // lines: dashed
	anchor         string // start, middle, end
	size           int    // font size (SVG px); text shapes
	class          string // SVG class: series name for data shapes
}

func (d *Drawing) line(x1, y1, x2, y2, w float64, c color.RGBA, class string) {
	d.shapes = append(d.shapes, shape{kind: shapeLine, x1: x1, y1: y1, x2: x2, y2: y2, width: w, color: c, class: class})
}

func (d *Drawing) dashedLine(x1, y1, x2, y2, w float64, c color.RGBA, class string) {
	d.shapes = append(d.shapes, shape{kind: shapeLine, x1: x1, y1: y1, x2: x2, y2: y2, width: w, color: c, class: class, dashed: true})
}

func (d *Drawing) dot(x, y, r float64, c color.RGBA, class string) {
	d.shapes = append(d.shapes, shape{kind: shapeDot, x1: x, y1: y, width: r, color: c, class: class})
}

func (d *Drawing) rect(x1, y1, x2, y2 float64, c color.RGBA) {
	d.shapes = append(d.shapes, shape{kind: shapeRect, x1: x1, y1: y1, x2: x2, y2: y2, color: c})
}

func (d *Drawing) text(x, y float64, s, anchor string, size int) {
	d.shapes = append(d.shapes, shape{kind: shapeText, x1: x, y1: y, text: s, anchor: anchor, size: size, color: colorText})
}

// titleSize is the title's font size: 15 px, smaller for a title that
// would not fit the width at about 8 px a character (a simulation's title
// names its links, tensor, payload, QPs and loss), but not below 10 px.
func titleSize(title string) int {
	const fits = 112 // characters at 15 px in Width less two margins
	n := len([]rune(title))
	if n <= fits {
		return 15
	}
	return max(10, 15*fits/n)
}

// Layout places the title, the legend, the two panels, their axes and the
// series.
func Layout(title string, ax Axes, series []Series) *Drawing {
	d := &Drawing{w: Width, h: Height}
	d.rect(0, 0, Width, Height, color.RGBA{0xff, 0xff, 0xff, 0xff})
	d.text(Width/2, 24, title, "middle", titleSize(title))
	// Legend, centred under the title: each entry as wide as its name
	// (about 7 px a character at 13 px), at least 140 px.
	entry := func(s Series) float64 { return max(140, 30+7*float64(len([]rune(s.Name)))+20) }
	total := 0.0
	for _, s := range series {
		total += entry(s)
	}
	lx := (float64(Width) - total) / 2
	for _, s := range series {
		if s.Dashed {
			d.dashedLine(lx, 46, lx+24, 46, 1.5, s.Color, s.Name)
		} else {
			d.line(lx, 46, lx+24, 46, 2.5, s.Color, s.Name)
			d.dot(lx+12, 46, 3.5, s.Color, s.Name)
		}
		d.text(lx+30, 50, s.Name, "start", 13)
		lx += entry(s)
	}
	var xs []float64
	for _, s := range series {
		for _, p := range s.Points {
			xs = append(xs, p.X)
		}
	}
	slices.Sort(xs)
	xs = slices.Compact(xs)
	panel := func(x0 float64, name string, val func(Point) (v, lo, hi float64), format func(float64) string) {
		const top, bottom, width = 90.0, 380.0, 370.0
		left := x0 + 70
		right := left + width
		d.text((left+right)/2, 78, name, "middle", 13)
		maxV := 0.0
		for _, s := range series {
			for _, p := range s.Points {
				_, _, hi := val(p)
				maxV = math.Max(maxV, hi)
			}
		}
		yMax, step := NiceScale(maxV)
		y := func(v float64) float64 { return bottom - (bottom-top)*v/yMax }
		for v := 0.0; v <= yMax*(1+1e-9); v += step {
			d.line(left, y(v), right, y(v), 1, colorGrid, "")
			d.text(left-6, y(v)+4, format(v), "end", 11)
		}
		pos := func(v float64) float64 { // 0..1 along the axis
			if len(xs) == 1 {
				return 0.5
			}
			if ax.LogX {
				lo2, hi2 := math.Log2(xs[0]), math.Log2(xs[len(xs)-1])
				return (math.Log2(v) - lo2) / (hi2 - lo2)
			}
			return float64(slices.Index(xs, v)) / float64(len(xs)-1)
		}
		x := func(v float64) float64 { return left + 20 + (width-40)*pos(v) }
		for _, v := range xs {
			d.line(x(v), bottom, x(v), bottom+5, 1, colorAxis, "")
			d.text(x(v), bottom+18, strconv.FormatFloat(v, 'g', -1, 64), "middle", 11)
		}
		d.line(left, top, left, bottom, 1.5, colorAxis, "")
		d.line(left, bottom, right, bottom, 1.5, colorAxis, "")
		d.text((left+right)/2, bottom+40, ax.X, "middle", 12)
		for _, s := range series {
			for i, p := range s.Points {
				v, lo, hi := val(p)
				if s.Dashed {
					if i > 0 {
						pv, _, _ := val(s.Points[i-1])
						d.dashedLine(x(s.Points[i-1].X), y(pv), x(p.X), y(v), 1.5, s.Color, s.Name)
					} else if len(s.Points) == 1 { // one x: a short tick at its bound
						d.dashedLine(x(p.X)-20, y(v), x(p.X)+20, y(v), 1.5, s.Color, s.Name)
					}
					continue
				}
				if i > 0 {
					pv, _, _ := val(s.Points[i-1])
					d.line(x(s.Points[i-1].X), y(pv), x(p.X), y(v), 2.5, s.Color, s.Name)
				}
				if hi > lo {
					d.line(x(p.X), y(lo), x(p.X), y(hi), 1, s.Color, s.Name)
				}
				d.dot(x(p.X), y(v), 3.5, s.Color, s.Name)
			}
		}
	}
	panel(0, "time per all-reduce [ms] (median, min-max)", func(p Point) (float64, float64, float64) { return p.MS, p.MSLow, p.MSHigh },
		func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) })
	right := ax.RightFormat
	if right == nil {
		right = func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
	}
	panel(Width/2, ax.Right, func(p Point) (float64, float64, float64) { return p.Y, p.Y, p.Y }, right)
	return d
}

// NiceScale returns an axis maximum ≥ v and a tick step (1, 2 or 5 × 10ᵏ)
// giving about five ticks.
func NiceScale(v float64) (max, step float64) {
	if !(v > 0) || math.IsInf(v, 0) {
		return 1, 0.2
	}
	raw := v / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	return math.Ceil(v/step) * step, step
}

// FormatSI writes v with an SI suffix: 1.5M, 250k, 2G.
func FormatSI(v float64) string {
	for _, u := range []struct {
		div float64
		s   string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if math.Abs(v) >= u.div {
			return strconv.FormatFloat(v/u.div, 'g', 3, 64) + u.s
		}
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func svgColor(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

// WriteSVG writes the drawing as an SVG document.
func (d *Drawing) WriteSVG(out io.Writer) error {
	w := bufio.NewWriter(out)
	fmt.Fprintf(w, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
	fmt.Fprintf(w, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n", d.w, d.h, d.w, d.h)
	for _, s := range d.shapes {
		class := ""
		if s.class != "" {
			class = fmt.Sprintf(" class=\"series-%s\"", xmlEscape(strings.ReplaceAll(s.class, " ", "-"))) // one class per series
		}
		switch s.kind {
		case shapeLine:
			dash := ""
			if s.dashed {
				dash = ` stroke-dasharray="6 4"`
			}
			fmt.Fprintf(w, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%g\"%s%s/>\n", s.x1, s.y1, s.x2, s.y2, svgColor(s.color), s.width, dash, class)
		case shapeDot:
			fmt.Fprintf(w, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%g\" fill=\"%s\"%s/>\n", s.x1, s.y1, s.width, svgColor(s.color), class)
		case shapeRect:
			fmt.Fprintf(w, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", s.x1, s.y1, s.x2-s.x1, s.y2-s.y1, svgColor(s.color))
		case shapeText:
			fmt.Fprintf(w, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%d\" text-anchor=\"%s\" fill=\"%s\">%s</text>\n", s.x1, s.y1, s.size, s.anchor, svgColor(s.color), xmlEscape(s.text))
		}
	}
	fmt.Fprintln(w, "</svg>")
	return w.Flush()
}

func xmlEscape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
