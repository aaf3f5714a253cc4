// Package aggregation is the SwitchML worker: in-network all-reduce over
// RoCEv2. A Session joins a job through the controller (package control),
// connects Config.QPs unreliable-connected QPs to the switch (the Tofino
// program or the software switch) and runs AllReduce: the tensor is cut into
// messages, quantized to int32 (package quant), written to the switch as
// RDMA WRITE WITH IMMEDIATE, summed there with every other worker's, and
// written back as results, which are dequantized into the caller's slice.
// A worker sends and receives the tensor's size once, whatever the number of
// workers.
//
//	sess, err := aggregation.Open(ctx, aggregation.Config{
//		Device: dev, ControllerAddr: "127.0.0.1:50099",
//		SessionID: 1, Rank: rank, Workers: n,
//	})
//	...
//	err = sess.AllReduce(ctx, grads) // grads now holds the sum over workers
//	...
//	sess.Close()
//
// The sub-packages hold the rest of the system: wire (the worker ⇄ switch
// wire contract), quant (block floating point), switchmodel and swswitch
// (the switch pipeline and the software switch), control (the controller).
//
// # Protocol
//
// docs/protocol.md describes the worker protocol the engine implements: the
// buffer layout, the exponent look-ahead (the first round on each QP carries
// exponents only), sets and the switch's bitmaps, loss recovery by
// retransmission of identical messages, the quantization error bound and how
// jobs share a switch. In short: at most one message in flight per QP, and
// per worker at most what the path needs (Config.QueueDelay); QP i sends
// tensor messages i, i+q, i+2q, …; every new message flips the QP's set bit
// and advances its 16-bit message id, a retransmission changes neither; a
// result whose message id is not the one in flight is a duplicate and is
// dropped.
//
// # Failures
//
// A message without a result is resent as soon as the result of a message
// sent after it, on another QP, is back and a reordering window has passed
// (RACK, RFC 8985: the QPs of a worker share one path through one switch,
// so that is evidence of loss), or else when its QP's timer expires: the
// timeout adapts to the measured time to result, queueing included (RFC
// 6298: smoothed RTT + 4 × its variation, never below RetransmitTimeout,
// bounded by 4 × the standing time to result of the last round trip or
// two, or that plus the time the packets in flight take to drain at the
// measured delivery rate, whichever is longer)
// and doubles on every expiry of the same message that brought no news
// (after BackoffAfter of them), up to MaxRetransmitTimeout
// (docs/protocol.md "Loss recovery" and "Congestion").
// After PeerTimeout without a
// result, AllReduce fails with a *PeerTimeoutError wrapping ErrPeerTimeout
// (and ErrHeavyLoss when other QPs kept getting results, or ErrWaitingForRank
// when the controller named the ranks the job waits for, read from the
// switch's slots: docs/control-plane.md "Who a stalled job waits for");
// when the controller aborts
// the job (another worker's connection broke, or it aborted), AllReduce fails
// at once with an error wrapping control.ErrJobEnded. Either failure, and a
// cancelled context, leaves this worker out of step with the others: the
// session is broken (ErrBroken) and must be closed, and Close then aborts
// the job for every worker. Bad input (an empty tensor, NaN or ±Inf) is
// reported before anything is sent and leaves the session usable.
//
// # Concurrency and memory
//
// A Session is safe for concurrent use, but AllReduce calls are serialised:
// one runs at a time. Each runs on the caller's goroutine, which drives the
// completion queue itself (engine.go: poll → complete → timers → doorbell →
// wait; send.go, receive.go and timers.go follow one message out, back,
// and through loss); no goroutine is started per call or per packet,
// and the steady state allocates nothing per message. The registered
// buffer is 9 × QPs × message bytes (eight receive regions, which late
// copies of results cannot reach in time to corrupt a sum, and a send
// staging region per QP: docs/protocol.md "Buffer layout"), independent of
// the tensor size; the tensor itself is read
// and written in place, never copied.
package aggregation
