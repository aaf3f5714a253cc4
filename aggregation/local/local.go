// Package local runs a SwitchML system in one process: the software switch,
// its controller (gRPC) and one userspace RoCEv2 NIC per worker, every
// endpoint on its own address and UDP 4791, as on a real network
// (docs/architecture.md, "One host, many endpoints"). It is what `swml-rdma
// bench` runs over loopback, what the aggregation tests and examples build
// their jobs on, and, with no workers, the switch daemon `swml-rdma switch`
// serves on a host's addresses.
//
// Workers join a job the way they do on a real network: aggregation.Open
// with Cluster.NICs[rank] and Cluster.ControllerAddr. The package does not
// import aggregation, so that package's own tests can use it.
//
// A Cluster's fields are set by Start and not changed after; Close is safe
// to call more than once and from any goroutine. Parallel runs a function
// once per worker, concurrently, as every worker of a job calls AllReduce at
// the same time.
package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
)

// DefaultSwitchAddr is the switch's address when Config.Switch.Addr is
// unset; workers take the next ones (127.0.0.2, …). Tests give each package
// its own /24 instead (docs/architecture.md).
var DefaultSwitchAddr = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// Config describes an in-process cluster.
type Config struct {
	// Switch configures the software switch. Addr defaults to
	// DefaultSwitchAddr; the rest as swswitch.Config (loss, seed, offload,
	// pool size, cores: one unless set).
	Switch swswitch.Config
	// LaneBytes, when set (4 or 2), is the one element width the switch
	// sums, as a Tofino program built for one width (docs/p4.md): a job of
	// the other width is refused with an error wrapping
	// wire.ErrElementWidth. 0: both, as the software switch sums them.
	LaneBytes int
	// Controller configures the controller. Start sets Programmer (the
	// switch), PoolSize (the switch's) and SwitchIPv4 or SwitchIPv6 (its
	// address); the rest as control.Config (timeouts, logger).
	Controller control.Config
	// ControllerListen is the controller's TCP listen address; default
	// "127.0.0.1:0", a free port (Cluster.ControllerAddr names it).
	ControllerListen string
	// ControllerListener, when set, is the listener the controller serves
	// on instead of ControllerListen (Cluster.ControllerAddr is its
	// address); Close closes it, and so does Start on an error. An
	// in-memory one keeps the cluster off sockets: inside a
	// testing/synctest bubble a goroutine blocked on a socket is not
	// durably blocked, so virtual time would never advance (testbed/sim).
	ControllerListener net.Listener

	// Workers is the number of worker NICs Start opens (Cluster.NICs); 0
	// opens none (OpenNICs opens more at any time).
	Workers int
	// WorkerAddr is rank r's NIC address; nil means WorkerAddrs's default:
	// the switch's address plus 1 + r (127.0.0.2, 127.0.0.3, …).
	WorkerAddr func(rank int) netip.Addr
	// NIC configures every worker NIC; Start sets Addr per rank, and Seed
	// to NIC.Seed + rank so that lossy NICs (RecvLoss, SendLoss) drop
	// different packets.
	NIC soft.Config
}

// Cluster is a running switch and controller, and the NICs Start opened.
type Cluster struct {
	// Switch is the software switch; its Stats count what it did.
	Switch *swswitch.Switch
	// Controller is the controller serving at ControllerAddr.
	Controller *control.Controller
	// ControllerAddr is the controller's host:port, for
	// aggregation.Config.ControllerAddr.
	ControllerAddr string
	// NICs are the Config.Workers worker NICs, index = rank. Close closes
	// them; a caller may close one earlier (a worker that dies).
	NICs []*soft.Device

	cfg       Config
	jobs      jobCounter
	serveErr  chan error
	closeOnce sync.Once
	closeErr  error
}

// EndpointError is Start's error for an endpoint that could not take its
// address: Endpoint is "switch" or "controller".
type EndpointError struct {
	Endpoint string
	Addr     string
	Err      error
}

func (e *EndpointError) Error() string {
	return fmt.Sprintf("local: %s at %s: %v", e.Endpoint, e.Addr, e.Err)
}

func (e *EndpointError) Unwrap() error { return e.Err }

// jobCounter counts the jobs the controller installs on the switch and
// removes from it, and refuses jobs of a width the switch is not to sum
// (Config.LaneBytes).
type jobCounter struct {
	*swswitch.Switch
	lane           int // Config.LaneBytes
	added, removed atomic.Uint64
}

func (p *jobCounter) AddJob(ctx context.Context, job *wire.Job) error {
	if p.lane != 0 && job.LaneBytes() != p.lane {
		return fmt.Errorf("local: add job %d: %d-bit elements, the switch sums %d-bit ones: %w", job.ID, 8*job.LaneBytes(), 8*p.lane, wire.ErrElementWidth)
	}
	err := p.Switch.AddJob(ctx, job)
	if err == nil {
		p.added.Add(1)
	}
	return err
}

func (p *jobCounter) RemoveJob(ctx context.Context, id uint32) error {
	err := p.Switch.RemoveJob(ctx, id)
	if err == nil {
		p.removed.Add(1)
	}
	return err
}

// Jobs are the jobs the controller installed on the switch and removed
// from it so far. Safe for concurrent use.
func (c *Cluster) Jobs() (started, ended uint64) {
	return c.jobs.added.Load(), c.jobs.removed.Load()
}

