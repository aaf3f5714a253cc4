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
 * packets were swapped by a unicast replay (docs/protocol.md). A Unicast
 * (the answer to a retransmission) never cuts into an open result
 * message: its FIRST/ONLY waits for a closed stream and a MIDDLE/LAST
 * behind the stream's position is skipped without closing it
 * (docs/switch.md; rule R14 in docs/p4.md).
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

// eg_md.tx_next = pool index + 2 is a 16-bit add: the field lives in two
// 16-bit containers (a 32-bit container would need a widening add).
@pa_container_size("egress", "eg_md.tx_next", 16, 16)
control RDMASender(
    inout header_t hdr,
    inout egress_metadata_t eg_md,
    in egress_intrinsic_metadata_t eg_intr_md,
    inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {

    Register<bit<32>, qp_state_index_t>(MAX_RX_QPS) psn;
    Register<bit<32>, qp_state_index_t>(MAX_RX_QPS) tx_pos;
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

    // tx_pos after this packet is eg_md.tx_next: the pool index + 2, or
    // TX_CLOSED after a LAST/ONLY (set in apply). Four register actions,
    // at most two comparisons each (one stateful ALU).
    // Broadcast FIRST/ONLY: always in order; opens (or, ONLY, closes) the
    // stream.
    RegisterAction<bit<32>, qp_state_index_t, bool>(tx_pos) tx_start = {
        void apply(inout bit<32> v, out bool in_order) {
            v = eg_md.tx_next;
            in_order = true;
        }
    };

    // Broadcast MIDDLE/LAST: in order iff it has the expected pool index;
    // then the stream moves on, else it closes.
    RegisterAction<bit<32>, qp_state_index_t, bool>(tx_pos) tx_continue = {
        void apply(inout bit<32> v, out bool in_order) {
            if (v == (bit<32>) hdr.bridged.pool_index) {
                v = eg_md.tx_next;
                in_order = true;
            } else {
                v = TX_CLOSED;
                in_order = false;
            }
        }
    };

    // Unicast (the answer to a retransmission) never cuts into the
    // worker's open result message (switchmodel.RDMASender, docs/
    // switch.md): FIRST/ONLY only on a closed stream, else skipped and
    // the stream left as it is.
    RegisterAction<bit<32>, qp_state_index_t, bool>(tx_pos) tx_start_unicast = {
        void apply(inout bit<32> v, out bool in_order) {
            // v == TX_CLOSED as a signed -1: the stateful ALU's compare
            // constant is small (0xFFFFFFFF itself does not fit).
            if ((int<32>) v == -1) {
                v = eg_md.tx_next;
                in_order = true;
            } else {
                in_order = false;
            }
        }
    };

    // Unicast MIDDLE/LAST: in order as for a broadcast; one behind the
    // stream's position (an older message's packet, or any on a closed
    // stream: TX_CLOSED is above every pool index) is skipped and leaves
    // the stream; one ahead of it closes it.
    RegisterAction<bit<32>, qp_state_index_t, bool>(tx_pos) tx_continue_unicast = {
        void apply(inout bit<32> v, out bool in_order) {
            if (v == (bit<32>) hdr.bridged.pool_index) {
                v = eg_md.tx_next;
                in_order = true;
            } else if ((bit<32>) hdr.bridged.pool_index < v) {
                in_order = false;
            } else {
                v = TX_CLOSED;
                in_order = false;
            }
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
        size = MAX_WORKER_ENTRIES;
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
        size = MAX_RX_QPS;
    }

    bool in_order;

    action start()            { in_order = tx_start.execute(eg_md.psn_index); }
    action continue_()        { in_order = tx_continue.execute(eg_md.psn_index); }
    action start_unicast()    { in_order = tx_start_unicast.execute(eg_md.psn_index); }
    action continue_unicast() { in_order = tx_continue_unicast.execute(eg_md.psn_index); }

    // tx_pos in E1 and psn in E2, pinned: the worker / worker_qp lookups
    // (E0) give the index, and E1 / E2 are the stages whose stateful ALUs
    // the ingress leaves free (I1 holds 3 of 4, I2 1; I3–I11 are full).
    @stage(1)
    table tx_step {
        key = {
            hdr.bridged.decision     : exact;
            hdr.bridged.first_packet : exact;
        }
        actions = { start; continue_; start_unicast; continue_unicast; @defaultonly NoAction; }
        const default_action = NoAction;
        size = 4;
        const entries = {
            (DECISION_BROADCAST, 1) : start();
            (DECISION_BROADCAST, 0) : continue_();
            (DECISION_UNICAST, 1)   : start_unicast();
            (DECISION_UNICAST, 0)   : continue_unicast();
        }
    }

    action send() {
        results.count(RESULT_SENT);
        hdr.ib_bth.psn = (psn_t) next_psn.execute(eg_md.psn_index);
    }

    @stage(2)
    table psn_step {
        actions = { send; }
        const default_action = send();
        size = 1;
    }

    apply {
        // eg_md.tx_next: TX_CLOSED from the parser; pool index + 2 unless
        // this is the message's last packet (16-bit add into the low half).
        if (hdr.bridged.last_packet == 0) {
            eg_md.tx_next[15:0] = hdr.bridged.pool_index + 2;
            eg_md.tx_next[31:16] = 0;
        }
        in_order = false;
        // eg_md.dest_rank: set by EgressParser (parse_broadcast /
        // parse_unicast).
        worker.apply();
        worker_qp.apply();
        // A miss (no_worker) must not touch the per-QP registers at an
        // unset index: it stays out of order and is dropped below.
        if (eg_md.worker_known == 1 && eg_md.qp_known == 1) {
            tx_step.apply();
        }
        if (!in_order) {
            if (eg_md.worker_known == 1 && eg_md.qp_known == 1) {
                results.count(RESULT_SKIPPED);
            }
            eg_dprsr_md.drop_ctl = 1;
        } else {
            psn_step.apply();
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
}

#endif /* _RDMA_SENDER_P4_ */
