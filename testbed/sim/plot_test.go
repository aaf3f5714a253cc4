package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/benchmark"
	"github.com/swml-rdma/swml-rdma/internal/plot"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
)

// errPlot is wrapped by every refusal of simPlot.
var errPlot = errors.New("cannot plot")

// readReport reads a report TestSim wrote with -json.
func readReport(path string) (report, error) {
	var doc report
	b, err := os.ReadFile(path)
	if err != nil {
		return doc, err
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return doc, fmt.Errorf("%s: %w", path, err)
	}
	return doc, nil
}

// simPlot draws doc into path (.svg, internal/plot, docs/sim.md "Plots"):
// a sweep of worker counts (one loss rate) as time and ATE/s against
// workers, with SwitchML's link-rate ceiling and, with -ring, the ring's
// and its ceiling; or a sweep of loss rates (one worker count) as time and
// the time over the loss-free one against the loss rate. One payload size.
func simPlot(path string, doc report) error {
	if !strings.EqualFold(filepath.Ext(path), ".svg") {
		return fmt.Errorf("sim: plot %s: %w: the plot is SVG, give a name ending in .svg", path, errPlot)
	}
	runs := doc.Runs
	if len(runs) == 0 {
		return fmt.Errorf("sim: plot %s: %w: the report has no runs", path, errPlot)
	}
	var workers, losses, payloads, leaves, jobs []float64
	for _, r := range runs {
		for _, v := range []struct {
			list *[]float64
			x    float64
		}{{&workers, float64(r.Workers)}, {&losses, r.Loss}, {&payloads, float64(r.PacketSize)}, {&leaves, float64(r.Leaves)}, {&jobs, float64(max(r.Jobs, 1))}} {
			if !slices.Contains(*v.list, v.x) {
				*v.list = append(*v.list, v.x)
			}
		}
	}
	byLoss := len(losses) > 1
	if len(payloads) > 1 || len(leaves) > 1 || (byLoss && (len(workers) > 1 || len(jobs) > 1)) {
		return fmt.Errorf("sim: plot %s: %w: %d worker counts, %d loss rates, %d payloads, %d tree shapes, %d job counts: draw one sweep, of workers (at one or more job counts) or of loss, at one payload and shape",
			path, errPlot, len(workers), len(losses), len(payloads), len(leaves), len(jobs))
	}
	r0 := runs[0]
	setup := fmt.Sprintf("%s links, %s %s per worker, %d B payloads, %d QPs", netlab.FormatRate(uint64(r0.RateBps)), humanBytes(r0.TensorBytes), r0.DType, r0.PacketSize, r0.QPs)
	if r0.Leaves > 0 {
		setup += fmt.Sprintf(", %d leaves under a spine", r0.Leaves)
	}
	sw := plot.Series{Name: "SwitchML", Color: plot.ColorSwitchML}
	swCeil := plot.Series{Name: "SwitchML ceiling", Color: plot.ColorSwitchML, Dashed: true}
	ring := plot.Series{Name: "ring", Color: plot.ColorRing}
	ringCeil := plot.Series{Name: "ring ceiling", Color: plot.ColorRing, Dashed: true}
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	if byLoss {
		var base, ringBase float64 // the loss-free medians, if the sweep has one
		for _, r := range runs {
			if r.Loss == 0 {
				base = float64(r.MedianNs)
				if r.Ring != nil {
					ringBase = float64(r.Ring.MedianNs)
				}
			}
		}
		if base == 0 {
			return fmt.Errorf("sim: plot %s: %w: a loss sweep needs the loss-free point (loss 0) to compare with", path, errPlot)
		}
		for _, r := range runs {
			sw.Points = append(sw.Points, plot.Point{X: r.Loss, MS: ms(r.MedianNs), MSLow: ms(r.MinNs), MSHigh: ms(r.MaxNs), Y: float64(r.MedianNs) / base})
			if rr := r.Ring; rr != nil && ringBase > 0 {
				ring.Points = append(ring.Points, plot.Point{X: r.Loss, MS: ms(rr.MedianNs), MSLow: ms(rr.MinNs), MSHigh: ms(rr.MaxNs), Y: float64(rr.MedianNs) / ringBase})
			}
		}
		series := []plot.Series{sw}
		if len(ring.Points) > 0 {
			series = append(series, ring)
		}
		plot.SortByX(series)
		title := fmt.Sprintf("simulation (virtual time): %d workers, %s, loss on every link direction", r0.Workers, setup)
		ax := plot.Axes{X: "loss probability per packet and link direction", Right: "time / loss-free time (x)",
			RightFormat: func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }}
		return plot.WriteFile(path, title, ax, series)
	}
	// Runs of several jobs at once draw a series of their own: the
	// slowest job's median, the range over every job's calls.
	var shared []plot.Series
	for _, r := range runs {
		x := float64(r.Workers)
		s, c := &sw, &swCeil
		if r.Jobs > 1 {
			i := slices.IndexFunc(shared, func(s plot.Series) bool { return s.Name == jobsName(r.Jobs) })
			if i < 0 {
				shared = append(shared, plot.Series{Name: jobsName(r.Jobs), Color: plot.ColorSharedJobs},
					plot.Series{Name: fmt.Sprintf("each of %d jobs ceiling", r.Jobs), Color: plot.ColorSharedJobs, Dashed: true})
				i = len(shared) - 2
			}
			s, c = &shared[i], &shared[i+1]
		}
		med, low, high := r.MedianNs, r.MinNs, r.MaxNs
		for _, jt := range r.JobTimes {
			med, low, high = max(med, jt.MedianNs), min(low, jt.MinNs), max(high, jt.MaxNs)
		}
		s.Points = append(s.Points, plot.Point{X: x, MS: ms(med), MSLow: ms(low), MSHigh: ms(high), Y: float64(r.Elements) / (float64(med) / 1e9)})
		c.Points = append(c.Points, plot.Bound(x, r.Elements, r.CeilingATEPerSec))
		if rr := r.Ring; rr != nil {
			ring.Points = append(ring.Points, plot.Point{X: x, MS: ms(rr.MedianNs), MSLow: ms(rr.MinNs), MSHigh: ms(rr.MaxNs), Y: rr.ATEPerSec})
			ringCeil.Points = append(ringCeil.Points, plot.Bound(x, r.Elements, rr.CeilingATEPerSec))
		}
	}
	var series []plot.Series
	if len(sw.Points) > 0 {
		if len(shared) > 0 {
			sw.Name, swCeil.Name = "SwitchML one job", "one job ceiling"
		}
		series = append(series, sw, swCeil)
	}
	series = append(series, shared...)
	if len(ring.Points) > 0 {
		series = append(series, ring, ringCeil)
	}
	plot.SortByX(series)
	title := fmt.Sprintf("simulation (virtual time): %s, loss %g", setup, r0.Loss)
	return plot.WriteFile(path, title, plot.ATEAxes(), series)
}

