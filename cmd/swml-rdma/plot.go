package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/swml-rdma/swml-rdma/internal/plot"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
)

// The bench plot (internal/plot): time per all-reduce and ATE/s against the
// worker count, one series per algorithm and, over links, each one's
// link-rate ceiling dashed; for a --loss sweep, time and the inflation over
// the loss-free time against the loss rate (one tick per rate).

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

// plotData turns bench runs into series.
func plotData(runs []benchRun, byLoss bool) []plot.Series {
	sw := plot.Series{Name: "SwitchML", Color: plot.ColorSwitchML}
	ring := plot.Series{Color: plot.ColorRing}
	// Over links (bench --link), each algorithm's link-rate ceiling, dashed
	// as the lab draws it.
	swCeil := plot.Series{Name: "SwitchML ceiling", Color: plot.ColorSwitchML, Dashed: true}
	ringCeil := plot.Series{Color: plot.ColorRing, Dashed: true}
	ceiling := func(s *plot.Series, x float64, l linkResult, elements int) {
		if !byLoss && l.CeilingATEPerSec > 0 {
			s.Points = append(s.Points, plot.Bound(x, elements, l.CeilingATEPerSec))
		}
	}
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
		sw.Points = append(sw.Points, plot.Point{X: x, MS: ms(r.MedianNs), MSLow: ms(r.MinNs), MSHigh: ms(r.MaxNs), Y: ate})
		ceiling(&swCeil, x, r.linkResult, r.Elements)
		if b := r.Baseline; b != nil {
			ring.Name, ringCeil.Name = b.Name, b.Name+" ceiling"
			ceiling(&ringCeil, x, b.linkResult, r.Elements)
			if ate = b.ATEPerSec; byLoss {
				ate = inflation(b.LossInflation)
			}
			ring.Points = append(ring.Points, plot.Point{X: x, MS: ms(b.MedianNs), MSLow: ms(b.MinNs), MSHigh: ms(b.MaxNs), Y: ate})
		}
	}
	out := []plot.Series{sw}
	for _, s := range []plot.Series{ring, swCeil, ringCeil} {
		if len(s.Points) > 0 {
			out = append(out, s)
		}
	}
	plot.SortByX(out)
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
	where := "loopback"
	if runs[0].RateBps > 0 {
		where = netlab.FormatRate(runs[0].RateBps) + " links"
	}
	title := fmt.Sprintf("swml-rdma bench: %s tensor of %s, packet %d B, message %d B, %s",
		runs[0].DType, humanBytes(runs[0].TensorBytes), runs[0].PacketSize, runs[0].MessageSize, where)
	ax := plot.ATEAxes()
	if byLoss {
		title = fmt.Sprintf("swml-rdma bench: %d workers, %s tensor of %s, loss at switch ingress and egress (ring: at the NICs)",
			runs[0].Workers, runs[0].DType, humanBytes(runs[0].TensorBytes))
		if runs[0].RateBps > 0 {
			title = fmt.Sprintf("swml-rdma bench: %d workers, %s tensor of %s, %s links, loss on each link direction",
				runs[0].Workers, runs[0].DType, humanBytes(runs[0].TensorBytes), netlab.FormatRate(runs[0].RateBps))
		}
		ax = plot.Axes{X: "loss probability", Right: "time / loss-free time (x)",
			RightFormat: func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }}
	}
	return plot.WriteFile(path, title, ax, plotData(runs, byLoss))
}
