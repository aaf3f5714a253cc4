package netlab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// needLab skips when this process cannot build a lab (not root, or ip or
// tc missing); nft is checked where loss is tested.
func needLab(t *testing.T) {
	t.Helper()
	if err := CheckRoot(); err != nil {
		t.Skip(err)
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

// udpAcross sends n datagrams from worker 0 to worker 1 of l (through the
// switch namespace's bridge) and counts those that arrive within a bound.
func udpAcross(t *testing.T, l *Lab, n int) int {
	t.Helper()
	return udpBetween(t, l, 0, l.WorkerAddrs[0], 1, l.WorkerAddrs[1], n)
}

// udpBetween sends n datagrams from address from of worker i to address
// to of worker j and counts those that arrive from that address within a
// bound.
func udpBetween(t *testing.T, l *Lab, i int, from netip.Addr, j int, to netip.Addr, n int) int {
	t.Helper()
	return udpNS(t, l, l.Workers[i], from, l.Workers[j], to, n)
}

// udpNS is udpBetween from address from in namespace fromNS to address to
// in namespace toNS.
func udpNS(t *testing.T, l *Lab, fromNS string, from netip.Addr, toNS string, to netip.Addr, n int) int {
	t.Helper()
	var rx, tx *net.UDPConn
	if err := l.Do(toNS, func() (err error) {
		rx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: to.AsSlice(), Port: 9999})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if err := l.Do(fromNS, func() (err error) {
		tx, err = net.DialUDP("udp4", &net.UDPAddr{IP: from.AsSlice()}, &net.UDPAddr{IP: to.AsSlice(), Port: 9999})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	// Receive while sending: the receive buffer holds ~160 of them.
	counted := make(chan int)
	go func() {
		got := 0
		buf := make([]byte, 2048)
		for got < n {
			rx.SetReadDeadline(time.Now().Add(time.Second))
			_, src, err := rx.ReadFromUDPAddrPort(buf)
			if err != nil {
				break
			}
			if src.Addr() == from {
				got++
			}
		}
		counted <- got
	}()
	msg := make([]byte, 200)
	for i := range n {
		if _, err := tx.Write(msg); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if i%20 == 19 {
			// Pacing is the point: the receiver keeps up with it, and a
			// window on arrivals would stall on the links' loss.
			time.Sleep(time.Millisecond)
		}
	}
	got := <-counted
	return got
}

func TestLab(t *testing.T) {
	needLab(t)
	ctx := context.Background()
	prefix := "swlabtest"
	l, err := Build(ctx, Config{Workers: 2, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	own := fmt.Sprintf("%s%d-", prefix, os.Getpid())
	if ns, err := Namespaces(own); err != nil || len(ns) != 3 {
		t.Fatalf("namespaces of the lab: %v, %v; want 3", ns, err)
	}
	if err := l.Do(l.Switch, func() error {
		b, err := os.ReadFile("/proc/sys/net/bridge/bridge-nf-call-iptables")
		if errors.Is(err, fs.ErrNotExist) {
			return nil // no br_netfilter: nothing to turn off
		}
		if err == nil && string(b) != "0\n" {
			err = fmt.Errorf("bridge-nf-call-iptables = %q in the switch namespace, want 0", b)
		}
		return err
	}); err != nil {
		t.Error(err)
	}
	if got := udpAcross(t, l, 200); got != 200 {
		t.Errorf("unshaped, no loss: %d of 200 datagrams arrived", got)
	}
	if err := l.Shape(ctx, Shaping{RateBps: 50e6}); err != nil {
		t.Fatal(err)
	}
	if got := udpAcross(t, l, 200); got != 200 {
		t.Errorf("shaped to 50 Mbit/s, no loss: %d of 200 datagrams arrived", got)
	}
	if _, err := l.Counters(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Log("nft not installed: loss not tested here (the lab's CI block installs nftables)")
	} else {
		before, err := l.Counters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.SetLoss(ctx, 0.5); err != nil {
			t.Fatal(err)
		}
		// Two lossy link directions at 0.5: a quarter arrives; 400 sent,
		// far from both 0 and 400 (the chance of either is < 1e-40).
		got := udpAcross(t, l, 400)
		after, err := l.Counters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got == 0 || got >= 400 {
			t.Errorf("loss 0.5 per link direction: %d of 400 datagrams arrived", got)
		}
		if d := after.Sub(before); d.LossDrops < uint64(400-got) {
			t.Errorf("loss rules counted %d drops, %d datagrams missing", d.LossDrops, 400-got)
		}
		if err := l.SetLoss(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if got := udpAcross(t, l, 200); got != 200 {
			t.Errorf("loss removed: %d of 200 datagrams arrived", got)
		}
	}
	if err := l.Shape(ctx, Shaping{}); err != nil {
		t.Fatal(err)
	}
	// A process left running in a namespace does not keep it alive.
	sleeper := l.Command(ctx, l.Workers[0], "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if ns, err := Namespaces(own); err != nil || len(ns) != 0 {
		t.Errorf("after Close: namespaces %v, %v; want none", ns, err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestLabAddrs: with AddrsPerWorker 3 every worker's eth0 and the
// switch's br0 hold exactly their three addresses of the layout, traffic
// flows between secondary addresses (from the address bound, to the
// address bound), an unbound socket to the switch's k-th address gets the
// worker's k-th as its source, and Close removes them with the namespaces.
func TestLabAddrs(t *testing.T) {
	needLab(t)
	prefix := "swlabaddr"
	l, err := Build(context.Background(), Config{Workers: 2, Prefix: prefix, AddrsPerWorker: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if len(l.Addrs) != 3 || !slices.Equal(l.Addrs[0], l.WorkerAddrs) || len(l.SwitchAddrs) != 3 || l.SwitchAddrs[0] != l.SwitchAddr {
		t.Fatalf("Addrs %v, WorkerAddrs %v, SwitchAddrs %v: want 3 sets, the first WorkerAddrs and SwitchAddr", l.Addrs, l.WorkerAddrs, l.SwitchAddrs)
	}
	if got := ifAddrs(t, l.Switch, BridgeIf); !slices.Equal(got, l.SwitchAddrs) {
		t.Errorf("%s in %s holds %v, want %v", BridgeIf, l.Switch, got, l.SwitchAddrs)
	}
	for i, ns := range l.Workers {
		var want []netip.Addr
		for _, set := range l.Addrs {
			want = append(want, set[i])
		}
		if got := ifAddrs(t, ns, WorkerIf); !slices.Equal(got, want) {
			t.Errorf("%s in %s holds %v, want %v", WorkerIf, ns, got, want)
		}
		for k, to := range l.SwitchAddrs {
			var from netip.Addr
			if err := l.Do(ns, func() error {
				c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: to.AsSlice(), Port: 9})
				if err != nil {
					return err
				}
				defer c.Close()
				from = c.LocalAddr().(*net.UDPAddr).AddrPort().Addr()
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if from != l.Addrs[k][i] {
				t.Errorf("worker %d to the switch's %v: from %v, want its address %d, %v", i, to, from, k, l.Addrs[k][i])
			}
		}
	}
	if got := udpBetween(t, l, 0, l.Addrs[2][0], 1, l.Addrs[1][1], 50); got != 50 {
		t.Errorf("%v → %v: %d of 50 datagrams arrived from the address sent from", l.Addrs[2][0], l.Addrs[1][1], got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ns := range l.Workers {
		if _, _, err := dialNS(ns); err == nil {
			t.Errorf("after Close, %s (and its addresses) still there", ns)
		}
	}
	if ns, err := Namespaces(fmt.Sprintf("%s%d-", prefix, os.Getpid())); err != nil || len(ns) != 0 {
		t.Errorf("after Close: namespaces %v, %v; want none", ns, err)
	}
}

// ifAddrs lists the IPv4 addresses of interface name in namespace ns, in
// the kernel's order (primary first).
func ifAddrs(t *testing.T, ns, name string) []netip.Addr {
	t.Helper()
	c, f, err := dialNS(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defer c.Close()
	idx, err := linkIndex(c, name)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Address.List()
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, m := range msgs {
		if m.Index != idx || m.Family != unix.AF_INET || m.Attributes == nil {
			continue
		}
		a, ok := netip.AddrFromSlice(m.Attributes.Address.To4())
		if !ok {
			t.Fatalf("address %v of %s in %s", m.Attributes.Address, name, ns)
		}
		out = append(out, a)
	}
	return out
}

func TestCleanup(t *testing.T) {
	needLab(t)
	// A lab whose process is gone: the pid of a process that ended.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	prefix := "swlabclean"
	gone := fmt.Sprintf("%s%d-sw", prefix, dead.Process.Pid)
	mine := fmt.Sprintf("%s%d-sw", prefix, os.Getpid())
	for _, ns := range []string{gone, mine} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
		}
	}
	defer exec.Command("ip", "netns", "del", mine).Run()
	defer exec.Command("ip", "netns", "del", gone).Run()
	removed, err := Cleanup(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != gone {
		t.Errorf("Cleanup removed %v, want [%s] (and not %s, whose process runs)", removed, gone, mine)
	}
	if _, err := os.Stat("/run/netns/" + gone); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there: %v", gone, err)
	}
	if _, err := os.Stat("/run/netns/" + mine); err != nil {
		t.Errorf("%s removed: %v", mine, err)
	}
}

// TestLabTree: a tree of 2 leaves × 2 workers has the spine's, the
// leaves' and the workers' namespaces and addresses of the layout; a
// worker reaches its leaf, a leaf (from its own address) the spine and
// back, shaped too, while a worker does not reach a worker of the other
// leaf (the only routes between levels are the leaf–spine host routes);
// Close removes every namespace.
func TestLabTree(t *testing.T) {
	needLab(t)
	ctx := context.Background()
	prefix := "swlabtree"
	l, err := Build(ctx, Config{Workers: 4, Leaves: 2, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	own := fmt.Sprintf("%s%d-", prefix, os.Getpid())
	if ns, err := Namespaces(own); err != nil || len(ns) != 7 {
		t.Fatalf("namespaces of the tree: %v, %v; want 7", ns, err)
	}
	if got := fmt.Sprint(l.SwitchAddr, l.WorkerAddrs, l.LeafAddrs, l.WorkersPerLeaf()); got != "10.77.0.1 [10.77.0.2 10.77.0.3 10.77.0.4 10.77.0.5] [10.77.0.6 10.77.0.7] 2" {
		t.Errorf("spine, workers, leaves, workers per leaf: %s", got)
	}
	for i, want := range []int{0, 0, 1, 1} {
		if ns, a := l.WorkerSwitch(i); ns != l.Leaves[want] || a != l.LeafAddrs[want] {
			t.Errorf("worker %d's switch: %s %v, want leaf %d", i, ns, a, want)
		}
	}
	for j, ns := range l.Leaves {
		if got := ifAddrs(t, ns, BridgeIf); !slices.Equal(got, []netip.Addr{l.LeafAddrs[j]}) {
			t.Errorf("%s in %s holds %v, want %v", BridgeIf, ns, got, l.LeafAddrs[j])
		}
	}
	reach := func(what string) {
		t.Helper()
		if got := udpNS(t, l, l.Workers[3], l.WorkerAddrs[3], l.Leaves[1], l.LeafAddrs[1], 100); got != 100 {
			t.Errorf("%s: worker 3 → leaf 1: %d of 100 datagrams arrived", what, got)
		}
		for j, ns := range l.Leaves {
			if got := udpNS(t, l, ns, l.LeafAddrs[j], l.Switch, l.SwitchAddr, 100); got != 100 {
				t.Errorf("%s: leaf %d → spine: %d of 100 datagrams arrived", what, j, got)
			}
			if got := udpNS(t, l, l.Switch, l.SwitchAddr, ns, l.LeafAddrs[j], 100); got != 100 {
				t.Errorf("%s: spine → leaf %d: %d of 100 datagrams arrived", what, j, got)
			}
		}
	}
	reach("unshaped")
	if got := udpBetween(t, l, 0, l.WorkerAddrs[0], 2, l.WorkerAddrs[2], 20); got != 0 {
		t.Errorf("worker 0 → worker 2 of the other leaf: %d of 20 datagrams arrived, want none", got)
	}
	if err := l.Shape(ctx, Shaping{RateBps: 50e6}); err != nil {
		t.Fatal(err)
	}
	if err := l.ShapeSpine(ctx, Shaping{RateBps: 20e6}); err != nil {
		t.Fatal(err)
	}
	reach("shaped")
	if _, err := l.Counters(ctx); err != nil {
		t.Fatal(err)
	}
	for _, e := range l.shapedEnds() {
		out, err := exec.Command("tc", "-n", e.ns, "qdisc", "show", "dev", e.dev).CombinedOutput()
		rate := "50Mbit"
		if e.uplink {
			rate = "20Mbit"
		}
		if err != nil || !strings.Contains(string(out), "tbf") || !strings.Contains(string(out), rate) {
			t.Errorf("qdisc of %s in %s: %s %v, want tbf at %s", e.dev, e.ns, out, err, rate)
		}
	}
	if n := len(l.shapedEnds()); n != 12 {
		t.Errorf("%d shaped link ends, want 12 (4 worker links, 2 leaf–spine links, both ends)", n)
	}
	if err := l.ShapeSpine(ctx, Shaping{}); err != nil {
		t.Fatal(err)
	}
	if n := len(l.shapedEnds()); n != 8 {
		t.Errorf("leaf–spine links unshaped: %d shaped link ends, want 8", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if ns, err := Namespaces(own); err != nil || len(ns) != 0 {
		t.Errorf("after Close: namespaces %v, %v; want none", ns, err)
	}
}
