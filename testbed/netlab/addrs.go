package netlab

import (
	"errors"
	"fmt"
	"net/netip"
)

// MaxHosts is how many worker addresses a lab holds (Config.Workers ×
// Config.AddrsPerWorker): what a /24 has left after the network, the
// switch, the broadcast and a margin.
const MaxHosts = 250

// ErrTooManyAddrs is Build's error for a topology whose addresses do not
// fit MaxHosts or the subnet.
var ErrTooManyAddrs = errors.New("netlab: too many addresses")

// addrLayout places the lab's addresses in subnet: the switch at host 1,
// then worker i's k-th address at host 2 + k·workers + i, so
// perWorker[0] (the first address of each worker) is 2, 3, … as with one
// address per worker, and each further set of addresses follows as a
// block. It returns the switch's address and sets[k][i].
func addrLayout(subnet netip.Prefix, workers, perWorker int) (netip.Addr, [][]netip.Addr, error) {
	if !subnet.Addr().Is4() || subnet.Bits() > 24 {
		return netip.Addr{}, nil, fmt.Errorf("netlab: subnet %v: give an IPv4 /24 or larger", subnet)
	}
	if workers < 1 || perWorker < 1 || workers*perWorker > MaxHosts {
		return netip.Addr{}, nil, fmt.Errorf("%w: %d workers × %d addresses each: give 1 to %d in all", ErrTooManyAddrs, workers, perWorker, MaxHosts)
	}
	b := subnet.Masked().Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	at := func(host int) netip.Addr {
		v := base + uint32(host)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	sets := make([][]netip.Addr, perWorker)
	for k := range sets {
		for i := range workers {
			sets[k] = append(sets[k], at(2+k*workers+i))
		}
	}
	return at(1), sets, nil
}
