package swswitch

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
)

// collector reads Switch.Stats at scrape time; the packet path only bumps
// plain counters under the lock it already holds per batch.
type collector struct {
	s *Switch

	packets, bytes, aggregated, retransmissions, completed, unicasts, results, skipped, drops *prometheus.Desc
	upstreamWrites, spineResults, gapNotices                                                  *prometheus.Desc
	slotsInUse, slotsAllocated, poolSize, jobs                                                *prometheus.Desc
	corePackets, cores                                                                        *prometheus.Desc
	datagrams, syscalls, polls                                                                *prometheus.Desc
	coreLabels                                                                                []string // "0", "1", …
}

func newCollector(s *Switch) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("swml_switch_"+name, help, labels, nil)
	}
	labels := make([]string, len(s.cores))
	for i := range labels {
		labels[i] = strconv.Itoa(i)
	}
	return &collector{
		s:               s,
		coreLabels:      labels,
		corePackets:     d("core_packets_total", "Requests each core's pipeline processed (Config.Cores; core = 0 … cores−1, a bounded set).", "core"),
		cores:           d("cores", "Cores processing packets, each owning whole QPs and their slots."),
		packets:         d("packets_total", "RoCEv2 datagrams received (in, before ingress loss) and sent (out, after egress loss).", "direction"),
		bytes:           d("bytes_total", "UDP payload bytes received and sent.", "direction"),
		datagrams:       d("datagrams_total", "Kernel datagrams that carried the packets, received and sent: with UDP GRO/GSO one datagram holds a run of packets (packets_total ÷ datagrams_total is the run's length).", "direction"),
		syscalls:        d("socket_calls_total", "recvmmsg (in) and sendmmsg (out) system calls that moved datagrams.", "direction"),
		polls:           d("busy_polls_total", "Reads that found a socket empty and polled it before sleeping (--busy-poll), by whether a datagram came (hit) or the read slept after all (miss).", "outcome"),
		aggregated:      d("aggregated_total", "New contributions added into a slot."),
		retransmissions: d("retransmissions_total", "Requests recognised as retransmissions by the bitmap."),
		completed:       d("slots_completed_total", "Slots completed and broadcast to every worker of the job."),
		unicasts:        d("unicasts_total", "Retransmissions into a completed slot answered to the sender alone."),
		results:         d("result_packets_total", "Result packets built (before egress loss)."),
		skipped:         d("results_skipped_total", "Result packets not sent to a worker QP because they would have followed another message's packet; the worker retransmits."),
		drops:           d("drops_total", "Packets dropped, by reason.", "reason"),
		upstreamWrites:  d("upstream_writes_total", "A leaf switch's writes of its completed slots to its spine, first sends and resends (docs/switch.md \"Switch hierarchy\"); 0 on a flat switch."),
		spineResults:    d("spine_results_total", "Spine results a leaf switch took into its slots, to write down to its workers."),
		gapNotices:      d("gap_notices_total", "Gap notices sent: a worker's packet write arrived after a PSN gap, and the worker was told which packets it lost."),
		slotsInUse:      d("slots_in_use", "(slot, set) pairs holding a partial aggregation."),
		slotsAllocated:  d("slots_allocated", "Slots owned by installed jobs."),
		poolSize:        d("pool_slots", "Aggregation slots of the switch."),
		jobs:            d("jobs", "Installed jobs."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.packets, c.bytes, c.aggregated, c.retransmissions, c.completed, c.unicasts,
		c.results, c.skipped, c.drops, c.upstreamWrites, c.spineResults, c.gapNotices, c.slotsInUse, c.slotsAllocated, c.poolSize, c.jobs, c.corePackets, c.cores,
		c.datagrams, c.syscalls, c.polls} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter(c.packets, st.PacketsIn, "in")
	counter(c.packets, st.PacketsOut, "out")
	counter(c.bytes, st.BytesIn, "in")
	counter(c.bytes, st.BytesOut, "out")
	counter(c.datagrams, st.DatagramsIn, "in")
	counter(c.datagrams, st.DatagramsOut, "out")
	counter(c.syscalls, st.RecvCalls, "in")
	counter(c.syscalls, st.SendCalls, "out")
	counter(c.polls, st.PollHits, "hit")
	counter(c.polls, st.PollMisses, "miss")
	counter(c.aggregated, st.Model.Aggregated)
	counter(c.retransmissions, st.Model.Retransmissions)
	counter(c.completed, st.Model.Completed)
	counter(c.unicasts, st.Model.Unicasts)
	counter(c.results, st.Model.ResultPackets)
	counter(c.skipped, st.Model.ResultsSkipped)
	counter(c.upstreamWrites, st.Model.UpstreamWrites)
	counter(c.spineResults, st.Model.SpineResults)
	counter(c.gapNotices, st.Model.GapNotices)
	for r := switchmodel.DropReason(1); r < switchmodel.NumDropReasons; r++ {
		counter(c.drops, st.Model.Drops[r], r.String())
	}
	gauge(c.slotsInUse, float64(st.SlotsInUse))
	gauge(c.slotsAllocated, float64(st.SlotsAllocated))
	gauge(c.poolSize, float64(st.PoolSize))
	gauge(c.jobs, float64(st.Jobs))
	gauge(c.cores, float64(len(st.CorePackets)))
	for i, n := range st.CorePackets {
		counter(c.corePackets, n, c.coreLabels[i])
	}
}
