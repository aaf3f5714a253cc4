/*
 * RDMAReceiver — mirrors switchmodel.RDMAReceiver (aggregation/switchmodel/
 * receiver.go), rule for rule (docs/p4.md "Rules").
 *
 * Terminates the workers' UC QPs. receive_qp maps (source IP, switch IP,
 * switch QPN) to the worker: one ternary entry per worker matches every
 * QPN of the form wire.P4AppQPN(rank, *) = 0x800000 | rank<<16 | qp, and
 * the QP index is the QPN's low 9 bits (bounded by num_qps). The per-QP
 * state (switchmodel.rxState) is indexed by qp_base + qp_index, a range the
 * controller allocates per job, so jobs that reuse the same QPNs (every job
 * does, with P4App QPNs) never share state. It is split in two registers
 * (types.p4 rx_state_t): rx_qp_state {next_psn, room} decides, and
 * rx_pool_index holds the pool index, because a stateful ALU returns one
 * word per pass and a MIDDLE/LAST needs a verdict (ok / PSN / range) and a
 * pool index.
 *
 * Everything the model checks after its state update (payload length; for
 * FIRST/ONLY the RETH pool index's range) depends only on the packet, so
 * it is computed BEFORE the register access and the access itself
 * invalidates the QP (next_psn = INVALID_PSN) when the packet is dropped:
 *   FIRST/ONLY, bad length        → invalidate, DROP_LENGTH
 *   FIRST/ONLY, rkey out of range → invalidate, DROP_POOL_RANGE
 *   FIRST/ONLY, ok                → next_psn = PSN+1, room = pool index
 *                                   steps to the range's end, pool index
 *                                   = rkey
 *   MIDDLE/LAST, bad length       → invalidate, DROP_PSN if the PSN was not
 *                                   the expected one, else DROP_LENGTH
 *   MIDDLE/LAST, PSN ≠ next_psn   → invalidate, DROP_PSN (also when the QP
 *                                   is invalid: INVALID_PSN matches nothing)
 *   MIDDLE/LAST, room ≤ 2         → invalidate, DROP_POOL_RANGE (pool index
 *                                   + 2 leaves the job's range)
 *   MIDDLE/LAST, ok               → next_psn = PSN+1, room − 2, pool index
 *                                   + 2 (rx_pool_index)
 * PSNs are held and compared in the psn_key form (PSN << 8 | 0x80, ig_md.rx.below):
 * one PHV field serves every comparison, PSN+1 is psn_key + 0x100 computed
 * in the stateful ALU (wrapping at 2^24), and INVALID_PSN, whose low byte
 * is not 0x80, matches no packet.
 * rx_high_psn, a third register in the same stage, keeps the PSN after the
 * newest packet of the QP (<< 8 | 0x80, so that 24-bit serial order is the
 * sign of a 32-bit difference; 0 = nothing seen). A packet older than it was
 * overtaken on the way or duplicated: DROP_STALE_PSN, unless the rules above
 * dropped it already. It runs beside rx_qp_state, so a stale packet still
 * moves rx_qp_state (it can cut the message in progress short: a loss the
 * workers recover from) but never reaches a slot (docs/protocol.md,
 * "Reordering"). The model does the same, in the same order.
 * The pool index is wire.PoolIndex: slot = pool index >> 1 (r_key[31:1]).
 * Nothing outside the range ever touches a slot.
 */
#ifndef _RDMA_RECEIVER_P4_
#define _RDMA_RECEIVER_P4_

#include "types.p4"
#include "headers.p4"
#include "testgen_steer.p4"

