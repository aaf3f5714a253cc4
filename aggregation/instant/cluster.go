package instant

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
)

// Default addresses: 10.x, which never reach a socket here
// (docs/architecture.md, "One host, many endpoints").
var (
	DefaultSwitchAddr = netip.AddrFrom4([4]byte{10, 254, 0, 1})
	DefaultWorkerAddr = netip.AddrFrom4([4]byte{10, 254, 0, 2})
)

// DefaultPoolSize is the switch's slot count: a job of one worker needs
// QPs × packets per message slots, and this holds the largest one
// aggregation.Config allows (4096 QPs × 16384 packets). The instant switch
// keeps no slot memory, so the size costs nothing.
const DefaultPoolSize = 1 << 26

// Config describes an instant cluster (Start).
type Config struct {
	// SwitchAddr and WorkerAddr are the switch's and the worker Device's
	// addresses; zero: DefaultSwitchAddr, DefaultWorkerAddr.
	SwitchAddr, WorkerAddr netip.Addr
	// Controller configures the controller. Start sets Programmer (the
	// switch), PoolSize (DefaultPoolSize unless set), MaxWorkers (1),
	// SwitchIPv4 or SwitchIPv6 (SwitchAddr) and AllowAddressMismatch (the
	// worker registers SwitchAddr's neighbour, and calls from loopback);
	// the rest as control.Config.
	Controller control.Config
	// ControllerListen is the controller's TCP listen address; default
	// "127.0.0.1:0", a free port (Cluster.ControllerAddr names it).
	ControllerListen string
}

// Cluster is a running instant switch, its controller and one worker
// Device: aggregation.Open with Device and ControllerAddr (Workers 1)
// joins it. Close is safe to call more than once.
type Cluster struct {
	Switch         *Switch
	Controller     *control.Controller
	ControllerAddr string
	Device         *Device

	serveErr  chan error
	closeOnce sync.Once
	closeErr  error
}

// Start starts the switch, its controller and the worker Device. Nothing
// is left running on an error. ctx bounds only the start.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if !cfg.SwitchAddr.IsValid() {
		cfg.SwitchAddr = DefaultSwitchAddr
	}
	if !cfg.WorkerAddr.IsValid() {
		cfg.WorkerAddr = DefaultWorkerAddr
	}
	if cfg.ControllerListen == "" {
		cfg.ControllerListen = "127.0.0.1:0"
	}
	c := &Cluster{serveErr: make(chan error, 1)}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.Switch, err = NewSwitch(cfg.SwitchAddr); err != nil {
		return nil, err
	}
	ctl := cfg.Controller
	ctl.Programmer = c.Switch
	if ctl.PoolSize == 0 {
		ctl.PoolSize = DefaultPoolSize
	}
	ctl.MaxWorkers = 1
	ctl.AllowAddressMismatch = true
	ctl.SetSwitchAddr(cfg.SwitchAddr)
	if c.Controller, err = control.New(ctl); err != nil {
		return nil, fmt.Errorf("instant: controller: %w", err)
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", cfg.ControllerListen)
	if err != nil {
		return nil, fmt.Errorf("instant: controller at %s: %w", cfg.ControllerListen, err)
	}
	c.ControllerAddr = lis.Addr().String()
	go func() { c.serveErr <- c.Controller.Serve(lis) }() // returns when Close closes the controller
	if c.Device, err = c.Switch.NewDevice(cfg.WorkerAddr); err != nil {
		return nil, err
	}
	return c, nil
}

// Close closes the Device and the controller (which removes its jobs from
// the switch). Sessions opened on the cluster are the caller's to close
// first.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		var errs []error
		if c.Device != nil {
			errs = append(errs, c.Device.Close())
		}
		if c.Controller != nil {
			errs = append(errs, c.Controller.Close())
			if c.ControllerAddr != "" {
				// nil after Close; an error if the listener failed.
				errs = append(errs, <-c.serveErr)
			}
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}
