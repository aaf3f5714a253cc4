package rdmadev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

func TestPortCountersFixture(t *testing.T) {
	c, err := PortCounters(fixture, "rxe0", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"rcvd_pkts", "sent_pkts", "duplicate_request", "lifespan"} {
		if _, ok := c.HW[n]; !ok {
			t.Errorf("hw_counters = %v: no %s", c.HW, n)
		}
	}
	if c.Port != nil {
		t.Errorf("rxe has no counters directory, got %v", c.Port)
	}
	d, err := ReadDevice(fixture, "rxe0")
	if err != nil || !reflect.DeepEqual(d.Ports[0].Counters, c) {
		t.Fatalf("ReadDevice counters %+v, %v; want %+v", d.Ports[0].Counters, err, c)
	}
	if _, err := PortCounters(fixture, "rxe0", 9); err == nil {
		t.Fatal("counters of a port that does not exist: no error")
	}
}

// TestPortCountersBoth: a ConnectX-like port with both directories.
func TestPortCountersBoth(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, classDir, "mlx5_0", portsDir, "1")
	for sub, files := range map[string]map[string]string{
		hwCountersDir:   {"out_of_buffer": "7\n", "rx_write_requests": "123\n"},
		portCountersDir: {"port_xmit_data": "4096\n", "port_rcv_errors": "0\n", "bad": "x\n"},
	} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		for n, v := range files {
			if err := os.WriteFile(filepath.Join(dir, sub, n), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	c, err := PortCounters(root, "mlx5_0", 1)
	want := Counters{HW: map[string]uint64{"out_of_buffer": 7, "rx_write_requests": 123},
		Port: map[string]uint64{"port_xmit_data": 4096, "port_rcv_errors": 0}}
	if err != nil || !reflect.DeepEqual(c, want) {
		t.Fatalf("PortCounters = %+v, %v; want %+v", c, err, want)
	}
	m := gather(t, NewCounterCollector(root))
	if m[`swml_rdma_port_counters_total{counter="port_xmit_data",device="mlx5_0",port="1"}`] != 4096 ||
		m[`swml_rdma_hw_counters_total{counter="out_of_buffer",device="mlx5_0",port="1"}`] != 7 {
		t.Fatalf("metrics %v", m)
	}
}

func TestDeviceForNetdevFixture(t *testing.T) {
	if d, err := DeviceForNetdev(fixture, "veth0"); err != nil || d != "rxe0" {
		t.Fatalf("veth0: %q, %v; want rxe0", d, err)
	}
	if _, err := DeviceForNetdev(fixture, "lo"); !errors.Is(err, ErrNoDeviceForNetdev) {
		t.Fatalf("lo: %v, want ErrNoDeviceForNetdev", err)
	}
}

// gather collects c through a pedantic registry (which checks the metrics
// against their descriptions) into "name{labels}" → value.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if problems, err := promlint.NewWithMetricFamilies(mfs).Lint(); err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %v", problems, err)
	}
	m := map[string]float64{}
	for _, mf := range mfs {
		for _, x := range mf.GetMetric() {
			var ls []string
			for _, l := range x.GetLabel() {
				ls = append(ls, l.GetName()+`="`+l.GetValue()+`"`)
			}
			sort.Strings(ls)
			if mf.GetType() != dto.MetricType_COUNTER {
				t.Fatalf("%s is %v, want a counter", mf.GetName(), mf.GetType())
			}
			m[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = x.GetCounter().GetValue()
		}
	}
	return m
}

func TestCounterCollectorFixture(t *testing.T) {
	m := gather(t, NewCounterCollector(fixture))
	hw, err := HWCounters(fixture, "rxe0", 1)
	if err != nil {
		t.Fatal(err)
	}
	for n, v := range hw {
		key := `swml_rdma_hw_counters_total{counter="` + n + `",device="rxe0",port="1"}`
		got, ok := m[key]
		if n == "lifespan" {
			if ok {
				t.Errorf("lifespan (a setting) exported")
			}
			continue
		}
		if !ok || got != float64(v) {
			t.Errorf("%s = %v (present %v), want %d", key, got, ok, v)
		}
	}
	if len(m) != len(hw)-1 {
		t.Errorf("%d metrics for %d counters", len(m), len(hw))
	}
	// No RDMA devices: nothing exported, no error.
	if m := gather(t, NewCounterCollector(t.TempDir())); len(m) != 0 {
		t.Fatalf("empty sysfs: %v", m)
	}
}

