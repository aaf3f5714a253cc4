package aggregation

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/verbstest"
)

// wedgingDevice is a device that reports rxe's UC responder behaviour.
type wedgingDevice struct {
	verbs.Device
	wedges bool
}

func (d wedgingDevice) UCTruncatedWriteWedges() bool { return d.wedges }

func TestMultiPacketMessagesRefusedOnRxe(t *testing.T) {
	n := verbstest.NewNetwork()
	defer n.Close()
	dev, err := n.NewDevice(addr4(10, 9, 0, 2))
	if err != nil {
		t.Fatal(err)
	}
	rxe := wedgingDevice{Device: dev, wedges: true}
	_, err = Open(context.Background(), Config{Device: rxe, Workers: 1, PacketSize: 1024, PacketsPerMessage: 4})
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("Open with 4-packet messages on an rxe-like device: %v, want ErrConfig", err)
	}
	for _, want := range []string{"rdma_rxe", "4-packet messages", "--writes packet", "--msg-size 1024"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// The rule only applies where it must: one-packet messages or packet
	// writes on rxe, and any message size on a device that follows the
	// IBA rules.
	for _, tc := range []struct {
		dev    verbs.Device
		ppm    int
		writes Writes
	}{{rxe, 1, AdaptiveWrites}, {rxe, 16, PacketWrites}, {wedgingDevice{Device: dev}, 16, MessageWrites}, {dev, 16, AdaptiveWrites}} {
		if err := checkUCTruncation(tc.dev, &Config{PacketsPerMessage: tc.ppm, PacketSize: 1024, Writes: tc.writes}); err != nil {
			t.Errorf("%#v, %d packets per message, %v writes: %v", tc.dev, tc.ppm, tc.writes, err)
		}
	}
	for _, w := range []Writes{AdaptiveWrites, MessageWrites} {
		if err := checkUCTruncation(rxe, &Config{PacketsPerMessage: 16, PacketSize: 1024, Writes: w}); !errors.Is(err, ErrConfig) {
			t.Errorf("rxe, 16 packets per message, %v writes: %v, want ErrConfig", w, err)
		}
	}
}
