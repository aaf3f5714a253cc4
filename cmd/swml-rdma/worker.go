package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/benchmark"
	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/join"
	"github.com/swml-rdma/swml-rdma/rdma/rdmadev"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// Defaults of the worker's job flags.
const (
	defaultConnectTimeout = 30 * time.Second
	// exitInterrupted is the exit status after SIGINT/SIGTERM, as a shell
	// reports a process killed by SIGINT.
	exitInterrupted = 130
)

func workerCommand() *cli.Command {
	return &cli.Command{
		Name:     "worker",
		Category: "daemons",
		Usage:    "run one worker of a job against `swml-rdma switch` (the benchmark loop, verified)",
		Description: "Joins session --session-id as --rank of --workers at the controller (--controller), then all-reduces\n" +
			"a deterministic tensor --warmup + --iters times and checks its result against the float64 (int32:\n" +
			"exact) reference: every worker can rebuild every rank's input. A mismatch fails with exit status 1.\n" +
			"Rank and size come from --rank/--workers, else OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (mpirun),\n" +
			"else RANK/WORLD_SIZE (torchrun). SIGINT/SIGTERM aborts the job for every worker. See docs/operations.md.",
		Flags: append(append(append([]cli.Flag{
			// No EnvVars: join.Member reads $SWML_WORKERS, then the launchers'
			// variables, and names the variable in its errors.
			&cli.IntFlag{Name: "workers", Usage: "workers of the job", DefaultText: "$SWML_WORKERS, else $OMPI_COMM_WORLD_SIZE, else $WORLD_SIZE", Category: "job"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON", EnvVars: []string{"SWML_JSON"}, Category: "output"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile (runtime/pprof) of this worker to `FILE`; {rank} in it becomes the rank (one file per worker process)", EnvVars: []string{"SWML_CPUPROFILE"}, Category: "output"},
		}, allReduceFlags("bench")...), jobMemberFlags("")...), offloadFlag("nic"), logLevelFlag()),
		Action: runWorker,
	}
}

// jobMemberFlags are the flags of a process that joins a job at a
// controller as one worker: `worker`, and `bench --controller` (which puts
// them all under one category).
func jobMemberFlags(category string) []cli.Flag {
	cat := func(own string) string {
		if category != "" {
			return category
		}
		return own
	}
	return []cli.Flag{
		&cli.StringFlag{Name: "controller", Value: control.DefaultAddr, Usage: "the controller's gRPC `ADDR` (host:port), as given to `swml-rdma switch --controller-addr`", EnvVars: []string{"SWML_CONTROLLER"}, Category: cat("job")},
		&cli.DurationFlag{Name: "connect-timeout", Value: defaultConnectTimeout, Usage: "how long to wait for the controller to accept connections", EnvVars: []string{"SWML_CONNECT_TIMEOUT"}, Category: cat("job")},
		&cli.StringFlag{Name: "registration-token-file", Usage: "`FILE` holding the switch's registration token (first line), when it has one (`switch --registration-token-file`)", EnvVars: []string{"SWML_REGISTRATION_TOKEN_FILE"}, Category: cat("job")},
		&cli.UintFlag{Name: "session-id", Value: 1, Usage: "the job's session id: the same for every worker of a job, distinct between concurrent jobs", EnvVars: []string{"SWML_SESSION_ID"}, Category: cat("job")},
		&cli.IntFlag{Name: "rank", Usage: "this worker's rank, 0 … workers-1", DefaultText: "$SWML_RANK, else $OMPI_COMM_WORLD_RANK, else $RANK", Category: cat("job")},
		&cli.StringFlag{Name: "nic", Value: "soft", Usage: "soft (userspace RoCEv2 NIC over UDP) or ibverbs (an RDMA device through libibverbs)", EnvVars: []string{"SWML_NIC"}, Category: cat("nic")},
		&cli.StringFlag{Name: "device", Usage: "ibverbs device `NAME`, e.g. rxe0 or mlx5_0 (default: the one whose GID is --addr; ignored by soft)", EnvVars: []string{"SWML_DEVICE"}, Category: cat("nic")},
		&cli.StringFlag{Name: "busy-poll", Value: "auto", Usage: "how long to poll before sleeping — ibverbs: an empty completion queue, before blocking on its channel; the userspace NIC: its empty socket, giving the CPU away between tries: a `DURATION`, off, or auto (ibverbs 20µs, off on Soft-RoCE; userspace NIC 50µs)", EnvVars: []string{"SWML_BUSY_POLL"}, Category: cat("nic")},
		&cli.StringFlag{Name: "addr", Usage: "the worker's RoCE `IP`: soft binds it (default 127.0.0.<2+rank>); ibverbs uses the GID of this address", EnvVars: []string{"SWML_ADDR"}, Category: cat("nic")},
		&cli.StringFlag{Name: "gid-index", Value: "auto", Usage: "RoCE v2 GID index: auto = the GID of --addr (the only choice today)", EnvVars: []string{"SWML_GID_INDEX"}, Category: cat("nic")},
		&cli.StringFlag{Name: "metrics-addr", Usage: "serve Prometheus metrics at http://`ADDR`/metrics while the job runs (host:port; empty: off)", EnvVars: []string{"SWML_METRICS_ADDR"}, Category: cat("output")},
		&cli.StringFlag{Name: "tls-ca", Usage: "dial the controller in TLS, trusting the CA certificates in `FILE` (PEM): the CA that signed the switch's --tls-cert", EnvVars: []string{"SWML_TLS_CA"}, Category: cat(clientTLSCategory)},
		&cli.StringFlag{Name: "tls-cert", Usage: "this worker's client certificate `FILE` (PEM; with --tls-key), for a switch that verifies clients (--tls-client-ca)", EnvVars: []string{"SWML_TLS_CERT"}, Category: cat(clientTLSCategory)},
		&cli.StringFlag{Name: "tls-key", Usage: "private key `FILE` (PEM) of --tls-cert", EnvVars: []string{"SWML_TLS_KEY"}, Category: cat(clientTLSCategory)},
		&cli.StringFlag{Name: "tls-server-name", Usage: "the `NAME` the controller's certificate must hold (default: the host of --controller)", EnvVars: []string{"SWML_TLS_SERVER_NAME"}, Category: cat(clientTLSCategory)},
	}
}

