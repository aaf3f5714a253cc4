package swswitch

import (
	"context"
	"errors"
	"net/netip"
	"testing"

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
