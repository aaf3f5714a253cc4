// Package udp is the RoCEv2 datagram endpoint shared by the userspace NIC
// (verbs/soft) and the software switch (aggregation/swswitch). Endpoint is
// the seam both hold (batch read, batch write, local address, batch size,
// stats, close; verbs/soft/udp/memlink is an in-memory one); Conn is the
// real one: a UDP socket
// on one local address and port 4791 with batched I/O (recvmmsg/sendmmsg,
// caller-owned buffers, no allocation per packet), UDP GSO and GRO where the
// kernel has them (probed once, cached; plain sendmmsg/recvmmsg otherwise,
// and if a GSO send is refused), optional pcap capture of every packet in
// and out, and optional seeded loss injection. Offload changes how many
// datagrams and system calls carry the packets, never the packets: capture,
// loss and the counters act on individual packets (see Offload).
//
// Sending RoCEv2 from a plain UDP socket: over IPv4 the socket is unconnected
// and has IP_MTU_DISCOVER = IP_PMTUDISC_DO, so the kernel sends DF=1 and IPv4
// Identification 0, which lets the sender compute the exact ICRC (the ICRC
// covers the Identification). Over IPv6 the socket sets UDP_NO_CHECK6_RX so
// that datagrams with UDP checksum 0 (as rxe sends them) are accepted.
//
// ListenGroup opens several endpoints on one address with SO_REUSEPORT, so
// that as many goroutines receive in parallel, and attaches a classic BPF
// program that picks the endpoint of each arriving datagram
// (SO_ATTACH_REUSEPORT_CBPF; ReusePortSteering probes for it once): the
// software switch's cores (docs/switch.md, "Cores").
//
// The endpoint is Linux-only (conn_linux.go, offload_linux.go): elsewhere
// the package builds, and Listen fails with an error wrapping
// verbs.ErrNotSupported (conn_other.go).
//
// Concurrency: ReadBatch must be called from one goroutine at a time;
// WriteBatch may be called from any number of goroutines (calls are
// serialised). Stats and Close are safe at any time.
package udp
