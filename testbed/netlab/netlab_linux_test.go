package netlab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
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
	var rx, tx *net.UDPConn
	if err := l.Do(l.Workers[1], func() (err error) {
		rx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: l.WorkerAddrs[1].AsSlice(), Port: 9999})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if err := l.Do(l.Workers[0], func() (err error) {
		tx, err = net.DialUDP("udp4", &net.UDPAddr{IP: l.WorkerAddrs[0].AsSlice()}, &net.UDPAddr{IP: l.WorkerAddrs[1].AsSlice(), Port: 9999})
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
			if _, err := rx.Read(buf); err != nil {
				break
			}
			got++
		}
		counted <- got
	}()
	msg := make([]byte, 200)
	for i := range n {
		if _, err := tx.Write(msg); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if i%20 == 19 {
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
