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
// Concurrency: Device, PD and MR methods are safe for concurrent use. A QP's
// PostSend and PostRecv may run on different goroutines, each from one
// goroutine at a time; a CQ is polled from one goroutine at a time.
package verbs
