package main

import (
	"fmt"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
)

// Limits of the all-reduce job flags that the library also enforces
// (aggregation.Config), checked here first so that the error names the flag
// instead of a Config field, once instead of once per worker.
const (
	maxQPs               = 1 << 12
	maxPacketsPerMessage = 1 << 14
)

// checkJobLimits checks what bench and worker share beyond each flag's own
// syntax: the message size against the library's packets-per-message limit
// and --qps against its QP limit.
func checkJobLimits(qps, packetSize, msgSize int) error {
	if qps < 1 || qps > maxQPs {
		return fmt.Errorf("--qps %d: give 1 to %d queue pairs", qps, maxQPs)
	}
	if ppm := msgSize / packetSize; ppm > maxPacketsPerMessage {
		return fmt.Errorf("--msg-size %s is %d packets of --packet-size %d; a message has at most %d packets: give --msg-size %s or less",
			approxBytes(uint64(msgSize)), ppm, packetSize, maxPacketsPerMessage, approxBytes(uint64(maxPacketsPerMessage*packetSize)))
	}
	return nil
}

// checkBench checks the embedded bench's configuration as a whole, after
// benchFlags checked each flag: the job fits the embedded switch's pool,
// a ring of one worker is refused (it moves nothing, so it has no time to
// compare), and the largest run fits in memory.
func checkBench(cfg benchConfig) error {
	if err := checkJobLimits(cfg.qps, cfg.packetSize, cfg.msgSize); err != nil {
		return err
	}
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

// checkWorkerJob checks one worker's job flags as a whole: library limits,
// and memory (a worker keeps every rank's input to verify its result).
func checkWorkerJob(cfg *workerConfig) error {
	if err := checkJobLimits(cfg.qps, cfg.packetSize, cfg.msgSize); err != nil {
		return err
	}
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

// ringWindow is perftest.Ring's default window in messages (RingConfig):
// 256 KiB in flight, 4 to 256 messages; each rank's MR holds 2 × window
// messages.
func ringWindow(msgSize int) int { return min(max((256<<10)/msgSize, 4), 256) }

// sessionMRBytes is a worker session's memory region (aggregation.Open):
// per QP, a receive region for each of the two sets and a send staging
// region, one message each (docs/protocol.md "Buffer layout").
func sessionMRBytes(qps, msgSize int) uint64 { return 3 * uint64(qps) * uint64(msgSize) }
