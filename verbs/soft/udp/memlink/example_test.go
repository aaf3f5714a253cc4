package memlink_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// A 100 Mbit/s link with room for two waiting packets, on a clock the
// example moves: of four 1250-byte datagrams sent at once, one goes on
// the wire, two wait and one is dropped; each takes 100 µs on the wire.
func Example() {
	clk := &memlink.ManualClock{}
	n, _ := memlink.New(memlink.Config{Clock: clk})
	a, _ := n.Listen(netip.MustParseAddrPort("10.0.0.1:4791"))
	b, _ := n.Listen(netip.MustParseAddrPort("10.0.0.2:4791"))
	defer a.Close()
	defer b.Close()
	_ = n.SetLink(a.LocalAddr().Addr(), b.LocalAddr().Addr(), memlink.LinkConfig{Rate: 100e6, Queue: 2})

	out := make([]udp.Msg, 4)
	for i := range out {
		out[i] = udp.Msg{Buf: make([]byte, 1250), N: 1250, Addr: b.LocalAddr()}
	}
	_, _ = a.WriteBatch(out)

	in := make([]udp.Msg, 4)
	for i := range in {
		in[i] = udp.Msg{Buf: make([]byte, 2048)}
	}
	for range 3 {
		clk.Advance(100 * time.Microsecond)
		k, _ := b.ReadBatch(in)
		fmt.Printf("at %v: %d datagram from %v\n", clk.Now(), k, in[0].Addr)
	}
	st := n.LinkStats(a.LocalAddr().Addr(), b.LocalAddr().Addr())
	fmt.Printf("sent %d, delivered %d, dropped at the queue %d\n", st.Packets, st.Delivered, st.QueueDrops)
	// Output:
	// at 100µs: 1 datagram from 10.0.0.1:4791
	// at 200µs: 1 datagram from 10.0.0.1:4791
	// at 300µs: 1 datagram from 10.0.0.1:4791
	// sent 4, delivered 3, dropped at the queue 1
}
