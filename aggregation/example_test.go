package aggregation_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/local"
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

// The whole system in one process, over loopback (aggregation/local): a
// software switch, its controller, and two workers, each with its own
// userspace RoCEv2 NIC, joining the job as they would on a network.
func Example_inProcess() {
	ctx := context.Background()
	cl, err := local.Start(ctx, local.Config{
		Switch:  swswitch.Config{Addr: netip.MustParseAddr("127.88.200.1")},
		Workers: 2, // NICs at 127.88.200.2 and .3
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()

	results := make([][]int32, len(cl.NICs))
	err = local.Parallel(len(cl.NICs), func(rank int) error {
		sess, err := aggregation.Open(ctx, aggregation.Config{
			Device: cl.NICs[rank], ControllerAddr: cl.ControllerAddr,
			SessionID: 1, Rank: rank, Workers: len(cl.NICs),
			DType: wire.Int32, PacketSize: 256, PacketsPerMessage: 2, QPs: 2,
		})
		if err != nil {
			return err
		}
		defer sess.Close()
		x := []int32{1, 2, 3, int32(10 * (rank + 1))}
		if err := sess.AllReduceInt32(ctx, x); err != nil {
			return err
		}
		results[rank] = x
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(results[0], results[1])
	// Output: [2 4 6 30] [2 4 6 30]
}

// Validate checks a job's parameters before any NIC is opened: a launcher
// can refuse a bad job once instead of once per worker.
func ExampleConfig_Validate() {
	err := aggregation.Config{Workers: 4, Rank: 0, PacketSize: 1000}.Validate()
	fmt.Println(errors.Is(err, aggregation.ErrConfig))
	fmt.Println(err)
	// A front end names the field in its own terms: a flag, a variable.
	var fe *aggregation.FieldError
	if errors.As(err, &fe) {
		fmt.Printf("--%s %v: %s\n", map[string]string{"PacketSize": "packet-size"}[fe.Field], fe.Value, fe.Reason)
	}
	fmt.Println(aggregation.Config{Workers: 4, Rank: 3}.Validate())
	// Output:
	// true
	// aggregation: invalid configuration: Config.PacketSize is 1000: use 256, 512, 1024, 2048 and 4096 bytes
	// --packet-size 1000: use 256, 512, 1024, 2048 and 4096 bytes
	// <nil>
}
