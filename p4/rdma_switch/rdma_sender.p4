/*
 * RDMASender — mirrors switchmodel.RDMASender (aggregation/switchmodel/
 * sender.go). Egress, once per replica.
 *
 * The destination rank is the PRE's egress_rid for a Broadcast (the
 * multicast group's replica instance = rank) and the sender for a Unicast.
 * worker (mgid, rank) gives the worker's MAC, IP and real rkey; worker_qp
 * (mgid, rank, QP index) gives the worker's QPN for that QP and the index
 * of its PSN counter. psn[] holds, per (worker, QP), the next result PSN;
 * the controller writes the PSN the worker gave when the job starts.
 * tx_pos[] holds, per (worker, QP), where the result stream stands
 * (switchmodel.txPos): the pool index the next MIDDLE/LAST must have, or
 * TX_CLOSED. A MIDDLE/LAST result that does not directly follow the
 * previous packet of the same message to that worker QP is skipped for
 * that worker (dropped, no PSN used, counted in results[RESULT_SKIPPED]),
 * and the QP's stream is closed until the next FIRST/ONLY — the model's
 * ErrOutOfOrder, which keeps a UC receiver from accepting a message whose
 * packets were swapped by a unicast replay (docs/protocol.md).
 * Opcode from the request's position: FIRST, MIDDLE, LAST_WITH_IMMEDIATE,
 * ONLY_WITH_IMMEDIATE. RETH va/len are the request's (echoed), r_key the
 * worker's; the immediate is wire.Imm(msg id, max e0, max e1) from
 * Exponents. IPv4: TTL 64, DF, checksum recomputed (EgressDeparser); UDP
 * checksum 0. The ICRC is NOT recomputed (docs/p4.md "ICRC").
 */
#ifndef _RDMA_SENDER_P4_
#define _RDMA_SENDER_P4_

#include "types.p4"
#include "headers.p4"