// jobsName is the series of n jobs at once: each job's.
func jobsName(n int) string { return fmt.Sprintf("SwitchML each of %d jobs", n) }

// humanBytes writes a tensor size as the flags take it: 4MiB, 256KiB.
func humanBytes(n int) string {
	for _, u := range []struct {
		size int
		s    string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.Itoa(n/u.size) + " " + u.s
		}
	}
	return strconv.Itoa(n) + " B"
}

// TestSimPlot draws a worker sweep with the ring and a loss sweep from
// reports of the shape TestSim writes, and refuses what is not one sweep.
func TestSimPlot(t *testing.T) {
	point := func(workers int, loss float64, medianNs int64) runReport {
		var r runReport
		r.Workers, r.Loss, r.PacketSize, r.DType, r.TensorBytes, r.Elements = workers, loss, 1024, "float32", 4<<20, 1<<20
		r.MedianNs, r.MinNs, r.MaxNs = medianNs, medianNs, medianNs+medianNs/10
		r.RateBps, r.ATEPerSec, r.CeilingATEPerSec = 100e9, float64(r.Elements)/(float64(medianNs)/1e9), 2.89e9
		r.Ring = &RingReport{CeilingATEPerSec: 1.48e9}
		r.Ring.MedianNs, r.Ring.MinNs, r.Ring.MaxNs, r.Ring.ATEPerSec = 2*medianNs, 2*medianNs, 2*medianNs, 1.4e9
		return r
	}
	dir := t.TempDir()
	workers := report{Runs: []runReport{point(8, 0, 377_720), point(256, 0, 377_720), point(64, 0, 377_720)}}
	losses := report{Runs: []runReport{point(32, 0, 377_720), point(32, 0.01, 420_000), point(32, 0.001, 390_000)}}
	shared := func(workers int, medianNs int64) runReport {
		r := point(workers, 0, medianNs)
		r.Ring, r.Jobs = nil, 2
		r.JobTimes = []benchmark.Times{r.Times, r.Times}
		r.JobTimes[1].MedianNs += 1000
		return r
	}
	jobs := report{Runs: []runReport{point(8, 0, 377_720), point(64, 0, 377_720), shared(8, 755_440), shared(64, 755_440)}}
	jobs.Runs[0].Ring, jobs.Runs[1].Ring = nil, nil
	for name, tc := range map[string]struct {
		doc  report
		want []string
	}{
		"workers": {workers, []string{"ATE/s (tensor elements reduced per second)", ">256<", "series-ring-ceiling", "stroke-dasharray", "100gbit links, 4 MiB float32 per worker, 1024 B payloads"}},
		"loss":    {losses, []string{"time / loss-free time (x)", ">0.001<", ">0.01<", "32 workers", "series-ring"}},
		"jobs":    {jobs, []string{">SwitchML one job<", ">SwitchML each of 2 jobs<", ">each of 2 jobs ceiling<", "series-SwitchML-each-of-2-jobs"}},
	} {
		path := filepath.Join(dir, name+".svg")
		if err := simPlot(path, tc.doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s plot lacks %q", name, w)
			}
		}
	}
	both := report{Runs: append(slices.Clone(losses.Runs), point(64, 0.01, 420_000))}
	noBase := report{Runs: losses.Runs[1:]}
	for name, c := range map[string]struct {
		path string
		doc  report
	}{
		"png": {filepath.Join(dir, "x.png"), workers}, "empty": {filepath.Join(dir, "x.svg"), report{}},
		"two sweeps": {filepath.Join(dir, "x.svg"), both}, "no loss-free point": {filepath.Join(dir, "x.svg"), noBase},
	} {
		if err := simPlot(c.path, c.doc); !errors.Is(err, errPlot) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
}
