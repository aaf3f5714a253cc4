//go:build ibverbs

package ibverbs

/*
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

// swml_wc is a completion as Go reads it from C memory: ibv_wc's imm_data
// sits in a union cgo cannot name.
struct swml_wc {
	uint64_t wr_id;
	uint32_t status, opcode, qp_num, byte_len, imm, flags;
};

// swml_create_cq creates a CQ with its own completion channel; NULL with
// errno set on failure.
static struct ibv_cq *swml_create_cq(struct ibv_context *ctx, int n, struct ibv_comp_channel **ch) {
	*ch = ibv_create_comp_channel(ctx);
	if (!*ch)
		return NULL;
	struct ibv_cq *cq = ibv_create_cq(ctx, n, NULL, *ch, 0);
	if (!cq) {
		int e = errno;
		ibv_destroy_comp_channel(*ch);
		*ch = NULL;
		errno = e;
	}
	return cq;
}

static int swml_req_notify(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

// swml_get_event takes one event off the completion channel (whose fd is
// non-blocking) and acknowledges it: 0, or -1 with errno set (EAGAIN: no
// event yet).
static int swml_get_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *cq_ctx;
	if (ibv_get_cq_event(ch, &cq, &cq_ctx) != 0)
		return -1;
	ibv_ack_cq_events(cq, 1);
	return 0;
}

// swml_poll drains up to n completions into out, through the CQ's own
// ibv_wc array: one cgo call per batch.
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
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/swml-rdma/swml-rdma/verbs"
)

const (
	// pollBatch is the most completions one cgo call drains; the CQ's C
	// arrays hold this many.
	pollBatch = 64
	// busyPoll is how long verbs.Await polls an empty CQ before it arms
	// the completion channel (verbs.BusyPoller). A wake-up through the
	// channel costs ibv_req_notify_cq, a poller wake-up of readEvents,
	// ibv_get_cq_event and ibv_ack_cq_events (system calls on the
	// channel's fd) and a goroutine hand-off; a poll is one cgo call
	// reading the CQ's ring in user memory. A completion that follows
	// within this bound (the next result of a window of messages in
	// flight) is caught by polling, as RDMA libraries poll before they
	// sleep; an idle CQ costs this much CPU per Await, then blocks. The
	// bound is about what a blocking wake-up costs, so spinning in vain
	// costs at most as much again (spin-then-block); it is not measured
	// on an RNIC here (CQ.BusyPoll: not on rxe).
	busyPoll = 20 * time.Microsecond
)

// CQ is a completion queue. Poll drains up to pollBatch completions per cgo
// call into C memory owned by the CQ, allocating nothing. Poll,
// RequestNotify and Wait are called from one goroutine at a time.
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
	wc         *C.struct_ibv_wc   // pollBatch entries
	out        *C.struct_swml_wc  // pollBatch entries
	outs       []C.struct_swml_wc // out as a slice
}

var (
	_ verbs.CQ         = (*CQ)(nil)
	_ verbs.BusyPoller = (*CQ)(nil)
)

// newCQ creates the CQ, its completion channel, its C arrays and the
// goroutine that reads the channel.
func newCQ(d *Device, ctx *C.struct_ibv_context, entries int) (*CQ, error) {
	var ch *C.struct_ibv_comp_channel
	cq, errno := C.swml_create_cq(ctx, C.int(entries), &ch)
	if cq == nil {
		return nil, fmt.Errorf("verbs/ibverbs: create CQ(%d) on %s: %w", entries, d.name, errnoOr(errno, syscall.ENOMEM))
	}
	c := &CQ{
		dev:    d,
		cq:     cq,
		ch:     ch,
		notify: make(chan struct{}, 1),
		wc:     (*C.struct_ibv_wc)(C.calloc(pollBatch, C.size_t(unsafe.Sizeof(C.struct_ibv_wc{})))),
		out:    (*C.struct_swml_wc)(C.calloc(pollBatch, C.size_t(unsafe.Sizeof(C.struct_swml_wc{})))),
	}
	if c.wc == nil || c.out == nil {
		c.destroy()
		return nil, fmt.Errorf("verbs/ibverbs: create CQ(%d) on %s: completion arrays: %w", entries, d.name, syscall.ENOMEM)
	}
	c.outs = unsafe.Slice(c.out, pollBatch)
	if err := c.startEvents(); err != nil {
		c.destroy()
		return nil, fmt.Errorf("verbs/ibverbs: completion channel of a CQ on %s: %w", d.name, err)
	}
	return c, nil
}

// destroy frees what newCQ made before the event reader started.
func (c *CQ) destroy() {
	C.ibv_destroy_cq(c.cq)
	C.ibv_destroy_comp_channel(c.ch)
	C.free(unsafe.Pointer(c.wc))
	C.free(unsafe.Pointer(c.out))
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
	// O_NONBLOCK is a property of the open file, shared with the
	// channel's own fd: ibv_get_cq_event returns EAGAIN instead of blocking.
	if err := unix.SetNonblock(fd, true); err != nil {
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
			r, errno := C.swml_get_event(c.ch)
			if r == 0 {
				return true
			}
			if errnoOr(errno, syscall.EIO) == syscall.EAGAIN {
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

// Poll moves up to len(wcs) completions into wcs without blocking, one cgo
// call per pollBatch.
func (c *CQ) Poll(wcs []verbs.Completion) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cq == nil {
		return 0, fmt.Errorf("verbs/ibverbs: poll CQ: %w", verbs.ErrClosed)
	}
	total := 0
	for total < len(wcs) {
		n := min(len(wcs)-total, pollBatch)
		got := int(C.swml_poll(c.cq, c.wc, c.out, C.int(n)))
		if got < 0 {
			return total, fmt.Errorf("verbs/ibverbs: poll CQ on %s: ibv_poll_cq returned %d", c.dev.name, got)
		}
		for i, o := range c.outs[:got] {
			wcs[total+i] = verbs.Completion{
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

// BusyPoll is how long verbs.Await polls this CQ before it arms it: the
// device's (Device.SetBusyPoll). By default busyPoll, but not at all on
// Soft-RoCE: rxe's NIC is the host's CPU (the kernel's rxe tasks complete
// the work), and a spinning worker takes it from them
// (docs/benchmarks.md "libibverbs: busy poll").
func (c *CQ) BusyPoll() time.Duration { return time.Duration(c.dev.spin.Load()) }

// RequestNotify arms the CQ (ibv_req_notify_cq): the next completion
// sends an event on Notifications.
func (c *CQ) RequestNotify() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cq == nil {
		return fmt.Errorf("verbs/ibverbs: arm CQ: %w", verbs.ErrClosed)
	}
	if rc, errno := C.swml_req_notify(c.cq); rc != 0 {
		return fmt.Errorf("verbs/ibverbs: arm CQ on %s: %w", c.dev.name, rcErr(rc, errno))
	}
	return nil
}

// Notifications is the CQ's completion channel.
func (c *CQ) Notifications() <-chan struct{} { return c.notify }

// Wait blocks on the completion channel until a completion arrives or ctx
// is done.
func (c *CQ) Wait(ctx context.Context, wcs []verbs.Completion) (int, error) {
	return verbs.Wait(ctx, c, wcs)
}

// Close destroys the CQ. Idempotent. libibverbs refuses (EBUSY) while QPs
// use the CQ.
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
	rc, errno := C.ibv_destroy_cq(c.cq)
	c.cq = nil
	err := rcErr(rc, errno)
	if rc, errno := C.ibv_destroy_comp_channel(c.ch); rc != 0 && err == nil {
		err = rcErr(rc, errno)
	}
	c.ch = nil
	C.free(unsafe.Pointer(c.wc))
	C.free(unsafe.Pointer(c.out))
	c.wc, c.out, c.outs = nil, nil, nil
	if err != nil {
		return fmt.Errorf("verbs/ibverbs: destroy CQ on %s: %w", c.dev.name, err)
	}
	return nil
}

// cqOf is the ibv_cq of a CQ this package created.
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
