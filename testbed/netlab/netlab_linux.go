package netlab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/jsimonetti/rtnetlink/v2/driver"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nftTable is the nftables table (family netdev) of the loss rules;
// nsDir holds the named namespaces (`ip netns`).
const (
	nftTable = "swlab"
	nsDir    = "/run/netns"
)

// CheckRoot refuses, with a clear error, to go on when not root.
func CheckRoot() error { return checkEUID(os.Geteuid()) }

func checkEUID(euid int) error {
	if euid != 0 {
		return errors.New("netlab: the lab makes network namespaces, veth links, qdiscs and nftables rules: run it as root (sudo)")
	}
	return nil
}

// tools are the programs a lab execs: iproute2's ip (namespaces) and tc
// (qdiscs), and nft (loss).
var tools = []struct{ name, pkg string }{{"ip", "iproute2"}, {"tc", "iproute2"}, {"nft", "nftables"}, {"ethtool", "ethtool"}}

// CheckTools reports the programs the lab needs that are missing, naming
// the Debian packages that hold them.
func CheckTools() error {
	var missing, pkgs []string
	for _, t := range tools {
		if _, err := exec.LookPath(t.name); err != nil {
			missing = append(missing, t.name)
			pkgs = append(pkgs, t.pkg)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("netlab: %s not found: apt-get install %s", strings.Join(missing, ", "), strings.Join(pkgs, " "))
	}
	return nil
}

func checkPrefix(p string) error {
	if p == "" || len(p) > 32 {
		return fmt.Errorf("netlab: prefix %q: give 1 to 32 letters and digits", p)
	}
	for _, c := range p {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return fmt.Errorf("netlab: prefix %q: letters and digits only (a namespace name of this process ends in <pid>-<role>)", p)
		}
	}
	return nil
}

