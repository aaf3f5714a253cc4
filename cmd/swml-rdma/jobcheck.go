package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/ring"
	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// jobSpec is an all-reduce job's tensor and protocol (allReduceFlags): the
// same for the embedded bench and for every worker of a job.
type jobSpec struct {
	size, iters, warmup      int // tensor bytes; all-reduces
	packetSize, qps, msgSize int
	threads                  int
	dtype                    wire.DType
	// wire is the element width on the wire, 32 or 16 bits (--wire);
	// wires is --wire's list, which bench sweeps (a worker has one).
	wire                    int
	wires                   []int
	writes                  aggregation.Writes
	noGapNotices            bool // --gap-notices=false
	peerTimeout, queueDelay time.Duration
}

// elements is the tensor's length (4-byte elements).
func (j jobSpec) elements() int { return j.size / 4 }

// session is the part of a worker's aggregation.Config the job flags set.
func (j jobSpec) session() aggregation.Config {
	return aggregation.Config{QPs: j.qps, Threads: j.threads, PacketSize: j.packetSize, PacketsPerMessage: j.msgSize / j.packetSize, DType: j.dtype, Wire: j.wire, Writes: j.writes, NoGapNotices: j.noGapNotices, PeerTimeout: j.peerTimeout, QueueDelay: j.queueDelay, TensorBytes: j.size}
}

// configFlags name the flag that sets each aggregation.Config field, for
// the errors of Config.Validate (aggregation.FieldError).
var configFlags = map[string]string{
	"Workers": "--workers", "Rank": "--rank", "QPs": "--qps", "Threads": "--threads", "PacketSize": "--packet-size",
	"PacketsPerMessage": "--msg-size", "DType": "--dtype", "Wire": "--wire", "Writes": "--writes", "NoGapNotices": "--gap-notices", "PeerTimeout": "--peer-timeout", "TensorBytes": "--size",
}

// flagError renders a Config error in the terms of the flags: the flag of
// the field, then the library's reason; a message's packet count in bytes.
func (j jobSpec) flagError(err error) error {
	var fe *aggregation.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	flag, ok := configFlags[fe.Field]
	if !ok {
		return err
	}
	if fe.Field != "PacketsPerMessage" {
		return fmt.Errorf("%s %v: %s", flag, fe.Value, fe.Reason)
	}
	msg := fmt.Sprintf("--msg-size %s (%v packets of --packet-size %d)", approxBytes(uint64(j.msgSize)), fe.Value, j.packetSize)
	if j.writes == aggregation.PacketWrites {
		msg += " with --writes packet"
	}
	msg += ": " + fe.Reason
	if fe.Max > 0 {
		msg += fmt.Sprintf("; give --msg-size %s or less", approxBytes(uint64(fe.Max*j.packetSize)))
		if j.writes == aggregation.PacketWrites {
			msg += ", or --writes auto"
		}
	}
	return errors.New(msg)
}

// qpsRange says how many QPs a worker may open: each holds one switch
// slot per packet of a message, and a switch of the default --pool-size
// has switchmodel.DefaultPoolSize slots, which caps --qps below
// aggregation.MaxQPs unless messages are small.
func (j jobSpec) qpsRange() string {
	ppm := j.msgSize / j.packetSize
	ceiling := min(aggregation.MaxQPs, switchmodel.DefaultPoolSize/ppm)
	slots := "slots"
	if ppm == 1 {
		slots = "slot"
	}
	return fmt.Sprintf("give 1 to %d queue pairs (a QP holds %d switch %s with --msg-size %s and --packet-size %d; a switch of the default --pool-size has %d)",
		ceiling, ppm, slots, approxBytes(uint64(j.msgSize)), j.packetSize, switchmodel.DefaultPoolSize)
}

