package soft

// DeviceBytes bounds one Device's own heap (measured at 0.85 MiB with
// pprof, 64 devices in one process; docs/operations.md "Memory"): the GRO
// receive buffers (4 × 64 KiB), the receive batch (64 × 4.4 KiB), the
// transmit queue (256 packets), the recvmmsg/sendmmsg headers and its QPs'
// queues; rounded up. Registered memory (Device.AllocPD, MR) and the
// kernel's socket buffers are not in it. A front end checks it against the
// memory it has before it opens NICs.
const DeviceBytes = 1 << 20
