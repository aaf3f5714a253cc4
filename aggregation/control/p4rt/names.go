package p4rt

import "fmt"

// P4 entity names, as the fully qualified control-instance paths in
// p4/rdma_switch (bf-p4c may prefix them with "pipe."; lookups accept
// both). The parity test checks every one against the .p4 sources and the
// P4Info fixture.
const (
	TableSwitchAddress     = "Ingress.arp_icmp_responder.switch_address"
	ActionSetSwitchAddress = "Ingress.arp_icmp_responder.set_switch_address"

	TableIngressDrop  = "Ingress.ingress_drop_sim.drop_probability"
	ActionIngressDrop = "Ingress.ingress_drop_sim.set_drop_probability"
	TableEgressDrop   = "Egress.egress_drop_sim.drop_probability"
	ActionEgressDrop  = "Egress.egress_drop_sim.set_drop_probability"

	// RDMAReceiver (switchmodel.RDMAReceiver).
	TableReceiveQP = "Ingress.rdma_receiver.receive_qp"
	ActionSetQP    = "Ingress.rdma_receiver.set_qp"
	RegisterRxQP   = "Ingress.rdma_receiver.rx_qp_state"   // {next_psn, room}
	RegisterRxPool = "Ingress.rdma_receiver.rx_pool_index" // pool index of the QP's last packet
	// RegisterRxHighPSN is the PSN after the newest packet of the QP, << 8
	// | 0x80 (0: none yet): older packets are dropped (DROP_STALE_PSN).
	RegisterRxHighPSN = "Ingress.rdma_receiver.rx_high_psn"
	FieldSrcAddr      = "hdr.ipv4.src_addr"
	FieldDstAddr      = "hdr.ipv4.dst_addr"
	FieldDstQP        = "hdr.ib_bth.dst_qp"
	RegisterBitmap    = "Ingress.bitmap_checker.bitmap"   // BitmapChecker
	RegisterMissing   = "Ingress.workers_counter.missing" // WorkersCounter
	RegisterMaxE0     = "Ingress.exponents.max_e0"        // Exponents
	RegisterMaxE1     = "Ingress.exponents.max_e1"
	RegisterMsgID     = "Ingress.exponents.msg_id"
	CounterDecisions  = "Ingress.next_step.decisions" // NextStep
	CounterDrops      = "Ingress.next_step.drops"
	CounterNotSwitch  = "Ingress.not_switchml"

	// RDMASender (switchmodel.RDMASender).
	TableWorker       = "Egress.rdma_sender.worker"
	ActionSetWorker   = "Egress.rdma_sender.set_worker"
	TableWorkerQP     = "Egress.rdma_sender.worker_qp"
	ActionSetWorkerQP = "Egress.rdma_sender.set_qp"
	RegisterPSN       = "Egress.rdma_sender.psn"
	RegisterTxPos     = "Egress.rdma_sender.tx_pos"  // switchmodel.txPos
	CounterResults    = "Egress.rdma_sender.results" // [0] sent, [1] skipped out of order
	FieldMGID         = "hdr.bridged.mgid"
	FieldDestRank     = "eg_md.dest_rank"
	FieldQPIndex      = "hdr.bridged.qp_index"

	// NumProcessors Processor instances, processor00 … processor31.
	NumProcessors = 32
)

// RegisterProcessor is the register of Processor instance k (0 ≤ k < 32).
func RegisterProcessor(k int) string { return fmt.Sprintf("Ingress.processor%02d.values", k) }

// ModelControls are the Go switch model's control types
// (aggregation/switchmodel) that p4/rdma_switch mirrors control by control.
var ModelControls = []string{"RDMAReceiver", "BitmapChecker", "WorkersCounter", "Exponents", "Processor", "NextStep", "RDMASender"}

// Action parameter names (in P4Info order) the backend writes.
var (
	paramsSetSwitchAddress = []string{"switch_mac", "switch_ip"}
	paramsSetDrop          = []string{"drop_threshold"}
	paramsSetQP            = []string{"worker_id", "worker_bit", "num_workers", "num_qps", "qp_base", "pool_first_index", "pool_end_index", "mgid"}
	paramsSetWorker        = []string{"mac", "ip", "rkey"}
	paramsSetWorkerQP      = []string{"qpn", "psn_index"}
)

// UsedEntities lists every table, action, register and counter name the
// backend resolves, with their match fields and action parameters (for the
// parity test and for New's up-front check).
func UsedEntities() (tables map[string][]string, actions map[string][]string, registers, counters []string) {
	tables = map[string][]string{
		TableSwitchAddress: nil,
		TableIngressDrop:   nil,
		TableEgressDrop:    nil,
		TableReceiveQP:     {FieldSrcAddr, FieldDstAddr, FieldDstQP},
		TableWorker:        {FieldMGID, FieldDestRank},
		TableWorkerQP:      {FieldMGID, FieldDestRank, FieldQPIndex},
	}
	actions = map[string][]string{
		ActionSetSwitchAddress: paramsSetSwitchAddress,
		ActionIngressDrop:      paramsSetDrop,
		ActionEgressDrop:       paramsSetDrop,
		ActionSetQP:            paramsSetQP,
		ActionSetWorker:        paramsSetWorker,
		ActionSetWorkerQP:      paramsSetWorkerQP,
	}
	registers = []string{RegisterRxQP, RegisterRxHighPSN, RegisterBitmap, RegisterMissing, RegisterMaxE0, RegisterMaxE1, RegisterMsgID, RegisterPSN, RegisterTxPos}
	for k := 0; k < NumProcessors; k++ {
		registers = append(registers, RegisterProcessor(k))
	}
	counters = []string{CounterDecisions, CounterDrops, CounterNotSwitch, CounterResults}
	return
}
