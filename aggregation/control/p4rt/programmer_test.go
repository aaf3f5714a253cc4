package p4rt

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	p4cfg "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/protobuf/proto"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

func loadFixture(t *testing.T) *P4Info {
	t.Helper()
	info, err := LoadP4Info("testdata/p4info.txt")
	if err != nil {
		t.Fatal(err)
	}
	return info
}

var switchIP = netip.MustParseAddr("10.0.0.254")

// testJob is a 4-worker job with 3 QPs per worker and P4App switch QPNs.
func testJob() *wire.Job {
	j := &wire.Job{ID: 7, DType: wire.Float32, PacketSize: 256, PoolBase: 16, PoolSlots: 6}
	for r := 0; r < 4; r++ {
		w := wire.Worker{
			Rank: r,
			Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + r)}),
			MAC:  net.HardwareAddr{0x02, 0, 0, 0, 0, byte(1 + r)},
			RKey: 0x1000 + uint32(r),
		}
		for i := 0; i < 3; i++ {
			sq, _ := wire.P4AppQPN(r, i)
			w.QPNs = append(w.QPNs, 0x100*uint32(r+1)+uint32(i))
			w.PSNs = append(w.PSNs, 0x10000*uint32(r+1)+uint32(i))
			w.SwitchQPNs = append(w.SwitchQPNs, sq)
		}
		j.Workers = append(j.Workers, w)
	}
	return j
}

func testConfig(info *P4Info) Config {
	ports := map[netip.Addr]uint32{}
	for r := 0; r < 4; r++ {
		ports[netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + r)})] = 128 + uint32(r)*4
	}
	return Config{
		P4Info: info, DeviceID: 3, ElectionID: 9,
		SwitchMAC: net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 1}, SwitchIPv4: switchIP,
		PoolSize: 64, Ports: ports, IngressDrop: 0.01, EgressDrop: 0.5,
		DeviceConfig: []byte("blob"), BatchSize: 50,
	}
}

// decoded is a table entry in names and integers.
type decoded struct {
	table, action string
	keys          map[string][2]uint64 // value, mask
	params        map[string]uint64
	priority      int32
}

func decodeEntry(t *testing.T, info *P4Info, te *p4v1.TableEntry) decoded {
	t.Helper()
	d := decoded{keys: map[string][2]uint64{}, params: map[string]uint64{}, priority: te.GetPriority()}
	for n, tb := range info.tables {
		if tb.GetPreamble().GetId() == te.GetTableId() {
			d.table = n
			for _, m := range te.GetMatch() {
				for _, f := range tb.GetMatchFields() {
					if f.GetId() == m.GetFieldId() {
						if ex := m.GetExact(); ex != nil {
							d.keys[f.GetName()] = [2]uint64{decodeUint(ex.GetValue()), 0}
						} else {
							d.keys[f.GetName()] = [2]uint64{decodeUint(m.GetTernary().GetValue()), decodeUint(m.GetTernary().GetMask())}
						}
					}
				}
			}
		}
	}
	a := te.GetAction().GetAction()
	for n, ac := range info.actions {
		if ac.GetPreamble().GetId() == a.GetActionId() {
			d.action = n
			for _, pv := range a.GetParams() {
				for _, pr := range ac.GetParams() {
					if pr.GetId() == pv.GetParamId() {
						d.params[pr.GetName()] = decodeUint(pv.GetValue())
					}
				}
			}
		}
	}
	if d.table == "" || d.action == "" {
		t.Fatalf("entry with unknown table %d or action %d", te.GetTableId(), a.GetActionId())
	}
	return d
}

func regID(t *testing.T, info *P4Info, name string) int64 {
	r, err := info.register(name)
	if err != nil {
		t.Fatal(err)
	}
	return int64(r.GetPreamble().GetId())
}

