package main

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The bench plot: two panels, time per all-reduce (median, min–max bar) and
// ATE/s, against the worker count (log₂ axis), one series per algorithm;
// for a --loss sweep, time and the inflation over the loss-free time
// against the loss rate (one tick per rate).
// The plot is a display list written out as SVG, which every browser and
// document tool renders. PNG output (a hand-written rasteriser with a bitmap
// font) was removed: convert the SVG (rsvg-convert, inkscape) if a raster
// image is needed.

const (
	plotWidth  = 960
	plotHeight = 440
)

// checkPlotPath accepts a .svg path.
func checkPlotPath(path string) error {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".svg":
		return nil
	case ".png":
		return fmt.Errorf("--plot %q: the plot is written as SVG only: give a file name ending in .svg (convert it with rsvg-convert or inkscape for a PNG)", path)
	}
	return fmt.Errorf("--plot %q: give a file name ending in .svg", path)
}

type plotSeries struct {
	name  string
	color color.RGBA
	pts   []plotPoint
	// dashed draws a bound (a link-rate ceiling: `swml-rdma lab`) as a
	// dashed line, without dots or min–max bars.
	dashed bool
}

type plotPoint struct {
	x              float64 // worker count, or loss rate
	ms, msLo, msHi float64
	ate            float64 // ATE/s, or × loss-free for a loss sweep
}

var (
	colorSwitchML = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	colorRing     = color.RGBA{0xff, 0x7f, 0x0e, 0xff}
	colorGloo     = color.RGBA{0x2c, 0xa0, 0x2c, 0xff}
	colorWire16   = color.RGBA{0x94, 0x67, 0xbd, 0xff}
	colorAxis     = color.RGBA{0x22, 0x22, 0x22, 0xff}
	colorGrid     = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	colorText     = color.RGBA{0x22, 0x22, 0x22, 0xff}
)

// plotData turns bench runs into series.
func plotData(runs []benchRun, byLoss bool) []plotSeries {
	sw := plotSeries{name: "SwitchML", color: colorSwitchML}
	ring := plotSeries{color: colorRing}
	inflation := func(x *float64) float64 {
		if x == nil {
			return 0
		}
		return *x
	}
	for _, r := range runs {
		x, ate := float64(r.Workers), r.ATEPerSec
		if byLoss {
			x, ate = r.Loss, inflation(r.LossInflation)
		}
		sw.pts = append(sw.pts, plotPoint{x: x, ms: ms(r.MedianNs), msLo: ms(r.MinNs), msHi: ms(r.MaxNs), ate: ate})
		if b := r.Baseline; b != nil {
			ring.name = b.Name
			if ate = b.ATEPerSec; byLoss {
				ate = inflation(b.LossInflation)
			}
			ring.pts = append(ring.pts, plotPoint{x: x, ms: ms(b.MedianNs), msLo: ms(b.MinNs), msHi: ms(b.MaxNs), ate: ate})
		}
	}
	out := []plotSeries{sw}
	if len(ring.pts) > 0 {
		out = append(out, ring)
	}
	for i := range out {
		slices.SortFunc(out[i].pts, func(a, b plotPoint) int {
			switch {
			case a.x < b.x:
				return -1
			case a.x > b.x:
				return 1
			}
			return 0
		})
	}
	return out
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// writePlot draws runs into path (.svg).
func writePlot(path string, runs []benchRun) error {
	if err := checkPlotPath(path); err != nil {
		return err
	}
	if len(runs) == 0 {
		return fmt.Errorf("plot %s: no results to draw", path)
	}
	byLoss := false
	for _, r := range runs[1:] {
		byLoss = byLoss || r.Loss != runs[0].Loss
	}
	title := fmt.Sprintf("swml-rdma bench: %s tensor of %s, packet %d B, message %d B, loopback",
		runs[0].DType, humanBytes(runs[0].TensorBytes), runs[0].PacketSize, runs[0].MessageSize)
	ax := plotAxes{x: "workers", logX: true, right: "ATE/s (tensor elements reduced per second)", rightFormat: formatSI}
	if byLoss {
		title = fmt.Sprintf("swml-rdma bench: %d workers, %s tensor of %s, loss at switch ingress and egress (ring: at the NICs)",
			runs[0].Workers, runs[0].DType, humanBytes(runs[0].TensorBytes))
		ax = plotAxes{x: "loss probability", right: "time / loss-free time (x)",
			rightFormat: func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }}
	}
	return writeSVGPlot(path, layoutPlot(title, ax, plotData(runs, byLoss)))
}

// writeSVGPlot writes d into path as SVG.
func writeSVGPlot(path string, d *drawing) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	w := bufio.NewWriter(f)
	err = d.writeSVG(w)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// drawing is a display list in pixel coordinates (origin top left).
