package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
)

func init() { commands = append(commands, benchCommand()) }

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:     "bench",
		Category: "benchmarks",
		Usage:    "all-reduce benchmark: software switch, controller and N userspace-NIC workers on loopback",
		Description: "Runs a software switch (--switch-addr, 127.0.0.1), its controller and --workers workers (127.0.0.2, …), each with\n" +
			"its own userspace RoCEv2 NIC, in one process; all-reduces a tensor --iters times and checks every\n" +
			"result against a float64 (int32: exact) reference. A mismatch fails the run.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "workers", Value: 4, Usage: "number of workers", EnvVars: []string{"SWML_WORKERS"}, Category: "job"},
			&cli.StringFlag{Name: "size", Value: "4MiB", Usage: "tensor size in bytes (4-byte elements), e.g. 64MiB", EnvVars: []string{"SWML_SIZE"}, Category: "job"},
			&cli.IntFlag{Name: "iters", Value: 10, Usage: "measured all-reduces", EnvVars: []string{"SWML_ITERS"}, Category: "job"},
			&cli.IntFlag{Name: "warmup", Value: 2, Usage: "unmeasured all-reduces first", EnvVars: []string{"SWML_WARMUP"}, Category: "job"},
			&cli.StringFlag{Name: "dtype", Value: "float32", Usage: "float32 (block floating point) or int32 (exact)", EnvVars: []string{"SWML_DTYPE"}, Category: "job"},
			&cli.IntFlag{Name: "packet-size", Value: aggregation.DefaultPacketSize, Usage: "payload bytes per packet: 256, 512, 1024, 2048, 4096", EnvVars: []string{"SWML_PACKET_SIZE"}, Category: "protocol"},
			&cli.IntFlag{Name: "qps", Value: aggregation.DefaultQPs, Usage: "UC queue pairs per worker", EnvVars: []string{"SWML_QPS"}, Category: "protocol"},
			&cli.StringFlag{Name: "msg-size", Value: "16KiB", Usage: "message size: packet size × a power of two", EnvVars: []string{"SWML_MSG_SIZE"}, Category: "protocol"},
			&cli.StringFlag{Name: "switch-addr", Value: "127.0.0.1", Usage: "embedded switch's IPv4 address; workers take the next ones", EnvVars: []string{"SWML_SWITCH_ADDR"}, Category: "network"},
			&cli.Float64Flag{Name: "loss", Usage: "switch drop simulator: ingress and egress loss probability, e.g. 0.01", EnvVars: []string{"SWML_LOSS"}, Category: "protocol"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON", EnvVars: []string{"SWML_JSON"}, Category: "output"},
		},
		Action: runBench,
	}
}

type benchResult struct {
	Workers         int     `json:"workers"`
	DType           string  `json:"dtype"`
	TensorBytes     int     `json:"tensor_bytes"`
	Elements        int     `json:"elements"`
	Iters           int     `json:"iters"`
	PacketSize      int     `json:"packet_size"`
	MessageSize     int     `json:"message_size"`
	QPs             int     `json:"qps"`
	Loss            float64 `json:"loss"`
	MedianNs        int64   `json:"median_ns"`
	MinNs           int64   `json:"min_ns"`
	MaxNs           int64   `json:"max_ns"`
	ATEPerSec       float64 `json:"ate_per_s"`
	Gbps            float64 `json:"gbit_per_s"`
	Packets         uint64  `json:"packets"`
	Retransmissions uint64  `json:"retransmissions"`
	Verified        bool    `json:"verified"`
}

type benchConfig struct {
	workers, size, iters, warmup, packetSize, qps, msgSize int
	dtype                                                  wire.DType
	loss                                                   float64
	switchAddr                                             netip.Addr
}

func runBench(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("bench takes no arguments (got %q): flags go before nothing, e.g. swml-rdma bench --workers 8", c.Args().Slice()), 2)
	}
	cfg, err := benchFlags(c)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt)
	defer stop()
	res, err := runEmbeddedBench(ctx, cfg)
	if err != nil {
		return cli.Exit("bench: "+err.Error(), 1)
	}
	return printBench(c.App.Writer, res, c.Bool("json"))
}