// parseJobFlags validates the job flags (allReduceFlags) of a job of
// workers workers, for bench and worker alike: what each flag's syntax
// needs, then the job as the library will (aggregation.Config.Validate,
// whose errors name the flag), so that what the flags accept is what Open
// accepts.
func parseJobFlags(c *cli.Context, workers int) (jobSpec, error) {
	j := jobSpec{iters: c.Int("iters"), warmup: c.Int("warmup"), packetSize: c.Int("packet-size"), qps: c.Int("qps"), threads: c.Int("threads"), peerTimeout: c.Duration("peer-timeout"), queueDelay: c.Duration("queue-delay"),
		noGapNotices: !c.Bool("gap-notices")}
	var err error
	if j.size, err = parseSize(c.String("size")); err != nil {
		return j, fmt.Errorf("--size: %v", err)
	}
	if j.size%4 != 0 {
		return j, fmt.Errorf("--size %d: a tensor of 4-byte elements needs a multiple of 4 bytes", j.size)
	}
	if j.msgSize, err = parseSize(c.String("msg-size")); err != nil {
		return j, fmt.Errorf("--msg-size: %v", err)
	}
	// A job of more than aggregation.LargeJobWorkers workers (a bench
	// sweep: its largest) takes aggregation.DefaultGeometry's shorter
	// messages where the flags were not given.
	if qps, ppm := aggregation.DefaultGeometry(workers); workers > aggregation.LargeJobWorkers {
		if !c.IsSet("qps") {
			j.qps = qps
		}
		if !c.IsSet("msg-size") {
			j.msgSize = ppm * j.packetSize
		}
	}
	if j.dtype, err = wire.ParseDType(c.String("dtype")); err != nil {
		return j, fmt.Errorf("--dtype: %v", err)
	}
	if j.writes, err = aggregation.ParseWrites(c.String("writes")); err != nil {
		return j, fmt.Errorf("--%v", err)
	}
	if j.wires, err = parseWires(c.String("wire")); err != nil {
		return j, err
	}
	j.wire = j.wires[0]
	switch {
	case j.iters < 1:
		return j, fmt.Errorf("--iters %d: give at least 1", j.iters)
	case j.warmup < 0:
		return j, fmt.Errorf("--warmup %d: must not be negative", j.warmup)
	case j.peerTimeout <= 0:
		return j, fmt.Errorf("--peer-timeout %v: give a positive duration, e.g. %v", j.peerTimeout, aggregation.DefaultPeerTimeout)
	}
	if err := wire.CheckPacketSize(j.packetSize); err != nil {
		return j, fmt.Errorf("--packet-size: %v", err)
	}
	if _, err := wire.MessagePackets(j.msgSize, j.packetSize); err != nil {
		return j, fmt.Errorf("--msg-size %d: not --packet-size (%d) times a power of two, e.g. %d", j.msgSize, j.packetSize, 16*j.packetSize)
	}
	// 0 would be the library's default.
	if j.qps < 1 || j.qps > aggregation.MaxQPs {
		return j, fmt.Errorf("--qps %d: %s", j.qps, j.qpsRange())
	}
	for _, w := range j.wires {
		cfg := j.session()
		cfg.Workers, cfg.Wire = workers, w
		if err := cfg.Validate(); err != nil {
			return j, j.flagError(err)
		}
	}
	return j, nil
}

// parseWires accepts an element width on the wire, 32 or 16, or a comma
// list of them (bench runs each in turn).
func parseWires(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		switch f = strings.TrimSpace(f); f {
		case "32", "16":
			n, _ := strconv.Atoi(f)
			if slices.Contains(out, n) {
				return nil, fmt.Errorf("--wire %q: %s twice; give each width once", s, f)
			}
			out = append(out, n)
		default:
			return nil, fmt.Errorf("--wire %q: give 32 (int32 lanes) or 16 (int16 lanes, twice the elements per packet; float32 only), or a comma list such as 32,16", s)
		}
	}
	return out, nil
}

// checkBench checks the embedded bench's configuration as a whole, after
// benchFlags checked each flag (parseJobFlags): the job fits the embedded switch's pool,
// a ring of one worker is refused (it moves nothing, so it has no time to
// compare), and the largest run fits in memory.
func checkBench(cfg benchConfig) error {
	ppm := cfg.msgSize / cfg.packetSize
	if slots := cfg.qps * ppm; slots > switchmodel.DefaultPoolSize {
		return fmt.Errorf("--qps %d × %d packets per message (--msg-size %s / --packet-size %d) = %d switch slots, more than the embedded switch's %d: lower --qps or --msg-size",
			cfg.qps, ppm, approxBytes(uint64(cfg.msgSize)), cfg.packetSize, slots, switchmodel.DefaultPoolSize)
	}
	if cfg.baseline == "ring" {
		for _, w := range cfg.sweep {
			if w < 2 {
				return fmt.Errorf("--workers %d with --baseline ring: a ring of one worker sends nothing, so there is no time to compare; give --workers 2 or more, or --baseline none", w)
			}
		}
	}
	need := benchMemory(cfg)
	return need.check(fmt.Sprintf("--size %s with --workers %d", approxBytes(uint64(cfg.size)), cfg.workers), "lower --size or --workers")
}

