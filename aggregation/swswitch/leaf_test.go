package swswitch

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// TestSetUpstreamCores: a leaf job's receive QPNs go to the core that owns
// their QP index, leave the core table with the upstream and with the job,
// and SetUpstream refuses what cannot be a leaf's upstream.
func TestSetUpstreamCores(t *testing.T) {
	mem, err := memlink.New(memlink.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sw := fabric{mem: mem, cores: 3}.newSwitch(t, Config{Addr: addr(90, 1)})
	job := makeJob(1, 90, 2, 4, 0, 16, 256)
	if err := sw.AddJob(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	up := &switchmodel.Upstream{Addr: addr(91, 1), QPNs: []uint32{1, 2, 3, 4}, PSNs: []uint32{0, 0, 0, 0}, PoolBase: 100,
		RecvQPNs: []uint32{0x5001, 0x5002, 0x5003, 0x5004}, RecvPSNs: []uint32{9, 9, 9, 9}}
	if err := sw.SetUpstream(1, up); err != nil {
		t.Fatal(err)
	}
	tab := sw.table.Load()
	for i, qpn := range up.RecvQPNs {
		if got, want := tab.coreOf(qpn), tab.coreOf(job.Workers[0].SwitchQPNs[i]); got != want {
			t.Errorf("QP %d: receive QPN on core %d, its slots on core %d", i, got, want)
		}
	}
	for name, tc := range map[string]struct {
		id   uint32
		up   switchmodel.Upstream
		want error
	}{
		"unknown job":  {id: 7, up: *up, want: switchmodel.ErrUpstream},
		"IPv6 spine":   {id: 1, up: switchmodel.Upstream{Addr: netip.MustParseAddr("fd00::1"), QPNs: up.QPNs, PSNs: up.PSNs, RecvQPNs: up.RecvQPNs, RecvPSNs: up.RecvPSNs}, want: switchmodel.ErrUpstream},
		"Tofino QPN":   {id: 1, up: switchmodel.Upstream{Addr: up.Addr, QPNs: up.QPNs, PSNs: up.PSNs, RecvQPNs: []uint32{0x800001, 2, 3, 4}, RecvPSNs: up.RecvPSNs}, want: switchmodel.ErrUpstream},
		"too few QPNs": {id: 1, up: switchmodel.Upstream{Addr: up.Addr, QPNs: up.QPNs[:1], PSNs: up.PSNs, RecvQPNs: up.RecvQPNs, RecvPSNs: up.RecvPSNs}, want: switchmodel.ErrUpstream},
	} {
		if err := sw.SetUpstream(tc.id, &tc.up); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	// A refused upstream left the first one in place.
	if tab := sw.table.Load(); tab.qpns[up.RecvQPNs[0]].refs != 1 {
		t.Fatalf("after refusals: receive QPN bound %d times", tab.qpns[up.RecvQPNs[0]].refs)
	}
	if err := sw.RemoveJob(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	for _, qpn := range up.RecvQPNs {
		if _, bound := sw.table.Load().qpns[qpn]; bound {
			t.Errorf("receive QPN %#x still bound after RemoveJob", qpn)
		}
	}
}

// TestLeafMetrics: a leaf switch's writes to its spine and the spine
// results it took are served as swml_switch_upstream_writes_total and
// swml_switch_spine_results_total, summed over its cores (the pipelines
// count them: switchmodel's TestLeaf, local's TestTreeBitIdentical).
func TestLeafMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	sw := newSwitch(t, Config{Addr: addr(31, 1), Cores: 2, Registry: reg})
	checkMetric(t, reg, "swml_switch_upstream_writes_total", "", "", 0)
	checkMetric(t, reg, "swml_switch_spine_results_total", "", "", 0)
	for i, c := range sw.cores {
		c.mu.Lock()
		c.eng.pipe.Counters.UpstreamWrites += uint64(10 * (i + 1))
		c.eng.pipe.Counters.SpineResults += uint64(3 * (i + 1))
		c.mu.Unlock()
	}
	checkMetric(t, reg, "swml_switch_upstream_writes_total", "", "", 30)
	checkMetric(t, reg, "swml_switch_spine_results_total", "", "", 9)
	st := sw.Stats()
	if tot := st.Totals(); tot.UpstreamWrites != 30 || tot.SpineResults != 9 {
		t.Errorf("final counters: %d writes up, %d spine results; want 30, 9", tot.UpstreamWrites, tot.SpineResults)
	}
}
