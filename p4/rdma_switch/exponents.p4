/*
 * Exponents — mirrors switchmodel.Exponents (aggregation/switchmodel/
 * exponents.go).
 *
 * Per (slot, set) the result's wire.Imm: msg id (echoed) and max(e0),
 * max(e1) over the contributions that carried an immediate. The first
 * contribution overwrites (EXPONENT_UNSET = -128 when it has no
 * immediate, msg id 0), later ones take the maximum, a retransmission
 * reads. Three stateful ALUs (e0, e1, msg id).
 *
 * "First" here is BitmapChecker's bitmap_before == 0, not WorkersCounter's
 * count, so Exponents and Processor can sit in the stage right after
 * BitmapChecker (docs/p4.md "Stages"). The two agree: set s of a slot is
 * reused only after every worker sent ¬s for it, which cleared all its bits.
 */
#ifndef _EXPONENTS_P4_
#define _EXPONENTS_P4_

#include "types.p4"
#include "headers.p4"

control Exponents(
    in header_t hdr,
    inout ingress_metadata_t ig_md) {

    Register<exponent_t, pool_index_t>(NUM_SLOTS_X2) max_e0;
    Register<exponent_t, pool_index_t>(NUM_SLOTS_X2) max_e1;
    Register<msg_id_t, pool_index_t>(NUM_SLOTS_X2) msg_id;

    RegisterAction<exponent_t, pool_index_t, exponent_t>(max_e0) write_e0 = {
        void apply(inout exponent_t v, out exponent_t r) { v = hdr.ib_immediate.e0; r = v; }
    };
    RegisterAction<exponent_t, pool_index_t, exponent_t>(max_e0) unset_e0 = {
        void apply(inout exponent_t v, out exponent_t r) { v = EXPONENT_UNSET; r = v; }
    };
    RegisterAction<exponent_t, pool_index_t, exponent_t>(max_e0) max_read_e0 = {
        void apply(inout exponent_t v, out exponent_t r) {
            if (hdr.ib_immediate.e0 > v) { v = hdr.ib_immediate.e0; }
            r = v;
        }
    };
    RegisterAction<exponent_t, pool_index_t, exponent_t>(max_e0) read_e0 = {
        void apply(inout exponent_t v, out exponent_t r) { r = v; }
    };

    RegisterAction<exponent_t, pool_index_t, exponent_t>(max_e1) write_e1 = {
        void apply(inout exponent_t v, out exponent_t r) { v = hdr.ib_immediate.e1; r = v; }
    };
    RegisterAction<exponent_t, pool_index_t, exponent_t>(max_e1) unset_e1 = {
        void apply(inout exponent_t v, out exponent_t r) { v = EXPONENT_UNSET; r = v; }
    };
    RegisterAction<exponent_t, pool_index_t, exponent_t>(max_e1) max_read_e1 = {
        void apply(inout exponent_t v, out exponent_t r) {
            if (hdr.ib_immediate.e1 > v) { v = hdr.ib_immediate.e1; }
            r = v;
        }
    };
    RegisterAction<exponent_t, pool_index_t, exponent_t>(max_e1) read_e1 = {
        void apply(inout exponent_t v, out exponent_t r) { r = v; }
    };

    RegisterAction<msg_id_t, pool_index_t, msg_id_t>(msg_id) write_msg_id = {
        void apply(inout msg_id_t v, out msg_id_t r) { v = hdr.ib_immediate.msg_id; r = v; }
    };
    RegisterAction<msg_id_t, pool_index_t, msg_id_t>(msg_id) reset_msg_id = {
        void apply(inout msg_id_t v, out msg_id_t r) { v = 0; r = v; }
    };
    RegisterAction<msg_id_t, pool_index_t, msg_id_t>(msg_id) read_msg_id = {
        void apply(inout msg_id_t v, out msg_id_t r) { r = v; }
    };

    // Each test below is one gateway on one field (Tofino's gateways take
    // 4 bytes of PHV): the retransmission word, then the bitmap, then
    // has_imm. Same cases and order as switchmodel.Exponents.Update.
    apply {
        pool_index_t idx = (pool_index_t) ig_md.switchml_md.pool_index;
        // A read: a retransmission, or a later contribution without an
        // immediate. A result echoes the id of the request that asked for
        // it: a retransmission gets its own id back, which may name one
        // packet of the message (per-packet recovery, aggregation/wire.
        // PacketMsgID; switchmodel.Exponents).
        if (ig_md.switchml_md.retransmission != 0) {
            ig_md.switchml_md.result_e0 = read_e0.execute(idx);
            ig_md.switchml_md.result_e1 = read_e1.execute(idx);
            if (ig_md.switchml_md.has_imm) {
                ig_md.switchml_md.result_msg_id = hdr.ib_immediate.msg_id;
            } else {
                ig_md.switchml_md.result_msg_id = read_msg_id.execute(idx);
            }
        } else if (ig_md.switchml_md.bitmap_before == 0) {
            if (ig_md.switchml_md.has_imm) {
                ig_md.switchml_md.result_e0 = write_e0.execute(idx);
                ig_md.switchml_md.result_e1 = write_e1.execute(idx);
                ig_md.switchml_md.result_msg_id = write_msg_id.execute(idx);
            } else {
                ig_md.switchml_md.result_e0 = unset_e0.execute(idx);
                ig_md.switchml_md.result_e1 = unset_e1.execute(idx);
                ig_md.switchml_md.result_msg_id = reset_msg_id.execute(idx);
            }
        } else if (ig_md.switchml_md.has_imm) {
            ig_md.switchml_md.result_e0 = max_read_e0.execute(idx);
            ig_md.switchml_md.result_e1 = max_read_e1.execute(idx);
            ig_md.switchml_md.result_msg_id = write_msg_id.execute(idx);
        } else {
            ig_md.switchml_md.result_e0 = read_e0.execute(idx);
            ig_md.switchml_md.result_e1 = read_e1.execute(idx);
            ig_md.switchml_md.result_msg_id = read_msg_id.execute(idx);
        }
    }
}

#endif /* _EXPONENTS_P4_ */