control RDMAReceiver(
    inout header_t hdr,
    inout ingress_metadata_t ig_md) {

    Register<rx_state_t, qp_state_index_t>(MAX_RX_QPS) rx_qp_state;
    Register<bit<32>, qp_state_index_t>(MAX_RX_QPS) rx_pool_index;
    Register<bit<32>, qp_state_index_t>(MAX_RX_QPS) rx_high_psn;

    // Its working fields live in ig_md.rx (types.p4 rx_md_t), set by the
    // parser, so that no assignment here precedes the tables that write
    // them (each would cost a stage).

    RegisterAction<rx_state_t, qp_state_index_t, salu_predicate_t>(rx_qp_state) start_message = {
        void apply(inout rx_state_t s) {
            s.next_psn = ig_md.switchml_md.psn_key + 0x100;
            s.room = ig_md.rx.first_room;
        }
    };

    // cmplo: the PSN is the expected one (never true on an invalid QP).
    RegisterAction<rx_state_t, qp_state_index_t, salu_predicate_t>(rx_qp_state) invalidate = {
        void apply(inout rx_state_t s, out salu_predicate_t verdict) {
            TESTGEN_ASSUME_RX_STATE(s)
            verdict = SALU_PREDICATE_LO(s.next_psn == ig_md.switchml_md.psn_key);
            s.next_psn = INVALID_PSN;
        }
    };

    // cmplo: the PSN is the expected one; cmphi: pool index + 2 stays in
    // the job's range (room counts pool index steps to its end).
    RegisterAction<rx_state_t, qp_state_index_t, salu_predicate_t>(rx_qp_state) continue_message = {
        void apply(inout rx_state_t s, out salu_predicate_t verdict) {
            TESTGEN_ASSUME_RX_STATE(s)
            verdict = SALU_PREDICATE(s.next_psn == ig_md.switchml_md.psn_key, s.room > 2);
            if (s.next_psn == ig_md.switchml_md.psn_key && s.room > 2) {
                s.next_psn = ig_md.switchml_md.psn_key + 0x100;
                s.room = s.room - 2;
            } else {
                s.next_psn = INVALID_PSN;
            }
        }
    };

    // cmplo: the QP has seen a packet; cmphi: this one is older than the
    // newest (the signed difference of the << 8 forms is negative). The
    // mark only moves forward.
    RegisterAction<bit<32>, qp_state_index_t, salu_predicate_t>(rx_high_psn) check_high_psn = {
        void apply(inout bit<32> v, out salu_predicate_t stale) {
            TESTGEN_ASSUME_HIGH_PSN(v)
            stale = SALU_PREDICATE(v != 0, (int<32>) (ig_md.switchml_md.psn_key - v) < 0);
            if (v == 0 || (int<32>) (ig_md.switchml_md.psn_key - v) >= 0) {
                // (PSN + 1 mod 2^24) << 8 | 0x80: the 24-bit PSN sits in
                // the top bits, so adding 1 << 8 wraps it at 2^24.
                v = ig_md.switchml_md.psn_key + 0x100;
            }
        }
    };

    RegisterAction<bit<32>, qp_state_index_t, bit<32>>(rx_pool_index) set_pool_index = {
        void apply(inout bit<32> v, out bit<32> pool_index) {
            v = hdr.ib_reth.r_key;
            pool_index = v;
        }
    };

    RegisterAction<bit<32>, qp_state_index_t, bit<32>>(rx_pool_index) next_pool_index = {
        void apply(inout bit<32> v, out bit<32> pool_index) {
            v = v + 2;
            pool_index = v;
        }
    };

    // The job's pool range in pool index units (wire.PoolIndex):
    // [pool_first_index, pool_end_index) = [2·pool_base, 2·(pool_base +
    // pool_slots)), the controller's. With them the FIRST/ONLY range
    // figures are one operation each, in this action (docs/p4.md "Stages").
    action set_qp(worker_id_t worker_id, worker_bitmap_t worker_bit,
                  num_workers_t num_workers, bit<16> num_qps,
                  qp_state_index_t qp_base, bit<32> pool_first_index,
                  bit<32> pool_end_index, mgid_t mgid) {
        TESTGEN_ASSUME_SET_QP
        ig_md.switchml_md.worker_id = worker_id;
        ig_md.switchml_md.worker_bit = worker_bit;
        ig_md.switchml_md.num_workers = num_workers;
        ig_md.switchml_md.qp_index = hdr.ib_bth.dst_qp[8:0];
        ig_md.switchml_md.qp_state_index = qp_base + hdr.ib_bth.dst_qp[15:0];
        ig_md.switchml_md.mgid = mgid;
        ig_md.rx.qp_room = num_qps - hdr.ib_bth.dst_qp[15:0];
        ig_md.rx.below = pool_first_index |-| hdr.ib_reth.r_key;
        ig_md.rx.first_room = pool_end_index |-| hdr.ib_reth.r_key;
    }

    // A miss reads as a QP index out of range: DROP_UNKNOWN_QP in I1, and
    // only when opcode_position accepted the opcode (the model's order),
    // without a test of drop_reason between the two I0 tables.
    action unknown_qp() {
        ig_md.rx.qp_room = 0;
    }

    table receive_qp {
        key = {
            hdr.ipv4.src_addr : exact;
            hdr.ipv4.dst_addr : exact;   // the switch IP
            hdr.ib_bth.dst_qp : ternary; // 0x800000 | rank<<16, mask 0xFFFE00
        }
        actions = { set_qp; unknown_qp; }
        const default_action = unknown_qp;
        size = MAX_WORKER_ENTRIES;
    }

    action set_position(bool first_packet, bool last_packet, bool has_imm,
                        bit<16> ipv4_total_len) {
        ig_md.switchml_md.first_packet = first_packet;
        ig_md.switchml_md.last_packet = last_packet;
        ig_md.switchml_md.has_imm = has_imm;
        ig_md.rx.expected_len = ipv4_total_len;
        ig_md.switchml_md.psn_key = hdr.ib_bth.psn ++ 8w0x80;
    }

    action bad_opcode() {
        ig_md.switchml_md.drop_reason = DROP_OPCODE;
    }

    // rdma.Opcode IsFirst / IsLast / HasImm of the UC RDMA WRITE opcodes,
    // and the IPv4 total length of a request with the job's payload:
    // IPV4_LEN_NO_EXT [+ RETH 16] [+ ImmDt 4] (the model's length rule:
    // len(pkt.Payload) == packet size). A constant per opcode, so no
    // arithmetic stage precedes the check.
    table opcode_position {
        key = { hdr.ib_bth.opcode : exact; }
        actions = { set_position; bad_opcode; }
        const default_action = bad_opcode;
        size = 8;
        const entries = {
            UC_RDMA_WRITE_FIRST               : set_position(true,  false, false, IPV4_LEN_NO_EXT + 16);
            UC_RDMA_WRITE_MIDDLE              : set_position(false, false, false, IPV4_LEN_NO_EXT);
            UC_RDMA_WRITE_LAST                : set_position(false, true,  false, IPV4_LEN_NO_EXT);
            UC_RDMA_WRITE_LAST_WITH_IMMEDIATE : set_position(false, true,  true,  IPV4_LEN_NO_EXT + 4);
            UC_RDMA_WRITE_ONLY                : set_position(true,  true,  false, IPV4_LEN_NO_EXT + 16);
            UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE : set_position(true,  true,  true,  IPV4_LEN_NO_EXT + 16 + 4);
        }
    }

    // Stage by stage (docs/p4.md "Stages"): I0 opcode_position and
    // receive_qp; I1 the three registers, each under tests of fields the
    // I0 tables wrote. drop_reason is written in I1 only by the branches
    // that decide without the registers' answer; the answer (rx.verdict,
    // rx.stale) is turned into a reason by decide(), in I2, beside the
    // BitmapChecker that Ingress runs when accepted() holds.
    apply {
        opcode_position.apply();
        receive_qp.apply();
        if (ig_md.switchml_md.drop_reason == DROP_NONE) {
            if (ig_md.rx.qp_room == 0 || ig_md.rx.qp_room[15:15] == 1) {
                ig_md.switchml_md.drop_reason = DROP_UNKNOWN_QP;
            } else {
                // rx_pool_index runs beside rx_qp_state (same stage), not
                // after it: it moves on every packet of a known QP, and
                // whatever it holds after a dropped packet is never used,
                // because the drop invalidated rx_qp_state and only a
                // FIRST/ONLY (which overwrites it) validates the QP again.
                ig_md.rx.stale = check_high_psn.execute(ig_md.switchml_md.qp_state_index);
                if (ig_md.switchml_md.first_packet) {
                    ig_md.switchml_md.pool_index = set_pool_index.execute(ig_md.switchml_md.qp_state_index);
                } else {
                    ig_md.switchml_md.pool_index = next_pool_index.execute(ig_md.switchml_md.qp_state_index);
                }
                if (!hdr.payload.isValid() || hdr.ipv4.total_len != ig_md.rx.expected_len) {
                    ig_md.rx.verdict = invalidate.execute(ig_md.switchml_md.qp_state_index);
                    if (ig_md.switchml_md.first_packet) {
                        ig_md.switchml_md.drop_reason = DROP_LENGTH;
                    } else {
                        // DROP_LENGTH if the PSN was the expected one
                        // (decide(), from rx.verdict).
                        ig_md.switchml_md.drop_reason = DROP_PSN;
                    }
                } else if (ig_md.switchml_md.first_packet) {
                    if (ig_md.rx.below[15:0] != 0) {
                        invalidate.execute(ig_md.switchml_md.qp_state_index);
                        ig_md.switchml_md.drop_reason = DROP_POOL_RANGE;
                    } else if (ig_md.rx.first_room[15:0] == 0) {
                        invalidate.execute(ig_md.switchml_md.qp_state_index);
                        ig_md.switchml_md.drop_reason = DROP_POOL_RANGE;
                    } else {
                        start_message.execute(ig_md.switchml_md.qp_state_index);
                        ig_md.rx.verdict = PRED_LO_HI;
                    }
                } else {
                    ig_md.rx.verdict = continue_message.execute(ig_md.switchml_md.qp_state_index);
                }
            }
        }
    }
}

