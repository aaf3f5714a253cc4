package interop

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/ibverbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
)

// softMTUs are the path MTUs the cross-NIC scenarios run at.
var softMTUs = []verbs.MTU{256, 1024, 4096}

func init() {
	for _, fam := range []string{"ipv4", "ipv6"} {
		fam := fam
		register(Scenario{
			Name: "rxe-to-soft-" + fam,
			Proves: "rxe (driven by verbs/ibverbs) writes multi-packet UC WRITE WITH IMM chains into a verbs/soft QP " +
				"in another netns over " + fam + "; the soft NIC accepts every packet rxe sent (and verifies rxe's ICRC over IPv6), " +
				"payload and immediates verified",
			Run: func(ctx context.Context, e *Env) error { return crossNIC(ctx, e, fam == "ipv6", true) },
		})
		register(Scenario{
			Name: "soft-to-rxe-" + fam,
			Proves: "verbs/soft writes multi-packet UC WRITE WITH IMM chains into an rxe QP over " + fam +
				"; rxe completes them with the right payload and immediates and its rcvd_pkts rises by exactly " +
				"the packets the soft NIC sent (rxe drops bad ICRC/PSN/QPN silently)",
			Run: func(ctx context.Context, e *Env) error { return crossNIC(ctx, e, fam == "ipv6", false) },
		})
	}
	register(Scenario{
		Name: "bad-icrc",
		Proves: "negative control: a hand-built UC WRITE ONLY WITH IMM from the peer netns is accepted by rxe " +
			"(completion, rcvd_pkts +1), the same packet with one ICRC bit flipped is not (no completion, " +
			"rcvd_pkts +0), and a good one after it is again: the counter checks above can fail",
		Run: badICRC,
	})
}

// rxeSide is an rxe QP with its buffers, connected to a peer QP.
type rxeSide struct {
	dev      *ibverbs.Device
	pd       verbs.PD
	src, dst verbs.MR
	scq, rcq verbs.CQ
	qp       verbs.QP
}

func (r *rxeSide) Close() {
	for _, c := range []interface{ Close() error }{r.qp, r.src, r.dst, r.scq, r.rcq, r.pd} {
		if c != nil {
			_ = c.Close()
		}
	}
}

func newRxeSide(dev *ibverbs.Device, size int) (*rxeSide, error) {
	r := &rxeSide{dev: dev}
	var err error
	fail := func(e error) (*rxeSide, error) { r.Close(); return nil, e }
	if r.pd, err = dev.AllocPD(); err != nil {
		return fail(err)
	}
	if r.src, err = r.pd.AllocMR(size, verbs.AccessLocalWrite); err != nil {
		return fail(err)
	}
	if r.dst, err = r.pd.AllocMR(size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return fail(err)
	}
	if r.scq, err = dev.CreateCQ(64); err != nil {
		return fail(err)
	}
	if r.rcq, err = dev.CreateCQ(64); err != nil {
		return fail(err)
	}
	if r.qp, err = r.pd.CreateUCQP(verbs.QPConfig{SendCQ: r.scq, RecvCQ: r.rcq, MaxSendWR: 16, MaxRecvWR: 16}); err != nil {
		return fail(err)
	}
	return r, nil
}

func addrs(e *Env, v6 bool) (rxe, peer netip.Addr) {
	if v6 {
		return e.RxeAddr6, e.Peer6
	}
	return e.RxeAddr4, e.Peer4
}

func sizesFor(mtu verbs.MTU) []int {
	return []int{int(mtu)*3 + 100, int(mtu), 1, int(mtu)*5 - 4}
}

func sum(s []int) int {
	t := 0
	for _, n := range s {
		t += n
	}
	return t
}

// pair opens the rxe device and the soft peer for one address family.
func pair(ctx context.Context, e *Env, v6 bool, icrc soft.ICRCPolicy) (*ibverbs.Device, *peer, error) {
	rxeAddr, peerAddr := addrs(e, v6)
	dev, err := openRxe(e, rxeAddr)
	if err != nil {
		return nil, nil, err
	}
	e.logf("rxe: %s GID index %d (%s), active MTU %d", dev.Name(), dev.GIDIndex(), dev.Addr(), dev.ActiveMTU())
	p, err := startPeer(ctx, e)
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	if _, err := p.do(cmd{Op: "open", Local: peerAddr.String(), ICRC: int(icrc)}); err != nil {
		p.close()
		dev.Close()
		return nil, nil, err
	}
	return dev, p, nil
}

