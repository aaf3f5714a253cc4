//go:build ibverbs

package ibverbs

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// Compact work-request and completion records: Go fills and reads these in
// C memory; the helpers below turn them into ibv_* structs (whose unions cgo
// cannot name) inside the same cgo call that posts or polls.
struct swml_swr {
	uint64_t wr_id, remote_addr, sge_addr;
	uint32_t sge_len, lkey, rkey, imm;
	uint8_t opcode, signaled;
};
struct swml_rwr {
	uint64_t wr_id, sge_addr;
	uint32_t sge_len, lkey;
};
struct swml_wc {
	uint64_t wr_id;
	uint32_t status, opcode, qp_num, byte_len, imm, flags;
};

static struct ibv_device **swml_get_devices(int *n, int *err) {
	errno = 0;
	struct ibv_device **l = ibv_get_device_list(n);
	*err = l ? 0 : errno;
	return l;
}
static struct ibv_device *swml_dev_at(struct ibv_device **l, int i) { return l[i]; }

static int swml_query_port(struct ibv_context *ctx, int port, int *state, int *active_mtu, int *link_layer) {
	struct ibv_port_attr a;
	memset(&a, 0, sizeof a);
	int rc = ibv_query_port(ctx, (uint8_t)port, &a);
	*state = a.state;
	*active_mtu = a.active_mtu;
	*link_layer = a.link_layer;
	return rc;
}

// swml_vendor returns the device's vendor id (0xFFFFFF for Linux rxe).
static int swml_vendor(struct ibv_context *ctx, uint32_t *vendor, uint32_t *part) {
	struct ibv_device_attr a;
	memset(&a, 0, sizeof a);
	int rc = ibv_query_device(ctx, &a);
	*vendor = a.vendor_id;
	*part = a.vendor_part_id;
	return rc;
}

static int swml_query_gid(struct ibv_context *ctx, int port, int index, uint8_t *out) {
	union ibv_gid g;
	int rc = ibv_query_gid(ctx, (uint8_t)port, index, &g);
	memcpy(out, g.raw, 16);
	return rc;
}

static struct ibv_mr *swml_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, int access, int *err) {
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr_iova(pd, addr, len, iova, access);
	*err = mr ? 0 : errno;
	return mr;
}

// swml_create_cq creates a CQ with its own completion channel.
static struct ibv_cq *swml_create_cq(struct ibv_context *ctx, int n, struct ibv_comp_channel **ch, int *err) {
	errno = 0;
	*ch = ibv_create_comp_channel(ctx);
	if (!*ch) {
		*err = errno;
		return NULL;
	}
	struct ibv_cq *cq = ibv_create_cq(ctx, n, NULL, *ch, 0);
	if (!cq) {
		*err = errno;
		ibv_destroy_comp_channel(*ch);
		*ch = NULL;
		return NULL;
	}
	*err = 0;
	return cq;
}

static int swml_req_notify(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

// swml_get_event takes one event off the completion channel (whose fd is
// non-blocking) and acknowledges it: 0, or -1 with *err = errno (EAGAIN:
// no event yet).
static int swml_get_event(struct ibv_comp_channel *ch, int *err) {
	struct ibv_cq *cq;
	void *cq_ctx;
	errno = 0;
	if (ibv_get_cq_event(ch, &cq, &cq_ctx) != 0) {
		*err = errno;
		return -1;
	}
	ibv_ack_cq_events(cq, 1);
	return 0;
}

static struct ibv_qp *swml_create_uc_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, int max_send, int max_recv, int *err) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.qp_type = IBV_QPT_UC;
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.cap.max_send_wr = max_send;
	a.cap.max_recv_wr = max_recv;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	errno = 0;
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	*err = qp ? 0 : errno;
	return qp;
}

static int swml_qp_init(struct ibv_qp *qp, int port, int access) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = (uint8_t)port;
	a.qp_access_flags = access;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int swml_qp_rtr(struct ibv_qp *qp, int port, int sgid_index, const uint8_t *dgid, uint32_t dqpn, uint32_t rq_psn, int mtu) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = (enum ibv_mtu)mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rq_psn;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)sgid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = (uint8_t)port;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
}

