package p4rt

import (
	"fmt"
	"net"
	"net/netip"

	p4cfg "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// match is one key field: exact when mask is 0 (and the field is EXACT),
// ternary value/mask otherwise.
type match struct {
	field string
	value uint64
	mask  uint64
}

func (p *Programmer) tableEntry(table string, ms []match, priority int32, action string, params []string, vals []uint64) (*p4v1.TableEntry, error) {
	t, err := p.info.table(table)
	if err != nil {
		return nil, err
	}
	te := &p4v1.TableEntry{TableId: t.GetPreamble().GetId(), Priority: priority}
	for _, m := range ms {
		f, err := p.info.matchField(table, m.field)
		if err != nil {
			return nil, err
		}
		v, err := encodeUint(m.value, f.GetBitwidth())
		if err != nil {
			return nil, fmt.Errorf("p4rt: table %s field %s: %w", table, m.field, err)
		}
		fm := &p4v1.FieldMatch{FieldId: f.GetId()}
		switch f.GetMatchType() {
		case p4cfg.MatchField_EXACT:
			fm.FieldMatchType = &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: v}}
		case p4cfg.MatchField_TERNARY:
			mk, err := encodeUint(m.mask, f.GetBitwidth())
			if err != nil {
				return nil, fmt.Errorf("p4rt: table %s field %s mask: %w", table, m.field, err)
			}
			fm.FieldMatchType = &p4v1.FieldMatch_Ternary_{Ternary: &p4v1.FieldMatch_Ternary{Value: v, Mask: mk}}
		default:
			return nil, fmt.Errorf("p4rt: table %s field %s: match type %v not supported by the backend", table, m.field, f.GetMatchType())
		}
		te.Match = append(te.Match, fm)
	}
	a, err := p.action(action, params, vals)
	if err != nil {
		return nil, err
	}
	te.Action = &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: a}}
	return te, nil
}

func (p *Programmer) defaultEntry(table, action string, params []string, vals []uint64) (*p4v1.TableEntry, error) {
	te, err := p.tableEntry(table, nil, 0, action, params, vals)
	if err != nil {
		return nil, err
	}
	te.IsDefaultAction = true
	return te, nil
}

func (p *Programmer) action(name string, params []string, vals []uint64) (*p4v1.Action, error) {
	a, err := p.info.action(name)
	if err != nil {
		return nil, err
	}
	out := &p4v1.Action{ActionId: a.GetPreamble().GetId()}
	for i, pn := range params {
		pr, err := p.info.param(name, pn)
		if err != nil {
			return nil, err
		}
		v, err := encodeUint(vals[i], pr.GetBitwidth())
		if err != nil {
			return nil, fmt.Errorf("p4rt: action %s parameter %s: %w", name, pn, err)
		}
		out.Params = append(out.Params, &p4v1.Action_Param{ParamId: pr.GetId(), Value: v})
	}
	return out, nil
}

// registerEntry is one register cell; vals has one value per member of a
// struct cell (paired registers) or one for a bitstring.
func (p *Programmer) registerEntry(name string, index int64, vals ...uint64) (*p4v1.RegisterEntry, error) {
	r, widths, err := p.info.registerLayout(name)
	if err != nil {
		return nil, err
	}
	if index < 0 || index >= int64(r.GetSize()) {
		return nil, fmt.Errorf("p4rt: register %s: index %d outside [0, %d)", name, index, r.GetSize())
	}
	if len(vals) != len(widths) {
		return nil, fmt.Errorf("p4rt: register %s: %d values for a cell of %d fields", name, len(vals), len(widths))
	}
	var data *p4v1.P4Data
	enc := func(v uint64, w int32) (*p4v1.P4Data, error) {
		b, err := encodeUint(v, w)
		if err != nil {
			return nil, fmt.Errorf("p4rt: register %s[%d]: %w", name, index, err)
		}
		return &p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: b}}, nil
	}
	if r.GetTypeSpec().GetStruct() != nil {
		st := &p4v1.P4StructLike{}
		for i, w := range widths {
			d, err := enc(vals[i], w)
			if err != nil {
				return nil, err
			}
			st.Members = append(st.Members, d)
		}
		data = &p4v1.P4Data{Data: &p4v1.P4Data_Struct{Struct: st}}
	} else {
		if data, err = enc(vals[0], widths[0]); err != nil {
			return nil, err
		}
	}
	return &p4v1.RegisterEntry{RegisterId: r.GetPreamble().GetId(), Index: &p4v1.Index{Index: index}, Data: data}, nil
}

func tableEntity(te *p4v1.TableEntry) *p4v1.Entity {
	return &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: te}}
}

func registerEntity(re *p4v1.RegisterEntry) *p4v1.Entity {
	return &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: re}}
}

func insert(e *p4v1.Entity) *p4v1.Update { return &p4v1.Update{Type: p4v1.Update_INSERT, Entity: e} }
func modify(e *p4v1.Entity) *p4v1.Update { return &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: e} }

func macUint(m net.HardwareAddr) uint64 {
	var v uint64
	for _, b := range m {
		v = v<<8 | uint64(b)
	}
	return v
}

func ipUint(a netip.Addr) uint64 {
	b := a.Unmap().As4()
	return uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
}