func benchFlags(c *cli.Context) (benchConfig, error) {
	cfg := benchConfig{workers: c.Int("workers"), iters: c.Int("iters"), warmup: c.Int("warmup"),
		packetSize: c.Int("packet-size"), qps: c.Int("qps"), loss: c.Float64("loss")}
	var err error
	if cfg.size, err = parseSize(c.String("size")); err != nil {
		return cfg, fmt.Errorf("--size: %v", err)
	}
	if cfg.size%4 != 0 {
		return cfg, fmt.Errorf("--size %d: a tensor of 4-byte elements needs a multiple of 4 bytes", cfg.size)
	}
	if cfg.msgSize, err = parseSize(c.String("msg-size")); err != nil {
		return cfg, fmt.Errorf("--msg-size: %v", err)
	}
	if cfg.dtype, err = wire.ParseDType(c.String("dtype")); err != nil {
		return cfg, fmt.Errorf("--dtype: %v", err)
	}
	switch {
	case cfg.workers < 1 || cfg.workers > 250:
		return cfg, fmt.Errorf("--workers %d: give 1 to 250 workers (each gets its own address 127.0.0.2 …)", cfg.workers)
	case cfg.iters < 1:
		return cfg, fmt.Errorf("--iters %d: give at least 1", cfg.iters)
	case cfg.warmup < 0:
		return cfg, fmt.Errorf("--warmup %d: must not be negative", cfg.warmup)
	case cfg.qps < 1:
		return cfg, fmt.Errorf("--qps %d: give at least 1 queue pair", cfg.qps)
	case cfg.loss < 0 || cfg.loss >= 0.5:
		return cfg, fmt.Errorf("--loss %v: give a probability in [0, 0.5)", cfg.loss)
	}
	if cfg.switchAddr, err = netip.ParseAddr(c.String("switch-addr")); err != nil || !cfg.switchAddr.Is4() {
		return cfg, fmt.Errorf("--switch-addr %q: give an IPv4 address such as 127.0.0.1", c.String("switch-addr"))
	}
	if last := cfg.switchAddr.As4()[3]; int(last)+cfg.workers > 254 {
		return cfg, fmt.Errorf("--switch-addr %v with %d workers: the workers' addresses would run past .254; pick a lower last byte", cfg.switchAddr, cfg.workers)
	}
	if err := wire.CheckPacketSize(cfg.packetSize); err != nil {
		return cfg, fmt.Errorf("--packet-size: %v", err)
	}
	ppm := cfg.msgSize / cfg.packetSize
	if cfg.msgSize%cfg.packetSize != 0 || ppm&(ppm-1) != 0 {
		return cfg, fmt.Errorf("--msg-size %d: must be the packet size (%d) times a power of two", cfg.msgSize, cfg.packetSize)
	}
	return cfg, nil
}

