package interop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/swml-rdma/swml-rdma/verbs"
)

func init() {
	register(Scenario{
		Name: "rxe-uc-truncated",
		Proves: "the rxe behaviour behind the one-packet-message rule (verbs.UCTruncation): after a 3-packet UC WRITE WITH IMM " +
			"loses its LAST, rxe drops every later WRITE ONLY (no completion, though rcvd_pkts counts them) instead of starting " +
			"a new message as the IBA's class D1 rule has it, until the missing LAST arrives at its PSN; then it completes " +
			"the old message and accepts new ones again",
		Run: ucTruncated,
	})
}

// ucTruncated drives an rxe UC QP with hand-built packets from the peer
// netns and checks, packet by packet, what rxe does with a message whose
// LAST was lost.
func ucTruncated(ctx context.Context, e *Env) error {
	rxeAddr, peerAddr := addrs(e, false)
	dev, err := openRxe(e, rxeAddr)
	if err != nil {
		return err
	}
	defer dev.Close()
	p, err := startPeer(ctx, e)
	if err != nil {
		return err
	}
	defer p.close()
	const mtu = 1024
	r, err := newRxeSide(dev, 8*mtu)
	if err != nil {
		return err
	}
	defer r.Close()
	const peerQPN, rxePSN, P = 0x0000AC, 0x20, 0x700
	if err := verbs.Connect(r.qp, verbs.AccessRemoteWrite, verbs.RTRAttr{RemoteQPN: peerQPN, RemoteAddr: peerAddr, RecvPSN: P, MTU: mtu}, rxePSN); err != nil {
		return err
	}
	recvs := make([]verbs.RecvWR, 8)
	for i := range recvs {
		recvs[i].ID = uint64(i + 1)
	}
	if _, err := r.qp.PostRecv(recvs); err != nil {
		return err
	}
	send := func(part string, psn, imm uint32, n int) error {
		c := cmd{Op: "raw", Local: peerAddr.String(), Remote: rxeAddr.String(), QPN: r.qp.QPN(), PSN: psn, RKey: r.dst.RKey(),
			Sizes: []int{n}, Seed: imm, Imm: imm, Part: part, DMALen: 3 * mtu}
		_, err := p.do(c)
		return err
	}
	// step sends packets and checks rxe's rcvd_pkts and whether a
	// completion with immediate wantImm came (0: none may come).
	type pkt struct {
		part string
		psn  uint32
		n    int
	}
	step := func(what string, pkts []pkt, imm uint32, wantImm uint32, hint string) error {
		before, err := e.counter("rcvd_pkts")
		if err != nil {
			return err
		}
		for _, k := range pkts {
			if err := send(k.part, k.psn, imm, k.n); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		}
		wait := e.Timeout
		if wantImm == 0 {
			wait = 500 * time.Millisecond
		}
		got, werr := waitN(ctx, r.rcq, 1, wait)
		delta, err := e.counterSettled("rcvd_pkts", before, len(pkts))
		if err != nil {
			return err
		}
		switch {
		case delta != len(pkts):
			return fmt.Errorf("%s: rcvd_pkts +%d, want +%d (the packets did not reach rxe's responder)", what, delta, len(pkts))
		case wantImm != 0 && werr != nil:
			return fmt.Errorf("%s: no completion: %v; %s", what, werr, hint)
		case wantImm == 0 && werr == nil:
			return fmt.Errorf("%s: rxe completed imm %#x: %s", what, got[0].Imm, hint)
		case wantImm == 0 && !errors.Is(werr, context.DeadlineExceeded):
			return fmt.Errorf("%s: %v", what, werr)
		case wantImm != 0 && got[0].Imm != wantImm:
			return fmt.Errorf("%s: completion with imm %#x, want %#x", what, got[0].Imm, wantImm)
		}
		e.logf("  %-58s rcvd_pkts +%d, completion: %v", what, delta, wantImm != 0)
		return nil
	}
	fixed := "this kernel's rxe follows the IBA class D1 rule now: the one-packet-message rule for rxe (verbs.UCTruncation, ibverbs.Device.UCTruncatedWriteWedges) can be relaxed for it"
	whole := []pkt{{"first", P, mtu}, {"middle", P + 1, mtu}, {"last", P + 2, mtu}}
	if err := step("a whole 3-packet WRITE WITH IMM (PSN P..P+2)", whole, 0xA1000000, 0xA1000000, "rxe should accept a whole message"); err != nil {
		return err
	}
	// The next message loses its LAST (P+5): rxe stays in message.
	if err := step("FIRST, MIDDLE of the next one; its LAST lost", []pkt{{"first", P + 3, mtu}, {"middle", P + 4, mtu}}, 0xA2000000, 0, "a message without its LAST cannot complete"); err != nil {
		return err
	}
	if err := step("a WRITE ONLY WITH IMM after the gap (P+6)", []pkt{{"only", P + 6, 200}}, 0xA3000000, 0, fixed); err != nil {
		return err
	}
	if err := step("another WRITE ONLY WITH IMM (P+7): still dropped", []pkt{{"only", P + 7, 200}}, 0xA4000000, 0, fixed); err != nil {
		return err
	}
	if err := step("the lost LAST at its PSN (P+5) completes the old message", []pkt{{"last", P + 5, mtu}}, 0xA5000000, 0xA5000000,
		"rxe waited for something else than the missing LAST at the expected PSN"); err != nil {
		return err
	}
	return step("a WRITE ONLY WITH IMM after that (P+9) is accepted again", []pkt{{"only", P + 9, 200}}, 0xA6000000, 0xA6000000,
		"rxe did not leave the wedged state after the LAST")
}
