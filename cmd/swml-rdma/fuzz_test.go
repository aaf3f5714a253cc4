package main

import (
	"fmt"
	"io"
	"math/bits"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// FuzzParseSize: parseSize never panics; what it accepts is a byte count in
// [1, maxSize] that it reads back the same written out in decimal.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4096", "64KiB", "1MiB", "256 MB", "1TiB", "8589934592GiB", "17179869185G", "17179869184GiB", "-1", "0x10", "1.5G", "", "+4", "kib"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err != nil {
			if n != 0 {
				t.Fatalf("parseSize(%q) = %d with error %v", s, n, err)
			}
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("parseSize(%q): error %q does not quote the input", s, err)
			}
			return
		}
		if n < 1 || n > maxSize {
			t.Fatalf("parseSize(%q) = %d, outside [1, %d]", s, n, maxSize)
		}
		if m, err := parseSize(strconv.Itoa(n)); err != nil || m != n {
			t.Fatalf("parseSize(%q) = %d, but parseSize(%d) = %d, %v", s, n, n, m, err)
		}
	})
}

// FuzzParseWorkers: parseWorkers never panics; it accepts one count per
// comma-separated field, each in [1, 250].
func FuzzParseWorkers(f *testing.F) {
	for _, s := range []string{"4", "2,4,8,16", "0", "2,x", "", " 3 , 5", "251", "-1", "9999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ws, err := parseWorkers(s)
		if err != nil {
			return
		}
		if len(ws) != strings.Count(s, ",")+1 {
			t.Fatalf("parseWorkers(%q) = %v: not one count per field", s, ws)
		}
		for _, w := range ws {
			if w < 1 || w > 250 {
				t.Fatalf("parseWorkers(%q) = %v: %d outside [1, 250]", s, ws, w)
			}
		}
	})
}

// FuzzParseLogLevel: never panics; accepts only what slog names.
func FuzzParseLogLevel(f *testing.F) {
	for _, s := range []string{"debug", "INFO", "warn+2", "error", "loud", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := parseLogLevel(s)
		if err != nil {
			return
		}
		var back = l
		if err := back.UnmarshalText([]byte(l.String())); err != nil || back != l {
			t.Fatalf("parseLogLevel(%q) = %v, which does not read back: %v", s, l, err)
		}
	})
}

// flagCommands are the commands whose flag validation FuzzFlagValues runs,
// with the flags that take a value and a validation-only action, which
// checks what an accepted configuration must satisfy (--loss is fuzzed for
// panics and exit status only: its parsing is changing to a list).
var flagCommands = []struct {
	name     string
	base     []string // flags that make the rest of the command line valid
	flags    []string
	validate func(c *cli.Context) error
}{
	{"bench", nil, []string{"size", "msg-size", "packet-size", "qps", "iters", "warmup", "dtype", "workers", "switch-addr", "loss", "baseline", "offload", "plot", "writes"},
		func(c *cli.Context) error {
			cfg, err := benchFlags(c)
			if err != nil {
				return err
			}
			ppm := cfg.msgSize / cfg.packetSize
			switch {
			case cfg.size < 4 || cfg.size%4 != 0 || cfg.size > maxSize:
				return fmt.Errorf("INVARIANT: accepted --size %d", cfg.size)
			case cfg.msgSize%cfg.packetSize != 0 || bits.OnesCount(uint(ppm)) != 1 || ppm > aggregation.MaxPacketsPerMessage:
				return fmt.Errorf("INVARIANT: accepted --msg-size %d with --packet-size %d", cfg.msgSize, cfg.packetSize)
			case cfg.qps < 1 || cfg.qps > aggregation.MaxQPs || cfg.qps*ppm > switchmodel.DefaultPoolSize:
				return fmt.Errorf("INVARIANT: accepted --qps %d × %d packets", cfg.qps, ppm)
			case cfg.baseline == "ring" && cfg.workers < 2:
				return fmt.Errorf("INVARIANT: accepted a ring of %d", cfg.workers)
			case cfg.writes == aggregation.PacketWrites && ppm > 1<<wire.MaxPacketIDBits:
				return fmt.Errorf("INVARIANT: accepted --writes packet with %d packets per message", ppm)
			}
			return nil
		}},
	{"worker", []string{"--rank=0", "--workers=2"}, []string{"size", "msg-size", "packet-size", "qps", "iters", "warmup", "dtype", "rank", "workers", "session-id", "controller", "connect-timeout", "nic", "addr", "gid-index", "offload", "writes"},
		func(c *cli.Context) error {
			cfg, err := workerFlags(c)
			if err != nil {
				return err
			}
			if cfg.size < 4 || cfg.size%4 != 0 || cfg.size > maxSize || cfg.rank < 0 || cfg.rank >= cfg.workers || cfg.msgSize/cfg.packetSize > aggregation.MaxPacketsPerMessage {
				return fmt.Errorf("INVARIANT: accepted %+v", cfg)
			}
			return nil
		}},
	{"switch", nil, []string{"addr", "controller-addr", "metrics-addr", "pool-size", "icrc", "session-timeout", "loss", "log-level", "offload"},
		func(c *cli.Context) error {
			cfg, err := switchFlags(c)
			if err != nil {
				return err
			}
			if cfg.poolSize < 1 || cfg.poolSize >= 1<<30 || cfg.sessionTimeout <= 0 {
				return fmt.Errorf("INVARIANT: accepted %+v", cfg)
			}
			return nil
		}},
	{"controller", []string{"--p4runtime=127.0.0.1:1", "--p4info=no-such.p4info.txt", "--switch-mac=02:00:00:00:00:01", "--switch-ip=10.0.0.1"},
		[]string{"pool-size", "drop-ingress", "drop-egress", "session-timeout", "listen", "port", "device-id", "election-id"},
		func(c *cli.Context) error {
			if err := checkControllerFlags(c); err != nil {
				return err
			}
			if _, err := parsePorts(c.StringSlice("port")); err != nil {
				return err
			}
			if ps := c.Uint("pool-size"); ps < 1 || ps >= 1<<30 {
				return fmt.Errorf("INVARIANT: accepted --pool-size %d", ps)
			}
			return nil
		}},
	{"write-bw", nil, []string{"size", "iters", "duration", "mtu", "tx-depth", "client-addr", "server-addr"},
		func(c *cli.Context) error {
			cfg, err := writeBWFlags(c)
			if err != nil {
				return err
			}
			if d := cfg.depth; d < 1 || uint64(cfg.size)*uint64(d) > 4<<20 || cfg.client == cfg.server {
				return fmt.Errorf("INVARIANT: accepted --size %d --tx-depth %d", cfg.size, d)
			}
			return nil
		}},
}