// connect creates QPs on both sides and connects them at mtu.
func connect(e *Env, dev *ibverbs.Device, p *peer, v6 bool, mtu verbs.MTU, size int) (*rxeSide, reply, error) {
	rxeAddr, peerAddr := addrs(e, v6)
	r, err := newRxeSide(dev, size)
	if err != nil {
		return nil, reply{}, err
	}
	pq, err := p.do(cmd{Op: "qp", Size: size})
	if err != nil {
		r.Close()
		return nil, reply{}, err
	}
	const rxePSN, softPSN = 0xFFFFF0, 0x000100 // rxe's send PSN wraps past 2^24
	if err := verbs.Connect(r.qp, verbs.AccessRemoteWrite, verbs.RTRAttr{RemoteQPN: pq.QPN, RemoteAddr: peerAddr, RecvPSN: softPSN, MTU: mtu}, rxePSN); err != nil {
		r.Close()
		return nil, reply{}, err
	}
	if _, err := p.do(cmd{Op: "connect", Remote: rxeAddr.String(), QPN: r.qp.QPN(), PSN: rxePSN, SPSN: softPSN, MTU: int(mtu)}); err != nil {
		r.Close()
		return nil, reply{}, err
	}
	return r, pq, nil
}

// crossNIC runs the chains of sizesFor(mtu) at every MTU of softMTUs from
// one NIC to the other: rxe (driven by verbs/ibverbs) to the soft NIC in
// the peer netns when fromRxe, else the other way. The receiver checks the
// payload and immediates; the sender's packet count must equal the
// receiver's (rxe's sent_pkts or rcvd_pkts, the soft NIC's counters).
func crossNIC(ctx context.Context, e *Env, v6, fromRxe bool) error {
	// rxe picks its own IPv4 Identification, which a UDP socket cannot
	// see, so over IPv4 the soft NIC cannot verify rxe's ICRC; over IPv6 it
	// verifies every packet. rxe verifies ours always.
	policy, arrow, rxeCounter := soft.ICRCVerify, "soft → rxe", "rcvd_pkts"
	if fromRxe {
		arrow, rxeCounter = "rxe → soft", "sent_pkts"
		if !v6 {
			policy = soft.ICRCIgnoreIPv4
		}
	}
	dev, p, err := pair(ctx, e, v6, policy)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer p.close()
	for _, mtu := range softMTUs {
		sizes := sizesFor(mtu)
		size := sum(sizes) + 4096
		r, pq, err := connect(e, dev, p, v6, mtu, size)
		if err != nil {
			return fmt.Errorf("MTU %d: %w", mtu, err)
		}
		seed, imm := uint32(mtu)*13, 0xC3000000|uint32(mtu)<<8
		if fromRxe {
			seed, imm = uint32(mtu)*7, 0x5A000000|uint32(mtu)<<8
		}
		err = func() error {
			defer r.Close()
			// The receiver posts its receive WRs.
			if fromRxe {
				if _, err := p.do(cmd{Op: "recv", Sizes: sizes}); err != nil {
					return err
				}
			} else {
				recvs := make([]verbs.RecvWR, len(sizes))
				for i := range recvs {
					recvs[i].ID = uint64(100 + i)
				}
				if _, err := r.qp.PostRecv(recvs); err != nil {
					return err
				}
				clear(r.dst.Bytes())
			}
			rxe0, err := e.counter(rxeCounter)
			if err != nil {
				return err
			}
			st0, err := p.do(cmd{Op: "stats"})
			if err != nil {
				return err
			}
			// The sender posts the chain and waits for its completion;
			// the receiver checks what arrived.
			var st1 reply
			if fromRxe {
				fill(r.src.Bytes()[:sum(sizes)], seed)
				wrs := writeChain(sizes, r.src.LKey(), pq.RKey, imm)
				if n, err := r.qp.PostSend(wrs); err != nil || n != len(wrs) {
					return fmt.Errorf("rxe post send: %d of %d: %v", n, len(wrs), err)
				}
				if _, err := waitN(ctx, r.scq, 1, e.Timeout); err != nil {
					return fmt.Errorf("rxe send completion: %w", err)
				}
				if st1, err = p.do(cmd{Op: "verify", Sizes: sizes, Seed: seed, Imm: imm}); err != nil {
					return err
				}
			} else {
				if st1, err = p.do(cmd{Op: "send", Sizes: sizes, Seed: seed, RKey: r.dst.RKey(), Imm: imm}); err != nil {
					return err
				}
				got, err := waitN(ctx, r.rcq, len(sizes), e.Timeout)
				if err != nil {
					rc, _ := e.counter(rxeCounter)
					return fmt.Errorf("rxe receive: %w (%s +%d)", err, rxeCounter, rc-rxe0)
				}
				if err := checkRecv(got, sizes, imm, r.qp.QPN(), 100); err != nil {
					return err
				}
				if err := checkPayload(r.dst.Bytes(), sizes, seed); err != nil {
					return err
				}
			}
			want := 0
			for _, s := range sizes {
				want += packets(s, mtu)
			}
			rxeN, err := e.counterSettled(rxeCounter, rxe0, want)
			if err != nil {
				return err
			}
			softN := int(st1.Stats.TxPackets - st0.Stats.TxPackets)
			if fromRxe {
				softN = int(st1.Stats.RxPackets - st0.Stats.RxPackets)
			}
			if rxeN != want || softN != want {
				return fmt.Errorf("%s: rxe %s +%d, soft NIC %d packets; want %d each", arrow, rxeCounter, rxeN, softN, want)
			}
			icrc := "rxe checked every ICRC"
			if fromRxe {
				icrc = "ICRC not checkable over IPv4 (rxe's IP ID)"
				if v6 {
					if st1.Stats.RxBadICRC != 0 {
						return fmt.Errorf("soft NIC rejected %d rxe packets for their ICRC", st1.Stats.RxBadICRC)
					}
					icrc = "every ICRC verified"
				}
			}
			e.logf("  MTU %4d: %s %v bytes, %d packets (rxe %s +%d, soft +%d), %s; payload and imms verified", mtu, arrow, sizes, want, rxeCounter, rxeN, softN, icrc)
			return nil
		}()
		if err != nil {
			return fmt.Errorf("MTU %d: %w", mtu, err)
		}
	}
	return nil
}

