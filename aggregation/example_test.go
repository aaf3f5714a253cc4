package aggregation_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/netip"
	"sync"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
)

// A worker of a 4-worker job: open the NIC, join the session through the
// controller, all-reduce, close. Every rank runs the same code with its own
// rank and NIC address; the switch and the controller run elsewhere
// (`swml-rdma switch`).
func ExampleOpen() {
	rank := 1
	dev, err := soft.Open(soft.Config{Addr: netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + rank)})})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()

	ctx := context.Background()
	sess, err := aggregation.Open(ctx, aggregation.Config{
		Device:         dev,
		ControllerAddr: "127.0.0.1:50099",
		SessionID:      42,
		Rank:           rank,
		Workers:        4,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sess.Close()

	grads := []float32{0.5, -1.25, 3}
	if err := sess.AllReduce(ctx, grads); err != nil {
		log.Fatal(err) // the session is broken: close it and start a new job
	}
	fmt.Println(grads) // the element-wise sum over the 4 workers
}

// The whole system in one process, over loopback: a software switch, its
// controller, and two workers, each with its own userspace RoCEv2 NIC.
func Example_inProcess() {
	swAddr := netip.MustParseAddr("127.88.200.1")
	sw, err := swswitch.New(swswitch.Config{Addr: swAddr})
	if err != nil {
		log.Fatal(err)
	}
	defer sw.Close()
	ctl, err := control.New(control.Config{Programmer: sw, SwitchIPv4: swAddr, PoolSize: sw.Config().Model.PoolSize})
	if err != nil {
		log.Fatal(err)
	}
	defer ctl.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go ctl.Serve(lis)

	const workers = 2
	results := make([][]int32, workers)
	var wg sync.WaitGroup
	for rank := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dev, err := soft.Open(soft.Config{Addr: netip.AddrFrom4([4]byte{127, 88, 200, byte(2 + rank)})})
			if err != nil {
				log.Fatal(err)
			}
			defer dev.Close()
			ctx := context.Background()
			sess, err := aggregation.Open(ctx, aggregation.Config{
				Device: dev, ControllerAddr: lis.Addr().String(),
				SessionID: 1, Rank: rank, Workers: workers,
				DType: wire.Int32, PacketSize: 256, PacketsPerMessage: 2, QPs: 2,
			})
			if err != nil {
				log.Fatal(err)
			}
			defer sess.Close()
			x := []int32{1, 2, 3, int32(10 * (rank + 1))}
			if err := sess.AllReduceInt32(ctx, x); err != nil {
				log.Fatal(err)
			}
			results[rank] = x
		}()
	}
	wg.Wait()
	fmt.Println(results[0], results[1])
	// Output: [2 4 6 30] [2 4 6 30]
}
