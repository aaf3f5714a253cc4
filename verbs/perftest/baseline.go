package perftest

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// UDPConfig is a bare batched-UDP run: the same datagram size, batch size
// and in-flight window as a soft-NIC WriteBW run, without any RoCEv2
// processing (no headers, no ICRC, no memory registration).
type UDPConfig struct {
	Src, Dst  netip.Addr
	Datagram  int // bytes per datagram
	Datagrams int // how many to send
	BatchSize int // datagrams per sendmmsg/recvmmsg (default udp.DefaultBatchSize)
	Window    int // datagrams in flight (default 32 × 64)
	Burst     int // datagrams per send call (a message's packets; default BatchSize)
	// Offload selects UDP GSO/GRO on both endpoints (udp.OffloadAuto: on
	// loopback when the kernel has them).
	Offload udp.Offload
}

// UDPBaseline sends cfg.Datagrams datagrams from Src to Dst and returns the
// delivered rate in the same units as WriteBW.
func UDPBaseline(ctx context.Context, cfg UDPConfig) (Result, error) {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = udp.DefaultBatchSize
	}
	if cfg.Window <= 0 {
		cfg.Window = 32 * 64
	}
	if cfg.Burst <= 0 {
		cfg.Burst = cfg.BatchSize
	}
	if cfg.Datagram <= 0 || cfg.Datagrams <= 0 {
		return Result{}, fmt.Errorf("perftest: UDP baseline needs a datagram size and count")
	}
	tx, err := udp.Listen(udp.Config{Addr: cfg.Src, BatchSize: cfg.BatchSize, Offload: cfg.Offload})
	if err != nil {
		return Result{}, err
	}
	defer tx.Close()
	rx, err := udp.Listen(udp.Config{Addr: cfg.Dst, BatchSize: cfg.BatchSize, Offload: cfg.Offload})
	if err != nil {
		return Result{}, err
	}
	var got atomic.Int64
	done := make(chan struct{})
	progress := make(chan struct{}, 1)
	go func() {
		defer close(done)
		msgs := make([]udp.Msg, cfg.BatchSize)
		for i := range msgs {
			msgs[i].Buf = make([]byte, cfg.Datagram+64)
		}
		for {
			n, err := rx.ReadBatch(msgs)
			if err != nil {
				return
			}
			got.Add(int64(n))
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	}()
	out := make([]udp.Msg, cfg.Burst)
	payload := make([]byte, cfg.Datagram)
	for i := range out {
		out[i] = udp.Msg{Buf: payload, N: cfg.Datagram, Addr: rx.LocalAddr()}
	}
	start := time.Now()
	sent := 0
	last := got.Load()
	lastChange := time.Now()
	for sent < cfg.Datagrams && ctx.Err() == nil {
		if int64(sent)-got.Load() >= int64(cfg.Window) {
			if g := got.Load(); g != last {
				last, lastChange = g, time.Now()
			} else if time.Since(lastChange) > 200*time.Millisecond {
				// Lost datagrams: give up on them, as WriteBW does.
				got.Store(int64(sent))
				last = int64(sent)
			}
			select {
			case <-progress:
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		k := min(cfg.Burst, cfg.Datagrams-sent)
		if _, err := tx.WriteBatch(out[:k]); err != nil {
			return Result{}, err
		}
		sent += k
	}
	deadline := time.Now().Add(200 * time.Millisecond)
	for rx.Stats().RxPackets < uint64(sent) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Microsecond)
	}
	delivered := int64(rx.Stats().RxPackets)
	elapsed := time.Since(start)
	rx.Close()
	<-done
	sec := elapsed.Seconds()
	return Result{
		Bytes: delivered * int64(cfg.Datagram), Messages: int(delivered), Posted: sent, Lost: sent - int(delivered),
		Packets: delivered, Elapsed: elapsed,
		Gbps: float64(delivered*int64(cfg.Datagram)) * 8 / sec / 1e9, PacketRate: float64(delivered) / sec, MsgRate: float64(delivered) / sec,
		Size: cfg.Datagram,
	}, nil
}
