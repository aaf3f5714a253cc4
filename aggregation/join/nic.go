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

// NICConfig says which NIC a worker opens.
type NICConfig struct {
	Kind string // NICSoft or NICIbverbs
	// Addr is the worker's RoCE IP: soft binds it (UDP 4791); ibverbs uses
	// the RoCE v2 GID whose address it is, and the device that holds it.
	Addr netip.Addr
	// Device is an ibverbs device name (rxe0, mlx5_0); "" picks the one
	// holding Addr's GID. Soft ignores it.
	Device string
	// Offload is the soft NIC's UDP GSO/GRO setting.
	Offload udp.Offload
	// Registry, if set, gets the soft NIC's swml_nic_… metrics.
	Registry prometheus.Registerer
}

// OpenNIC opens the worker's NIC. Errors name the flag-independent fix:
// an ibverbs device that cannot be had says how to get one or to use soft.
func OpenNIC(cfg NICConfig) (verbs.Device, error) {
	if !cfg.Addr.IsValid() || cfg.Addr.IsUnspecified() {
		return nil, fmt.Errorf("join: NIC address %v: give the worker's own IP address (its RoCE GID for ibverbs)", cfg.Addr)
	}
	switch cfg.Kind {
	case NICIbverbs:
		d, err := ibverbs.Open(cfg.Device, cfg.Addr.Unmap())
		if errors.Is(err, verbs.ErrNotSupported) || errors.Is(err, verbs.ErrNoDevice) {
			return nil, fmt.Errorf("ibverbs NIC (device %q, address %v): %w\n"+
				"  fixes: use the soft NIC (the userspace NIC needs no RDMA hardware); use a binary built with -tags ibverbs\n"+
				"  (cgo, libibverbs-dev) if this one is not; or add a Soft-RoCE device: modprobe rdma_rxe &&\n"+
				"  rdma link add rxe0 type rxe netdev <dev> (docs/testbed.md); `swml-rdma devices` lists what there is", cfg.Device, cfg.Addr, err)
		}
		if err != nil {
			return nil, fmt.Errorf("ibverbs NIC (device %q, address %v): %w", cfg.Device, cfg.Addr, err)
		}
		return d, nil
	case NICSoft:
		d, err := soft.Open(soft.Config{Addr: cfg.Addr.Unmap(), Offload: cfg.Offload})
		if err != nil {
			return nil, fmt.Errorf("soft NIC at %v: %w", cfg.Addr, err)
		}
		if cfg.Registry != nil {
			if err := cfg.Registry.Register(soft.NewCollector(d)); err != nil {
				d.Close()
				return nil, fmt.Errorf("register NIC metrics: %w", err)
			}
		}
		return d, nil
	default:
		return nil, fmt.Errorf("join: NIC kind %q: use %q (userspace NIC, no RDMA hardware needed) or %q", cfg.Kind, NICSoft, NICIbverbs)
	}
}

// WaitForController polls the controller's TCP port until it accepts, ctx
// ends or timeout passes: workers may start before the switch daemon. log
// may be nil.
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
			return fmt.Errorf("waiting for the controller %s: %w", addr, ctx.Err())
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("controller %s unreachable after %v (%v): start `swml-rdma switch --controller-addr %s` first, check the controller address, or wait longer",
				addr, timeout, err, addr)
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
