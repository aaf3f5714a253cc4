package main

import (
	"fmt"
	"strconv"
	"strings"
)

// parseSize accepts a byte count with an optional binary or decimal suffix:
// 4096, 64KiB, 64K, 1MiB, 256MB.
func parseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1000}, {"MB", 1000000}, {"GB", 1000000000}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(strings.ToUpper(t), strings.ToUpper(u.suffix)) {
			t = strings.TrimSpace(t[:len(t)-len(u.suffix)])
			mult = u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n*mult > 1<<40 {
		return 0, fmt.Errorf("size %q: give a positive byte count such as 4096, 64KiB or 256MiB", s)
	}
	return int(n * mult), nil
}