// Build makes the topology of cfg: the namespaces, the bridge, a veth link
// per worker, the addresses, every interface up; links unshaped and
// lossless. On an error everything it made is removed again.
func Build(ctx context.Context, cfg Config) (_ *Lab, err error) {
	if err := CheckRoot(); err != nil {
		return nil, err
	}
	if err := CheckTools(); err != nil {
		return nil, err
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if err := checkPrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	if !cfg.Subnet.IsValid() {
		cfg.Subnet = DefaultSubnet
	}
	if cfg.Workers < 1 || cfg.Workers > MaxHosts {
		return nil, fmt.Errorf("netlab: %d workers: give 1 to %d", cfg.Workers, MaxHosts)
	}
	if cfg.Leaves != 0 {
		if err := CheckTree(cfg.Workers, cfg.Leaves, cfg.AddrsPerWorker); err != nil {
			return nil, err
		}
	}
	swAddrs, addrs, err := addrLayout(cfg.Subnet, cfg.Workers, max(cfg.AddrsPerWorker, 1))
	if err != nil {
		return nil, err
	}
	own := fmt.Sprintf("%s%d-", cfg.Prefix, os.Getpid())
	l := &Lab{prefix: cfg.Prefix, Switch: own + "sw", SwitchAddr: swAddrs[0], WorkerAddrs: addrs[0], Addrs: addrs, SwitchAddrs: swAddrs}
	for i := range cfg.Workers {
		l.Workers = append(l.Workers, fmt.Sprintf("%sw%d", own, i))
	}
	if cfg.Leaves != 0 {
		l.LeafAddrs = leafAddrs(cfg.Subnet, cfg.Workers, cfg.Leaves)
		for j := range cfg.Leaves {
			l.Leaves = append(l.Leaves, fmt.Sprintf("%sl%d", own, j))
		}
	}
	defer func() {
		if err != nil {
			_ = l.Close() // the build error is the one to report
		}
	}()
	for _, ns := range l.namespaces() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if out, err := exec.CommandContext(ctx, "ip", "netns", "add", ns).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("netlab: ip netns add %s: %v: %s", ns, err, bytes.TrimSpace(out))
		}
	}
	if err := l.buildLinks(cfg.Subnet.Bits()); err != nil {
		return nil, err
	}
	// A packet sent before a link is up (carrier, the bridge forwarding)
	// is lost, and its ARP resolution retried only a second later.
	for _, ns := range l.Workers {
		if err := waitUp(ctx, ns, WorkerIf); err != nil {
			return nil, err
		}
	}
	for _, ns := range l.bridges() {
		if err := waitUp(ctx, ns, BridgeIf); err != nil {
			return nil, err
		}
	}
	for _, ns := range l.Leaves {
		if err := waitUp(ctx, ns, UplinkIf); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// bridges are the namespaces holding a BridgeIf: the switch's, or in a
// tree every leaf's.
func (l *Lab) bridges() []string {
	if len(l.Leaves) > 0 {
		return l.Leaves
	}
	return []string{l.Switch}
}

// switchNamespaces are the namespaces a switch daemon runs in: the
// switch's, and in a tree every leaf's too.
func (l *Lab) switchNamespaces() []string { return append([]string{l.Switch}, l.Leaves...) }

// waitUp waits (at most 5 s) until link name in ns is operationally up.
func waitUp(ctx context.Context, ns, name string) error {
	c, f, err := dialNS(ns)
	if err != nil {
		return err
	}
	defer f.Close()
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		links, err := c.Link.List()
		if err != nil {
			return fmt.Errorf("netlab: links of %s: %w", ns, err)
		}
		for _, m := range links {
			if m.Attributes != nil && m.Attributes.Name == name && m.Attributes.OperationalState == rtnetlink.OperStateUp {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netlab: %s in %s not up after 5s", name, ns)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (l *Lab) namespaces() []string { return append(l.switchNamespaces(), l.Workers...) }

// switchPort is worker i's link's end in the switch namespace.
func switchPort(i int) string { return "w" + strconv.Itoa(i) }

// dialNS opens rtnetlink in namespace ns; the returned file holds the
// namespace open for as long as the connection is used.
func dialNS(ns string) (*rtnetlink.Conn, *os.File, error) {
	f, err := os.Open(filepath.Join(nsDir, ns))
	if err != nil {
		return nil, nil, fmt.Errorf("netlab: open namespace: %w", err)
	}
	c, err := rtnetlink.Dial(&netlink.Config{NetNS: int(f.Fd())})
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("netlab: rtnetlink in %s: %w", ns, err)
	}
	return c, f, nil
}

func (l *Lab) buildLinks(bits int) error {
	if len(l.Leaves) > 0 {
		return l.buildTree(bits)
	}
	return l.buildRack(l.Switch, l.SwitchAddrs, 0, len(l.Workers), bits)
}

// buildRack makes the bridge in namespace sw with addrs, and the links of
// workers first … first+n−1 to it: a switch's rack, or a leaf's.
func (l *Lab) buildRack(swNS string, addrs []netip.Addr, first, n, bits int) error {
	sw, swf, err := dialNS(swNS)
	if err != nil {
		return err
	}
	defer swf.Close()
	defer sw.Close()
	if err := sw.Link.New(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC,
		Attributes: &rtnetlink.LinkAttributes{Name: BridgeIf, Info: &rtnetlink.LinkInfo{Kind: "bridge"}}}); err != nil {
		return fmt.Errorf("netlab: create bridge %s in %s: %w", BridgeIf, swNS, err)
	}
	br, err := linkIndex(sw, BridgeIf)
	if err != nil {
		return fmt.Errorf("netlab: %s in %s: %w", BridgeIf, swNS, err)
	}
	for _, a := range addrs {
		if err := addAddr(sw, br, a, bits); err != nil {
			return fmt.Errorf("netlab: address %v on %s in %s: %w", a, BridgeIf, swNS, err)
		}
	}
	for _, name := range []string{"lo", BridgeIf} {
		if err := setUp(sw, name); err != nil {
			return fmt.Errorf("netlab: set %s up in %s: %w", name, swNS, err)
		}
	}
	for i := first; i < first+n; i++ {
		if err := l.buildWorker(sw, swNS, br, i, l.Workers[i], bits); err != nil {
			return err
		}
	}
	return l.Do(swNS, bridgeNoNetfilter)
}

// buildTree makes a leaf's rack in every leaf namespace and joins each
// leaf to the spine by a veth pair (spinePort(j) in the spine's namespace,
// UplinkIf in the leaf's) that carries no subnet: the spine's address is
// a /32 on its loopback, and a host route at each end (the spine's
// address from the leaf's, the leaf's from the spine's) is all the
// routing there is. A leaf's switch and controller bind the leaf's
// address, so its writes up and its registration with the spine's
// controller (which accepts only the RoCE address registered) leave from
// it.
func (l *Lab) buildTree(bits int) error {
	per := l.WorkersPerLeaf()
	for j, ns := range l.Leaves {
		if err := l.buildRack(ns, []netip.Addr{l.LeafAddrs[j]}, j*per, per, bits); err != nil {
			return err
		}
	}
	sp, spf, err := dialNS(l.Switch)
	if err != nil {
		return err
	}
	defer spf.Close()
	defer sp.Close()
	lo, err := linkIndex(sp, "lo")
	if err != nil {
		return fmt.Errorf("netlab: lo in %s: %w", l.Switch, err)
	}
	if err := addAddr(sp, lo, l.SwitchAddr, 32); err != nil {
		return fmt.Errorf("netlab: address %v on lo in %s: %w", l.SwitchAddr, l.Switch, err)
	}
	if err := setUp(sp, "lo"); err != nil {
		return fmt.Errorf("netlab: set lo up in %s: %w", l.Switch, err)
	}
	for j, ns := range l.Leaves {
		if err := l.buildUplink(sp, j, ns); err != nil {
			return err
		}
	}
	return nil
}

// newVeth creates a veth pair through c: name in c's namespace (cNS),
// peer in the namespace of the file nsf (peerNS).
func newVeth(c *rtnetlink.Conn, cNS, name string, nsf *os.File, peerNS, peer string) error {
	p := &rtnetlink.LinkMessage{Family: unix.AF_UNSPEC,
		Attributes: &rtnetlink.LinkAttributes{Name: peer, NetNS: rtnetlink.NetNSForFD(uint32(nsf.Fd()))}}
	if err := c.Link.New(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Attributes: &rtnetlink.LinkAttributes{
		Name: name, Info: &rtnetlink.LinkInfo{Kind: "veth", Data: &driver.Veth{PeerInfo: p}}}}); err != nil {
		return fmt.Errorf("netlab: create veth %s (%s) – %s (%s): %w", name, cNS, peer, peerNS, err)
	}
	return nil
}

// spinePort is leaf j's link's end in the spine's namespace.
func spinePort(j int) string { return "l" + strconv.Itoa(j) }

func (l *Lab) buildUplink(sp *rtnetlink.Conn, j int, ns string) error {
	lc, lf, err := dialNS(ns)
	if err != nil {
		return err
	}
	defer lf.Close()
	defer lc.Close()
	port := spinePort(j)
	if err := newVeth(sp, l.Switch, port, lf, ns, UplinkIf); err != nil {
		return err
	}
	ends := []struct {
		c        *rtnetlink.Conn
		ns, dev  string
		dst, src netip.Addr
	}{{sp, l.Switch, port, l.LeafAddrs[j], l.SwitchAddr}, {lc, ns, UplinkIf, l.SwitchAddr, l.LeafAddrs[j]}}
	for _, e := range ends {
		if err := setUp(e.c, e.dev); err != nil {
			return fmt.Errorf("netlab: set %s up in %s: %w", e.dev, e.ns, err)
		}
		idx, err := linkIndex(e.c, e.dev)
		if err != nil {
			return fmt.Errorf("netlab: %s in %s: %w", e.dev, e.ns, err)
		}
		if err := e.c.Route.Add(&rtnetlink.RouteMessage{Family: unix.AF_INET, DstLength: 32, Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_BOOT,
			Scope: unix.RT_SCOPE_LINK, Type: unix.RTN_UNICAST, Attributes: rtnetlink.RouteAttributes{
				Dst: net.IP(e.dst.AsSlice()), Src: net.IP(e.src.AsSlice()), OutIface: idx}}); err != nil {
			return fmt.Errorf("netlab: route to %v over %s in %s: %w", e.dst, e.dev, e.ns, err)
		}
	}
	return nil
}

// bridgeNoNetfilter turns off br_netfilter's iptables/ip6tables/arptables
// calls for bridged frames in this namespace (where the module is loaded,
// e.g. by a container runtime, they default to on in every namespace): a
// rack's switch does not run the host firewall on every frame it forwards,
// and in a lab on two vCPUs that cost (br_nf_pre_routing on every packet,
// SwitchML's and Gloo's alike) is not the links'. Without the module
// there is nothing to turn off.
func bridgeNoNetfilter() error {
	for _, f := range []string{"iptables", "ip6tables", "arptables"} {
		p := "/proc/sys/net/bridge/bridge-nf-call-" + f
		if err := os.WriteFile(p, []byte("0\n"), 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("netlab: turn off %s: %w", p, err)
		}
	}
	return nil
}

// buildWorker makes worker i's veth link: its switch end enslaved to the
// bridge, its worker end moved into ns with worker i's addresses.
func (l *Lab) buildWorker(sw *rtnetlink.Conn, swNS string, br uint32, i int, ns string, bits int) error {
	wc, wf, err := dialNS(ns)
	if err != nil {
		return err
	}
	defer wf.Close()
	defer wc.Close()
	port := switchPort(i)
	if err := newVeth(sw, swNS, port, wf, ns, WorkerIf); err != nil {
		return err
	}
	idx, err := linkIndex(sw, port)
	if err != nil {
		return fmt.Errorf("netlab: %s in %s: %w", port, swNS, err)
	}
	if err := sw.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: idx,
		Flags: unix.IFF_UP, Change: unix.IFF_UP, Attributes: &rtnetlink.LinkAttributes{Master: &br}}); err != nil {
		return fmt.Errorf("netlab: attach %s to %s in %s: %w", port, BridgeIf, swNS, err)
	}
	widx, err := linkIndex(wc, WorkerIf)
	if err != nil {
		return fmt.Errorf("netlab: %s in %s: %w", WorkerIf, ns, err)
	}
	for _, set := range l.Addrs { // the first is the primary, the others secondaries of the same subnet
		if err := addAddr(wc, widx, set[i], bits); err != nil {
			return fmt.Errorf("netlab: address %v on %s in %s: %w", set[i], WorkerIf, ns, err)
		}
	}
	for _, name := range []string{"lo", WorkerIf} {
		if err := setUp(wc, name); err != nil {
			return fmt.Errorf("netlab: set %s up in %s: %w", name, ns, err)
		}
	}
	for k := 1; k < len(l.Addrs); k++ {
		if err := wc.Route.Add(&rtnetlink.RouteMessage{Family: unix.AF_INET, DstLength: 32, Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_BOOT,
			Scope: unix.RT_SCOPE_LINK, Type: unix.RTN_UNICAST, Attributes: rtnetlink.RouteAttributes{
				Dst: net.IP(l.SwitchAddrs[k].AsSlice()), Src: net.IP(l.Addrs[k][i].AsSlice()), OutIface: widx}}); err != nil {
			return fmt.Errorf("netlab: route to %v from %v in %s: %w", l.SwitchAddrs[k], l.Addrs[k][i], ns, err)
		}
	}
	return nil
}