// FuzzFlagValues gives one flag of one command any value, through the real
// command line parser and the command's validation (nothing is opened):
// nothing panics; a refused value gets one line with exit status 2 that
// names a flag; an accepted configuration satisfies its invariants.
func FuzzFlagValues(f *testing.F) {
	for i, c := range flagCommands {
		for j := range c.flags {
			for _, v := range []string{"0", "-1", "1", "64KiB", "17179869184GiB", "NaN", "1e9", "auto", "127.0.0.1:1", "", "a\nb.txt"} {
				f.Add(uint8(i), uint8(j), v)
			}
		}
	}
	f.Fuzz(func(t *testing.T, ci, fi uint8, value string) {
		cmd := flagCommands[int(ci)%len(flagCommands)]
		flag := cmd.flags[int(fi)%len(cmd.flags)]
		app := newApp()
		app.Writer, app.ErrWriter = io.Discard, io.Discard
		app.ExitErrHandler = func(*cli.Context, error) {}
		var invariant error
		for _, c := range app.Commands {
			if c.Name == cmd.name {
				c.Action = func(c *cli.Context) error {
					err := cmd.validate(c)
					if err != nil && strings.HasPrefix(err.Error(), "INVARIANT") {
						invariant = err
						return nil
					}
					if err != nil {
						return cli.Exit(err.Error(), exitUsage)
					}
					return nil
				}
			}
		}
		args := append([]string{"swml-rdma", cmd.name}, cmd.base...)
		err := app.Run(append(args, "--"+flag+"="+value))
		if invariant != nil {
			t.Fatalf("%s --%s=%q: %v", cmd.name, flag, value, invariant)
		}
		if err == nil {
			return
		}
		msg := err.Error()
		if code := exitCode(err); code != exitUsage {
			t.Fatalf("%s --%s=%q: exit status %d, want %d: %s", cmd.name, flag, value, code, exitUsage, msg)
		}
		if strings.Contains(msg, "\n") || !strings.Contains(msg, "--") {
			t.Fatalf("%s --%s=%q: want one line naming a flag, got %q", cmd.name, flag, value, msg)
		}
	})
}

// FuzzParsePorts: the controller's --port parser never panics; what it
// accepts maps IPv4 addresses to 32-bit port ids.
func FuzzParsePorts(f *testing.F) {
	for _, s := range []string{"10.0.0.1=128", "10.0.0.1=128,10.0.0.2=136", "::1=1", "10.0.0.1", "10.0.0.1=-1", "10.0.0.1=99999999999", "=", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ports, err := parsePorts([]string{s})
		if err != nil {
			return
		}
		for a := range ports {
			if !a.Is4() {
				t.Fatalf("parsePorts(%q) accepted %v", s, a)
			}
		}
	})
}
