/*
 * Forwarder — plain L2 forwarding by destination MAC for everything that
 * is not for the switch (worker-to-worker traffic, the controller's gRPC,
 * …). Entries are the operator's (a static MAC → port map, like
 * p4app-switchML's); a miss is dropped.
 */
#ifndef _FORWARDER_P4_
#define _FORWARDER_P4_

#include "types.p4"
#include "headers.p4"

control Forwarder(
    in header_t hdr,
    inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
    inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    action set_egress_port(PortId_t port) {
        ig_tm_md.ucast_egress_port = port;
    }

    action flood(MulticastGroupId_t flood_mgid) {
        ig_tm_md.mcast_grp_a = flood_mgid;
    }

    action drop() {
        ig_dprsr_md.drop_ctl = 1;
    }

    table l2_forward {
        key = { hdr.ethernet.dst_addr : exact; }
        actions = { set_egress_port; flood; drop; }
        default_action = drop();
        size = 1024;
    }

    apply {
        l2_forward.apply();
    }
}

#endif /* _FORWARDER_P4_ */
