/*
 * RDMAReceiver — mirrors switchmodel.RDMAReceiver (aggregation/switchmodel/
 * receiver.go).
 *
 * Terminates the workers' UC QPs. receive_qp maps (source IP, switch IP,
 * switch QPN) to the worker: one ternary entry per worker matches every
 * QPN of the form wire.P4AppQPN(rank, *) = 0x800000 | rank<<16 | qp, and
 * the QP index is the QPN's low 9 bits (bounded by num_qps). The per-QP
 * register rx_qp_state {next_psn, pool_index} (switchmodel.rxState) is
 * indexed by qp_base + qp_index, a range the controller allocates per job,
 * so jobs that reuse the same QPNs (every job does, with P4App QPNs) never
 * share state.
 *   FIRST/ONLY: pool_index = RETH r_key (wire.PoolIndex), next_psn = PSN+1.
 *   MIDDLE/LAST: PSN must equal next_psn, then pool_index += 2; otherwise
 *   the QP is invalid until the next FIRST/ONLY (DROP_PSN).
 * Then the payload length (256 B) and the job's pool range are checked;
 * nothing outside the range ever touches a slot.
 */
#ifndef _RDMA_RECEIVER_P4_
#define _RDMA_RECEIVER_P4_

#include "types.p4"
#include "headers.p4"

control RDMAReceiver(
    inout header_t hdr,
    inout ingress_metadata_t ig_md) {

    Register<rx_state_t, qp_state_index_t>(MAX_RX_QPS_I) rx_qp_state;

    RegisterAction<rx_state_t, qp_state_index_t, bit<32>>(rx_qp_state) start_message = {
        void apply(inout rx_state_t s, out bit<32> pool_index) {
            s.next_psn = ig_md.switchml_md.psn_next;
            s.pool_index = hdr.ib_reth.r_key;
            pool_index = s.pool_index;
        }
    };

    RegisterAction<rx_state_t, qp_state_index_t, bit<32>>(rx_qp_state) continue_message = {
        void apply(inout rx_state_t s, out bit<32> pool_index) {
            if (s.next_psn == ig_md.switchml_md.psn && s.pool_index != INVALID_POOL_INDEX) {
                s.next_psn = ig_md.switchml_md.psn_next;
                s.pool_index = s.pool_index + 2;
            } else {
                s.pool_index = INVALID_POOL_INDEX;
            }
            pool_index = s.pool_index;
        }
    };

    action set_qp(worker_id_t worker_id, worker_bitmap_t worker_bit,
                  num_workers_t num_workers, bit<16> num_qps,
                  qp_state_index_t qp_base, slot_t pool_base,
                  slot_t pool_slots, mgid_t mgid) {
        ig_md.switchml_md.worker_id = worker_id;
        ig_md.switchml_md.worker_bit = worker_bit;
        ig_md.switchml_md.num_workers = num_workers;
        ig_md.switchml_md.num_qps = num_qps;
        ig_md.switchml_md.qp_index = hdr.ib_bth.dst_qp[8:0];
        ig_md.switchml_md.qp_state_index = qp_base + (qp_state_index_t) hdr.ib_bth.dst_qp[8:0];
        ig_md.switchml_md.pool_base = pool_base;
        ig_md.switchml_md.pool_slots = pool_slots;
        ig_md.switchml_md.mgid = mgid;
    }

    action unknown_qp() {
        ig_md.switchml_md.drop_reason = DROP_UNKNOWN_QP;
    }

    table receive_qp {
        key = {
            hdr.ipv4.src_addr : exact;
            hdr.ipv4.dst_addr : exact;   // the switch IP
            hdr.ib_bth.dst_qp : ternary; // 0x800000 | rank<<16, mask 0xFFFE00
        }
        actions = { set_qp; unknown_qp; }
        const default_action = unknown_qp;
        size = MAX_WORKER_ENTRIES_I;
    }

    action set_position(bool first_packet, bool last_packet, bool has_imm) {
        ig_md.switchml_md.first_packet = first_packet;
        ig_md.switchml_md.last_packet = last_packet;
        ig_md.switchml_md.has_imm = has_imm;
    }

    action bad_opcode() {
        ig_md.switchml_md.drop_reason = DROP_OPCODE;
    }

    // rdma.Opcode IsFirst / IsLast of the UC RDMA WRITE opcodes.
    table opcode_position {
        key = { hdr.ib_bth.opcode : exact; }
        actions = { set_position; bad_opcode; }
        const default_action = bad_opcode;
        size = 8;
        const entries = {
            UC_RDMA_WRITE_FIRST               : set_position(true,  false, false);
            UC_RDMA_WRITE_MIDDLE              : set_position(false, false, false);
            UC_RDMA_WRITE_LAST                : set_position(false, true,  false);
            UC_RDMA_WRITE_LAST_WITH_IMMEDIATE : set_position(false, true,  true);
            UC_RDMA_WRITE_ONLY                : set_position(true,  true,  false);
            UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE : set_position(true,  true,  true);
        }
    }

    bit<32> pool_index;
    bit<32> slot_offset;
    bit<16> expected_len;

    apply {
        ig_md.switchml_md.psn = (bit<32>) hdr.ib_bth.psn;
        ig_md.switchml_md.psn_next = (bit<32>) (hdr.ib_bth.psn + 1); // wraps at 2^24
        opcode_position.apply();
        if (ig_md.switchml_md.drop_reason == DROP_NONE) {
            receive_qp.apply();
        }
        if (ig_md.switchml_md.drop_reason == DROP_NONE &&
            (bit<16>) ig_md.switchml_md.qp_index >= ig_md.switchml_md.num_qps) {
            ig_md.switchml_md.drop_reason = DROP_UNKNOWN_QP;
        }
        if (ig_md.switchml_md.drop_reason == DROP_NONE) {
            if (ig_md.switchml_md.first_packet) {
                pool_index = start_message.execute(ig_md.switchml_md.qp_state_index);
            } else {
                pool_index = continue_message.execute(ig_md.switchml_md.qp_state_index);
            }
            if (pool_index == INVALID_POOL_INDEX) {
                ig_md.switchml_md.drop_reason = DROP_PSN;
            }
        }
        // Length: IPv4 20 + UDP 8 + BTH 12 [+ RETH 16] [+ ImmDt 4] + 256 + ICRC 4.
        expected_len = 300;
        if (hdr.ib_reth.isValid()) { expected_len = expected_len + 16; }
        if (hdr.ib_immediate.isValid()) { expected_len = expected_len + 4; }
        if (ig_md.switchml_md.drop_reason == DROP_NONE &&
            (!hdr.payload.isValid() || hdr.ipv4.total_len != expected_len)) {
            ig_md.switchml_md.drop_reason = DROP_LENGTH;
        }
        slot_offset = (pool_index >> 1) - (bit<32>) ig_md.switchml_md.pool_base;
        if (ig_md.switchml_md.drop_reason == DROP_NONE &&
            slot_offset >= (bit<32>) ig_md.switchml_md.pool_slots) {
            ig_md.switchml_md.drop_reason = DROP_POOL_RANGE;
        }
        ig_md.switchml_md.pool_index = pool_index;
    }
}

#endif /* _RDMA_RECEIVER_P4_ */
