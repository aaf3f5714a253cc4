package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
)

// The memory model of the CLI's processes (docs/operations.md, "Memory"):
// what a run allocates besides Go's own few MiB, so that a size that cannot
// fit is refused before anything is allocated. The sizes of the parts come
// from their owners: soft.DeviceBytes (a NIC), aggregation.Config.
// RegisteredBytes (a session), ring.RegisteredBytes (a ring rank) and
// switchmodel.Config.SlotBytes (a switch slot).
const (
	nicBytes = soft.DeviceBytes
	// baseBytes is the process itself: runtime, gRPC, sockets.
	baseBytes = 64 << 20
)

// switchSlotBytes is one slot of the software switch's default pipeline.
var switchSlotBytes = switchmodel.Config{}.SlotBytes()

// memoryNeed is an estimate of a run's memory and how it was made up, for
// the error that refuses it.
type memoryNeed struct {
	bytes uint64
	parts []string
}

func (m *memoryNeed) add(bytes uint64, format string, args ...any) {
	m.bytes += bytes
	m.parts = append(m.parts, fmt.Sprintf(format, args...))
}

// check refuses the need if this machine (or the cgroup the process runs
// in) has less memory available. fix says which flags to lower.
func (m *memoryNeed) check(what, fix string) error {
	avail, ok := availableMemory()
	if !ok || m.bytes <= avail {
		return nil
	}
	return fmt.Errorf("%s needs about %s of memory (%s), but %s is available: %s",
		what, approxBytes(m.bytes), strings.Join(m.parts, " + "), approxBytes(avail), fix)
}

// availableMemory is what this process may still allocate: MemAvailable of
// /proc/meminfo, less if a cgroup v2 limit is nearer; false where neither
// can be read (not Linux), and then nothing is refused.
var availableMemory = func() (uint64, bool) {
	avail, ok := memInfoAvailable()
	if limit, lok := cgroupHeadroom(); lok && (!ok || limit < avail) {
		return limit, true
	}
	return avail, ok
}

func memInfoAvailable() (uint64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "MemAvailable:" && f[2] == "kB" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// cgroupHeadroom is memory.max − memory.current of this process's cgroup
// (v2), false when unlimited or unknown.
func cgroupHeadroom() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	var path string
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
		}
	}
	if path == "" {
		return 0, false
	}
	dir := "/sys/fs/cgroup" + path
	read := func(name string) (uint64, bool) {
		b, err := os.ReadFile(dir + "/" + name)
		if err != nil {
			return 0, false
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64) // "max" fails: unlimited
		return v, err == nil
	}
	limit, ok := read("memory.max")
	if !ok {
		return 0, false
	}
	cur, _ := read("memory.current")
	if cur >= limit {
		return 0, true
	}
	return limit - cur, true
}
