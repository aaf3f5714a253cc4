package perftest

import (
	"context"
	"net/netip"
	"testing"

	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
)

func softPair(t testing.TB) (*soft.Device, *soft.Device) {
	t.Helper()
	a, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.12.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.12.0.3")})
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestWriteBWDelivers(t *testing.T) {
	a, b := softPair(t)
	res, err := WriteBW(context.Background(), Config{Sender: a, Receiver: b, Size: 10000, Iters: 200, MTU: 1024, Depth: 8})
	if err != nil {
		t.Fatal(err)
	}
	if res.Posted != 200 || res.Messages+res.Lost != 200 || res.Messages == 0 {
		t.Fatalf("result %+v", res)
	}
	if res.Bytes != int64(res.Messages)*10000 || res.Packets != int64(res.Messages)*10 {
		t.Fatalf("byte/packet accounting %+v", res)
	}
	if s := b.Stats(); s.RxMessages != uint64(res.Messages) {
		t.Fatalf("NIC counted %d messages, perftest %d", s.RxMessages, res.Messages)
	}
}

func TestWriteBWValidation(t *testing.T) {
	a, b := softPair(t)
	for _, cfg := range []Config{
		{Sender: a, Receiver: b, Size: 0, Iters: 1},
		{Sender: a, Receiver: b, Size: 10, Iters: 0},
		{Sender: a, Receiver: b, Size: 10, Iters: 1, MTU: 100},
	} {
		if _, err := WriteBW(context.Background(), cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

// BenchmarkSoftNICvsUDP measures soft NIC → soft NIC UC WRITE bandwidth on
// loopback and, in the same run, bare batched UDP with the same datagram
// size, batch and window. Metric nic_vs_udp = NIC packets/s ÷ UDP packets/s
// (target ≥ 0.7).
func BenchmarkSoftNICvsUDP(b *testing.B) {
	for _, mtu := range []verbs.MTU{1024, 4096} {
		b.Run("mtu"+itoa(int(mtu)), func(b *testing.B) {
			const size = 64 << 10
			var udpRate float64
			b.Run("udp", func(b *testing.B) {
				b.ReportAllocs()
				n := b.N * size / int(mtu)
				b.SetBytes(int64(PacketLen(mtu)))
				b.ResetTimer()
				res, err := UDPBaseline(context.Background(), UDPConfig{Src: netip.MustParseAddr("127.12.0.4"), Dst: netip.MustParseAddr("127.12.0.5"),
					Datagram: PacketLen(mtu), Datagrams: max(n, 1), Burst: size / int(mtu), Window: 32 * size / int(mtu)})
				if err != nil {
					b.Fatal(err)
				}
				udpRate = res.PacketRate
				b.ReportMetric(res.PacketRate, "pkts/s")
				b.ReportMetric(res.Gbps, "Gbit/s")
			})
			b.Run("softnic", func(b *testing.B) {
				b.ReportAllocs()
				x, y := softPair(b)
				b.SetBytes(size)
				b.ResetTimer()
				res, err := WriteBW(context.Background(), Config{Sender: x, Receiver: y, Size: size, Iters: max(b.N*size/(64<<10), 1), MTU: mtu, Depth: 32})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(res.PacketRate, "pkts/s")
				b.ReportMetric(res.Gbps, "Gbit/s")
				b.ReportMetric(float64(res.Lost), "lost")
				if udpRate > 0 {
					b.ReportMetric(res.PacketRate/udpRate, "nic_vs_udp")
				}
			})
		})
	}
}

func itoa(n int) string {
	s := ""
	for n > 0 {
		s = string(rune('0'+n%10)) + s
		n /= 10
	}
	return s
}
