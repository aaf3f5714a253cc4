package control

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
)

// fuzzController is a controller whose handlers the fuzz targets call
// directly (the gRPC layer only decodes; the tests through the real server
// are in limits_test.go).
func fuzzController(t *testing.T) *Controller {
	c, err := New(Config{
		Programmer: newFakeProgrammer(), SwitchIPv4: netip.MustParseAddr("127.0.0.1"), SwitchIPv6: netip.MustParseAddr("fd00::1"),
		PoolSize: 256, SessionTimeout: 20 * time.Millisecond, MaxPendingSessions: 4, MaxPendingQPs: 64, MaxClientSlots: 128,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fuzzCtx is a call from a loopback peer that gives up after a few
// milliseconds (a waiting registration leaves its session).
func fuzzCtx() (context.Context, context.CancelFunc) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}})
	return context.WithTimeout(ctx, 5*time.Millisecond)
}

// checkStatus: every error is a gRPC status with a short message; a
// handler never answers with Unknown or Internal.
func checkStatus(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.Unknown || st.Code() == codes.Internal || len(st.Message()) > 1024 {
		t.Fatalf("%s: %v (a status with a known code and at most 1 KiB)", what, err)
	}
}

// checkInvariants: the counters the bounds rely on match the tables.
func (c *Controller) checkInvariants(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	qps, slots := 0, uint32(0)
	charged := map[string]uint32{}
	for _, p := range c.pending {
		held := 0
		for _, r := range p.regs {
			held += len(r.qpns)
		}
		if held != p.heldQPs {
			t.Fatalf("session %d: heldQPs %d, registrations hold %d", p.id, p.heldQPs, held)
		}
		qps += held
		slots += p.reserved.Size
		if p.reserved.Size != 0 {
			charged[p.charged] += p.reserved.Size
		}
	}
	for _, j := range c.jobs {
		slots += j.pool.Size
		for _, cl := range j.clients {
			charged[cl] += j.pool.Size
		}
	}
	if qps != c.pendingQPs || qps > c.cfg.MaxPendingQPs || len(c.pending) > c.cfg.MaxPendingSessions {
		t.Fatalf("pendingQPs %d, registrations hold %d (limit %d); %d sessions pending", c.pendingQPs, qps, c.cfg.MaxPendingQPs, len(c.pending))
	}
	if slots != c.pool.InUse() {
		t.Fatalf("pool: %d slots in use, jobs and reservations hold %d", c.pool.InUse(), slots)
	}
	for cl, n := range charged {
		if c.clientSlots[cl] != n || n > c.cfg.MaxClientSlots {
			t.Fatalf("client %s charged %d, holds %d (share %d)", cl, c.clientSlots[cl], n, c.cfg.MaxClientSlots)
		}
	}
	if len(charged) != len(c.clientSlots) {
		t.Fatalf("charges %v, holdings %v", c.clientSlots, charged)
	}
}

func marshal(f *testing.F, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzRdmaSession registers two hostile requests at once (they may meet in
// one session) and checks that the answers are statuses and the
// controller's accounting holds.
func FuzzRdmaSession(f *testing.F) {
	huge := testRawReq(1, 0, 256, 20_000)
	big := p4appReq(1, 0, 2, 2)
	big.NumWorkers = 4294967295
	mismatch := p4appReq(1, 1, 2, 2)
	mismatch.TensorBytes = 4096
	swml := testRawReq(1, 1, 2, 2)
	swml.TensorBytes = 1 << 63
	for _, pair := range [][2]*pb.RdmaSessionRequest{
		{p4appReq(1, 0, 2, 2), p4appReq(1, 1, 2, 2)},
		{p4appReq(1, 0, 2, 2), mismatch},
		{testRawReq(1, 0, 2, 2), swml},
		{testRawReq(1, 0, 1, 1), testRawReq(1, 0, 1, 1)},
		{big, huge},
		{p4appReq(1, 0, 1, 64), p4appReq(2, 0, 1, 64)},
	} {
		f.Add(marshal(f, pair[0]), marshal(f, pair[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		c := fuzzController(t)
		defer c.Close()
		var wg sync.WaitGroup
		for i, data := range [][]byte{a, b} {
			var req pb.RdmaSessionRequest
			if proto.Unmarshal(data, &req) != nil {
				continue
			}
			wg.Go(func() {
				ctx, cancel := fuzzCtx()
				defer cancel()
				resp, err := c.rdmaSession(ctx, &req)
				checkStatus(t, "RdmaSession", err)
				if err == nil && (len(resp.GetQpns()) != len(req.GetQpns()) || resp.GetPoolBase()+resp.GetPoolSlots() > 256) {
					t.Errorf("request %d: answer %v does not fit the request or the pool", i, resp)
				}
			})
		}
		wg.Wait()
		c.checkInvariants(t)
	})
}

// FuzzBarrier joins two hostile Barrier or Broadcast calls at once and
// checks that the answers are statuses and no generation is left behind.
func FuzzBarrier(f *testing.F) {
	r0, r1 := uint32(0), uint32(1)
	v1, v2 := uint64(4096), uint64(1024)
	for _, pair := range [][2]*pb.BarrierRequest{
		{{NumWorkers: 2, Rank: &r0}, {NumWorkers: 2, Rank: &r1}},
		{{NumWorkers: 4294967295, Rank: &r0}, {NumWorkers: 2}},
		{{NumWorkers: 2, Rank: &r0, AgreeValue: &v1, AgreeName: "n"}, {NumWorkers: 2, Rank: &r1, AgreeValue: &v2, AgreeName: "n"}},
		{{NumWorkers: 2, Rank: &r0}, {NumWorkers: 3, Rank: &r0}},
	} {
		f.Add(marshal(f, pair[0]), marshal(f, pair[1]), false)
	}
	f.Add(marshal(f, &pb.BroadcastRequest{NumWorkers: 2, Rank: 0, Root: 0, Value: 7}), marshal(f, &pb.BroadcastRequest{NumWorkers: 2, Rank: 1, Root: 4294967295}), true)
	f.Fuzz(func(t *testing.T, a, b []byte, broadcast bool) {
		c := fuzzController(t)
		defer c.Close()
		var wg sync.WaitGroup
		for _, data := range [][]byte{a, b} {
			wg.Go(func() {
				ctx, cancel := fuzzCtx()
				defer cancel()
				if broadcast {
					var req pb.BroadcastRequest
					if proto.Unmarshal(data, &req) == nil {
						_, err := c.broadcast(ctx, &req)
						checkStatus(t, "Broadcast", err)
					}
					return
				}
				var req pb.BarrierRequest
				if proto.Unmarshal(data, &req) == nil {
					_, err := c.barrier(ctx, &req)
					checkStatus(t, "Barrier", err)
				}
			})
		}
		wg.Wait()
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.barriers)+len(c.broadcasts) != 0 {
			t.Fatalf("%d barrier and %d broadcast generations left after every call returned", len(c.barriers), len(c.broadcasts))
		}
	})
}
