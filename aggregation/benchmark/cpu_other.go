//go:build !unix

package benchmark

import "time"

// processCPU is not measured here: Result.CPU stays zero.
func processCPU() (user, sys time.Duration) { return 0, 0 }
