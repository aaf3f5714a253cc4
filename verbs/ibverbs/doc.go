// Package ibverbs implements the verbs interfaces over the system libibverbs
// (cgo): real RoCE NICs and Linux Soft-RoCE (rdma_rxe).
//
// It is the only package of swml-rdma with import "C", and it is compiled
// only with the build tag ibverbs (go build -tags ibverbs; needs
// libibverbs-dev). Without the tag, Open returns an error wrapping
// verbs.ErrNotSupported, so the default build stays pure Go and
// CGO_ENABLED=0 builds work.
//
// Memory: registered buffers are mmap'd (never Go heap) and registered with
// ibv_reg_mr_iova at IOVA 0, so remote addresses and local SGE addresses are
// offsets into MR.Bytes(). Work-request and completion arrays live in C
// memory owned by the QP or CQ, sized once; PostSend posts a whole chain
// and Poll drains a whole batch with one cgo call each, and neither
// allocates.
//
// Files follow verbs/soft's layout, each with the C helpers its Go code
// calls in its own cgo preamble: device.go (device list, Open, queries, PD),
// cq.go (CQ, completion channel, Poll, notification), qp.go (UC QP,
// transitions, PostSend, PostRecv), mr.go (MR). Every call that can fail
// goes through cgo's two-result form, so its errno stays a syscall.Errno,
// wrapped with the operation and the object.
//
// Each CQ has its own completion channel (ibv_comp_channel). One goroutine
// per CQ waits for its events in the Go runtime's poller (the channel's fd,
// non-blocking), acknowledges each and forwards it to CQ.Notifications: a
// blocked waiter holds no thread and no timer, and wakes when the NIC
// completes work, not on a polling interval. Before it blocks, verbs.Await
// polls the CQ of a hardware RNIC for a few microseconds (CQ.BusyPoll; not
// on rxe, whose NIC is the host's CPU): a completion that follows that
// closely costs a cgo call instead of a wake-up through the channel.
//
// The GID index a QP sends from is looked up in sysfs (gid_attrs/types =
// "RoCE v2" and the GID equal to the device's address, IPv4-mapped for
// IPv4); it is never assumed.
//
// Ownership and concurrency: every C object belongs to one Go value whose
// Close is idempotent; close QPs, MRs and CQs before their PD and device.
// Device, PD and MR methods are safe for concurrent use; a QP's PostSend
// and PostRecv may run on two goroutines, each from one at a time; a CQ is
// polled from one goroutine at a time.
package ibverbs
