// Package control is the SwitchML control plane: a gRPC server
// (Controller) wire-compatible with p4app-switchML's switchml_proto plus
// swml-rdma extensions, a worker-side Client, and the Programmer interface
// switch backends implement. docs/control-plane.md describes the messages,
// the sequence of a session, timeouts and teardown.
//
// A job comes to life when all num_workers ranks of a session have called
// RdmaSession: the controller allocates the job a contiguous pool range
// (q QPs × packets per message slots; QP i owns slots base + i·ppm …) and
// switch QPNs (a counter-allocated range for the software switch, or
// wire.P4AppQPN for Tofino), installs it with Programmer.AddJob and answers
// every rank. The job ends — Programmer.RemoveJob, ranges freed — when every
// rank has called EndSession, one rank aborts, a rank's KeepAlive stream
// closes before it ended, a rank never opens KeepAlive within the liveness
// timeout, or the controller closes.
//
// Files: controller.go (Controller, its Config and gRPC services),
// programmer.go (Programmer), auth.go (tokens, who may call), sync.go
// (Barrier, Broadcast), client.go (Client), metrics.go; and a session's way
// from registration to the end of its job, one concern per file
// (session.go's header follows one job through them): session.go (the
// state), register.go (one request, checked on its own), rendezvous.go (the
// ranks meet), p4app.go (p4app-switchML workers), alloc.go (the job's pool
// range, QPNs and PSNs, installed), liveness.go (KeepAlive, the liveness
// and idle checks), waiting.go (WaitingFor: the ranks a stalled job waits
// for), teardown.go (EndSession, a job's end), list.go (ListJobs).
//
// Concurrency: Controller and Client are safe for concurrent use. The
// controller holds one mutex over its tables and never holds it across a
// Programmer call; each job, pending session and sync generation has a
// done channel its waiters select on with their context.
//
// The generated protobuf and gRPC code lives in control/switchmlpb.
package control
