package swswitch_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// A switch on 127.0.0.1 with one job of two workers (127.0.0.2 and .3),
// installed as the controller would through control.Programmer.
func Example() {
	reg := prometheus.NewRegistry()
	sw, err := swswitch.New(swswitch.Config{
		Addr:     netip.MustParseAddr("127.0.0.1"),
		Model:    switchmodel.Config{PoolSize: 1024},
		Registry: reg,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sw.Close()
	job := &wire.Job{ID: 1, DType: wire.Float32, PacketSize: 1024, PoolBase: 0, PoolSlots: 64}
	for r := 0; r < 2; r++ {
		job.Workers = append(job.Workers, wire.Worker{
			Rank: r, Addr: netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + r)}), RKey: 0x100,
			QPNs: []uint32{0x11}, PSNs: []uint32{0}, SwitchQPNs: []uint32{0x100 + uint32(r)},
		})
	}
	if err := sw.AddJob(context.Background(), job); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sw.Stats().Jobs)
}
