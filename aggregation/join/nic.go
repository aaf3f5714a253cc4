package join

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/ibverbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// NIC kinds OpenNIC knows.
const (
	NICSoft    = "soft"    // the userspace RoCEv2 NIC over UDP (verbs/soft)
	NICIbverbs = "ibverbs" // an RDMA device through libibverbs (verbs/ibverbs, -tags ibverbs)
)

// Errors of OpenNIC's arguments.
var (
	ErrNICAddr = errors.New("not a usable address")
	ErrNICKind = errors.New("unknown NIC kind")
)

// ErrControllerUnreachable is wrapped by WaitForController's error when
// its timeout passes with the controller not accepting connections.
var ErrControllerUnreachable = errors.New("unreachable")

// NICConfig says which NIC a worker opens.
type NICConfig struct {
	Kind string // NICSoft or NICIbverbs
	// Addr is the worker's RoCE IP: soft binds it (UDP 4791); ibverbs uses
	// the RoCE v2 GID whose address it is, and the device that holds it.
	Addr netip.Addr
	// Device is an ibverbs device name (rxe0, mlx5_0); "" picks the one
	// holding Addr's GID. Soft ignores it.
	Device string
	// BusyPoll is how long a worker polls before it sleeps: the engine an
	// empty CQ of an ibverbs device before it blocks on the completion
	// channel (ibverbs.Device.SetBusyPoll; by default 20 µs, none on
	// Soft-RoCE), the soft NIC's receive goroutine an empty socket
	// (soft.Config.BusyPoll; by default udp.DefaultBusyPoll). 0 keeps the
	// default, negative turns it off.
	BusyPoll time.Duration
	// Offload is the soft NIC's UDP GSO/GRO setting.
	Offload udp.Offload
	// Registry, if set, gets the soft NIC's swml_nic_… metrics.
	Registry prometheus.Registerer
}

// OpenNIC opens the worker's NIC. An ibverbs device that cannot be had
// wraps verbs.ErrNotSupported (a binary without -tags ibverbs, no
// libibverbs) or verbs.ErrNoDevice; what to do about it is the caller's to
// say (docs/operations.md "Errors").
func OpenNIC(cfg NICConfig) (verbs.Device, error) {
	if !cfg.Addr.IsValid() || cfg.Addr.IsUnspecified() {
		return nil, fmt.Errorf("join: NIC address %v: %w", cfg.Addr, ErrNICAddr)
	}
	switch cfg.Kind {
	case NICIbverbs:
		d, err := ibverbs.Open(cfg.Device, cfg.Addr.Unmap())
		if err != nil {
			return nil, fmt.Errorf("join: ibverbs NIC %q at %v: %w", cfg.Device, cfg.Addr, err)
		}
		if cfg.BusyPoll != 0 {
			d.SetBusyPoll(cfg.BusyPoll)
		}
		return d, nil
	case NICSoft:
		d, err := soft.Open(soft.Config{Addr: cfg.Addr.Unmap(), Offload: cfg.Offload, BusyPoll: udp.BusyPollOrDefault(cfg.BusyPoll)})
		if err != nil {
			return nil, fmt.Errorf("join: soft NIC at %v: %w", cfg.Addr, err)
		}
		if cfg.Registry != nil {
			if err := cfg.Registry.Register(soft.NewCollector(d)); err != nil {
				d.Close()
				return nil, fmt.Errorf("join: register NIC metrics: %w", err)
			}
		}
		return d, nil
	default:
		return nil, fmt.Errorf("join: NIC kind %q: %w (%s or %s)", cfg.Kind, ErrNICKind, NICSoft, NICIbverbs)
	}
}

// ParseBusyPoll reads a busy-poll setting (NICConfig.BusyPoll; the
// worker's and the switch's --busy-poll, libswml's SWML_BUSY_POLL): auto or
// empty (0: the default), off or 0 (negative: none), or a positive
// duration.
func ParseBusyPoll(s string) (time.Duration, error) {
	switch s {
	case "auto", "":
		return 0, nil
	case "off", "0":
		return -1, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: give a positive duration (e.g. 20us), off, or auto", s)
	}
	return d, nil
}

// WaitForController polls the controller's TCP port until it accepts, ctx
// ends or timeout passes (the error wraps ErrControllerUnreachable and the
// last dial error): workers may start before the switch daemon. log may be
// nil.
func WaitForController(ctx context.Context, addr string, timeout time.Duration, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	deadline := time.Now().Add(timeout)
	var d net.Dialer
	for attempt := 0; ; attempt++ {
		dctx, cancel := context.WithTimeout(ctx, max(min(time.Until(deadline), 2*time.Second), 100*time.Millisecond))
		conn, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			conn.Close()
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("join: wait for the controller %s: %w", addr, ctx.Err())
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("join: controller %s: %w after %v: %w", addr, ErrControllerUnreachable, timeout, err)
		}
		if attempt == 0 {
			log.Info("waiting for the controller", "controller", addr, "timeout", timeout)
		}
		t := time.NewTimer(min(250*time.Millisecond, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}