static int swml_qp_rts(struct ibv_qp *qp, uint32_t sq_psn) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static int swml_post_send(struct ibv_qp *qp, const struct swml_swr *d, int n, struct ibv_send_wr *wr, struct ibv_sge *sge, int *posted) {
	for (int i = 0; i < n; i++) {
		memset(&wr[i], 0, sizeof wr[i]);
		sge[i].addr = d[i].sge_addr;
		sge[i].length = d[i].sge_len;
		sge[i].lkey = d[i].lkey;
		wr[i].wr_id = d[i].wr_id;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = d[i].sge_len ? 1 : 0;
		wr[i].opcode = (enum ibv_wr_opcode)d[i].opcode;
		wr[i].send_flags = d[i].signaled ? IBV_SEND_SIGNALED : 0;
		wr[i].imm_data = htonl(d[i].imm);
		wr[i].wr.rdma.remote_addr = d[i].remote_addr;
		wr[i].wr.rdma.rkey = d[i].rkey;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(qp, wr, &bad);
	*posted = rc == 0 ? n : (bad ? (int)(bad - wr) : 0);
	return rc;
}

static int swml_post_recv(struct ibv_qp *qp, const struct swml_rwr *d, int n, struct ibv_recv_wr *wr, struct ibv_sge *sge, int *posted) {
	for (int i = 0; i < n; i++) {
		memset(&wr[i], 0, sizeof wr[i]);
		sge[i].addr = d[i].sge_addr;
		sge[i].length = d[i].sge_len;
		sge[i].lkey = d[i].lkey;
		wr[i].wr_id = d[i].wr_id;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = d[i].sge_len ? 1 : 0;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	struct ibv_recv_wr *bad = NULL;
	int rc = ibv_post_recv(qp, wr, &bad);
	*posted = rc == 0 ? n : (bad ? (int)(bad - wr) : 0);
	return rc;
}

static int swml_poll(struct ibv_cq *cq, struct ibv_wc *wc, struct swml_wc *out, int n) {
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].qp_num = wc[i].qp_num;
		out[i].byte_len = wc[i].byte_len;
		out[i].flags = wc[i].wc_flags;
		out[i].imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
	}
	return got;
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/rdma/rdmadev"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// built reports whether the cgo backend is compiled in.
const built = true

// NoKernelSupport is the message of the error Open returns when the kernel
// has no RDMA subsystem (ibv_get_device_list fails with ENOSYS).
const NoKernelSupport = "no RDMA support in this kernel: load rdma_rxe (see docs/testbed.md) or use the userspace NIC (--nic soft)"

// Device is an open libibverbs device context bound to one RoCEv2 GID.
type Device struct {
	mu       sync.Mutex
	ctx      *C.struct_ibv_context
	name     string
	addr     netip.Addr
	port     int
	gidIndex int
	mtu      verbs.MTU
	vendor   uint32 // ibv_device_attr.vendor_id
}

var (
	_ verbs.Device       = (*Device)(nil)
	_ verbs.UCTruncation = (*Device)(nil)
)

// RxeVendorID is the vendor id Linux Soft-RoCE (rdma_rxe) reports
// (RXE_VENDOR_ID in rxe_param.h).
const RxeVendorID = 0xFFFFFF

// deviceNames lists the libibverbs devices, mapping ENOSYS (no RDMA in the
// kernel) to verbs.ErrNotSupported.
func deviceList() (**C.struct_ibv_device, []string, error) {
	var n, e C.int
	l := C.swml_get_devices(&n, &e)
	if l == nil {
		errno := syscall.Errno(e)
		if errno == syscall.ENOSYS || errno == 0 {
			return nil, nil, fmt.Errorf("verbs/ibverbs: %s: %w (%v)", NoKernelSupport, verbs.ErrNotSupported, errno)
		}
		return nil, nil, fmt.Errorf("verbs/ibverbs: ibv_get_device_list: %w", errno)
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
		return nil, fmt.Errorf("verbs/ibverbs: open %q: no local address given: %w", name, verbs.ErrInvalidArgument)
	}
	addr = addr.Unmap()
	l, names, err := deviceList()
	if err != nil {
		return nil, err
	}
	defer C.ibv_free_device_list(l)
	if len(names) == 0 {
		return nil, fmt.Errorf("verbs/ibverbs: %w: libibverbs sees no devices; add one (rdma link add rxe0 type rxe netdev <dev>, see docs/testbed.md) or use the userspace NIC (--nic soft)", verbs.ErrNoDevice)
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
	var state, amtu, ll C.int
	if rc := C.swml_query_port(ctx, C.int(d.port), &state, &amtu, &ll); rc != 0 {
		C.ibv_close_device(ctx)
		return nil, fmt.Errorf("verbs/ibverbs: query port %s/%d: %w", d.name, d.port, syscall.Errno(rc))
	}
	if state != C.IBV_PORT_ACTIVE {
		C.ibv_close_device(ctx)
		return nil, fmt.Errorf("verbs/ibverbs: %s port %d is %s, not ACTIVE (is %s up?)", d.name, d.port, port.State, port.Netdev)
	}
	d.mtu = verbs.MTU(128 << int(amtu))
	var vendor, part C.uint32_t
	if rc := C.swml_vendor(ctx, &vendor, &part); rc != 0 {
		C.ibv_close_device(ctx)
		return nil, fmt.Errorf("verbs/ibverbs: query device %s: %w", d.name, syscall.Errno(rc))
	}
	d.vendor = uint32(vendor)
	// Cross-check sysfs against the verbs GID table: they must agree.
	var raw [16]byte
	if rc := C.swml_query_gid(ctx, C.int(d.port), C.int(d.gidIndex), (*C.uint8_t)(unsafe.Pointer(&raw[0]))); rc != 0 || rdma.GID(raw) != gid.GID {
		C.ibv_close_device(ctx)
		return nil, fmt.Errorf("verbs/ibverbs: %s GID %d is %s in verbs but %s in sysfs (table changed?)", d.name, d.gidIndex, rdma.GID(raw), gid.GID)
	}
	return d, nil
}

func errnoOr(err error, def syscall.Errno) error {
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	return def
}

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
	rc := C.ibv_close_device(d.ctx)
	d.ctx = nil
	if rc != 0 {
		return fmt.Errorf("verbs/ibverbs: close %s: ibv_close_device returned %d", d.name, int(rc))
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

// CreateCQ creates a completion queue with at least entries slots.
func (d *Device) CreateCQ(entries int) (verbs.CQ, error) {
	if entries <= 0 {
		return nil, fmt.Errorf("verbs/ibverbs: create CQ with %d entries: %w", entries, verbs.ErrInvalidArgument)
	}
	ctx, err := d.context()
	if err != nil {
		return nil, err
	}
	var e C.int
	var ch *C.struct_ibv_comp_channel
	cq := C.swml_create_cq(ctx, C.int(entries), &ch, &e)
	if cq == nil {
		return nil, fmt.Errorf("verbs/ibverbs: create CQ(%d) on %s: %w", entries, d.name, syscall.Errno(e))
	}
	const batch = 64
	c := &CQ{
		dev:    d,
		cq:     cq,
		ch:     ch,
		notify: make(chan struct{}, 1),
		batch:  batch,
		wc:     (*C.struct_ibv_wc)(C.calloc(batch, C.size_t(unsafe.Sizeof(C.struct_ibv_wc{})))),
		out:    (*C.struct_swml_wc)(C.calloc(batch, C.size_t(unsafe.Sizeof(C.struct_swml_wc{})))),
	}
	if err := c.startEvents(); err != nil {
		C.ibv_destroy_cq(cq)
		C.ibv_destroy_comp_channel(ch)
		C.free(unsafe.Pointer(c.wc))
		C.free(unsafe.Pointer(c.out))
		return nil, fmt.Errorf("verbs/ibverbs: completion channel of a CQ on %s: %w", d.name, err)
	}
	return c, nil
}

// startEvents puts the completion channel's fd in the Go runtime's poller
// (a non-blocking duplicate, so that closing it leaves the channel's own fd
// to ibv_destroy_comp_channel) and starts the goroutine that turns its
// events into Notifications. Blocked, that goroutine is parked in the
// poller: it holds no thread and no timer.
func (c *CQ) startEvents() error {
	fd, err := unix.FcntlInt(uintptr(c.ch.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := unix.SetNonblock(fd, true); err != nil { // shared with the channel's fd: ibv_get_cq_event returns EAGAIN
		unix.Close(fd)
		return err
	}
	c.events = os.NewFile(uintptr(fd), "ibv_comp_channel")
	rc, err := c.events.SyscallConn()
	if err != nil {
		c.events.Close()
		return err
	}
	c.eventsDone = make(chan struct{})
	go c.readEvents(rc)
	return nil
}

// readEvents takes each completion event off the channel, acknowledges it
// and passes it on, until the channel's file is closed.
func (c *CQ) readEvents(rc syscall.RawConn) {
	defer close(c.eventsDone)
	for {
		var failed bool
		err := rc.Read(func(uintptr) bool {
			var e C.int
			if C.swml_get_event(c.ch, &e) == 0 {
				return true
			}
			if syscall.Errno(e) == syscall.EAGAIN {
				return false // wait in the poller
			}
			failed = true
			return true
		})
		if err != nil || failed {
			return // closed (or the channel failed: Poll reports the CQ's state)
		}
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
}

// PD is a protection domain.
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

// Close deallocates the PD. Idempotent.
func (p *PD) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd == nil {
		return nil
	}
	rc := C.ibv_dealloc_pd(p.pd)
	p.pd = nil
	if rc != 0 {
		return fmt.Errorf("verbs/ibverbs: dealloc PD on %s: %w (close its MRs and QPs first)", p.dev.name, syscall.Errno(rc))
	}
	return nil
}

func accessFlags(a verbs.Access) C.int {
	var f C.int
	if a&verbs.AccessLocalWrite != 0 {
		f |= C.IBV_ACCESS_LOCAL_WRITE
	}
	if a&verbs.AccessRemoteWrite != 0 {
		f |= C.IBV_ACCESS_REMOTE_WRITE
	}
	if a&verbs.AccessRemoteRead != 0 {
		f |= C.IBV_ACCESS_REMOTE_READ
	}
	return f
}

// AllocMR maps length bytes of anonymous memory and registers them at IOVA 0.
func (p *PD) AllocMR(length int, access verbs.Access) (verbs.MR, error) {
	if length <= 0 {
		return nil, fmt.Errorf("verbs/ibverbs: MR of %d bytes: %w", length, verbs.ErrInvalidArgument)
	}
	pd, err := p.get()
	if err != nil {
		return nil, err
	}
	// Remote writes need local write access too (libibverbs rule).
	if access&(verbs.AccessRemoteWrite) != 0 {
		access |= verbs.AccessLocalWrite
	}
	buf, err := unix.Mmap(-1, 0, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("verbs/ibverbs: mmap %d bytes: %w", length, err)
	}
	var e C.int
	mr := C.swml_reg_mr_iova(pd, unsafe.Pointer(&buf[0]), C.size_t(length), 0, accessFlags(access), &e)
	if mr == nil {
		_ = unix.Munmap(buf)
		errno := syscall.Errno(e)
		if errno == syscall.ENOMEM || errno == syscall.EPERM {
			var lim unix.Rlimit
			_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim)
			return nil, fmt.Errorf("verbs/ibverbs: register %d bytes on %s: %w: the locked-memory limit is %s; raise it (ulimit -l unlimited, or LimitMEMLOCK=infinity for a systemd unit)", length, p.dev.name, errno, fmtLimit(lim.Cur))
		}
		return nil, fmt.Errorf("verbs/ibverbs: register %d bytes on %s: %w", length, p.dev.name, errno)
	}
	return &MR{pd: p, mr: mr, buf: buf, access: access, lkey: uint32(mr.lkey), rkey: uint32(mr.rkey)}, nil
}

func fmtLimit(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return fmt.Sprintf("%d KiB", v/1024)
}

// MR is a registered, mmap'd memory region with IOVA 0.
type MR struct {
	pd         *PD
	mu         sync.Mutex
	mr         *C.struct_ibv_mr
	buf        []byte
	access     verbs.Access
	lkey, rkey uint32
}

var _ verbs.MR = (*MR)(nil)

func (m *MR) Bytes() []byte        { return m.buf }
func (m *MR) LKey() uint32         { return m.lkey }
func (m *MR) RKey() uint32         { return m.rkey }
func (m *MR) IOVA() uint64         { return 0 }
func (m *MR) Access() verbs.Access { return m.access }

// Close deregisters and unmaps the region. Idempotent.
func (m *MR) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mr == nil {
		return nil
	}
	rc := C.ibv_dereg_mr(m.mr)
	m.mr = nil
	var err error
	if rc != 0 {
		err = fmt.Errorf("verbs/ibverbs: deregister MR: %w", syscall.Errno(rc))
	}
	if e := unix.Munmap(m.buf); e != nil && err == nil {
		err = fmt.Errorf("verbs/ibverbs: munmap MR: %w", e)
	}
	m.buf = nil
	return err
}

// CQ is a completion queue. Poll drains up to a batch per cgo call into C
// memory owned by the CQ.
//
// Its completion channel (ibv_comp_channel) is read by one goroutine parked
// in the runtime poller on the channel's fd, which acknowledges each event
// and forwards it to Notifications.
type CQ struct {
	dev        *Device
	mu         sync.Mutex
	cq         *C.struct_ibv_cq
	ch         *C.struct_ibv_comp_channel
	events     *os.File // the channel's fd, duplicated, in the poller
	eventsDone chan struct{}
	notify     chan struct{}
	batch      int
	wc         *C.struct_ibv_wc
	out        *C.struct_swml_wc
}

var _ verbs.CQ = (*CQ)(nil)

// Poll moves up to len(wcs) completions into wcs without blocking.
func (c *CQ) Poll(wcs []verbs.Completion) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cq == nil {
		return 0, fmt.Errorf("verbs/ibverbs: poll CQ: %w", verbs.ErrClosed)
	}
	total := 0
	out := unsafe.Slice(c.out, c.batch)
	for total < len(wcs) {
		n := min(len(wcs)-total, c.batch)
		got := int(C.swml_poll(c.cq, c.wc, c.out, C.int(n)))
		if got < 0 {
			return total, fmt.Errorf("verbs/ibverbs: ibv_poll_cq on %s failed (%d)", c.dev.name, got)
		}
		for i := 0; i < got; i++ {
			o := &out[i]
			w := &wcs[total+i]
			*w = verbs.Completion{
				WRID:    uint64(o.wr_id),
				Status:  verbs.WCStatus(o.status),
				Opcode:  wcOpcode(uint32(o.opcode)),
				QPN:     uint32(o.qp_num),
				ByteLen: uint32(o.byte_len),
				Imm:     uint32(o.imm),
				HasImm:  uint32(o.flags)&C.IBV_WC_WITH_IMM != 0,
			}
		}
		total += got
		if got < n {
			break
		}
	}
	return total, nil
}

func wcOpcode(op uint32) verbs.WCOpcode {
	switch op {
	case C.IBV_WC_RDMA_WRITE:
		return verbs.WCRDMAWrite
	case C.IBV_WC_SEND:
		return verbs.WCSend
	case C.IBV_WC_RECV:
		return verbs.WCRecv
	case C.IBV_WC_RECV_RDMA_WITH_IMM:
		return verbs.WCRecvRDMAWithImm
	}
	return verbs.WCOpcode(op)
}

// RequestNotify arms the CQ (ibv_req_notify_cq): the next completion
// sends an event on Notifications.
func (c *CQ) RequestNotify() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cq == nil {
		return fmt.Errorf("verbs/ibverbs: arm CQ: %w", verbs.ErrClosed)
	}
	if rc := C.swml_req_notify(c.cq); rc != 0 {
		return fmt.Errorf("verbs/ibverbs: ibv_req_notify_cq on %s: %w", c.dev.name, syscall.Errno(rc))
	}
	return nil
}

// Notifications is the CQ's completion channel.
func (c *CQ) Notifications() <-chan struct{} { return c.notify }

// Wait blocks on the completion channel until a completion arrives or ctx
// is done.
func (c *CQ) Wait(ctx context.Context, wcs []verbs.Completion) (int, error) {
	n, err := verbs.Await(c, wcs, ctx.Done())
	if n == 0 && err == nil {
		return 0, ctx.Err()
	}
	return n, err
}

// Close destroys the CQ. Idempotent.
func (c *CQ) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cq == nil {
		return nil
	}
	// The event reader first: ibv_destroy_cq waits for every event to be
	// acknowledged, and the channel must outlive its reader.
	c.events.Close()
	<-c.eventsDone
	rc := C.ibv_destroy_cq(c.cq)
	c.cq = nil
	if e := C.ibv_destroy_comp_channel(c.ch); e != 0 && rc == 0 {
		rc = e
	}
	c.ch = nil
	C.free(unsafe.Pointer(c.wc))
	C.free(unsafe.Pointer(c.out))
	c.wc, c.out = nil, nil
	if rc != 0 {
		return fmt.Errorf("verbs/ibverbs: destroy CQ: %w (destroy its QPs first)", syscall.Errno(rc))
	}
	return nil
}

