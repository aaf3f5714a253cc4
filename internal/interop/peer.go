package interop

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"

	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
)

// cmd is one request to the soft peer (re-executed in the peer netns) and
// its reply; one JSON object per line each way.
type cmd struct {
	Op     string `json:"op"` // open, qp, connect, recv, stats, verify, send, raw, quit
	Local  string `json:"local,omitempty"`
	Remote string `json:"remote,omitempty"`
	ICRC   int    `json:"icrc,omitempty"` // soft.ICRCPolicy
	MTU    int    `json:"mtu,omitempty"`
	Size   int    `json:"size,omitempty"` // MR bytes
	QPN    uint32 `json:"qpn,omitempty"`
	RKey   uint32 `json:"rkey,omitempty"`
	PSN    uint32 `json:"psn,omitempty"`
	SPSN   uint32 `json:"spsn,omitempty"`
	Sizes  []int  `json:"sizes,omitempty"`
	Seed   uint32 `json:"seed,omitempty"`
	Imm    uint32 `json:"imm,omitempty"`
	// raw: flip a bit of the ICRC.
	Corrupt bool `json:"corrupt,omitempty"`
	// raw: the packet's place in its message: "" or "only" (WRITE ONLY
	// WITH IMMEDIATE), "first" (RETH with DMALen, VA 0), "middle", "last"
	// (WRITE LAST WITH IMMEDIATE).
	Part   string `json:"part,omitempty"`
	DMALen uint32 `json:"dmalen,omitempty"`
}

type reply struct {
	Err   string      `json:"err,omitempty"`
	QPN   uint32      `json:"qpn,omitempty"`
	RKey  uint32      `json:"rkey,omitempty"`
	Stats *soft.Stats `json:"stats,omitempty"`
}

// peer is the scenario's handle on the soft-NIC process in the peer netns.
type peer struct {
	c   *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startPeer(ctx context.Context, e *Env) (*peer, error) {
	c := exec.CommandContext(ctx, "/usr/sbin/ip", "netns", "exec", e.PeerNS, e.Self, "-role", "soft-peer", "-timeout", e.Timeout.String())
	c.Stderr = os.Stderr
	in, err := c.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start soft peer in netns %s: %w", e.PeerNS, err)
	}
	s := bufio.NewScanner(out)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	return &peer{c: c, in: in, out: s}, nil
}

func (p *peer) do(c cmd) (reply, error) {
	b, _ := json.Marshal(c)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return reply{}, fmt.Errorf("soft peer %s: %w", c.Op, err)
	}
	if !p.out.Scan() {
		return reply{}, fmt.Errorf("soft peer %s: no reply (peer exited: %v)", c.Op, p.out.Err())
	}
	var r reply
	if err := json.Unmarshal(p.out.Bytes(), &r); err != nil {
		return reply{}, fmt.Errorf("soft peer %s: bad reply %q: %w", c.Op, p.out.Text(), err)
	}
	if r.Err != "" {
		return r, fmt.Errorf("soft peer %s: %s", c.Op, r.Err)
	}
	return r, nil
}

func (p *peer) close() {
	_, _ = p.do(cmd{Op: "quit"})
	p.in.Close()
	done := make(chan struct{})
	go func() { _ = p.c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.c.Process.Kill()
		<-done
	}
}

func init() { roles["soft-peer"] = softPeer }

// softState is what the soft peer holds between commands.
type softState struct {
	dev  *soft.Device
	pd   verbs.PD
	mr   verbs.MR
	scq  verbs.CQ
	rcq  verbs.CQ
	qp   verbs.QP
	raw  *rawSender
	last soft.Stats
}

func (s *softState) closeQP() {
	for _, c := range []interface{ Close() error }{s.qp, s.mr, s.scq, s.rcq, s.pd} {
		if c != nil {
			_ = c.Close()
		}
	}
	s.qp, s.mr, s.scq, s.rcq, s.pd = nil, nil, nil, nil, nil
}