func linkIndex(c *rtnetlink.Conn, name string) (uint32, error) {
	links, err := c.Link.List()
	if err != nil {
		return 0, err
	}
	for _, m := range links {
		if m.Attributes != nil && m.Attributes.Name == name {
			return m.Index, nil
		}
	}
	return 0, fmt.Errorf("no link %s", name)
}

func setUp(c *rtnetlink.Conn, name string) error {
	idx, err := linkIndex(c, name)
	if err != nil {
		return err
	}
	return c.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: idx, Flags: unix.IFF_UP, Change: unix.IFF_UP})
}

func addAddr(c *rtnetlink.Conn, idx uint32, a netip.Addr, bits int) error {
	ip := net.IP(a.AsSlice())
	p := netip.PrefixFrom(a, bits).Masked().Addr().As4()
	mask := net.CIDRMask(bits, 32)
	brd := make(net.IP, 4)
	for i := range brd {
		brd[i] = p[i] | ^mask[i]
	}
	return c.Address.New(&rtnetlink.AddressMessage{Family: unix.AF_INET, PrefixLength: uint8(bits), Scope: unix.RT_SCOPE_UNIVERSE, Index: idx,
		Attributes: &rtnetlink.AddressAttributes{Address: ip, Local: ip, Broadcast: brd}})
}

