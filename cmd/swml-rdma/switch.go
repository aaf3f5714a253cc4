package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/local"
	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

func switchCommand() *cli.Command {
	return &cli.Command{
		Name:     "switch",
		Category: "daemons",
		Usage:    "run the software switch and its controller until SIGINT/SIGTERM",
		Description: "Serves RoCEv2 on --addr, UDP 4791 (the aggregation pipeline of p4/rdma_switch in Go) and the\n" +
			"workers' gRPC control plane on --controller-addr (loopback unless told otherwise). Start the\n" +
			"workers with `swml-rdma worker --controller ADDR`. On SIGINT or SIGTERM it aborts the running jobs,\n" +
			"closes the switch, flushes --pcap and prints the final counters to stdout (--json: as JSON). See docs/operations.md.",
		Flags: append([]cli.Flag{
			offloadFlag("network"),
			&cli.StringFlag{Name: "addr", Value: "127.0.0.1", Usage: "the switch's RoCE `IP` (UDP 4791): workers write to it", EnvVars: []string{"SWML_SWITCH_ADDR"}, Category: "network"},
			&cli.StringFlag{Name: "controller-addr", Value: control.DefaultAddr, Usage: "gRPC listen `ADDR` (host:port) of the controller; port 0 picks a free one", EnvVars: []string{"SWML_CONTROLLER_ADDR"}, Category: "network"},
			&cli.StringFlag{Name: "metrics-addr", Usage: "serve Prometheus metrics at http://`ADDR`/metrics (host:port; empty: off)", EnvVars: []string{"SWML_METRICS_ADDR"}, Category: "output"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile (runtime/pprof) of the switch daemon, until it stops, to `FILE`", EnvVars: []string{"SWML_CPUPROFILE"}, Category: "output"},
			&cli.UintFlag{Name: "pool-size", Value: switchmodel.DefaultPoolSize, Usage: "aggregation slots shared by all jobs", EnvVars: []string{"SWML_POOL_SIZE"}, Category: "switch"},
			&cli.StringFlag{Name: "busy-poll", Value: "auto", Usage: "how long a reader polls its empty socket, giving the CPU away between tries, before it sleeps: a `DURATION`, off, or auto (50µs; docs/benchmarks.md \"Busy-polling the sockets\")", EnvVars: []string{"SWML_SWITCH_BUSY_POLL"}, Category: "switch"},
			&cli.IntFlag{Name: "cores", Value: 1, Usage: "cores that process packets, each owning whole QPs and their slots (docs/switch.md, \"Cores\")", EnvVars: []string{"SWML_SWITCH_CORES"}, Category: "switch"},
			&cli.StringFlag{Name: "icrc", Value: swswitch.ICRCVerify.String(), Usage: "which requests to ICRC-check: verify (all) or verify-ipv6 (for rxe workers over IPv4, whose IPv4 ID a socket cannot see)", EnvVars: []string{"SWML_ICRC"}, Category: "switch"},
			&cli.DurationFlag{Name: "session-timeout", Value: control.DefaultSessionTimeout, Usage: "how long a job waits for all its workers to register", EnvVars: []string{"SWML_SESSION_TIMEOUT"}, Category: "switch"},
			&cli.DurationFlag{Name: "idle-timeout", Value: control.DefaultIdleTimeout, Usage: "end a job of p4app-switchML workers (they hold no keep-alive stream) after this long without a packet; 0 never", EnvVars: []string{"SWML_IDLE_TIMEOUT"}, Category: "switch"},
			&cli.Float64Flag{Name: "loss", Usage: "drop simulator: ingress and egress loss probability, e.g. 0.01", EnvVars: []string{"SWML_LOSS"}, Category: "testing"},
			&cli.StringFlag{Name: "pcap", Usage: "record every datagram in and out to `FILE` (pcap, Wireshark decodes RoCEv2)", EnvVars: []string{"SWML_PCAP"}, Category: "output"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error (logs go to stderr)", EnvVars: []string{"SWML_LOG_LEVEL"}, Category: "output"},
			&cli.BoolFlag{Name: "json", Usage: "print the final counters as JSON (docs/operations.md, \"Shutdown\")", EnvVars: []string{"SWML_JSON"}, Category: "output"},
			&cli.StringFlag{Name: "upstream", Usage: "make this switch a leaf under the spine switch whose controller is at `ADDR` (host:port; docs/switch.md, \"Switch hierarchy\")", EnvVars: []string{"SWML_UPSTREAM"}, Category: "hierarchy"},
			&cli.IntFlag{Name: "leaves", Usage: "with --upstream: the number of leaf switches under the spine", EnvVars: []string{"SWML_LEAVES"}, Category: "hierarchy"},
			&cli.IntFlag{Name: "leaf-index", Usage: "with --upstream: this leaf's index, 0 to --leaves - 1", EnvVars: []string{"SWML_LEAF_INDEX"}, Category: "hierarchy"},
			&cli.IntFlag{Name: "leaf-workers", Usage: "with --upstream: the workers of each job on this leaf; leaf I serves the job's ranks I·N … I·N+N-1", EnvVars: []string{"SWML_LEAF_WORKERS"}, Category: "hierarchy"},
		}, controlSecurityFlags()...),
		Action: runSwitch,
	}
}

// switchConfig is the validated configuration of the switch daemon.
type switchConfig struct {
	addr           netip.Addr
	controllerAddr string
	metricsAddr    string
	poolSize       uint32
	cores          int
	busyPoll       time.Duration
	icrc           swswitch.ICRCPolicy
	sessionTimeout time.Duration
	loss           float64
	pcap           string
	logLevel       slog.Level
	json           bool // the final counters as JSON
	offload        udp.Offload
	security       controlSecurity
	idleTimeout    time.Duration
	// upstream: a leaf's spine controller, its index among leaves, and
	// its workers per job (empty upstream: no hierarchy).
	upstream                   string
	leaves, leafIndex, perLeaf int
}

func switchFlags(c *cli.Context) (switchConfig, error) {
	cfg := switchConfig{controllerAddr: c.String("controller-addr"), metricsAddr: c.String("metrics-addr"),
		sessionTimeout: c.Duration("session-timeout"), loss: c.Float64("loss"), pcap: c.String("pcap"), json: c.Bool("json")}
	var err error
	if cfg.offload, err = parseOffload(c); err != nil {
		return cfg, err
	}
	if cfg.addr, err = netip.ParseAddr(c.String("addr")); err != nil || cfg.addr.IsUnspecified() {
		return cfg, fmt.Errorf("--addr %q: give the switch's own IP address, e.g. 127.0.0.1 or the RoCE interface's address", c.String("addr"))
	}
	cfg.addr = cfg.addr.Unmap()
	if err := checkHostPort("controller-addr", cfg.controllerAddr); err != nil {
		return cfg, err
	}
	if cfg.metricsAddr != "" {
		if err := checkHostPort("metrics-addr", cfg.metricsAddr); err != nil {
			return cfg, err
		}
	}
	ps := c.Uint("pool-size")
	if ps < 1 || ps >= 1<<30 {
		return cfg, fmt.Errorf("--pool-size %d: give 1 to 2^30-1 slots (default %d)", ps, switchmodel.DefaultPoolSize)
	}
	cfg.poolSize = uint32(ps)
	if err := checkSwitchPool(cfg.poolSize); err != nil {
		return cfg, err
	}
	if cfg.busyPoll, err = parseBusyPoll(c.String("busy-poll")); err != nil {
		return cfg, err
	}
	cfg.busyPoll = udp.BusyPollOrDefault(cfg.busyPoll)
	if cfg.cores = c.Int("cores"); cfg.cores < 0 || cfg.cores > swswitch.MaxCores {
		return cfg, fmt.Errorf("--cores %d: give 1 to %d", cfg.cores, swswitch.MaxCores)
	}
	switch c.String("icrc") {
	case swswitch.ICRCVerify.String():
		cfg.icrc = swswitch.ICRCVerify
	case swswitch.ICRCVerifyIPv6.String():
		cfg.icrc = swswitch.ICRCVerifyIPv6
	default:
		return cfg, fmt.Errorf("--icrc %q: use verify or verify-ipv6", c.String("icrc"))
	}
	if cfg.idleTimeout = c.Duration("idle-timeout"); cfg.idleTimeout < 0 {
		return cfg, fmt.Errorf("--idle-timeout %v: give a duration ≥ 0 (0: never end p4app jobs for silence)", cfg.idleTimeout)
	}
	if cfg.sessionTimeout <= 0 {
		return cfg, fmt.Errorf("--session-timeout %v: give a positive duration, e.g. 30s", cfg.sessionTimeout)
	}
	if math.IsNaN(cfg.loss) || cfg.loss < 0 || cfg.loss >= 0.5 {
		return cfg, fmt.Errorf("--loss %v: give a probability in [0, 0.5)", cfg.loss)
	}
	if cfg.logLevel, err = parseLogLevel(c.String("log-level")); err != nil {
		return cfg, err
	}
	if cfg.security, err = parseControlSecurity(c); err != nil {
		return cfg, err
	}
	if err := parseUpstream(c, &cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// parseUpstream reads the hierarchy flags: all or none.
func parseUpstream(c *cli.Context, cfg *switchConfig) error {
	cfg.upstream = c.String("upstream")
	cfg.leaves, cfg.leafIndex, cfg.perLeaf = c.Int("leaves"), c.Int("leaf-index"), c.Int("leaf-workers")
	if cfg.upstream == "" {
		if c.IsSet("leaves") || c.IsSet("leaf-index") || c.IsSet("leaf-workers") {
			return errors.New("--leaves, --leaf-index and --leaf-workers make a leaf switch: give --upstream, the spine's controller, too")
		}
		return nil
	}
	if err := checkHostPort("upstream", cfg.upstream); err != nil {
		return err
	}
	if cfg.leaves < 1 || cfg.leafIndex < 0 || cfg.leafIndex >= cfg.leaves {
		return fmt.Errorf("--leaves %d --leaf-index %d: give the number of leaves and this leaf's index, 0 to leaves-1", cfg.leaves, cfg.leafIndex)
	}
	if cfg.perLeaf < 1 {
		return fmt.Errorf("--leaf-workers %d: give the workers of a job on this leaf (at least 1)", cfg.perLeaf)
	}
	return nil
}

// controlSecurityFlags are the control plane's security flags, shared by
// `switch` and `controller` (docs/security.md).
func controlSecurityFlags() []cli.Flag {
	const cat = "control plane security"
	return []cli.Flag{
		&cli.StringFlag{Name: "tls-cert", Usage: "serve gRPC over TLS with this certificate `FILE` (PEM; with --tls-key)", EnvVars: []string{"SWML_TLS_CERT"}, Category: cat},
		&cli.StringFlag{Name: "tls-key", Usage: "private key `FILE` (PEM) of --tls-cert", EnvVars: []string{"SWML_TLS_KEY"}, Category: cat},
		&cli.StringFlag{Name: "tls-client-ca", Usage: "mutual TLS: require of every client a certificate signed by a CA in `FILE` (PEM; with --tls-cert)", EnvVars: []string{"SWML_TLS_CLIENT_CA"}, Category: cat},
		&cli.StringFlag{Name: "operator-token-file", Usage: "`FILE` holding the operator token (first line): callers presenting it as \"authorization: Bearer TOKEN\" may list and end every job", EnvVars: []string{"SWML_OPERATOR_TOKEN_FILE"}, Category: cat},
		&cli.BoolFlag{Name: "allow-address-mismatch", Usage: "accept workers whose registered RoCE address is not the address they call the controller from (NAT, a separate RoCE network)", EnvVars: []string{"SWML_ALLOW_ADDRESS_MISMATCH"}, Category: cat},
		&cli.IntFlag{Name: "max-pending-sessions", Value: control.DefaultMaxPendingSessions, Usage: "sessions that may wait for their workers at once; more get RESOURCE_EXHAUSTED", EnvVars: []string{"SWML_MAX_PENDING_SESSIONS"}, Category: cat},
		&cli.StringFlag{Name: "registration-token-file", Usage: "`FILE` holding the registration token (first line): creating or joining a job, Barrier and Broadcast then need it as \"authorization: Bearer TOKEN\" (p4app-switchML workers cannot send it)", EnvVars: []string{"SWML_REGISTRATION_TOKEN_FILE"}, Category: cat},
		&cli.Float64Flag{Name: "client-pool-share", Value: 1, Usage: "`FRACTION` (0, 1] of the pool one client (caller IP address, or TLS client certificate) may hold across its jobs", EnvVars: []string{"SWML_CLIENT_POOL_SHARE"}, Category: cat},
	}
}

// controlSecurity is the parsed controlSecurityFlags.
type controlSecurity struct {
	serverOptions        []grpc.ServerOption
	tls                  bool
	operatorToken        string
	allowAddressMismatch bool
	maxPendingSessions   int
	registrationToken    string
	clientPoolShare      float64
}

func parseControlSecurity(c *cli.Context) (controlSecurity, error) {
	s := controlSecurity{allowAddressMismatch: c.Bool("allow-address-mismatch"), maxPendingSessions: c.Int("max-pending-sessions"), clientPoolShare: c.Float64("client-pool-share")}
	t := control.ServerTLS{CertFile: c.String("tls-cert"), KeyFile: c.String("tls-key"), ClientCAFile: c.String("tls-client-ca")}
	switch {
	case (t.CertFile == "") != (t.KeyFile == ""):
		return s, errors.New("--tls-cert and --tls-key go together: pass both (PEM certificate and its key) or neither")
	case t.ClientCAFile != "" && t.CertFile == "":
		return s, errors.New("--tls-client-ca needs TLS: pass --tls-cert and --tls-key too (the controller's certificate and key)")
	case t.CertFile != "":
		opt, err := t.ServerOption()
		if err != nil {
			return s, fmt.Errorf("--tls-cert %s / --tls-key %s / --tls-client-ca %q: %v", t.CertFile, t.KeyFile, t.ClientCAFile, err)
		}
		s.serverOptions = append(s.serverOptions, opt)
		s.tls = true
	}
	var err error
	if s.operatorToken, err = readTokenFile(c, "operator-token-file"); err != nil {
		return s, err
	}
	if s.registrationToken, err = readTokenFile(c, "registration-token-file"); err != nil {
		return s, err
	}
	if s.operatorToken != "" && s.operatorToken == s.registrationToken {
		return s, errors.New("--operator-token-file and --registration-token-file hold the same token: the registration token goes to every worker, the operator token may end any job; use two")
	}
	if math.IsNaN(s.clientPoolShare) || s.clientPoolShare <= 0 || s.clientPoolShare > 1 {
		return s, fmt.Errorf("--client-pool-share %v: give a fraction in (0, 1], e.g. 0.5 (default 1: the whole pool)", s.clientPoolShare)
	}
	if s.maxPendingSessions < 1 {
		return s, fmt.Errorf("--max-pending-sessions %d: give at least 1 (default %d)", s.maxPendingSessions, control.DefaultMaxPendingSessions)
	}
	return s, nil
}

// readTokenFile reads the token in the first line of the file flag names;
// "" if the flag is not set.
func readTokenFile(c *cli.Context, flag string) (string, error) {
	f := c.String(flag)
	if f == "" {
		return "", nil
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return "", fmt.Errorf("--%s: %v", flag, err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	tok := strings.TrimSpace(line)
	if len(tok) < 16 {
		return "", fmt.Errorf("--%s %s: the token is %d characters; use at least 16 random ones (e.g. `openssl rand -hex 32 > %s`)", flag, f, len(tok), f)
	}
	return tok, nil
}

// apply copies the settings into a controller configuration and warns about
// a listener that exposes the control plane in plaintext.
func (s controlSecurity) apply(cfg *control.Config, listen string, log *slog.Logger) {
	cfg.ServerOptions = append(cfg.ServerOptions, s.serverOptions...)
	cfg.OperatorToken = s.operatorToken
	cfg.AllowAddressMismatch = s.allowAddressMismatch
	cfg.MaxPendingSessions = s.maxPendingSessions
	cfg.RegistrationToken = s.registrationToken
	if s.clientPoolShare < 1 {
		cfg.MaxClientSlots = max(1, uint32(s.clientPoolShare*float64(cfg.PoolSize)))
	}
	host, _, _ := net.SplitHostPort(listen)
	if a, err := netip.ParseAddr(host); !s.tls && (err != nil || !a.IsLoopback()) {
		log.Warn("the control plane listens beyond loopback without TLS: job and operator tokens cross the network in the clear; pass --tls-cert/--tls-key (docs/security.md)", "listen", listen)
	}
}

// hostPortExamples are the example of each host:port flag: its own
// default port, never another endpoint's.
var hostPortExamples = map[string]string{
	"metrics-addr": "127.0.0.1:9100",
}

// checkHostPort checks that a flag holds host:port.
func checkHostPort(flag, addr string) error {
	// An empty host means every interface, which net.Listen accepts.
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		example, ok := hostPortExamples[flag]
		if !ok {
			example = control.DefaultAddr
		}
		return fmt.Errorf("--%s %q: give host:port, e.g. %s", flag, addr, example)
	}
	return nil
}

// parseLogLevel accepts debug, info, warn and error (any case).
func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: use debug, info, warn or error", s)
	}
	return l, nil
}

// newLogger writes text log lines to w (stderr).
func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

func runSwitch(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("switch takes no arguments (got %q): put flags before nothing, e.g. swml-rdma switch --addr 10.0.0.1", c.Args().Slice()), 2)
	}
	cfg, err := switchFlags(c)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	log := newLogger(c.App.ErrWriter, cfg.logLevel)
	if path := c.String("cpuprofile"); path != "" {
		stopProfile, err := startCPUProfile(path)
		if err != nil {
			return cli.Exit(err.Error(), 2)
		}
		defer stopProfile()
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serveSwitch(ctx, stop, cfg, log, c.App.Writer); err != nil {
		return cli.Exit("switch: "+err.Error(), 1)
	}
	return nil
}

// serveSwitch runs the daemon (local.Start with no workers: the switch and
// its controller, as the embedded bench runs them) until ctx ends (stop is
// called then, so that a second signal kills the process), shuts it down
// and prints the final counters to out.
func serveSwitch(ctx context.Context, stop func(), cfg switchConfig, log *slog.Logger, out io.Writer) (err error) {
	start := time.Now()
	var capture *udp.Capture
	if cfg.pcap != "" {
		f, err := os.Create(cfg.pcap)
		if err != nil {
			return fmt.Errorf("--pcap: %w", err)
		}
		if capture, err = udp.NewCapture(f); err != nil {
			f.Close()
			return fmt.Errorf("--pcap %s: %w", cfg.pcap, err)
		}
		defer func() {
			if cerr := capture.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("--pcap %s: %w", cfg.pcap, cerr)
			}
		}()
	}
	reg := newMetricsRegistry()
	ccfg := control.Config{SessionTimeout: cfg.sessionTimeout, Logger: log, Registry: reg, IdleTimeout: cfg.idleTimeout}
	if ccfg.IdleTimeout == 0 {
		ccfg.IdleTimeout = -1 // the flag's 0 means never; the Config's 0 means the default
	}
	cfg.security.apply(&ccfg, cfg.controllerAddr, log)
	var upstream *swswitch.UpstreamConfig
	if cfg.upstream != "" {
		upstream = &swswitch.UpstreamConfig{Client: control.ClientConfig{Addr: cfg.upstream}, Index: cfg.leafIndex, Leaves: cfg.leaves}
		ccfg.Ranks = control.RankRange{First: cfg.leafIndex * cfg.perLeaf, Count: cfg.perLeaf}
	}
	cl, err := local.Start(ctx, local.Config{
		Switch: swswitch.Config{
			Addr: cfg.addr, Model: switchmodel.Config{PoolSize: cfg.poolSize}, ICRC: cfg.icrc, Cores: cfg.cores, BusyPoll: cfg.busyPoll,
			IngressLoss: cfg.loss, EgressLoss: cfg.loss, Seed: uint64(time.Now().UnixNano()),
			Capture: capture, Registry: reg, Logger: log, Offload: cfg.offload, Upstream: upstream,
		},
		Controller:       ccfg,
		ControllerListen: cfg.controllerAddr,
	})
	var ee *local.EndpointError
	switch {
	case errors.As(err, &ee) && ee.Endpoint == "controller":
		return listenError("controller-addr", cfg.controllerAddr, ee.Err)
	case errors.As(err, &ee):
		return fmt.Errorf("--addr %v: %w", cfg.addr, ee.Err)
	case err != nil:
		return err
	}
	closed := false
	defer func() {
		if !closed {
			cl.Close()
		}
	}()
	var metrics *metricsServer
	if cfg.metricsAddr != "" {
		if metrics, err = startMetricsServer("metrics-addr", cfg.metricsAddr, reg, log); err != nil {
			return err
		}
		defer metrics.Close()
	}
	log.Info("switch ready", "roce", cl.Switch.Addr().String(), "controller", cl.ControllerAddr,
		"pool", cfg.poolSize, "cores", cl.Switch.Config().Cores, "readers", cl.Switch.Readers(), "loss", cfg.loss, "pcap", cfg.pcap)

	select {
	case <-ctx.Done():
		stop()
		log.Info("shutting down: aborting running jobs", "jobs", len(cl.Controller.Jobs()))
	case err = <-cl.ServeDone():
		stop()
		if err == nil {
			err = errors.New("the controller stopped serving")
		}
		log.Error("controller failed", "err", err)
	}
	// The controller first: it aborts the jobs (workers get ENDED) and
	// removes them from the switch; then the switch.
	closed = true
	if cerr := cl.Close(); cerr != nil {
		log.Warn("closing the switch", "err", cerr)
	}
	metrics.Close()
	st := cl.Switch.Stats()
	rep := switchReport{Addr: cl.Switch.Addr().String(), UptimeNs: int64(time.Since(start)), Totals: st.Totals()}
	rep.JobsStarted, rep.JobsEnded = cl.Jobs()
	if capture != nil {
		rep.PcapFrames = capture.Packets()
	}
	if cfg.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(rep); jerr != nil && err == nil {
			err = fmt.Errorf("final counters: %w", jerr)
		}
		return err
	}
	printSwitchStats(out, rep, cfg.pcap)
	return err
}

