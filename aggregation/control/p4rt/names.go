package p4rt

import "fmt"

// P4 entity names, as the fully qualified control-instance paths in
// p4/rdma_switch (bf-p4c may prefix them with "pipe."; lookups accept
// both). The parity test checks every one against the .p4 sources and the
// P4Info fixture.
const (
	tableSwitchAddress     = "Ingress.arp_icmp_responder.switch_address"
	actionSetSwitchAddress = "Ingress.arp_icmp_responder.set_switch_address"

	tableIngressDrop  = "Ingress.ingress_drop_sim.drop_probability"
	actionIngressDrop = "Ingress.ingress_drop_sim.set_drop_probability"
	tableEgressDrop   = "Egress.egress_drop_sim.drop_probability"
	actionEgressDrop  = "Egress.egress_drop_sim.set_drop_probability"

	// RDMAReceiver (switchmodel.RDMAReceiver).
	tableReceiveQP = "Ingress.rdma_receiver.receive_qp"
	actionSetQP    = "Ingress.rdma_receiver.set_qp"
	registerRxQP   = "Ingress.rdma_receiver.rx_qp_state"   // {next_psn, room}
	registerRxPool = "Ingress.rdma_receiver.rx_pool_index" // pool index of the QP's last packet
	// registerRxHighPSN is the PSN after the newest packet of the QP, << 8
	// | 0x80 (0: none yet): older packets are dropped (DROP_STALE_PSN).
	registerRxHighPSN = "Ingress.rdma_receiver.rx_high_psn"
	fieldSrcAddr      = "hdr.ipv4.src_addr"
	fieldDstAddr      = "hdr.ipv4.dst_addr"
	fieldDstQP        = "hdr.ib_bth.dst_qp"
	registerBitmap    = "Ingress.bitmap_checker.bitmap"   // BitmapChecker
	registerMissing   = "Ingress.workers_counter.missing" // WorkersCounter
	registerMaxE0     = "Ingress.exponents.max_e0"        // Exponents
	registerMaxE1     = "Ingress.exponents.max_e1"
	registerMsgID     = "Ingress.exponents.msg_id"
	counterDecisions  = "Ingress.next_step.decisions" // NextStep
	counterDrops      = "Ingress.next_step.drops"
	counterNotSwitch  = "Ingress.not_switchml"

	// RDMASender (switchmodel.RDMASender).
	tableWorker       = "Egress.rdma_sender.worker"
	actionSetWorker   = "Egress.rdma_sender.set_worker"
	tableWorkerQP     = "Egress.rdma_sender.worker_qp"
	actionSetWorkerQP = "Egress.rdma_sender.set_qp"
	registerPSN       = "Egress.rdma_sender.psn"
	registerTxPos     = "Egress.rdma_sender.tx_pos"  // switchmodel.txPos
	counterResults    = "Egress.rdma_sender.results" // [0] sent, [1] skipped out of order
	fieldMGID         = "hdr.bridged.mgid"
	fieldDestRank     = "eg_md.dest_rank"
	fieldQPIndex      = "hdr.bridged.qp_index"

	// numProcessors Processor instances, processor00 … processor31.
	numProcessors = 32
)

// registerProcessor is the register of Processor instance k (0 ≤ k < 32).
func registerProcessor(k int) string { return fmt.Sprintf("Ingress.processor%02d.values", k) }

// modelControls are the Go switch model's control types
// (aggregation/switchmodel) that p4/rdma_switch mirrors control by control.
var modelControls = []string{"RDMAReceiver", "BitmapChecker", "WorkersCounter", "Exponents", "Processor", "NextStep", "RDMASender"}

// Action parameter names (in P4Info order) the backend writes.
var (
	paramsSetSwitchAddress = []string{"switch_mac", "switch_ip"}
	paramsSetDrop          = []string{"drop_threshold"}
	paramsSetQP            = []string{"worker_id", "worker_bit", "num_workers", "num_qps", "qp_base", "pool_first_index", "pool_end_index", "mgid"}
	paramsSetWorker        = []string{"mac", "ip", "rkey"}
	paramsSetWorkerQP      = []string{"qpn", "psn_index"}
)

// usedEntities lists every table, action, register and counter name the
// backend resolves, with their match fields and action parameters (for the
// parity test and for New's up-front check).
func usedEntities() (tables map[string][]string, actions map[string][]string, registers, counters []string) {
	tables = map[string][]string{
		tableSwitchAddress: nil,
		tableIngressDrop:   nil,
		tableEgressDrop:    nil,
		tableReceiveQP:     {fieldSrcAddr, fieldDstAddr, fieldDstQP},
		tableWorker:        {fieldMGID, fieldDestRank},
		tableWorkerQP:      {fieldMGID, fieldDestRank, fieldQPIndex},
	}
	actions = map[string][]string{
		actionSetSwitchAddress: paramsSetSwitchAddress,
		actionIngressDrop:      paramsSetDrop,
		actionEgressDrop:       paramsSetDrop,
		actionSetQP:            paramsSetQP,
		actionSetWorker:        paramsSetWorker,
		actionSetWorkerQP:      paramsSetWorkerQP,
	}
	registers = []string{registerRxQP, registerRxHighPSN, registerBitmap, registerMissing, registerMaxE0, registerMaxE1, registerMsgID, registerPSN, registerTxPos}
	for k := 0; k < numProcessors; k++ {
		registers = append(registers, registerProcessor(k))
	}
	counters = []string{counterDecisions, counterDrops, counterNotSwitch, counterResults}
	return
}
