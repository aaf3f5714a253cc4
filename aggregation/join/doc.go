// Package join is what a worker process needs to join a SwitchML job, for
// an ML framework's integration as much as for `swml-rdma worker`:
//
//   - Member resolves the process's rank and the job's size (and the local
//     rank on its host) from explicit values or the launcher's environment
//     (Open MPI's OMPI_COMM_WORLD_*, torchrun's RANK/WORLD_SIZE/LOCAL_RANK);
//   - OpenNIC opens the worker's NIC: the userspace RoCEv2 NIC (soft) or an
//     RDMA device through libibverbs, the device and GID chosen by the
//     worker's IP address (never a GID table index);
//   - WaitForController waits for the controller to accept connections.
//
// The verified benchmark loop that `swml-rdma worker` runs on top of these
// is aggregation/benchmark.
//
// The package imports the verbs implementations; nothing in aggregation
// imports it.
package join
