package switchmodel

import (
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// TestReorderedPacketsNeverCorrupt runs SwitchML rounds through one slot
// while the network between workers and switch reorders packets (each
// delivery picks one of the oldest few in flight), duplicates and loses
// some. Workers resend until they get their round's result, each
// transmission with its QP's next PSN as a NIC sends it. Every result must
// be the exact sum of its round: without the stale-PSN rule, a resend of
// round k that overtook nothing but was itself overtaken by the worker's
// round k+1 packet is counted into round k+2 of the same set (and clears
// the worker's bit of round k+1), which gives wrong sums or a slot that
// never completes (seen as both under QEMU's TCG).
func TestReorderedPacketsNeverCorrupt(t *testing.T) {
	const n, rounds = 3, 300
	for _, window := range []int{1, 2, 4} {
		job := testJob(1, n, 1, 0, 2, 4*tVals)
		p := mustPipeline(t, job)
		seed := uint64(window)*7919 + 1
		rnd := func(k int) int {
			seed = seed*6364136223846793005 + 1442695040888963407
			return int(seed>>33) % k
		}
		type pkt struct {
			r int
			q req
		}
		var net []pkt
		round := make([]int, n) // each worker's current round
		psn := make([]uint32, n)
		send := func(r int) {
			k := round[r]
			q := only(1, uint8(k&1), int32(k*1000+r))
			q.qpn, q.psn = job.Workers[r].SwitchQPNs[0], psn[r]
			q.imm = wire.MakeImm(uint16(k), 0, 0)
			psn[r]++
			net = append(net, pkt{r, q})
		}
		for r := range n {
			send(r)
		}
		var md Metadata
		for steps := 0; ; steps++ {
			done := true
			for r := range n {
				done = done && round[r] >= rounds
			}
			if done {
				break
			}
			if steps > 200000 {
				t.Fatalf("window %d: no progress: rounds %v, counters %+v", window, round, p.Counters)
			}
			if len(net) == 0 || rnd(4) == 0 {
				// A timer: some worker resends its round (a new packet).
				if r := rnd(n); round[r] < rounds {
					send(r)
				}
				continue
			}
			i := rnd(min(window, len(net)))
			pk := net[i]
			if rnd(20) != 0 { // duplicated on the way: stays in flight once more
				net = append(net[:i], net[i+1:]...)
			}
			if rnd(10) == 0 {
				continue // lost
			}
			p.Process(job.Workers[pk.r].Addr, pk.q.parsed(t), &md)
			for _, res := range emit(t, p, &md) {
				if rnd(10) == 0 {
					continue // result lost
				}
				d := int(res.dst.As4()[3]) - 2
				k := int(res.imm.MsgID())
				want := int32(k*1000*n + n*(n-1)/2)
				if res.payload[0] != want {
					t.Fatalf("window %d: round %d: result %d, want %d (counters %+v)", window, k, res.payload[0], want, p.Counters)
				}
				if k == round[d] {
					round[d]++
					if round[d] < rounds {
						send(d)
					}
				}
			}
		}
		if window > 1 && p.Counters.Drops[DropStalePSN] == 0 {
			t.Errorf("window %d: no packet was ever stale: the test does not reorder", window)
		}
		t.Logf("window %d: %+v", window, p.Counters)
	}
}
