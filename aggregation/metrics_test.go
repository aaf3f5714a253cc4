package aggregation

import (
	"context"
	"reflect"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

// TestSessionCollector runs a two-worker job on the in-memory network and
// checks that the swml_worker_ counters follow Session.Stats, carry the job_id
// and rank labels, and pass promlint.
func TestSessionCollector(t *testing.T) {
	c := newEngineCluster(t)
	j := openJob(t, c.ctlAddr, 2, engineConfig(900), c.device(92))
	reg := prometheus.NewPedanticRegistry()
	for _, w := range j.workers {
		reg.MustRegister(NewCollector(w.sess))
	}
	in := gradients(9, 2, 1000)
	for range 2 {
		noErrors(t, j.allReduce(context.Background(), clone2(in)))
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{} // name/rank/direction → value
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["job_id"] != strconv.FormatUint(uint64(j.workers[0].sess.JobID()), 10) {
				t.Errorf("%s: job_id label %q", key, labels["job_id"])
			}
			key += "/" + labels["rank"] + "/" + labels["direction"]
			got[key] = m.GetCounter().GetValue()
			if h := m.GetHistogram(); h != nil {
				got[key] = float64(h.GetSampleCount())
			}
		}
	}
	for r, w := range j.workers {
		st := w.sess.Stats()
		rank := strconv.Itoa(r)
		// Gathered before Stats: late duplicates may still bump the
		// stale-result, byte and packet counters, never the call, message
		// and result counts of a finished job.
		for name, want := range map[string]uint64{
			"swml_worker_allreduces_total/" + rank + "/": 2,
			// The call-duration histogram counts the same calls.
			"swml_worker_allreduce_duration_seconds/" + rank + "/": 2,
			"swml_worker_messages_total/" + rank + "/":             st.Messages,
			"swml_worker_results_total/" + rank + "/":              st.Results,
		} {
			if v, ok := got[name]; !ok || v != float64(want) {
				t.Errorf("%s = %v (present %v), want %d", name, v, ok, want)
			}
		}
		for name, most := range map[string]uint64{
			"swml_worker_packets_total/" + rank + "/":                  st.Packets,
			"swml_worker_retransmissions_total/" + rank + "/":          st.Retransmissions,
			"swml_worker_timeouts_total/" + rank + "/":                 st.Timeouts,
			"swml_worker_spurious_retransmissions_total/" + rank + "/": st.SpuriousRetransmissions,
			"swml_worker_stale_results_total/" + rank + "/":            st.StaleResults,
			"swml_worker_bytes_total/" + rank + "/out":                 st.BytesSent,
			"swml_worker_bytes_total/" + rank + "/in":                  st.BytesReceived,
			"swml_worker_packet_write_calls_total/" + rank + "/":       st.PacketWriteCalls,
		} {
			if v, ok := got[name]; !ok || v > float64(most) {
				t.Errorf("%s = %v (present %v), want at most %d", name, v, ok, most)
			}
		}
		if got["swml_worker_packets_total/"+rank+"/"] == 0 || got["swml_worker_bytes_total/"+rank+"/out"] == 0 {
			t.Errorf("rank %d: no traffic counted", r)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// TestCallHistogram: observations land in their bucket, cumulatively, with
// no allocation on the engine's side.
func TestCallHistogram(t *testing.T) {
	var h callHistogram
	for _, d := range []time.Duration{50 * time.Microsecond, 150 * time.Microsecond, time.Minute} {
		h.observe(d)
	}
	if n := testing.AllocsPerRun(100, func() { h.observe(time.Millisecond) }); n != 0 {
		t.Errorf("observe allocates %v times", n)
	}
	var m dto.Metric
	if err := h.metric(prometheus.NewDesc("x", "x", nil, nil)).Write(&m); err != nil {
		t.Fatal(err)
	}
	hm := m.GetHistogram()
	if hm.GetSampleCount() != 104 { // 3, and AllocsPerRun's 100 runs and its warm-up
		t.Fatalf("count %d, want 104", hm.GetSampleCount())
	}
	b := hm.GetBucket()
	if b[0].GetUpperBound() != 100e-6 || b[0].GetCumulativeCount() != 1 || b[1].GetCumulativeCount() != 2 || b[len(b)-1].GetCumulativeCount() != 103 {
		t.Fatalf("buckets %v", b)
	}
}

// TestStatFields: every Stats field is in statFields once, each with its
// own counter, so Stats, its sum over lanes and the collector cover every
// counter.
func TestStatFields(t *testing.T) {
	var st Stats
	var c counters
	fields := map[*uint64]bool{}
	ctrs := map[*atomic.Uint64]bool{}
	for _, f := range statFields {
		p, a := f.stat(&st), f.counter(&c)
		if fields[p] || ctrs[a] {
			t.Errorf("%s (%s): a Stats field or counter listed twice", f.metric, f.label)
		}
		fields[p], ctrs[a] = true, true
	}
	if n := reflect.TypeFor[Stats]().NumField(); len(fields) != n {
		t.Errorf("statFields covers %d of Stats' %d fields", len(fields), n)
	}
	// Each field reads its own counter.
	for i, f := range statFields {
		f.counter(&c).Store(uint64(100 + i))
	}
	got := c.load()
	for i, f := range statFields {
		if v := *f.stat(&got); v != uint64(100+i) {
			t.Errorf("%s (%s): %d, want %d", f.metric, f.label, v, 100+i)
		}
	}
}
