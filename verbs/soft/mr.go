package soft

import (
	"fmt"
	"sync/atomic"

	"github.com/swml-rdma/swml-rdma/verbs"
	"golang.org/x/sys/unix"
)

// PD is a protection domain of a userspace NIC.
type PD struct {
	dev    *Device
	closed atomic.Bool
}

var _ verbs.PD = (*PD)(nil)

// MR is a zero-based memory region in anonymous mmap'd memory (outside the
// Go heap, as with the ibverbs backend). lkey == rkey.
type MR struct {
	dev    *Device
	buf    []byte
	key    uint32
	access verbs.Access
	closed atomic.Bool
}

var _ verbs.MR = (*MR)(nil)

// AllocMR allocates and registers length bytes.
func (p *PD) AllocMR(length int, access verbs.Access) (verbs.MR, error) {
	if err := p.dev.checkOpen(); err != nil {
		return nil, err
	}
	if length <= 0 || length > 1<<40 {
		return nil, fmt.Errorf("soft: register MR of %d bytes: %w: the length must be positive", length, verbs.ErrInvalidArgument)
	}
	buf, err := unix.Mmap(-1, 0, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("soft: mmap %d bytes for an MR: %w", length, err)
	}
	d := p.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		_ = unix.Munmap(buf) // undoing our own mmap; ErrClosed is the error to report
		return nil, fmt.Errorf("soft: %s: %w", d.name, verbs.ErrClosed)
	}
	// Keys look like rxe's: index in the high 24 bits, a varying low byte.
	key := d.nextKey<<8 | (d.nextKey*0x9E)&0xFF
	d.nextKey++
	m := &MR{dev: d, buf: buf, key: key, access: access}
	d.mrs[key] = m
	return m, nil
}

func (m *MR) Bytes() []byte        { return m.buf }
func (m *MR) LKey() uint32         { return m.key }
func (m *MR) RKey() uint32         { return m.key }
func (m *MR) IOVA() uint64         { return 0 }
func (m *MR) Access() verbs.Access { return m.access }

// Close deregisters the MR and unmaps its memory. Idempotent. The receive
// goroutine writes into MRs under the device read lock, so once Close holds
// the write lock no remote write can touch the memory.
func (m *MR) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	d := m.dev
	d.mu.Lock()
	delete(d.mrs, m.key)
	d.mu.Unlock()
	err := unix.Munmap(m.buf)
	m.buf = nil
	return err
}

// Close is idempotent; the PD holds no resources of its own.
func (p *PD) Close() error {
	p.closed.Store(true)
	return nil
}

// lookupMR returns the MR with key k; the caller holds d.mu (read).
func (d *Device) lookupMR(k uint32) *MR { return d.mrs[k] }
