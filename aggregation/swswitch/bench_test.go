package swswitch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// benchClient is one load generator: a udp.Conn at a worker address with a
// reader goroutine that counts what comes back.
type benchClient struct {
	conn  *udp.Conn
	got   atomic.Int64
	wake  chan struct{}
	wg    sync.WaitGroup
	reqs  [2][]udp.Msg // per set, to the switch
	echos []udp.Msg    // to the reflector
}

// BenchmarkSwitchVsReflector measures, side by side in one run, the
// packets/s of the software switch and of a bare batched UDP reflector
// (udp.Conn, recvmmsg → sendmmsg of the same batch back to the senders) on
// loopback. Four clients each send a window of 64 packets with 1 KiB
// payloads per round and wait for as many packets back; every iteration runs
// one round against the reflector and one against the switch (a 4-worker
// job: 3 of 4 requests are absorbed, the 4th returns 4 results, so packets
// in = packets out for both). Same sockets package, same batch size, same
// UDP offload: "off" is plain recvmmsg/sendmmsg everywhere, "gso" UDP
// GSO/GRO everywhere (clients, reflector and switch).
func BenchmarkSwitchVsReflector(b *testing.B) {
	for _, off := range []udp.Offload{udp.OffloadOff, udp.OffloadOn} {
		name := "off"
		if off == udp.OffloadOn {
			name = "gso"
		}
		b.Run(name, func(b *testing.B) { benchSwitchVsReflector(b, off) })
	}
}

func benchSwitchVsReflector(b *testing.B, off udp.Offload) {
	const (
		net     = 250
		clients = 4
		window  = 64
		payload = 1024
		batch   = udp.DefaultBatchSize
	)
	// One QP per worker: one core is all the job can use (docs/switch.md,
	// "Cores"); BenchmarkSwitchCores measures more.
	sw, err := New(Config{Addr: addr(net, 1), Cores: 1, BatchSize: batch, Model: switchmodel.Config{PoolSize: window, MaxPayload: payload}, Offload: off})
	if errors.Is(err, verbs.ErrNotSupported) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer sw.Close()
	refl, err := udp.Listen(udp.Config{Addr: addr(net, 100), BatchSize: batch, Offload: off})
	if err != nil {
		b.Fatal(err)
	}
	defer refl.Close()
	reflDone := make(chan struct{})
	go func() {
		defer close(reflDone)
		in := make([]udp.Msg, batch)
		for i := range in {
			in[i] = udp.Msg{Buf: make([]byte, 8192), Off: rdma.ICRCHeadroom}
		}
		for {
			n, err := refl.ReadBatch(in)
			if err != nil {
				return
			}
			if _, err := refl.WriteBatch(in[:n]); err != nil {
				return
			}
		}
	}()
	defer func() { refl.Close(); <-reflDone }()

	job := makeJob(1, net, clients, 1, 0, window, payload)
	if err := sw.AddJob(context.Background(), job); err != nil {
		b.Fatal(err)
	}
	cs := make([]*benchClient, clients)
	for r := range cs {
		c, err := udp.Listen(udp.Config{Addr: job.Workers[r].Addr, BatchSize: batch, Offload: off})
		if err != nil {
			b.Fatal(err)
		}
		bc := &benchClient{conn: c, wake: make(chan struct{}, 1)}
		for set := range 2 {
			for k := range window {
				bc.reqs[set] = append(bc.reqs[set], benchRequest(b, job, r, uint32(k), uint8(set), sw.Addr()))
			}
		}
		for k := range window {
			m := bc.reqs[0][k]
			m.Addr = refl.LocalAddr()
			bc.echos = append(bc.echos, m)
		}
		bc.wg.Add(1)
		go func() {
			defer bc.wg.Done()
			in := make([]udp.Msg, batch)
			for i := range in {
				in[i] = udp.Msg{Buf: make([]byte, 8192), Off: rdma.ICRCHeadroom}
			}
			for {
				n, err := c.ReadBatch(in)
				if err != nil {
					return
				}
				bc.got.Add(int64(n))
				select {
				case bc.wake <- struct{}{}:
				default:
				}
			}
		}()
		cs[r] = bc
	}
	defer func() {
		for _, c := range cs {
			c.conn.Close()
			c.wg.Wait()
		}
	}()

	var lost int64
	round := func(msgs func(c *benchClient) []udp.Msg) time.Duration {
		start := time.Now()
		for _, c := range cs {
			c.got.Store(0)
		}
		for _, c := range cs {
			if _, err := c.conn.WriteBatch(msgs(c)); err != nil {
				b.Fatal(err)
			}
		}
		deadline := time.NewTimer(200 * time.Millisecond)
		defer deadline.Stop()
		for _, c := range cs {
			for c.got.Load() < window {
				select {
				case <-c.wake:
				case <-deadline.C:
					lost += window - c.got.Load()
					return time.Since(start)
				}
			}
		}
		return time.Since(start)
	}
	var tRefl, tSw time.Duration
	seals := make([]rdma.FlowICRC, clients)
	for r := range seals {
		seals[r].Reset(&rdma.Flow{Src: job.Workers[r].Addr, Dst: sw.Addr().Addr(), SrcPort: rdma.UDPPort, DstPort: sw.Addr().Port(), DF: true})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tRefl += round(func(c *benchClient) []udp.Msg { return c.echos })
		b.StopTimer()
		for r, c := range cs {
			restamp(b, c.reqs[i&1], uint32(i*window), &seals[r])
		}
		b.StartTimer()
		tSw += round(func(c *benchClient) []udp.Msg { return c.reqs[i&1] })
	}
	b.StopTimer()
	pkts := float64(b.N * clients * window)
	b.ReportMetric(pkts/tRefl.Seconds(), "reflector-pkt/s")
	b.ReportMetric(pkts/tSw.Seconds(), "switch-pkt/s")
	b.ReportMetric(tRefl.Seconds()/tSw.Seconds(), "switch/reflector")
	if lost > 0 {
		b.Logf("%d packets did not come back within 200 ms", lost)
	}
	if st := sw.Stats(); st.Model.Drops != [switchmodel.NumDropReasons]uint64{} {
		b.Logf("switch drops: %v", st.Model.Drops)
	}
}

