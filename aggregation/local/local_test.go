package local

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
)

// TestStartClose: a cluster binds its switch and NICs at the addresses it
// was given, serves gRPC at ControllerAddr, and frees every address on
// Close (a second cluster binds them again). Addresses: 127.14.3.x; the
// controller listens on one of them too, since a freed port of
// 127.0.0.1 may be any concurrently running test's next ephemeral port.
func TestStartClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sw := netip.MustParseAddr("127.14.3.1")
	for round := range 2 {
		c, err := Start(ctx, Config{Switch: swswitch.Config{Addr: sw}, Workers: 3, ControllerListen: "127.14.3.100:0"})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		want := []string{"127.14.3.2", "127.14.3.3", "127.14.3.4"}
		for r, d := range c.NICs {
			if d.Addr().String() != want[r] {
				t.Fatalf("NIC %d at %v, want %s", r, d.Addr(), want[r])
			}
		}
		if got := c.WorkerAddrs(3); got[2].String() != want[2] {
			t.Fatalf("WorkerAddrs %v", got)
		}
		conn, err := net.Dial("tcp", c.ControllerAddr)
		if err != nil {
			t.Fatalf("controller at %s: %v", c.ControllerAddr, err)
		}
		conn.Close()
		// The switch's address is taken while it runs.
		if _, err := soft.Open(soft.Config{Addr: sw}); err == nil {
			t.Fatal("a NIC bound the running switch's address")
		}
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if conn, err := net.Dial("tcp", c.ControllerAddr); err == nil {
			conn.Close()
			t.Fatal("the controller still accepts after Close")
		}
	}
}

// TestStartErrors: a taken address fails naming the endpoint, and
// leaves nothing bound.
func TestStartErrors(t *testing.T) {
	ctx := t.Context()
	taken, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.14.4.3")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(ctx, Config{Switch: swswitch.Config{Addr: netip.MustParseAddr("127.14.4.1")}, Workers: 2})
	if err == nil || !strings.Contains(err.Error(), "worker 1 NIC at 127.14.4.3") {
		t.Fatalf("error %v, want it to name worker 1's NIC at 127.14.4.3", err)
	}
	taken.Close()
	// Everything the failed Start opened was closed: the same cluster
	// starts now.
	c, err := Start(ctx, Config{Switch: swswitch.Config{Addr: netip.MustParseAddr("127.14.4.1")}, Workers: 2,
		WorkerAddr: func(r int) netip.Addr { return netip.AddrFrom4([4]byte{127, 14, 4, byte(2 + r)}) }})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := Start(ctx, Config{Workers: -1}); err == nil {
		t.Fatal("-1 workers accepted")
	}
	// The switch's and the controller's addresses: an *EndpointError
	// naming which, for a front end to name its flag.
	taken, err = soft.Open(soft.Config{Addr: netip.MustParseAddr("127.14.4.9")})
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var ee *EndpointError
	if _, err := Start(ctx, Config{Switch: swswitch.Config{Addr: netip.MustParseAddr("127.14.4.9")}}); !errors.As(err, &ee) || ee.Endpoint != "switch" {
		t.Fatalf("switch address taken: %v, want an EndpointError for the switch", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	if _, err := Start(ctx, Config{Switch: swswitch.Config{Addr: netip.MustParseAddr("127.14.4.10")}, ControllerListen: lis.Addr().String()}); !errors.As(err, &ee) || ee.Endpoint != "controller" {
		t.Fatalf("controller address taken: %v, want an EndpointError for the controller", err)
	}
}

// TestJobsAndServeDone: the cluster counts the jobs its controller starts
// and ends, and ServeDone reports the end of serving after Close.
// Addresses: 127.14.5.x.
func TestJobsAndServeDone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{Switch: swswitch.Config{Addr: netip.MustParseAddr("127.14.5.1")}, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The controller's Programmer is the counting one: what it installs
	// through it is counted.
	job := &wire.Job{ID: 7, PacketSize: 1024, PoolSlots: 1,
		Workers: []wire.Worker{{Rank: 0, Addr: c.NICs[0].Addr(), QPNs: []uint32{0x100}, PSNs: []uint32{0}, SwitchQPNs: []uint32{0x200}}}}
	if err := c.jobs.AddJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if err := c.jobs.RemoveJob(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if started, ended := c.Jobs(); started != 1 || ended != 1 {
		t.Fatalf("Jobs() = %d, %d; want 1, 1", started, ended)
	}
	c.Close()
	select {
	case <-c.ServeDone():
	case <-ctx.Done():
		t.Fatal("ServeDone did not report after Close")
	}
}

// TestParallel: every rank runs at once (none returns before all have
// started) and the errors are joined by rank.
func TestParallel(t *testing.T) {
	const n = 5
	started := make(chan struct{}, n)
	release := make(chan struct{})
	go func() {
		for range n {
			<-started
		}
		close(release)
	}()
	err := Parallel(n, func(r int) error {
		started <- struct{}{}
		<-release
		if r%2 == 1 {
			return errors.New("odd")
		}
		return nil
	})
	if err == nil || err.Error() != "workers 1, 3: odd" {
		t.Fatalf("error %v", err)
	}
}

// TestJoinErrors: the same error from every worker is given once.
func TestJoinErrors(t *testing.T) {
	cfgErr := errors.New("aggregation: invalid configuration: bad")
	if err := JoinErrors([]error{nil, nil}); err != nil {
		t.Fatalf("no errors: %v", err)
	}
	err := JoinErrors([]error{cfgErr, errors.New(cfgErr.Error()), cfgErr, cfgErr})
	if got := err.Error(); got != "every worker: "+cfgErr.Error() || !errors.Is(err, cfgErr) {
		t.Fatalf("same error from 4 workers: %q", got)
	}
	if got := JoinErrors([]error{nil, cfgErr, nil, cfgErr}).Error(); got != "workers 1, 3: "+cfgErr.Error() {
		t.Fatalf("same error from 2 of 4 workers: %q", got)
	}
	if got := JoinErrors([]error{nil, nil, cfgErr}).Error(); got != "worker 2: "+cfgErr.Error() {
		t.Fatalf("one worker: %q", got)
	}
	other := errors.New("peer timeout")
	got := JoinErrors([]error{cfgErr, other}).Error()
	if got != "worker 0: "+cfgErr.Error()+"\nworker 1: peer timeout" {
		t.Fatalf("different errors: %q", got)
	}
}