// benchMemory is the embedded bench's memory model (docs/operations.md
// "Memory"). The result check keeps a hash of a result, not a copy
// (benchmark.Checker), so the tensors are each worker's input and buffer.
func benchMemory(cfg benchConfig) memoryNeed {
	var need memoryNeed
	w, size := uint64(cfg.workers), uint64(cfg.size)
	need.add(2*w*size, "%d workers × 2 × %s: each worker's input and its all-reduce buffer", w, approxBytes(size))
	need.add(w*nicBytes, "%d NICs × %s", w, approxBytes(nicBytes))
	mr := uint64(cfg.session().RegisteredBytes())
	need.add(w*mr, "%d × %s registered messages", w, approxBytes(mr))
	if cfg.baseline == "ring" {
		// The ring all-reduces in the SwitchML run's buffers
		// (benchmark.Buffers): only its registered memory is added.
		rb := uint64(ring.RegisteredBytes(cfg.msgSize, 0))
		need.add(w*rb, "%d ring ranks × %s", w, approxBytes(rb))
	}
	need.add(switchmodel.DefaultPoolSize*switchSlotBytes, "%s switch pool", approxBytes(switchmodel.DefaultPoolSize*switchSlotBytes))
	if cfg.link > 0 {
		// Over in-memory links a packet in flight waits in its receiver's
		// queue (memlink), one slot of the largest datagram each: at a NIC
		// SwitchML's results (every QP's message) or the ring's window and
		// its acknowledgements, at the switch every worker's requests.
		ppm := uint64(cfg.msgSize / cfg.packetSize)
		sml := uint64(cfg.qps) * ppm
		nic := sml
		if cfg.baseline == "ring" {
			win := uint64(ring.RegisteredBytes(cfg.msgSize, 0)) / 2 // 2 × window × message
			nic = max(nic, win/uint64(cfg.packetSize)+win/uint64(cfg.msgSize))
		}
		lb := (w*nic + w*sml) * memlink.DefaultMaxDatagram
		need.add(lb, "%s of packets in flight on the links", approxBytes(lb))
	}
	need.add(baseBytes, "%s process", approxBytes(baseBytes))
	return need
}

// checkWorkerJob checks one worker's job as a whole: memory (a worker
// keeps every rank's input to verify its result).
func checkWorkerJob(cfg *workerConfig) error {
	need := workerMemory(cfg)
	return need.check(fmt.Sprintf("--size %s with --workers %d", approxBytes(uint64(cfg.size)), cfg.workers), "lower --size")
}

// workerMemory is one worker process's memory model (docs/operations.md
// "Memory"): every rank's input, its buffer, no copy of a result (the
// check keeps a hash, benchmark.Checker).
func workerMemory(cfg *workerConfig) memoryNeed {
	var need memoryNeed
	w, size := uint64(cfg.workers), uint64(cfg.size)
	need.add(w*size, "%d × %s: every rank's input, to verify the result", w, approxBytes(size))
	need.add(size, "%s all-reduce buffer", approxBytes(size))
	mr := uint64(cfg.session().RegisteredBytes())
	need.add(nicBytes+mr+baseBytes, "%s NIC, registered messages and process", approxBytes(nicBytes+mr+baseBytes))
	return need
}

// checkSwitchPool refuses a --pool-size whose slots do not fit in memory.
func checkSwitchPool(pool uint32) error {
	var need memoryNeed
	need.add(uint64(pool)*switchSlotBytes, "%d slots × %s", pool, approxBytes(switchSlotBytes))
	need.add(baseBytes, "%s process", approxBytes(baseBytes))
	return need.check(fmt.Sprintf("--pool-size %d", pool),
		fmt.Sprintf("lower --pool-size (the default %d takes %s)", switchmodel.DefaultPoolSize, approxBytes(switchmodel.DefaultPoolSize*switchSlotBytes)))
}
