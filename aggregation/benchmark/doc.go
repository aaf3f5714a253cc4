// Package benchmark is the verified all-reduce benchmark of `swml-rdma
// bench` and `swml-rdma worker`, for integrators as much as for the CLI:
//
//   - MakeInputs and Checker: every rank's deterministic input, and the
//     check of a result against the float64 (int32: exact) reference built
//     from all of them, so any process of a job can verify its result;
//   - Run: the loop — warm-up and measured all-reduces on the ranks this
//     process runs (one for a worker process, all of them in process),
//     every result checked; Summarize turns its times into the reported
//     median, minimum, maximum, ATE/s and Gbit/s;
//   - Embedded: the whole job in one process on an aggregation/local
//     cluster, SwitchML and then the ring all-reduce among the same workers
//     over the same NICs, as `swml-rdma bench` runs it;
//   - EngineAlone: one worker's engine on an instant switch
//     (aggregation/instant), measured against copy() of its tensor
//     (CopyTime), as `swml-rdma bench --switch instant` runs it.
//
// Run calls the AllReducers of one all-reduce concurrently, one goroutine
// per rank, and returns when all have returned; nothing else in the package
// starts goroutines that outlive a call.
package benchmark
