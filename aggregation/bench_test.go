package aggregation

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkAllReduce: whole system in process over loopback (software
// switch, controller, userspace NICs), float32. allocs/op counts every
// goroutine of the process (NICs and switch included), per AllReduce call.
func BenchmarkAllReduce(b *testing.B) {
	for i, n := range []int{1, 2, 4} {
		for _, l := range []int{1 << 10, 1 << 18} {
			b.Run(fmt.Sprintf("n%d/%dKiB", n, 4*l>>10), func(b *testing.B) {
				c := newSoftCluster(b, sockets, byte(100+2*i+l>>18), 0, 0)
				j := openJob(b, c.ctlAddr, n, softConfig(1, 1024, 16, 4), c.device(2))
				in := gradients(1, n, l)
				ctx := context.Background()
				noErrors(b, j.allReduce(ctx, in))
				b.SetBytes(int64(4 * l))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if errs := j.allReduce(ctx, in); errs[0] != nil {
						b.Fatal(errs[0])
					}
				}
				b.StopTimer()
				st := j.workers[0].sess.Stats()
				b.ReportMetric(float64(st.Retransmissions)/float64(b.N), "retx/op")
				ss := c.sw.Stats()
				b.ReportMetric(float64(ss.PacketsIn)/float64(max(ss.DatagramsIn, 1)), "sw_pkts/dgram_in")
				b.ReportMetric(float64(ss.PacketsOut)/float64(max(ss.DatagramsOut, 1)), "sw_pkts/dgram_out")
				b.ReportMetric(float64(ss.PacketsIn)/float64(max(ss.RecvCalls, 1)), "sw_pkts/recv")
				b.ReportMetric(float64(ss.PacketsOut)/float64(max(ss.SendCalls, 1)), "sw_pkts/send")
			})
		}
	}
}
