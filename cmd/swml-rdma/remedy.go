package main

import (
	"errors"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/join"
	"github.com/swml-rdma/swml-rdma/verbs"
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
	{aggregation.ErrWaitingForRank, "the rank named holds the job up: is its process stopped (SIGSTOP, a debugger: kill -CONT it), stuck before its next all-reduce, or making other calls? check its log; raise --peer-timeout if it is merely slow"},
	{aggregation.ErrPeerTimeout, "check that every rank makes the same calls and that the switch runs; if a worker is merely slow to reach its next call, raise --peer-timeout"},
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