func cqOf(c verbs.CQ) (*C.struct_ibv_cq, error) {
	cq, ok := c.(*CQ)
	if !ok || cq == nil {
		return nil, fmt.Errorf("verbs/ibverbs: CQ %T is not an ibverbs CQ: %w", c, verbs.ErrInvalidArgument)
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.cq == nil {
		return nil, fmt.Errorf("verbs/ibverbs: CQ: %w", verbs.ErrClosed)
	}
	return cq.cq, nil
}

// CreateUCQP creates an unreliable-connected QP in RESET state.
func (p *PD) CreateUCQP(cfg verbs.QPConfig) (verbs.QP, error) {
	pd, err := p.get()
	if err != nil {
		return nil, err
	}
	scq, err := cqOf(cfg.SendCQ)
	if err != nil {
		return nil, err
	}
	rcq, err := cqOf(cfg.RecvCQ)
	if err != nil {
		return nil, err
	}
	if cfg.MaxSendWR <= 0 {
		cfg.MaxSendWR = 256
	}
	if cfg.MaxRecvWR <= 0 {
		cfg.MaxRecvWR = 256
	}
	var e C.int
	qp := C.swml_create_uc_qp(pd, scq, rcq, C.int(cfg.MaxSendWR), C.int(cfg.MaxRecvWR), &e)
	if qp == nil {
		return nil, fmt.Errorf("verbs/ibverbs: create UC QP on %s (send %d, recv %d WRs): %w", p.dev.name, cfg.MaxSendWR, cfg.MaxRecvWR, syscall.Errno(e))
	}
	q := &QP{
		pd:      p,
		qp:      qp,
		qpn:     uint32(qp.qp_num),
		sendCap: cfg.MaxSendWR,
		recvCap: cfg.MaxRecvWR,
	}
	q.sendDesc = (*C.struct_swml_swr)(C.calloc(C.size_t(q.sendCap), C.size_t(unsafe.Sizeof(C.struct_swml_swr{}))))
	q.sendWR = (*C.struct_ibv_send_wr)(C.calloc(C.size_t(q.sendCap), C.size_t(unsafe.Sizeof(C.struct_ibv_send_wr{}))))
	q.sendSGE = (*C.struct_ibv_sge)(C.calloc(C.size_t(q.sendCap), C.size_t(unsafe.Sizeof(C.struct_ibv_sge{}))))
	q.recvDesc = (*C.struct_swml_rwr)(C.calloc(C.size_t(q.recvCap), C.size_t(unsafe.Sizeof(C.struct_swml_rwr{}))))
	q.recvWR = (*C.struct_ibv_recv_wr)(C.calloc(C.size_t(q.recvCap), C.size_t(unsafe.Sizeof(C.struct_ibv_recv_wr{}))))
	q.recvSGE = (*C.struct_ibv_sge)(C.calloc(C.size_t(q.recvCap), C.size_t(unsafe.Sizeof(C.struct_ibv_sge{}))))
	return q, nil
}

// QP is an unreliable-connected queue pair.
type QP struct {
	pd  *PD
	qpn uint32

	mu    sync.Mutex // guards qp and state against Close and transitions
	qp    *C.struct_ibv_qp
	state verbs.QPState

	sendMu   sync.Mutex
	sendCap  int
	sendDesc *C.struct_swml_swr
	sendWR   *C.struct_ibv_send_wr
	sendSGE  *C.struct_ibv_sge

	recvMu   sync.Mutex
	recvCap  int
	recvDesc *C.struct_swml_rwr
	recvWR   *C.struct_ibv_recv_wr
	recvSGE  *C.struct_ibv_sge
}

var _ verbs.QP = (*QP)(nil)

func (q *QP) QPN() uint32 { return q.qpn }

func (q *QP) State() verbs.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

func (q *QP) transition(from, to verbs.QPState, f func(*C.struct_ibv_qp) C.int) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qp == nil {
		return fmt.Errorf("verbs/ibverbs: QP %d: %w", q.qpn, verbs.ErrClosed)
	}
	if q.state != from {
		return fmt.Errorf("verbs/ibverbs: QP %d %s → %s: %w (it is %s)", q.qpn, from, to, verbs.ErrInvalidState, q.state)
	}
	if rc := f(q.qp); rc != 0 {
		return fmt.Errorf("verbs/ibverbs: modify QP %d %s → %s: %w", q.qpn, from, to, syscall.Errno(rc))
	}
	q.state = to
	return nil
}

