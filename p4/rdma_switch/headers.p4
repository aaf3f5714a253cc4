/*
 * headers.p4 — packet headers of the rdma_switch program.
 *
 * Ethernet / IPv4 (IHL 5) / UDP 4791 / IB BTH / [RETH] / [ImmDt] / 256 B
 * payload / ICRC. The ICRC is never parsed: it rides after the payload,
 * untouched, and is therefore stale in every result (docs/p4.md "ICRC").
 * Go views of the same formats: rdma.BTH, rdma.RETH, rdma.ImmDt.
 */
#ifndef _HEADERS_P4_
#define _HEADERS_P4_

#include "types.p4"

header ethernet_h {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_ARP  = 0x0806;

header arp_h {
    bit<16>     hw_type;
    bit<16>     proto_type;
    bit<8>      hw_addr_len;
    bit<8>      proto_addr_len;
    bit<16>     opcode;
    mac_addr_t  sender_hw_addr;
    ipv4_addr_t sender_proto_addr;
    mac_addr_t  target_hw_addr;
    ipv4_addr_t target_proto_addr;
}

const bit<16> ARP_REQUEST = 1;
const bit<16> ARP_REPLY   = 2;

header ipv4_h {
    bit<4>      version;
    bit<4>      ihl;
    bit<8>      diffserv;
    bit<16>     total_len;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     frag_offset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdr_checksum;
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
}

const bit<8> IP_PROTOCOL_ICMP = 1;
const bit<8> IP_PROTOCOL_UDP  = 17;

header icmp_h {
    bit<8>  msg_type;
    bit<8>  code;
    bit<16> checksum;
}

const bit<8> ICMP_ECHO_REQUEST = 8;
const bit<8> ICMP_ECHO_REPLY   = 0;

header udp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

// InfiniBand Base Transport Header (rdma.BTH, 12 bytes). dst_qp is
// overloaded towards the switch: wire.P4AppQPN = 0x800000 | rank<<16 | qp
// (5 rank bits, 9 QP bits) — RDMAReceiver takes the QP index from [8:0].
header ib_bth_h {
    bit<8>  opcode;
    bit<1>  se;
    bit<1>  migration_req;
    bit<2>  pad_count;
    bit<4>  transport_version;
    bit<16> partition_key;
    bit<1>  f_res1;   // FECN
    bit<1>  b_res1;   // BECN
    bit<6>  reserved;
    qpn_t   dst_qp;
    bit<1>  ack_req;
    bit<7>  reserved2;
    psn_t   psn;
}

// UC RDMA WRITE opcodes (rdma.Opcode).
const bit<8> UC_RDMA_WRITE_FIRST               = 0x26;
const bit<8> UC_RDMA_WRITE_MIDDLE              = 0x27;
const bit<8> UC_RDMA_WRITE_LAST                = 0x28;
const bit<8> UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29;
const bit<8> UC_RDMA_WRITE_ONLY                = 0x2A;
const bit<8> UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2B;

// RDMA Extended Transport Header (rdma.RETH, 16 bytes). On a request r_key
// is overloaded: it is the message's first wire.PoolIndex (slot<<1 | set),
// not a memory key. On a result it is the worker's real rkey, and addr/len
// are the request's, echoed (every worker registers its buffer at the same
// IOVA, so one va is valid everywhere).
header ib_reth_h {
    bit<64> addr;
    rkey_t  r_key;
    bit<32> len;
}

// Immediate data (rdma.ImmDt, 4 bytes), overloaded as wire.Imm:
// [31:16] msg id (echoed), [15:8] e0, [7:0] e1 (int8 block exponents; the
// switch returns max over workers, switchmodel.Exponents).
header ib_immediate_h {
    msg_id_t   msg_id;
    exponent_t e0;
    exponent_t e1;
}

// 256 B payload: 64 big-endian int32 lanes (in the 1024 B profile, the
// window of one 256 B chunk: lane i is value 64·chunk + i; in the 16-bit
// profile value_t is bit<16> and the header is the 128 B window of one
// chunk, 64 int16 lanes: lane i is value 64·chunk + i). Processor instance k owns lanes
// 2k (first) and 2k+1 (second) — the pair switchmodel.Processor keeps in
// one 64-bit word.
header payload_h {
    value_t v00;
    value_t v01;
    value_t v02;
    value_t v03;
    value_t v04;
    value_t v05;
    value_t v06;
    value_t v07;
    value_t v08;
    value_t v09;
    value_t v10;
    value_t v11;
    value_t v12;
    value_t v13;
    value_t v14;
    value_t v15;
    value_t v16;
    value_t v17;
    value_t v18;
    value_t v19;
    value_t v20;
    value_t v21;
    value_t v22;
    value_t v23;
    value_t v24;
    value_t v25;
    value_t v26;
    value_t v27;
    value_t v28;
    value_t v29;
    value_t v30;
    value_t v31;
    value_t v32;
    value_t v33;
    value_t v34;
    value_t v35;
    value_t v36;
    value_t v37;
    value_t v38;
    value_t v39;
    value_t v40;
    value_t v41;
    value_t v42;
    value_t v43;
    value_t v44;
    value_t v45;
    value_t v46;
    value_t v47;
    value_t v48;
    value_t v49;
    value_t v50;
    value_t v51;
    value_t v52;
    value_t v53;
    value_t v54;
    value_t v55;
    value_t v56;
    value_t v57;
    value_t v58;
    value_t v59;
    value_t v60;
    value_t v61;
    value_t v62;
    value_t v63;
}

// bridged_md_h travels in front of the Ethernet header from ingress to
// egress (results) and from ingress back to ingress (the harvest
// recirculation). Every field that ingress fills from metadata has a
// byte (or two) of its own: Tofino writes a PHV container from at most
// one PHV source when a constant is written beside it, so fields packed
// into one byte from several metadata fields cannot be set in one action
// (bf-p4c: "requires too many sources"). Same size in both profiles.
header bridged_md_h {
    bit<6>        _pad_pass;
    pass_t        pass;              // PASS_REQUEST / PASS_HARVEST
    bit<6>        _pad_decision;
    decision_t    decision;          // switchmodel.Decision
    bit<7>        _pad_first;
    bit<1>        first_packet;      // result opcode: FIRST/ONLY have a RETH
    bit<7>        _pad_last;
    bit<1>        last_packet;       // LAST/ONLY carry an immediate
#ifdef CHUNKED
    bit<6>        _pad_chunk;
    chunk_t       chunk;             // the chunk (= pipe) of this pass
    bit<7>        _pad_first_contribution;
    bit<1>        first_contribution;// pass 0's BitmapChecker: write, not add
    bit<7>        _pad_retransmission;
    bit<1>        retransmission;    // pass 0's BitmapChecker: read only
#else
    bit<24>       _pad0;             // the 1024 B profile's chunk, first_contribution, retransmission
#endif
    bit<3>        _pad_worker;
    worker_id_t   worker_id;         // the sender's rank (Unicast destination)
    bit<7>        _pad1;
    qp_index_t    qp_index;          // results go to the same QP index
    mgid_t        mgid;              // the job (multicast group)
    pool_index_t  pool_index;        // for the harvest pass
    msg_id_t      msg_id;            // result immediate (Exponents)
    exponent_t    e0;
    exponent_t    e1;
    bit<7>        _pad2;
    PortId_t      ingress_port;      // Unicast goes back out of it
}

struct header_t {
    bridged_md_h   bridged;
    ethernet_h     ethernet;
    arp_h          arp;
    ipv4_h         ipv4;
    icmp_h         icmp;
    udp_h          udp;
    ib_bth_h       ib_bth;
    ib_reth_h      ib_reth;
    ib_immediate_h ib_immediate;
    payload_h      payload;
}

struct egress_metadata_t {
    worker_id_t      dest_rank;      // egress_rid for Broadcast, sender for Unicast
    qp_state_index_t psn_index;      // RDMASender PSN register index
    rkey_t           rkey;           // the destination worker's real rkey
    bit<16>          sim_drop;       // DropSimulator: ≠ 0 dropped
    bit<1>           worker_known;   // RDMASender.worker hit
    bit<1>           qp_known;       // RDMASender.worker_qp hit
    bit<32>          tx_next;        // RDMASender: tx_pos after this packet
}

#endif /* _HEADERS_P4_ */
