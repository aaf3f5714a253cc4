// Package switchmodel is the SwitchML switch pipeline as pure Go: the seven
// controls of the Tofino program (p4/rdma_switch), each a type with the
// same name and the same state, run in the same order by a Pipeline:
//
//	RDMAReceiver → BitmapChecker → WorkersCounter → Exponents →
//	Processor → NextStep → RDMASender
//
// Process takes one parsed RoCEv2 packet (rdma.Packet) and its source
// address and fills a Metadata (the P4 ig_md): the packet's job, rank, QP
// index and pool index, the bitmap and counter verdicts, and the NextStep
// Decision — Drop (with a DropReason), Consume, Broadcast or Unicast. For
// Broadcast and Unicast, EncodeResult writes each result packet (BTH …
// payload, ICRC bytes zero) into a caller's buffer. Nothing is allocated per
// packet; state lives in flat arrays sized by Config (pool size, payload,
// workers) and in per-job arrays allocated by AddJob.
//
// The software switch (aggregation/swswitch) runs this package on every
// packet, so the model is the switch's behaviour, not a simulation of it;
// docs/switch.md has the decision table and state sizes.
//
// The model is deterministic: the same packets in the same order give the
// same state, decisions and result bytes.
//
// Concurrency: a Pipeline is not safe for concurrent use. One goroutine runs
// Process, EncodeResult, AddJob and RemoveJob, or the caller serialises them
// (the software switch holds a mutex per batch). A Metadata's references
// into the state are valid until the next of those calls. Counters are
// plain integers read under the same rule.
package switchmodel
