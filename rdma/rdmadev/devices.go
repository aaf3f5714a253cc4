package rdmadev

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/Mellanox/rdmamap"

	"github.com/swml-rdma/swml-rdma/rdma"
)

// SysfsRoot is the sysfs mount point device discovery reads by default.
// Tests pass a fixture tree instead (testdata/sysfs is a capture of an rxe
// device from the QEMU test guest): every function reads its files under
// the root it is given, so the fixtures test the code that runs on a host.
const SysfsRoot = "/sys"

// The sysfs layout (Documentation/ABI/stable/sysfs-class-infiniband).
const (
	classDir      = "class/infiniband"
	uverbsDir     = "class/infiniband_verbs" // uverbsN/ibdev names the device
	portsDir      = "ports"
	gidAttrsDir   = "gid_attrs"
	gidNdevsDir   = "ndevs"
	hwCountersDir = "hw_counters"
	devDir        = "/dev/infiniband" // where uverbsN character devices live
)

// GIDType is the RoCE version of a GID table entry (sysfs gid_attrs/types).
type GIDType string

const (
	GIDTypeIB     GIDType = "IB/RoCE v1"
	GIDTypeRoCEv2 GIDType = "RoCE v2"
)

// GIDEntry is one populated entry of a port's GID table.
type GIDEntry struct {
	Index  int      `json:"index"`
	GID    rdma.GID `json:"-"`
	Type   GIDType  `json:"type"`
	Netdev string   `json:"netdev,omitempty"`
}

// Addr returns the IP address behind a RoCEv2 GID (IPv4 unmapped).
func (g GIDEntry) Addr() netip.Addr { return g.GID.Addr() }

// Port is one port of an RDMA device.
type Port struct {
	Number int `json:"port"`
	// State is the port state as sysfs spells it without the number
	// ("ACTIVE", "DOWN", "INIT"); StateNum is the IBV_PORT_* number.
	State     string     `json:"state"`
	StateNum  int        `json:"state_num"`
	PhysState string     `json:"phys_state,omitempty"`
	LinkLayer string     `json:"link_layer"` // "Ethernet" for RoCE, "InfiniBand"
	Netdev    string     `json:"netdev,omitempty"`
	GIDs      []GIDEntry `json:"gids"`
	// Counters are the port's hw_counters and counters (PortCounters).
	Counters Counters `json:"counters"`
}

// Active reports whether the port can carry traffic.
func (p *Port) Active() bool { return p.StateNum == 4 }

// DeviceInfo describes one RDMA device as sysfs shows it.
type DeviceInfo struct {
	Name     string `json:"name"`
	NodeType string `json:"node_type,omitempty"`
	NodeGUID string `json:"node_guid,omitempty"`
	FWVer    string `json:"fw_ver,omitempty"`
	// Parent is the netdev a software device (rxe, siw) was created on.
	Parent string `json:"parent,omitempty"`
	// Uverbs is the /dev/infiniband/uverbsN character device, if any.
	Uverbs string `json:"uverbs,omitempty"`
	Ports  []Port `json:"ports"`
}

// ErrNoRDMADevices is returned by ListDevices when sysfs has no RDMA class
// at all (no RDMA driver loaded, or a kernel without RDMA).
var ErrNoRDMADevices = errors.New("no RDMA devices")

