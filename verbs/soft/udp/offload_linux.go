package udp

import (
	"fmt"
	"net/netip"
	"sync"
	"unsafe"

	"github.com/swml-rdma/swml-rdma/verbs"
	"golang.org/x/sys/unix"
)

const (
	// gsoMaxSegments is UDP_MAX_SEGMENTS of Linux before 6.9 (128 since).
	gsoMaxSegments = 64
	// gsoMaxBytes keeps a GSO datagram's UDP length within 16 bits over
	// IPv4 (65507 bytes of payload) with room to spare.
	gsoMaxBytes = 65000
	// groBufLen holds the largest datagram GRO can build (64 KiB).
	groBufLen = 1 << 16
	// groMaxDatagrams is the default number of 64 KiB receive buffers of
	// a GRO endpoint (Config.GROBuffers).
	groMaxDatagrams = 16
)

// Control-message sizes (CMSG_SPACE) for a uint16 UDP_SEGMENT and an int
// UDP_GRO, in 8-byte words so that the cmsghdr in them is aligned.
const (
	cmsgAlign  = int(unsafe.Sizeof(uintptr(0)))
	cmsgHdrLen = (int(unsafe.Sizeof(unix.Cmsghdr{})) + cmsgAlign - 1) &^ (cmsgAlign - 1)
	gsoCtlLen  = cmsgHdrLen + (2+cmsgAlign-1)&^(cmsgAlign-1)
	groCtlLen  = cmsgHdrLen + (4+cmsgAlign-1)&^(cmsgAlign-1)
	gsoCtlWord = (gsoCtlLen + 7) / 8
	groCtlWord = (groCtlLen + 7) / 8
)

// groDatagrams is the number of GRO receive buffers: want (Config.GROBuffers,
// default groMaxDatagrams), at most batch.
func groDatagrams(batch, want int) int {
	if want <= 0 {
		want = groMaxDatagrams
	}
	return max(1, min(batch, want))
}

var probe struct {
	once     sync.Once
	gso, gro bool
}

// Probe reports whether this kernel supports UDP GSO (UDP_SEGMENT, Linux
// 4.18) and GRO (UDP_GRO, Linux 5.0). It is probed once, on a throwaway
// socket, and cached.
func Probe() (gso, gro bool) {
	probe.once.Do(func() {
		for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
			fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				continue
			}
			_, err = unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
			probe.gso = err == nil
			probe.gro = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
			unix.Close(fd)
			return
		}
	})
	return probe.gso, probe.gro
}

// offloadFor resolves mode for an endpoint on local address a: gso, the
// socket may send GSO datagrams; gsoAll, to every peer (otherwise only to
// the peers of AllowGSO); gro, it receives with GRO.
func offloadFor(mode Offload, a netip.Addr) (gso, gsoAll, gro bool, err error) {
	if mode == OffloadOff {
		return false, false, false, nil
	}
	kgso, kgro := Probe()
	if mode == OffloadOn {
		if !kgso || !kgro {
			return false, false, false, fmt.Errorf("UDP GSO (supported: %v) and GRO (supported: %v) requested: %w", kgso, kgro, verbs.ErrNotSupported)
		}
		return true, true, true, nil
	}
	return kgso, a.Is6() || a.IsLoopback(), kgro, nil
}

// putGSOSegment writes a UDP_SEGMENT control message for seg-byte segments.
func putGSOSegment(ctl *[gsoCtlWord]uint64, seg int) {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
	h.Level = unix.IPPROTO_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(cmsgHdrLen + 2)
	*(*uint16)(unsafe.Pointer(uintptr(unsafe.Pointer(&ctl[0])) + uintptr(cmsgHdrLen))) = uint16(seg)
}

// groSegment returns the segment size of a UDP_GRO control message among
// the n bytes of ctl, or 0 if there is none (a datagram of one packet).
func groSegment(ctl *[groCtlWord]uint64, n int) int {
	b := unsafe.Slice((*byte)(unsafe.Pointer(&ctl[0])), groCtlWord*8)[:min(n, groCtlWord*8)]
	for len(b) >= cmsgHdrLen {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(h.Len)
		if l < cmsgHdrLen || l > len(b) {
			return 0
		}
		if h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO && l >= cmsgHdrLen+4 {
			return int(*(*int32)(unsafe.Pointer(&b[cmsgHdrLen])))
		}
		l = (l + cmsgAlign - 1) &^ (cmsgAlign - 1)
		if l >= len(b) {
			return 0
		}
		b = b[l:]
	}
	return 0
}
