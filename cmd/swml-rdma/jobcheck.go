package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/ring"
	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// Limits of the all-reduce job flags: the library's (aggregation.Config),
// checked here first so that the error names the flag instead of a Config
// field, once instead of once per worker.
const (
	maxQPs               = aggregation.MaxQPs
	maxPacketsPerMessage = aggregation.MaxPacketsPerMessage
)

// jobSpec is an all-reduce job's tensor and protocol (allReduceFlags): the
// same for the embedded bench and for every worker of a job.
type jobSpec struct {
	size, iters, warmup      int // tensor bytes; all-reduces
	packetSize, qps, msgSize int
	dtype                    wire.DType
	writes                   aggregation.Writes
}

// elements is the tensor's length (4-byte elements).
func (j jobSpec) elements() int { return j.size / 4 }

// session is the part of a worker's aggregation.Config the job flags set.
func (j jobSpec) session() aggregation.Config {
	return aggregation.Config{QPs: j.qps, PacketSize: j.packetSize, PacketsPerMessage: j.msgSize / j.packetSize, DType: j.dtype, Writes: j.writes, TensorBytes: j.size}
}

// parseJobFlags validates the job flags (allReduceFlags) of a job of
// workers workers, for bench and worker alike: each flag, then the job as
// the library will (aggregation.Config.Validate), so that what the flags
// accept is what Open accepts.
func parseJobFlags(c *cli.Context, workers int) (jobSpec, error) {
	j := jobSpec{iters: c.Int("iters"), warmup: c.Int("warmup"), packetSize: c.Int("packet-size"), qps: c.Int("qps")}
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
	if j.dtype, err = wire.ParseDType(c.String("dtype")); err != nil {
		return j, fmt.Errorf("--dtype: %v", err)
	}
	if j.writes, err = aggregation.ParseWrites(c.String("writes")); err != nil {
		return j, fmt.Errorf("--writes %v", err)
	}
	switch {
	case j.iters < 1:
		return j, fmt.Errorf("--iters %d: give at least 1", j.iters)
	case j.warmup < 0:
		return j, fmt.Errorf("--warmup %d: must not be negative", j.warmup)
	case j.qps < 1 || j.qps > maxQPs:
		return j, fmt.Errorf("--qps %d: give 1 to %d queue pairs", j.qps, maxQPs)
	}
	if err := wire.CheckPacketSize(j.packetSize); err != nil {
		return j, fmt.Errorf("--packet-size: %v", err)
	}
	ppm := j.msgSize / j.packetSize
	if j.msgSize%j.packetSize != 0 || ppm&(ppm-1) != 0 {
		return j, fmt.Errorf("--msg-size %d: must be the packet size (%d) times a power of two, e.g. %d", j.msgSize, j.packetSize, 16*j.packetSize)
	}
	if ppm > maxPacketsPerMessage {
		return j, fmt.Errorf("--msg-size %s is %d packets of --packet-size %d; a message has at most %d packets: give --msg-size %s or less",
			approxBytes(uint64(j.msgSize)), ppm, j.packetSize, maxPacketsPerMessage, approxBytes(uint64(maxPacketsPerMessage*j.packetSize)))
	}
	if maxPkt := 1 << wire.MaxPacketIDBits; j.writes == aggregation.PacketWrites && ppm > maxPkt {
		return j, fmt.Errorf("--writes packet with --msg-size %s (%d packets of --packet-size %d): a packet write's id names at most %d packets of a message; give --msg-size %s or less, or --writes auto",
			approxBytes(uint64(j.msgSize)), ppm, j.packetSize, maxPkt, approxBytes(uint64(maxPkt*j.packetSize)))
	}
	cfg := j.session()
	cfg.Workers = workers
	if err := cfg.Validate(); err != nil {
		return j, fmt.Errorf("--qps, --packet-size, --msg-size, --dtype, --writes with %d workers: %v", workers, err)
	}
	return j, nil
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
	var need memoryNeed
	w, size := uint64(cfg.workers), uint64(cfg.size)
	need.add(2*w*size, "%d workers × 2 × %s: each worker's input and its all-reduce buffer", w, approxBytes(size))
	need.add(w*nicBytes, "%d NICs × %s", w, approxBytes(nicBytes))
	mr := sessionMRBytes(cfg.qps, cfg.msgSize)
	need.add(w*mr, "%d × %s registered messages", w, approxBytes(mr))
	if cfg.baseline == "ring" {
		rb := 2 * uint64(ringWindow(cfg.msgSize)) * uint64(cfg.msgSize)
		need.add(w*rb, "%d ring ranks × %s", w, approxBytes(rb))
	}
	need.add(switchmodel.DefaultPoolSize*switchSlotBytes, "%s switch pool", approxBytes(switchmodel.DefaultPoolSize*switchSlotBytes))
	need.add(baseBytes, "%s process", approxBytes(baseBytes))
	return need.check(fmt.Sprintf("--size %s with --workers %d", approxBytes(size), w), "lower --size or --workers")
}

// checkWorkerJob checks one worker's job as a whole: memory (a worker
// keeps every rank's input to verify its result).
func checkWorkerJob(cfg *workerConfig) error {
	var need memoryNeed
	w, size := uint64(cfg.workers), uint64(cfg.size)
	need.add(w*size, "%d × %s: every rank's input, to verify the result", w, approxBytes(size))
	need.add(size, "%s all-reduce buffer", approxBytes(size))
	mr := sessionMRBytes(cfg.qps, cfg.msgSize)
	need.add(nicBytes+mr+baseBytes, "%s NIC, registered messages and process", approxBytes(nicBytes+mr+baseBytes))
	return need.check(fmt.Sprintf("--size %s with --workers %d", approxBytes(size), w), "lower --size")
}

// checkSwitchPool refuses a --pool-size whose slots do not fit in memory.
func checkSwitchPool(pool uint32) error {
	var need memoryNeed
	need.add(uint64(pool)*switchSlotBytes, "%d slots × %s", pool, approxBytes(switchSlotBytes))
	need.add(baseBytes, "%s process", approxBytes(baseBytes))
	return need.check(fmt.Sprintf("--pool-size %d", pool),
		fmt.Sprintf("lower --pool-size (the default %d takes %s)", switchmodel.DefaultPoolSize, approxBytes(switchmodel.DefaultPoolSize*switchSlotBytes)))
}

// ringWindow is the ring baseline's default window in messages
// (ring.DefaultWindow); each rank's MR holds 2 × window messages.
func ringWindow(msgSize int) int { return ring.DefaultWindow(msgSize) }

// sessionMRBytes is a worker session's memory region (aggregation.Open):
// per QP, a receive region for each of the two sets and a send staging
// region, one message each (docs/protocol.md "Buffer layout").
func sessionMRBytes(qps, msgSize int) uint64 { return 3 * uint64(qps) * uint64(msgSize) }
