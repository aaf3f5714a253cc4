package ring_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	"github.com/swml-rdma/swml-rdma/aggregation/ring"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/verbstest"
)

// A ring all-reduce among three ranks. Here the devices are in-memory fakes;
// the bench uses one verbs/soft NIC per rank.
func ExampleNew() {
	nw := verbstest.NewNetwork()
	defer nw.Close()
	devs := make([]verbs.Device, 3)
	for i := range devs {
		d, err := nw.NewDevice(netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + i)}))
		if err != nil {
			panic(err)
		}
		defer d.Close()
		devs[i] = d
	}
	rg, err := ring.New(devs, ring.Config{MessageSize: 1024})
	if err != nil {
		panic(err)
	}
	defer rg.Close()

	x := [][]float32{{1, 2, 3, 4}, {10, 20, 30, 40}, {100, 200, 300, 400}}
	var wg sync.WaitGroup
	for r := range rg.Size() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rg.Rank(r).AllReduce(context.Background(), x[r]); err != nil {
				panic(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println(x[0], x[1], x[2])
	// Output: [111 222 333 444] [111 222 333 444] [111 222 333 444]
}
