package netlab

import (
	"errors"
	"net/netip"
	"testing"
)

func TestAddrLayout(t *testing.T) {
	sw, sets, err := addrLayout(DefaultSubnet, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"10.77.0.2", "10.77.0.3", "10.77.0.4"}, {"10.77.0.5", "10.77.0.6", "10.77.0.7"}}
	if sw.String() != "10.77.0.1" || len(sets) != len(want) {
		t.Fatalf("switch %v, %d sets; want 10.77.0.1, 2", sw, len(sets))
	}
	for k := range want {
		for i, w := range want[k] {
			if sets[k][i].String() != w {
				t.Errorf("worker %d's address %d = %v, want %s", i, k, sets[k][i], w)
			}
		}
	}
	// A larger subnet carries past the last byte.
	_, sets, err = addrLayout(netip.MustParsePrefix("10.9.4.0/22"), 250, 1)
	if err != nil || sets[0][249].String() != "10.9.4.251" {
		t.Errorf("250 workers in 10.9.4.0/22: last %v, %v", sets[0][249], err)
	}
	_, sets, err = addrLayout(netip.MustParsePrefix("10.9.4.200/22"), 1, 1)
	if err != nil || sets[0][0].String() != "10.9.4.2" {
		t.Errorf("10.9.4.200/22 masked: %v, %v; want 10.9.4.2", sets, err)
	}
	for _, tc := range []struct {
		subnet     string
		workers, k int
	}{{"10.77.0.0/24", 64, 4}, {"10.77.0.0/24", 251, 1}, {"10.77.0.0/24", 2, 0}, {"10.77.0.0/24", 0, 1}} {
		if _, _, err := addrLayout(netip.MustParsePrefix(tc.subnet), tc.workers, tc.k); !errors.Is(err, ErrTooManyAddrs) {
			t.Errorf("%d workers × %d: %v, want ErrTooManyAddrs", tc.workers, tc.k, err)
		}
	}
	for _, s := range []string{"10.77.0.0/25", "fd00::/64"} {
		if _, _, err := addrLayout(netip.MustParsePrefix(s), 2, 1); err == nil {
			t.Errorf("subnet %s accepted", s)
		}
	}
}
