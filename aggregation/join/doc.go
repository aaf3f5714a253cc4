// Package join is what a worker process needs to join a SwitchML job, for
// an ML framework's integration as much as for `swml-rdma worker`:
//
//   - Member resolves the process's rank and the job's size (and the local
//     rank on its host) from explicit values or the environment (SWML_RANK
//     and SWML_WORKERS, then Open MPI's OMPI_COMM_WORLD_*, then torchrun's
//     RANK/WORLD_SIZE/LOCAL_RANK): the one rule of the CLI and libswml,
//     which passes C's getenv (Explicit.Getenv);
//   - DefaultSoftAddr is a rank's soft NIC address on one host, and
//     JobSessions and JobSession16 the switch sessions (float32, int32,
//     16-bit wire) of a job;
//   - OpenNIC opens the worker's NIC: the userspace RoCEv2 NIC (soft) or an
//     RDMA device through libibverbs, the device and GID chosen by the
//     worker's IP address (never a GID table index);
//   - WaitForController waits for the controller to accept connections;
//   - Join does all of it for a job: the NIC, the controller, then the
//     job's switch sessions in order (an optional one left out where the
//     switch cannot sum its width), aborting what it opened on failure —
//     the one join flow behind `swml-rdma worker`, `bench --controller`
//     and libswml, which render its *JoinError in their own terms.
//
// Errors are short and wrap this package's sentinels (ErrMembership,
// ErrNICAddr, ErrControllerUnreachable, …) or the verbs ones
// (verbs.ErrNotSupported, verbs.ErrNoDevice); what to do about them is for
// the front end to say in its own terms (a flag, a variable).
//
// The verified benchmark loop that `swml-rdma worker` runs on top of these
// is aggregation/benchmark.
//
// The package imports the verbs implementations; nothing in aggregation
// imports it.
package join