type drawing struct {
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

func (d *drawing) line(x1, y1, x2, y2, w float64, c color.RGBA, class string) {
	d.shapes = append(d.shapes, shape{kind: shapeLine, x1: x1, y1: y1, x2: x2, y2: y2, width: w, color: c, class: class})
}

func (d *drawing) dashedLine(x1, y1, x2, y2, w float64, c color.RGBA, class string) {
	d.shapes = append(d.shapes, shape{kind: shapeLine, x1: x1, y1: y1, x2: x2, y2: y2, width: w, color: c, class: class, dashed: true})
}

func (d *drawing) dot(x, y, r float64, c color.RGBA, class string) {
	d.shapes = append(d.shapes, shape{kind: shapeDot, x1: x, y1: y, width: r, color: c, class: class})
}

func (d *drawing) rect(x1, y1, x2, y2 float64, c color.RGBA) {
	d.shapes = append(d.shapes, shape{kind: shapeRect, x1: x1, y1: y1, x2: x2, y2: y2, color: c})
}

func (d *drawing) text(x, y float64, s, anchor string, size int) {
	d.shapes = append(d.shapes, shape{kind: shapeText, x1: x, y1: y, text: s, anchor: anchor, size: size, color: colorText})
}

// layoutPlot places the two panels, their axes and the series.
// plotAxes names the x axis (log₂-spaced, or one evenly spaced tick per
// value) and the right panel.
type plotAxes struct {
	x           string
	logX        bool
	right       string
	rightFormat func(float64) string
}

func layoutPlot(title string, ax plotAxes, series []plotSeries) *drawing {
	d := &drawing{w: plotWidth, h: plotHeight}
	d.rect(0, 0, plotWidth, plotHeight, color.RGBA{0xff, 0xff, 0xff, 0xff})
	d.text(plotWidth/2, 24, title, "middle", 15)
	// Legend, centred under the title.
	lx := float64(plotWidth)/2 - float64(len(series))*70
	for _, s := range series {
		if s.dashed {
			d.dashedLine(lx, 46, lx+24, 46, 1.5, s.color, s.name)
		} else {
			d.line(lx, 46, lx+24, 46, 2.5, s.color, s.name)
			d.dot(lx+12, 46, 3.5, s.color, s.name)
		}
		d.text(lx+30, 50, s.name, "start", 13)
		lx += 140
	}
	var xs []float64
	for _, s := range series {
		for _, p := range s.pts {
			xs = append(xs, p.x)
		}
	}
	slices.Sort(xs)
	xs = slices.Compact(xs)
	panel := func(x0 float64, name string, val func(plotPoint) (v, lo, hi float64), format func(float64) string) {
		const top, bottom, width = 90.0, 380.0, 370.0
		left := x0 + 70
		right := left + width
		d.text((left+right)/2, 78, name, "middle", 13)
		maxV := 0.0
		for _, s := range series {
			for _, p := range s.pts {
				_, _, hi := val(p)
				maxV = math.Max(maxV, hi)
			}
		}
		yMax, step := niceScale(maxV)
		y := func(v float64) float64 { return bottom - (bottom-top)*v/yMax }
		for v := 0.0; v <= yMax*(1+1e-9); v += step {
			d.line(left, y(v), right, y(v), 1, colorGrid, "")
			d.text(left-6, y(v)+4, format(v), "end", 11)
		}
		pos := func(v float64) float64 { // 0..1 along the axis
			if len(xs) == 1 {
				return 0.5
			}
			if ax.logX {
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
		d.text((left+right)/2, bottom+40, ax.x, "middle", 12)
		for _, s := range series {
			for i, p := range s.pts {
				v, lo, hi := val(p)
				if s.dashed {
					if i > 0 {
						pv, _, _ := val(s.pts[i-1])
						d.dashedLine(x(s.pts[i-1].x), y(pv), x(p.x), y(v), 1.5, s.color, s.name)
					} else if len(s.pts) == 1 { // one worker count: a short tick at its ceiling
						d.dashedLine(x(p.x)-20, y(v), x(p.x)+20, y(v), 1.5, s.color, s.name)
					}
					continue
				}
				if i > 0 {
					pv, _, _ := val(s.pts[i-1])
					d.line(x(s.pts[i-1].x), y(pv), x(p.x), y(v), 2.5, s.color, s.name)
				}
				if hi > lo {
					d.line(x(p.x), y(lo), x(p.x), y(hi), 1, s.color, s.name)
				}
				d.dot(x(p.x), y(v), 3.5, s.color, s.name)
			}
		}
	}
	panel(0, "time per all-reduce [ms] (median, min-max)", func(p plotPoint) (float64, float64, float64) { return p.ms, p.msLo, p.msHi },
		func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) })
	panel(plotWidth/2, ax.right, func(p plotPoint) (float64, float64, float64) { return p.ate, p.ate, p.ate },
		ax.rightFormat)
	return d
}

// niceScale returns an axis maximum ≥ v and a tick step (1, 2 or 5 × 10ᵏ)
// giving about five ticks.
func niceScale(v float64) (max, step float64) {
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

// formatSI writes v with an SI suffix: 1.5M, 250k, 2G.
func formatSI(v float64) string {
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

func (d *drawing) writeSVG(w *bufio.Writer) error {
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
	_, err := fmt.Fprintln(w, "</svg>")
	return err
}

func xmlEscape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
