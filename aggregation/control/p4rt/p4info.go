package p4rt

import (
	"errors"
	"fmt"
	"os"
	"strings"

	p4cfg "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// P4Info indexes a P4Info by entity name. Names are accepted with and
// without the "pipe." prefix bf-p4c gives TNA programs. Immutable after
// LoadP4Info; safe for concurrent use.
type P4Info struct {
	pb        *p4cfg.P4Info
	tables    map[string]*p4cfg.Table
	actions   map[string]*p4cfg.Action
	registers map[string]*p4cfg.Register
	counters  map[string]*p4cfg.Counter
}

// LoadP4Info reads a P4Info file, text format (bf-p4c --p4runtime-files
// p4info.txt) or binary (.pb / .bin).
func LoadP4Info(path string) (*P4Info, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("p4rt: read P4Info: %w", err)
	}
	info := &p4cfg.P4Info{}
	if terr := prototext.Unmarshal(b, info); terr != nil {
		info = &p4cfg.P4Info{}
		if berr := proto.Unmarshal(b, info); berr != nil {
			return nil, fmt.Errorf("p4rt: %s is not a P4Info, text (%v) or binary (%v)", path, terr, berr)
		}
	}
	return newP4Info(info)
}

// newP4Info indexes info.
func newP4Info(info *p4cfg.P4Info) (*P4Info, error) {
	if info == nil || len(info.GetTables()) == 0 {
		return nil, errors.New("p4rt: the P4Info has no tables: is it the P4Info of p4/rdma_switch?")
	}
	p := &P4Info{
		pb:        info,
		tables:    map[string]*p4cfg.Table{},
		actions:   map[string]*p4cfg.Action{},
		registers: map[string]*p4cfg.Register{},
		counters:  map[string]*p4cfg.Counter{},
	}
	for _, t := range info.GetTables() {
		p.tables[trimPipe(t.GetPreamble().GetName())] = t
	}
	for _, a := range info.GetActions() {
		p.actions[trimPipe(a.GetPreamble().GetName())] = a
	}
	for _, r := range info.GetRegisters() {
		p.registers[trimPipe(r.GetPreamble().GetName())] = r
	}
	for _, c := range info.GetCounters() {
		p.counters[trimPipe(c.GetPreamble().GetName())] = c
	}
	return p, nil
}

func trimPipe(n string) string { return strings.TrimPrefix(n, "pipe.") }

// entityNames returns the names of the P4Info's tables, actions, registers and
// counters (without the "pipe." prefix).
func (p *P4Info) entityNames() (tables, actions, registers, counters []string) {
	for n := range p.tables {
		tables = append(tables, n)
	}
	for n := range p.actions {
		actions = append(actions, n)
	}
	for n := range p.registers {
		registers = append(registers, n)
	}
	for n := range p.counters {
		counters = append(counters, n)
	}
	return
}

// ErrUnknownEntity is wrapped when the P4Info lacks a name the backend uses.
var ErrUnknownEntity = errors.New("not in the P4Info")

func (p *P4Info) table(name string) (*p4cfg.Table, error) {
	if t, ok := p.tables[trimPipe(name)]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("p4rt: table %s: %w (is the P4Info from p4/rdma_switch?)", name, ErrUnknownEntity)
}

func (p *P4Info) action(name string) (*p4cfg.Action, error) {
	if a, ok := p.actions[trimPipe(name)]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("p4rt: action %s: %w", name, ErrUnknownEntity)
}

func (p *P4Info) register(name string) (*p4cfg.Register, error) {
	if r, ok := p.registers[trimPipe(name)]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("p4rt: register %s: %w", name, ErrUnknownEntity)
}

func (p *P4Info) counter(name string) (*p4cfg.Counter, error) {
	if c, ok := p.counters[trimPipe(name)]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("p4rt: counter %s: %w", name, ErrUnknownEntity)
}

// matchField returns a table's match field by name.
func (p *P4Info) matchField(table, field string) (*p4cfg.MatchField, error) {
	t, err := p.table(table)
	if err != nil {
		return nil, err
	}
	for _, f := range t.GetMatchFields() {
		if f.GetName() == field {
			return f, nil
		}
	}
	return nil, fmt.Errorf("p4rt: table %s has no match field %s: %w", table, field, ErrUnknownEntity)
}

// param returns an action parameter by name.
func (p *P4Info) param(action, name string) (*p4cfg.Action_Param, error) {
	a, err := p.action(action)
	if err != nil {
		return nil, err
	}
	for _, pr := range a.GetParams() {
		if pr.GetName() == name {
			return pr, nil
		}
	}
	return nil, fmt.Errorf("p4rt: action %s has no parameter %s: %w", action, name, ErrUnknownEntity)
}

// registerLayout is the bit widths of a register cell: one for a bitstring,
// one per member for a struct (a paired 64-bit entry has two).
func (p *P4Info) registerLayout(name string) (*p4cfg.Register, []int32, error) {
	r, err := p.register(name)
	if err != nil {
		return nil, nil, err
	}
	ts := r.GetTypeSpec()
	if bs := ts.GetBitstring(); bs != nil {
		w := bs.GetBit().GetBitwidth()
		if w == 0 {
			w = bs.GetInt().GetBitwidth()
		}
		if w == 0 {
			return nil, nil, fmt.Errorf("p4rt: register %s: unsupported bitstring type", name)
		}
		return r, []int32{w}, nil
	}
	if st := ts.GetStruct(); st != nil {
		s, ok := p.pb.GetTypeInfo().GetStructs()[st.GetName()]
		if !ok {
			return nil, nil, fmt.Errorf("p4rt: register %s: struct %s not in the P4Info type_info", name, st.GetName())
		}
		var ws []int32
		for _, m := range s.GetMembers() {
			w := m.GetTypeSpec().GetBitstring().GetBit().GetBitwidth()
			if w == 0 {
				return nil, nil, fmt.Errorf("p4rt: register %s: member %s of %s is not bit<N>", name, m.GetName(), st.GetName())
			}
			ws = append(ws, w)
		}
		return r, ws, nil
	}
	return nil, nil, fmt.Errorf("p4rt: register %s: unsupported type %v", name, ts)
}

// check resolves every entity the backend uses, so a wrong P4Info fails
// at New, naming what is missing.
func (p *P4Info) check() error {
	tables, actions, registers, counters := usedEntities()
	var errs []error
	for t, fields := range tables {
		if _, err := p.table(t); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, f := range fields {
			if _, err := p.matchField(t, f); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for a, params := range actions {
		if _, err := p.action(a); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, pr := range params {
			if _, err := p.param(a, pr); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, r := range registers {
		if _, _, err := p.registerLayout(r); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range counters {
		if _, err := p.counter(c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// encodeUint is the canonical P4Runtime bytestring of v (big-endian, no
// leading zero bytes, zero as one 0 byte), after checking it fits width
// bits.
func encodeUint(v uint64, width int32) ([]byte, error) {
	if width < 64 && v>>uint(width) != 0 {
		return nil, fmt.Errorf("value %#x does not fit %d bits", v, width)
	}
	var b []byte
	for v != 0 {
		b = append([]byte{byte(v)}, b...)
		v >>= 8
	}
	if len(b) == 0 {
		b = []byte{0}
	}
	return b, nil
}

// decodeUint is the inverse of the canonical encoding (any length ≤ 8).
func decodeUint(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}
