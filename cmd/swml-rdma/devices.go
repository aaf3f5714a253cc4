package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/swml-rdma/swml-rdma/rdma/rdmadev"
)

// noDevicesHelp explains an empty device list and what to do instead.
const noDevicesHelp = `no RDMA devices: this kernel has no RDMA device (no /sys/class/infiniband entries).
  - to use Soft-RoCE on a kernel that has it:  modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <dev>
    (testbed/soft-roce/lab.sh up builds a whole lab; see docs/testbed.md)
  - on a kernel without rdma_rxe (containers, CI): testbed/soft-roce/qemu/harness.sh runs the rxe
    scenarios in a QEMU guest
  - or use the userspace NIC, which needs no kernel support: --nic soft`

// deviceView is one device as printed, with its netdevs' addresses.
type deviceView struct {
	rdmadev.DeviceInfo
	Netdevs map[string]netdevView `json:"netdevs,omitempty"`
}

type netdevView struct {
	rdmadev.Netdev
	MAC string `json:"mac,omitempty"`
}

func devicesCommand() *cli.Command {
	return &cli.Command{
		Name:  "devices",
		Usage: "list RDMA devices, ports, GIDs (type, netdev) and netdev addresses",
		Description: "Reads sysfs (/sys/class/infiniband) and rtnetlink. The RoCE v2 GID whose address you pass\n" +
			"to --addr elsewhere is the one verbs/ibverbs sends from; its index is found here, never assumed.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON", EnvVars: []string{"SWML_DEVICES_JSON"}, Category: "output"},
			&cli.StringFlag{Name: "sysfs", Value: rdmadev.SysfsRoot, Usage: "sysfs root (a captured tree for offline inspection)", EnvVars: []string{"SWML_SYSFS"}, Category: "input"},
		},
		Action: func(c *cli.Context) error {
			return runDevices(c.App.Writer, c.String("sysfs"), c.Bool("json"))
		},
	}
}

func runDevices(w io.Writer, sysfs string, asJSON bool) error {
	devs, err := rdmadev.ListDevices(sysfs)
	if errors.Is(err, rdmadev.ErrNoRDMADevices) {
		if asJSON {
			return json.NewEncoder(w).Encode(struct {
				Devices []deviceView `json:"devices"`
				Note    string       `json:"note"`
			}{[]deviceView{}, "no RDMA devices"})
		}
		fmt.Fprintln(w, noDevicesHelp)
		return nil
	}
	if err != nil {
		return cli.Exit(fmt.Sprintf("devices: %v", err), 1)
	}
	// Netdev addresses are only meaningful for the live system.
	var nds map[string]*rdmadev.Netdev
	if sysfs == rdmadev.SysfsRoot {
		nds, _ = rdmadev.Netdevs() // best effort: sysfs alone is still useful
	}
	views := make([]deviceView, 0, len(devs))
	for _, d := range devs {
		v := deviceView{DeviceInfo: d, Netdevs: map[string]netdevView{}}
		for _, p := range d.Ports {
			names := []string{p.Netdev}
			for _, g := range p.GIDs {
				names = append(names, g.Netdev)
			}
			for _, n := range names {
				if nd := nds[n]; nd != nil {
					v.Netdevs[n] = netdevView{Netdev: *nd, MAC: nd.MAC.String()}
				}
			}
		}
		views = append(views, v)
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Devices []deviceView `json:"devices"`
		}{views})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tPORT\tSTATE\tLINK\tNETDEV\tGID INDEX\tTYPE\tGID ADDRESS")
	for _, v := range views {
		for _, p := range v.Ports {
			if len(p.GIDs) == 0 {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t-\t-\t-\n", v.Name, p.Number, p.State, p.LinkLayer, p.Netdev)
			}
			for _, g := range p.GIDs {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", v.Name, p.Number, p.State, p.LinkLayer, g.Netdev, g.Index, g.Type, g.Addr())
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, v := range views {
		for name, nd := range v.Netdevs {
			var as []string
			for _, a := range nd.Addrs {
				as = append(as, a.String())
			}
			state := "down"
			if nd.Up {
				state = "up"
			}
			fmt.Fprintf(w, "netdev %s (%s): %s mtu %d %s, addresses %s\n", name, v.Name, nd.MAC, nd.MTU, state, strings.Join(as, " "))
		}
	}
	return nil
}
