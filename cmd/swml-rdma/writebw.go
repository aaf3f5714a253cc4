package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/perftest"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

func writeBWCommand() *cli.Command {
	return &cli.Command{
		Name:     "write-bw",
		Category: "benchmarks",
		Usage:    "UC RDMA WRITE bandwidth between two userspace NICs on loopback (like ib_write_bw -c UC)",
		Description: "Opens two userspace RoCEv2 NICs (default 127.0.0.2 → 127.0.0.3, UDP 4791), connects a UC QP pair\n" +
			"and streams RDMA WRITE WITH IMMEDIATE messages, counting what the receiver completes.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "size", Value: "64KiB", Usage: "message size (bytes, or with KiB/MiB)", EnvVars: []string{"SWML_SIZE"}, Category: "traffic"},
			&cli.IntFlag{Name: "iters", Value: 5000, Usage: "messages to send (0: run for --duration)", EnvVars: []string{"SWML_ITERS"}, Category: "traffic"},
			&cli.DurationFlag{Name: "duration", Usage: "stop after this long (with --iters 0, or as a limit)", EnvVars: []string{"SWML_DURATION"}, Category: "traffic"},
			&cli.IntFlag{Name: "mtu", Value: 1024, Usage: "path MTU: 256, 512, 1024, 2048 or 4096", EnvVars: []string{"SWML_MTU"}, Category: "traffic"},
			&cli.IntFlag{Name: "tx-depth", Usage: "messages in flight (--size × --tx-depth at most the receiver's 4 MiB socket buffer)", DefaultText: "32, fewer for messages over 128 KiB", EnvVars: []string{"SWML_TX_DEPTH"}, Category: "traffic"},
			&cli.StringFlag{Name: "client-addr", Value: "127.0.0.2", Usage: "sender NIC address", EnvVars: []string{"SWML_CLIENT_ADDR"}, Category: "network"},
			&cli.StringFlag{Name: "server-addr", Value: "127.0.0.3", Usage: "receiver NIC address", EnvVars: []string{"SWML_SERVER_ADDR"}, Category: "network"},
			&cli.StringFlag{Name: "pcap", Usage: "write every packet the sender sends to this pcap file", EnvVars: []string{"SWML_PCAP"}, Category: "output"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON", EnvVars: []string{"SWML_JSON"}, Category: "output"},
		},
		Action: runWriteBW,
	}
}

func runWriteBW(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("write-bw takes no arguments (got %q): put flags before nothing, e.g. swml-rdma write-bw --size 1MiB", c.Args().Slice()), 2)
	}
	cfg, err := writeBWFlags(c)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	size, mtu := cfg.size, cfg.mtu
	addrs := map[string]netip.Addr{"client-addr": cfg.client, "server-addr": cfg.server}
	var capture *udp.Capture
	if p := c.String("pcap"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			return cli.Exit("--pcap: "+err.Error(), 1)
		}
		if capture, err = udp.NewCapture(f); err != nil {
			return cli.Exit("--pcap: "+err.Error(), 1)
		}
		defer capture.Close()
	}
	tx, err := soft.Open(soft.Config{Addr: addrs["client-addr"], Capture: capture})
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	defer tx.Close()
	rx, err := soft.Open(soft.Config{Addr: addrs["server-addr"]})
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	defer rx.Close()

	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt)
	defer stop()
	if d := c.Duration("duration"); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d+5*time.Second)
		defer cancel()
	}
	res, err := perftest.WriteBW(ctx, perftest.Config{
		Sender: tx, Receiver: rx, Size: size, Iters: c.Int("iters"), Duration: c.Duration("duration"),
		MTU: mtu, Depth: cfg.depth,
	})
	if err != nil && ctx.Err() == nil {
		return cli.Exit(err.Error()+remedy(err), 1)
	}
	if res.Messages == 0 && res.Posted > 0 {
		// Whatever the window check allowed, a run that delivered nothing
		// measured nothing: say so instead of printing 0 Gbit/s.
		return cli.Exit(fmt.Sprintf("write-bw: all %d messages were lost (UC has no retransmission): lower --size or --tx-depth", res.Posted), 1)
	}
	out := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			perftest.Result
			Sender   string `json:"sender"`
			Receiver string `json:"receiver"`
		}{res, tx.Name(), rx.Name()})
	}
	fmt.Fprintf(out, "UC RDMA WRITE bandwidth: %s → %s, path MTU %d, %d messages in flight\n", tx.Name(), rx.Name(), mtu, cfg.depth)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "#bytes\t#iterations\tlost\tBW [Gbit/s]\tpackets/s\tMsgRate [Mpps]\t")
	fmt.Fprintf(w, "%d\t%d\t%d\t%.3f\t%.0f\t%.6f\t\n", size, res.Messages, res.Lost, res.Gbps, res.PacketRate, res.MsgRate/1e6)
	return w.Flush()
}

