/*
 * parsers.p4 — ingress/egress parsers and deparsers (TNA).
 *
 * Ingress: [bridged_md_h on the recirculation port] Ethernet → ARP |
 * IPv4 (IHL 5) → ICMP | UDP dst 4791 → BTH → RETH / ImmDt by opcode →
 * 256 B payload. Anything else stops early and is forwarded by
 * destination MAC (Forwarder). The ICRC stays in the unparsed tail.
 * Go twin: rdma.Packet.Parse.
 *
 * Egress: bridged_md_h, Ethernet, and for a result (Broadcast/Unicast)
 * IPv4 / UDP / BTH / [RETH] / [ImmDt] — never the payload. The result
 * values were written into the payload in ingress (Processor, harvest
 * pass) and RDMASender changes only headers, so the payload rides in the
 * unparsed tail and the deparser puts it back behind the headers. This is
 * what keeps the egress parser within Tofino 1's parse-depth window, as
 * p4app-switchML's egress parser does (it extracts only its bridged
 * metadata and rebuilds every header in egress).
 *
 * Parse depth (bf-p4c: the bytes extracted or skipped along each path from
 * start to accept, intrinsic metadata included; Tofino 1 limits the EGRESS
 * parser to 65..160 B — shorter paths are padded by the compiler — and
 * sets no maximum for ingress). Every path, checked by
 * aggregation/control/p4rt TestParserDepth against these declarations:
 *
 *   parser          path (states after start)                                                         B
 *   IngressParser   parse_ethernet                                                                   30
 *   IngressParser   parse_ethernet parse_arp                                                         58
 *   IngressParser   parse_ethernet parse_ipv4                                                        50
 *   IngressParser   parse_ethernet parse_ipv4 parse_icmp                                             54
 *   IngressParser   parse_ethernet parse_ipv4 parse_udp                                              58
 *   IngressParser   parse_ethernet parse_ipv4 parse_udp parse_bth                                    70
 *   IngressParser   parse_ethernet parse_ipv4 parse_udp parse_bth parse_reth parse_payload          342
 *   IngressParser   parse_ethernet parse_ipv4 parse_udp parse_bth parse_reth_imm parse_payload      346
 *   IngressParser   parse_ethernet parse_ipv4 parse_udp parse_bth parse_imm parse_payload           330
 *   IngressParser   parse_ethernet parse_ipv4 parse_udp parse_bth parse_payload                     326
 *   IngressParser   parse_bridged parse_ethernet                                                     50
 *   IngressParser   parse_bridged parse_ethernet parse_arp                                           78
 *   IngressParser   parse_bridged parse_ethernet parse_ipv4                                          70
 *   IngressParser   parse_bridged parse_ethernet parse_ipv4 parse_icmp                               74
 *   IngressParser   parse_bridged parse_ethernet parse_ipv4 parse_udp                                78
 *   IngressParser   parse_bridged parse_ethernet parse_ipv4 parse_udp parse_bth                      90
 *   IngressParser   parse_bridged parse_ethernet parse_ipv4 parse_udp parse_bth parse_reth parse_payload  362
 *   IngressParser   parse_bridged parse_ethernet parse_ipv4 parse_udp parse_bth parse_reth_imm parse_payload  366
 *   IngressParser   parse_bridged parse_ethernet parse_ipv4 parse_udp parse_bth parse_imm parse_payload  350
 *   IngressParser   parse_bridged parse_ethernet parse_ipv4 parse_udp parse_bth parse_payload       346
 *   EgressParser    (start only: not a result)                                                       61
 *   EgressParser    parse_broadcast parse_result                                                    101
 *   EgressParser    parse_unicast parse_result                                                      101
 *   EgressParser    parse_broadcast parse_result parse_result_reth                                  117
 *   EgressParser    parse_unicast parse_result parse_result_reth                                    117
 *   EgressParser    parse_broadcast parse_result parse_result_reth_imm                              121
 *   EgressParser    parse_unicast parse_result parse_result_reth_imm                                121
 *   EgressParser    parse_broadcast parse_result parse_result_imm                                   105
 *   EgressParser    parse_unicast parse_result parse_result_imm                                     105
 * PAYLOAD_1024 profile (same egress parser; the ingress parser takes a
 * bridged pass from pipe 0's recirculation port and every port of pipes
 * 1–3, parses the request's headers again and then the next 256 B chunk
 * window, or inserts an empty one for PASS_HARVEST_INSERT; the payload is
 * never more than one 256 B window). Same check:
 *
 *   prof parser         path (states after start)                                                   B
 *   1024 IngressParser  parse_ethernet                                                               30
 *   1024 IngressParser  parse_ethernet parse_arp                                                     58
 *   1024 IngressParser  parse_ethernet parse_ipv4                                                    50
 *   1024 IngressParser  parse_ethernet parse_ipv4 parse_icmp                                         54
 *   1024 IngressParser  parse_ethernet parse_ipv4 parse_udp                                          58
 *   1024 IngressParser  parse_ethernet parse_ipv4 parse_udp parse_bth                                70
 *   1024 IngressParser  parse_ethernet parse_ipv4 parse_udp parse_bth parse_reth parse_payload      342
 *   1024 IngressParser  parse_ethernet parse_ipv4 parse_udp parse_bth parse_reth_imm parse_payload  346
 *   1024 IngressParser  parse_ethernet parse_ipv4 parse_udp parse_bth parse_imm parse_payload       330
 *   1024 IngressParser  parse_ethernet parse_ipv4 parse_udp parse_bth parse_payload                 326
 *   1024 IngressParser  parse_bridged                                                                90
 *   1024 IngressParser  parse_bridged parse_bridged_reth parse_chunk parse_payload                  362
 *   1024 IngressParser  parse_bridged parse_bridged_reth parse_chunk insert_chunk                   106
 *   1024 IngressParser  parse_bridged parse_bridged_reth_imm parse_chunk parse_payload              366
 *   1024 IngressParser  parse_bridged parse_bridged_reth_imm parse_chunk insert_chunk               110
 *   1024 IngressParser  parse_bridged parse_bridged_imm parse_chunk parse_payload                   350
 *   1024 IngressParser  parse_bridged parse_bridged_imm parse_chunk insert_chunk                     94
 *   1024 IngressParser  parse_bridged parse_chunk parse_payload                                     346
 *   1024 IngressParser  parse_bridged parse_chunk insert_chunk                                       90
 *   1024 EgressParser   (start only: not a result)                                                   61
 *   1024 EgressParser   parse_broadcast parse_result                                                101
 *   1024 EgressParser   parse_unicast parse_result                                                  101
 *   1024 EgressParser   parse_broadcast parse_result parse_result_reth                              117
 *   1024 EgressParser   parse_unicast parse_result parse_result_reth                                117
 *   1024 EgressParser   parse_broadcast parse_result parse_result_reth_imm                          121
 *   1024 EgressParser   parse_unicast parse_result parse_result_reth_imm                            121
 *   1024 EgressParser   parse_broadcast parse_result parse_result_imm                               105
 *   1024 EgressParser   parse_unicast parse_result parse_result_imm                                 105
 * WIRE_16 profile (the 1024 B profile's parsers with a 128 B chunk window,
 * bridged passes from pipe 0's recirculation port and pipe 1 only). Same
 * check:
 *
 *   prof parser         path (states after start)                                                   B
 *   w16  IngressParser  parse_ethernet                                                               30
 *   w16  IngressParser  parse_ethernet parse_arp                                                     58
 *   w16  IngressParser  parse_ethernet parse_ipv4                                                    50
 *   w16  IngressParser  parse_ethernet parse_ipv4 parse_icmp                                         54
 *   w16  IngressParser  parse_ethernet parse_ipv4 parse_udp                                          58
 *   w16  IngressParser  parse_ethernet parse_ipv4 parse_udp parse_bth                                70
 *   w16  IngressParser  parse_ethernet parse_ipv4 parse_udp parse_bth parse_reth parse_payload      214
 *   w16  IngressParser  parse_ethernet parse_ipv4 parse_udp parse_bth parse_reth_imm parse_payload  218
 *   w16  IngressParser  parse_ethernet parse_ipv4 parse_udp parse_bth parse_imm parse_payload       202
 *   w16  IngressParser  parse_ethernet parse_ipv4 parse_udp parse_bth parse_payload                 198
 *   w16  IngressParser  parse_bridged                                                                90
 *   w16  IngressParser  parse_bridged parse_bridged_reth parse_chunk parse_payload                  234
 *   w16  IngressParser  parse_bridged parse_bridged_reth parse_chunk insert_chunk                   106
 *   w16  IngressParser  parse_bridged parse_bridged_reth_imm parse_chunk parse_payload              238
 *   w16  IngressParser  parse_bridged parse_bridged_reth_imm parse_chunk insert_chunk               110
 *   w16  IngressParser  parse_bridged parse_bridged_imm parse_chunk parse_payload                   222
 *   w16  IngressParser  parse_bridged parse_bridged_imm parse_chunk insert_chunk                     94
 *   w16  IngressParser  parse_bridged parse_chunk parse_payload                                     218
 *   w16  IngressParser  parse_bridged parse_chunk insert_chunk                                       90
 *   w16  EgressParser   (start only: not a result)                                                   61
 *   w16  EgressParser   parse_broadcast parse_result                                                101
 *   w16  EgressParser   parse_unicast parse_result                                                  101
 *   w16  EgressParser   parse_broadcast parse_result parse_result_reth                              117
 *   w16  EgressParser   parse_unicast parse_result parse_result_reth                                117
 *   w16  EgressParser   parse_broadcast parse_result parse_result_reth_imm                          121
 *   w16  EgressParser   parse_unicast parse_result parse_result_reth_imm                            121
 *   w16  EgressParser   parse_broadcast parse_result parse_result_imm                               105
 *   w16  EgressParser   parse_unicast parse_result parse_result_imm                                 105
 * (ingress_intrinsic_metadata_t 8 B + port metadata 8 B; egress_intrinsic_
 * metadata_t 27 B; bridged_md_h 20 B; Ethernet 14, ARP 28, IPv4 20, ICMP 4,
 * UDP 8, BTH 12, RETH 16, ImmDt 4, payload 256, WIRE_16's window 128.)
 */
