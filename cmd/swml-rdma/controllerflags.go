package main

import (
	"fmt"
	"math"

	"github.com/urfave/cli/v2"
)

// checkControllerFlags validates the P4Runtime controller's numeric flags
// before anything is dialled: a --pool-size past 32 bits used to be
// truncated, and drop probabilities were passed on unchecked.
func checkControllerFlags(c *cli.Context) error {
	if ps := c.Uint("pool-size"); ps < 1 || ps >= 1<<30 {
		return fmt.Errorf("--pool-size %d: give the program's slot count, 1 to 2^30-1 (configuration.p4 NUM_SLOTS; 64 for -DTEST_PROFILE)", ps)
	}
	for _, f := range []string{"drop-ingress", "drop-egress"} {
		if p := c.Float64(f); math.IsNaN(p) || p < 0 || p > 1 {
			return fmt.Errorf("--%s %v: give a probability from 0 to 1, e.g. 0.01", f, p)
		}
	}
	if d := c.Duration("session-timeout"); d <= 0 {
		return fmt.Errorf("--session-timeout %v: give a positive duration, e.g. 30s", d)
	}
	if err := checkHostPort("listen", c.String("listen")); err != nil {
		return err
	}
	return nil
}
