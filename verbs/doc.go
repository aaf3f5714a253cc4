// Package verbs defines the RDMA verbs interfaces that every NIC backend of
// swml-rdma implements: devices, protection domains, zero-based memory
// regions, completion queues and unreliable-connected (UC) queue pairs with
// RDMA WRITE / WRITE WITH IMMEDIATE work requests.
//
// The shapes follow libibverbs closely so that verbs/ibverbs (cgo over the
// system libibverbs) is a thin mapping, while verbs/soft implements the same
// interfaces as a pure-Go RoCEv2 NIC over UDP sockets. Code above this package
// (the worker engine, the benchmarks) depends only on these interfaces.
//
// Two capabilities go beyond the plain verbs: a CQ's completion
// notification (RequestNotify and Notifications, libibverbs'
// ibv_req_notify_cq and completion channel; Await blocks on it together
// with a caller's wake-up channel, after polling a BusyPoller CQ for a
// bounded time), and StagedSender, the QPs whose sends
// can be staged and sent with one doorbell for the whole device.
//
// Concurrency: Device, PD and MR methods are safe for concurrent use. A QP's
// PostSend and PostRecv may run on different goroutines, each from one
// goroutine at a time; a CQ is polled and armed from one goroutine at a time.
package verbs