// linkEnd is one end of a link: its egress shapes one direction.
type linkEnd struct {
	ns, dev string
	// down: the direction away from the spine (switch → worker, spine →
	// leaf); uplink: an end of a leaf–spine link.
	down, uplink bool
}

// linkEnds are both ends of every link: the worker's end shapes worker →
// switch, the switch's (a leaf's) end switch → worker; in a tree the
// leaf's UplinkIf leaf → spine and the spine's port spine → leaf.
func (l *Lab) linkEnds() []linkEnd {
	var out []linkEnd
	for i, ns := range l.Workers {
		sw, _ := l.WorkerSwitch(i)
		out = append(out, linkEnd{ns: ns, dev: WorkerIf}, linkEnd{ns: sw, dev: switchPort(i), down: true})
	}
	for j, ns := range l.Leaves {
		out = append(out, linkEnd{ns: ns, dev: UplinkIf, uplink: true}, linkEnd{ns: l.Switch, dev: spinePort(j), down: true, uplink: true})
	}
	return out
}

// shapedEnds are the link ends that carry a qdisc now.
func (l *Lab) shapedEnds() []linkEnd {
	var out []linkEnd
	for _, e := range l.linkEnds() {
		if e.uplink && l.spineShaped || !e.uplink && l.shaped {
			out = append(out, e)
		}
	}
	return out
}