func badICRC(ctx context.Context, e *Env) error {
	const peerQPN, rxePSN, rawPSN = 0x0000AB, 0x10, 0x500
	l, err := openRawLab(ctx, e, 8192, peerQPN, rxePSN, rawPSN, 3)
	if err != nil {
		return err
	}
	defer l.close()
	step := func(what string, psn uint32, corrupt bool, wantPkts int, wantWC bool, imm uint32) error {
		clear(l.r.dst.Bytes())
		c := cmd{PSN: psn, Sizes: []int{200}, Seed: imm, Imm: imm, Corrupt: corrupt}
		got, delta, err := l.expect(ctx, what, []cmd{c}, wantPkts, wantWC, "rxe must drop a packet with a bad ICRC and accept a good one")
		if err != nil {
			return err
		}
		if wantWC {
			if err := checkRecv(got, []int{200}, imm, l.r.qp.QPN(), got[0].WRID); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			if err := checkPayload(l.r.dst.Bytes(), []int{200}, imm); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		}
		e.logf("  %-34s rcvd_pkts +%d, completion: %v", what, delta, wantWC)
		return nil
	}
	if err := step("good packet (PSN 0x500)", rawPSN, false, 1, true, 0x11110000); err != nil {
		return err
	}
	if err := step("ICRC bit flipped (PSN 0x501)", rawPSN+1, true, 0, false, 0x22220000); err != nil {
		return err
	}
	return step("good packet again (PSN 0x501)", rawPSN+1, false, 1, true, 0x33330000)
}