#ifndef _PARSERS_P4_
#define _PARSERS_P4_

#include "types.p4"
#include "headers.p4"

parser IngressParser(
    packet_in pkt,
    out header_t hdr,
    out ingress_metadata_t ig_md,
    out ingress_intrinsic_metadata_t ig_intr_md) {

    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        // Every metadata field gets a value here, so no control reads an
        // uninitialised one (the controls overwrite what they own).
        ig_md.switchml_md.drop_reason = DROP_NONE;
        ig_md.switchml_md.worker_id = 0;
        ig_md.switchml_md.worker_bit = 0;
        ig_md.switchml_md.num_workers = 0;
        ig_md.switchml_md.qp_index = 0;
        ig_md.switchml_md.qp_state_index = 0;
        ig_md.switchml_md.mgid = 0;
        ig_md.switchml_md.pool_index = 0;
        ig_md.switchml_md.first_packet = false;
        ig_md.switchml_md.last_packet = false;
        ig_md.switchml_md.bitmap_before = 0;
        ig_md.switchml_md.retransmission = 0;
        ig_md.switchml_md.missing = 0;
        ig_md.switchml_md.has_imm = false;
        ig_md.switchml_md.result_msg_id = 0;
        ig_md.switchml_md.result_e0 = EXPONENT_UNSET;
        ig_md.switchml_md.result_e1 = EXPONENT_UNSET;
        ig_md.switch_mac = 0;
        ig_md.switch_ip = 0;
        ig_md.sim_drop = 0;
        ig_md.responded = false;
        ig_md.forward = true;          // until the address tests clear it
        ig_md.accepted = false;
        ig_md.rx.expected_len = 0;
        ig_md.rx.first_room = 0;
        ig_md.rx.below = 0;
        ig_md.rx.qp_room = 1;
        ig_md.rx.verdict = 0;
        ig_md.rx.stale = 0;
#ifdef P4TESTGEN
        ig_md.testgen_bridged = {0, 0, 0};
        ig_md.testgen_pool_first = 0;
        ig_md.testgen_pool_end = 0;
#endif
#ifdef CHUNKED
        ig_md.loopback_key = 0;
        // Bridged passes arrive on pipe 0's recirculation port and on every
        // port of pipes 1–3 (all in loopback in the 1024 B profile; the
        // 16-bit profile's two chunks use pipe 1 only).
        transition select(ig_intr_md.ingress_port) {
            RECIRC_PORT_PIPE0 : parse_bridged;
            0x080 &&& 0x180   : parse_bridged;
#ifndef WIRE_16
            0x100 &&& 0x180   : parse_bridged;
            0x180 &&& 0x180   : parse_bridged;
#endif
            default           : parse_ethernet;
        }
    }
    // A bridged pass of the 1024 B profile: always a SwitchML request that
    // pass 0 accepted, so only its own opcode decides the headers; then
    // the chunk window is parsed (PASS_CONSUME, PASS_HARVEST) or inserted
    // empty (PASS_HARVEST_INSERT).
    state parse_bridged {
        pkt.extract(hdr.bridged);
#ifdef P4TESTGEN
        ig_md.testgen_bridged.pass = hdr.bridged.pass;
        ig_md.testgen_bridged.decision = hdr.bridged.decision;
#ifdef CHUNKED
        ig_md.testgen_bridged.chunk = hdr.bridged.chunk;
#endif
#endif
        // A bridged pass reads or adds what pass 0 accepted: the
        // Processors run (Ingress), RDMAReceiverDecide leaves it alone.
        ig_md.rx.verdict = PRED_LO_HI;
        ig_md.accepted = true;
        pkt.extract(hdr.ethernet);
        pkt.extract(hdr.ipv4);
        pkt.extract(hdr.udp);
        pkt.extract(hdr.ib_bth);
        transition select(hdr.ib_bth.opcode) {
            UC_RDMA_WRITE_FIRST               : parse_bridged_reth;
            UC_RDMA_WRITE_ONLY                : parse_bridged_reth;
            UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE : parse_bridged_reth_imm;
            UC_RDMA_WRITE_LAST_WITH_IMMEDIATE : parse_bridged_imm;
            UC_RDMA_WRITE_MIDDLE              : parse_chunk;
            UC_RDMA_WRITE_LAST                : parse_chunk;
            default                           : accept;
        }
    }
    state parse_bridged_reth {
        pkt.extract(hdr.ib_reth);
        transition parse_chunk;
    }
    state parse_bridged_reth_imm {
        pkt.extract(hdr.ib_reth);
        pkt.extract(hdr.ib_immediate);
        transition parse_chunk;
    }
    state parse_bridged_imm {
        pkt.extract(hdr.ib_immediate);
        transition parse_chunk;
    }
    state parse_chunk {
        transition select(hdr.bridged.pass) {
            PASS_HARVEST_INSERT : insert_chunk;
            default             : parse_payload;
        }
    }
    // The chunk being rebuilt goes in front of the ones already rebuilt
    // (they ride in the unparsed tail). Its lanes are written in ingress
    // before the packet leaves: second halves on this pass, first halves
    // on the PASS_HARVEST that follows.
    state insert_chunk {
        hdr.payload.setValid();
        transition accept;
    }
