package main

import (
	"errors"
	"fmt"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/control/p4rt"
	"github.com/swml-rdma/swml-rdma/aggregation/join"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
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
	{control.ErrUnreachable, "the controller stopped answering: is `swml-rdma switch` still running at --controller?"},
	{verbs.ErrNotSupported, "use --nic soft (no RDMA hardware needed), or a binary built with -tags ibverbs (cgo, libibverbs-dev)"},
	{verbs.ErrNoDevice, "use --nic soft, or add a Soft-RoCE device: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev DEV (docs/testbed.md); `swml-rdma devices` lists what there is"},
	{aggregation.ErrHeavyLoss, "the network drops too much: check the links' drop counters (swml_nic_drops_total, the switch's drops, ip -s link), or raise --peer-timeout"},
	{aggregation.ErrWaitingForRank, "the rank named holds the job up: is its process stopped (SIGSTOP, a debugger: kill -CONT it), stuck before its next all-reduce, or making other calls? check its log; raise --peer-timeout if it is merely slow"},
	{aggregation.ErrPeerTimeout, "check that every rank makes the same calls and that the switch runs; if a worker is merely slow to reach its next call, raise --peer-timeout"},
	{p4rt.ErrPoolSize, "pass a --pool-size no larger than the program's slots, or compile the program with a larger NUM_SLOTS (docs/p4.md)"},
	{p4rt.ErrNotPrimary, "another controller holds the device: stop it, or pass a higher --election-id"},
	{p4rt.ErrNoPort, "give every worker's address its switch port: --port ADDR=PORT"},
	{perftest.ErrConfig, "give --size from 1 byte to 1 GiB and a positive --iters or --duration"},
	{control.ErrRegistrationTokenMissing, "the switch requires its registration token: pass --registration-token-file FILE, the file its --registration-token-file reads"},
	{control.ErrRegistrationTokenWrong, "--registration-token-file holds another token than the switch's: pass the file its --registration-token-file reads"},
	{control.ErrSessionRunning, "pass another --session-id (every concurrent job needs its own), or wait for that job to end"},
	{wire.ErrElementWidth, "the switch sums another element width: pass the other --wire (32 or 16); a Tofino program sums one width, the software switch both"},
}

// tlsRemedies say what to do when the controller and this client miss each
// other in TLS (control.TLSError), in this command's flags.
var tlsRemedies = map[control.TLSProblem]string{
	control.TLSControllerSpeaksTLS: "pass --tls-ca FILE, the CA that signed the switch's --tls-cert",
	control.TLSControllerPlaintext: "the switch serves no TLS: drop --tls-ca, --tls-cert and --tls-key, or start it with --tls-cert and --tls-key",
	control.TLSUnknownAuthority:    "pass --tls-ca FILE, the CA that signed the switch's --tls-cert",
	control.TLSNameMismatch:        "dial --controller by a name or address the switch's certificate holds, or pass --tls-server-name NAME",
	control.TLSClientCertRequired:  "the switch verifies clients (--tls-client-ca): pass --tls-cert and --tls-key, a certificate that CA signed",
	control.TLSClientCertRefused:   "pass --tls-cert and --tls-key signed by a CA in the switch's --tls-client-ca",
}

// mismatchFlags name the flag that sets each parameter ranks must agree
// on (control.MismatchError.Param).
var mismatchFlags = map[string]string{
	"tensor_bytes": "--size", "num_workers": "--workers", "message_size": "--msg-size", "packet_size": "--packet-size",
	"qps": "--qps", "dtype": "--dtype", "wire_bits": "--wire",
}

// remedy is "; " and the fix for err, or "" if it has none.
func remedy(err error) string {
	var te *control.TLSError
	if errors.As(err, &te) {
		if fix, ok := tlsRemedies[te.Problem]; ok {
			return "; " + fix
		}
		return ""
	}
	var me *control.MismatchError
	if errors.As(err, &me) {
		if flag, ok := mismatchFlags[me.Param]; ok {
			return fmt.Sprintf("; pass the same %s to every worker of the job", flag)
		}
		if me.Param == "rank" {
			return "; give each worker its own --rank"
		}
	}
	for _, r := range remedies {
		if errors.Is(err, r.err) {
			return "; " + r.fix
		}
	}
	return ""
}
