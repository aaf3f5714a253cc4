package p4rt

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// The 1024 B profile of p4/rdma_switch (-DPAYLOAD_1024, configuration.p4;
// docs/p4.md "1024 B payloads"): a packet's four 256 B chunks are
// aggregated in pipes 0–3 of a 4-pipe Tofino 1, chunk k in pipe k. Workers
// are cabled to pipe 0; every port of pipes 1–3 is in loopback. What the
// backend does differently for it:
//   - it accepts 1024 B jobs (and refuses 256 B ones: the program is
//     compiled for one size);
//   - it writes Ingress.next_step.loopback_port, which sends a request's
//     consume pass 1 to a loopback port of pipe 1 chosen by its pool-index
//     block (Config.LoopbackPorts), once, at New;
//   - it checks that every worker port (the multicast replicas and the
//     unicast answers) is a pipe 0 port other than its recirculation port.
//
// The multicast group (one replica per worker, rid = rank), the pool size
// (the same 8192 slots in every pipe's registers) and every register
// written per job are the 256 B profile's: the registers that pipes 1–3
// use are the Processors', and P4Runtime register writes reach every pipe.
//
// The 16-bit profile (-DWIRE_16; docs/p4.md "16-bit profile") is the same
// plan with two 128 B chunks of 64 int16 lanes (pipes 0 and 1) in 256 B
// payloads: it has the loopback_port table and the same needs, and its
// Processor registers hold 16-bit halves, which is how a P4Info tells it
// (elementBytes). It aggregates only jobs of the 16-bit wire
// (wire.Job.ElementBytes 2); every other profile only 32-bit ones.

// packetSize1024 is the payload size of the PAYLOAD_1024 profile
// (configuration.p4 PAYLOAD_BYTES), in numPipes1024 chunks of packetSize256.
const (
	packetSize1024 = 1024
	numPipes1024   = packetSize1024 / packetSize256
)

// Entities of the 1024 B profile only.
const (
	tableLoopbackPort     = "Ingress.next_step.loopback_port"
	actionSetLoopbackPort = "Ingress.next_step.set_loopback_port"
	fieldLoopbackKey      = "ig_md.loopback_key"
)

var paramsSetLoopbackPort = []string{"port"}

// loopbackKeyEntries and loopbackKeyShift are configuration.p4's
// LOOPBACK_KEY_ENTRIES and LOOPBACK_KEY_LO: the loopback_port key is
// (pool index >> loopbackKeyShift) mod loopbackKeyEntries, so blocks of 16
// slots (both sets) share a port. The parity test compares them with the
// .p4.
const (
	loopbackKeyEntries = 16
	loopbackKeyShift   = 5
)

// Tofino 1 port numbering the 1024 B profile relies on: the pipe is
// port bits [8:7]; each pipe's recirculation port is pipe<<7 | 68
// (configuration.p4 RECIRC_PORT_LOW).
const (
	portPipeShift  = 7
	recircPortLow  = 68
	maxTofinoPort  = 511
	loopbackPipe   = 1 // consume pass 1 enters pipe 1
	workerPortPipe = 0
)

// chunked reports whether the P4Info has the loopback_port table of the
// profiles that aggregate chunk k in pipe k (1024 B and 16-bit).
func (p *P4Info) chunked() bool {
	_, err := p.table(tableLoopbackPort)
	return err == nil
}

// elementBytes is the lane width the loaded program adds, 2 or 4: 2 when
// its Processor registers hold bit<16> halves (configuration.p4 WIRE_16:
// value_pair_t of two value_t = bit<16>), else 4. Jobs of another width
// (wire.Job.LaneBytes) are refused with wire.ErrElementWidth.
func (p *P4Info) elementBytes() int {
	if _, ws, err := p.registerLayout(registerProcessor(0)); err == nil && len(ws) > 0 && ws[0] == 16 {
		return 2
	}
	return 4
}

// packetSize is the payload size the loaded program aggregates: 1024 when
// the P4Info has the loopback_port table and 32-bit lanes (PAYLOAD_1024),
// else 256.
func (p *P4Info) packetSize() int {
	if p.chunked() && p.elementBytes() == 4 {
		return packetSize1024
	}
	return packetSize256
}

// profile names the loaded program's profile for messages: "256 B",
// "1024 B" or "16-bit".
func (p *P4Info) profile() string {
	switch {
	case p.elementBytes() == 2:
		return "16-bit"
	case p.packetSize() == packetSize1024:
		return "1024 B"
	}
	return "256 B"
}

// elementBytes is the lane width of the program the Programmer drives.
func (p *Programmer) elementBytes() int { return p.info.elementBytes() }

// packetSize is the payload size of the program the Programmer drives.
func (p *Programmer) packetSize() int { return p.info.packetSize() }