func regValues(d *p4v1.P4Data) []uint64 {
	if s := d.GetStruct(); s != nil {
		var v []uint64
		for _, m := range s.GetMembers() {
			v = append(v, decodeUint(m.GetBitstring()))
		}
		return v
	}
	return []uint64{decodeUint(d.GetBitstring())}
}

func TestProgrammerFourWorkerJob(t *testing.T) {
	info := loadFixture(t)
	f, conn := startFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := New(ctx, conn, testConfig(info))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// Arbitration, pipeline, defaults.
	f.mu.Lock()
	if len(f.arbitration) != 1 || f.arbitration[0].GetDeviceId() != 3 || f.arbitration[0].GetElectionId().GetLow() != 9 {
		t.Errorf("arbitration = %v, want device 3 election 9", f.arbitration)
	}
	if f.pipelines != 1 {
		t.Errorf("SetForwardingPipelineConfig calls = %d, want 1", f.pipelines)
	}
	defaults := map[string]map[string]uint64{}
	for _, u := range f.writes {
		if te := u.GetEntity().GetTableEntry(); te != nil && te.GetIsDefaultAction() {
			d := decodeEntry(t, info, te)
			defaults[d.table] = d.params
		}
	}
	nDefaults := len(f.writes)
	f.mu.Unlock()
	if got := defaults[tableSwitchAddress]; got["switch_mac"] != 0x02aa00000001 || got["switch_ip"] != 0x0a0000fe {
		t.Errorf("switch address = %x", got)
	}
	if got := defaults[tableIngressDrop]["drop_threshold"]; got != threshold(0.01) || got != 655 { // 0.01·2^16
		t.Errorf("ingress drop threshold = %d", got)
	}
	if got := defaults[tableEgressDrop]["drop_threshold"]; got != 1<<15 {
		t.Errorf("egress drop threshold = %d", got)
	}

	job := testJob()
	if err := p.AddJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	// Receive table last: after every other write of the job.
	jobWrites := f.writes[nDefaults:]
	lastNonRecv := -1
	firstRecv := len(jobWrites)
	for i, u := range jobWrites {
		if te := u.GetEntity().GetTableEntry(); te != nil && decodeEntry(t, info, te).table == tableReceiveQP {
			firstRecv = min(firstRecv, i)
		} else {
			lastNonRecv = i
		}
	}
	if lastNonRecv > firstRecv {
		t.Errorf("a write (#%d) follows the first receive_qp entry (#%d): packets could enter a half-installed job", lastNonRecv, firstRecv)
	}
	byTable := map[string][]decoded{}
	for _, te := range f.tables {
		d := decodeEntry(t, info, te)
		byTable[d.table] = append(byTable[d.table], d)
	}
	var mgid uint32
	for id := range f.groups {
		mgid = id
	}
	regs := f.registers
	f.mu.Unlock()

	if len(f.groups) != 1 {
		t.Fatalf("multicast groups = %d, want 1", len(f.groups))
	}
	g := f.groups[mgid]
	if len(g.GetReplicas()) != 4 {
		t.Fatalf("replicas = %d, want 4", len(g.GetReplicas()))
	}
	for r, rep := range g.GetReplicas() {
		if rep.GetInstance() != uint32(r) || rep.GetEgressPort() != 128+uint32(r)*4 {
			t.Errorf("replica %d = instance %d port %d, want instance %d port %d", r, rep.GetInstance(), rep.GetEgressPort(), r, 128+r*4)
		}
	}

	if n := len(byTable[tableReceiveQP]); n != 4 {
		t.Fatalf("receive_qp entries = %d, want 4", n)
	}
	qpBase := map[int]uint64{}
	for _, d := range byTable[tableReceiveQP] {
		r := int(d.params["worker_id"])
		w := job.Workers[r]
		if d.action != actionSetQP || d.priority == 0 {
			t.Errorf("receive_qp rank %d: action %s priority %d", r, d.action, d.priority)
		}
		if d.keys[fieldSrcAddr][0] != ipUint(w.Addr) || d.keys[fieldDstAddr][0] != ipUint(switchIP) {
			t.Errorf("receive_qp rank %d: src %x dst %x", r, d.keys[fieldSrcAddr][0], d.keys[fieldDstAddr][0])
		}
		if k := d.keys[fieldDstQP]; k[0] != uint64(0x800000|r<<16) || k[1] != 0xFFFE00 {
			t.Errorf("receive_qp rank %d: QPN %#x/%#x", r, k[0], k[1])
		}
		want := map[string]uint64{"worker_bit": 1 << r, "num_workers": 4, "num_qps": 3, "pool_first_index": 32, "pool_end_index": 44, "mgid": uint64(mgid)}
		for k, v := range want {
			if d.params[k] != v {
				t.Errorf("receive_qp rank %d: %s = %d, want %d", r, k, d.params[k], v)
			}
		}
		qpBase[r] = d.params["qp_base"]
	}
	// QP state ranges: contiguous, disjoint, rank r at base + 3r.
	for r := 1; r < 4; r++ {
		if qpBase[r] != qpBase[0]+uint64(3*r) {
			t.Errorf("qp_base of rank %d = %d, want %d", r, qpBase[r], qpBase[0]+uint64(3*r))
		}
	}

	if n := len(byTable[tableWorker]); n != 4 {
		t.Fatalf("worker entries = %d, want 4", n)
	}
	for _, d := range byTable[tableWorker] {
		r := int(d.keys[fieldDestRank][0])
		w := job.Workers[r]
		if d.keys[fieldMGID][0] != uint64(mgid) || d.params["mac"] != macUint(w.MAC) || d.params["ip"] != ipUint(w.Addr) || d.params["rkey"] != uint64(w.RKey) {
			t.Errorf("worker entry rank %d = %v %v", r, d.keys, d.params)
		}
	}
	if n := len(byTable[tableWorkerQP]); n != 12 {
		t.Fatalf("worker_qp entries = %d, want 12", n)
	}
	for _, d := range byTable[tableWorkerQP] {
		r, i := int(d.keys[fieldDestRank][0]), int(d.keys[fieldQPIndex][0])
		idx := qpBase[0] + uint64(3*r+i)
		if d.keys[fieldMGID][0] != uint64(mgid) || d.params["qpn"] != uint64(job.Workers[r].QPNs[i]) || d.params["psn_index"] != idx {
			t.Errorf("worker_qp (%d, %d) = %v %v", r, i, d.keys, d.params)
		}
		if v := regValues(regs[[2]int64{regID(t, info, registerPSN), int64(idx)}]); v[0] != uint64(job.Workers[r].PSNs[i]) {
			t.Errorf("psn[%d] = %#x, want %#x", idx, v[0], job.Workers[r].PSNs[i])
		}
		if v := regValues(regs[[2]int64{regID(t, info, registerRxQP), int64(idx)}]); len(v) != 2 || v[0] != 0xFFFFFFFF || v[1] != 0 {
			t.Errorf("rx_qp_state[%d] = %v, want {next_psn 0xFFFFFFFF (INVALID_PSN), room 0}", idx, v)
		}
		if v := regValues(regs[[2]int64{regID(t, info, registerTxPos), int64(idx)}]); len(v) != 1 || v[0] != 0xFFFFFFFF {
			t.Errorf("tx_pos[%d] = %v, want 0xFFFFFFFF (TX_CLOSED)", idx, v)
		}
	}

	// Counters read through the P4Info.
	cs, err := p.readCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cs[counterDecisions][2] != 7 || len(cs[counterDrops]) != 16 || len(cs[counterResults]) != 2 {
		t.Errorf("counters = %v", cs)
	}

	// Teardown: every entry and the group gone, slot registers cleared.
	f.mu.Lock()
	for k := range f.registers {
		delete(f.registers, k)
	}
	f.mu.Unlock()
	if err := p.RemoveJob(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveJob(ctx, job.ID); err != nil {
		t.Errorf("second RemoveJob: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.tables) != 0 || len(f.groups) != 0 {
		t.Errorf("after RemoveJob: %d table entries, %d groups left", len(f.tables), len(f.groups))
	}
	for s := int64(16); s < 22; s++ {
		if v, ok := f.registers[[2]int64{regID(t, info, registerBitmap), s}]; !ok || regValues(v)[0] != 0 || regValues(v)[1] != 0 {
			t.Errorf("bitmap[%d] not cleared: %v", s, v)
		}
		for pi := 2 * s; pi < 2*s+2; pi++ {
			for _, c := range []struct {
				reg  string
				want uint64
			}{{registerMissing, 0}, {registerMaxE0, 0x80}, {registerMaxE1, 0x80}, {registerMsgID, 0}} {
				if v, ok := f.registers[[2]int64{regID(t, info, c.reg), pi}]; !ok || regValues(v)[0] != c.want {
					t.Errorf("%s[%d] not cleared to %#x: %v", c.reg, pi, c.want, v)
				}
			}
		}
	}
	if _, ok := f.registers[[2]int64{regID(t, info, registerBitmap), 22}]; ok {
		t.Errorf("bitmap[22] (another job's slot) was written")
	}
	for i := int64(0); i < 12; i++ {
		if _, ok := f.registers[[2]int64{regID(t, info, registerPSN), int64(qpBase[0]) + i}]; !ok {
			t.Errorf("psn[%d] not cleared", int64(qpBase[0])+i)
		}
		if v, ok := f.registers[[2]int64{regID(t, info, registerTxPos), int64(qpBase[0]) + i}]; !ok || regValues(v)[0] != 0xFFFFFFFF {
			t.Errorf("tx_pos[%d] not closed: %v", int64(qpBase[0])+i, v)
		}
		if v, ok := f.registers[[2]int64{regID(t, info, registerRxQP), int64(qpBase[0]) + i}]; !ok || regValues(v)[0] != 0xFFFFFFFF {
			t.Errorf("rx_qp_state[%d] not invalidated: %v", int64(qpBase[0])+i, v)
		}
	}
	if len(p.jobIDs()) != 0 {
		t.Errorf("jobs after RemoveJob: %v", p.jobIDs())
	}
}

func TestProgrammerTwoJobsGetDisjointState(t *testing.T) {
	info := loadFixture(t)
	f, conn := startFake(t)
	ctx := context.Background()
	cfg := testConfig(info)
	cfg.DeviceConfig = nil
	p, err := New(ctx, conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a := testJob()
	b := testJob()
	b.ID, b.PoolBase = 8, 30
	for r := range b.Workers {
		b.Workers[r].Addr = netip.AddrFrom4([4]byte{10, 0, 1, byte(1 + r)})
		cfg.Ports[b.Workers[r].Addr] = uint32(r)
	}
	for _, j := range []*wire.Job{a, b} {
		if err := p.AddJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	if f.pipelines != 0 {
		t.Errorf("pipeline pushed without DeviceConfig")
	}
	if len(f.groups) != 2 {
		t.Errorf("groups = %d, want 2", len(f.groups))
	}
	bases := map[uint64]bool{}
	for _, te := range f.tables {
		d := decodeEntry(t, info, te)
		if d.table == tableReceiveQP && d.params["worker_id"] == 0 {
			bases[d.params["qp_base"]] = true
		}
	}
	f.mu.Unlock()
	if len(bases) != 2 {
		t.Errorf("the two jobs share QP state (qp_base of rank 0: %v)", bases)
	}
	p.mu.Lock()
	freed := *p.jobs[a.ID]
	p.mu.Unlock()
	if err := p.RemoveJob(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	// The freed range and group id are reused (first fit).
	c := testJob()
	c.ID = 9
	if err := p.AddJob(ctx, c); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	got := *p.jobs[c.ID]
	p.mu.Unlock()
	if got.qps != freed.qps || got.mgid != freed.mgid {
		t.Errorf("job %d got QP state %v and group %d, want job %d's freed %v and %d", c.ID, got.qps, got.mgid, a.ID, freed.qps, freed.mgid)
	}
}

func TestProgrammerErrorsNameTheEntity(t *testing.T) {
	info := loadFixture(t)
	f, conn := startFake(t)
	ctx := context.Background()
	cfg := testConfig(info)
	p, err := New(ctx, conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tb, _ := info.table(tableWorkerQP)
	f.mu.Lock()
	f.failTable = tb.GetPreamble().GetId()
	f.mu.Unlock()
	err = p.AddJob(ctx, testJob())
	var we *WriteError
	if !errors.As(err, &we) || we.Code != code.Code_RESOURCE_EXHAUSTED || !strings.Contains(we.Entity, tableWorkerQP) {
		t.Fatalf("AddJob error = %v, want a WriteError naming %s", err, tableWorkerQP)
	}
	f.mu.Lock()
	left := len(f.tables) + len(f.groups)
	f.failTable = 0
	f.mu.Unlock()
	if left != 0 {
		t.Errorf("a failed AddJob left %d entries behind", left)
	}
	if err := p.AddJob(ctx, testJob()); err != nil {
		t.Errorf("AddJob after a failed one: %v", err)
	}
}

func TestProgrammerRefusesJobs(t *testing.T) {
	info := loadFixture(t)
	_, conn := startFake(t)
	ctx := context.Background()
	p, err := New(ctx, conn, testConfig(info))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, tc := range []struct {
		name   string
		mutate func(*wire.Job)
		want   string
	}{
		{"1024 B", func(j *wire.Job) { j.PacketSize = 1024 }, "256 B"},
		{"opaque QPN", func(j *wire.Job) { j.Workers[1].SwitchQPNs[0] = 0x100 }, "QPNP4App"},
		{"no port", func(j *wire.Job) { j.Workers[2].Addr = netip.MustParseAddr("10.9.9.9") }, "worker 2 (10.9.9.9): " + ErrNoPort.Error()},
		{"IPv6", func(j *wire.Job) { j.Workers[0].Addr = netip.MustParseAddr("fd00::1") }, "IPv4 only"},
		{"no MAC", func(j *wire.Job) { j.Workers[3].MAC = nil }, "MAC"},
		{"pool", func(j *wire.Job) { j.PoolBase = 60 }, "exceeds"},
		{"16-bit", func(j *wire.Job) { j.ElementBytes = 2 }, "16-bit elements"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := testJob()
			tc.mutate(j)
			err := p.AddJob(ctx, j)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("AddJob = %v, want an error containing %q", err, tc.want)
			}
			if wantWidth := j.ElementBytes == 2; errors.Is(err, wire.ErrElementWidth) != wantWidth {
				t.Errorf("AddJob = %v: errors.Is(ErrElementWidth) = %v, want %v", err, !wantWidth, wantWidth)
			}
		})
	}
}

func TestNewChecksP4Info(t *testing.T) {
	info := loadFixture(t)
	_, conn := startFake(t)
	bad := proto.Clone(info.pb).(*p4cfg.P4Info)
	bad.Tables = bad.Tables[1:] // drop switch_address
	bi, err := newP4Info(bad)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(bi)
	if _, err := New(context.Background(), conn, cfg); err == nil || !strings.Contains(err.Error(), tableSwitchAddress) {
		t.Errorf("New with a P4Info lacking %s = %v", tableSwitchAddress, err)
	}
	cfg = testConfig(info)
	cfg.PoolSize = 1 << 20
	if _, err := New(context.Background(), conn, cfg); !errors.Is(err, ErrPoolSize) {
		t.Errorf("New with a too large pool = %v, want ErrPoolSize", err)
	}
}
