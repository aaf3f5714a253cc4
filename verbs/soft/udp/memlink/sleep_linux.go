package memlink

import (
	"syscall"
	"time"
)

// sleepPrecise sleeps d in the kernel (nanosleep): woken by a high-resolution
// timer, tens of microseconds late, where the runtime's timers can be a
// millisecond late (Network.tick).
func sleepPrecise(d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	_ = syscall.Nanosleep(&ts, nil) // EINTR: woken early; the caller looks again
}
