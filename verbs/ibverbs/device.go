//go:build ibverbs

package ibverbs

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <stdint.h>
#include <string.h>

static struct ibv_device *swml_dev_at(struct ibv_device **l, int i) { return l[i]; }

// swml_query_port returns ibv_query_port's result (0 or an errno value).
static int swml_query_port(struct ibv_context *ctx, int port, int *state, int *active_mtu) {
	struct ibv_port_attr a;
	memset(&a, 0, sizeof a);
	int rc = ibv_query_port(ctx, (uint8_t)port, &a);
	*state = a.state;
	*active_mtu = a.active_mtu;
	return rc;
}

// swml_vendor returns ibv_query_device's result (0 or an errno value) and
// the device's vendor id (0xFFFFFF for Linux rxe).
static int swml_vendor(struct ibv_context *ctx, uint32_t *vendor) {
	struct ibv_device_attr a;
	memset(&a, 0, sizeof a);
	int rc = ibv_query_device(ctx, &a);
	*vendor = a.vendor_id;
	return rc;
}

// swml_query_gid returns ibv_query_gid's result (0, or -1 with errno set).
static int swml_query_gid(struct ibv_context *ctx, int port, int index, uint8_t *out) {
	union ibv_gid g;
	int rc = ibv_query_gid(ctx, (uint8_t)port, index, &g);
	memcpy(out, g.raw, 16);
	return rc;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/rdma/rdmadev"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// built reports whether the cgo backend is compiled in.
const built = true

// NoKernelSupport is the message of the error Open returns when the kernel
// has no RDMA subsystem (ibv_get_device_list fails with ENOSYS); the error
// wraps verbs.ErrNotSupported.
const NoKernelSupport = "no RDMA support in this kernel"

// RxeVendorID is the vendor id Linux Soft-RoCE (rdma_rxe) reports
// (RXE_VENDOR_ID in rxe_param.h).
const RxeVendorID = 0xFFFFFF

// Every libibverbs call that can fail is made through cgo's two-result form
// (r, errno := C.f(…)), which reads errno right after the call; the error
// keeps the errno as a syscall.Errno and is wrapped with the operation and
// the object. libibverbs reports a failure three ways: a NULL pointer with
// errno set, -1 with errno set, or the errno value itself as the result
// (ibv_modify_qp, ibv_post_send, ibv_destroy_*: "returns the value of errno
// on failure", libibverbs(3) man pages).

// errnoOr is the errno a failed call left, or def if it left none.
func errnoOr(errno error, def syscall.Errno) syscall.Errno {
	var e syscall.Errno
	if errors.As(errno, &e) && e != 0 {
		return e
	}
	return def
}

// rcErr is the error of an int-returning call: nil for 0, the errno for a
// positive result, errno (or EIO) for a negative one.
func rcErr(rc C.int, errno error) error {
	switch {
	case rc == 0:
		return nil
	case rc > 0:
		return syscall.Errno(rc)
	}
	return errnoOr(errno, syscall.EIO)
}

// Device is an open libibverbs device context bound to one RoCEv2 GID.
// Safe for concurrent use.
type Device struct {
	mu       sync.Mutex
	ctx      *C.struct_ibv_context
	name     string
	addr     netip.Addr
	port     int
	gidIndex int
	mtu      verbs.MTU
	vendor   uint32 // ibv_device_attr.vendor_id
	// spin is how long verbs.Await polls each of the device's empty CQs
	// before it arms it (CQ.BusyPoll; SetBusyPoll).
	spin atomic.Int64
}

var (
	_ verbs.Device       = (*Device)(nil)
	_ verbs.UCTruncation = (*Device)(nil)
)

// deviceList lists the libibverbs devices; ENOSYS (no RDMA in the kernel)
// is verbs.ErrNotSupported. The caller frees the list.
func deviceList() (**C.struct_ibv_device, []string, error) {
	var n C.int
	l, errno := C.ibv_get_device_list(&n)
	if l == nil {
		e := errnoOr(errno, syscall.ENOSYS)
		if e == syscall.ENOSYS {
			return nil, nil, fmt.Errorf("verbs/ibverbs: list devices: %s: %w (%v)", NoKernelSupport, verbs.ErrNotSupported, e)
		}
		return nil, nil, fmt.Errorf("verbs/ibverbs: list devices: %w", e)
	}
	names := make([]string, int(n))
	for i := range names {
		names[i] = C.GoString(C.ibv_get_device_name(C.swml_dev_at(l, C.int(i))))
	}
	return l, names, nil
}

// Devices returns the names of the devices libibverbs sees.
func Devices() ([]string, error) {
	l, names, err := deviceList()
	if err != nil {
		return nil, err
	}
	C.ibv_free_device_list(l)
	return names, nil
}

// Open opens the RDMA device name and binds it to the RoCEv2 GID of addr.
// An empty name picks the first device that has such a GID. The GID index
// comes from sysfs (gid_attrs/types "RoCE v2", the GID equal to addr,
// IPv4-mapped for IPv4).
func Open(name string, addr netip.Addr) (*Device, error) {
	if !addr.IsValid() {
		return nil, fmt.Errorf("verbs/ibverbs: open %q: no local address: %w", name, verbs.ErrInvalidArgument)
	}
	addr = addr.Unmap()
	l, names, err := deviceList()
	if err != nil {
		return nil, err
	}
	defer C.ibv_free_device_list(l)
	if len(names) == 0 {
		return nil, fmt.Errorf("verbs/ibverbs: open %q: libibverbs lists no devices: %w", name, verbs.ErrNoDevice)
	}
	idx := -1
	var port rdmadev.Port
	var gid rdmadev.GIDEntry
	var why []string
	for i, n := range names {
		if name != "" && n != name {
			continue
		}
		info, err := rdmadev.ReadDevice(rdmadev.SysfsRoot, n)
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		for _, p := range info.Ports {
			g, err := rdmadev.FindRoCEv2GID(&p, addr)
			if err != nil {
				why = append(why, n+": "+err.Error())
				continue
			}
			idx, port, gid = i, p, g
			break
		}
		if idx >= 0 {
			break
		}
	}
	if idx < 0 {
		if name != "" && len(why) == 0 {
			return nil, fmt.Errorf("verbs/ibverbs: open %q: %w; devices: %s", name, verbs.ErrNoDevice, strings.Join(names, ", "))
		}
		return nil, fmt.Errorf("verbs/ibverbs: open %q for %s: %w: %s", name, addr, rdmadev.ErrNoGID, strings.Join(why, "; "))
	}
	ctx, errno := C.ibv_open_device(C.swml_dev_at(l, C.int(idx)))
	if ctx == nil {
		return nil, fmt.Errorf("verbs/ibverbs: open %s: %w", names[idx], errnoOr(errno, syscall.ENODEV))
	}
	d := &Device{ctx: ctx, name: names[idx], addr: addr, port: port.Number, gidIndex: gid.Index}
	if err := d.query(gid.GID, port); err != nil {
		C.ibv_close_device(ctx)
		return nil, err
	}
	return d, nil
}

// query reads the port's state and MTU and the device's vendor, and checks
// that the verbs GID table agrees with sysfs on the GID at d.gidIndex.
func (d *Device) query(want rdma.GID, port rdmadev.Port) error {
	var state, amtu C.int
	if rc, errno := C.swml_query_port(d.ctx, C.int(d.port), &state, &amtu); rc != 0 {
		return fmt.Errorf("verbs/ibverbs: query port %s/%d: %w", d.name, d.port, rcErr(rc, errno))
	}
	if state != C.IBV_PORT_ACTIVE {
		return fmt.Errorf("verbs/ibverbs: %s port %d (netdev %s) is %s, not ACTIVE", d.name, d.port, port.Netdev, port.State)
	}
	d.mtu = verbs.MTU(128 << int(amtu))
	var vendor C.uint32_t
	if rc, errno := C.swml_vendor(d.ctx, &vendor); rc != 0 {
		return fmt.Errorf("verbs/ibverbs: query device %s: %w", d.name, rcErr(rc, errno))
	}
	d.vendor = uint32(vendor)
	if d.vendor != RxeVendorID {
		d.spin.Store(int64(busyPoll))
	}
	var raw [16]byte
	rc, errno := C.swml_query_gid(d.ctx, C.int(d.port), C.int(d.gidIndex), (*C.uint8_t)(unsafe.Pointer(&raw[0])))
	if rc != 0 {
		return fmt.Errorf("verbs/ibverbs: query GID %d of %s: %w", d.gidIndex, d.name, rcErr(rc, errno))
	}
	if rdma.GID(raw) != want {
		return fmt.Errorf("verbs/ibverbs: %s GID %d is %s in verbs, %s in sysfs", d.name, d.gidIndex, rdma.GID(raw), want)
	}
	return nil
}

// SetBusyPoll sets how long verbs.Await polls the device's empty CQs
// before it arms them (CQ.BusyPoll): by default busyPoll (20 µs), and none
// on Soft-RoCE; 0 turns it off.
func (d *Device) SetBusyPoll(spin time.Duration) { d.spin.Store(int64(max(spin, 0))) }

// Name is the libibverbs device name.
func (d *Device) Name() string { return d.name }

// VendorID is the device's vendor id (RxeVendorID for Soft-RoCE).
func (d *Device) VendorID() uint32 { return d.vendor }

// UCTruncatedWriteWedges reports whether this is Linux rxe, whose UC
// responder stops accepting messages after a multi-packet RDMA WRITE loses a
// packet (see verbs.UCTruncation; the rxe-uc-truncated interop scenario
// shows it on the kernel the tests boot).
func (d *Device) UCTruncatedWriteWedges() bool { return d.vendor == RxeVendorID }

// Addr is the IP address of the GID this device sends from.
func (d *Device) Addr() netip.Addr { return d.addr }

// Port is the device port the GID belongs to.
func (d *Device) Port() int { return d.port }

// GIDIndex is the sgid_index used for every QP of this device.
func (d *Device) GIDIndex() int { return d.gidIndex }

// ActiveMTU is the port's active MTU (the largest path MTU worth using).
func (d *Device) ActiveMTU() verbs.MTU { return d.mtu }

func (d *Device) context() (*C.struct_ibv_context, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == nil {
		return nil, fmt.Errorf("verbs/ibverbs: device %s: %w", d.name, verbs.ErrClosed)
	}
	return d.ctx, nil
}

// Close closes the device context. Idempotent.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == nil {
		return nil
	}
	rc, errno := C.ibv_close_device(d.ctx)
	d.ctx = nil
	if rc != 0 {
		return fmt.Errorf("verbs/ibverbs: close %s: %w", d.name, rcErr(rc, errno))
	}
	return nil
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (verbs.PD, error) {
	ctx, err := d.context()
	if err != nil {
		return nil, err
	}
	pd, errno := C.ibv_alloc_pd(ctx)
	if pd == nil {
		return nil, fmt.Errorf("verbs/ibverbs: alloc PD on %s: %w", d.name, errnoOr(errno, syscall.ENOMEM))
	}
	return &PD{dev: d, pd: pd}, nil
}

