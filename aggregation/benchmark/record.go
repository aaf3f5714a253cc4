package benchmark

import (
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation"
)

// The JSON records of a measurement, declared once for every report that
// writes them: `swml-rdma bench` (docs/bench.md "JSON"), `swml-rdma
// worker --json` (docs/operations.md) and the network lab, which reads the
// workers' records and writes its rows (docs/netlab.md "Output").

// Times are a measurement's times as the reports write them: the median,
// minimum, maximum and mean time per all-reduce, and the tensor elements
// and bits per second at the median. The mean is what a job of many calls
// pays on average, rare slow calls included (absent where the times of
// different ranks were combined: TimesOf).
type Times struct {
	MedianNs  int64   `json:"median_ns"`
	MinNs     int64   `json:"min_ns"`
	MaxNs     int64   `json:"max_ns"`
	MeanNs    int64   `json:"mean_ns,omitempty"`
	ATEPerSec float64 `json:"ate_per_s"`
	Gbps      float64 `json:"gbit_per_s"`
}

// Times is s as a record.
func (s Summary) Times() Times {
	return Times{MedianNs: int64(s.Median), MinNs: int64(s.Min), MaxNs: int64(s.Max), MeanNs: int64(s.Mean), ATEPerSec: s.ATEPerSec, Gbps: s.Gbps}
}

// TimesOf is the record of an all-reduce of elements 4-byte elements taking
// median (minimum lo, maximum hi) where the three come from different
// ranks (a job's slowest median, the extremes over its ranks); zero rates
// for a zero median.
func TimesOf(median, lo, hi time.Duration, elements int) Times {
	t := Times{MedianNs: int64(median), MinNs: int64(lo), MaxNs: int64(hi)}
	if median > 0 {
		t.ATEPerSec = float64(elements) / median.Seconds()
		t.Gbps = t.ATEPerSec * 32 / 1e9
	}
	return t
}

// ResendCauses say why SwitchML workers resent (aggregation.Stats): timer
// expiries, resends on evidence of loss (RACK, docs/protocol.md), and
// resends whose result turned out to answer an earlier transmission; and
// the switch's gap notices and the packets resent on them; and the
// probes, tail and result probes, sent in their place.
type ResendCauses struct {
	Timeouts                uint64 `json:"timeouts"`
	FastRetransmissions     uint64 `json:"fast_retransmissions"`
	SpuriousRetransmissions uint64 `json:"spurious_retransmissions"`
	GapNotices              uint64 `json:"gap_notices"`
	NoticeResends           uint64 `json:"notice_resends"`
	TailProbes              uint64 `json:"tail_probes"`
	ResultProbes            uint64 `json:"result_probes"`
}

// CausesOf is st's resend causes.
func CausesOf(st *aggregation.Stats) ResendCauses {
	return ResendCauses{Timeouts: st.Timeouts, FastRetransmissions: st.FastRetransmissions, SpuriousRetransmissions: st.SpuriousRetransmissions,
		GapNotices: st.GapNotices, NoticeResends: st.NoticeResends, TailProbes: st.TailProbes, ResultProbes: st.ResultProbes}
}

// Add adds o's counts to c's.
func (c *ResendCauses) Add(o ResendCauses) {
	c.Timeouts += o.Timeouts
	c.FastRetransmissions += o.FastRetransmissions
	c.SpuriousRetransmissions += o.SpuriousRetransmissions
	c.GapNotices += o.GapNotices
	c.NoticeResends += o.NoticeResends
	c.TailProbes += o.TailProbes
	c.ResultProbes += o.ResultProbes
}

// Record is one SwitchML measurement: the flat part of a run object of
// `swml-rdma bench --json`, and the part of a worker's record that is the
// same columns for that worker alone (its Packets, Retransmissions and
// resend causes are its own).
type Record struct {
	Workers int    `json:"workers"`
	DType   string `json:"dtype"`
	// WireBits is the element width on the wire, 32 or 16
	// (aggregation.Config.Wire).
	WireBits    int     `json:"wire_bits"`
	TensorBytes int     `json:"tensor_bytes"`
	Elements    int     `json:"elements"`
	Iters       int     `json:"iters"`
	Warmup      int     `json:"warmup"`
	PacketSize  int     `json:"packet_size"`
	MessageSize int     `json:"message_size"`
	QPs         int     `json:"qps"`
	Loss        float64 `json:"loss"`
	Times
	Packets         uint64 `json:"packets"`
	Retransmissions uint64 `json:"retransmissions"`
	Verified        bool   `json:"verified"`
	// Writes is how messages went on the wire (aggregation.Writes);
	// PacketWriteCalls counts the calls, warm-up included, that sent packet
	// writes (bench: of every worker).
	Writes           string `json:"writes"`
	PacketWriteCalls uint64 `json:"packet_write_calls"`
	ResendCauses
}

// WorkerRecord is one worker process's result, what `swml-rdma worker
// --json` prints and the network lab reads: the Record of its rank, who it
// was, its result's digest and its CPU time.
type WorkerRecord struct {
	Record
	Rank       int    `json:"rank"`
	JobID      uint32 `json:"job"`
	SessionID  uint32 `json:"session_id"`
	Device     string `json:"device"`
	Controller string `json:"controller"`
	// ResultSHA256 is Result.ResultSHA256: every rank of a job has the
	// same, and a run under loss must have the loss-free run's.
	ResultSHA256 string `json:"result_sha256"`
	// CPUUserNs and CPUSysNs are Result.CPUUser and Result.CPUSys: the
	// process's CPU time inside the measured all-reduces.
	CPUUserNs int64 `json:"cpu_user_ns"`
	CPUSysNs  int64 `json:"cpu_sys_ns"`
}