// ServeDone receives the controller's Serve error when it stops serving:
// after Close (an error that says only that), or when its listener fails.
func (c *Cluster) ServeDone() <-chan error { return c.serveErr }

// Start starts the switch and the controller, then opens cfg.Workers
// worker NICs. Errors name the endpoint and its address; nothing is left
// running on an error. ctx bounds only the start.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("local: %d workers: give 0 or more", cfg.Workers)
	}
	if !cfg.Switch.Addr.IsValid() {
		cfg.Switch.Addr = DefaultSwitchAddr
	}
	if cfg.ControllerListen == "" {
		cfg.ControllerListen = "127.0.0.1:0"
	}
	c := &Cluster{cfg: cfg, serveErr: make(chan error, 1)}
	serving := false
	defer func() {
		if err != nil {
			c.Close()
			if !serving && cfg.ControllerListener != nil {
				cfg.ControllerListener.Close() // the controller's Close closes it once it serves
			}
		}
	}()
	if c.Switch, err = swswitch.New(cfg.Switch); err != nil {
		return nil, &EndpointError{Endpoint: "switch", Addr: cfg.Switch.Addr.String(), Err: err}
	}
	c.jobs.Switch, c.jobs.lane = c.Switch, cfg.LaneBytes
	ctlCfg := cfg.Controller
	ctlCfg.Programmer = &c.jobs
	ctlCfg.PoolSize = c.Switch.Config().Model.PoolSize
	if ctlCfg.MaxWorkers == 0 {
		ctlCfg.MaxWorkers = c.Switch.Config().Model.MaxWorkers
	}
	ctlCfg.SetSwitchAddr(cfg.Switch.Addr)
	if c.Controller, err = control.New(ctlCfg); err != nil {
		return nil, fmt.Errorf("local: controller: %w", err)
	}
	lis := cfg.ControllerListener
	if lis == nil {
		var lc net.ListenConfig
		if lis, err = lc.Listen(ctx, "tcp", cfg.ControllerListen); err != nil {
			return nil, &EndpointError{Endpoint: "controller", Addr: cfg.ControllerListen, Err: err}
		}
	}
	c.ControllerAddr = lis.Addr().String()
	serving = true
	go func() { c.serveErr <- c.Controller.Serve(lis) }() // returns when Close closes the controller
	if c.NICs, err = c.OpenNICs(c.WorkerAddrs(cfg.Workers), cfg.NIC); err != nil {
		return nil, err
	}
	return c, nil
}

// WorkerAddrs are the NIC addresses of ranks 0 … n-1: Config.WorkerAddr's,
// else the switch's address plus 1 + rank.
func (c *Cluster) WorkerAddrs(n int) []netip.Addr {
	addrs := make([]netip.Addr, n)
	a := c.cfg.Switch.Addr
	for r := range addrs {
		if c.cfg.WorkerAddr != nil {
			addrs[r] = c.cfg.WorkerAddr(r)
			continue
		}
		a = a.Next()
		addrs[r] = a
	}
	return addrs
}

// OpenNICs opens one userspace NIC per address with cfg (Addr set per
// address, Seed to cfg.Seed + index); the caller closes them. On an error
// the ones already open are closed.
func (c *Cluster) OpenNICs(addrs []netip.Addr, cfg soft.Config) ([]*soft.Device, error) {
	devs := make([]*soft.Device, 0, len(addrs))
	seed := cfg.Seed
	for r, a := range addrs {
		cfg.Addr, cfg.Seed = a, seed+uint64(r)
		d, err := soft.Open(cfg)
		if err != nil {
			for _, d := range devs {
				d.Close()
			}
			return nil, fmt.Errorf("local: worker %d NIC at %v: %w", r, a, err)
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// Close closes the NICs Start opened, the controller and the switch, and
// returns the first error. Sessions on the cluster should be closed first.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		var errs []error
		for _, d := range c.NICs {
			errs = append(errs, d.Close())
		}
		if c.Controller != nil {
			errs = append(errs, c.Controller.Close())
		}
		if c.Switch != nil {
			errs = append(errs, c.Switch.Close())
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// Parallel calls fn(rank) for ranks 0 … n-1 at once and waits for every
// call; the error is JoinErrors of theirs.
func Parallel(n int, fn func(rank int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r)
		}()
	}
	wg.Wait()
	return JoinErrors(errs)
}

// JoinErrors joins the workers' errors (index = rank) for one message: an
// error every failing worker shares (a configuration error, the same abort)
// is given once, naming who failed; different errors are listed per rank.
// nil if none failed.
func JoinErrors(errs []error) error {
	var first error
	var ranks []int
	same := true
	for r, err := range errs {
		if err == nil {
			continue
		}
		if first == nil {
			first = err
		} else if err.Error() != first.Error() {
			same = false
		}
		ranks = append(ranks, r)
	}
	switch {
	case first == nil:
		return nil
	case len(ranks) == 1:
		return fmt.Errorf("worker %d: %w", ranks[0], first)
	case same && len(ranks) == len(errs):
		return fmt.Errorf("every worker: %w", first)
	case same:
		s := fmt.Sprint(ranks[0])
		for _, r := range ranks[1:] {
			s += fmt.Sprintf(", %d", r)
		}
		return fmt.Errorf("workers %s: %w", s, first)
	}
	var each []error
	for r, err := range errs {
		if err != nil {
			each = append(each, fmt.Errorf("worker %d: %w", r, err))
		}
	}
	return errors.Join(each...)
}
