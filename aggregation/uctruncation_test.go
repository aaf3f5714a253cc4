package aggregation

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/verbstest"
)

// wedgingDevice is a device that reports rxe's UC responder behaviour.
type wedgingDevice struct {
	verbs.Device
	wedges bool
}

func (d wedgingDevice) UCTruncatedWriteWedges() bool { return d.wedges }

// TestCheckUCTruncation: a NIC that wedges on a truncated multi-packet
// WRITE needs packet writes for multi-packet messages; message writes
// chosen explicitly, and multi-packet messages without per-packet recovery,
// are refused on it; other NICs and one-packet messages need nothing.
func TestCheckUCTruncation(t *testing.T) {
	n := verbstest.NewNetwork()
	defer n.Close()
	dev, err := n.NewDevice(addr4(10, 9, 0, 2))
	if err != nil {
		t.Fatal(err)
	}
	rxe := wedgingDevice{Device: dev, wedges: true}
	tests := []struct {
		name      string
		dev       verbs.Device
		cfg       Config
		want      bool
		wantField string // the FieldError's field; "" for no error
	}{
		{"rxe, one packet per message", rxe, Config{PacketsPerMessage: 1}, false, ""},
		{"rxe, auto writes", rxe, Config{PacketsPerMessage: 16}, true, ""},
		{"rxe, packet writes", rxe, Config{PacketsPerMessage: 16, Writes: PacketWrites}, true, ""},
		{"rxe, message writes", rxe, Config{PacketsPerMessage: 16, Writes: MessageWrites}, false, "Writes"},
		{"rxe, whole-message resends", rxe, Config{PacketsPerMessage: 16, WholeMessageResend: true}, false, "WholeMessageResend"},
		{"rxe, 128 packets per message", rxe, Config{PacketsPerMessage: 128}, false, "PacketsPerMessage"},
		{"not wedging, message writes", wedgingDevice{Device: dev}, Config{PacketsPerMessage: 16, Writes: MessageWrites}, false, ""},
		{"no UCTruncation", dev, Config{PacketsPerMessage: 16}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.PacketSize = 1024
			got, err := checkUCTruncation(tt.dev, &tt.cfg)
			var fe *FieldError
			switch {
			case tt.wantField == "" && err != nil:
				t.Fatalf("err = %v", err)
			case tt.wantField != "" && (!errors.As(err, &fe) || fe.Field != tt.wantField):
				t.Fatalf("err = %v, want a FieldError on %s", err, tt.wantField)
			case got != tt.want:
				t.Fatalf("needs packet writes = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestMessageWritesRefusedOnRxe: Open refuses explicit message writes on a
// wedging NIC before it registers, with an error that names the field, not
// a command-line flag.
func TestMessageWritesRefusedOnRxe(t *testing.T) {
	n := verbstest.NewNetwork()
	defer n.Close()
	dev, err := n.NewDevice(addr4(10, 9, 0, 2))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), Config{Device: wedgingDevice{Device: dev, wedges: true}, Workers: 1, PacketSize: 1024, PacketsPerMessage: 4, Writes: MessageWrites})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "Writes" || !errors.Is(err, ErrConfig) {
		t.Fatalf("Open with message writes on an rxe-like device: %v, want a FieldError on Writes", err)
	}
	if strings.Contains(err.Error(), "--") {
		t.Errorf("library error names a flag: %v", err)
	}
}

// TestAgreeWrites: the controller's answer decides the job's writes: packet
// writes when some worker needs them, for every worker that can send them.
func TestAgreeWrites(t *testing.T) {
	n := verbstest.NewNetwork()
	defer n.Close()
	dev, err := n.NewDevice(addr4(10, 9, 0, 2))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		cfg        Config
		needs      bool // this worker needs packet writes
		job        bool // the answer's PacketWrites
		wantWrites Writes
		wantErr    bool
	}{
		{"job sends packet writes", Config{PacketsPerMessage: 16}, false, true, PacketWrites, false},
		{"job sends packet writes, one-packet messages", Config{PacketsPerMessage: 1}, false, true, AdaptiveWrites, false},
		{"job as configured", Config{PacketsPerMessage: 16}, false, false, AdaptiveWrites, false},
		{"message writes in a packet-write job", Config{PacketsPerMessage: 16, Writes: MessageWrites}, false, true, MessageWrites, true},
		{"whole-message resends in a packet-write job", Config{PacketsPerMessage: 16, WholeMessageResend: true}, false, true, AdaptiveWrites, true},
		{"needed but not granted", Config{PacketsPerMessage: 16}, true, false, AdaptiveWrites, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := agreeWrites(dev, &tt.cfg, &control.Assignment{JobID: 3, PacketWrites: tt.job}, tt.needs)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want an error: %v", err, tt.wantErr)
			}
			if tt.cfg.Writes != tt.wantWrites {
				t.Errorf("Writes = %v, want %v", tt.cfg.Writes, tt.wantWrites)
			}
		})
	}
}

// TestMixedJobWithWedgingNIC: a job of one worker whose NIC wedges on a
// truncated multi-packet WRITE (rank 0, rxe-like) and three whose NICs do
// not, all with the default Writes, sends packet writes only, on every
// worker from the first call (the switch sees no multi-packet request, so
// it sends no multi-packet result), and gets the same sums, bit for bit,
// as a job of message writes.
func TestMixedJobWithWedgingNIC(t *testing.T) {
	t.Parallel()
	b := newLossBench(t, 44, 13, 256*16*5)
	c, cfg := b.c, b.cfg
	var multi atomic.Int64
	c.setLoss(func(rank, qp, k, pkts int) bool {
		if pkts > 1 {
			multi.Add(1)
		}
		return false
	}, nil)
	defer c.setLoss(nil, nil)

	cfg.SessionID = 45
	newDev := c.device(10)
	j := openJob(t, c.ctlAddr, lossBenchWorkers, cfg, func(r int) (verbs.Device, error) {
		d, err := newDev(r)
		if err != nil || r != 0 {
			return d, err
		}
		return wedgingDevice{Device: d, wedges: true}, nil
	})
	const calls = 2
	b.check(t, j, calls, "mixed job with a wedging NIC")
	if m := multi.Load(); m != 0 {
		t.Errorf("the switch saw %d multi-packet requests", m)
	}
	for r, w := range j.workers {
		if st := w.sess.Stats(); st.PacketWriteCalls != calls {
			t.Errorf("rank %d: %d of %d calls sent packet writes", r, st.PacketWriteCalls, calls)
		}
	}
}