// maxWriteBWTxDepth bounds --tx-depth (the CQs hold 2 × depth entries);
// defaultWriteBWTxDepth is its default where the window fits the
// receiver's socket buffer (as many as fit where it does not).
const (
	maxWriteBWTxDepth     = 4096
	defaultWriteBWTxDepth = 32
)

// writeBWDepth is --tx-depth, or its default for a message of size bytes.
func writeBWDepth(c *cli.Context, size int) int {
	if c.IsSet("tx-depth") {
		return c.Int("tx-depth")
	}
	return max(1, min(defaultWriteBWTxDepth, udp.DefaultSocketBuffer/max(size, 1)))
}

// checkWriteBWWindow checks --tx-depth and that the bytes in flight fit the
// receiving NIC's socket buffer: UC has no retransmission, so a window
// larger than what the receiver can queue loses whole messages (a 16 MiB
// message was lost every time), and the bandwidth printed would be a
// measure of the drops.
func checkWriteBWWindow(size, depth int) error {
	if depth < 1 || depth > maxWriteBWTxDepth {
		return fmt.Errorf("--tx-depth %d: give 1 to %d messages in flight", depth, maxWriteBWTxDepth)
	}
	const buf = udp.DefaultSocketBuffer
	if size > buf {
		return fmt.Errorf("--size %s: a message larger than the receiver's %s socket buffer is lost (UC has no retransmission); give --size %s or less",
			approxBytes(uint64(size)), approxBytes(buf), approxBytes(buf))
	}
	if uint64(size)*uint64(depth) > buf {
		return fmt.Errorf("--size %s × --tx-depth %d = %s in flight, more than the receiver's %s socket buffer: messages would be lost (UC has no retransmission); give --tx-depth %d or less, or a smaller --size",
			approxBytes(uint64(size)), depth, approxBytes(uint64(size)*uint64(depth)), approxBytes(buf), buf/size)
	}
	return nil
}

// writeBWConfig is write-bw's validated flags.
type writeBWConfig struct {
	size, depth    int
	mtu            verbs.MTU
	client, server netip.Addr
}

// writeBWFlags validates write-bw's flags.
func writeBWFlags(c *cli.Context) (writeBWConfig, error) {
	var cfg writeBWConfig
	var err error
	if cfg.size, err = parseSize(c.String("size")); err != nil {
		return cfg, fmt.Errorf("--size: %v", err)
	}
	cfg.mtu = verbs.MTU(c.Int("mtu"))
	if err := cfg.mtu.Check(); err != nil {
		return cfg, fmt.Errorf("--mtu: %v", err)
	}
	if c.Int("iters") < 0 || (c.Int("iters") == 0 && c.Duration("duration") <= 0) {
		return cfg, fmt.Errorf("--iters %d: give a positive number of messages, or 0 with a --duration", c.Int("iters"))
	}
	if d := c.Duration("duration"); d < 0 {
		return cfg, fmt.Errorf("--duration %v: give a positive duration such as 10s", d)
	}
	cfg.depth = writeBWDepth(c, cfg.size)
	if err := checkWriteBWWindow(cfg.size, cfg.depth); err != nil {
		return cfg, err
	}
	for _, f := range []struct {
		name string
		addr *netip.Addr
	}{{"client-addr", &cfg.client}, {"server-addr", &cfg.server}} {
		a, err := netip.ParseAddr(c.String(f.name))
		if err != nil || a.IsUnspecified() || a.IsMulticast() {
			return cfg, fmt.Errorf("--%s %q: not an IP address of this host; give one such as 127.0.0.2", f.name, c.String(f.name))
		}
		*f.addr = a
	}
	if cfg.client == cfg.server {
		return cfg, fmt.Errorf("--client-addr and --server-addr are both %v: each NIC needs its own address", cfg.client)
	}
	return cfg, nil
}
