package control_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// printProgrammer stands in for a switch backend.
type printProgrammer struct{}

func (printProgrammer) AddJob(_ context.Context, j *wire.Job) error {
	fmt.Printf("switch: add job %d, %d worker(s), slots [%d, %d)\n", j.ID, len(j.Workers), j.PoolBase, j.PoolBase+j.PoolSlots)
	return nil
}

func (printProgrammer) RemoveJob(_ context.Context, id uint32) error {
	fmt.Printf("switch: remove job %d\n", id)
	return nil
}

func ExampleClient_RegisterRDMA() {
	ctl, err := control.New(control.Config{
		Programmer: printProgrammer{},
		SwitchIPv4: netip.MustParseAddr("127.0.0.1"),
		PoolSize:   1024,
	})
	if err != nil {
		panic(err)
	}
	defer ctl.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0") // control.DefaultAddr in production
	if err != nil {
		panic(err)
	}
	go ctl.Serve(lis)

	c, err := control.Dial(lis.Addr().String())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	a, err := c.RegisterRDMA(context.Background(), control.Registration{
		SessionID:   1,
		Rank:        0,
		NumWorkers:  1,
		Addr:        netip.MustParseAddr("127.0.0.2"),
		RKey:        0x1234,
		PacketSize:  256,
		MessageSize: 1024, // 4 packets per message
		QPNs:        []uint32{0x11, 0x12},
		PSNs:        []uint32{0, 0},
	})
	if err != nil {
		panic(err)
	}
	// Switch QPNs are random per job; QP i writes to a.SwitchQPNs[i].
	fmt.Printf("job %d: write to %v, %d switch QPNs, pool indices %v\n", a.JobID, a.SwitchAddr, len(a.SwitchQPNs), a.QPPoolIndices)
	if err := c.EndSession(context.Background(), a); err != nil {
		panic(err)
	}
	// Output:
	// switch: add job 1, 1 worker(s), slots [0, 8)
	// job 1: write to 127.0.0.1, 2 switch QPNs, pool indices [0 8]
	// switch: remove job 1
}