func benchRequest(b *testing.B, job *wire.Job, r int, slot uint32, set uint8, sw netip.AddrPort) udp.Msg {
	op := rdma.UCRDMAWriteOnlyWithImm
	f := rdma.PacketFields{
		BTH:  rdma.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: job.Workers[r].SwitchQPNs[0], PSN: slot},
		RETH: rdma.RETHFields{VA: uint64(slot) * uint64(job.PacketSize), RKey: uint32(wire.MakePoolIndex(slot, set)), DMALen: uint32(job.PacketSize)},
		Imm:  uint32(wire.MakeImm(uint16(slot), 1, 0)),
	}
	n := rdma.PacketLen(op, job.PacketSize)
	buf := make([]byte, rdma.ICRCHeadroom+n)
	off, err := f.Encode(buf[rdma.ICRCHeadroom:], job.PacketSize)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < job.PacketSize; i += 4 {
		binary.BigEndian.PutUint32(buf[rdma.ICRCHeadroom+off+i:], uint32(r+i))
	}
	var h rdma.ICRC
	fl := rdma.Flow{Src: job.Workers[r].Addr, Dst: sw.Addr(), SrcPort: rdma.UDPPort, DstPort: sw.Port(), DF: true}
	if err := h.SealHeadroom(&fl, buf, rdma.ICRCHeadroom); err != nil {
		b.Fatal(err)
	}
	return udp.Msg{Buf: buf, Off: rdma.ICRCHeadroom, N: n, Addr: sw}
}

