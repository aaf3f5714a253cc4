package interop

import (
	"context"
	"fmt"
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
	const mtu = rawMTU
	const peerQPN, rxePSN, P = 0x0000AC, 0x20, 0x700
	l, err := openRawLab(ctx, e, 8*mtu, peerQPN, rxePSN, P, 8)
	if err != nil {
		return err
	}
	defer l.close()
	// step sends packets (part, PSN, size) and checks rxe's rcvd_pkts and
	// whether a completion with immediate wantImm came (0: none may come).
	type pkt struct {
		part string
		psn  uint32
		n    int
	}
	step := func(what string, pkts []pkt, imm uint32, wantImm uint32, hint string) error {
		cs := make([]cmd, len(pkts))
		for i, k := range pkts {
			cs[i] = cmd{PSN: k.psn, Sizes: []int{k.n}, Seed: imm, Imm: imm, Part: k.part, DMALen: 3 * mtu}
		}
		got, delta, err := l.expect(ctx, what, cs, len(pkts), wantImm != 0, hint)
		if err != nil {
			return err
		}
		if wantImm != 0 && got[0].Imm != wantImm {
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
