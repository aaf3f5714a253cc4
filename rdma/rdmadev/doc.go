// Package rdmadev finds the host's RDMA devices: their ports, link state and
// RoCE GID tables from sysfs (class/infiniband, class/infiniband_verbs), the
// counters rxe and RNICs keep there (hw_counters, counters), the RDMA device
// behind a netdev, and the netdevs behind the ports over rtnetlink. It is
// what `swml-rdma devices` prints, how verbs/ibverbs picks the GID of an
// address (the GID index is never assumed), and the source of the worker's
// swml_rdma_* metrics (CounterCollector).
//
// On the host's sysfs (SysfsRoot) the device list, the netdev → device
// mapping and the port counters come from github.com/Mellanox/rdmamap.
// Every function also takes another sysfs root: a captured tree (testdata,
// from the QEMU guest) is read by this package's own code, as rdmamap
// serves only /sys; the QEMU scenario "rdmadev" checks on the guest's real
// rxe that both agree. Port state, GID tables, a software device's parent
// and uverbs are read here on every root (rdmamap does not cover them). A
// kernel without RDMA is no error beyond ErrNoRDMADevices.
//
// The wire format lives in package rdma; this package is the only one that
// reads the OS's view of RDMA devices.
//
// Concurrency: the functions keep no state and are safe for concurrent use;
// their results are plain values owned by the caller.
package rdmadev
