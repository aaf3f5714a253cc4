package benchmark

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// TestEmbedded runs the bench's job: SwitchML then the ring among three
// workers, loss-free and with 2 % loss per hop, every result verified.
// Under loss both recover (retransmissions, switch drops counted).
// Addresses: 127.14.2.x.
func TestEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, loss := range []float64{0, 0.02} {
		res, err := Embedded(ctx, EmbeddedConfig{Workers: 3, SwitchAddr: netip.MustParseAddr("127.14.2.1"), Loss: loss,
			Session:  aggregation.Config{QPs: 2, PacketSize: 256, PacketsPerMessage: 4, DType: wire.Float32, RetransmitTimeout: 5 * time.Millisecond},
			Elements: 20000, Warmup: 1, Iters: 2, Ring: true})
		if err != nil {
			t.Fatalf("loss %g: %v", loss, err)
		}
		if res.SwitchML.Median <= 0 || res.Ring == nil || res.Ring.Median <= 0 || res.Packets == 0 || res.Ring.Packets == 0 || res.Ring.WindowMessages < 1 {
			t.Fatalf("loss %g: %+v, ring %+v", loss, res, res.Ring)
		}
		drops := res.SwitchDrops["ingress_loss"] + res.SwitchDrops["egress_loss"]
		if loss == 0 && drops != 0 {
			t.Fatalf("loss-free: %d drops at the switch", drops)
		}
		if loss > 0 && (drops == 0 || res.Retransmissions == 0 || res.Ring.Retransmissions == 0) {
			t.Fatalf("loss %g: %d switch drops, %d SwitchML and %d ring retransmissions: loss not exercised", loss, drops, res.Retransmissions, res.Ring.Retransmissions)
		}
	}
	if _, err := Embedded(ctx, EmbeddedConfig{Workers: 1, Ring: true, Elements: 1, Iters: 1}); err == nil {
		t.Fatal("a ring of one worker was accepted")
	}
}

// TestEmbeddedLinked runs the bench's job over in-memory links (Link): a
// star, each worker behind its own port. SwitchML's packets cross only
// the worker–switch links (an uplink and a downlink per worker), the
// ring's only worker-to-worker links (to the successor, and its
// acknowledgements back): two per worker each, every packet of either
// counted on them. Loss is the links' (the switch's drop simulator stays
// off); the ring's window fits the port buffer, so no queue drops.
func TestEmbeddedLinked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const workers = 3
	for _, loss := range []float64{0, 0.02} {
		res, err := Embedded(ctx, EmbeddedConfig{Workers: workers, Loss: loss, Link: Link{Rate: 100e6},
			Session:  aggregation.Config{QPs: 2, PacketSize: 256, PacketsPerMessage: 4, DType: wire.Float32, RetransmitTimeout: 5 * time.Millisecond},
			Elements: 20000, Warmup: 1, Iters: 2, Ring: true})
		if err != nil {
			t.Fatalf("loss %g: %v", loss, err)
		}
		sw, rg := res.Links, res.Ring.Links
		if sw.Links != 2*workers || rg.Links != 2*workers {
			t.Fatalf("loss %g: SwitchML used %d links, the ring %d; want %d each", loss, sw.Links, rg.Links, 2*workers)
		}
		// The links carry what the workers sent and the switch's results;
		// the ring's everything its ranks sent.
		if sw.Packets <= res.Packets || rg.Packets != res.Ring.Packets {
			t.Fatalf("loss %g: links carried %d SwitchML packets (workers sent %d) and %d ring packets (ranks sent %d)", loss, sw.Packets, res.Packets, rg.Packets, res.Ring.Packets)
		}
		if sw.Queue != 0 || rg.Queue != 0 || sw.Overflow != 0 || rg.Overflow != 0 {
			t.Fatalf("loss %g: queue drops %d/%d, receive-queue drops %d/%d", loss, sw.Queue, rg.Queue, sw.Overflow, rg.Overflow)
		}
		if d := res.SwitchDrops["ingress_loss"] + res.SwitchDrops["egress_loss"]; d != 0 {
			t.Fatalf("loss %g: the switch's drop simulator dropped %d over links", loss, d)
		}
		if loss == 0 && (sw.Lost != 0 || rg.Lost != 0) {
			t.Fatalf("loss-free links lost %d and %d packets", sw.Lost, rg.Lost)
		}
		if loss > 0 && (sw.Lost == 0 || rg.Lost == 0 || res.Retransmissions == 0 || res.Ring.Retransmissions == 0) {
			t.Fatalf("loss %g: links lost %d and %d, %d SwitchML and %d ring retransmissions: loss not exercised", loss, sw.Lost, rg.Lost, res.Retransmissions, res.Ring.Retransmissions)
		}
	}
}

// TestLinkQueuePackets: the port buffer in full packets of the job's size
// (frame: Ethernet, IPv4, UDP, BTH, payload, ICRC).
func TestLinkQueuePackets(t *testing.T) {
	for _, tc := range []struct {
		link       Link
		packetSize int
		want       int
	}{
		{Link{}, 1024, (512 << 10) / (42 + 12 + 1024 + 4)},
		{Link{}, 256, (512 << 10) / (42 + 12 + 256 + 4)},
		{Link{Buffer: 100}, 4096, 1},
	} {
		if got := tc.link.queuePackets(tc.packetSize); got != tc.want {
			t.Errorf("%+v, packet %d: %d packets, want %d", tc.link, tc.packetSize, got, tc.want)
		}
	}
}
