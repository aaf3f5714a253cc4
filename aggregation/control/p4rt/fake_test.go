package p4rt

import (
	"context"
	"net"
	"sync"
	"testing"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/genproto/googleapis/rpc/code"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// fakeSwitch is an in-process P4Runtime server on loopback that records
// writes and keeps table entries and multicast groups like a switch would
// (INSERT of an existing key and DELETE of a missing one fail).
type fakeSwitch struct {
	p4v1.UnimplementedP4RuntimeServer

	mu          sync.Mutex
	arbitration []*p4v1.MasterArbitrationUpdate
	pipelines   int
	writes      []*p4v1.Update
	tables      map[string]*p4v1.TableEntry // by key
	groups      map[uint32]*p4v1.MulticastGroupEntry
	registers   map[[2]int64]*p4v1.P4Data // (id, index)
	failTable   uint32                    // INSERTs into this table fail
}

func entryKey(te *p4v1.TableEntry) string {
	c := proto.Clone(te).(*p4v1.TableEntry)
	c.Action = nil
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	return string(b)
}

func (f *fakeSwitch) StreamChannel(s p4v1.P4Runtime_StreamChannelServer) error {
	for {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		if arb := req.GetArbitration(); arb != nil {
			f.mu.Lock()
			f.arbitration = append(f.arbitration, arb)
			f.mu.Unlock()
			resp := proto.Clone(arb).(*p4v1.MasterArbitrationUpdate)
			resp.Status = &spb.Status{Code: int32(code.Code_OK)}
			if err := s.Send(&p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Arbitration{Arbitration: resp}}); err != nil {
				return nil
			}
		}
	}
}

func (f *fakeSwitch) SetForwardingPipelineConfig(ctx context.Context, req *p4v1.SetForwardingPipelineConfigRequest) (*p4v1.SetForwardingPipelineConfigResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pipelines++
	return &p4v1.SetForwardingPipelineConfigResponse{}, nil
}

func (f *fakeSwitch) Write(ctx context.Context, req *p4v1.WriteRequest) (*p4v1.WriteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var details []*anypb.Any
	failed := false
	for _, u := range req.GetUpdates() {
		f.writes = append(f.writes, u)
		c, msg := f.apply(u)
		if c != code.Code_OK {
			failed = true
		}
		a, _ := anypb.New(&p4v1.Error{CanonicalCode: int32(c), Message: msg})
		details = append(details, a)
	}
	if failed {
		st := &spb.Status{Code: int32(codes.Unknown), Message: "write failed", Details: details}
		return nil, status.ErrorProto(st)
	}
	return &p4v1.WriteResponse{}, nil
}

func (f *fakeSwitch) apply(u *p4v1.Update) (code.Code, string) {
	e := u.GetEntity()
	switch {
	case e.GetTableEntry() != nil:
		te := e.GetTableEntry()
		if te.GetIsDefaultAction() {
			return code.Code_OK, ""
		}
		k := entryKey(te)
		switch u.GetType() {
		case p4v1.Update_INSERT:
			if te.GetTableId() == f.failTable {
				return code.Code_RESOURCE_EXHAUSTED, "table full"
			}
			if _, ok := f.tables[k]; ok {
				return code.Code_ALREADY_EXISTS, "entry exists"
			}
			f.tables[k] = te
		case p4v1.Update_DELETE:
			if _, ok := f.tables[k]; !ok {
				return code.Code_NOT_FOUND, "no such entry"
			}
			delete(f.tables, k)
		}
	case e.GetPacketReplicationEngineEntry() != nil:
		g := e.GetPacketReplicationEngineEntry().GetMulticastGroupEntry()
		switch u.GetType() {
		case p4v1.Update_INSERT:
			if _, ok := f.groups[g.GetMulticastGroupId()]; ok {
				return code.Code_ALREADY_EXISTS, "group exists"
			}
			f.groups[g.GetMulticastGroupId()] = g
		case p4v1.Update_DELETE:
			if _, ok := f.groups[g.GetMulticastGroupId()]; !ok {
				return code.Code_NOT_FOUND, "no such group"
			}
			delete(f.groups, g.GetMulticastGroupId())
		}
	case e.GetRegisterEntry() != nil:
		r := e.GetRegisterEntry()
		f.registers[[2]int64{int64(r.GetRegisterId()), r.GetIndex().GetIndex()}] = r.GetData()
	}
	return code.Code_OK, ""
}

func (f *fakeSwitch) Read(req *p4v1.ReadRequest, s p4v1.P4Runtime_ReadServer) error {
	resp := &p4v1.ReadResponse{}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range req.GetEntities() {
		// A register cell as last written (the job's clear wrote every
		// cell of its range).
		if re := e.GetRegisterEntry(); re != nil {
			if d, ok := f.registers[[2]int64{int64(re.GetRegisterId()), re.GetIndex().GetIndex()}]; ok {
				resp.Entities = append(resp.Entities, &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: &p4v1.RegisterEntry{
					RegisterId: re.GetRegisterId(), Index: re.GetIndex(), Data: d,
				}}})
			}
		}
		if ce := e.GetCounterEntry(); ce != nil {
			resp.Entities = append(resp.Entities, &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{
				CounterId: ce.GetCounterId(), Index: &p4v1.Index{Index: 2}, Data: &p4v1.CounterData{PacketCount: 7},
			}}})
		}
	}
	return s.Send(resp)
}

// startFake serves a fakeSwitch on 127.0.0.1 and returns a client conn.
func startFake(t *testing.T) (*fakeSwitch, *grpc.ClientConn) {
	t.Helper()
	f := &fakeSwitch{tables: map[string]*p4v1.TableEntry{}, groups: map[uint32]*p4v1.MulticastGroupEntry{}, registers: map[[2]int64]*p4v1.P4Data{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	p4v1.RegisterP4RuntimeServer(srv, f)
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop() })
	return f, conn
}
