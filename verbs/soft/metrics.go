package soft

import "github.com/prometheus/client_golang/prometheus"

// Drop reasons, the values of the reason label of swml_nic_drops_total: a
// fixed set, in the order Collect emits them.
var nicDropReasons = []string{
	"malformed", "icrc", "unsupported_opcode", "unknown_qp", "bad_source", "sequence",
	"rkey", "range", "no_recv_wr", "truncated", "ingress_loss", "egress_loss",
}

// deviceCollector reads Device.Stats at scrape time: the packet paths only
// bump the device's atomics.
type deviceCollector struct {
	d *Device

	packets, bytes, messages, drops, cqOverruns, polls *prometheus.Desc
}

// NewCollector returns a Prometheus collector of d's counters (swml_nic_…,
// see docs/metrics.md) with the constant label device (d.Name(), e.g.
// "soft:127.0.0.2"). Register it on the caller's registry; it may be
// scraped after Close (the counters stay readable). Safe for concurrent use.
func NewCollector(d *Device) prometheus.Collector {
	labels := prometheus.Labels{"device": d.Name()}
	desc := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc("swml_nic_"+name, help, variable, labels)
	}
	return &deviceCollector{
		d:          d,
		packets:    desc("packets_total", "RoCEv2 packets built for sending (out, before send loss) and received (in, before any check).", "direction"),
		bytes:      desc("bytes_total", "RoCEv2 datagram bytes (UDP payload) sent (out) and received (in).", "direction"),
		messages:   desc("messages_total", "RDMA WRITE messages sent (out) and completely received (in).", "direction"),
		drops:      desc("drops_total", "Received packets dropped (and simulated losses), by reason.", "reason"),
		cqOverruns: desc("cq_overruns_total", "Completions lost because a completion queue was full."),
		polls:      desc("busy_polls_total", "Reads that found the socket empty and polled it (soft.Config.BusyPoll), by whether a datagram came (hit) or the read slept after all (miss).", "outcome"),
	}
}

func (c *deviceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.packets, c.bytes, c.messages, c.drops, c.cqOverruns, c.polls} {
		ch <- d
	}
}

func (c *deviceCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.d.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.packets, st.TxPackets, "out")
	counter(c.packets, st.RxPackets, "in")
	counter(c.bytes, st.TxBytes, "out")
	counter(c.bytes, st.RxBytes, "in")
	counter(c.messages, st.TxMessages, "out")
	counter(c.messages, st.RxMessages, "in")
	drops := []uint64{
		st.RxMalformed, st.RxBadICRC, st.RxUnsupported, st.RxUnknownQP, st.RxBadSource, st.RxSequence,
		st.RxBadRKey, st.RxBadRange, st.RxNoRecvWR, st.Socket.RxTruncated, st.Socket.RxLossDropped, st.Socket.TxLossDropped,
	}
	for i, r := range nicDropReasons {
		counter(c.drops, drops[i], r)
	}
	counter(c.cqOverruns, st.CQOverrun)
	counter(c.polls, st.Socket.RxPollHits, "hit")
	counter(c.polls, st.Socket.RxPollMisses, "miss")
}