func (q *QP) Init(access verbs.Access) error {
	port := q.pd.dev.port
	return q.transition(verbs.QPStateReset, verbs.QPStateInit, func(qp *C.struct_ibv_qp) C.int {
		return C.swml_qp_init(qp, C.int(port), accessFlags(access))
	})
}

func mtuEnum(m verbs.MTU) C.int {
	switch m {
	case 256:
		return C.IBV_MTU_256
	case 512:
		return C.IBV_MTU_512
	case 1024:
		return C.IBV_MTU_1024
	case 2048:
		return C.IBV_MTU_2048
	}
	return C.IBV_MTU_4096
}

func (q *QP) ReadyToReceive(attr verbs.RTRAttr) error {
	if err := attr.MTU.Check(); err != nil {
		return fmt.Errorf("verbs/ibverbs: QP %d: %w", q.qpn, err)
	}
	if !attr.RemoteAddr.IsValid() {
		return fmt.Errorf("verbs/ibverbs: QP %d: no remote address: %w", q.qpn, verbs.ErrInvalidArgument)
	}
	if attr.RemoteQPN > rdma.QPNMask || attr.RecvPSN > rdma.PSNMask {
		return fmt.Errorf("verbs/ibverbs: QP %d: remote QPN %#x / PSN %#x wider than 24 bits: %w", q.qpn, attr.RemoteQPN, attr.RecvPSN, verbs.ErrInvalidArgument)
	}
	dev := q.pd.dev
	if attr.MTU > dev.mtu {
		return fmt.Errorf("verbs/ibverbs: QP %d: path MTU %d above %s's active MTU %d (raise the netdev MTU): %w", q.qpn, attr.MTU, dev.name, dev.mtu, verbs.ErrInvalidArgument)
	}
	dgid := rdma.GIDFromAddr(attr.RemoteAddr.Unmap())
	return q.transition(verbs.QPStateInit, verbs.QPStateRTR, func(qp *C.struct_ibv_qp) C.int {
		return C.swml_qp_rtr(qp, C.int(dev.port), C.int(dev.gidIndex), (*C.uint8_t)(unsafe.Pointer(&dgid[0])),
			C.uint32_t(attr.RemoteQPN), C.uint32_t(attr.RecvPSN), mtuEnum(attr.MTU))
	})
}

