package rdmadev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/Mellanox/rdmamap"
	"github.com/prometheus/client_golang/prometheus"
)

// On the host's sysfs (root SysfsRoot) the device list, the netdev → device
// mapping and the port counters come from github.com/Mellanox/rdmamap,
// which reads /sys/class/infiniband itself. rdmamap knows no other root, so
// a captured tree (the fixtures under testdata) is read by this package's
// own code, the same files in the same way; TestHostMatchesOwnReader checks
// the two agree wherever the host has RDMA devices (the QEMU guest's rxe).
// What rdmamap does not cover — port state, GID tables and their types, the
// parent netdev of a software device, uverbs — is read here on every root.

// onHost reports whether root is the host's sysfs, which rdmamap reads.
func onHost(root string) bool { return filepath.Clean(root) == SysfsRoot }

// hostDeviceNames lists the host's RDMA devices with rdmamap; none (also on
// a kernel without RDMA, where /sys/class/infiniband does not exist) is an
// empty list.
func hostDeviceNames() []string {
	names := rdmamap.GetRdmaDeviceList()
	sort.Strings(names)
	return names
}

// Counters are one port's counters, by sysfs file name.
type Counters struct {
	// HW is hw_counters: the driver's own (rxe: rcvd_pkts, sent_pkts,
	// duplicate_request, …; mlx5: out_of_buffer, rx_write_requests, …).
	HW map[string]uint64 `json:"hw_counters,omitempty"`
	// Port is counters: the InfiniBand port counters a ConnectX keeps
	// (port_xmit_data and port_rcv_data count 4-byte words,
	// port_xmit_packets, port_rcv_errors, …); rxe has none.
	Port map[string]uint64 `json:"counters,omitempty"`
}

const portCountersDir = "counters"

// PortCounters reads a port's hw_counters and counters (either may be
// absent: an empty map). An error means neither directory could be read.
func PortCounters(root, dev string, port int) (Counters, error) {
	var c Counters
	var errHW, errPort error
	if onHost(root) {
		var hw, pc []rdmamap.RdmaStatEntry
		hw, errHW = rdmamap.GetRdmaSysfsHwStats(dev, port)
		pc, errPort = rdmamap.GetRdmaSysfsStats(dev, port)
		c.HW, c.Port = statMap(hw), statMap(pc)
	} else {
		dir := filepath.Join(root, classDir, dev, portsDir, strconv.Itoa(port))
		c.HW, errHW = readCounterDir(filepath.Join(dir, hwCountersDir))
		c.Port, errPort = readCounterDir(filepath.Join(dir, portCountersDir))
	}
	if errHW != nil && errPort != nil {
		return Counters{}, fmt.Errorf("rdmadev: %s port %d counters: %w", dev, port, errors.Join(errHW, errPort))
	}
	return c, nil
}

func statMap(st []rdmamap.RdmaStatEntry) map[string]uint64 {
	if len(st) == 0 {
		return nil
	}
	m := make(map[string]uint64, len(st))
	for _, e := range st {
		m[e.Name] = e.Value
	}
	return m
}

// readCounterDir reads every counter file of dir (what rdmamap does on the
// host: a file that does not parse is skipped here, 0 there).
func readCounterDir(dir string) (map[string]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	m := make(map[string]uint64, len(ents))
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		v, err := strconv.ParseUint(readTrim(filepath.Join(dir, e.Name())), 10, 64)
		if err != nil {
			continue
		}
		m[e.Name()] = v
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// ErrNoDeviceForNetdev is wrapped by DeviceForNetdev when no RDMA device
// sits on the netdev.
var ErrNoDeviceForNetdev = errors.New("no RDMA device on this netdev")

// DeviceForNetdev returns the RDMA device whose port carries netdev: on the
// host rdmamap's mapping (a RoCE device's GID table names its netdevs; an
// IPoIB netdev's hardware address holds the node GUID), in a captured tree
// the GID tables' ndevs and a software device's parent.
func DeviceForNetdev(root, netdev string) (string, error) {
	if onHost(root) {
		dev, err := rdmamap.GetRdmaDeviceForNetdevice(netdev)
		if err != nil || dev == "" {
			return "", fmt.Errorf("rdmadev: netdev %s: %w (%v)", netdev, ErrNoDeviceForNetdev, err)
		}
		return dev, nil
	}
	names, err := deviceNames(root)
	if err != nil {
		return "", err
	}
	for _, n := range names {
		d, err := ReadDevice(root, n)
		if err != nil {
			return "", err
		}
		for _, p := range d.Ports {
			if p.Netdev == netdev {
				return n, nil
			}
			for _, g := range p.GIDs {
				if g.Netdev == netdev {
					return n, nil
				}
			}
		}
	}
	return "", fmt.Errorf("rdmadev: netdev %s: %w", netdev, ErrNoDeviceForNetdev)
}

// CounterCollector exports the port counters of every RDMA device under
// root as Prometheus metrics, read at each scrape:
//
//	swml_rdma_hw_counters_total{device, port, counter}    hw_counters (rxe, mlx5, …)
//	swml_rdma_port_counters_total{device, port, counter}  counters (InfiniBand PMA: ConnectX)
//
// Both are counters in Prometheus' sense (monotonic, reset when the driver
// is reloaded) except rxe's lifespan (a cache setting in ms), which is left
// out. A host without RDMA devices exports nothing. Safe for concurrent
// scrapes.
type CounterCollector struct {
	root     string
	hw, port *prometheus.Desc
}

// NewCounterCollector returns the collector for root (SysfsRoot on a host).
func NewCounterCollector(root string) *CounterCollector {
	labels := []string{"device", "port", "counter"}
	return &CounterCollector{
		root: root,
		hw: prometheus.NewDesc("swml_rdma_hw_counters_total", "An RDMA device port's hw_counters entry (sysfs class/infiniband/<device>/ports/<port>/hw_counters/<counter>): rxe's rcvd_pkts, sent_pkts, duplicate_request, …; a ConnectX's out_of_buffer, …",
			labels, nil),
		port: prometheus.NewDesc("swml_rdma_port_counters_total", "An RDMA device port's InfiniBand port counter (sysfs …/ports/<port>/counters/<counter>; port_xmit_data and port_rcv_data count 4-byte words)",
			labels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *CounterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.hw
	ch <- c.port
}

// Collect implements prometheus.Collector.
func (c *CounterCollector) Collect(ch chan<- prometheus.Metric) {
	names, err := deviceNames(c.root)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.hw, err)
		return
	}
	for _, dev := range names {
		for _, port := range portNumbers(c.root, dev) {
			pc, err := PortCounters(c.root, dev, port)
			if err != nil {
				continue // a port without counters
			}
			ps := strconv.Itoa(port)
			for name, v := range pc.HW {
				if name == "lifespan" {
					continue
				}
				ch <- prometheus.MustNewConstMetric(c.hw, prometheus.CounterValue, float64(v), dev, ps, name)
			}
			for name, v := range pc.Port {
				ch <- prometheus.MustNewConstMetric(c.port, prometheus.CounterValue, float64(v), dev, ps, name)
			}
		}
	}
}

// portNumbers lists a device's port numbers (rdmamap.GetPorts on the host).
func portNumbers(root, dev string) []int {
	var names []string
	if onHost(root) {
		names = rdmamap.GetPorts(dev)
	} else {
		ents, err := os.ReadDir(filepath.Join(root, classDir, dev, portsDir))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	var ports []int
	for _, n := range names {
		if p, err := strconv.Atoi(n); err == nil {
			ports = append(ports, p)
		}
	}
	sort.Ints(ports)
	return ports
}
