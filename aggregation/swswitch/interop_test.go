package swswitch

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// p4app-switchML's RDMA worker, as docs/interop.md describes it (client_lib
// rdma_connection.cc, rdma_worker_thread.cc, cpu_exponent_quantizer_ppp.cc).
const (
	p4appPacketNumel = 256  // general.cfg packet_numel: 1024-byte packets (IBV_MTU_1024)
	p4appMsgNumel    = 1024 // rdma.cfg msg_numel: 4096-byte messages, 4 packets
	p4appPPM         = p4appMsgNumel / p4appPacketNumel
	p4appBufferVA    = uint64(1) << 44 // AllocateAtAddress((void*)(1L << 44), …)
	p4appPacketBytes = p4appPacketNumel * 4
	p4appMsgBytes    = p4appMsgNumel * 4
)

// p4appImm is the immediate a p4app worker posts: imm_data is the host-order
// uint32 msg_id & 0xFFFF with the int8 exponent stored at byte 2 of it, in a
// field the NIC sends as is (ibverbs' imm_data is already "network order").
// On a little-endian host the wire bytes are msg_id low, msg_id high,
// exponent, 0.
func p4appImm(msgID uint16, exp int8) uint32 {
	var b [4]byte
	binary.LittleEndian.PutUint16(b[:], msgID)
	b[2] = byte(exp)
	return binary.BigEndian.Uint32(b[:])
}

// p4appMessage builds the datagrams of one p4app WRITE WITH IMM message on
// QP i: va = the absolute address of the QP's slice of its hugepage buffer,
// rkey = pool index (i·ppm·2 | set, from 0 whatever the controller said),
// PSNs from QPN/2 (its sq_psn), payload big-endian (htonl).
func (w *testWorker) p4appMessage(i int, set uint8, msgID uint16, exp int8, psn uint32, vals func(k, e int) int32) []udp.Msg {
	me := w.job.Workers[w.rank]
	msgs := make([]udp.Msg, p4appPPM)
	var icrc rdma.ICRC
	for k := range p4appPPM {
		first, last := k == 0, k == p4appPPM-1
		op := rdma.WriteOpcode(rdma.TransportUC, first, last, true)
		f := rdma.PacketFields{
			BTH: rdma.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: me.SwitchQPNs[i], PSN: (psn + uint32(k)) & rdma.PSNMask},
			RETH: rdma.RETHFields{VA: p4appBufferVA + uint64(i*p4appMsgBytes),
				RKey: uint32(i*p4appPPM*2) | uint32(set), DMALen: p4appMsgBytes},
			Imm: p4appImm(msgID, exp),
		}
		n := rdma.PacketLen(op, p4appPacketBytes)
		buf := make([]byte, rdma.ICRCHeadroom+n)
		off, err := f.Encode(buf[rdma.ICRCHeadroom:], p4appPacketBytes)
		if err != nil {
			w.t.Fatal(err)
		}
		pl := buf[rdma.ICRCHeadroom+off:]
		for e := range p4appPacketNumel {
			binary.BigEndian.PutUint32(pl[4*e:], uint32(vals(k, e)))
		}
		fl := rdma.Flow{Src: me.Addr, Dst: w.sw.Addr(), SrcPort: rdma.UDPPort, DstPort: w.sw.Port(), DF: true}
		if err := icrc.SealHeadroom(&fl, buf, rdma.ICRCHeadroom); err != nil {
			w.t.Fatal(err)
		}
		msgs[k] = udp.Msg{Buf: buf, Off: rdma.ICRCHeadroom, N: n, Addr: w.sw}
	}
	return msgs
}

