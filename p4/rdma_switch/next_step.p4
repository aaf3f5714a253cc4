/*
 * NextStep — mirrors switchmodel.NextStep (aggregation/switchmodel/
 * processor.go) and counts what the model counts (switchmodel.Counters).
 *
 * PASS_REQUEST, same order as the Go Decide:
 *   retransmission && complete → Unicast;  retransmission → Drop
 *   (DROP_RETRANSMIT_INCOMPLETE);  last contribution → Broadcast;
 *   otherwise → Consume (dropped after aggregation).
 * Broadcast and Unicast recirculate once (PASS_HARVEST, through the
 * recirculation port of the arrival pipe) to read the first halves; on
 * that pass the packet goes to the job's multicast group (one replica per
 * worker, rid = rank) or back out of the sender's port.
 * decisions[] is indexed by switchml_md decision code, drops[] by
 * switchmodel.DropReason code.
 */
#ifndef _NEXT_STEP_P4_
#define _NEXT_STEP_P4_

#include "types.p4"
#include "headers.p4"

control NextStep(
    inout header_t hdr,
    inout ingress_metadata_t ig_md,
    in ingress_intrinsic_metadata_t ig_intr_md,
    inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
    inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    Counter<bit<64>, bit<8>>(NUM_DECISION_CODES, CounterType_t.PACKETS) decisions;
    Counter<bit<64>, bit<8>>(NUM_DROP_CODES, CounterType_t.PACKETS) drops;

    decision_t decision;

    action recirculate_for_harvest() {
        hdr.bridged.setValid();
        hdr.bridged.pass = PASS_HARVEST;
        hdr.bridged.decision = decision;
        hdr.bridged.first_packet = (bit<1>) ig_md.switchml_md.first_packet;
        hdr.bridged.last_packet = (bit<1>) ig_md.switchml_md.last_packet;
        hdr.bridged._pad0 = 0;
        hdr.bridged.worker_id = ig_md.switchml_md.worker_id;
        hdr.bridged._pad1 = 0;
        hdr.bridged.qp_index = ig_md.switchml_md.qp_index;
        hdr.bridged.mgid = ig_md.switchml_md.mgid;
        hdr.bridged.pool_index = (pool_index_t) ig_md.switchml_md.pool_index;
        hdr.bridged.msg_id = ig_md.switchml_md.result_msg_id;
        hdr.bridged.e0 = ig_md.switchml_md.result_e0;
        hdr.bridged.e1 = ig_md.switchml_md.result_e1;
        hdr.bridged._pad2 = 0;
        hdr.bridged.ingress_port = ig_intr_md.ingress_port;
        ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port[8:7] ++ RECIRC_PORT_LOW;
        ig_tm_md.bypass_egress = 1;
    }

    apply {
        if (hdr.bridged.isValid() && hdr.bridged.pass == PASS_HARVEST) {
            // Second pass: the result is complete in the payload.
            hdr.ethernet.src_addr = hdr.ethernet.dst_addr; // the switch
            hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
            ig_tm_md.bypass_egress = 0;
            if (hdr.bridged.decision == DECISION_BROADCAST) {
                ig_tm_md.mcast_grp_a = hdr.bridged.mgid;
                ig_tm_md.level1_exclusion_id = 0;
            } else {
                ig_tm_md.ucast_egress_port = hdr.bridged.ingress_port;
            }
            return;
        }
        if (ig_md.switchml_md.drop_reason != DROP_NONE) {
            decision = DECISION_DROP;
        } else if (ig_md.switchml_md.retransmission && ig_md.switchml_md.complete) {
            decision = DECISION_UNICAST;
        } else if (ig_md.switchml_md.retransmission) {
            decision = DECISION_DROP;
            ig_md.switchml_md.drop_reason = DROP_RETRANSMIT_INCOMPLETE;
        } else if (ig_md.switchml_md.last_contribution) {
            decision = DECISION_BROADCAST;
        } else {
            decision = DECISION_CONSUME;
        }
        decisions.count((bit<8>) decision);
        if (decision == DECISION_BROADCAST || decision == DECISION_UNICAST) {
            recirculate_for_harvest();
        } else {
            if (decision == DECISION_DROP) {
                drops.count(ig_md.switchml_md.drop_reason);
            }
            ig_dprsr_md.drop_ctl = 1;
        }
    }
}

#endif /* _NEXT_STEP_P4_ */
