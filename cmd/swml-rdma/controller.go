package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/control/p4rt"
)

func controllerCommand() *cli.Command {
	return &cli.Command{
		Name:  "controller",
		Usage: "run the SwitchML control plane for a Tofino running p4/rdma_switch (P4Runtime)",
		Description: "Serves the workers' gRPC control plane (switchml_proto-compatible) and programs the switch\n" +
			"over P4Runtime: per job the receive and sender tables, the PSN registers and a multicast group;\n" +
			"on teardown it deletes them and clears the job's registers. Jobs use Tofino QPNs\n" +
			"(0x800000 | rank<<16 | qp: ≤ 32 workers, ≤ 512 QPs) and 256 B packets. See docs/p4.md.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "p4runtime", Usage: "the switch's P4Runtime server `ADDR` (host:port, e.g. Stratum's :9559)", Required: true, EnvVars: []string{"SWML_P4RUNTIME"}, Category: "switch"},
			&cli.StringFlag{Name: "p4info", Usage: "P4Info `FILE` bf-p4c wrote for p4/rdma_switch (text or binary)", Required: true, EnvVars: []string{"SWML_P4INFO"}, Category: "switch"},
			&cli.Uint64Flag{Name: "device-id", Usage: "P4Runtime device id", EnvVars: []string{"SWML_DEVICE_ID"}, Category: "switch"},
			&cli.Uint64Flag{Name: "election-id", Value: 1, Usage: "arbitration election id (the highest live one is primary)", EnvVars: []string{"SWML_ELECTION_ID"}, Category: "switch"},
			&cli.StringFlag{Name: "pipeline", Usage: "device config `FILE` to push with SetForwardingPipelineConfig (omit to use the loaded pipeline)", EnvVars: []string{"SWML_PIPELINE"}, Category: "switch"},
			&cli.StringFlag{Name: "switch-mac", Usage: "the switch's RoCE endpoint `MAC`", Required: true, EnvVars: []string{"SWML_SWITCH_MAC"}, Category: "switch"},
			&cli.StringFlag{Name: "switch-ip", Usage: "the switch's RoCE endpoint IPv4 `ADDR`", Required: true, EnvVars: []string{"SWML_SWITCH_IP"}, Category: "switch"},
			&cli.UintFlag{Name: "pool-size", Value: 8192, Usage: "aggregation slots (configuration.p4 NUM_SLOTS; 64 for -DTEST_PROFILE)", EnvVars: []string{"SWML_POOL_SIZE"}, Category: "switch"},
			&cli.StringSliceFlag{Name: "port", Usage: "worker `IP=PORT`: the switch port (P4Runtime port id) a worker is cabled to; repeat per worker", EnvVars: []string{"SWML_PORTS"}, Category: "switch"},
			&cli.StringSliceFlag{Name: "loopback-port", Usage: "chunked profiles only (1024 B, -DPAYLOAD_1024; 16-bit, -DWIRE_16): a P4Runtime `PORT` of pipe 1 in loopback for the chunk passes; repeat (1–16 ports, docs/p4.md)", EnvVars: []string{"SWML_LOOPBACK_PORTS"}, Category: "switch"},
			&cli.Float64Flag{Name: "drop-ingress", Usage: "simulated request loss probability (0–1)", EnvVars: []string{"SWML_DROP_INGRESS"}, Category: "testing"},
			&cli.Float64Flag{Name: "drop-egress", Usage: "simulated result loss probability (0–1)", EnvVars: []string{"SWML_DROP_EGRESS"}, Category: "testing"},
			&cli.StringFlag{Name: "listen", Value: control.DefaultAddr, Usage: "gRPC `ADDR` for workers (loopback unless told otherwise)", EnvVars: []string{"SWML_LISTEN"}, Category: "control plane"},
			&cli.DurationFlag{Name: "session-timeout", Value: control.DefaultSessionTimeout, Usage: "bound on waits for other workers and on switch writes", EnvVars: []string{"SWML_SESSION_TIMEOUT"}, Category: "control plane"},
		}, controlSecurityFlags()...),
		Action: runController,
	}
}

