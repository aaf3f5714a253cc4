package netlab

import (
	"errors"
	"fmt"
	"net/netip"
)

// MaxHosts is how many host addresses a lab may use besides the
// switch's first (Hosts): what a /24 has left after the network, the
// switch, the broadcast and a margin.
const MaxHosts = 250

// ErrTooManyAddrs is Build's error for a topology whose addresses do not
// fit MaxHosts or the subnet.
var ErrTooManyAddrs = errors.New("netlab: too many addresses")

// Hosts is how many addresses besides the switch's first a lab of workers
// with perWorker address sets uses: each worker's perWorker addresses and
// the switch's perWorker − 1 more.
func Hosts(workers, perWorker int) int { return workers*perWorker + perWorker - 1 }

// addrLayout places the lab's address sets in subnet. Set 0 is the switch
// at host 1 and worker i at host 2 + i (as a lab with one set has); set k
// ≥ 1 has worker i at host 2 + k·workers + i and the switch after every
// worker's, at host 2 + perWorker·workers + k − 1. It returns
// switches[k] and workers[k][i].
func addrLayout(subnet netip.Prefix, workers, perWorker int) ([]netip.Addr, [][]netip.Addr, error) {
	if !subnet.Addr().Is4() || subnet.Bits() > 24 {
		return nil, nil, fmt.Errorf("netlab: subnet %v: give an IPv4 /24 or larger", subnet)
	}
	if workers < 1 || perWorker < 1 || Hosts(workers, perWorker) > MaxHosts {
		return nil, nil, fmt.Errorf("%w: %d workers × %d address sets take %d addresses besides the switch's: give at most %d",
			ErrTooManyAddrs, workers, perWorker, Hosts(max(workers, 1), max(perWorker, 1)), MaxHosts)
	}
	b := subnet.Masked().Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	at := func(host int) netip.Addr {
		v := base + uint32(host)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	switches := []netip.Addr{at(1)}
	sets := make([][]netip.Addr, perWorker)
	for k := range sets {
		for i := range workers {
			sets[k] = append(sets[k], at(2+k*workers+i))
		}
		if k > 0 {
			switches = append(switches, at(2+perWorker*workers+k-1))
		}
	}
	return switches, sets, nil
}

// ErrTree is Build's error for a tree that cannot be built: fewer than two
// leaves, leaves that do not divide the workers, or more than one address
// set.
var ErrTree = errors.New("netlab: invalid tree")

// CheckTree reports whether workers split evenly over leaves (2 or more)
// with perWorker address sets (0 or 1) and their addresses fit MaxHosts.
func CheckTree(workers, leaves, perWorker int) error {
	switch {
	case leaves < 2 || workers < leaves || workers%leaves != 0:
		return fmt.Errorf("%w: %d workers over %d leaves: give 2 or more leaves that divide the workers", ErrTree, workers, leaves)
	case perWorker > 1:
		return fmt.Errorf("%w: %d address sets: a tree has one", ErrTree, perWorker)
	case workers+leaves > MaxHosts:
		return fmt.Errorf("%w: %d workers and %d leaves take %d addresses besides the spine's: give at most %d",
			ErrTooManyAddrs, workers, leaves, workers+leaves, MaxHosts)
	}
	return nil
}

// leafAddrs places a tree's leaves after its workers (one address set):
// leaf j at host 2 + workers + j of subnet.
func leafAddrs(subnet netip.Prefix, workers, leaves int) []netip.Addr {
	a := subnet.Masked().Addr()
	for range 2 + workers {
		a = a.Next()
	}
	out := make([]netip.Addr, leaves)
	for j := range out {
		out[j] = a
		a = a.Next()
	}
	return out
}
