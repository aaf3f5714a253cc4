package interop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"time"

	"github.com/swml-rdma/swml-rdma/rdma/rdmadev"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// ErrSkip marks a scenario that cannot run here (missing backend or device).
var ErrSkip = errors.New("scenario skipped")

// Env describes the lab a scenario runs in: the rxe device in this network
// namespace and the peer namespace across a veth (see guest-init.sh).
type Env struct {
	RxeDev   string     // "rxe0"
	RxeAddr4 netip.Addr // 10.0.0.1
	RxeAddr6 netip.Addr // fd00::1
	Peer4    netip.Addr // 10.0.0.2 (in PeerNS)
	Peer6    netip.Addr // fd00::2
	PeerNS   string     // "peer"
	Sysfs    string     // sysfs root for counters
	Self     string     // path of this program, re-executed in PeerNS
	Log      io.Writer
	Timeout  time.Duration // per wait
}

func (e *Env) logf(format string, args ...any) {
	fmt.Fprintf(e.Log, format+"\n", args...)
}

// Scenario is one named check.
type Scenario struct {
	Name   string
	Proves string
	Run    func(ctx context.Context, e *Env) error
}

var scenarios = map[string]Scenario{}

func register(s Scenario) { scenarios[s.Name] = s }

// Lookup returns the scenario called name.
func Lookup(name string) (Scenario, bool) {
	s, ok := scenarios[name]
	return s, ok
}

// Names lists the registered scenarios.
func Names() []string {
	var n []string
	for k := range scenarios {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// packets returns how many packets a message of n bytes takes at path MTU m.
func packets(n int, m verbs.MTU) int {
	if n == 0 {
		return 1
	}
	return (n + int(m) - 1) / int(m)
}

// counter reads one of rxe's hw_counters (rcvd_pkts, sent_pkts, …).
// ib_core caches hw_counters for "lifespan" ms (10 by default): the lab
// sets it to 0, and counterSettled waits past it anyway.
func (e *Env) counter(name string) (uint64, error) {
	return rdmadev.HWCounter(e.Sysfs, e.RxeDev, 1, name)
}

// counterSettled waits until counter name has moved by want from before
// (or 2 s passed), then gives it 50 ms more to overshoot, and returns the
// final delta. rxe counts from its tasklets, after completions may already
// be visible.
func (e *Env) counterSettled(name string, before uint64, want int) (int, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		v, err := e.counter(name)
		if err != nil {
			return 0, err
		}
		if int(v-before) >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	v, err := e.counter(name)
	return int(v - before), err
}

// waitN polls cq until n completions arrived or the timeout passed; every
// completion must be successful.
func waitN(ctx context.Context, cq verbs.CQ, n int, timeout time.Duration) ([]verbs.Completion, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := make([]verbs.Completion, 0, n)
	buf := make([]verbs.Completion, 16)
	for len(out) < n {
		k, err := cq.Wait(ctx, buf)
		if err != nil {
			return out, fmt.Errorf("got %d of %d completions: %w", len(out), n, err)
		}
		for _, c := range buf[:k] {
			if err := c.Err(); err != nil {
				return out, err
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// fill writes a deterministic pattern that differs per message and offset.
func fill(b []byte, seed uint32) {
	x := seed*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
