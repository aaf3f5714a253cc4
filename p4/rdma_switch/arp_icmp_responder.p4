/*
 * ARPICMPResponder — answers ARP requests and ICMP echo requests for the
 * switch's own IP in the data plane, so workers can resolve and ping the
 * RoCE endpoint (the software switch gets this from the host kernel).
 * switch_address's default action holds the switch MAC and IP
 * (control.Config.SwitchMAC / SwitchIPv4); the P4Runtime backend sets it.
 */
#ifndef _ARP_ICMP_RESPONDER_P4_
#define _ARP_ICMP_RESPONDER_P4_

#include "types.p4"
#include "headers.p4"

control ARPICMPResponder(
    inout header_t hdr,
    inout ingress_metadata_t ig_md,
    in ingress_intrinsic_metadata_t ig_intr_md,
    inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    action set_switch_address(mac_addr_t switch_mac, ipv4_addr_t switch_ip) {
        ig_md.switch_mac = switch_mac;
        ig_md.switch_ip = switch_ip;
    }

    table switch_address {
        actions = { set_switch_address; }
        default_action = set_switch_address(0, 0);
        size = 1;
    }

    action reply_arp() {
        hdr.ethernet.dst_addr = hdr.arp.sender_hw_addr;
        hdr.ethernet.src_addr = ig_md.switch_mac;
        hdr.arp.opcode = ARP_REPLY;
        hdr.arp.target_hw_addr = hdr.arp.sender_hw_addr;
        hdr.arp.target_proto_addr = hdr.arp.sender_proto_addr;
        hdr.arp.sender_hw_addr = ig_md.switch_mac;
        hdr.arp.sender_proto_addr = ig_md.switch_ip;
        ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port;
        ig_md.responded = true;
    }

    action reply_echo() {
        hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
        hdr.ethernet.src_addr = ig_md.switch_mac;
        hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
        hdr.ipv4.src_addr = ig_md.switch_ip;
        hdr.ipv4.ttl = 64;
        hdr.icmp.msg_type = ICMP_ECHO_REPLY;
        ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port;
        ig_md.responded = true;
    }

    // RFC 1624 incremental update of the ICMP checksum for type 8 → 0:
    // +0x0800 with end-around carry, i.e. +0x0801 when the checksum is ≥
    // 0xF7FF. A table keyed on the checksum: a gateway for the range would
    // share its 4 bytes with the tests around it, which do not fit.
    action checksum_add_0800() {
        hdr.icmp.checksum = hdr.icmp.checksum + 0x0800;
    }

    action checksum_add_0801() {
        hdr.icmp.checksum = hdr.icmp.checksum + 0x0801;
    }

    table echo_checksum {
        key = { hdr.icmp.checksum : ternary; }
        actions = { checksum_add_0800; checksum_add_0801; }
        const default_action = checksum_add_0800();
        size = 2;
        const entries = {
            0xF800 &&& 0xF800 : checksum_add_0801(); // 0xF800 … 0xFFFF
            0xF7FF &&& 0xFFFF : checksum_add_0801();
        }
    }

    // Nested tests: a Tofino gateway takes 4 bytes of PHV, so the 32-bit
    // address comparison has a test of its own.
    // ig_md.responded is set by the parser to false (an assignment here would
    // share a container with the receiver's I0 results and cost a stage).
    apply {
        switch_address.apply();
        if (hdr.arp.isValid()) {
            if (hdr.arp.opcode == ARP_REQUEST) {
                if (hdr.arp.target_proto_addr == ig_md.switch_ip) {
                    reply_arp();
                }
            }
        } else if (hdr.icmp.isValid()) {
            if (hdr.icmp.msg_type == ICMP_ECHO_REQUEST) {
                if (hdr.ipv4.dst_addr == ig_md.switch_ip) {
                    echo_checksum.apply();
                    reply_echo();
                }
            }
        }
    }
}

#endif /* _ARP_ICMP_RESPONDER_P4_ */