// runEmbeddedBench runs the whole system in this process.
func runEmbeddedBench(ctx context.Context, cfg benchConfig) (benchResult, error) {
	swAddr := cfg.switchAddr
	sw, err := swswitch.New(swswitch.Config{Addr: swAddr, IngressLoss: cfg.loss, EgressLoss: cfg.loss, Seed: 1})
	if err != nil {
		return benchResult{}, err
	}
	defer sw.Close()
	ctl, err := control.New(control.Config{Programmer: sw, SwitchIPv4: swAddr, PoolSize: sw.Config().Model.PoolSize})
	if err != nil {
		return benchResult{}, err
	}
	defer ctl.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return benchResult{}, err
	}
	go ctl.Serve(lis)

	n := cfg.size / 4
	inputs, inputsI := makeInputs(cfg.dtype, cfg.workers, n)

	sessions := make([]*aggregation.Session, cfg.workers)
	var devs []*soft.Device
	defer func() {
		for _, s := range sessions {
			if s != nil {
				s.Close()
			}
		}
		for _, d := range devs {
			d.Close()
		}
	}()
	for r := range cfg.workers {
		a := swAddr.As4()
		a[3] += byte(1 + r)
		d, err := soft.Open(soft.Config{Addr: netip.AddrFrom4(a)})
		if err != nil {
			return benchResult{}, fmt.Errorf("worker %d: %w", r, err)
		}
		devs = append(devs, d)
	}
	openErr := make([]error, cfg.workers)
	var wg sync.WaitGroup
	for r := range cfg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sessions[r], openErr[r] = aggregation.Open(ctx, aggregation.Config{
				Device: devs[r], ControllerAddr: lis.Addr().String(), SessionID: 1, Rank: r, Workers: cfg.workers,
				QPs: cfg.qps, PacketSize: cfg.packetSize, PacketsPerMessage: cfg.msgSize / cfg.packetSize, DType: cfg.dtype,
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(openErr...); err != nil {
		return benchResult{}, err
	}

	// One buffer per worker, refilled from its input before each call.
	bufs := make([][]float32, cfg.workers)
	bufsI := make([][]int32, cfg.workers)
	for r := range cfg.workers {
		if cfg.dtype == wire.Int32 {
			bufsI[r] = make([]int32, n)
		} else {
			bufs[r] = make([]float32, n)
		}
	}
	times := make([]time.Duration, 0, cfg.iters)
	errs := make([]error, cfg.workers)
	for it := 0; it < cfg.warmup+cfg.iters; it++ {
		for r := range cfg.workers {
			if cfg.dtype == wire.Int32 {
				copy(bufsI[r], inputsI[r])
			} else {
				copy(bufs[r], inputs[r])
			}
		}
		start := time.Now()
		for r := range cfg.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if cfg.dtype == wire.Int32 {
					errs[r] = sessions[r].AllReduceInt32(ctx, bufsI[r])
				} else {
					errs[r] = sessions[r].AllReduce(ctx, bufs[r])
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		if err := errors.Join(errs...); err != nil {
			return benchResult{}, fmt.Errorf("all-reduce %d: %w", it, err)
		}
		if err := verify(cfg.dtype, inputs, inputsI, bufs, bufsI); err != nil {
			return benchResult{}, fmt.Errorf("all-reduce %d: RESULT MISMATCH: %w", it, err)
		}
		if it >= cfg.warmup {
			times = append(times, elapsed)
		}
	}
	res := benchResult{Workers: cfg.workers, DType: cfg.dtype.String(), TensorBytes: cfg.size, Elements: n, Iters: cfg.iters,
		PacketSize: cfg.packetSize, MessageSize: cfg.msgSize, QPs: cfg.qps, Loss: cfg.loss, Verified: true}
	slices.Sort(times)
	res.MinNs, res.MaxNs, res.MedianNs = int64(times[0]), int64(times[len(times)-1]), int64(times[len(times)/2])
	med := time.Duration(res.MedianNs).Seconds()
	res.ATEPerSec = float64(n) / med
	res.Gbps = float64(cfg.size) * 8 / med / 1e9
	for _, s := range sessions {
		st := s.Stats()
		res.Packets += st.Packets
		res.Retransmissions += st.Retransmissions
	}
	return res, nil
}

func printBench(out io.Writer, r benchResult, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(out, "SwitchML all-reduce on loopback: %d workers, %s tensor of %s (%d elements), packet %d B, message %d B, %d QPs/worker, loss %g\n",
		r.Workers, r.DType, humanBytes(r.TensorBytes), r.Elements, r.PacketSize, r.MessageSize, r.QPs, r.Loss)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "iters\tmedian\tmin\tmax\tATE/s\tGbit/s\tpackets\tretransmissions\tverified\t")
	fmt.Fprintf(w, "%d\t%v\t%v\t%v\t%.3g\t%.3f\t%d\t%d\t%v\t\n", r.Iters,
		time.Duration(r.MedianNs).Round(time.Microsecond), time.Duration(r.MinNs).Round(time.Microsecond), time.Duration(r.MaxNs).Round(time.Microsecond),
		r.ATEPerSec, r.Gbps, r.Packets, r.Retransmissions, r.Verified)
	return w.Flush()
}

func humanBytes(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
