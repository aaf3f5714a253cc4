/*
 * parsers.p4 — ingress/egress parsers and deparsers (TNA).
 *
 * Ingress: [bridged_md_h on the recirculation port] Ethernet → ARP |
 * IPv4 (IHL 5) → ICMP | UDP dst 4791 → BTH → RETH / ImmDt by opcode →
 * 256 B payload. Anything else stops early and is forwarded by
 * destination MAC (Forwarder). The ICRC stays in the unparsed tail.
 * Go twin: rdma.Packet.Parse.
 */
#ifndef _PARSERS_P4_
#define _PARSERS_P4_

#include "types.p4"
#include "headers.p4"

// The RoCEv2 part, shared by both gresses: opcode picks the extension
// headers, exactly the UC RDMA WRITE opcodes reach the payload.
parser RoCEParser(packet_in pkt, inout header_t hdr) {
    state start {
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
        transition parse_imm;
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

parser IngressParser(
    packet_in pkt,
    out header_t hdr,
    out ingress_metadata_t ig_md,
    out ingress_intrinsic_metadata_t ig_intr_md) {

    RoCEParser() roce_parser;

    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        // TNA zero-initialises metadata; fields are set by the controls.
        ig_md.switchml_md.is_switchml = false;
        ig_md.switchml_md.drop_reason = DROP_NONE;
        ig_md.sim_drop = false;
        transition select(ig_intr_md.ingress_port[6:0]) {
            RECIRC_PORT_LOW : parse_bridged;  // harvest pass
            default         : parse_ethernet;
        }
    }
    state parse_bridged {
        pkt.extract(hdr.bridged);
        transition parse_ethernet;
    }
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
            ROCE_V2_UDP_PORT : parse_roce;
            default          : accept;
        }
    }
    state parse_roce {
        roce_parser.apply(pkt, hdr);
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

    RoCEParser() roce_parser;

    state start {
        pkt.extract(eg_intr_md);
        eg_md.dest_rank = 0;
        eg_md.psn_index = 0;
        eg_md.rkey = 0;
        eg_md.sim_drop = false;
        // Ingress bridges bridged_md_h on every packet that reaches egress
        // (the usual TNA pattern); only SwitchML results are parsed deeper.
        pkt.extract(hdr.bridged);
        pkt.extract(hdr.ethernet);
        transition select(hdr.bridged.decision) {
            DECISION_BROADCAST : parse_result;
            DECISION_UNICAST   : parse_result;
            default            : accept;
        }
    }
    state parse_result {
        pkt.extract(hdr.ipv4);
        pkt.extract(hdr.udp);
        roce_parser.apply(pkt, hdr);
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
