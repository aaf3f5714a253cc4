package perftest

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
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
// size, batch and window, each with plain sendmmsg/recvmmsg ("off") and
// with UDP GSO/GRO ("gso"). Metric nic_vs_udp = NIC packets/s ÷ plain UDP
// packets/s of the same run (target ≥ 0.7); nic_vs_udp_gso divides by the
// GSO/GRO UDP baseline instead.
func BenchmarkSoftNICvsUDP(b *testing.B) {
	for _, mtu := range []verbs.MTU{1024, 4096} {
		b.Run("mtu"+itoa(int(mtu)), func(b *testing.B) {
			const size = 64 << 10
			rates := map[udp.Offload]float64{}
			for _, off := range []udp.Offload{udp.OffloadOff, udp.OffloadOn} {
				b.Run("udp-"+offName(off), func(b *testing.B) {
					b.ReportAllocs()
					n := b.N * size / int(mtu)
					b.SetBytes(int64(PacketLen(mtu)))
					b.ResetTimer()
					res, err := UDPBaseline(context.Background(), UDPConfig{Src: netip.MustParseAddr("127.12.0.4"), Dst: netip.MustParseAddr("127.12.0.5"),
						Datagram: PacketLen(mtu), Datagrams: max(n, 1), Burst: size / int(mtu), Window: 32 * size / int(mtu), Offload: off})
					if errors.Is(err, verbs.ErrNotSupported) {
						b.Skip(err)
					}
					if err != nil {
						b.Fatal(err)
					}
					rates[off] = res.PacketRate
					b.ReportMetric(res.PacketRate, "pkts/s")
					b.ReportMetric(res.Gbps, "Gbit/s")
				})
			}
			for _, off := range []udp.Offload{udp.OffloadOff, udp.OffloadOn} {
				b.Run("softnic-"+offName(off), func(b *testing.B) {
					b.ReportAllocs()
					x, y := softPairOffload(b, off)
					b.SetBytes(size)
					b.ResetTimer()
					res, err := WriteBW(context.Background(), Config{Sender: x, Receiver: y, Size: size, Iters: max(b.N*size/(64<<10), 1), MTU: mtu, Depth: 32})
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(res.PacketRate, "pkts/s")
					b.ReportMetric(res.Gbps, "Gbit/s")
					b.ReportMetric(float64(res.Lost), "lost")
					if r := rates[udp.OffloadOff]; r > 0 {
						b.ReportMetric(res.PacketRate/r, "nic_vs_udp")
					}
					if r := rates[udp.OffloadOn]; r > 0 {
						b.ReportMetric(res.PacketRate/r, "nic_vs_udp_gso")
					}
				})
			}
		})
	}
}

func offName(o udp.Offload) string {
	if o == udp.OffloadOff {
		return "off"
	}
	return "gso"
}

// softPairOffload is softPair with the NICs' UDP offload mode set.
func softPairOffload(t testing.TB, off udp.Offload) (*soft.Device, *soft.Device) {
	t.Helper()
	a, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.12.0.2"), Offload: off})
	if errors.Is(err, verbs.ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.12.0.3"), Offload: off})
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func itoa(n int) string {
	s := ""
	for n > 0 {
		s = string(rune('0'+n%10)) + s
		n /= 10
	}
	return s
}
