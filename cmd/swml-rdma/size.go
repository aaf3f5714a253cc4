package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// maxSize bounds every size flag: far above anything this machine can
// hold, far below where a byte count or an element count overflows.
const maxSize = 1 << 40

// sizeUnits are the suffixes parseSize accepts, longest first so that "KiB"
// is not read as "B".
var sizeUnits = []struct {
	suffix string
	mult   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1000}, {"MB", 1000000}, {"GB", 1000000000}, {"TB", 1000000000000},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1}}

// parseSize accepts a byte count with an optional binary or decimal suffix
// (any case): 4096, 64KiB, 64K, 1MiB, 256MB. The result is in [1, maxSize];
// the error says what is wrong without naming a flag (callers do).
func parseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if len(t) >= len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t = strings.TrimSpace(t[:len(t)-len(u.suffix)])
			mult = u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(t, "-"):
		return 0, fmt.Errorf("%q is more than the limit of %s; give a size such as 64MiB", s, approxBytes(maxSize))
	case err != nil || t == "" || t[0] == '+':
		return 0, fmt.Errorf("%q is not a positive byte count: give one such as 4096, 64KiB or 256MiB", s)
	case n <= 0:
		return 0, fmt.Errorf("%q is not a positive byte count: give one such as 4096, 64KiB or 256MiB", s)
	case n > maxSize/mult: // before multiplying: n*mult may overflow
		return 0, fmt.Errorf("%q is more than the limit of %s; give a size such as 64MiB", s, approxBytes(maxSize))
	}
	return int(n * mult), nil
}

// approxBytes writes a byte count for a person: 1 TiB, 2.5 GiB, 640 KiB.
func approxBytes(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %s", int64(v), units[i])
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
