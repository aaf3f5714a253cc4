package instant_test

import (
	"bytes"
	"context"
	"net/netip"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/instant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// rig is a switch with one hand-installed job (pool slots 10–13, 256-byte
// packets) and its worker's QP connected to switch QPN 0x500.
type rig struct {
	sw *instant.Switch
	mr verbs.MR
	cq verbs.CQ
	qp verbs.QP
}

func newRig(t *testing.T) *rig {
	t.Helper()
	sw, err := instant.NewSwitch(instant.DefaultSwitchAddr)
	if err != nil {
		t.Fatal(err)
	}
	d, err := sw.NewDevice(instant.DefaultWorkerAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{sw: sw}
	if r.mr, err = pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.mr.Close() })
	if r.cq, err = d.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	r.qp = r.connect(t, pd, 0x500)
	j := wire.Job{ID: 7, PacketSize: 256, PoolBase: 10, PoolSlots: 4, Workers: []wire.Worker{{
		Rank: 0, Addr: instant.DefaultWorkerAddr, RKey: r.mr.RKey(), QPNs: []uint32{r.qp.QPN()}, PSNs: []uint32{0}, SwitchQPNs: []uint32{0x500},
	}}}
	if err := sw.AddJob(context.Background(), &j); err != nil {
		t.Fatal(err)
	}
	return r
}

// connect creates a QP connected to the switch's QPN swQPN.
func (r *rig) connect(t *testing.T, pd verbs.PD, swQPN uint32) verbs.QP {
	t.Helper()
	qp, err := pd.CreateUCQP(verbs.QPConfig{SendCQ: r.cq, RecvCQ: r.cq, MaxRecvWR: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Close() })
	if err := verbs.Connect(qp, verbs.AccessRemoteWrite, verbs.RTRAttr{RemoteQPN: swQPN, RemoteAddr: r.sw.Addr(), MTU: 256}, 0); err != nil {
		t.Fatal(err)
	}
	return qp
}

// TestSwitchRules: the instant switch answers a request that the switch
// pipeline would aggregate, at its va with its immediate, and drops the
// others for the pipeline's reasons (and a UC responder's: no receive).
func TestSwitchRules(t *testing.T) {
	const va = 2048
	good := verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWriteWithImm, Local: verbs.SGE{Length: 512}, RemoteAddr: va,
		RKey: uint32(wire.MakePoolIndex(12, 1)), Imm: uint32(wire.MakeImm(5, -3, 1)), Signaled: true}
	tests := []struct {
		name string
		edit func(wr *verbs.SendWR)
		recv bool // post a receive first
		want instant.DropReason
		ok   bool
	}{
		{"answered", func(*verbs.SendWR) {}, true, 0, true},
		{"no receive posted", func(*verbs.SendWR) {}, false, instant.DropNoRecvWR, false},
		{"plain write", func(wr *verbs.SendWR) { wr.Opcode = verbs.WRRDMAWrite }, true, instant.DropOpcode, false},
		{"not whole packets", func(wr *verbs.SendWR) { wr.Local.Length = 300 }, true, instant.DropLength, false},
		{"pool below", func(wr *verbs.SendWR) { wr.RKey = uint32(wire.MakePoolIndex(9, 0)) }, true, instant.DropPoolRange, false},
		{"pool past the end", func(wr *verbs.SendWR) { wr.RKey = uint32(wire.MakePoolIndex(13, 0)) }, true, instant.DropPoolRange, false},
		{"va out of range", func(wr *verbs.SendWR) { wr.RemoteAddr = 4096 - 256 }, true, instant.DropNoReceiver, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			buf := r.mr.Bytes()
			for i := range 512 {
				buf[i] = byte(i * 7)
			}
			if tt.recv {
				if _, err := r.qp.PostRecv([]verbs.RecvWR{{ID: 99}}); err != nil {
					t.Fatal(err)
				}
			}
			wr := good
			wr.Local.LKey = r.mr.LKey()
			tt.edit(&wr)
			if n, err := r.qp.PostSend([]verbs.SendWR{wr}); n != 1 || err != nil {
				t.Fatalf("PostSend: %d, %v", n, err)
			}
			wcs := make([]verbs.Completion, 4)
			n, err := r.cq.Poll(wcs)
			if err != nil {
				t.Fatal(err)
			}
			st := r.sw.Stats()
			if !tt.ok {
				if n != 1 || wcs[0].Opcode != verbs.WCRDMAWrite || st.Drops[tt.want] != 1 || st.Dropped() != 1 || st.Results != 0 {
					t.Fatalf("completions %+v, stats %+v: want the send's completion only and one %v drop", wcs[:n], st, tt.want)
				}
				return
			}
			if n != 2 || wcs[0].Opcode != verbs.WCRDMAWrite || wcs[0].WRID != 1 {
				t.Fatalf("completions %+v: want the send's, then the result's", wcs[:n])
			}
			res := wcs[1]
			if res.Opcode != verbs.WCRecvRDMAWithImm || res.WRID != 99 || !res.HasImm || res.Imm != wr.Imm || res.ByteLen != 512 || res.QPN != r.qp.QPN() {
				t.Fatalf("result completion %+v: want receive 99 with the request's immediate %#x", res, wr.Imm)
			}
			if !bytes.Equal(buf[va:va+512], buf[:512]) {
				t.Fatal("the result's payload is not the request's")
			}
			if st.Requests != 1 || st.Results != 1 || st.Dropped() != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestSwitchUnknownQP: a QP whose switch QPN no job has, and every QP
// once its job is removed, get no answer.
func TestSwitchUnknownQP(t *testing.T) {
	r := newRig(t)
	d, err := r.sw.NewDevice(netip.MustParseAddr("10.254.0.3"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.AllocMR(256, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, Local: verbs.SGE{Length: 256, LKey: mr.LKey()}, RKey: uint32(wire.MakePoolIndex(10, 0))}
	// The job's switch QPN, from another address: not the job's worker.
	other := r.connect(t, pd, 0x500)
	if _, err := other.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	if st := r.sw.Stats(); st.Drops[instant.DropUnknownQP] != 1 {
		t.Fatalf("from another address: stats %+v, want one unknown_qp drop", st)
	}
	wr.Local.LKey = r.mr.LKey()
	if _, err := r.qp.PostRecv([]verbs.RecvWR{{ID: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := r.sw.RemoveJob(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	if _, err := r.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	if st := r.sw.Stats(); st.Drops[instant.DropUnknownQP] != 2 || st.Results != 0 {
		t.Fatalf("after RemoveJob: stats %+v, want a second unknown_qp drop", st)
	}
}

// TestAnswerAllocatesNothing: posting a receive, a request and polling
// both completions allocate nothing, so an engine measured on the instant
// switch pays only for its own allocations.
func TestAnswerAllocatesNothing(t *testing.T) {
	r := newRig(t)
	recv := []verbs.RecvWR{{ID: 1}}
	send := []verbs.SendWR{{ID: 2, Opcode: verbs.WRRDMAWriteWithImm, Local: verbs.SGE{Length: 512, LKey: r.mr.LKey()}, RemoteAddr: 1024,
		RKey: uint32(wire.MakePoolIndex(10, 0)), Signaled: true}}
	wcs := make([]verbs.Completion, 4)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := r.qp.PostRecv(recv); err != nil {
			t.Fatal(err)
		}
		if _, err := r.qp.PostSend(send); err != nil {
			t.Fatal(err)
		}
		if n, err := r.cq.Poll(wcs); n != 2 || err != nil {
			t.Fatalf("poll: %d, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per request", allocs)
	}
}
