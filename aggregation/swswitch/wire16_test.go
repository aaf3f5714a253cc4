package swswitch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// The 16-bit wire (docs/wire-format.md "Payload") through the software
// switch: testWorkers of a job with ElementBytes 2 send hand-built
// requests of big-endian int16 lanes and check every result against the
// int16 sum wrapped modulo 2^16.

// TestEndToEnd16 runs 16-bit jobs over both transports, with and without
// loss (resends answered from the stored sums).
func TestEndToEnd16(t *testing.T) {
	for _, tc := range []endToEnd{
		{"3 workers 3-packet messages", 170, 3, 2, 3, 1024, 6, 0, 0},
		{"33 workers 256 B", 171, 33, 1, 2, 256, 3, 0, 0},
		{"5% ingress and egress loss", 172, 4, 2, 4, 512, 12, 0.05, 0.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forFabrics(t, tc.ingress, func(t *testing.T, fb fabric) { tc.runWidth(t, fb, 2) })
		})
	}
}

// TestMixedWidthJobs: a 32-bit and a 16-bit job at once in one switch,
// their rounds interleaved; each worker checks its own width's sums.
func TestMixedWidthJobs(t *testing.T) {
	forFabrics(t, 0, func(t *testing.T, fb fabric) {
		const net = 173
		sw := fb.newSwitch(t, Config{Addr: addr(net, 1), Model: switchmodel.Config{PoolSize: 64}})
		a := makeJob(1, net, 3, 2, 0, 2*2, 1024)
		b := makeJob(2, net, 3, 2, 4, 2*2, 1024)
		b.DType, b.ElementBytes = wire.Float32, 2
		for r := range b.Workers {
			b.Workers[r].Addr = addr(net, 30+r)
		}
		ctx := context.Background()
		for _, j := range []*wire.Job{a, b} {
			if err := sw.AddJob(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan struct{})
		go func() { defer close(done); runJob(t, sw, b, 2, 8, 200*time.Millisecond) }()
		runJob(t, sw, a, 2, 8, 200*time.Millisecond)
		<-done
		if st := sw.Stats(); st.Jobs != 2 || st.Model.Drops != [switchmodel.NumDropReasons]uint64{} {
			t.Errorf("stats %+v", st)
		}
	})
}

// TestAddJobWidths: the switch takes both widths and refuses what the
// wire contract does (wire.Job.Validate).
func TestAddJobWidths(t *testing.T) {
	const net = 174
	sw := newSwitch(t, Config{Addr: addr(net, 1), Model: switchmodel.Config{PoolSize: 16}})
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		dtype  wire.DType
		eb     uint8
		wantOK bool
	}{
		{"int32 on 32 bits", wire.Int32, 4, true},
		{"float32 on 16 bits", wire.Float32, 2, true},
		{"int32 on 16 bits", wire.Int32, 2, false},
		{"8-bit lanes", wire.Float32, 1, false},
	} {
		j := makeJob(1, net, 1, 1, 0, 1, 256)
		j.DType, j.ElementBytes = tc.dtype, tc.eb
		err := sw.AddJob(ctx, j)
		if tc.wantOK != (err == nil) || err != nil && !errors.Is(err, wire.ErrBadJob) {
			t.Errorf("%s: AddJob = %v, want ok %v or wire.ErrBadJob", tc.name, err, tc.wantOK)
		}
		if err := sw.RemoveJob(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
}
