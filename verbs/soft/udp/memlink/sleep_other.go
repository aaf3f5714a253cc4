//go:build !linux

package memlink

import "time"

// sleepPrecise sleeps d; elsewhere than Linux with the runtime's timer.
func sleepPrecise(d time.Duration) { time.Sleep(d) }