control RDMASender(
    inout header_t hdr,
    inout egress_metadata_t eg_md,
    in egress_intrinsic_metadata_t eg_intr_md,
    inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {

    Register<bit<32>, qp_state_index_t>(MAX_RX_QPS_I) psn;
    Register<bit<32>, qp_state_index_t>(MAX_RX_QPS_I) tx_pos;
    // results[RESULT_SENT], results[RESULT_SKIPPED] (switchmodel.Counters
    // ResultPackets, ResultsSkipped).
    Counter<bit<64>, bit<8>>(NUM_RESULT_CODES, CounterType_t.PACKETS) results;

    // The low 24 bits are the PSN: a 32-bit increment wraps them at 2^24
    // exactly as the model's (psn + 1) & PSNMask.
    RegisterAction<bit<32>, qp_state_index_t, bit<32>>(psn) next_psn = {
        void apply(inout bit<32> v, out bit<32> current) {
            current = v;
            v = v + 1;
        }
    };

    // One action per position, so the stateful ALU computes the next
    // position itself (pool index + 2, or TX_CLOSED after a LAST/ONLY)
    // from the bridged 16-bit pool index.
    // FIRST: always in order; opens the stream.
    RegisterAction<bit<32>, qp_state_index_t, bool>(tx_pos) tx_first = {
        void apply(inout bit<32> v, out bool in_order) {
            v = (bit<32>) hdr.bridged.pool_index + 2;
            in_order = true;
        }
    };

    // ONLY: always in order; the stream stays closed.
    RegisterAction<bit<32>, qp_state_index_t, bool>(tx_pos) tx_only = {
        void apply(inout bit<32> v, out bool in_order) {
            v = TX_CLOSED;
            in_order = true;
        }
    };

    // MIDDLE: in order iff it has the expected pool index; then the
    // stream moves on, else it closes.
    RegisterAction<bit<32>, qp_state_index_t, bool>(tx_pos) tx_middle = {
        void apply(inout bit<32> v, out bool in_order) {
            if (v == (bit<32>) hdr.bridged.pool_index) {
                v = (bit<32>) hdr.bridged.pool_index + 2;
                in_order = true;
            } else {
                v = TX_CLOSED;
                in_order = false;
            }
        }
    };

    // LAST: in order iff it has the expected pool index; the stream
    // closes either way.
    RegisterAction<bit<32>, qp_state_index_t, bool>(tx_pos) tx_last = {
        void apply(inout bit<32> v, out bool in_order) {
            in_order = v == (bit<32>) hdr.bridged.pool_index;
            v = TX_CLOSED;
        }
    };

    // Each table sets a flag of its own on a hit (the parser clears both),
    // so worker and worker_qp share a stage; the apply block drops a
    // packet either missed.
    action set_worker(mac_addr_t mac, ipv4_addr_t ip, rkey_t rkey) {
        hdr.ethernet.dst_addr = mac;
        hdr.ipv4.dst_addr = ip;
        eg_md.rkey = rkey;
        eg_md.worker_known = 1;
    }

    action no_worker() {
    }

    table worker {
        key = {
            hdr.bridged.mgid : exact;
            eg_md.dest_rank  : exact;
        }
        actions = { set_worker; no_worker; }
        const default_action = no_worker;
        size = MAX_WORKER_ENTRIES_I;
    }

    action set_qp(qpn_t qpn, qp_state_index_t psn_index) {
        hdr.ib_bth.dst_qp = qpn;
        eg_md.psn_index = psn_index;
        eg_md.qp_known = 1;
    }

    table worker_qp {
        key = {
            hdr.bridged.mgid     : exact;
            eg_md.dest_rank      : exact;
            hdr.bridged.qp_index : exact;
        }
        actions = { set_qp; no_worker; }
        const default_action = no_worker;
        size = MAX_RX_QPS_I;
    }

    bool in_order;

    apply {
        // eg_md.dest_rank: set by EgressParser (parse_broadcast /
        // parse_unicast).
        // A miss (no_worker) must not touch the per-QP registers at an
        // unset index.
        worker.apply();
        worker_qp.apply();
        if (eg_md.worker_known == 0 || eg_md.qp_known == 0) {
            eg_dprsr_md.drop_ctl = 1;
            return;
        }
        if (hdr.bridged.first_packet == 1 && hdr.bridged.last_packet == 1) {
            in_order = tx_only.execute(eg_md.psn_index);
        } else if (hdr.bridged.first_packet == 1) {
            in_order = tx_first.execute(eg_md.psn_index);
        } else if (hdr.bridged.last_packet == 1) {
            in_order = tx_last.execute(eg_md.psn_index);
        } else {
            in_order = tx_middle.execute(eg_md.psn_index);
        }
        if (!in_order) {
            results.count(RESULT_SKIPPED);
            eg_dprsr_md.drop_ctl = 1;
            return;
        }
        results.count(RESULT_SENT);
        hdr.ib_bth.psn = (psn_t) next_psn.execute(eg_md.psn_index);

        if (hdr.bridged.first_packet == 1 && hdr.bridged.last_packet == 1) {
            hdr.ib_bth.opcode = UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE;
        } else if (hdr.bridged.first_packet == 1) {
            hdr.ib_bth.opcode = UC_RDMA_WRITE_FIRST;
        } else if (hdr.bridged.last_packet == 1) {
            hdr.ib_bth.opcode = UC_RDMA_WRITE_LAST_WITH_IMMEDIATE;
        } else {
            hdr.ib_bth.opcode = UC_RDMA_WRITE_MIDDLE;
        }
        // As switchmodel.RDMASender encodes a fresh BTH: M=1, pkey 0xFFFF.
        hdr.ib_bth.se = 0;
        hdr.ib_bth.migration_req = 1;
        hdr.ib_bth.pad_count = 0;
        hdr.ib_bth.transport_version = 0;
        hdr.ib_bth.partition_key = 0xFFFF;
        hdr.ib_bth.f_res1 = 0;
        hdr.ib_bth.b_res1 = 0;
        hdr.ib_bth.reserved = 0;
        hdr.ib_bth.ack_req = 0;
        hdr.ib_bth.reserved2 = 0;

        if (hdr.ib_reth.isValid()) {
            hdr.ib_reth.r_key = eg_md.rkey;
        }
        if (hdr.bridged.last_packet == 1) {
            if (!hdr.ib_immediate.isValid()) {
                // LAST / ONLY without immediate: the result always has one.
                hdr.ib_immediate.setValid();
                hdr.ipv4.total_len = hdr.ipv4.total_len + 4;
                hdr.udp.length = hdr.udp.length + 4;
            }
            hdr.ib_immediate.msg_id = hdr.bridged.msg_id;
            hdr.ib_immediate.e0 = hdr.bridged.e0;
            hdr.ib_immediate.e1 = hdr.bridged.e1;
        }
        hdr.ipv4.ttl = 64;
        hdr.ipv4.flags = 0b010; // DF
        hdr.udp.checksum = 0;
    }
}

#endif /* _RDMA_SENDER_P4_ */