// softPeer serves cmds on in/out until quit or EOF.
func softPeer(ctx context.Context, e *Env, in io.Reader, out io.Writer) error {
	var st softState
	defer func() {
		st.closeQP()
		if st.raw != nil {
			st.raw.close()
		}
		if st.dev != nil {
			st.dev.Close()
		}
	}()
	sc := bufio.NewScanner(in)
	enc := json.NewEncoder(out)
	for sc.Scan() {
		var c cmd
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return err
		}
		if c.Op == "quit" {
			return enc.Encode(reply{})
		}
		r, err := st.serve(ctx, e, &c)
		if err != nil {
			r.Err = err.Error()
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return sc.Err()
}

func (s *softState) serve(ctx context.Context, e *Env, c *cmd) (reply, error) {
	switch c.Op {
	case "open":
		a, err := netip.ParseAddr(c.Local)
		if err != nil {
			return reply{}, err
		}
		s.dev, err = soft.Open(soft.Config{Addr: a, ICRC: soft.ICRCPolicy(c.ICRC)})
		return reply{}, err
	case "qp":
		s.closeQP()
		var err error
		if s.pd, err = s.dev.AllocPD(); err != nil {
			return reply{}, err
		}
		if s.mr, err = s.pd.AllocMR(c.Size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
			return reply{}, err
		}
		if s.scq, err = s.dev.CreateCQ(64); err != nil {
			return reply{}, err
		}
		if s.rcq, err = s.dev.CreateCQ(64); err != nil {
			return reply{}, err
		}
		if s.qp, err = s.pd.CreateUCQP(verbs.QPConfig{SendCQ: s.scq, RecvCQ: s.rcq, MaxSendWR: 16, MaxRecvWR: 16}); err != nil {
			return reply{}, err
		}
		return reply{QPN: s.qp.QPN(), RKey: s.mr.RKey()}, nil
	case "connect":
		ra, err := netip.ParseAddr(c.Remote)
		if err != nil {
			return reply{}, err
		}
		return reply{}, verbs.Connect(s.qp, verbs.AccessRemoteWrite, verbs.RTRAttr{RemoteQPN: c.QPN, RemoteAddr: ra, RecvPSN: c.PSN, MTU: verbs.MTU(c.MTU)}, c.SPSN)
	case "recv":
		clear(s.mr.Bytes())
		wrs := make([]verbs.RecvWR, len(c.Sizes))
		for i := range wrs {
			wrs[i].ID = uint64(100 + i)
		}
		s.last = s.dev.Stats()
		_, err := s.qp.PostRecv(wrs)
		return reply{}, err
	case "stats":
		st := s.dev.Stats()
		return reply{Stats: &st}, nil
	case "verify":
		got, err := waitN(ctx, s.rcq, len(c.Sizes), e.Timeout)
		st := s.dev.Stats()
		if err != nil {
			return reply{Stats: &st}, fmt.Errorf("soft NIC receive: %w (stats %+v)", err, st)
		}
		if err := checkRecv(got, c.Sizes, c.Imm, s.qp.QPN(), 100); err != nil {
			return reply{Stats: &st}, err
		}
		if err := checkPayload(s.mr.Bytes(), c.Sizes, c.Seed); err != nil {
			return reply{Stats: &st}, err
		}
		return reply{Stats: &st}, nil
	case "send":
		total := 0
		for _, n := range c.Sizes {
			total += n
		}
		fill(s.mr.Bytes()[:total], c.Seed)
		wrs := writeChain(c.Sizes, s.mr.LKey(), c.RKey, c.Imm)
		if n, err := s.qp.PostSend(wrs); err != nil || n != len(wrs) {
			return reply{}, fmt.Errorf("post send: %d of %d: %v", n, len(wrs), err)
		}
		if _, err := waitN(ctx, s.scq, 1, e.Timeout); err != nil {
			return reply{}, fmt.Errorf("send completion: %w", err)
		}
		st := s.dev.Stats()
		return reply{Stats: &st}, nil
	case "raw":
		if s.raw == nil {
			l, err := netip.ParseAddr(c.Local)
			if err != nil {
				return reply{}, err
			}
			if s.raw, err = newRawSender(l); err != nil {
				return reply{}, err
			}
		}
		ra, err := netip.ParseAddr(c.Remote)
		if err != nil {
			return reply{}, err
		}
		return reply{}, s.raw.send(ra, c)
	}
	return reply{}, fmt.Errorf("unknown op %q", c.Op)
}

// writeChain is the chain both directions send: one WRITE WITH IMM per
// size, back to back in the source MR, to offset+7 in the destination (an
// unaligned address on purpose), the last one signaled.
func writeChain(sizes []int, lkey, rkey, immBase uint32) []verbs.SendWR {
	wrs := make([]verbs.SendWR, len(sizes))
	off := 0
	for i, s := range sizes {
		wrs[i] = verbs.SendWR{
			ID: uint64(i), Opcode: verbs.WRRDMAWriteWithImm,
			Local:      verbs.SGE{Addr: uint64(off), Length: uint32(s), LKey: lkey},
			RemoteAddr: uint64(off + 7), RKey: rkey, Imm: immBase + uint32(i), Signaled: i == len(sizes)-1,
		}
		off += s
	}
	return wrs
}

func checkRecv(got []verbs.Completion, sizes []int, immBase, qpn uint32, idBase uint64) error {
	for i, c := range got {
		if c.Opcode != verbs.WCRecvRDMAWithImm || !c.HasImm || c.Imm != immBase+uint32(i) || c.WRID != idBase+uint64(i) || c.QPN != qpn || c.ByteLen != uint32(sizes[i]) {
			return fmt.Errorf("completion %d = %+v; want RECV_RDMA_WITH_IMM wr_id %d imm %#x len %d on QP %d", i, c, idBase+uint64(i), immBase+uint32(i), sizes[i], qpn)
		}
	}
	return nil
}

func checkPayload(dst []byte, sizes []int, seed uint32) error {
	total := 0
	for _, n := range sizes {
		total += n
	}
	want := make([]byte, total)
	fill(want, seed)
	if d := firstDiff(dst[7:7+total], want); d >= 0 {
		return fmt.Errorf("payload differs at byte %d of %d", d, total)
	}
	if dst[6] != 0 || dst[7+total] != 0 {
		return errors.New("write spilled outside the addressed range")
	}
	return nil
}

// rawSender sends hand-built RoCEv2 packets from an unconnected UDP socket
// with DF (IPv4 ID 0), so it knows the exact ICRC and can corrupt it.
type rawSender struct {
	fd    int
	local netip.Addr
	port  uint16
	h     rdma.ICRC
}

func (r *rawSender) close() { unix.Close(r.fd) }

// send builds one UC RDMA WRITE packet of c.Sizes[0] bytes (pattern c.Seed)
// to QP c.QPN at PSN c.PSN: by default a WRITE ONLY WITH IMMEDIATE to va 7,
// rkey c.RKey; c.Part picks a FIRST (va 0, DMA length c.DMALen), MIDDLE or
// LAST WITH IMMEDIATE packet instead.
func (r *rawSender) send(remote netip.Addr, c *cmd) error {
	n := c.Sizes[0]
	first, last, va, dmaLen := true, true, uint64(7), uint32(n)
	switch c.Part {
	case "", "only":
	case "first":
		last, va, dmaLen = false, 0, c.DMALen
	case "middle":
		first, last = false, false
	case "last":
		first = false
	default:
		return fmt.Errorf("raw: unknown packet part %q (only, first, middle, last)", c.Part)
	}
	op := rdma.WriteOpcode(rdma.TransportUC, first, last, true)
	f := rdma.PacketFields{
		BTH:  rdma.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: c.QPN, PSN: c.PSN},
		RETH: rdma.RETHFields{VA: va, RKey: c.RKey, DMALen: dmaLen},
		Imm:  c.Imm,
	}
	b := make([]byte, rdma.PacketLen(op, n))
	off, err := f.Encode(b, n)
	if err != nil {
		return err
	}
	fill(b[off:off+n], c.Seed)
	flow := rdma.Flow{Src: r.local, Dst: remote, SrcPort: r.port, DstPort: rdma.UDPPort, DF: true}
	if err := r.h.Seal(&flow, b); err != nil {
		return err
	}
	if c.Corrupt {
		b[len(b)-1] ^= 0x01
	}
	var sa unix.Sockaddr
	if remote.Is4() {
		sa = &unix.SockaddrInet4{Port: rdma.UDPPort, Addr: remote.As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: rdma.UDPPort, Addr: remote.As16()}
	}
	if err := unix.Sendto(r.fd, b, 0, sa); err != nil {
		return fmt.Errorf("sendto %s: %w", net.JoinHostPort(remote.String(), "4791"), err)
	}
	return nil
}
