//go:build !linux

package interop

import (
	"fmt"
	"net/netip"
	"runtime"

	"github.com/swml-rdma/swml-rdma/verbs"
)

// newRawSender needs Linux's IP_PMTUDISC_DO for an exact ICRC (IPv4 DF,
// Identification 0); the interop scenarios run only on Linux.
func newRawSender(local netip.Addr) (*rawSender, error) {
	return nil, fmt.Errorf("interop: raw RoCEv2 sender on %v: needs Linux (IP_PMTUDISC_DO), not %s: %w", local, runtime.GOOS, verbs.ErrNotSupported)
}
