package rdmadev

import (
	"fmt"
	"net"
	"net/netip"
	"sort"

	"github.com/jsimonetti/rtnetlink/v2"
)

// Netdev is the network interface behind a RoCE port: what the packets of a
// RoCEv2 GID leave from.
type Netdev struct {
	Name  string           `json:"name"`
	Index int              `json:"ifindex"`
	MAC   net.HardwareAddr `json:"-"`
	MTU   int              `json:"mtu"`
	Up    bool             `json:"up"`
	Addrs []netip.Prefix   `json:"addrs"`
}

var operStateNames = map[rtnetlink.OperationalState]bool{rtnetlink.OperStateUp: true, rtnetlink.OperStateUnknown: true}

// Netdevs returns the interfaces of the calling thread's network namespace
// with their addresses and MACs, read over rtnetlink, keyed by name.
func Netdevs() (map[string]*Netdev, error) {
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("rdmadev: rtnetlink: %w", err)
	}
	defer c.Close()
	links, err := c.Link.List()
	if err != nil {
		return nil, fmt.Errorf("rdmadev: rtnetlink: list links: %w", err)
	}
	byIndex := make(map[uint32]*Netdev, len(links))
	byName := make(map[string]*Netdev, len(links))
	for _, l := range links {
		if l.Attributes == nil {
			continue
		}
		n := &Netdev{
			Name:  l.Attributes.Name,
			Index: int(l.Index),
			MAC:   l.Attributes.Address,
			MTU:   int(l.Attributes.MTU),
			Up:    l.Flags&1 != 0 && operStateNames[l.Attributes.OperationalState],
		}
		byIndex[l.Index] = n
		byName[n.Name] = n
	}
	addrs, err := c.Address.List()
	if err != nil {
		return nil, fmt.Errorf("rdmadev: rtnetlink: list addresses: %w", err)
	}
	for _, a := range addrs {
		n := byIndex[a.Index]
		if n == nil || a.Attributes == nil {
			continue
		}
		ip := a.Attributes.Local
		if ip == nil {
			ip = a.Attributes.Address
		}
		addr, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		n.Addrs = append(n.Addrs, netip.PrefixFrom(addr.Unmap(), int(a.PrefixLength)))
	}
	for _, n := range byName {
		sort.Slice(n.Addrs, func(i, j int) bool { return n.Addrs[i].Addr().Less(n.Addrs[j].Addr()) })
	}
	return byName, nil
}