// clientTLSCategory holds a worker's TLS flags (docs/security.md "TLS for
// remote workers").
const clientTLSCategory = "control plane TLS"

// clientTLSFlags reads the TLS flags of a process that dials the
// controller; nil when none is set (plaintext).
func clientTLSFlags(c *cli.Context) (*control.ClientTLS, error) {
	t := &control.ClientTLS{CAFile: c.String("tls-ca"), CertFile: c.String("tls-cert"), KeyFile: c.String("tls-key"), ServerName: c.String("tls-server-name")}
	if *t == (control.ClientTLS{}) {
		return nil, nil
	}
	switch {
	case (t.CertFile == "") != (t.KeyFile == ""):
		return nil, errors.New("--tls-cert and --tls-key go together: pass both (this worker's PEM certificate and its key) or neither")
	case t.CAFile == "" && t.CertFile == "":
		return nil, errors.New("--tls-server-name applies to TLS: pass --tls-ca FILE too (the CA that signed the switch's --tls-cert)")
	}
	if _, err := t.Config(); err != nil {
		return nil, fmt.Errorf("--tls-ca %q, --tls-cert %q, --tls-key %q: %v", t.CAFile, t.CertFile, t.KeyFile, err)
	}
	return t, nil
}

// logLevelFlag is --log-level of every command that logs; parseLogLevel is
// its one validator.
func logLevelFlag() cli.Flag {
	return &cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error (logs go to stderr)", EnvVars: []string{"SWML_LOG_LEVEL"}, Category: "output"}
}

// workerConfig is one worker of a multi-process job; bench --controller
// fills it too.
type workerConfig struct {
	controller        string             // gRPC host:port
	connectTimeout    time.Duration      // bound on waiting for the controller to accept
	registrationToken string             // "": the controller needs none
	tls               *control.ClientTLS // nil: plaintext
	sessionID         uint32
	rank, workers     int

	nic      string        // "soft" or "ibverbs"
	device   string        // ibverbs device name; "" = the one holding addr's GID
	addr     netip.Addr    // soft: bound; ibverbs: whose GID to use
	offload  udp.Offload   // soft: UDP GSO/GRO
	busyPoll time.Duration // ibverbs: join.NICConfig.BusyPoll

	jobSpec // tensor and protocol

	// Optional.
	retransmitTimeout time.Duration         // 0: aggregation.DefaultRetransmitTimeout
	registry          prometheus.Registerer // gets swml_worker_… and swml_nic_… if set
}

