//go:build !linux

package udp

import (
	"fmt"
	"runtime"

	"golang.org/x/net/bpf"

	"github.com/swml-rdma/swml-rdma/verbs"
)

// ListenGroup opens k endpoints sharing one address with SO_REUSEPORT and a
// steering program. On this system it always fails with an error wrapping
// verbs.ErrNotSupported.
func ListenGroup(cfg Config, k int, steer []bpf.RawInstruction) ([]*Conn, error) {
	return nil, fmt.Errorf("udp: listen group on %v: needs Linux, not %s: %w", cfg.Addr, runtime.GOOS, verbs.ErrNotSupported)
}

// SetSteering fails with an error wrapping verbs.ErrNotSupported: there is
// no endpoint off Linux.
func (c *Conn) SetSteering(steer []bpf.RawInstruction) error {
	return fmt.Errorf("udp: steering program: %w", verbs.ErrNotSupported)
}

// ReusePortSteering reports false: there is no SO_REUSEPORT steering off
// Linux.
func ReusePortSteering() bool { return false }
