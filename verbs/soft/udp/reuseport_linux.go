package udp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/swml-rdma/swml-rdma/verbs"
)

// listenUDP binds a UDP socket, running beforeBind on it first when set.
func listenUDP(network string, addr netip.AddrPort, beforeBind func(fd int) error) (*net.UDPConn, error) {
	if beforeBind == nil {
		return net.ListenUDP(network, net.UDPAddrFromAddrPort(addr))
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) { err = beforeBind(int(fd)) }); cerr != nil {
			return cerr
		}
		return err
	}}
	pc, err := lc.ListenPacket(context.Background(), network, addr.String())
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

// ListenGroup opens k endpoints on the same address and port with
// SO_REUSEPORT, so that k goroutines can receive in parallel, and attaches
// the classic BPF program steer to the group (SO_ATTACH_REUSEPORT_CBPF):
// for each arriving datagram the kernel runs steer with the UDP payload at
// offset 0 (the IP header at SKF_NET_OFF) and delivers the datagram to
// endpoint number A (the value returned), or by its own flow hash when A ≥ k.
// A UDP GSO datagram, or a GRO-coalesced one, is steered once, by its first
// packet. Endpoint i is the i-th to join the group, which is what the
// program's index means. With steer empty the kernel's flow hash alone
// decides (the same 4-tuple always reaches the same endpoint).
//
// Each endpoint is an ordinary *Conn (cfg applies to each; the loss
// simulators of endpoint i draw from Seed+i). It fails with an error
// wrapping verbs.ErrNotSupported where the kernel lacks SO_REUSEPORT or
// SO_ATTACH_REUSEPORT_CBPF (ReusePortSteering says so in advance).
func ListenGroup(cfg Config, k int, steer []bpf.RawInstruction) ([]*Conn, error) {
	if k < 1 {
		return nil, fmt.Errorf("udp: listen group on %v: %d endpoints: need at least one", cfg.Addr, k)
	}
	if !ReusePortSteering() {
		return nil, fmt.Errorf("udp: listen group on %v: SO_REUSEPORT with a classic BPF steering program: %w", cfg.Addr, verbs.ErrNotSupported)
	}
	// SO_REUSEPORT lets any socket of the same user that sets it join a
	// group, so a second switch on this address would silently take part
	// of the traffic: a plain endpoint is opened and closed first, and
	// fails if the address is taken, group or not.
	probe, err := listenWith(Config{Addr: cfg.Addr, Port: cfg.Port, BatchSize: 1, Offload: OffloadOff}, nil)
	if err != nil {
		return nil, err
	}
	cfg.Port = int(probe.LocalAddr().Port())
	probe.Close()
	reuse := func(fd int) error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }
	conns := make([]*Conn, 0, k)
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	for i := range k {
		c2 := cfg
		c2.Seed = cfg.Seed + uint64(i)
		c, err := listenWith(c2, reuse)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("udp: listen group member %d of %d: %w", i, k, err)
		}
		conns = append(conns, c)
	}
	if len(steer) > 0 {
		if err := conns[0].SetSteering(steer); err != nil {
			closeAll()
			return nil, err
		}
	}
	return conns, nil
}

// SetSteering replaces the steering program of the SO_REUSEPORT group c
// belongs to (see ListenGroup); the kernel swaps it atomically, so every
// datagram is steered by the old program or the new one.
func (c *Conn) SetSteering(steer []bpf.RawInstruction) error {
	if len(steer) == 0 || len(steer) > maxSteeringInstructions {
		return fmt.Errorf("udp: steering program on %v: %d instructions, want 1 to %d", c.local, len(steer), maxSteeringInstructions)
	}
	filter := make([]unix.SockFilter, len(steer))
	for i, ins := range steer {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	var serr error
	err := c.raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &prog)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("udp: attach steering program on %v: %w", c.local, err)
	}
	return nil
}

// ReusePortSteering reports whether this kernel can steer a SO_REUSEPORT
// group with a classic BPF program (Linux 4.5 and later): probed once, on
// an unbound socket, and cached.
var ReusePortSteering = sync.OnceValue(func() bool {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) != nil {
		return false
	}
	ret0 := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF,
		&unix.SockFprog{Len: 1, Filter: &ret0[0]}) == nil
})

// maxSteeringInstructions is BPF_MAXINSNS of linux/bpf_common.h, the
// longest classic BPF program the kernel accepts.
const maxSteeringInstructions = 4096