func runWorker(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("worker takes no arguments (got %q): put flags before nothing, e.g. swml-rdma worker --rank 0 --workers 2", c.Args().Slice()), 2)
	}
	cfg, err := workerFlags(c)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	level, err := parseLogLevel(c.String("log-level"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	log := newLogger(c.App.ErrWriter, level).With("rank", cfg.rank)
	if n := join.HostShare(nil); n > 0 {
		runtime.GOMAXPROCS(n) // ranks sharing this host, as a launcher says
		log.Debug("threads: this rank's share of the host", "gomaxprocs", n)
	}
	if path := c.String("cpuprofile"); path != "" {
		stopProfile, err := startCPUProfile(strings.ReplaceAll(path, "{rank}", strconv.Itoa(cfg.rank)))
		if err != nil {
			return cli.Exit(err.Error(), 2)
		}
		defer stopProfile()
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()

	if addr := c.String("metrics-addr"); addr != "" {
		if err := checkHostPort("metrics-addr", addr); err != nil {
			return cli.Exit(err.Error(), 2)
		}
		reg := newMetricsRegistry()
		if cfg.nic == "ibverbs" { // the RDMA devices' hw_counters and counters (swml_rdma_…)
			reg.MustRegister(rdmadev.NewCounterCollector(rdmadev.SysfsRoot))
		}
		m, err := startMetricsServer("metrics-addr", addr, reg, log)
		if err != nil {
			return cli.Exit(err.Error(), 1)
		}
		defer m.Close()
		cfg.registry = reg
	}
	res, err := runWorkerBench(ctx, cfg, log)
	if err != nil {
		if ctx.Err() != nil && c.Context.Err() == nil {
			return cli.Exit(fmt.Sprintf("worker rank %d: interrupted (a running job is aborted for every worker): %v", cfg.rank, err), exitInterrupted)
		}
		return cli.Exit(fmt.Sprintf("worker rank %d: %v", cfg.rank, err), 1)
	}
	return printWorker(c.App.Writer, res, c.Bool("json"))
}

// workerFlags validates the worker's flags and environment.
func workerFlags(c *cli.Context) (workerConfig, error) {
	cfg := workerConfig{controller: c.String("controller"), connectTimeout: c.Duration("connect-timeout"),
		nic: c.String("nic"), device: c.String("device")}
	var err error
	if cfg.rank, cfg.workers, err = rankAndSize(c); err != nil {
		return cfg, err
	}
	if err := checkHostPort("controller", cfg.controller); err != nil {
		return cfg, err
	}
	if cfg.connectTimeout < 0 {
		return cfg, fmt.Errorf("--connect-timeout %v: give a duration ≥ 0, e.g. 30s", cfg.connectTimeout)
	}
	if cfg.registrationToken, err = readTokenFile(c, "registration-token-file"); err != nil {
		return cfg, err
	}
	if cfg.tls, err = clientTLSFlags(c); err != nil {
		return cfg, err
	}
	sid := c.Uint("session-id")
	if uint64(sid) > 1<<32-1 {
		return cfg, fmt.Errorf("--session-id %d: give a 32-bit number", sid)
	}
	cfg.sessionID = uint32(sid)
	if cfg.jobSpec, err = parseJobFlags(c, cfg.workers); err != nil {
		return cfg, err
	}
	if len(cfg.wires) > 1 {
		return cfg, fmt.Errorf("--wire %s: a job has one element width; give 32 or 16 (the embedded bench, without --controller, runs a list)", c.String("wire"))
	}
	if err := checkWorkerJob(&cfg); err != nil {
		return cfg, err
	}
	if err := nicFlags(c, &cfg); err != nil {
		return cfg, err
	}
	if cfg.offload, err = parseOffload(c); err != nil {
		return cfg, err
	}
	if cfg.busyPoll, err = parseBusyPoll(c.String("busy-poll")); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// parseBusyPoll reads --busy-poll (join.ParseBusyPoll).
func parseBusyPoll(s string) (time.Duration, error) {
	d, err := join.ParseBusyPoll(s)
	if err != nil {
		return 0, fmt.Errorf("--busy-poll %w", err)
	}
	return d, nil
}

// rankAndSize resolves rank and worker count: the flags win, then
// SWML_RANK/SWML_WORKERS, Open MPI's variables and torchrun's (join.Member,
// the rule libswml follows too).
func rankAndSize(c *cli.Context) (rank, workers int, err error) {
	var rp, wp *int
	if c.IsSet("rank") {
		r := c.Int("rank")
		rp = &r
	}
	if c.IsSet("workers") {
		switch v := c.Value("workers").(type) {
		case int:
			wp = &v
		case string: // bench's --workers, which also takes a sweep list
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, 0, fmt.Errorf("--workers %q: give one number (a job has one size; sweeps need the embedded bench, without --controller)", v)
			}
			wp = &n
		}
	}
	m, err := join.Member(join.Explicit{Rank: rp, Workers: wp, RankName: "--rank", WorkersName: "--workers"})
	if err != nil {
		return 0, 0, err
	}
	return m.Rank, m.Workers, nil
}

// nicFlags validates --nic, --device, --addr and --gid-index.
func nicFlags(c *cli.Context, cfg *workerConfig) error {
	gid := c.String("gid-index")
	if gid != "auto" {
		if _, err := strconv.ParseUint(gid, 10, 8); err != nil {
			return fmt.Errorf("--gid-index %q: use auto (the GID of --addr) or a GID table index", gid)
		}
	}
	if a := c.String("addr"); a != "" {
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.IsUnspecified() {
			return fmt.Errorf("--addr %q: give this worker's own IP address, e.g. 10.0.0.2 (127.0.0.2 on one host)", a)
		}
		cfg.addr = ip.Unmap()
	}
	switch cfg.nic {
	case "soft":
		if gid != "auto" {
			return fmt.Errorf("--gid-index %s with --nic soft: the userspace NIC has no GID table, its GID is --addr; drop --gid-index", gid)
		}
		if !cfg.addr.IsValid() {
			a, err := join.DefaultSoftAddr(cfg.rank)
			if err != nil {
				return fmt.Errorf("--rank %d: %w; pass --addr", cfg.rank, err)
			}
			cfg.addr = a
		}
	case "ibverbs":
		if gid != "auto" {
			return fmt.Errorf("--gid-index %s: --nic ibverbs picks the RoCE v2 GID whose address is --addr; pass that GID's address as --addr instead (`swml-rdma devices` lists GIDs with their addresses)", gid)
		}
		if !cfg.addr.IsValid() {
			return errors.New("--nic ibverbs needs --addr: the local IP whose RoCE v2 GID to send from (`swml-rdma devices` lists them)")
		}
	default:
		return fmt.Errorf("--nic %q: use soft (userspace NIC, no RDMA hardware needed) or ibverbs", cfg.nic)
	}
	return nil
}

// runWorkerBench runs one worker of a job: it joins the job (join.Join:
// the NIC, the controller, the session), all-reduces this rank's
// deterministic input warmup + iters times, checks every result against the
// reference built from every rank's input, and ends its session (an abort
// if anything failed, so the other workers learn at once). With
// cfg.registry set it registers the worker's metrics there (swml_worker_…,
// swml_nic_… for soft) for the caller to serve.
func runWorkerBench(ctx context.Context, cfg workerConfig, log *slog.Logger) (_ benchmark.WorkerRecord, err error) {
	scfg := cfg.session()
	scfg.Rank, scfg.Workers, scfg.RetransmitTimeout = cfg.rank, cfg.workers, cfg.retransmitTimeout
	log.Info("joining", "controller", cfg.controller, "session", cfg.sessionID, "workers", cfg.workers, "nic", cfg.nic, "addr", cfg.addr)
	j, err := join.Join(ctx, join.Options{
		NIC:        join.NICConfig{Kind: cfg.nic, Addr: cfg.addr, Device: cfg.device, BusyPoll: cfg.busyPoll, Offload: cfg.offload, Registry: cfg.registry},
		Controller: cfg.controller, ConnectTimeout: cfg.connectTimeout, TLS: cfg.tls, RegistrationToken: cfg.registrationToken, Log: log,
		Session:  scfg,
		Sessions: []join.Session{{ID: cfg.sessionID, DType: cfg.dtype, Wire: cfg.wire, Name: cfg.dtype.String()}},
	})
	if err != nil {
		return benchmark.WorkerRecord{}, cfg.joinError(err)
	}
	sess := j.Sessions[0]
	closed := false
	defer func() {
		if closed {
			return
		}
		// A worker that stops before the job is done aborts it, so the
		// others fail at once naming this rank and why (a Close between two
		// calls would look like a clean end to them).
		reason := fmt.Sprint(err)
		if ctx.Err() != nil {
			reason = "interrupted (SIGINT or SIGTERM)"
		}
		if aerr := j.Abort(reason); aerr != nil {
			log.Warn("aborting the job", "job", sess.JobID(), "err", aerr)
		}
	}()
	log.Info("joined job", "job", sess.JobID(), "session", cfg.sessionID)
	if cfg.registry != nil {
		// swml_worker_…, the all-reduce duration histogram included.
		if err := cfg.registry.Register(aggregation.NewCollector(sess)); err != nil {
			return benchmark.WorkerRecord{}, fmt.Errorf("register worker metrics: %w", err)
		}
	}

	n := cfg.elements()
	rcfg := benchmark.Config{Workers: cfg.workers, Ranks: []int{cfg.rank}, Elements: n, DType: cfg.dtype, Wire: cfg.wire, Warmup: cfg.warmup, Iters: cfg.iters,
		Bound: benchmark.QuantizationBound, Label: fmt.Sprintf("job %d", sess.JobID())}
	run, err := benchmark.Run(ctx, []benchmark.AllReducer{sess}, rcfg)
	if err != nil {
		if errors.Is(err, benchmark.ErrMismatch) {
			log.Error("RESULT MISMATCH", "err", err)
		}
		// The remedy goes into the abort's reason too: a rank whose own
		// timer had not fired yet reads it there.
		return benchmark.WorkerRecord{}, fmt.Errorf("%w%s", err, remedy(err))
	}
	st := sess.Stats()
	jobID := sess.JobID()
	closed = true
	if err := j.Close(); err != nil {
		// Every result was verified; the lease just did not end cleanly.
		log.Warn("ending the session", "err", err)
	}
	res := benchmark.WorkerRecord{
		Record: benchmark.Record{Workers: cfg.workers, DType: cfg.dtype.String(), WireBits: cfg.wire, TensorBytes: cfg.size, Elements: n, Iters: cfg.iters, Warmup: cfg.warmup,
			PacketSize: cfg.packetSize, MessageSize: cfg.msgSize, QPs: cfg.qps, Verified: true,
			Packets: st.Packets, Retransmissions: st.Retransmissions, Writes: cfg.writes.String(), PacketWriteCalls: st.PacketWriteCalls,
			ResendCauses: benchmark.CausesOf(&st)},
		Rank: cfg.rank, JobID: jobID, SessionID: cfg.sessionID, Device: j.Device.Name(), Controller: cfg.controller,
		ResultSHA256: run.ResultSHA256, CPUUserNs: int64(run.CPUUser), CPUSysNs: int64(run.CPUSys),
	}
	res.Times = benchmark.Summarize(run.Times, n).Times()
	log.Info("done", "job", jobID, "iters", cfg.iters, "median", time.Duration(res.MedianNs), "verified", true)
	return res, nil
}

// joinError renders a join.Join error in the terms of the flags, with what
// to do: the NIC's with --nic and --addr, a session's Config errors with the
// flag of the field, and the controller's refusals with the flag that
// changes them.
func (cfg workerConfig) joinError(err error) error {
	var je *join.JoinError
	if !errors.As(err, &je) {
		return fmt.Errorf("%w%s", err, remedy(err))
	}
	switch je.Stage {
	case join.StageNIC:
		return fmt.Errorf("--nic %s, --addr %v: %w%s", cfg.nic, cfg.addr, je.Err, remedy(je.Err))
	case join.StageSession:
		// A Config error that only Open can find (message writes on rxe).
		return fmt.Errorf("%w%s", cfg.flagError(je.Err), remedy(je.Err))
	}
	return fmt.Errorf("%w%s", je.Err, remedy(je.Err))
}

// printWorker prints one worker's result: bench's columns, or JSON.
func printWorker(out io.Writer, r benchmark.WorkerRecord, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(out, "SwitchML all-reduce, rank %d of %d (job %d, %s, controller %s): %s tensor of %s (%d elements), %d-bit wire, packet %d B, message %d B, %d QPs\n",
		r.Rank, r.Workers, r.JobID, r.Device, r.Controller, r.DType, humanBytes(r.TensorBytes), r.Elements, r.WireBits, r.PacketSize, r.MessageSize, r.QPs)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "iters\tmedian\tmin\tmax\tATE/s\tGbit/s\tpackets\tretransmissions\tverified\t")
	fmt.Fprintf(w, "%d\t%v\t%v\t%v\t%.3g\t%.3f\t%d\t%d\t%v\t\n", r.Iters,
		time.Duration(r.MedianNs).Round(time.Microsecond), time.Duration(r.MinNs).Round(time.Microsecond), time.Duration(r.MaxNs).Round(time.Microsecond),
		r.ATEPerSec, r.Gbps, r.Packets, r.Retransmissions, r.Verified)
	return w.Flush()
}