// accepted() (Ingress, I2): the packet goes on to the BitmapChecker iff
//   drop_reason == DROP_NONE && rx.verdict == PRED_LO_HI &&
//   rx.stale != PRED_LO_HI && sim_drop == 0.
// RDMAReceiverDecide, in the stage after the registers: the reason of a
// packet the registers (or the loss simulator) dropped, in the model's
// order. One table keyed on the values (one logical table, where an if
// chain took five and a stage of its own), entries in priority order.
control RDMAReceiverDecide(inout ingress_metadata_t ig_md) {

    action set_reason(drop_reason_t reason) {
        ig_md.switchml_md.drop_reason = reason;
    }

    // Placed by hand right after the registers' stage: bf-p4c's placement
    // otherwise puts it behind the 32 Processors, and NextStep, which
    // reads the reason, two stages past the twelfth.
    @stage(4)
    table decide {
        key = {
            ig_md.switchml_md.drop_reason : ternary;
            ig_md.rx.verdict              : ternary;
            ig_md.rx.stale                : ternary;
            ig_md.sim_drop                : ternary;
        }
        actions = { set_reason; NoAction; }
        const default_action = NoAction;
        size = 8;
        const entries = {
            // MIDDLE/LAST with a bad length: DROP_LENGTH if the PSN was
            // the expected one (rx.verdict from invalidate).
            (DROP_PSN, PRED_LO, _, _)              : set_reason(DROP_LENGTH);
            (DROP_NONE, PRED_LO, _, _)             : set_reason(DROP_POOL_RANGE);
            (DROP_NONE, PRED_LO_HI, PRED_LO_HI, _) : set_reason(DROP_STALE_PSN);
            (DROP_NONE, PRED_LO_HI, _, 0)          : NoAction();   // accepted
            (DROP_NONE, PRED_LO_HI, _, _)          : set_reason(DROP_INGRESS_LOSS);
            (DROP_NONE, _, _, _)                   : set_reason(DROP_PSN);
        }
    }

    apply {
        decide.apply();
    }
}

#endif /* _RDMA_RECEIVER_P4_ */
