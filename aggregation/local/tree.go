package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// TreeConfig describes a two-level hierarchy of software switches in one
// process (docs/switch.md "Switch hierarchy"): a spine switch and its
// controller, without workers, and Leaves leaf switches with their
// controllers and WorkersPerLeaf workers each. Rank r of the job is worker
// r mod WorkersPerLeaf of leaf r / WorkersPerLeaf, and registers with that
// leaf's controller as rank r of Leaves × WorkersPerLeaf workers.
type TreeConfig struct {
	Leaves, WorkersPerLeaf int
	// SpineAddr is the spine's address (default DefaultSwitchAddr);
	// LeafAddr(i) leaf i's (default the spine's plus 256·(i+1): 127.0.1.1,
	// 127.0.2.1, …); a leaf's workers take the addresses after its own.
	SpineAddr netip.Addr
	LeafAddr  func(i int) netip.Addr
	// Memory, when set, is the in-memory network every switch and NIC of
	// the tree listens on (its links as the caller set them); nil: UDP
	// sockets.
	Memory *memlink.Network
	// SpineListener and LeafListener, when set, give the listeners the
	// spine's controller and leaf i's serve on instead of TCP on loopback
	// (Config.ControllerListener); the tree's Close closes them, and
	// StartTree closes those it took on an error. In-memory ones, with
	// SpineClient's dialer, keep the tree's control plane off sockets, as
	// a testing/synctest bubble needs (testbed/sim, docs/sim.md "The
	// virtual clock").
	SpineListener net.Listener
	LeafListener  func(i int) net.Listener
	// SpineClient is how each leaf's switch reaches the spine's controller
	// (swswitch.UpstreamConfig.Client). Addr "" is the spine's
	// ControllerAddr; over an in-memory SpineListener give its dialer
	// (grpc.WithContextDialer in DialOptions) and an address no resolver
	// looks up ("passthrough:///spine").
	SpineClient control.ClientConfig
	// Switch and Controller configure every switch and controller of the
	// tree (addresses, endpoints, Upstream and Ranks are set per switch);
	// NIC every worker NIC.
	Switch     swswitch.Config
	Controller control.Config
	NIC        soft.Config
}

// Tree is a running hierarchy. Close closes all of it.
type Tree struct {
	Spine  *Cluster
	Leaves []*Cluster
	// NICs[r] is rank r's NIC.
	NICs    []*soft.Device
	perLeaf int
}

// StartTree starts the spine, then each leaf and its workers' NICs.
// Nothing is left running on an error.
func StartTree(ctx context.Context, cfg TreeConfig) (_ *Tree, err error) {
	if cfg.Leaves < 1 || cfg.WorkersPerLeaf < 1 {
		return nil, fmt.Errorf("local: tree of %d leaves × %d workers: need at least 1 × 1", cfg.Leaves, cfg.WorkersPerLeaf)
	}
	if !cfg.SpineAddr.IsValid() {
		cfg.SpineAddr = DefaultSwitchAddr
	}
	if cfg.LeafAddr == nil {
		cfg.LeafAddr = func(i int) netip.Addr {
			b := cfg.SpineAddr.As16()
			b[14] += byte(i + 1)
			return netip.AddrFrom16(b).Unmap()
		}
	}
	t := &Tree{perLeaf: cfg.WorkersPerLeaf}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	switchCfg := func(a netip.Addr) (swswitch.Config, error) {
		sc := cfg.Switch
		sc.Addr = a
		if cfg.Memory != nil {
			ep, err := cfg.Memory.Listen(netip.AddrPortFrom(a, 0))
			if err != nil {
				return sc, &EndpointError{Endpoint: "switch", Addr: a.String(), Err: err}
			}
			sc.Endpoint = ep
		}
		return sc, nil
	}
	sc, err := switchCfg(cfg.SpineAddr)
	if err != nil {
		if cfg.SpineListener != nil {
			cfg.SpineListener.Close()
		}
		return nil, err
	}
	if t.Spine, err = Start(ctx, Config{Switch: sc, Controller: cfg.Controller, ControllerListener: cfg.SpineListener}); err != nil {
		return nil, fmt.Errorf("local: spine: %w", err)
	}
	spine := cfg.SpineClient
	if spine.Addr == "" {
		spine.Addr = t.Spine.ControllerAddr
	}
	for i := range cfg.Leaves {
		var lis net.Listener
		if cfg.LeafListener != nil {
			lis = cfg.LeafListener(i)
		}
		la := cfg.LeafAddr(i)
		sc, err := switchCfg(la)
		if err != nil {
			if lis != nil {
				lis.Close()
			}
			return nil, err
		}
		sc.Upstream = &swswitch.UpstreamConfig{Client: spine, Index: i, Leaves: cfg.Leaves}
		cc := cfg.Controller
		cc.Ranks = control.RankRange{First: i * cfg.WorkersPerLeaf, Count: cfg.WorkersPerLeaf}
		leaf, err := Start(ctx, Config{Switch: sc, Controller: cc, ControllerListener: lis})
		if err != nil {
			return nil, fmt.Errorf("local: leaf %d: %w", i, err)
		}
		t.Leaves = append(t.Leaves, leaf)
		a := la
		for r := range cfg.WorkersPerLeaf {
			a = a.Next()
			nc := cfg.NIC
			nc.Addr, nc.Seed = a, cfg.NIC.Seed+uint64(i*cfg.WorkersPerLeaf+r)
			if cfg.Memory != nil {
				nc.Addr = netip.Addr{} // the endpoint's
				ep, err := cfg.Memory.Listen(netip.AddrPortFrom(a, 0))
				if err != nil {
					return nil, &EndpointError{Endpoint: "worker", Addr: a.String(), Err: err}
				}
				nc.Endpoint = ep
			}
			d, err := soft.Open(nc)
			if err != nil {
				return nil, fmt.Errorf("local: leaf %d worker %d NIC at %v: %w", i, r, a, err)
			}
			t.NICs = append(t.NICs, d)
		}
	}
	return t, nil
}

// Workers is the job's worker count.
func (t *Tree) Workers() int { return len(t.NICs) }

// ControllerAddr is the address of the controller rank registers with:
// its leaf's (its listener's address, with TreeConfig.LeafListener).
func (t *Tree) ControllerAddr(rank int) string { return t.Leaves[rank/t.perLeaf].ControllerAddr }

// Close closes the NICs, the leaves, then the spine, and returns the
// errors. Sessions on the tree should be closed first.
func (t *Tree) Close() error {
	var errs []error
	for _, d := range t.NICs {
		errs = append(errs, d.Close())
	}
	for _, l := range t.Leaves {
		errs = append(errs, l.Close())
	}
	if t.Spine != nil {
		errs = append(errs, t.Spine.Close())
	}
	return errors.Join(errs...)
}