// TestP4AppSessionReplay replays what p4app-switchML's RDMA worker does,
// gRPC calls in its order and packets in its layout, against the software
// switch and its controller, and checks every result a p4app worker would
// read: echoed absolute va, its own rkey, the immediate's msg id bytes and
// max exponent at byte 2, big-endian sums. The job holds no KeepAlive
// stream, is exempt from the liveness check, and ends by data-plane
// silence. Addresses: 127.77.88.x.
func TestP4AppSessionReplay(t *testing.T) {
	const n, q = 2, 3
	const idle = 2 * time.Second
	swAddr := addr(88, 1)
	// Three cores: p4app's QPNs put QP i on core i (docs/switch.md, "Cores").
	sw := newSwitch(t, Config{Addr: swAddr, Cores: 3})
	reg := prometheus.NewRegistry()
	ctl, err := control.New(control.Config{
		Programmer: sw, SwitchIPv4: swAddr, SwitchMAC: net.HardwareAddr{2, 0, 0, 0, 0x88, 1},
		PoolSize: sw.Config().Model.PoolSize, SessionTimeout: 20 * time.Second,
		LivenessTimeout: time.Millisecond, // would abort a job whose workers hold no KeepAlive
		IdleTimeout:     idle, Registry: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ctl.Serve(lis)
	t.Cleanup(func() { ctl.Close() })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sess, syn := pb.NewSessionClient(conn), pb.NewSyncClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// RdmaConnection::ExchangeConnectionInfo, every rank at once.
	reqs := make([]*pb.RdmaSessionRequest, n)
	resps := make([]*pb.RdmaSessionResponse, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			var ts uint64
			if r == 0 {
				ts = 0x1879_3a2b_5c6d_7e8f // rank 0's nanosecond timestamp
			}
			b, err := syn.Broadcast(ctx, &pb.BroadcastRequest{Value: ts, Rank: uint32(r), NumWorkers: n, Root: 0})
			if err != nil {
				errs[r] = err
				return
			}
			req := &pb.RdmaSessionRequest{
				SessionId: uint32(b.GetValue()), // set_session_id(uint32) keeps the low bits
				Rank:      uint32(r), NumWorkers: n,
				Mac:  0x02_00_00_00_88_00 | uint64(r+2),
				Ipv4: binary.BigEndian.Uint32(addr(88, r+2).AsSlice()),
				Rkey: 0xabc00 + uint32(r), PacketSize: pb.PacketSize_MTU_1024, // IBV_MTU_1024 = 3
				MessageSize: p4appMsgBytes,
			}
			for i := range q {
				qpn := uint32(0x11 + 0x40*r + i)
				req.Qpns = append(req.Qpns, qpn)
				req.Psns = append(req.Psns, qpn/2) // "for debugging": its sq_psn
			}
			reqs[r] = req
			bar := &pb.BarrierRequest{NumWorkers: n}
			if r == 0 { // "First worker clears switch state"
				if resps[r], err = sess.RdmaSession(ctx, req); err == nil {
					_, err = syn.Barrier(ctx, bar)
				}
			} else {
				if _, err = syn.Barrier(ctx, bar); err == nil {
					resps[r], err = sess.RdmaSession(ctx, req)
				}
			}
			if err == nil {
				_, err = syn.Barrier(ctx, bar)
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: p4app session setup: %v", r, err)
		}
	}

	job := &wire.Job{PacketSize: p4appPacketBytes}
	for r, resp := range resps {
		if resp.GetIpv4() != binary.BigEndian.Uint32(swAddr.AsSlice()) || resp.GetMac() != 0x02_00_00_00_88_01 || len(resp.GetQpns()) != q || len(resp.GetPsns()) != q {
			t.Fatalf("rank %d: response %v", r, resp)
		}
		job.Workers = append(job.Workers, wire.Worker{Rank: r, Addr: addr(88, r+2), RKey: reqs[r].GetRkey(),
			QPNs: reqs[r].GetQpns(), PSNs: reqs[r].GetPsns(), SwitchQPNs: resp.GetQpns()})
	}
	ws := make([]*testWorker, n)
	for r := range n {
		ws[r] = newTestWorker(t, job, r, p4appPPM, sw)
	}

	// RdmaWorkerThread: message ids start at the QP index and advance by
	// the batch (q); the set bit starts at 0 and flips per message; PSNs
	// continue from QPN/2. Round 0 is p4app's extra exponent-only batch.
	exp := func(r, round int) int8 { return int8(r*7 - round*3 - 20) }
	val := func(r, round, i, k, e int) int32 { return int32(r*1_000_003+round*7919+i*131+k*17+e) * 40503 }
	psn := make([][]uint32, n)
	for r := range n {
		psn[r] = append([]uint32(nil), reqs[r].GetPsns()...)
	}
	for round := range 3 {
		send := func(r, i int) {
			msgID := uint16(i + round*q)
			m := ws[r].p4appMessage(i, uint8(round&1), msgID, exp(r, round), psn[r][i],
				func(k, e int) int32 { return val(r, round, i, k, e) })
			if _, err := ws[r].conn.WriteBatch(m); err != nil {
				t.Fatal(err)
			}
		}
		for r := range n {
			for i := range q {
				send(r, i)
			}
		}
		for r, w := range ws {
			done := make([]bool, q)
			resend := time.NewTimer(time.Second)
			for left := q; left > 0; {
				select {
				case d := <-w.out:
					msgID := uint16(d.qp + round*q)
					var maxExp int8 = -128
					for rr := range n {
						maxExp = max(maxExp, exp(rr, round))
					}
					if done[d.qp] || uint32(d.imm)>>16 != p4appImm(msgID, 0)>>16 {
						continue // a duplicate, or a late result of an earlier round
					}
					if want := p4appImm(msgID, maxExp); uint32(d.imm) != want {
						t.Fatalf("rank %d round %d QP %d: imm %#08x, want %#08x (msg id bytes echoed, max exponent %d at byte 2)", r, round, d.qp, uint32(d.imm), want, maxExp)
					}
					if want := p4appBufferVA + uint64(d.qp*p4appMsgBytes); d.va != want {
						t.Fatalf("rank %d round %d QP %d: va %#x, want the worker's own %#x echoed", r, round, d.qp, d.va, want)
					}
					for k := range p4appPPM {
						for e := range p4appPacketNumel {
							var want int32
							for rr := range n {
								want += val(rr, round, d.qp, k, e)
							}
							if got := d.payload[k*p4appPacketNumel+e]; got != want {
								t.Fatalf("rank %d round %d QP %d packet %d element %d: %d, want %d", r, round, d.qp, k, e, got, want)
							}
						}
					}
					done[d.qp] = true
					left--
				case <-resend.C: // p4app's timeout: the identical message again
					for i := range q {
						if !done[i] {
							for rr := range n {
								send(rr, i)
							}
						}
					}
					resend.Reset(time.Second)
				case <-ctx.Done():
					t.Fatalf("rank %d round %d: results missing: %v (switch %+v)", r, round, ctx.Err(), sw.Stats().Model)
				}
			}
			resend.Stop()
		}
		for r := range n {
			for i := range q {
				psn[r][i] = (psn[r][i] + p4appPPM) & rdma.PSNMask
			}
		}
	}
	if jobs := ctl.Jobs(); len(jobs) != 1 || jobs[0].Job.PoolBase != 0 {
		t.Fatalf("jobs after the rounds: %+v; want the p4app job, pool from slot 0", jobs)
	}

	// No packets any more: the job ends by silence, not by the liveness rule.
	testutil.WaitFor(t, "the idle p4app job's end", func() bool { return len(ctl.Jobs()) == 0 })
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	ended := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "swml_controller_sessions_ended_total" {
			for _, m := range mf.GetMetric() {
				ended[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if ended["idle"] != 1 || ended["liveness_timeout"] != 0 {
		t.Errorf("jobs ended by reason %v; want one by idle and none by liveness_timeout", ended)
	}
	st := sw.Stats()
	if st.Jobs != 0 || st.SlotsAllocated != 0 {
		t.Errorf("switch after the idle end: %d jobs, %d slots", st.Jobs, st.SlotsAllocated)
	}
	for c, p := range st.CorePackets {
		if p == 0 {
			t.Errorf("core %d of %d saw no packet of the %d QPs: %v", c, len(st.CorePackets), q, st.CorePackets)
		}
	}
}
