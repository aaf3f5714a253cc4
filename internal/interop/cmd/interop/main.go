// Command interop runs one Soft-RoCE interop scenario (internal/interop)
// and exits 0 (pass), 1 (fail) or 77 (cannot run here). Build it with
// -tags ibverbs; testbed/soft-roce/qemu/harness.sh runs it inside a QEMU
// guest with rxe.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/swml-rdma/swml-rdma/internal/interop"
	"github.com/swml-rdma/swml-rdma/rdma/rdmadev"
)

func main() {
	os.Exit(run())
}

func run() int {
	var (
		name    = flag.String("scenario", "", "scenario to run (-list for the names)")
		list    = flag.Bool("list", false, "list the scenarios and what each proves")
		role    = flag.String("role", "", "internal: run as the peer side of a scenario (re-executed in the peer netns)")
		dev     = flag.String("rxe-dev", "rxe0", "rxe device")
		a4      = flag.String("rxe-addr4", "10.0.0.1", "IPv4 address of the rxe netdev")
		a6      = flag.String("rxe-addr6", "fd00::1", "IPv6 address of the rxe netdev")
		p4      = flag.String("peer-addr4", "10.0.0.2", "IPv4 address of the peer netdev")
		p6      = flag.String("peer-addr6", "fd00::2", "IPv6 address of the peer netdev")
		ns      = flag.String("peer-netns", "peer", "network namespace of the userspace peer")
		timeout = flag.Duration("timeout", 10*time.Second, "timeout of each wait")
	)
	flag.Parse()
	if *list {
		for _, n := range interop.Names() {
			s, _ := interop.Lookup(n)
			fmt.Printf("%-18s %s\n", n, s.Proves)
		}
		return 0
	}
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	env := &interop.Env{
		RxeDev: *dev, RxeAddr4: netip.MustParseAddr(*a4), RxeAddr6: netip.MustParseAddr(*a6),
		Peer4: netip.MustParseAddr(*p4), Peer6: netip.MustParseAddr(*p6), PeerNS: *ns,
		Sysfs: rdmadev.SysfsRoot, Self: self, Log: os.Stderr, Timeout: *timeout,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if *role != "" {
		if err := interop.RunRole(ctx, env, *role, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "interop peer %s: %v\n", *role, err)
			return 1
		}
		return 0
	}
	s, ok := interop.Lookup(*name)
	if !ok {
		fmt.Fprintf(os.Stderr, "interop: unknown scenario %q; known: %v\n", *name, interop.Names())
		return 2
	}
	fmt.Fprintf(os.Stderr, "interop: %s — proves: %s\n", s.Name, s.Proves)
	start := time.Now()
	err = s.Run(ctx, env)
	switch {
	case err == nil:
		fmt.Fprintf(os.Stderr, "interop: %s PASS in %v\n", s.Name, time.Since(start).Round(time.Millisecond))
		return 0
	case errors.Is(err, interop.ErrSkip):
		fmt.Fprintf(os.Stderr, "interop: %s SKIP: %v\n", s.Name, err)
		return 77
	default:
		fmt.Fprintf(os.Stderr, "interop: %s FAIL: %v\n", s.Name, err)
		return 1
	}
}
