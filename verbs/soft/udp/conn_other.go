//go:build !linux

package udp

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"github.com/swml-rdma/swml-rdma/verbs"
)

// Conn is a RoCEv2 UDP endpoint. The endpoint is built on Linux's
// recvmmsg/sendmmsg, UDP GSO/GRO and IP_PMTUDISC_DO; on other systems
// Listen fails with an error wrapping verbs.ErrNotSupported and no Conn
// exists.
type Conn struct{}

// Listen opens an endpoint on cfg.Addr. On this system it always fails
// with an error wrapping verbs.ErrNotSupported.
func Listen(cfg Config) (*Conn, error) {
	return nil, fmt.Errorf("udp: listen on %v: the userspace RoCEv2 endpoint needs Linux (recvmmsg, sendmmsg, IP_PMTUDISC_DO), not %s: %w", cfg.Addr, runtime.GOOS, verbs.ErrNotSupported)
}

// Probe reports whether this kernel supports UDP GSO and GRO: never, off
// Linux.
func Probe() (gso, gro bool) { return false, false }

// LocalAddr is the bound address and port.
func (c *Conn) LocalAddr() netip.AddrPort { return netip.AddrPort{} }

// BatchSize is the most datagrams one ReadBatch or WriteBatch system call moves.
func (c *Conn) BatchSize() int { return DefaultBatchSize }

// Offloads reports whether this endpoint sends with UDP GSO and receives
// with UDP GRO.
func (c *Conn) Offloads() (gso, gro bool) { return false, false }

// AllowGSO does nothing: there is no GSO off Linux.
func (c *Conn) AllowGSO(peer netip.Addr, ok bool) {}

// GSOTo reports false: there is no GSO off Linux.
func (c *Conn) GSOTo(peer netip.Addr) bool { return false }

// ReadBatch returns net.ErrClosed: there is no open endpoint off Linux.
func (c *Conn) ReadBatch(msgs []Msg) (int, error) { return 0, net.ErrClosed }

// WriteBatch returns net.ErrClosed: there is no open endpoint off Linux.
func (c *Conn) WriteBatch(msgs []Msg) (int, error) { return 0, net.ErrClosed }

// Stats returns a snapshot of the counters.
func (c *Conn) Stats() Stats { return Stats{} }

// Close is a no-op.
func (c *Conn) Close() error { return nil }
