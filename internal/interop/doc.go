// Package interop holds the Soft-RoCE interop scenarios that
// testbed/soft-roce/qemu/harness.sh runs inside a QEMU guest (or that run
// on a host lab built by testbed/soft-roce/lab.sh). cmd/interop is the
// program; build it with -tags ibverbs, run it as root next to an rxe
// device.
//
// Every scenario returns nil only when what it proves was observed: data
// and immediates verified byte for byte and, where rxe is the receiver,
// rxe's rcvd_pkts counter moving by exactly the number of packets sent
// (rxe drops bad packets silently, so a missing completion alone proves
// nothing). A scenario that cannot run returns an error wrapping ErrSkip.
package interop
