package sweep

import (
	"context"
	"fmt"

	"github.com/swml-rdma/swml-rdma/aggregation/benchmark"
	"github.com/swml-rdma/swml-rdma/aggregation/join"
	"github.com/swml-rdma/swml-rdma/aggregation/ring"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// runRing runs the project's ring in this process over one userspace NIC
// per worker, each NIC's socket opened in its worker's namespace, so its
// packets take the same links.
func (r *runner) runRing(ctx context.Context, lab *netlab.Lab, row *Row) error {
	devs := make([]verbs.Device, len(lab.Workers))
	defer func() {
		for _, d := range devs {
			if d != nil {
				d.Close()
			}
		}
	}()
	for i, ns := range lab.Workers {
		err := lab.Do(ns, func() error {
			var err error
			// Every rank's NIC in this one process: no busy-polling
			// (udp.DefaultBusyPoll).
			devs[i], err = join.OpenNIC(join.NICConfig{Kind: join.NICSoft, Addr: lab.WorkerAddrs[i], BusyPoll: -1})
			return err
		})
		if err != nil {
			return fmt.Errorf("ring rank %d: %w", i, err)
		}
	}
	rg, err := ring.New(devs, ring.Config{MessageSize: r.cfg.MessageSize, MTU: verbs.MTU(r.cfg.PacketSize)})
	if err != nil {
		return err
	}
	defer rg.Close()
	reducers := make([]benchmark.AllReducer, len(devs))
	for i := range reducers {
		reducers[i] = rg.Rank(i)
	}
	stop := context.AfterFunc(ctx, func() { rg.Close() }) // a ring call may wait for a peer timeout otherwise
	defer stop()
	run, err := benchmark.Run(ctx, reducers, benchmark.Config{Workers: row.Workers, Elements: row.Elements, DType: wire.Float32,
		Warmup: row.Warmup, Iters: row.Iters, Bound: benchmark.Float32Bound, Label: "ring"})
	if err != nil {
		return err
	}
	st := rg.Stats()
	row.Times = benchmark.Summarize(run.Times, row.Elements).Times()
	row.Packets, row.Retransmissions = st.Packets, st.Retransmissions
	row.setMessages(st.Messages)
	row.ResultSHA256, row.Verified = run.ResultSHA256, true
	return nil
}
