package interop

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// newRawSender binds an unconnected UDP socket on local port 49999 with
// IP_PMTUDISC_DO (IPv4 DF, Identification 0), so the ICRC of what it sends
// is exact.
func newRawSender(local netip.Addr) (*rawSender, error) {
	fam := unix.AF_INET6
	if local.Is4() {
		fam = unix.AF_INET
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	const port = 49999
	var sa unix.Sockaddr
	if local.Is4() {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
			unix.Close(fd)
			return nil, err
		}
		sa = &unix.SockaddrInet4{Port: port, Addr: local.As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: port, Addr: local.As16()}
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind %s:%d: %w", local, port, err)
	}
	return &rawSender{fd: fd, local: local, port: port}, nil
}