// parsePorts parses IP=PORT pairs.
func parsePorts(specs []string) (map[netip.Addr]uint32, error) {
	ports := map[netip.Addr]uint32{}
	for _, s := range specs {
		for _, item := range strings.Split(s, ",") {
			ip, port, ok := strings.Cut(strings.TrimSpace(item), "=")
			if !ok {
				return nil, fmt.Errorf("--port %q: use IP=PORT, e.g. 10.0.0.1=128", item)
			}
			a, err := netip.ParseAddr(ip)
			if err != nil || !a.Is4() {
				return nil, fmt.Errorf("--port %q: %q is not an IPv4 address", item, ip)
			}
			n, err := strconv.ParseUint(port, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("--port %q: %q is not a port number", item, port)
			}
			ports[a] = uint32(n)
		}
	}
	return ports, nil
}

// parseLoopbackPorts parses --loopback-port values (each may be a comma
// list) into P4Runtime port ids.
func parseLoopbackPorts(specs []string) ([]uint32, error) {
	var out []uint32
	for _, s := range specs {
		for _, item := range strings.Split(s, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(item), 10, 32)
			if err != nil {
				return nil, fmt.Errorf("--loopback-port %q: not a port number (a P4Runtime port id of pipe 1, e.g. 136)", item)
			}
			out = append(out, uint32(n))
		}
	}
	return out, nil
}

func runController(c *cli.Context) error {
	if err := checkControllerFlags(c); err != nil {
		return cli.Exit(err.Error(), 2)
	}
	log := slog.New(slog.NewTextHandler(c.App.ErrWriter, nil))
	mac, err := net.ParseMAC(c.String("switch-mac"))
	if err != nil || len(mac) != 6 {
		return cli.Exit(fmt.Sprintf("--switch-mac %q: not a 48-bit MAC", c.String("switch-mac")), 2)
	}
	ip, err := netip.ParseAddr(c.String("switch-ip"))
	if err != nil || !ip.Is4() {
		return cli.Exit(fmt.Sprintf("--switch-ip %q: not an IPv4 address (the Tofino program is IPv4 only)", c.String("switch-ip")), 2)
	}
	ports, err := parsePorts(c.StringSlice("port"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	loopback, err := parseLoopbackPorts(c.StringSlice("loopback-port"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	security, err := parseControlSecurity(c)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	info, err := p4rt.LoadP4Info(c.String("p4info"))
	if err != nil {
		return cli.Exit(fmt.Sprintf("--p4info: %v; pass the P4Info that bf-p4c --p4runtime-files wrote", err), 2)
	}
	var blob []byte
	if f := c.String("pipeline"); f != "" {
		if blob, err = os.ReadFile(f); err != nil {
			return cli.Exit(fmt.Sprintf("--pipeline: %v", err), 2)
		}
	}
	conn, err := grpc.NewClient(c.String("p4runtime"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return cli.Exit(fmt.Sprintf("--p4runtime %q: %v", c.String("p4runtime"), err), 2)
	}
	defer conn.Close()

	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	prog, err := p4rt.New(dctx, conn, p4rt.Config{
		P4Info: info, DeviceID: c.Uint64("device-id"), ElectionID: c.Uint64("election-id"), DeviceConfig: blob,
		SwitchMAC: mac, SwitchIPv4: ip, PoolSize: uint32(c.Uint("pool-size")), Ports: ports,
		IngressDrop: c.Float64("drop-ingress"), EgressDrop: c.Float64("drop-egress"), Logger: log,
		LoopbackPorts: loopback,
	})
	cancel()
	if err != nil {
		return cli.Exit(fmt.Sprintf("P4Runtime at %s: %v%s", c.String("p4runtime"), err, remedy(err)), 1)
	}
	defer prog.Close()

	ccfg := control.Config{
		Programmer: prog, SwitchMAC: mac, SwitchIPv4: ip, PoolSize: uint32(c.Uint("pool-size")),
		QPNScheme: control.QPNP4App, SessionTimeout: c.Duration("session-timeout"), Logger: log,
	}
	security.apply(&ccfg, c.String("listen"), log)
	ctl, err := control.New(ccfg)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	lis, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return cli.Exit(fmt.Sprintf("--listen %s: %v", c.String("listen"), err), 1)
	}
	log.Info("controller serving", "listen", lis.Addr().String(), "p4runtime", c.String("p4runtime"), "pool", c.Uint("pool-size"))
	errc := make(chan error, 1)
	go func() { errc <- ctl.Serve(lis) }()
	select {
	case <-ctx.Done():
		ctl.Close() // removes every job from the switch
		<-errc      //nolint:errcheck // waits for Serve to return; after Close its error is only that
		return nil
	case err := <-errc:
		ctl.Close()
		if err != nil && !errors.Is(err, net.ErrClosed) {
			return cli.Exit(err.Error(), 1)
		}
		return nil
	}
}
