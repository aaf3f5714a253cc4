/*
 * testgen_steer.p4 — constraints for p4testgen only (scripts/p4.sh
 * testgen, docs/p4.md "Generated tests"). Every macro here is empty unless
 * P4TESTGEN is defined, and no switch build defines it: the compiled
 * program is the same with or without this file.
 *
 * p4testgen picks table entries and register values freely; these
 * assumptions keep it to what the controller writes
 * (aggregation/control/p4rt Programmer.jobUpdates), so that the replay
 * (aggregation/switchmodel TestP4TestgenReplay) can install the same job
 * in the Go model, and steer the search towards the SwitchML path.
 */
#ifndef _TESTGEN_STEER_P4_
#define _TESTGEN_STEER_P4_

#ifdef P4TESTGEN
#include <testgen.p4>

// receive_qp's set_qp: one bit per rank, 1..32 workers, 1..512 QPs, the
// job's pool range in pool index units (even, non-empty, in the
// registers), a wire.P4AppQPN destination of this rank.
#define TESTGEN_ASSUME_SET_QP \
    testgen_assume(worker_bit == ((worker_bitmap_t) 1) << ((bit<32>) worker_id)); \
    testgen_assume(num_workers >= 1 && num_workers <= 32); \
    testgen_assume((num_workers_t) worker_id < num_workers); \
    testgen_assume(num_qps >= 1 && num_qps <= 512); \
    testgen_assume(pool_first_index[0:0] == 0 && pool_end_index[0:0] == 0); \
    testgen_assume(pool_first_index < pool_end_index); \
    testgen_assume(pool_end_index <= NUM_SLOTS_X2); \
    testgen_assume(hdr.ib_bth.dst_qp[23:21] == 4 && hdr.ib_bth.dst_qp[20:16] == worker_id); \
    testgen_assume(hdr.ib_bth.dst_qp[15:9] == 0); \
    ig_md.testgen_pool_first = pool_first_index; \
    ig_md.testgen_pool_end = pool_end_index;

// rx_qp_state and rx_high_psn hold INVALID_PSN / 0 or a psn_key form
// (PSN << 8 | 0x80), as every register action writes them. For a
// MIDDLE/LAST on a valid QP, rx_pool_index holds the pool index of the
// QP's last packet, in the job's range, and room the steps from it to the
// range's end (start_message, continue_message): next_pool_index ran just
// before, so ig_md's pool index is that one + 2.
#define TESTGEN_ASSUME_RX_STATE(s) \
    testgen_assume(s.next_psn == INVALID_PSN || s.next_psn[7:0] == 0x80); \
    testgen_assume(ig_md.switchml_md.first_packet || s.next_psn == INVALID_PSN || \
        (ig_md.switchml_md.pool_index - 2 >= ig_md.testgen_pool_first && \
         ig_md.switchml_md.pool_index - 2 < ig_md.testgen_pool_end && \
         s.room == ig_md.testgen_pool_end - (ig_md.switchml_md.pool_index - 2)));
#define TESTGEN_ASSUME_HIGH_PSN(v) testgen_assume(v == 0 || v[7:0] == 0x80);

// WorkersCounter's count_new (a new contribution): the set's counter is 0
// exactly when its bitmap is empty. A set of a slot is used again only
// after every worker sent the other set, which cleared its bits
// (switchmodel.BitmapChecker), so no other state is reachable; the model
// and the program tell the first contribution by one each (R10).
#define TESTGEN_ASSUME_MISSING(m) \
    testgen_assume((m == 0) == (ig_md.switchml_md.bitmap_before == 0));

// -DP4TESTGEN_ROCE: only well-formed RoCEv2 packets from the front ports
// (IPv4 version 4, total length from IPv4 + UDP + BTH + ICRC to a
// request's with RETH and ImmDt + 16, which scripts/p4.sh's packet size
// range keeps within the frame, UDP length = IPv4 payload, BTH TVer 0 and
// PadCount 0:
// what rdma.ParseFrame and rdma.Packet.Parse accept; the program checks
// none of them, docs/p4.md "Generated tests") to the switch IP.
#ifdef P4TESTGEN_ROCE
#define TESTGEN_ASSUME_INGRESS \
    testgen_assume(!hdr.bridged.isValid() && (hdr.ib_bth.isValid() && hdr.ipv4.version == 4 && \
        hdr.ipv4.total_len >= 44 && hdr.ipv4.total_len <= IPV4_LEN_NO_EXT + 36 && \
        hdr.udp.length == hdr.ipv4.total_len - 20 && \
        hdr.ib_bth.transport_version == 0 && \
        hdr.ib_bth.pad_count == 0));
#define TESTGEN_ASSUME_FOR_SWITCH testgen_assume(hdr.ipv4.dst_addr == ig_md.switch_ip);
#else
#ifdef P4TESTGEN_BRIDGED
// -DP4TESTGEN_BRIDGED: only bridged passes (a recirculation or loopback
// port; the tool's port range must hold the output ports too).
#define TESTGEN_ASSUME_INGRESS testgen_assume(hdr.bridged.isValid());
#else
#define TESTGEN_ASSUME_INGRESS
#endif
#define TESTGEN_ASSUME_FOR_SWITCH
#endif

#else
#define TESTGEN_ASSUME_SET_QP
#define TESTGEN_ASSUME_RX_STATE(s)
#define TESTGEN_ASSUME_HIGH_PSN(v)
#define TESTGEN_ASSUME_MISSING(m)
#define TESTGEN_ASSUME_INGRESS
#define TESTGEN_ASSUME_FOR_SWITCH
#endif

#endif /* _TESTGEN_STEER_P4_ */
