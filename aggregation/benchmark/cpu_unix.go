//go:build unix

package benchmark

import (
	"syscall"
	"time"
)

// processCPU is this process's CPU time so far, in user and kernel mode
// (getrusage, every thread).
func processCPU() (user, sys time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
