package rdmadev

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testdata/sysfs is the rxe0 sysfs tree captured from the QEMU test guest
// (testbed/soft-roce/qemu/harness.sh capture-sysfs; Debian kernel 6.1, rxe0
// on veth0 with 10.0.0.1/24 and fd00::1/64), gid table cut to 16 entries.
const fixture = "testdata/sysfs"

func TestListDevicesFixture(t *testing.T) {
	devs, err := ListDevices(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0].Name != "rxe0" {
		t.Fatalf("devices = %+v, want rxe0", devs)
	}
	d := devs[0]
	if d.Parent != "veth0" || d.NodeType != "1: CA" {
		t.Errorf("parent %q node type %q", d.Parent, d.NodeType)
	}
	if len(d.Ports) != 1 {
		t.Fatalf("ports = %+v", d.Ports)
	}
	p := d.Ports[0]
	if p.Number != 1 || p.State != "ACTIVE" || p.StateNum != 4 || !p.Active() || p.LinkLayer != "Ethernet" || p.PhysState != "LinkUp" || p.Netdev != "veth0" {
		t.Errorf("port = %+v", p)
	}
	var got []string
	for _, g := range p.GIDs {
		got = append(got, g.Addr().String()+"/"+string(g.Type)+"/"+g.Netdev)
	}
	want := "fe80::dc17:22ff:fe12:999d/RoCE v2/veth0 10.0.0.1/RoCE v2/veth0 fd00::1/RoCE v2/veth0"
	if strings.Join(got, " ") != want {
		t.Errorf("gids = %q\nwant   %q", strings.Join(got, " "), want)
	}
}

func TestFindRoCEv2GID(t *testing.T) {
	d, err := ReadDevice(fixture, "rxe0")
	if err != nil {
		t.Fatal(err)
	}
	p := &d.Ports[0]
	for _, tc := range []struct {
		name  string
		addr  string
		index int
		err   bool
	}{
		{"ipv4", "10.0.0.1", 1, false},
		{"ipv4-mapped", "::ffff:10.0.0.1", 1, false},
		{"ipv6", "fd00::1", 2, false},
		{"link-local", "fe80::dc17:22ff:fe12:999d", 0, false},
		{"absent", "10.0.0.9", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := FindRoCEv2GID(p, netip.MustParseAddr(tc.addr))
			if tc.err {
				if !errors.Is(err, ErrNoGID) || !strings.Contains(err.Error(), "10.0.0.1 (index 1)") {
					t.Fatalf("err = %v, want ErrNoGID naming the GIDs that exist", err)
				}
				return
			}
			if err != nil || g.Index != tc.index {
				t.Fatalf("got %+v, %v; want index %d", g, err, tc.index)
			}
		})
	}
}

func TestRoCEv1Ignored(t *testing.T) {
	root := t.TempDir()
	port := filepath.Join(root, "class/infiniband/mlx5_0/ports/1")
	for path, body := range map[string]string{
		"state": "4: ACTIVE", "link_layer": "Ethernet", "phys_state": "5: LinkUp",
		"gids/0": "0000:0000:0000:0000:0000:ffff:c0a8:0007", "gid_attrs/types/0": "IB/RoCE v1", "gid_attrs/ndevs/0": "eth0",
		"gids/1": "0000:0000:0000:0000:0000:ffff:c0a8:0007", "gid_attrs/types/1": "RoCE v2", "gid_attrs/ndevs/1": "eth0",
		"gids/2": "0000:0000:0000:0000:0000:0000:0000:0000",
	} {
		p := filepath.Join(port, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, err := ReadDevice(root, "mlx5_0")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(d.Ports[0].GIDs); n != 2 {
		t.Fatalf("gids = %+v, want 2 populated", d.Ports[0].GIDs)
	}
	g, err := FindRoCEv2GID(&d.Ports[0], netip.MustParseAddr("192.168.0.7"))
	if err != nil || g.Index != 1 {
		t.Fatalf("got %+v, %v; want the RoCE v2 entry, index 1", g, err)
	}
}

func TestListDevicesNone(t *testing.T) {
	_, err := ListDevices(t.TempDir())
	if !errors.Is(err, ErrNoRDMADevices) {
		t.Fatalf("err = %v, want ErrNoRDMADevices", err)
	}
}

func TestHWCountersFixture(t *testing.T) {
	m, err := HWCounters(fixture, "rxe0", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m["rcvd_pkts"]; !ok {
		t.Fatalf("counters = %v, want rcvd_pkts", m)
	}
	if _, err := HWCounter(fixture, "rxe0", 1, "sent_pkts"); err != nil {
		t.Fatal(err)
	}
}

func TestNetdevsLoopback(t *testing.T) {
	nd, err := Netdevs()
	if err != nil {
		t.Skipf("rtnetlink unavailable: %v", err)
	}
	lo, ok := nd["lo"]
	if !ok {
		t.Fatalf("no lo in %v", nd)
	}
	found := false
	for _, p := range lo.Addrs {
		if p.Addr() == netip.MustParseAddr("127.0.0.1") {
			found = true
		}
	}
	if !found {
		t.Errorf("lo addrs = %v, want 127.0.0.1", lo.Addrs)
	}
}

// TestUverbsDevice: the character device is found through
// class/infiniband_verbs/uverbsN/ibdev under the same root as the device.
func TestUverbsDevice(t *testing.T) {
	root := t.TempDir()
	for path, body := range map[string]string{
		"class/infiniband/mlx5_1/ports/1/state":      "4: ACTIVE",
		"class/infiniband_verbs/uverbs0/ibdev":       "mlx5_0",
		"class/infiniband_verbs/uverbs1/ibdev":       "mlx5_1",
		"class/infiniband_verbs/abi_version":         "6",
		"class/infiniband/mlx5_1/ports/1/link_layer": "Ethernet",
	} {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, err := ReadDevice(root, "mlx5_1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Uverbs != "/dev/infiniband/uverbs1" {
		t.Fatalf("uverbs = %q, want /dev/infiniband/uverbs1", d.Uverbs)
	}
	if d, err := ReadDevice(fixture, "rxe0"); err != nil || d.Uverbs != "" {
		t.Fatalf("fixture without infiniband_verbs: uverbs %q, %v; want none", d.Uverbs, err)
	}
}

// TestListDevicesHost runs discovery on this host's sysfs, the default
// root: no RDMA class is ErrNoRDMADevices, anything else must parse.
func TestListDevicesHost(t *testing.T) {
	devs, err := ListDevices(SysfsRoot)
	if errors.Is(err, ErrNoRDMADevices) {
		t.Skipf("no RDMA devices on this host: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.Name == "" || len(d.Ports) == 0 {
			t.Errorf("device %+v: want a name and ports", d)
		}
	}
}