// Shape shapes both directions of every worker's link as s says (tbf:
// rate, a burst of max(64 KiB, 1 ms at the rate), a queue of s.Queue at
// the rate), or removes the shaping for s.RateBps 0. A tree's leaf–spine
// links are ShapeSpine's.
func (l *Lab) Shape(ctx context.Context, s Shaping) error {
	return l.shape(ctx, s, false, &l.shaped)
}

// ShapeSpine shapes both directions of every leaf–spine link of a tree as
// Shape does the workers' links (an oversubscribed tier is a rate below
// the workers' sum); a lab without leaves has none.
func (l *Lab) ShapeSpine(ctx context.Context, s Shaping) error {
	return l.shape(ctx, s, true, &l.spineShaped)
}

func (l *Lab) shape(ctx context.Context, s Shaping, uplinks bool, shaped *bool) error {
	var ends []linkEnd
	for _, e := range l.linkEnds() {
		if e.uplink == uplinks {
			ends = append(ends, e)
		}
	}
	if s.RateBps == 0 {
		if !*shaped {
			return nil
		}
		for _, e := range ends {
			if err := run(ctx, "tc", "-n", e.ns, "qdisc", "del", "dev", e.dev, "root"); err != nil {
				return err
			}
		}
		*shaped = false
		return nil
	}
	if s.Queue <= 0 {
		s.Queue = DefaultQueue
	}
	// tbf cuts a GSO/TSO buffer larger than its burst into packets in
	// software, a per-packet CPU cost a wire does not have (a NIC
	// segments in hardware); 64 KiB is the largest such buffer, so the
	// shaper charges them at the rate without cutting them.
	burst := max(64<<10, s.RateBps/8/1000)
	limit := max(burst, uint64(float64(s.RateBps)/8*s.Queue.Seconds()))
	for _, e := range ends {
		if err := run(ctx, "tc", "-n", e.ns, "qdisc", "replace", "dev", e.dev, "root", "tbf",
			"rate", strconv.FormatUint(s.RateBps, 10)+"bit", "burst", strconv.FormatUint(burst, 10), "limit", strconv.FormatUint(limit, 10)); err != nil {
			return err
		}
	}
	*shaped = true
	return nil
}

