// Package soft is a userspace RoCEv2 NIC in pure Go: it implements the verbs
// interfaces (device, PD, zero-based MRs, CQs, UC QPs) over a UDP socket on
// port 4791 of one local address, and sends and accepts exactly the packets a
// hardware RNIC or Linux rxe does (same opcodes, PSNs, RETH/ImmDt, ICRC).
// The socket is a udp.Endpoint: Config.Endpoint puts the NIC on another one,
// such as an in-memory link of verbs/soft/udp/memlink, for tests that run
// the real NIC without sockets.
//
// Send: PostSend segments each RDMA WRITE [WITH IMMEDIATE] into path-MTU
// packets (FIRST / MIDDLE / LAST[_WITH_IMMEDIATE], or ONLY[_WITH_IMMEDIATE]),
// consecutive PSNs, RETH on the first, ImmDt on the last, ICRC sealed, and
// hands them to the socket in batches before it returns; a signaled WR then
// completes on the send CQ. Over IPv4 the socket sends Identification 0 with
// DF, so receivers can verify the ICRC (see verbs/soft/udp).
//
// Staged sends: the packets of every QP of a device go through one transmit
// queue. QP.PostSendStaged builds them (PSNs, headers, ICRC) without sending;
// the next QP.Doorbell (or PostSend, or a full queue) sends everything
// queued in one system call, ordered so that UDP GSO carries each round of
// equal-size packets to one destination as one datagram (udp.Scheduler),
// each QP's PSN order kept. A caller driving several QPs (the aggregation
// worker engine) stages each ready message and rings once. Signaled work
// requests complete after their packets are sent.
//
// Receive: one goroutine per device reads batches, demultiplexes by
// destination QPN and applies the UC rules as rxe does (a batch under one
// read lock of the device, its counters added once). On a GRO socket the
// packets are read where the kernel put them (udp.Lender), so a payload is
// copied once in user space, into the MR, as an RNIC's DMA writes it: FIRST/ONLY start a
// message at any PSN; MIDDLE/LAST must continue the sequence or the rest of
// that message is dropped. The RETH rkey, address range, length and the MR's
// remote-write access are checked before any byte is written; a WRITE WITH
// IMMEDIATE consumes a posted receive and completes on the receive CQ with
// the immediate, and its LAST/ONLY packet, finding no receive posted, is
// dropped before its payload is written (rxe checks the receive queue
// first too). Every drop is counted by reason (Stats), never a panic.
//
// Concurrency: as documented in package verbs; PostSendStaged and Doorbell
// are safe for concurrent use with the device's other QPs. Close on the device stops its
// receive goroutine and closes the socket; it is idempotent.
package soft
