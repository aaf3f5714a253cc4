package aggregation

import (
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// callBuckets are the upper bounds, in seconds, of
// swml_worker_allreduce_duration_seconds: 100 µs … 13 s, doubling.
var callBuckets = prometheus.ExponentialBuckets(100e-6, 2, numCallBuckets)

const numCallBuckets = 18

// callHistogram counts the durations of a session's completed all-reduce
// calls by bucket: the engine bumps atomics (no allocation, no lock), the
// collector reads them at scrape time.
type callHistogram struct {
	counts [numCallBuckets + 1]atomic.Uint64 // the last is +Inf
	sumNs  atomic.Uint64
}

func (h *callHistogram) observe(d time.Duration) {
	h.counts[sort.SearchFloat64s(callBuckets, d.Seconds())].Add(1)
	h.sumNs.Add(uint64(max(d, 0)))
}

// metric is the histogram as Prometheus takes it: cumulative counts.
func (h *callHistogram) metric(d *prometheus.Desc) prometheus.Metric {
	buckets := make(map[float64]uint64, numCallBuckets)
	var n uint64
	for i, le := range callBuckets {
		n += h.counts[i].Load()
		buckets[le] = n
	}
	n += h.counts[numCallBuckets].Load()
	return prometheus.MustNewConstHistogram(d, n, time.Duration(h.sumNs.Load()).Seconds(), buckets)
}

// statField is one counter of a session: the Stats field, the engine's
// atomic behind it, and the Prometheus series that exports it (a labelled
// series of a shared name where several fields share one). Stats, its
// sums over lanes and the collector all read statFields, so a counter is
// added in one place.
type statField struct {
	stat    func(*Stats) *uint64
	counter func(*counters) *atomic.Uint64
	// metric (after swml_worker_) and its help; label, when set, is the
	// value of the metric's one label ("direction").
	metric, help, label string
}

var statFields = []statField{
	{func(s *Stats) *uint64 { return &s.AllReduces }, func(c *counters) *atomic.Uint64 { return &c.allReduces },
		"allreduces_total", "Completed all-reduce calls (float32 and int32).", ""},
	{func(s *Stats) *uint64 { return &s.Messages }, func(c *counters) *atomic.Uint64 { return &c.messages },
		"messages_total", "Messages sent for the first time, exponent-only rounds included.", ""},
	{func(s *Stats) *uint64 { return &s.Packets }, func(c *counters) *atomic.Uint64 { return &c.packets },
		"packets_total", "RoCEv2 packets sent to the switch, retransmissions included.", ""},
	{func(s *Stats) *uint64 { return &s.Retransmissions }, func(c *counters) *atomic.Uint64 { return &c.retransmissions },
		"retransmissions_total", "Messages resent (timer expiries and fast retransmissions).", ""},
	{func(s *Stats) *uint64 { return &s.Timeouts }, func(c *counters) *atomic.Uint64 { return &c.timeouts },
		"timeouts_total", "Per-QP retransmission timer expiries.", ""},
	{func(s *Stats) *uint64 { return &s.FastRetransmissions }, func(c *counters) *atomic.Uint64 { return &c.fastRetransmissions },
		"fast_retransmissions_total", "Messages resent because the result of a message sent later came back first (RACK).", ""},
	{func(s *Stats) *uint64 { return &s.SpuriousRetransmissions }, func(c *counters) *atomic.Uint64 { return &c.spurious },
		"spurious_retransmissions_total", "Resent messages whose result answered an earlier transmission: resends that were not needed.", ""},
	{func(s *Stats) *uint64 { return &s.Results }, func(c *counters) *atomic.Uint64 { return &c.results },
		"results_total", "Result messages from the switch used.", ""},
	{func(s *Stats) *uint64 { return &s.StaleResults }, func(c *counters) *atomic.Uint64 { return &c.stale },
		"stale_results_total", "Result messages dropped by the message-id check (duplicates of results already used).", ""},
	{func(s *Stats) *uint64 { return &s.BytesSent }, func(c *counters) *atomic.Uint64 { return &c.bytesSent },
		"bytes_total", bytesHelp, "out"},
	{func(s *Stats) *uint64 { return &s.BytesReceived }, func(c *counters) *atomic.Uint64 { return &c.bytesReceived },
		"bytes_total", bytesHelp, "in"},
	{func(s *Stats) *uint64 { return &s.PacketWriteCalls }, func(c *counters) *atomic.Uint64 { return &c.packetWriteCalls },
		"packet_write_calls_total", "All-reduce calls that sent one RDMA WRITE per packet instead of one per message (Config.Writes).", ""},
	{func(s *Stats) *uint64 { return &s.GapNotices }, func(c *counters) *atomic.Uint64 { return &c.gapNotices },
		"gap_notices_total", "Gap notices from the switch: a packet write of this worker arrived after a PSN gap.", ""},
	{func(s *Stats) *uint64 { return &s.NoticeResends }, func(c *counters) *atomic.Uint64 { return &c.noticeResends },
		"notice_resends_total", "Packets resent because a gap notice named them lost.", ""},
	{func(s *Stats) *uint64 { return &s.TailProbes }, func(c *counters) *atomic.Uint64 { return &c.tailProbes },
		"tail_probes_total", "Tail probes sent: packet writes without payload after a transmission's last packet, so that the switch sees its PSN and names a lost last packet.", ""},
	{func(s *Stats) *uint64 { return &s.ResultProbes }, func(c *counters) *atomic.Uint64 { return &c.resultProbes },
		"result_probes_total", "Result probes sent: packet writes without payload that ask the switch for a late result instead of resending the packet (jobs of more than 32 workers).", ""},
}

const bytesHelp = "RDMA payload bytes sent (out) to and received (in) from the switch."

// sessionCollector reads Session.Stats at scrape time: the data path only
// bumps the session's atomics.
type sessionCollector struct {
	s            *Session
	descs        []*prometheus.Desc // statFields' series, by index
	callDuration *prometheus.Desc
}

// NewCollector returns a Prometheus collector of s's counters
// (swml_worker_…, see docs/metrics.md), labelled with the constant labels
// job_id (the controller's job id; not "job", which Prometheus sets to the
// scrape job's name) and rank. Register it on the caller's
// registry after Open and unregister it before dropping the session; it may
// be scraped after Close (the counters stay readable). Safe for concurrent
// use.
func NewCollector(s *Session) prometheus.Collector {
	labels := prometheus.Labels{"job_id": strconv.FormatUint(uint64(s.JobID()), 10), "rank": strconv.Itoa(s.Rank())}
	c := &sessionCollector{s: s, descs: make([]*prometheus.Desc, len(statFields))}
	byName := map[string]*prometheus.Desc{}
	for i, f := range statFields {
		d := byName[f.metric]
		if d == nil {
			var variable []string
			if f.label != "" {
				variable = []string{"direction"}
			}
			d = prometheus.NewDesc("swml_worker_"+f.metric, f.help, variable, labels)
			byName[f.metric] = d
		}
		c.descs[i] = d
	}
	c.callDuration = prometheus.NewDesc("swml_worker_allreduce_duration_seconds",
		"Time of one completed all-reduce call of this worker, from taking the session to its return.", nil, labels)
	return c
}

func (c *sessionCollector) Describe(ch chan<- *prometheus.Desc) {
	seen := map[*prometheus.Desc]bool{}
	for _, d := range c.descs {
		if !seen[d] {
			seen[d] = true
			ch <- d
		}
	}
	ch <- c.callDuration
}

func (c *sessionCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	for i, f := range statFields {
		var labels []string
		if f.label != "" {
			labels = []string{f.label}
		}
		ch <- prometheus.MustNewConstMetric(c.descs[i], prometheus.CounterValue, float64(*f.stat(&st)), labels...)
	}
	ch <- c.s.stats.callTimes.metric(c.callDuration)
}