#else
        transition select(ig_intr_md.ingress_port[6:0]) {
            RECIRC_PORT_LOW : parse_bridged;  // harvest pass
            default         : parse_ethernet;
        }
    }
    state parse_bridged {
        pkt.extract(hdr.bridged);
#ifdef P4TESTGEN
        ig_md.testgen_bridged.pass = hdr.bridged.pass;
        ig_md.testgen_bridged.decision = hdr.bridged.decision;
#ifdef CHUNKED
        ig_md.testgen_bridged.chunk = hdr.bridged.chunk;
#endif
#endif
        // The harvest pass reads what pass 0 accepted: the Processors
        // run (Ingress), RDMAReceiverDecide leaves it alone.
        ig_md.rx.verdict = PRED_LO_HI;
        ig_md.accepted = true;
        transition parse_ethernet;
    }
#endif
    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_ARP  : parse_arp;
            ETHERTYPE_IPV4 : parse_ipv4;
            default        : accept;
        }
    }
    state parse_arp {
        pkt.extract(hdr.arp);
        transition accept;
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        // IHL 5 only (the wire contract); options and fragments are
        // forwarded, never aggregated.
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (5, 0, IP_PROTOCOL_ICMP) : parse_icmp;
            (5, 0, IP_PROTOCOL_UDP)  : parse_udp;
            default                  : accept;
        }
    }
    state parse_icmp {
        pkt.extract(hdr.icmp);
        transition accept;
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            ROCE_V2_UDP_PORT : parse_bth;
            default          : accept;
        }
    }
    // The opcode picks the extension headers; exactly the UC RDMA WRITE
    // opcodes reach the payload (rdma.Opcode HasRETH / HasImm).
    state parse_bth {
        pkt.extract(hdr.ib_bth);
        transition select(hdr.ib_bth.opcode) {
            UC_RDMA_WRITE_FIRST               : parse_reth;
            UC_RDMA_WRITE_ONLY                : parse_reth;
            UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE : parse_reth_imm;
            UC_RDMA_WRITE_MIDDLE              : parse_payload;
            UC_RDMA_WRITE_LAST                : parse_payload;
            UC_RDMA_WRITE_LAST_WITH_IMMEDIATE : parse_imm;
            default                           : accept; // RDMAReceiver drops: DROP_OPCODE
        }
    }
    state parse_reth {
        pkt.extract(hdr.ib_reth);
        transition parse_payload;
    }
    state parse_reth_imm {
        pkt.extract(hdr.ib_reth);
        pkt.extract(hdr.ib_immediate);
        transition parse_payload;
    }
    state parse_imm {
        pkt.extract(hdr.ib_immediate);
        transition parse_payload;
    }
    state parse_payload {
        pkt.extract(hdr.payload);
        transition accept;
    }
}

