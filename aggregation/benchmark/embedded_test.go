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
