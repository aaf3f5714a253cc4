// Package rdmadev finds the host's RDMA devices: their ports, link state and
// RoCE GID tables from sysfs (class/infiniband, class/infiniband_verbs), the
// hardware counters rxe and RNICs keep there, and the netdevs behind the
// ports over rtnetlink. It is what `swml-rdma devices` prints and how
// verbs/ibverbs picks the GID of an address (the GID index is never
// assumed).
//
// Every sysfs function takes the sysfs root (SysfsRoot on a host): the code
// that runs on a host is the code the captured fixture trees under testdata
// test. The wire format lives in package rdma; this package is the only one
// that reads the OS's view of RDMA devices.
//
// Concurrency: the functions keep no state and are safe for concurrent use;
// their results are plain values owned by the caller.
package rdmadev
