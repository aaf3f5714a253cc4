package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// offloadFlag selects UDP GSO/GRO for the userspace NICs and the software
// switch (verbs/soft/udp.Offload).
func offloadFlag(category string) cli.Flag {
	return &cli.StringFlag{Name: "offload", Value: "auto", Usage: "UDP segmentation offload of the userspace NIC/switch sockets: auto (GRO; GSO over IPv6 and loopback, and to peers that cannot see the IPv4 Identification), on or off (one datagram per packet)", EnvVars: []string{"SWML_OFFLOAD"}, Category: category}
}

// parseOffload reads --offload.
func parseOffload(c *cli.Context) (udp.Offload, error) {
	switch s := c.String("offload"); s {
	case "auto", "":
		return udp.OffloadAuto, nil
	case "on":
		return udp.OffloadOn, nil
	case "off":
		return udp.OffloadOff, nil
	default:
		return 0, fmt.Errorf("--offload %q: use auto, on (fails where the kernel lacks UDP GSO/GRO) or off", s)
	}
}