// CreateCQ creates a completion queue with at least entries slots and its
// own completion channel (cq.go).
func (d *Device) CreateCQ(entries int) (verbs.CQ, error) {
	if entries <= 0 {
		return nil, fmt.Errorf("verbs/ibverbs: create CQ with %d entries: %w", entries, verbs.ErrInvalidArgument)
	}
	ctx, err := d.context()
	if err != nil {
		return nil, err
	}
	return newCQ(d, ctx, entries)
}

// PD is a protection domain. Safe for concurrent use.
type PD struct {
	dev *Device
	mu  sync.Mutex
	pd  *C.struct_ibv_pd
}

var _ verbs.PD = (*PD)(nil)

func (p *PD) get() (*C.struct_ibv_pd, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd == nil {
		return nil, fmt.Errorf("verbs/ibverbs: PD on %s: %w", p.dev.name, verbs.ErrClosed)
	}
	return p.pd, nil
}

// Close deallocates the PD. Idempotent. libibverbs refuses (EBUSY) while
// MRs or QPs of the PD exist.
func (p *PD) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd == nil {
		return nil
	}
	rc, errno := C.ibv_dealloc_pd(p.pd)
	p.pd = nil
	if rc != 0 {
		return fmt.Errorf("verbs/ibverbs: dealloc PD on %s: %w", p.dev.name, rcErr(rc, errno))
	}
	return nil
}
