/*
 * rdma_switch.p4 — SwitchML in-network all-reduce over RoCEv2, Tofino 1
 * (TNA). The same pipeline as the Go switch model
 * (aggregation/switchmodel), control by control:
 *
 *   RDMAReceiver → BitmapChecker → WorkersCounter → Exponents →
 *   Processor ×32 → NextStep  ──(recirculate once: harvest)──►
 *   multicast (rid = rank) → RDMASender (egress)
 *
 * 256 B payloads (64 int32 values); -DPAYLOAD_1024: 1024 B payloads in
 * four 256 B chunks, chunk k in pipe k (configuration.p4, docs/p4.md
 * "1024 B payloads"); -DWIRE_16: 256 B payloads of 128 int16 values in
 * two 128 B chunks, chunk k in pipe k (docs/p4.md "16-bit profile"). docs/p4.md has the rule-by-rule table against the
 * model, the stage layout, the resources and the stale ICRC.
 *
 * Compile: `make p4` (p4/build.sh: bf-p4c --target tofino --arch tna,
 * default and -DTEST_PROFILE, P4Info for the controller). No Tofino
 * compiler is available where this repository is developed: the parse
 * depths, codes and names are checked by Go tests
 * (aggregation/control/p4rt), stage fit and PHV only by a compile.
 */
#include <core.p4>
#include <tna.p4>

#include "configuration.p4"
#include "types.p4"
#include "headers.p4"
#include "parsers.p4"
#include "arp_icmp_responder.p4"
#include "forwarder.p4"
#include "drop_simulator.p4"
#include "rdma_receiver.p4"
#include "bitmap_checker.p4"
#include "workers_counter.p4"
#include "exponents.p4"
#include "processor.p4"
#include "next_step.p4"
#include "rdma_sender.p4"
#include "testgen_steer.p4"

