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
 * 1024 B profile (-DPAYLOAD_1024): the same decision on pass 0, then the
 * consume and harvest passes across the pipes (docs/p4.md "1024 B
 * payloads"); the pass table is in the apply block below. The 16-bit
 * profile (-DWIRE_16) takes the same passes over two pipes (chunks 0 and
 * 1, LAST_CHUNK = 1; docs/p4.md "16-bit profile").
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

    action recirculate_for_harvest(decision_t decision) {
        hdr.bridged.setValid();
        hdr.bridged.pass = PASS_HARVEST;
        hdr.bridged.decision = decision;
        hdr.bridged.first_packet = (bit<1>) ig_md.switchml_md.first_packet;
        hdr.bridged.last_packet = (bit<1>) ig_md.switchml_md.last_packet;
        hdr.bridged._pad_pass = 0;
        hdr.bridged._pad_decision = 0;
        hdr.bridged._pad_first = 0;
        hdr.bridged._pad_last = 0;
        hdr.bridged._pad_worker = 0;
#ifdef CHUNKED
        hdr.bridged._pad_chunk = 0;
        hdr.bridged._pad_first_contribution = 0;
        hdr.bridged._pad_retransmission = 0;
        hdr.bridged.chunk = 0;
        hdr.bridged.first_contribution = 0;
        hdr.bridged.retransmission = 0;
#else
        hdr.bridged._pad0 = 0;
#endif
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

#ifdef CHUNKED
    // 1024 B profile (docs/p4.md "1024 B payloads"). Pass 0 (pipe 0)
    // decides as in 256 B, then every accepted request makes the consume
    // passes through pipes 1–3 (a retransmission too, reading: it keeps
    // its place behind the contributions before it). After chunk 3 a
    // Consume ends; a Broadcast / Unicast is harvested back to front:
    // chunk 3's first halves (pipe 3), then for chunks 2, 1, 0 an inserted
    // window with the second halves and a pass for the first halves; the
    // last pass (pipe 0, chunk 0) multicasts or unicasts as in 256 B.
    // Flat as in 256 B: one keyed table (step), then the pass-0 loopback
    // port and the drop counter, each behind one gate. The egress port's
    // pipe bits come from the entries (action data), not from
    // hdr.bridged.chunk: PHV cannot align the 2-bit chunk with bits 8..7
    // of the port.

    bit<1> dropped;
    bit<1> to_pipe1;

    action set_loopback_port(PortId_t port) {
        ig_tm_md.ucast_egress_port = port;
    }

    action no_loopback_port() {
        ig_dprsr_md.drop_ctl = 1;
    }

    // Pool-index block → loopback port of pipe 1 (configuration.p4
    // LOOPBACK_KEY_*); the controller writes every key
    // (p4rt.Config.LoopbackPorts).
    table loopback_port {
        key = {
            ig_md.loopback_key : exact;
        }
        actions = { set_loopback_port; no_loopback_port; }
        const default_action = no_loopback_port;
        size = LOOPBACK_KEY_ENTRIES;
    }

    // Pass 0 → pass 1: the bridged header carries what pipes 1–3 need; the
    // consumed chunk 0 leaves the packet, so pipe 1 parses chunk 1.
    action consume_in_pipe1(decision_t decision, bit<1> first_contribution, bit<1> retransmission) {
        hdr.bridged.setValid();
        hdr.bridged.pass = PASS_CONSUME;
        hdr.bridged.decision = decision;
        hdr.bridged.first_packet = (bit<1>) ig_md.switchml_md.first_packet;
        hdr.bridged.last_packet = (bit<1>) ig_md.switchml_md.last_packet;
        hdr.bridged.chunk = 1;
        hdr.bridged.first_contribution = first_contribution;
        hdr.bridged.retransmission = retransmission;
        hdr.bridged._pad_pass = 0;
        hdr.bridged._pad_decision = 0;
        hdr.bridged._pad_first = 0;
        hdr.bridged._pad_last = 0;
        hdr.bridged._pad_worker = 0;
        hdr.bridged._pad_chunk = 0;
        hdr.bridged._pad_first_contribution = 0;
        hdr.bridged._pad_retransmission = 0;
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
        hdr.payload.setInvalid();
        ig_tm_md.bypass_egress = 1;
        ig_md.loopback_key = ig_md.switchml_md.pool_index[LOOPBACK_KEY_HI:LOOPBACK_KEY_LO];
        to_pipe1 = 1;
    }

    action broadcast(bit<1> first_contribution) {
        decisions.count((bit<8>) DECISION_BROADCAST);
        consume_in_pipe1(DECISION_BROADCAST, first_contribution, 0);
    }

    action consume(bit<1> first_contribution) {
        decisions.count((bit<8>) DECISION_CONSUME);
        consume_in_pipe1(DECISION_CONSUME, first_contribution, 0);
    }

    action unicast() {
        decisions.count((bit<8>) DECISION_UNICAST);
        consume_in_pipe1(DECISION_UNICAST, 0, 1);
    }

    action drop() {
        decisions.count((bit<8>) DECISION_DROP);
        dropped = 1;
        ig_dprsr_md.drop_ctl = 1;
    }

    action drop_retransmit_incomplete() {
        decisions.count((bit<8>) DECISION_DROP);
        ig_md.switchml_md.drop_reason = DROP_RETRANSMIT_INCOMPLETE;
        dropped = 1;
        ig_dprsr_md.drop_ctl = 1;
    }

    // Pipe k → pipe k+1 through the same port number (loopback).
    action consume_in_next_pipe(chunk_t next) {
        hdr.payload.setInvalid();
        ig_tm_md.ucast_egress_port = next ++ ig_intr_md.ingress_port[6:0];
        hdr.bridged.chunk = next;
        ig_tm_md.bypass_egress = 1;
    }

    // Chunk 3 consumed by a Consume: aggregated in all four pipes.
    action consumed() {
        ig_dprsr_md.drop_ctl = 1;
    }

    // The consume pass of chunk 3 returned its second halves: read the
    // first halves in the same pipe.
    action harvest_last_chunk() {
        hdr.bridged.pass = PASS_HARVEST;
        ig_tm_md.ucast_egress_port = LAST_CHUNK ++ RECIRC_PORT_LOW;
        ig_tm_md.bypass_egress = 1;
    }

    // Second halves read into an inserted window: first halves next, same
    // pipe (port = this chunk's pipe ++ RECIRC_PORT_LOW).
    action harvest_first_halves(PortId_t port) {
        hdr.bridged.pass = PASS_HARVEST;
        ig_tm_md.ucast_egress_port = port;
        ig_tm_md.bypass_egress = 1;
    }

    // Chunk k rebuilt: the chunk before it, in the pipe before.
    action harvest_previous_chunk(PortId_t port, chunk_t previous) {
        hdr.bridged.pass = PASS_HARVEST_INSERT;
        ig_tm_md.ucast_egress_port = port;
        hdr.bridged.chunk = previous;
        ig_tm_md.bypass_egress = 1;
    }

    // Last pass: the 1024 B result is complete in the packet.
    action result_broadcast() {
        hdr.ethernet.src_addr = hdr.ethernet.dst_addr; // the switch
        hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
        ig_tm_md.bypass_egress = 0;
        ig_tm_md.mcast_grp_a = hdr.bridged.mgid;
        ig_tm_md.level1_exclusion_id = 0;
    }

    action result_unicast() {
        hdr.ethernet.src_addr = hdr.ethernet.dst_addr;
        hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
        ig_tm_md.bypass_egress = 0;
        ig_tm_md.ucast_egress_port = hdr.bridged.ingress_port;
    }

    table step {
        key = {
            hdr.bridged.isValid()            : exact;
#ifdef P4TESTGEN
            ig_md.testgen_bridged.pass       : ternary; // types.p4 testgen_bridged_t
            ig_md.testgen_bridged.chunk      : ternary;
            ig_md.testgen_bridged.decision   : ternary;
#else
            hdr.bridged.pass                 : ternary;
            hdr.bridged.chunk                : ternary;
            hdr.bridged.decision             : ternary;
#endif
            hdr.ib_bth.isValid()             : ternary;
            ig_md.forward                    : ternary;
            ig_md.switchml_md.drop_reason    : ternary;
            ig_md.switchml_md.retransmission : ternary;
            ig_md.switchml_md.missing        : ternary;
            ig_md.switchml_md.bitmap_before  : ternary;
        }
        actions = {
            broadcast; consume; unicast; drop; drop_retransmit_incomplete;
            consume_in_next_pipe; consumed; harvest_last_chunk; harvest_first_halves;
            harvest_previous_chunk; result_broadcast; result_unicast; @defaultonly NoAction;
        }
        const default_action = NoAction;
        size = 32;
        const entries = {
#ifdef WIRE_16
            // Two chunks: chunk 1 (pipe 1) is the last.
            (true, PASS_CONSUME, 1, DECISION_CONSUME, _, _, _, _, _, _) : consumed();
            (true, PASS_CONSUME, 1, _, _, _, _, _, _, _)                : harvest_last_chunk();
            (true, PASS_HARVEST_INSERT, 0, _, _, _, _, _, _, _)         : harvest_first_halves(RECIRC_PORT_LOW_PIPE0);
            (true, PASS_HARVEST, 1, _, _, _, _, _, _, _)                : harvest_previous_chunk(RECIRC_PORT_LOW_PIPE0, 0);
#else
            (true, PASS_CONSUME, 1, _, _, _, _, _, _, _)                : consume_in_next_pipe(2);
            (true, PASS_CONSUME, 2, _, _, _, _, _, _, _)                : consume_in_next_pipe(3);
            (true, PASS_CONSUME, 3, DECISION_CONSUME, _, _, _, _, _, _) : consumed();
            (true, PASS_CONSUME, 3, _, _, _, _, _, _, _)                : harvest_last_chunk();
            (true, PASS_HARVEST_INSERT, 0, _, _, _, _, _, _, _)         : harvest_first_halves(RECIRC_PORT_LOW_PIPE0);
            (true, PASS_HARVEST_INSERT, 1, _, _, _, _, _, _, _)         : harvest_first_halves(RECIRC_PORT_LOW_PIPE1);
            (true, PASS_HARVEST_INSERT, 2, _, _, _, _, _, _, _)         : harvest_first_halves(RECIRC_PORT_LOW_PIPE2);
            (true, PASS_HARVEST_INSERT, 3, _, _, _, _, _, _, _)         : harvest_first_halves(RECIRC_PORT_LOW_PIPE3);
            (true, PASS_HARVEST, 1, _, _, _, _, _, _, _)                : harvest_previous_chunk(RECIRC_PORT_LOW_PIPE0, 0);
            (true, PASS_HARVEST, 2, _, _, _, _, _, _, _)                : harvest_previous_chunk(RECIRC_PORT_LOW_PIPE1, 1);
            (true, PASS_HARVEST, 3, _, _, _, _, _, _, _)                : harvest_previous_chunk(RECIRC_PORT_LOW_PIPE2, 2);
#endif
            (true, PASS_HARVEST, 0, DECISION_BROADCAST, _, _, _, _, _, _) : result_broadcast();
            (true, PASS_HARVEST, 0, _, _, _, _, _, _, _)                : result_unicast();
            // Pass 0: RoCE to the switch IP (BTH, not forwarded).
            (false, _, _, _, true, false, DROP_NONE, 0, 0, 0)          : broadcast(1);
            (false, _, _, _, true, false, DROP_NONE, 0, 0, _)          : broadcast(0);
            (false, _, _, _, true, false, DROP_NONE, 0, _, 0)          : consume(1);
            (false, _, _, _, true, false, DROP_NONE, 0, _, _)          : consume(0);
            (false, _, _, _, true, false, DROP_NONE, _, 0, _)          : unicast();
            (false, _, _, _, true, false, DROP_NONE, _, _, _)          : drop_retransmit_incomplete();
            (false, _, _, _, true, false, _, _, _, _)                  : drop();
        }
    }

    apply {
        dropped = 0;
        to_pipe1 = 0;
        step.apply();
        if (to_pipe1 == 1) {
            loopback_port.apply();
        }
        if (dropped == 1) {
            drops.count(ig_md.switchml_md.drop_reason);
        }
    }
#else
    // 256 B profile: one keyed table decides (Tofino 1 places a table
    // sequence in next-table order, so NextStep is flat — one table and a
    // gated counter — and bf-p4c can put it beside the Processors; nested
    // tests would be a subtree that all 32 Processors must come before or
    // after, docs/p4.md "Stages").
    bit<1> dropped;

    // Second pass (PASS_HARVEST): the result is complete in the payload.
    action harvest_broadcast() {
        hdr.ethernet.src_addr = hdr.ethernet.dst_addr; // the switch
        hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
        ig_tm_md.bypass_egress = 0;
        ig_tm_md.mcast_grp_a = hdr.bridged.mgid;
        ig_tm_md.level1_exclusion_id = 0;
    }

    action harvest_unicast() {
        hdr.ethernet.src_addr = hdr.ethernet.dst_addr;
        hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
        ig_tm_md.bypass_egress = 0;
        ig_tm_md.ucast_egress_port = hdr.bridged.ingress_port;
    }

    action broadcast() {
        decisions.count((bit<8>) DECISION_BROADCAST);
        recirculate_for_harvest(DECISION_BROADCAST);
    }

    action unicast() {
        decisions.count((bit<8>) DECISION_UNICAST);
        recirculate_for_harvest(DECISION_UNICAST);
    }

    action consume() {
        decisions.count((bit<8>) DECISION_CONSUME);
        ig_dprsr_md.drop_ctl = 1;
    }

    action drop() {
        decisions.count((bit<8>) DECISION_DROP);
        dropped = 1;
        ig_dprsr_md.drop_ctl = 1;
    }

    action drop_retransmit_incomplete() {
        decisions.count((bit<8>) DECISION_DROP);
        ig_md.switchml_md.drop_reason = DROP_RETRANSMIT_INCOMPLETE;
        dropped = 1;
        ig_dprsr_md.drop_ctl = 1;
    }

    // switchmodel.NextStep's Decide in priority order: a harvest pass
    // sends; on pass 0 (RoCE to the switch IP: BTH, not forwarded) a
    // receiver drop stays a drop, retransmission && complete → Unicast,
    // retransmission → Drop (DROP_RETRANSMIT_INCOMPLETE), last
    // contribution (missing == 0) → Broadcast, else Consume. Anything
    // else (ARP, echo, forwarded) misses: the dispatch in Ingress.
    table step {
        key = {
            hdr.bridged.isValid()           : exact;
#ifdef P4TESTGEN
            ig_md.testgen_bridged.pass      : ternary; // types.p4 testgen_bridged_t
            ig_md.testgen_bridged.decision  : ternary;
#else
            hdr.bridged.pass                : ternary;
            hdr.bridged.decision            : ternary;
#endif
            hdr.ib_bth.isValid()            : ternary;
            ig_md.forward                   : ternary;
            ig_md.switchml_md.drop_reason   : ternary;
            ig_md.switchml_md.retransmission : ternary;
            ig_md.switchml_md.missing       : ternary;
        }
        actions = {
            harvest_broadcast; harvest_unicast; broadcast; unicast; consume; drop;
            drop_retransmit_incomplete; @defaultonly NoAction;
        }
        const default_action = NoAction;
        size = 16;
        const entries = {
            (true,  PASS_HARVEST, DECISION_BROADCAST, _, _, _, _, _) : harvest_broadcast();
            (true,  PASS_HARVEST, _, _, _, _, _, _)                  : harvest_unicast();
            (false, _, _, true, false, DROP_NONE, 0, 0)              : broadcast();
            (false, _, _, true, false, DROP_NONE, 0, _)              : consume();
            (false, _, _, true, false, DROP_NONE, _, 0)              : unicast();
            (false, _, _, true, false, DROP_NONE, _, _)              : drop_retransmit_incomplete();
            (false, _, _, true, false, _, _, _)                      : drop();
        }
    }

    apply {
        dropped = 0;
        step.apply();
        if (dropped == 1) {
            drops.count(ig_md.switchml_md.drop_reason);
        }
    }
#endif
}

#endif /* _NEXT_STEP_P4_ */