// SetWirePackets makes every link end cut UDP GSO and TCP TSO datagrams
// into the packets a wire would carry before they reach the link (ethtool
// -K tx-udp-segmentation off tso off: the kernel segments in software at
// the veth), or gives the veths their default offloads back (off). A veth
// otherwise carries a GSO datagram of up to 64 KiB as one buffer: tbf
// charges it packet by packet, but the loss rules see one packet and drop
// the whole burst (a SwitchML message, a run of TCP segments), which is not
// what 1 % loss on a wire does. The lab turns it on for every row of a
// sweep with loss, so the loss-free rows it is compared with pay the same
// segmentation.
func (l *Lab) SetWirePackets(ctx context.Context, on bool) error {
	if on == l.wire {
		return nil
	}
	v := "on"
	if on {
		v = "off"
	}
	for _, e := range l.linkEnds() {
		if err := run(ctx, "ip", "netns", "exec", e.ns, "ethtool", "-K", e.dev, "tx-udp-segmentation", v, "tso", v); err != nil {
			return err
		}
	}
	l.wire = on
	return nil
}

// SetLoss makes every link direction drop a fraction p of the IPv4
// packets arriving on it, at random (nftables, netdev ingress, numgen
// random mod 10⁶); p = 0 removes the rules.
func (l *Lab) SetLoss(ctx context.Context, p float64) error {
	if !(p >= 0 && p < 1) {
		return fmt.Errorf("netlab: loss %v: give a probability in [0, 1)", p)
	}
	if p == 0 && !l.lossy {
		return nil
	}
	threshold := int64(p*1e6 + 0.5)
	byNS := map[string][]string{}
	for _, e := range l.linkEnds() {
		byNS[e.ns] = append(byNS[e.ns], e.dev)
	}
	for _, ns := range l.namespaces() {
		// add + delete: one transaction that also works when the table
		// does not exist yet (nft 1.0.6 has no "destroy").
		script := fmt.Sprintf("add table netdev %s\ndelete table netdev %s\n", nftTable, nftTable)
		if p > 0 {
			script += fmt.Sprintf("table netdev %s {\n", nftTable)
			for _, dev := range byNS[ns] {
				script += fmt.Sprintf("  chain loss_%s { type filter hook ingress device %q priority 0; meta protocol ip numgen random mod 1000000 < %d counter drop; }\n",
					dev, dev, threshold)
			}
			script += "}\n"
		}
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("netlab: nft in %s: %v: %s", ns, err, bytes.TrimSpace(out))
		}
	}
	l.lossy = p > 0
	return nil
}

