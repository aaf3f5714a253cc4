// Package p4rt is the Tofino backend of the controller: a control.Programmer
// that installs SwitchML jobs into p4/rdma_switch over P4Runtime
// (github.com/p4lang/p4runtime v1.5.0).
//
// Dial the switch's P4Runtime server (Stratum, or the SDE's bf_switchd
// P4Runtime server), load the P4Info bf-p4c wrote (--p4runtime-files) with
// LoadP4Info, and call New: it becomes primary controller for the device
// (arbitration with an election id), optionally pushes the pipeline
// (SetForwardingPipelineConfig), and sets the switch address and drop
// simulator. AddJob then writes, per job: the PSN and receiver QP state
// registers, the sender tables (worker MAC/IP/rkey; QPN per QP), the
// multicast group (one replica per worker, instance = rid = rank), and last
// the receive table (one ternary entry per worker on the wire.P4AppQPN
// prefix), so a job's packets only reach the pipeline once everything
// behind the receive table is in place. RemoveJob undoes it in the reverse
// order and clears the job's slot registers. JobProgress reads a job's
// WorkersCounter and BitmapChecker registers back, for the controller to
// name the ranks a stalled job waits for (control.ProgressReporter).
// Every table, action, register
// and counter is resolved by name (names.go) through the P4Info; a failed
// write reports the entity it was writing.
//
// Concurrency: a Programmer is safe for concurrent use; writes are
// serialised by one mutex (P4Runtime has one primary per device anyway).
package p4rt
