//go:build ibverbs

package ibverbs

/*
#include <infiniband/verbs.h>

// swml_reg_mr_iova: ibv_reg_mr_iova is a macro, which cgo cannot call. NULL
// with errno set on failure.
static struct ibv_mr *swml_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, int access) {
	return ibv_reg_mr_iova(pd, addr, len, iova, access);
}
*/
import "C"

import (
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/swml-rdma/swml-rdma/verbs"
)

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
	if access&verbs.AccessRemoteWrite != 0 {
		access |= verbs.AccessLocalWrite
	}
	buf, err := unix.Mmap(-1, 0, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("verbs/ibverbs: mmap %d bytes: %w", length, err)
	}
	mr, errno := C.swml_reg_mr_iova(pd, unsafe.Pointer(&buf[0]), C.size_t(length), 0, accessFlags(access))
	if mr == nil {
		_ = unix.Munmap(buf)
		e := errnoOr(errno, syscall.ENOMEM)
		if e == syscall.ENOMEM || e == syscall.EPERM {
			// Registration pins the pages, charged to RLIMIT_MEMLOCK.
			var lim unix.Rlimit
			_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim)
			return nil, fmt.Errorf("verbs/ibverbs: register %d bytes on %s: %w (locked-memory limit %s)", length, p.dev.name, e, fmtLimit(lim.Cur))
		}
		return nil, fmt.Errorf("verbs/ibverbs: register %d bytes on %s: %w", length, p.dev.name, e)
	}
	return &MR{pd: p, mr: mr, buf: buf, access: access, lkey: uint32(mr.lkey), rkey: uint32(mr.rkey)}, nil
}

func fmtLimit(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return fmt.Sprintf("%d KiB", v/1024)
}

// MR is a registered, mmap'd memory region with IOVA 0. Safe for
// concurrent use.
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
	rc, errno := C.ibv_dereg_mr(m.mr)
	m.mr = nil
	var err error
	if rc != 0 {
		err = fmt.Errorf("verbs/ibverbs: deregister MR on %s: %w", m.pd.dev.name, rcErr(rc, errno))
	}
	if e := unix.Munmap(m.buf); e != nil && err == nil {
		err = fmt.Errorf("verbs/ibverbs: munmap MR on %s: %w", m.pd.dev.name, e)
	}
	m.buf = nil
	return err
}
