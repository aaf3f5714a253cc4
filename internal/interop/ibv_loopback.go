package interop

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/ibverbs"
)

func init() {
	register(Scenario{
		Name: "ibv-loopback",
		Proves: "verbs/ibverbs drives rxe: UC RDMA WRITE WITH IMM between two QPs of one rxe device, " +
			"multi-packet messages posted as one chain, every path MTU rxe accepts; payload, immediates, " +
			"byte counts and rxe's sent_pkts (one per segment) verified",
		Run: ibvLoopback,
	})
}

// openRxe opens the rxe device for addr, or skips when ibverbs is missing.
func openRxe(e *Env, addr netip.Addr) (*ibverbs.Device, error) {
	d, err := ibverbs.Open(e.RxeDev, addr)
	if errors.Is(err, verbs.ErrNotSupported) {
		return nil, fmt.Errorf("%w: %v", ErrSkip, err)
	}
	return d, err
}

func ibvLoopback(ctx context.Context, e *Env) error {
	dev, err := openRxe(e, e.RxeAddr4)
	if err != nil {
		return err
	}
	defer dev.Close()
	e.logf("opened %s port %d, RoCEv2 GID index %d for %s, active MTU %d", dev.Name(), dev.Port(), dev.GIDIndex(), dev.Addr(), dev.ActiveMTU())
	for _, mtu := range []verbs.MTU{256, 512, 1024, 2048, 4096} {
		if mtu > dev.ActiveMTU() {
			return fmt.Errorf("rxe active MTU %d < %d: the lab netdev MTU is too small", dev.ActiveMTU(), mtu)
		}
		if err := loopbackOnce(ctx, e, dev, mtu); err != nil {
			return fmt.Errorf("path MTU %d: %w", mtu, err)
		}
	}
	return nil
}

// loopbackOnce connects two fresh UC QPs on dev at path MTU mtu and sends a
// chain of WRITE WITH IMM messages from a to b.
func loopbackOnce(ctx context.Context, e *Env, dev *ibverbs.Device, mtu verbs.MTU) error {
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	defer pd.Close()
	sizes := []int{int(mtu)*3 + 100, int(mtu), 1, int(mtu)*5 - 4} // multi-packet, exact, tiny, odd tail
	total := 0
	for _, s := range sizes {
		total += s
	}
	src, err := pd.AllocMR(total, verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := pd.AllocMR(total+4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return err
	}
	defer dst.Close()
	scq, err := dev.CreateCQ(64)
	if err != nil {
		return err
	}
	defer scq.Close()
	rcq, err := dev.CreateCQ(64)
	if err != nil {
		return err
	}
	defer rcq.Close()
	a, err := pd.CreateUCQP(verbs.QPConfig{SendCQ: scq, RecvCQ: rcq, MaxSendWR: 16, MaxRecvWR: 16})
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := pd.CreateUCQP(verbs.QPConfig{SendCQ: scq, RecvCQ: rcq, MaxSendWR: 16, MaxRecvWR: 16})
	if err != nil {
		return err
	}
	defer b.Close()
	const psnA, psnB = 0x123456, 0xFFFFFE // b's wraps past 2^24
	if err := verbs.Connect(a, verbs.AccessRemoteWrite, verbs.RTRAttr{RemoteQPN: b.QPN(), RemoteAddr: dev.Addr(), RecvPSN: psnB, MTU: mtu}, psnA); err != nil {
		return err
	}
	if err := verbs.Connect(b, verbs.AccessRemoteWrite, verbs.RTRAttr{RemoteQPN: a.QPN(), RemoteAddr: dev.Addr(), RecvPSN: psnA, MTU: mtu}, psnB); err != nil {
		return err
	}
	recvs := make([]verbs.RecvWR, len(sizes))
	for i := range recvs {
		recvs[i] = verbs.RecvWR{ID: uint64(100 + i)}
	}
	if n, err := b.PostRecv(recvs); err != nil {
		return fmt.Errorf("post recv (%d posted): %w", n, err)
	}
	fill(src.Bytes(), uint32(mtu))
	clear(dst.Bytes())
	wrs := make([]verbs.SendWR, len(sizes))
	off, wantPkts := 0, 0
	for i, s := range sizes {
		wrs[i] = verbs.SendWR{
			ID: uint64(i), Opcode: verbs.WRRDMAWriteWithImm,
			Local:      verbs.SGE{Addr: uint64(off), Length: uint32(s), LKey: src.LKey()},
			RemoteAddr: uint64(off + 7), RKey: dst.RKey(), // unaligned remote offset on purpose
			Imm: 0xA5000000 | uint32(mtu)<<8 | uint32(i), Signaled: i == len(sizes)-1,
		}
		off += s
		wantPkts += packets(s, mtu)
	}
	// Loopback traffic never reaches rxe's UDP receive path, so rcvd_pkts
	// stays put; sent_pkts counts every packet the requester built.
	before, err := e.counter("sent_pkts")
	if err != nil {
		return err
	}
	if n, err := a.PostSend(wrs); err != nil || n != len(wrs) {
		return fmt.Errorf("post send chain: %d of %d posted: %v", n, len(wrs), err)
	}
	if _, err := waitN(ctx, scq, 1, e.Timeout); err != nil {
		return fmt.Errorf("send completion: %w", err)
	}
	got, err := waitN(ctx, rcq, len(sizes), e.Timeout)
	if err != nil {
		return fmt.Errorf("receive completions: %w", err)
	}
	for i, c := range got {
		if c.Opcode != verbs.WCRecvRDMAWithImm || !c.HasImm || c.Imm != wrs[i].Imm || c.WRID != recvs[i].ID || c.QPN != b.QPN() || c.ByteLen != uint32(sizes[i]) {
			return fmt.Errorf("completion %d = %+v; want RECV_RDMA_WITH_IMM wr_id %d imm %#x len %d on QP %d", i, c, recvs[i].ID, wrs[i].Imm, sizes[i], b.QPN())
		}
	}
	if d := firstDiff(dst.Bytes()[7:7+total], src.Bytes()); d >= 0 {
		return fmt.Errorf("payload differs at byte %d", d)
	}
	if dst.Bytes()[6] != 0 || dst.Bytes()[7+total] != 0 {
		return errors.New("write spilled outside the addressed range")
	}
	delta, err := e.counterSettled("sent_pkts", before, wantPkts)
	if err != nil {
		return err
	}
	if delta != wantPkts {
		return fmt.Errorf("rxe sent_pkts rose by %d, want %d (one per path-MTU segment)", delta, wantPkts)
	}
	e.logf("  MTU %4d: %d messages (%v bytes) in one chain, %d packets (sent_pkts +%d), imms and payload verified", mtu, len(sizes), sizes, wantPkts, delta)
	return nil
}
