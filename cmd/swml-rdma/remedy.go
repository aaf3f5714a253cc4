package main

import (
	"errors"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/control/p4rt"
	"github.com/swml-rdma/swml-rdma/aggregation/join"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/perftest"
)

// remedies say what to do about the errors whose fix the library leaves to
// its caller, in the terms of this command's flags (docs/operations.md
// "Errors you may meet" has the same table). The first match wins.
var remedies = []struct {
	err error
	fix string
}{
	{join.ErrControllerUnreachable, "start `swml-rdma switch` first, check --controller, or raise --connect-timeout"},
	{verbs.ErrNotSupported, "use --nic soft (no RDMA hardware needed), or a binary built with -tags ibverbs (cgo, libibverbs-dev)"},
	{verbs.ErrNoDevice, "use --nic soft, or add a Soft-RoCE device: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev DEV (docs/testbed.md); `swml-rdma devices` lists what there is"},
	{aggregation.ErrHeavyLoss, "the network drops too much: check the links' drop counters (swml_nic_drops_total, the switch's drops, ip -s link), or raise --peer-timeout"},
	{aggregation.ErrPeerTimeout, "check that every rank makes the same calls and that the switch runs; if a worker is merely slow to reach its next call, raise --peer-timeout"},
	{p4rt.ErrPoolSize, "pass a --pool-size no larger than the program's slots, or compile the program with a larger NUM_SLOTS (docs/p4.md)"},
	{p4rt.ErrNotPrimary, "another controller holds the device: stop it, or pass a higher --election-id"},
	{p4rt.ErrNoPort, "give every worker's address its switch port: --port ADDR=PORT"},
	{perftest.ErrConfig, "give --size from 1 byte to 1 GiB and a positive --iters or --duration"},
}

// remedy is "; " and the fix for err, or "" if it has none.
func remedy(err error) string {
	for _, r := range remedies {
		if errors.Is(err, r.err) {
			return "; " + r.fix
		}
	}
	return ""
}