func run(ctx context.Context, name string, args ...string) error {
	if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("netlab: %s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Command is name with args run in namespace ns (through `ip netns exec`),
// in a process group of its own that gets SIGTERM when ctx ends (SIGKILL
// 5 s later) and SIGKILL if this process dies.
func (l *Lab) Command(ctx context.Context, ns, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Do runs fn on an OS thread in namespace ns: sockets fn opens live there
// (and stay there, whoever uses them later). fn must not start goroutines
// that expect to be in ns.
func (l *Lab) Do(ns string, fn func() error) error {
	return doIn(filepath.Join(nsDir, ns), fn)
}

func doIn(path string, fn func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("netlab: open namespace: %w", err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netlab: open this thread's namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netlab: enter namespace %s: %w", path, err)
			return
		}
		err = fn()
		// Back to where the thread came from; if that fails the thread
		// stays locked and ends with this goroutine.
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// Counters reads the lab's counters now.
func (l *Lab) Counters(ctx context.Context) (Counters, error) {
	var c Counters
	for _, ns := range l.namespaces() {
		var snmp map[string]uint64
		err := l.Do(ns, func() error {
			b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/net/snmp", unix.Gettid()))
			if err != nil {
				return err
			}
			snmp, err = parseSNMP(b)
			return err
		})
		if err != nil {
			return c, fmt.Errorf("netlab: counters of %s: %w", ns, err)
		}
		c.UDPRcvbufErrors += snmp["Udp.RcvbufErrors"]
		c.TCPRetransSegs += snmp["Tcp.RetransSegs"]
		if slices.Contains(l.switchNamespaces(), ns) {
			c.SwitchUDPRcvbufErrors += snmp["Udp.RcvbufErrors"]
		}
		if l.lossy {
			out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "nft", "-j", "list", "table", "netdev", nftTable).Output()
			if err != nil {
				return c, fmt.Errorf("netlab: nft counters of %s: %w", ns, err)
			}
			n, err := nftDrops(out)
			if err != nil {
				return c, fmt.Errorf("netlab: nft counters of %s: %w", ns, err)
			}
			c.LossDrops += n
		}
	}
	for _, e := range l.shapedEnds() {
		out, err := exec.CommandContext(ctx, "tc", "-n", e.ns, "-s", "-j", "qdisc", "show", "dev", e.dev).Output()
		if err != nil {
			return c, fmt.Errorf("netlab: qdisc counters of %s in %s: %w", e.dev, e.ns, err)
		}
		n, err := qdiscDrops(out)
		if err != nil {
			return c, fmt.Errorf("netlab: qdisc counters of %s in %s: %w", e.dev, e.ns, err)
		}
		c.QueueDrops += n
		if e.down {
			c.QueueDropsDown += n
		} else {
			c.QueueDropsUp += n
		}
	}
	return c, nil
}

// Close ends every process still running in the lab's namespaces and
// removes the namespaces (with them the links, qdiscs and rules). It may be
// called more than once.
func (l *Lab) Close() error {
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	for _, ns := range l.namespaces() {
		if err := removeNamespace(ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeNamespace kills the processes in ns and deletes it; a namespace
// that does not exist is no error.
func removeNamespace(ns string) error {
	path := filepath.Join(nsDir, ns)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	killIn(path)
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		return fmt.Errorf("netlab: ip netns del %s: %v: %s", ns, err, bytes.TrimSpace(out))
	}
	return nil
}

// killIn sends SIGKILL to every process whose network namespace is the one
// bound at path (as `ip netns pids` finds them) and waits briefly for them
// to go.
func killIn(path string) {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	var killed []int
	for _, p := range procs {
		var ps unix.Stat_t
		if unix.Stat(p, &ps) != nil || ps.Ino != st.Ino || ps.Dev != st.Dev {
			continue
		}
		pid, err := strconv.Atoi(strings.Split(p, "/")[2])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed = append(killed, pid)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for _, pid := range killed {
		for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Namespaces lists the namespaces whose names start with prefix
// (DefaultPrefix if empty), of any owner.
func Namespaces(prefix string) ([]string, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	ents, err := os.ReadDir(nsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netlab: list namespaces: %w", err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// owner is the pid in a namespace name Prefix<pid>-<role>, or 0.
func owner(prefix, name string) int {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0
	}
	pid, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// Cleanup removes what labs of prefix (DefaultPrefix if empty) left behind
// when their process died (SIGKILL, a crash): every namespace named
// prefix<pid>-… whose pid no longer runs, and the processes still in it.
// Labs of running processes are left alone. It returns the namespaces it
// removed.
func Cleanup(prefix string) ([]string, error) {
	if err := CheckRoot(); err != nil {
		return nil, err
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	names, err := Namespaces(prefix)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, ns := range names {
		pid := owner(prefix, ns)
		if pid == 0 {
			continue // not a lab's name
		}
		if alive(pid) {
			continue // its lab still runs (this process's own too)
		}
		if err := removeNamespace(ns); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, ns)
	}
	return removed, errors.Join(errs...)
}

// alive reports whether pid runs (a zombie, killed but not yet reaped,
// does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state …: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}
