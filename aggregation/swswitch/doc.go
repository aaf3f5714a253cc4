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
// buffers, no allocation per packet). Incoming ICRCs are verified over IPv6,
// and over IPv4 when senders use Identification 0 (ICRCVerify, the default,
// right for verbs/soft workers); ICRCVerifyIPv6 skips IPv4 peers such as rxe
// whose Identification a UDP socket cannot see. A drop simulator (ingress
// and egress loss, seeded), pcap capture of every datagram, and Prometheus
// metrics (swml_switch_…, on a registry passed in) are configurable.
//
// Concurrency: one goroutine per Switch receives a batch, runs it through
// the model under the switch's mutex and sends the results; AddJob,
// RemoveJob, Stats and metric scrapes take the same mutex between batches.
// All methods are safe for concurrent use; Close is idempotent and waits for
// the goroutine.
package swswitch