func (q *QP) ReadyToSend(sendPSN uint32) error {
	if sendPSN > rdma.PSNMask {
		return fmt.Errorf("verbs/ibverbs: QP %d: send PSN %#x wider than 24 bits: %w", q.qpn, sendPSN, verbs.ErrInvalidArgument)
	}
	return q.transition(verbs.QPStateRTR, verbs.QPStateRTS, func(qp *C.struct_ibv_qp) C.int {
		return C.swml_qp_rts(qp, C.uint32_t(sendPSN))
	})
}

func wrOpcode(o verbs.WROpcode) (C.uint8_t, bool) {
	switch o {
	case verbs.WRRDMAWrite:
		return C.IBV_WR_RDMA_WRITE, true
	case verbs.WRRDMAWriteWithImm:
		return C.IBV_WR_RDMA_WRITE_WITH_IMM, true
	case verbs.WRSend:
		return C.IBV_WR_SEND, true
	case verbs.WRSendWithImm:
		return C.IBV_WR_SEND_WITH_IMM, true
	}
	return 0, false
}

// live returns the ibv_qp if the QP is open and in one of the states.
func (q *QP) live(op string, ok ...verbs.QPState) (*C.struct_ibv_qp, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qp == nil {
		return nil, fmt.Errorf("verbs/ibverbs: %s on QP %d: %w", op, q.qpn, verbs.ErrClosed)
	}
	for _, s := range ok {
		if q.state == s {
			return q.qp, nil
		}
	}
	return nil, fmt.Errorf("verbs/ibverbs: %s on QP %d in %s: %w", op, q.qpn, q.state, verbs.ErrInvalidState)
}