// switchReport is what the daemon prints when it stops: its address and
// uptime, the switch's counters, the jobs the controller started and
// ended, the frames --pcap recorded (0 without it). Its JSON keys are
// listed in docs/operations.md "Shutdown".
type switchReport struct {
	Addr     string `json:"addr"`
	UptimeNs int64  `json:"uptime_ns"`
	swswitch.Totals
	JobsStarted uint64 `json:"jobs_started"`
	JobsEnded   uint64 `json:"jobs_ended"`
	PcapFrames  uint64 `json:"pcap_frames"`
}

// printSwitchStats writes the final counters as a table.
func printSwitchStats(out io.Writer, r switchReport, pcap string) {
	fmt.Fprintf(out, "switch %s stopped after %v: final counters\n", r.Addr, time.Duration(r.UptimeNs).Round(time.Millisecond))
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "  packets in\t%d\t(%d bytes)\n", r.PacketsIn, r.BytesIn)
	fmt.Fprintf(w, "  packets out\t%d\t(%d bytes)\n", r.PacketsOut, r.BytesOut)
	fmt.Fprintf(w, "  aggregated\t%d\t\n", r.Aggregated)
	fmt.Fprintf(w, "  slots completed\t%d\t\n", r.SlotsCompleted)
	fmt.Fprintf(w, "  retransmissions\t%d\t\n", r.Retransmissions)
	fmt.Fprintf(w, "  unicasts\t%d\t\n", r.Unicasts)
	fmt.Fprintf(w, "  results skipped\t%d\t\n", r.ResultsSkipped)
	var total uint64
	var reasons []string
	for d := switchmodel.DropReason(1); d < switchmodel.NumDropReasons; d++ {
		n := r.Drops[d.String()]
		total += n
		reasons = append(reasons, fmt.Sprintf("%s=%d", d, n))
	}
	fmt.Fprintf(w, "  drops\t%d\t(%s)\n", total, strings.Join(reasons, " "))
	fmt.Fprintf(w, "  jobs\t%d\t(started; %d ended)\n", r.JobsStarted, r.JobsEnded)
	if pcap != "" {
		fmt.Fprintf(w, "  pcap\t%d\t(frames in %s)\n", r.PcapFrames, pcap)
	}
	w.Flush()
}
