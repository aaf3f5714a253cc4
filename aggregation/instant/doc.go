// Package instant is an instant switch: a SwitchML switch and the worker's
// NIC in one in-process verbs.Device, with nothing between them, so that a
// worker engine (package aggregation) runs alone and what it costs can be
// measured (`swml-rdma bench --switch instant`, BenchmarkEngineAlone in
// aggregation/benchmark).
//
// A worker's RDMA WRITE WITH IMMEDIATE to the switch is answered inside the
// poster's own PostSend call: the switch checks the request as the switch
// pipeline does (switch QPN, packet size, pool range of the rkey;
// aggregation/wire), and writes the result back into the worker's receive
// region at the request's va, with the request's immediate, consuming a
// posted receive and adding its completion to the worker's CQ. There is no
// goroutine hop, no socket, no packetisation and no ICRC; the one copy of
// the payload into the receive region is the one an RNIC's DMA makes.
//
// The switch serves one-worker jobs only: the sum over one worker is its
// contribution and the exponents' maximum over one worker are its own, so
// the result is the request's payload and immediate exactly as the switch
// pipeline (aggregation/switchmodel) would write them back. Jobs of more
// workers are refused by AddJob: their results would need the other
// workers' contributions, which is the work of a real switch.
//
// Start runs the switch, its controller (aggregation/control, gRPC on a
// loopback port: aggregation.Open needs one) and one worker Device.
// Addresses are 10.x by default: nothing reaches a socket but the
// controller's TCP.
//
// Concurrency: every method is safe for concurrent use. A QP's PostSend
// and PostRecv, and a CQ's Poll, take a mutex each; the switch's answer
// runs on the poster's goroutine.
package instant