// restamp gives the requests msgs consecutive PSNs from psn and seals them
// again: the switch drops a request older than one it has seen on its QP
// (switchmodel.DropStalePSN), so a benchmark that sends the same requests
// round after round must number them on.
func restamp(b *testing.B, msgs []udp.Msg, psn uint32, seal *rdma.FlowICRC) {
	for k := range msgs {
		pkt := msgs[k].Bytes()
		rdma.BTH(pkt).SetPSN((psn + uint32(k)) & rdma.PSNMask)
		if err := seal.Seal(pkt); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSwitchCores measures the switch's packets/s on loopback with 1
// and 2 cores (Config.Cores): 4 clients (workers) with 4 QPs each send a
// window of 64 one-packet messages of 1 KiB per round, spread over the
// QPs, with UDP GSO/GRO, and wait for their 64 results. Run it with
// -count 3 or more: the sub-benchmarks alternate.
func BenchmarkSwitchCores(b *testing.B) {
	for _, cores := range []int{1, 2} {
		b.Run(fmt.Sprintf("cores=%d", cores), func(b *testing.B) { benchSwitchCores(b, cores) })
	}
}

func benchSwitchCores(b *testing.B, cores int) {
	const (
		net     = 251
		clients = 4
		qps     = 4
		window  = 64
		payload = 1024
		batch   = udp.DefaultBatchSize
	)
	sw, err := New(Config{Addr: addr(net, 1), Cores: cores, BatchSize: batch, Model: switchmodel.Config{PoolSize: window, MaxPayload: payload}, Offload: udp.OffloadOn})
	if errors.Is(err, verbs.ErrNotSupported) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer sw.Close()
	job := makeJob(1, net, clients, qps, 0, window, payload)
	if err := sw.AddJob(context.Background(), job); err != nil {
		b.Fatal(err)
	}
	cs := make([]*benchClient, clients)
	seals := make([]rdma.FlowICRC, clients)
	for r := range cs {
		c, err := udp.Listen(udp.Config{Addr: job.Workers[r].Addr, BatchSize: batch, Offload: udp.OffloadOn})
		if err != nil {
			b.Fatal(err)
		}
		seals[r].Reset(&rdma.Flow{Src: job.Workers[r].Addr, Dst: sw.Addr().Addr(), SrcPort: rdma.UDPPort, DstPort: sw.Addr().Port(), DF: true})
		bc := &benchClient{conn: c, wake: make(chan struct{}, 1)}
		for set := range 2 {
			for k := range window {
				// Slot k is QP k mod qps's: every worker's QP i writes the
				// same slots, as in docs/protocol.md.
				m := benchRequest(b, job, r, uint32(k), uint8(set), sw.Addr())
				rdma.BTH(m.Bytes()).SetDestQP(job.Workers[r].SwitchQPNs[k%qps])
				bc.reqs[set] = append(bc.reqs[set], m)
			}
		}
		bc.wg.Add(1)
		go func() {
			defer bc.wg.Done()
			in := make([]udp.Msg, batch)
			for i := range in {
				in[i] = udp.Msg{Buf: make([]byte, 8192), Off: rdma.ICRCHeadroom}
			}
			for {
				n, err := c.ReadBatch(in)
				if err != nil {
					return
				}
				bc.got.Add(int64(n))
				select {
				case bc.wake <- struct{}{}:
				default:
				}
			}
		}()
		cs[r] = bc
	}
	defer func() {
		for _, c := range cs {
			c.conn.Close()
			c.wg.Wait()
		}
	}()
	var lost int64
	var total time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for r, c := range cs {
			// Each QP numbers its own packets: window/qps per round.
			for k := range c.reqs[i&1] {
				m := c.reqs[i&1][k]
				rdma.BTH(m.Bytes()).SetPSN(uint32(i*window/qps+k/qps) & rdma.PSNMask)
				if err := seals[r].Seal(m.Bytes()); err != nil {
					b.Fatal(err)
				}
			}
			c.got.Store(0)
		}
		b.StartTimer()
		start := time.Now()
		for _, c := range cs {
			if _, err := c.conn.WriteBatch(c.reqs[i&1]); err != nil {
				b.Fatal(err)
			}
		}
		deadline := time.NewTimer(200 * time.Millisecond)
	wait:
		for _, c := range cs {
			for c.got.Load() < window {
				select {
				case <-c.wake:
				case <-deadline.C:
					lost += window - c.got.Load()
					break wait
				}
			}
		}
		deadline.Stop()
		total += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*clients*window)/total.Seconds(), "switch-pkt/s")
	if lost > 0 {
		b.Errorf("%d packets did not come back within 200 ms", lost)
	}
	st := sw.Stats()
	if st.Model.Drops != [switchmodel.NumDropReasons]uint64{} {
		b.Errorf("switch drops: %v", st.Model.Drops)
	}
	b.Logf("per core: %v requests", st.CorePackets)
}
