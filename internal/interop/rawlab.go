package interop

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/swml-rdma/swml-rdma/verbs"
)

// rawLab is an rxe UC QP (IPv4, path MTU rawMTU) whose peer is the soft
// peer process's raw sender: hand-built packets from the peer netns. The
// raw sender has no QP; rxe only needs the source address to be the QP's
// dgid, so the peer QPN is arbitrary.
type rawLab struct {
	e                 *Env
	dev               interface{ Close() error }
	p                 *peer
	r                 *rxeSide
	rxeAddr, peerAddr netip.Addr
}

const rawMTU = 1024

// openRawLab connects an rxe QP expecting PSN recvPSN first, with nrecv
// receive WRs posted and an MR of size bytes.
func openRawLab(ctx context.Context, e *Env, size int, peerQPN, rxePSN, recvPSN uint32, nrecv int) (*rawLab, error) {
	l := &rawLab{e: e}
	l.rxeAddr, l.peerAddr = addrs(e, false)
	dev, err := openRxe(e, l.rxeAddr)
	if err != nil {
		return nil, err
	}
	l.dev = dev
	if l.p, err = startPeer(ctx, e); err != nil {
		l.close()
		return nil, err
	}
	if l.r, err = newRxeSide(dev, size); err != nil {
		l.close()
		return nil, err
	}
	if err := verbs.Connect(l.r.qp, verbs.AccessRemoteWrite, verbs.RTRAttr{RemoteQPN: peerQPN, RemoteAddr: l.peerAddr, RecvPSN: recvPSN, MTU: rawMTU}, rxePSN); err != nil {
		l.close()
		return nil, err
	}
	recvs := make([]verbs.RecvWR, nrecv)
	for i := range recvs {
		recvs[i].ID = uint64(i + 1)
	}
	if _, err := l.r.qp.PostRecv(recvs); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

func (l *rawLab) close() {
	if l.r != nil {
		l.r.Close()
	}
	if l.p != nil {
		l.p.close()
	}
	if l.dev != nil {
		_ = l.dev.Close()
	}
}

// expect sends the raw packets cs (Op, addresses, QPN and rkey filled in
// here), then requires rxe's rcvd_pkts to rise by wantPkts and a completion
// to come (wantWC, within the scenario timeout) or none within 500 ms. It
// returns the completion, if any, and the rcvd_pkts rise.
func (l *rawLab) expect(ctx context.Context, what string, cs []cmd, wantPkts int, wantWC bool, hint string) ([]verbs.Completion, int, error) {
	e := l.e
	before, err := e.counter("rcvd_pkts")
	if err != nil {
		return nil, 0, err
	}
	for _, c := range cs {
		c.Op, c.Local, c.Remote, c.QPN, c.RKey = "raw", l.peerAddr.String(), l.rxeAddr.String(), l.r.qp.QPN(), l.r.dst.RKey()
		if _, err := l.p.do(c); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", what, err)
		}
	}
	wait := e.Timeout
	if !wantWC {
		wait = 500 * time.Millisecond
	}
	got, werr := waitN(ctx, l.r.rcq, 1, wait)
	delta, err := e.counterSettled("rcvd_pkts", before, wantPkts)
	if err != nil {
		return nil, 0, err
	}
	switch {
	case delta != wantPkts:
		return nil, delta, fmt.Errorf("%s: rcvd_pkts +%d, want +%d", what, delta, wantPkts)
	case wantWC && werr != nil:
		return nil, delta, fmt.Errorf("%s: no completion: %v; %s", what, werr, hint)
	case !wantWC && werr == nil:
		return nil, delta, fmt.Errorf("%s: rxe completed imm %#x: %s", what, got[0].Imm, hint)
	case !wantWC && !errors.Is(werr, context.DeadlineExceeded):
		return nil, delta, fmt.Errorf("%s: %v", what, werr)
	}
	return got, delta, nil
}
