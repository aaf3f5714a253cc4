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

// sessionCollector reads Session.Stats at scrape time: the data path only
// bumps the session's atomics.
type sessionCollector struct {
	s *Session

	allReduces, messages, packets, retransmissions, timeouts, fast, spurious, results, stale, bytes, packetWriteCalls *prometheus.Desc
	callDuration                                                                                                      *prometheus.Desc
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
	d := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc("swml_worker_"+name, help, variable, labels)
	}
	return &sessionCollector{
		s:                s,
		allReduces:       d("allreduces_total", "Completed all-reduce calls (float32 and int32)."),
		messages:         d("messages_total", "Messages sent for the first time, exponent-only rounds included."),
		packets:          d("packets_total", "RoCEv2 packets sent to the switch, retransmissions included."),
		retransmissions:  d("retransmissions_total", "Messages resent (timer expiries and fast retransmissions)."),
		timeouts:         d("timeouts_total", "Per-QP retransmission timer expiries."),
		fast:             d("fast_retransmissions_total", "Messages resent because the result of a message sent later came back first (RACK)."),
		spurious:         d("spurious_retransmissions_total", "Resent messages whose result answered an earlier transmission: resends that were not needed."),
		results:          d("results_total", "Result messages from the switch used."),
		stale:            d("stale_results_total", "Result messages dropped by the message-id check (duplicates of results already used)."),
		bytes:            d("bytes_total", "RDMA payload bytes sent (out) to and received (in) from the switch.", "direction"),
		packetWriteCalls: d("packet_write_calls_total", "All-reduce calls that sent one RDMA WRITE per packet instead of one per message (Config.Writes)."),
		callDuration:     d("allreduce_duration_seconds", "Time of one completed all-reduce call of this worker, from taking the session to its return."),
	}
}

func (c *sessionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.allReduces, c.messages, c.packets, c.retransmissions, c.timeouts, c.fast, c.spurious, c.results, c.stale, c.bytes, c.packetWriteCalls, c.callDuration} {
		ch <- d
	}
}

func (c *sessionCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.allReduces, st.AllReduces)
	counter(c.messages, st.Messages)
	counter(c.packets, st.Packets)
	counter(c.retransmissions, st.Retransmissions)
	counter(c.timeouts, st.Timeouts)
	counter(c.fast, st.FastRetransmissions)
	counter(c.spurious, st.SpuriousRetransmissions)
	counter(c.results, st.Results)
	counter(c.stale, st.StaleResults)
	counter(c.bytes, st.BytesSent, "out")
	counter(c.bytes, st.BytesReceived, "in")
	counter(c.packetWriteCalls, st.PacketWriteCalls)
	ch <- c.s.stats.callTimes.metric(c.callDuration)
}
