package main

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/local"
	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// startSwitch runs the software switch at swAddr (UDP on loopback) and a
// controller for it on a free TCP port (aggregation/local); with only32 the
// switch sums 32-bit lanes only, as a 32-bit Tofino profile does, and
// refuses 16-bit jobs. It returns the controller's address.
func startSwitch(t *testing.T, swAddr netip.Addr, only32 bool) string {
	t.Helper()
	lane := 0
	if only32 {
		lane = 4
	}
	cl, err := local.Start(context.Background(), local.Config{Switch: swswitch.Config{Addr: swAddr}, LaneBytes: lane,
		Controller: control.Config{SessionTimeout: 20 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl.ControllerAddr
}

// openRanks runs open for ranks 0 … n-1 of a job at ctl at once (NICs at
// net.2, net.3, …) and returns their session ids or errors.
func openRanks(ctl string, net [3]byte, session int64, n int) ([]int64, []error) {
	ids, errs := make([]int64, n), make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			addr := netip.AddrFrom4([4]byte{net[0], net[1], net[2], byte(2 + r)})
			ids[r], errs[r] = open(openArgs{controller: ctl, sessionID: session, rank: r, workers: n, addr: addr.String(), timeout: 30 * time.Second})
		})
	}
	wg.Wait()
	return ids, errs
}

// TestWire16Fallback: libswml's choice of wire (docs/pytorch.md "Which
// wire a dtype uses"). With SWML_WIRE unset, bfloat16 goes on the 16-bit
// wire of a switch that has one; a switch without one refuses the 16-bit
// session on every rank alike, and every rank sends bfloat16 through the
// float32 session instead, with the same exact sums. SWML_WIRE=16 then
// fails the open, saying what to set; SWML_WIRE=32 never asks.
func TestWire16Fallback(t *testing.T) {
	t.Setenv("SWML_CONNECT_TIMEOUT", "")
	for _, tc := range []struct {
		name    string
		only32  bool
		env     string
		net     [3]byte
		want16  int // wire of bfloat16 on a session that opened
		wantErr string
	}{
		{"16-bit switch, auto", false, "", [3]byte{127, 15, 1}, 16, ""},
		{"32-bit switch, auto", true, "", [3]byte{127, 15, 2}, 32, ""},
		{"32-bit switch, 16", true, "16", [3]byte{127, 15, 3}, 0, "set SWML_WIRE=auto"},
		{"16-bit switch, 32", false, "32", [3]byte{127, 15, 4}, 32, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SWML_WIRE", tc.env)
			ctl := startSwitch(t, netip.AddrFrom4([4]byte{tc.net[0], tc.net[1], tc.net[2], 1}), tc.only32)
			const n = 2
			ids, errs := openRanks(ctl, tc.net, 7, n)
			if tc.wantErr != "" {
				for r, err := range errs {
					if !errors.Is(err, wire.ErrElementWidth) || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("rank %d: open: %v, want wire.ErrElementWidth and %q", r, err, tc.wantErr)
					}
				}
				return
			}
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: open: %v", r, err)
				}
			}
			defer func() {
				for _, id := range ids {
					if err := closeSession(id, ""); err != nil {
						t.Error(err)
					}
				}
			}()
			for r, id := range ids {
				if w, err := wireBits(id, dtypeBFloat16); err != nil || w != tc.want16 {
					t.Fatalf("rank %d: bfloat16 on the %d-bit wire (%v), want %d", r, w, err, tc.want16)
				}
				if w, err := wireBits(id, dtypeFloat32); err != nil || w != 32 {
					t.Fatalf("rank %d: float32 on the %d-bit wire (%v), want 32", r, w, err)
				}
			}
			// bfloat16 ones: world_size exactly, on whichever wire.
			const l = 5000
			bufs := make([][]uint16, n)
			hs := make([]int64, n)
			for r, id := range ids {
				bufs[r] = make([]uint16, l)
				for k := range bufs[r] {
					bufs[r][k] = quant.BFloat16.FromFloat32(1)
				}
				h, err := allReduceAsync(id, unsafe.Pointer(&bufs[r][0]), l, dtypeBFloat16)
				if err != nil {
					t.Fatal(err)
				}
				hs[r] = h
			}
			for r, h := range hs {
				if done, err := wait(h, 60); !done || err != nil {
					t.Fatalf("rank %d: wait: done %v, %v", r, done, err)
				}
				for k, v := range bufs[r] {
					if got := quant.BFloat16.ToFloat32(v); got != n {
						t.Fatalf("rank %d element %d: %v, want %d", r, k, got, n)
					}
				}
			}
		})
	}
}
