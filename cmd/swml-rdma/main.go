// Command swml-rdma is the command-line face of swml-rdma: benchmarks, the
// software switch, the controller, workers and device discovery.
package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/urfave/cli/v2"
)

// version is set at link time (-ldflags "-X main.version=…").
var version = "dev"

// commands is filled by the init functions of the per-command files, so that
// each command group lives in its own file.
var commands []*cli.Command

func newApp() *cli.App {
	cmds := append([]*cli.Command(nil), commands...)
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].Name < cmds[j].Name })
	return &cli.App{
		Name:    "swml-rdma",
		Usage:   "SwitchML-style in-network aggregation over RoCEv2",
		Version: version,
		Description: "Workers quantize gradients to int32 and write them as RoCEv2 UC RDMA WRITEs to a\n" +
			"switch that adds them slot by slot and writes the sums back to every worker.\n" +
			"Everything runs on loopback with the userspace NIC; see README.md.",
		Commands:             cmds,
		EnableBashCompletion: true,
		ExitErrHandler: func(c *cli.Context, err error) {
			if err == nil {
				return
			}
			if ec, ok := err.(cli.ExitCoder); ok {
				if msg := ec.Error(); msg != "" {
					fmt.Fprintln(c.App.ErrWriter, "swml-rdma:", msg)
				}
				return
			}
		},
	}
}

func main() {
	app := newApp()
	if err := app.Run(os.Args); err != nil {
		if ec, ok := err.(cli.ExitCoder); ok {
			os.Exit(ec.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "swml-rdma:", err)
		os.Exit(1)
	}
}
