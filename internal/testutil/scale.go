package testutil

import "time"

// raceFactor is how much longer a timeout that bounds a hang gets under the
// race detector (it slows the programs under test 2–20×, more on a loaded
// machine).
const raceFactor = 10

// Scale returns d, or d × 10 when the race detector is on. Use it for the
// timeouts that bound a hang (a wait for a condition, a context deadline
// that only guards against a hang), never for a threshold a test asserts.
func Scale(d time.Duration) time.Duration {
	if Race {
		return d * raceFactor
	}
	return d
}
