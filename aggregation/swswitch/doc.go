// Package swswitch is the software SwitchML switch: a RoCEv2 endpoint on UDP
// 4791 at its own IP address that terminates the workers' UC RDMA WRITEs,
// aggregates them with the switch model (aggregation/switchmodel) and sends
// each finished slot back as RDMA WRITEs with exact ICRCs — to every worker
// of the job, or to one worker for a retransmission into a completed slot.
//
// The controller (aggregation/control) programs it through AddJob and
// RemoveJob: *Switch implements control.Programmer. Jobs are isolated: each
// has its own pool range, (worker address, switch QPN) pairs and worker
// table, and packets outside them are dropped and counted before they touch
// any slot.
//
// I/O is batched through verbs/soft/udp (recvmmsg/sendmmsg, caller-owned
// buffers, no allocation per packet); with one core, the requests of a GRO
// datagram are run where the kernel put them (udp.Lender), not copied
// first. Incoming ICRCs are verified over IPv6,
// and over IPv4 when senders use Identification 0 (ICRCVerify, the default,
// right for verbs/soft workers); ICRCVerifyIPv6 skips IPv4 peers such as rxe
// whose Identification a UDP socket cannot see. A drop simulator (ingress
// and egress loss, seeded), pcap capture of every datagram, and Prometheus
// metrics (swml_switch_…, on a registry passed in) are configurable.
//
// Cores (docs/switch.md, "Cores"): the switch runs on Config.Cores cores,
// each with a pipeline of its own that owns whole QP indices of every job,
// and so their slots (steer.go: the core key). Readers — one per socket of
// a SO_REUSEPORT group steered by source address, or one on a single
// endpoint — verify ICRCs and hand each request to its core in batches, in
// arrival order.
//
// Concurrency: a reader goroutine per socket, and with more than one core a
// goroutine per core that runs its batches under the core's mutex and
// sends the results; with one core the reader does that itself. AddJob and
// RemoveJob take every core's mutex in turn (under a job lock) and replace
// the core table, which readers load without a lock; Stats and metric
// scrapes take each core's mutex between its batches. All methods are safe
// for concurrent use; Close is idempotent and waits for the goroutines.
package swswitch
