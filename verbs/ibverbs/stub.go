//go:build !ibverbs

package ibverbs

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/swml-rdma/swml-rdma/verbs"
)

// built reports whether the cgo backend is compiled in.
const built = false

var errNotBuilt = fmt.Errorf("verbs/ibverbs: built without -tags ibverbs: %w", verbs.ErrNotSupported)

// Device is an open libibverbs device. In this build (no ibverbs tag) it
// cannot be opened.
type Device struct{}

// Open always fails in a build without the ibverbs tag.
func Open(name string, addr netip.Addr) (*Device, error) { return nil, errNotBuilt }

func (d *Device) Name() string                   { return "" }
func (d *Device) Addr() netip.Addr               { return netip.Addr{} }
func (d *Device) Port() int                      { return 0 }
func (d *Device) GIDIndex() int                  { return -1 }
func (d *Device) ActiveMTU() verbs.MTU           { return 0 }
func (d *Device) AllocPD() (verbs.PD, error)     { return nil, errNotBuilt }
func (d *Device) CreateCQ(int) (verbs.CQ, error) { return nil, errNotBuilt }
func (d *Device) Close() error                   { return nil }
func (d *Device) VendorID() uint32               { return 0 }
func (d *Device) UCTruncatedWriteWedges() bool   { return false }
func (d *Device) SetBusyPoll(time.Duration)      {}

// RxeVendorID is the vendor id Linux Soft-RoCE (rdma_rxe) reports.
const RxeVendorID = 0xFFFFFF

var _ verbs.Device = (*Device)(nil)

// NoKernelSupport is the message of the error the cgo build returns when the
// kernel has no RDMA subsystem.
const NoKernelSupport = "no RDMA support in this kernel"