// loopbackPortFor is the pipe-1 port a request with this pool index takes
// for its first consume pass, given Config.LoopbackPorts: the port of
// loopback_port's entry for its key.
func loopbackPortFor(poolIndex uint32, ports []uint32) uint32 {
	key := (poolIndex >> loopbackKeyShift) % loopbackKeyEntries
	return ports[int(key)%len(ports)]
}

// checkProfile checks the Config against the loaded program's profile.
func checkProfile(cfg *Config) error {
	info := cfg.P4Info
	if !info.chunked() {
		if len(cfg.LoopbackPorts) > 0 {
			return fmt.Errorf("p4rt: Config.LoopbackPorts is for the 1024 B and 16-bit profiles (-DPAYLOAD_1024, -DWIRE_16), but the P4Info is the %d B program (no table %s): drop the loopback ports or load such a build's P4Info", packetSize256, tableLoopbackPort)
		}
		return nil
	}
	if _, err := info.matchField(tableLoopbackPort, fieldLoopbackKey); err != nil {
		return fmt.Errorf("p4rt: the P4Info does not match p4/rdma_switch's %s profile: %w", info.profile(), err)
	}
	for _, pr := range paramsSetLoopbackPort {
		if _, err := info.param(actionSetLoopbackPort, pr); err != nil {
			return fmt.Errorf("p4rt: the P4Info does not match p4/rdma_switch's %s profile: %w", info.profile(), err)
		}
	}
	if len(cfg.LoopbackPorts) == 0 {
		return fmt.Errorf("p4rt: the P4Info is the %s profile: pass the loopback ports of pipe 1 (p4rt.Config.LoopbackPorts), ports %d–%d cabled or configured in loopback", info.profile(), loopbackPipe<<portPipeShift, (loopbackPipe+1)<<portPipeShift-1)
	}
	if len(cfg.LoopbackPorts) > loopbackKeyEntries {
		return fmt.Errorf("p4rt: %d loopback ports: the %s profile spreads requests over at most %d (configuration.p4 LOOPBACK_KEY_ENTRIES)", len(cfg.LoopbackPorts), info.profile(), loopbackKeyEntries)
	}
	seen := map[uint32]bool{}
	for _, port := range cfg.LoopbackPorts {
		if port > maxTofinoPort || port>>portPipeShift != loopbackPipe {
			return fmt.Errorf("p4rt: loopback port %d is not in pipe %d (ports %d–%d): the first consume pass aggregates chunk 1 in pipe 1", port, loopbackPipe, loopbackPipe<<portPipeShift, (loopbackPipe+1)<<portPipeShift-1)
		}
		if port&(1<<portPipeShift-1) == recircPortLow {
			return fmt.Errorf("p4rt: loopback port %d is pipe 1's recirculation port, which the harvest passes use: pick a front-panel port in loopback", port)
		}
		if seen[port] {
			return fmt.Errorf("p4rt: loopback port %d listed twice", port)
		}
		seen[port] = true
	}
	addrs := make([]netip.Addr, 0, len(cfg.Ports))
	for a := range cfg.Ports {
		addrs = append(addrs, a)
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i].Less(addrs[j]) })
	var errs []error
	for _, a := range addrs {
		port := cfg.Ports[a]
		if port > maxTofinoPort || port>>portPipeShift != workerPortPipe || port&(1<<portPipeShift-1) == recircPortLow {
			errs = append(errs, fmt.Errorf("p4rt: worker %v on port %d: the %s profile needs workers on pipe 0 ports (0–127, not the recirculation port %d): the chunks' pipes after pipe 0 are loopback, and results leave from pipe 0", a, port, info.profile(), recircPortLow))
		}
	}
	return errors.Join(errs...)
}

// writeProfile writes the 1024 B and 16-bit profiles' loopback_port
// entries (every key, so no request is dropped by the table's default
// action); nothing for the 256 B program.
func (p *Programmer) writeProfile(ctx context.Context) error {
	if !p.info.chunked() {
		return nil
	}
	ups, err := p.loopbackUpdates()
	if err != nil {
		return err
	}
	return p.write(ctx, ups)
}

func (p *Programmer) loopbackUpdates() ([]update, error) {
	var ups []update
	for key := uint32(0); key < loopbackKeyEntries; key++ {
		port := p.cfg.LoopbackPorts[int(key)%len(p.cfg.LoopbackPorts)]
		te, err := p.tableEntry(tableLoopbackPort, []match{{fieldLoopbackKey, uint64(key), 0}}, 0,
			actionSetLoopbackPort, paramsSetLoopbackPort, []uint64{uint64(port)})
		if err != nil {
			return nil, err
		}
		ups = append(ups, update{&p4v1.Update{Type: p4v1.Update_INSERT, Entity: tableEntity(te)},
			fmt.Sprintf("%s entry (key %d → port %d)", tableLoopbackPort, key, port)})
	}
	return ups, nil
}