control Ingress(
    inout header_t hdr,
    inout ingress_metadata_t ig_md,
    in ingress_intrinsic_metadata_t ig_intr_md,
    in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
    inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
    inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    ARPICMPResponder() arp_icmp_responder;
    Forwarder() forwarder;
    DropSimulator() ingress_drop_sim;
    RDMAReceiver() rdma_receiver;
    RDMAReceiverDecide() rdma_receiver_decide;
    BitmapChecker() bitmap_checker;
    WorkersCounter() workers_counter;
    Exponents() exponents;
    Processor() processor00;
    Processor() processor01;
    Processor() processor02;
    Processor() processor03;
    Processor() processor04;
    Processor() processor05;
    Processor() processor06;
    Processor() processor07;
    Processor() processor08;
    Processor() processor09;
    Processor() processor10;
    Processor() processor11;
    Processor() processor12;
    Processor() processor13;
    Processor() processor14;
    Processor() processor15;
    Processor() processor16;
    Processor() processor17;
    Processor() processor18;
    Processor() processor19;
    Processor() processor20;
    Processor() processor21;
    Processor() processor22;
    Processor() processor23;
    Processor() processor24;
    Processor() processor25;
    Processor() processor26;
    Processor() processor27;
    Processor() processor28;
    Processor() processor29;
    Processor() processor30;
    Processor() processor31;
    NextStep() next_step;

    // Requests to the switch IP that are not SwitchML RoCEv2 (and not ARP
    // or ICMP echo): dropped, counted by switchmodel.DropReason code.
    Counter<bit<64>, bit<8>>(NUM_DROP_CODES, CounterType_t.PACKETS) not_switchml;

    pass_t pass;

    // Every packet that reaches egress carries bridged_md_h (EgressParser
    // extracts it unconditionally); for one that is not a result every
    // field is set, so nothing uninitialised is emitted.
    action bridge_not_result() {
        hdr.bridged.setValid();
        hdr.bridged.pass = PASS_REQUEST;
        hdr.bridged.decision = DECISION_DROP;
        hdr.bridged.first_packet = 0;
        hdr.bridged.last_packet = 0;
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
        hdr.bridged.worker_id = 0;
        hdr.bridged._pad1 = 0;
        hdr.bridged.qp_index = 0;
        hdr.bridged.mgid = 0;
        hdr.bridged.pool_index = 0;
        hdr.bridged.msg_id = 0;
        hdr.bridged.e0 = 0;
        hdr.bridged.e1 = 0;
        hdr.bridged._pad2 = 0;
        hdr.bridged.ingress_port = ig_intr_md.ingress_port;
    }

    action not_for_switchml() {
        not_switchml.count((bit<8>) DROP_OPCODE);
        ig_dprsr_md.drop_ctl = 1;
    }

    // What NextStep leaves (its gate: a bridged pass, or a BTH for the
    // switch IP): an ARP / echo reply or a forwarded packet carries the
    // bridged header to egress; a packet for the switch IP without a BTH
    // is dropped (not_switchml[DROP_OPCODE]). One table, after NextStep
    // (which may set the bridged header valid) and the forwarder.
    table dispatch {
        key = {
            hdr.bridged.isValid() : exact;
            hdr.ib_bth.isValid()  : ternary;
            ig_md.responded       : ternary;
            ig_md.forward         : ternary;
        }
        actions = { bridge_not_result; not_for_switchml; @defaultonly NoAction; }
        const default_action = NoAction;
        size = 4;
        const entries = {
            (false, _, true, _)      : bridge_not_result();
            (false, _, false, true)  : bridge_not_result();
            (false, false, false, false) : not_for_switchml();
        }
    }

    apply {
        TESTGEN_ASSUME_INGRESS
        if (hdr.bridged.isValid()) {
#ifdef CHUNKED
            // PASS_CONSUME / PASS_HARVEST / PASS_HARVEST_INSERT: only the
            // Processors (this pipe's chunk) and NextStep (where next) run;
            // the Processors do what pass 0's BitmapChecker decided.
            pass = hdr.bridged.pass;
            ig_md.switchml_md.pool_index = (bit<32>) hdr.bridged.pool_index;
            // Constants under gates: a move from the bridged bit into the
            // 32-bit field (its own container, bitmap_checker.p4) cannot be
            // allocated.
            if (hdr.bridged.retransmission == 1) {
                ig_md.switchml_md.retransmission = 1; // read only
            }
            if (hdr.bridged.first_contribution == 0) {
                ig_md.switchml_md.bitmap_before = 1; // not the first: add
            }
#else
            // PASS_HARVEST: only the Processors (read first halves) and
            // NextStep (multicast / unicast) run.
            pass = PASS_HARVEST;
            ig_md.switchml_md.pool_index = (bit<32>) hdr.bridged.pool_index;
#endif
        } else {
            pass = PASS_REQUEST;
            // The SwitchML path starts at once, beside the address checks
            // below rather than after them (each check is a stage the
            // register chain cannot spare, docs/p4.md "Stages"): receive_qp
            // matches the destination IP against the switch IP, so a RoCE
            // packet for anyone else misses it (DROP_UNKNOWN_QP) and touches
            // no state, and is then forwarded below; a packet without a BTH
            // never reaches the receiver.
            if (hdr.ib_bth.isValid()) {
                ingress_drop_sim.apply(ig_md.sim_drop);
                rdma_receiver.apply(hdr, ig_md);
                // I2: accepted() (rdma_receiver.p4) as nested tests, each a
                // gateway of its own; the reason of a drop is written beside
                // them. The simulated loss is decided two stages after the
                // random number is drawn, so it takes the packet after the
                // receiver (docs/p4.md "Loss simulation"); the reason stays
                // the receiver's when it dropped the packet itself.
                if (ig_md.switchml_md.drop_reason == DROP_NONE) {
                    if (ig_md.rx.verdict == PRED_LO_HI) {
                        if (ig_md.rx.stale != PRED_LO_HI) {
                            if (ig_md.sim_drop == 0) {
                                ig_md.accepted = true;
                                bitmap_checker.apply(ig_md);
                                workers_counter.apply(ig_md);
                                exponents.apply(hdr, ig_md);
                            }
                        }
                    }
                }
            } else {
                ig_md.switchml_md.drop_reason = DROP_OPCODE; // no slot for it
            }
            // ARP and ICMP echo after it: an echo reply rewrites the IPv4
            // addresses receive_qp matches on, so it must not come first
            // (the packets are disjoint, the compiler cannot tell).
            arp_icmp_responder.apply(hdr, ig_md, ig_intr_md, ig_tm_md);
            TESTGEN_ASSUME_FOR_SWITCH
            // Not for the switch: two tests (a gateway takes 4 bytes).
            if (hdr.ipv4.isValid()) {
                if (hdr.ipv4.dst_addr == ig_md.switch_ip) {
                    ig_md.forward = false;
                }
            }
        }
        rdma_receiver_decide.apply(ig_md);
        // NextStep (a bridged pass, or RoCE to the switch IP), then the
        // dispatch of everything else, then the Processors: each a table
        // with at most one gate of its own, no nested tests. On Tofino 1
        // the tables of an apply block run in one next-table chain, and a
        // nested test is a subtree the chain enters and leaves once: the
        // 32 Processors (stages 4-11) would all have to come before it or
        // after it. Flat, bf-p4c interleaves NextStep and the dispatch
        // with the Processors (docs/p4.md "Stages").
        next_step.apply(hdr, ig_md, ig_intr_md, ig_dprsr_md, ig_tm_md);
        // Not for the switch IP and not answered: forwarded. The test
        // reads the bridged header's validity before dispatch sets it.
        if (!hdr.bridged.isValid() && ig_md.forward && !ig_md.responded) {
            forwarder.apply(hdr, ig_dprsr_md, ig_tm_md);
        }
        dispatch.apply();
        // The Processors run on accepted (set beside the BitmapChecker, or
        // by the parser for a bridged pass), each gated by itself, with the
        // slot, retransmission and bitmap_before as their only inputs (a
        // struct argument is copied whole, drop_reason included, which
        // would order them after NextStep's write of it).
        processor00.apply(hdr.payload.v00, hdr.payload.v01, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor01.apply(hdr.payload.v02, hdr.payload.v03, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor02.apply(hdr.payload.v04, hdr.payload.v05, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor03.apply(hdr.payload.v06, hdr.payload.v07, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor04.apply(hdr.payload.v08, hdr.payload.v09, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor05.apply(hdr.payload.v10, hdr.payload.v11, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor06.apply(hdr.payload.v12, hdr.payload.v13, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor07.apply(hdr.payload.v14, hdr.payload.v15, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor08.apply(hdr.payload.v16, hdr.payload.v17, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor09.apply(hdr.payload.v18, hdr.payload.v19, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor10.apply(hdr.payload.v20, hdr.payload.v21, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor11.apply(hdr.payload.v22, hdr.payload.v23, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor12.apply(hdr.payload.v24, hdr.payload.v25, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor13.apply(hdr.payload.v26, hdr.payload.v27, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor14.apply(hdr.payload.v28, hdr.payload.v29, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor15.apply(hdr.payload.v30, hdr.payload.v31, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor16.apply(hdr.payload.v32, hdr.payload.v33, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor17.apply(hdr.payload.v34, hdr.payload.v35, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor18.apply(hdr.payload.v36, hdr.payload.v37, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor19.apply(hdr.payload.v38, hdr.payload.v39, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor20.apply(hdr.payload.v40, hdr.payload.v41, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor21.apply(hdr.payload.v42, hdr.payload.v43, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor22.apply(hdr.payload.v44, hdr.payload.v45, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor23.apply(hdr.payload.v46, hdr.payload.v47, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor24.apply(hdr.payload.v48, hdr.payload.v49, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor25.apply(hdr.payload.v50, hdr.payload.v51, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor26.apply(hdr.payload.v52, hdr.payload.v53, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor27.apply(hdr.payload.v54, hdr.payload.v55, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor28.apply(hdr.payload.v56, hdr.payload.v57, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor29.apply(hdr.payload.v58, hdr.payload.v59, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor30.apply(hdr.payload.v60, hdr.payload.v61, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
        processor31.apply(hdr.payload.v62, hdr.payload.v63, ig_md.switchml_md.pool_index[15:0],
            ig_md.switchml_md.retransmission, ig_md.switchml_md.bitmap_before, pass, ig_md.accepted);
    }
}

control Egress(
    inout header_t hdr,
    inout egress_metadata_t eg_md,
    in egress_intrinsic_metadata_t eg_intr_md,
    in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
    inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
    inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {

    DropSimulator() egress_drop_sim;
    RDMASender() rdma_sender;

    apply {
        // DECISION_BROADCAST (2) or DECISION_UNICAST (3): one bit, one
        // gateway test.
        if (hdr.bridged.decision[1:1] == 1) {
            // The sender first, as the model (switchmodel.RDMASender.Encode
            // runs for every destination, also for a result then lost): a
            // simulated loss uses its PSN and moves tx_pos, like a loss on
            // the wire.
            rdma_sender.apply(hdr, eg_md, eg_intr_md, eg_dprsr_md);
            egress_drop_sim.apply(eg_md.sim_drop);
            if (eg_md.sim_drop != 0) {
                eg_dprsr_md.drop_ctl = 1;
            }
        }
        hdr.bridged.setInvalid();
    }
}

Pipeline(
    IngressParser(),
    Ingress(),
    IngressDeparser(),
    EgressParser(),
    Egress(),
    EgressDeparser()) pipe;

Switch(pipe) main;
