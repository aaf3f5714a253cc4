// Package rdma is the RoCEv2 wire format: zero-allocation header views
// (BTH, RETH, ImmDt, AETH), opcodes, 24-bit QPN/PSN arithmetic, the
// invariant CRC (ICRC), and building and parsing whole RoCEv2 datagrams over
// IPv4 and IPv6 (Ethernet / IP / UDP 4791 / BTH / … / ICRC).
//
// Headers follow the gVisor netstack style: a header is a named byte slice
// whose accessors trust a length validated once by the parser (Packet.Parse,
// ParseFrame) or guaranteed by the caller; construction goes through a
// …Fields struct and its Encode method.
//
// Concurrency: views and Fields are plain values. An ICRC hasher owns scratch
// space and must not be shared between goroutines; use one per goroutine.
package rdma