// ListDevices reads every RDMA device under root (normally SysfsRoot). It
// returns an error wrapping ErrNoRDMADevices when there are none.
func ListDevices(root string) ([]DeviceInfo, error) {
	names, err := deviceNames(root)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("rdmadev: %s: %w", filepath.Join(root, classDir), ErrNoRDMADevices)
	}
	devs := make([]DeviceInfo, 0, len(names))
	for _, n := range names {
		d, err := ReadDevice(root, n)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// deviceNames lists root/class/infiniband, whose entries are symlinks to
// the devices (plain directories in a copied tree); on the host, rdmamap's
// list.
func deviceNames(root string) ([]string, error) {
	if onHost(root) {
		return hostDeviceNames(), nil
	}
	ents, err := os.ReadDir(filepath.Join(root, classDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rdmadev: list devices: %w", err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

// uverbsDevice returns /dev/infiniband/uverbsN for the device whose
// root/class/infiniband_verbs/uverbsN/ibdev names it, or "".
func uverbsDevice(root, name string) string {
	dir := filepath.Join(root, uverbsDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "uverbs") && readTrim(filepath.Join(dir, e.Name(), "ibdev")) == name {
			return filepath.Join(devDir, e.Name())
		}
	}
	return ""
}

// ReadDevice reads one device's attributes, ports and GID tables.
func ReadDevice(root, name string) (DeviceInfo, error) {
	dir := filepath.Join(root, classDir, name)
	if _, err := os.Stat(dir); err != nil {
		return DeviceInfo{}, fmt.Errorf("rdmadev: device %q: %w", name, err)
	}
	d := DeviceInfo{
		Name:     name,
		NodeType: readTrim(filepath.Join(dir, "node_type")),
		NodeGUID: readTrim(filepath.Join(dir, "node_guid")),
		FWVer:    readTrim(filepath.Join(dir, "fw_ver")),
		Parent:   readTrim(filepath.Join(dir, "parent")),
		Uverbs:   uverbsDevice(root, name),
	}
	ports, err := os.ReadDir(filepath.Join(dir, portsDir))
	if err != nil {
		return DeviceInfo{}, fmt.Errorf("rdmadev: device %s: ports: %w", name, err)
	}
	for _, pe := range ports {
		num, err := strconv.Atoi(pe.Name())
		if err != nil {
			continue
		}
		p, err := readPort(filepath.Join(dir, portsDir, pe.Name()), num)
		if err != nil {
			return DeviceInfo{}, fmt.Errorf("rdmadev: device %s: %w", name, err)
		}
		if p.Netdev == "" {
			p.Netdev = d.Parent
		}
		p.Counters, _ = PortCounters(root, name, num) // none is no error: not every driver has them
		d.Ports = append(d.Ports, p)
	}
	sort.Slice(d.Ports, func(i, j int) bool { return d.Ports[i].Number < d.Ports[j].Number })
	return d, nil
}

func readPort(dir string, num int) (Port, error) {
	p := Port{Number: num, LinkLayer: readTrim(filepath.Join(dir, "link_layer"))}
	p.StateNum, p.State = splitNumbered(readTrim(filepath.Join(dir, "state")))
	_, p.PhysState = splitNumbered(readTrim(filepath.Join(dir, "phys_state")))
	gids, err := os.ReadDir(filepath.Join(dir, "gids"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Port{}, fmt.Errorf("port %d: gids: %w", num, err)
	}
	for _, ge := range gids {
		idx, err := strconv.Atoi(ge.Name())
		if err != nil {
			continue
		}
		s := readTrim(filepath.Join(dir, "gids", ge.Name()))
		g, err := rdma.ParseGID(s)
		if err != nil || g == (rdma.GID{}) {
			continue // unpopulated entries read as all zeroes
		}
		// Reading the type of an unpopulated entry fails (EINVAL); a
		// populated one always has a type on kernels ≥ 4.9.
		typ := readTrim(filepath.Join(dir, gidAttrsDir, "types", ge.Name()))
		if typ == "" {
			continue
		}
		e := GIDEntry{
			Index:  idx,
			GID:    g,
			Type:   GIDType(typ),
			Netdev: readTrim(filepath.Join(dir, gidAttrsDir, gidNdevsDir, ge.Name())),
		}
		if p.Netdev == "" {
			p.Netdev = e.Netdev
		}
		p.GIDs = append(p.GIDs, e)
	}
	sort.Slice(p.GIDs, func(i, j int) bool { return p.GIDs[i].Index < p.GIDs[j].Index })
	return p, nil
}

// splitNumbered splits sysfs "4: ACTIVE" into 4 and "ACTIVE".
func splitNumbered(s string) (int, string) {
	n, name, ok := strings.Cut(s, ":")
	if !ok {
		return 0, strings.TrimSpace(s)
	}
	v, _ := strconv.Atoi(strings.TrimSpace(n))
	return v, strings.TrimSpace(name)
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ErrNoGID is wrapped by FindRoCEv2GID when no RoCEv2 GID matches.
var ErrNoGID = errors.New("no RoCEv2 GID for this address")

// FindRoCEv2GID returns the GID table entry of type "RoCE v2" whose address
// is addr (IPv4 addresses match their IPv4-mapped GID). The GID index is
// never assumed: it depends on the order addresses were added. The error
// names the RoCEv2 addresses the port does have.
func FindRoCEv2GID(p *Port, addr netip.Addr) (GIDEntry, error) {
	want := rdma.GIDFromAddr(addr.Unmap())
	var have []string
	for _, g := range p.GIDs {
		if g.Type != GIDTypeRoCEv2 {
			continue
		}
		if g.GID == want {
			return g, nil
		}
		have = append(have, fmt.Sprintf("%s (index %d)", g.Addr(), g.Index))
	}
	if len(have) == 0 {
		return GIDEntry{}, fmt.Errorf("port %d: %s: %w; the port has no RoCEv2 GIDs (is its netdev up with an address?)", p.Number, addr, ErrNoGID)
	}
	return GIDEntry{}, fmt.Errorf("port %d: %s: %w; it has %s", p.Number, addr, ErrNoGID, strings.Join(have, ", "))
}

// HWCounters reads a port's hw_counters (rxe: rcvd_pkts, sent_pkts, …);
// on the host through rdmamap.
func HWCounters(root, dev string, port int) (map[string]uint64, error) {
	if onHost(root) {
		st, err := rdmamap.GetRdmaSysfsHwStats(dev, port)
		if err != nil {
			return nil, fmt.Errorf("rdmadev: %s port %d counters: %w", dev, port, err)
		}
		return statMap(st), nil
	}
	m, err := readCounterDir(filepath.Join(root, classDir, dev, portsDir, strconv.Itoa(port), hwCountersDir))
	if err != nil {
		return nil, fmt.Errorf("rdmadev: %s port %d counters: %w", dev, port, err)
	}
	return m, nil
}

// HWCounter reads one hw_counters entry.
func HWCounter(root, dev string, port int, name string) (uint64, error) {
	m, err := HWCounters(root, dev, port)
	if err != nil {
		return 0, err
	}
	v, ok := m[name]
	if !ok {
		return 0, fmt.Errorf("rdmadev: %s port %d: no counter %s: %w", dev, port, name, fs.ErrNotExist)
	}
	return v, nil
}

// MarshalJSON writes the GID in its sysfs form next to the address it names.
func (g GIDEntry) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Index  int     `json:"index"`
		GID    string  `json:"gid"`
		Addr   string  `json:"addr"`
		Type   GIDType `json:"type"`
		Netdev string  `json:"netdev,omitempty"`
	}{g.Index, g.GID.String(), g.Addr().String(), g.Type, g.Netdev})
}