control IngressDeparser(
    packet_out pkt,
    inout header_t hdr,
    in ingress_metadata_t ig_md,
    in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {

    Checksum() ipv4_checksum;

    apply {
        // ARPICMPResponder swaps addresses of echo replies.
        if (hdr.ipv4.isValid()) {
            hdr.ipv4.hdr_checksum = ipv4_checksum.update({
                hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv,
                hdr.ipv4.total_len, hdr.ipv4.identification,
                hdr.ipv4.flags, hdr.ipv4.frag_offset,
                hdr.ipv4.ttl, hdr.ipv4.protocol,
                hdr.ipv4.src_addr, hdr.ipv4.dst_addr });
        }
        pkt.emit(hdr);
    }
}

parser EgressParser(
    packet_in pkt,
    out header_t hdr,
    out egress_metadata_t eg_md,
    out egress_intrinsic_metadata_t eg_intr_md) {

    state start {
        pkt.extract(eg_intr_md);
        eg_md.dest_rank = 0;
        eg_md.psn_index = 0;
        eg_md.rkey = 0;
        eg_md.sim_drop = 0;
        eg_md.worker_known = 0;
        eg_md.qp_known = 0;
        eg_md.tx_next = TX_CLOSED;     // RDMASender: after a LAST/ONLY
        // Ingress bridges bridged_md_h on every packet that reaches egress
        // (the usual TNA pattern); only SwitchML results are parsed deeper.
        pkt.extract(hdr.bridged);
        pkt.extract(hdr.ethernet);
        transition select(hdr.bridged.decision) {
            DECISION_BROADCAST : parse_broadcast;
            DECISION_UNICAST   : parse_unicast;
            default            : accept;
        }
    }
    // The destination rank (RDMASender's worker / worker_qp key) is set
    // here, not in a stage: the PRE's replica id for a Broadcast, the
    // sender for a Unicast. Nothing is extracted.
    state parse_broadcast {
        eg_md.dest_rank = eg_intr_md.egress_rid[4:0];
        transition parse_result;
    }
    state parse_unicast {
        eg_md.dest_rank = hdr.bridged.worker_id;
        transition parse_result;
    }
    // A result: the request's headers up to the payload, which stays
    // unparsed (RDMASender rewrites headers only).
    state parse_result {
        pkt.extract(hdr.ipv4);
        pkt.extract(hdr.udp);
        pkt.extract(hdr.ib_bth);
        transition select(hdr.ib_bth.opcode) {
            UC_RDMA_WRITE_FIRST               : parse_result_reth;
            UC_RDMA_WRITE_ONLY                : parse_result_reth;
            UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE : parse_result_reth_imm;
            UC_RDMA_WRITE_LAST_WITH_IMMEDIATE : parse_result_imm;
            UC_RDMA_WRITE_MIDDLE              : accept;
            UC_RDMA_WRITE_LAST                : accept;
            default                           : accept;
        }
    }
    state parse_result_reth {
        pkt.extract(hdr.ib_reth);
        transition accept;
    }
    state parse_result_reth_imm {
        pkt.extract(hdr.ib_reth);
        pkt.extract(hdr.ib_immediate);
        transition accept;
    }
    state parse_result_imm {
        pkt.extract(hdr.ib_immediate);
        transition accept;
    }
}

control EgressDeparser(
    packet_out pkt,
    inout header_t hdr,
    in egress_metadata_t eg_md,
    in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {

    Checksum() ipv4_checksum;

    apply {
        // RDMASender rewrote addresses, TTL and lengths. UDP checksum is
        // 0 (allowed for RoCEv2 over IPv4); the ICRC is stale (docs/p4.md).
        if (hdr.ipv4.isValid()) {
            hdr.ipv4.hdr_checksum = ipv4_checksum.update({
                hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv,
                hdr.ipv4.total_len, hdr.ipv4.identification,
                hdr.ipv4.flags, hdr.ipv4.frag_offset,
                hdr.ipv4.ttl, hdr.ipv4.protocol,
                hdr.ipv4.src_addr, hdr.ipv4.dst_addr });
        }
        pkt.emit(hdr);
    }
}

#endif /* _PARSERS_P4_ */