func postErr(op string, qpn uint32, rc C.int) error {
	errno := syscall.Errno(rc)
	if errno == syscall.ENOMEM || errno == syscall.EAGAIN {
		return fmt.Errorf("verbs/ibverbs: %s on QP %d: %w (%v)", op, qpn, verbs.ErrQueueFull, errno)
	}
	if errno == syscall.EINVAL {
		return fmt.Errorf("verbs/ibverbs: %s on QP %d: %w (%v)", op, qpn, verbs.ErrInvalidArgument, errno)
	}
	return fmt.Errorf("verbs/ibverbs: %s on QP %d: %w", op, qpn, errno)
}

// PostSend posts wrs as chains of up to MaxSendWR requests, one cgo call
// (one doorbell) per chain.
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	qp, err := q.live("post send", verbs.QPStateRTS)
	if err != nil {
		return 0, err
	}
	desc := unsafe.Slice(q.sendDesc, q.sendCap)
	done := 0
	for done < len(wrs) {
		n := min(len(wrs)-done, q.sendCap)
		for i := 0; i < n; i++ {
			w := &wrs[done+i]
			op, ok := wrOpcode(w.Opcode)
			if !ok {
				return done, fmt.Errorf("verbs/ibverbs: post send on QP %d: opcode %s: %w", q.qpn, w.Opcode, verbs.ErrInvalidArgument)
			}
			var sig C.uint8_t
			if w.Signaled {
				sig = 1
			}
			desc[i] = C.struct_swml_swr{
				wr_id: C.uint64_t(w.ID), remote_addr: C.uint64_t(w.RemoteAddr), sge_addr: C.uint64_t(w.Local.Addr),
				sge_len: C.uint32_t(w.Local.Length), lkey: C.uint32_t(w.Local.LKey), rkey: C.uint32_t(w.RKey),
				imm: C.uint32_t(w.Imm), opcode: op, signaled: sig,
			}
		}
		var posted C.int
		rc := C.swml_post_send(qp, q.sendDesc, C.int(n), q.sendWR, q.sendSGE, &posted)
		done += int(posted)
		if rc != 0 {
			return done, postErr("post send", q.qpn, rc)
		}
	}
	return done, nil
}

