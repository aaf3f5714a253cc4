// Package ring is the ring all-reduce that `swml-rdma bench` measures
// SwitchML against (docs/bench.md "The ring baseline"): reduce-scatter, then
// all-gather, among N ranks over the same verbs devices the SwitchML
// workers use, made reliable over UC with a window of acknowledged messages
// and retransmission. Ring's doc comment gives the protocol; docs/bench.md
// the numbers it is compared by.
//
// A Rank is an aggregation.AllReducer, as an aggregation.Session is, so
// the benchmark loop drives both the same way.
//
// Files: ring.go (Ring, Rank, New, Close; the protocol in Ring's doc
// comment, and a map of the files), config.go, stats.go, call.go
// (AllReduce); engine.go, a rank's engine loop, and the flows it runs, one
// per file: send.go (the window, an item out), receive.go (an item in,
// consumed once), ack.go (acknowledgements, fast retransmit), rto.go (the
// retransmission timer), items.go (which elements an item carries, its
// slots and immediate).
//
// Concurrency: New builds every rank in one process; Rank(i).AllReduce is
// called by one goroutine per rank (calls on one rank run one at a time);
// Close may be called from any goroutine, to abort calls in progress too.
// Each rank runs one engine goroutine for the ring's lifetime; its timers
// and round-trip estimator are those of the SwitchML engine
// (aggregation/internal/timing).
package ring