// TestHostMatchesOwnReader reads the host's sysfs twice: through rdmamap
// (root /sys) and through this package's own readers (the same tree as
// /proc/self/root/sys, which rdmamap does not serve). They must agree on
// the devices, ports, netdevs and counter names. A host without RDMA (a
// kernel without it, or no driver loaded) must give ErrNoRDMADevices both
// ways and no counters: discovery keeps working there.
func TestHostMatchesOwnReader(t *testing.T) {
	const alias = "/proc/self/root/sys"
	if _, err := os.Stat(alias); err != nil {
		t.Fatalf("%s: %v", alias, err)
	}
	viaMap, errMap := ListDevices(SysfsRoot)
	own, errOwn := ListDevices(alias)
	if errors.Is(errMap, ErrNoRDMADevices) || errors.Is(errOwn, ErrNoRDMADevices) {
		if !errors.Is(errMap, ErrNoRDMADevices) || !errors.Is(errOwn, ErrNoRDMADevices) {
			t.Fatalf("rdmamap: %v; own reader: %v: they disagree on whether there are devices", errMap, errOwn)
		}
		if m := gather(t, NewCounterCollector(SysfsRoot)); len(m) != 0 {
			t.Fatalf("no RDMA devices, yet counters: %v", m)
		}
		if _, err := DeviceForNetdev(SysfsRoot, "lo"); !errors.Is(err, ErrNoDeviceForNetdev) {
			t.Fatalf("DeviceForNetdev(lo) on a host without RDMA: %v", err)
		}
		t.Logf("no RDMA devices on this host (%v): discovery reports it both ways", errMap)
		return
	}
	if errMap != nil || errOwn != nil {
		t.Fatalf("rdmamap: %v; own reader: %v", errMap, errOwn)
	}
	if len(viaMap) != len(own) {
		t.Fatalf("rdmamap lists %d devices, the own reader %d", len(viaMap), len(own))
	}
	for i := range own {
		a, b := viaMap[i], own[i]
		if a.Name != b.Name || len(a.Ports) != len(b.Ports) {
			t.Fatalf("device %d: rdmamap %s (%d ports), own %s (%d ports)", i, a.Name, len(a.Ports), b.Name, len(b.Ports))
		}
		for j := range a.Ports {
			if keys(a.Ports[j].Counters.HW) != keys(b.Ports[j].Counters.HW) || keys(a.Ports[j].Counters.Port) != keys(b.Ports[j].Counters.Port) {
				t.Errorf("%s port %d: counters differ: rdmamap %v, own %v", a.Name, a.Ports[j].Number, a.Ports[j].Counters, b.Ports[j].Counters)
			}
			if nd := b.Ports[j].Netdev; nd != "" {
				if dev, err := DeviceForNetdev(SysfsRoot, nd); err != nil || dev != a.Name {
					t.Errorf("DeviceForNetdev(%s) = %q, %v; want %s", nd, dev, err, a.Name)
				}
			}
		}
		t.Logf("%s: %d ports, counters of port 1: %v", a.Name, len(a.Ports), a.Ports[0].Counters)
	}
	// The worker's metrics: every hw counter of every port, as read.
	m := gather(t, NewCounterCollector(SysfsRoot))
	for _, d := range own {
		for _, p := range d.Ports {
			for n := range p.Counters.HW {
				key := fmt.Sprintf(`swml_rdma_hw_counters_total{counter="%s",device="%s",port="%d"}`, n, d.Name, p.Number)
				if _, ok := m[key]; !ok && n != "lifespan" {
					t.Errorf("metric %s missing", key)
				}
			}
		}
	}
	t.Logf("%d swml_rdma_* metrics", len(m))
}

func keys(m map[string]uint64) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}