// PostRecv posts receive requests, one cgo call per chain of MaxRecvWR.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	qp, err := q.live("post recv", verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS)
	if err != nil {
		return 0, err
	}
	desc := unsafe.Slice(q.recvDesc, q.recvCap)
	done := 0
	for done < len(wrs) {
		n := min(len(wrs)-done, q.recvCap)
		for i := 0; i < n; i++ {
			w := &wrs[done+i]
			desc[i] = C.struct_swml_rwr{wr_id: C.uint64_t(w.ID), sge_addr: C.uint64_t(w.Local.Addr), sge_len: C.uint32_t(w.Local.Length), lkey: C.uint32_t(w.Local.LKey)}
		}
		var posted C.int
		rc := C.swml_post_recv(qp, q.recvDesc, C.int(n), q.recvWR, q.recvSGE, &posted)
		done += int(posted)
		if rc != 0 {
			return done, postErr("post recv", q.qpn, rc)
		}
	}
	return done, nil
}

// Close destroys the QP and frees its work-request arrays. Idempotent.
func (q *QP) Close() error {
	// Take the posting locks so no post is using the C arrays.
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qp == nil {
		return nil
	}
	rc := C.ibv_destroy_qp(q.qp)
	q.qp = nil
	for _, p := range []unsafe.Pointer{unsafe.Pointer(q.sendDesc), unsafe.Pointer(q.sendWR), unsafe.Pointer(q.sendSGE),
		unsafe.Pointer(q.recvDesc), unsafe.Pointer(q.recvWR), unsafe.Pointer(q.recvSGE)} {
		C.free(p)
	}
	q.sendDesc, q.sendWR, q.sendSGE, q.recvDesc, q.recvWR, q.recvSGE = nil, nil, nil, nil, nil, nil
	if rc != 0 {
		return fmt.Errorf("verbs/ibverbs: destroy QP %d: %w", q.qpn, syscall.Errno(rc))
	}
	return nil
}
