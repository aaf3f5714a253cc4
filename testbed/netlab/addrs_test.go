package netlab

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
)

func TestAddrLayout(t *testing.T) {
	sw, sets, err := addrLayout(DefaultSubnet, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(sw, sets); got != "[10.77.0.1 10.77.0.8] [[10.77.0.2 10.77.0.3 10.77.0.4] [10.77.0.5 10.77.0.6 10.77.0.7]]" {
		t.Errorf("3 workers, 2 sets: %s", got)
	}
	// One set: the switch at .1, worker i at .2+i, as always.
	sw, sets, err = addrLayout(DefaultSubnet, 2, 1)
	if got := fmt.Sprint(sw, sets, err); got != "[10.77.0.1] [[10.77.0.2 10.77.0.3]] <nil>" {
		t.Errorf("2 workers, 1 set: %s", got)
	}
	// A larger subnet carries past the last byte; the host part is masked.
	_, sets, err = addrLayout(netip.MustParsePrefix("10.9.4.200/22"), 250, 1)
	if err != nil || sets[0][0].String() != "10.9.4.2" || sets[0][249].String() != "10.9.4.251" {
		t.Errorf("250 workers in 10.9.4.200/22: %v … %v, %v", sets[0][0], sets[0][249], err)
	}
	// 83 × 3 + 2 = 251 addresses do not fit; 62 × 4 + 3 = 251 neither; 61 × 4 + 3 do.
	for _, tc := range []struct {
		workers, k int
		ok         bool
	}{{83, 3, false}, {62, 4, false}, {61, 4, true}, {251, 1, false}, {250, 1, true}, {2, 0, false}, {0, 1, false}} {
		_, _, err := addrLayout(DefaultSubnet, tc.workers, tc.k)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrTooManyAddrs)) {
			t.Errorf("%d workers × %d sets: %v", tc.workers, tc.k, err)
		}
	}
	for _, s := range []string{"10.77.0.0/25", "fd00::/64"} {
		if _, _, err := addrLayout(netip.MustParsePrefix(s), 2, 1); err == nil {
			t.Errorf("subnet %s accepted", s)
		}
	}
}

func TestCheckTree(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		workers, leaves, perWork int
		want                     error
	}{
		{"2 × 4", 8, 2, 1, nil},
		{"4 × 1", 4, 4, 0, nil},
		{"one leaf", 4, 1, 1, ErrTree},
		{"not dividing", 6, 4, 1, ErrTree},
		{"more leaves than workers", 2, 4, 1, ErrTree},
		{"two address sets", 4, 2, 2, ErrTree},
		{"too many addresses", 240, 12, 1, ErrTooManyAddrs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckTree(tc.workers, tc.leaves, tc.perWork)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("CheckTree(%d, %d, %d) = %v, want %v", tc.workers, tc.leaves, tc.perWork, err, tc.want)
			}
		})
	}
	if got := fmt.Sprint(leafAddrs(DefaultSubnet, 8, 2)); got != "[10.77.0.10 10.77.0.11]" {
		t.Errorf("leaves of 8 workers: %s", got)
	}
}
