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

    action write_e0_a()    { ig_md.switchml_md.result_e0 = write_e0.execute(ig_md.switchml_md.pool_index[15:0]); }
    action unset_e0_a()    { ig_md.switchml_md.result_e0 = unset_e0.execute(ig_md.switchml_md.pool_index[15:0]); }
    action max_read_e0_a() { ig_md.switchml_md.result_e0 = max_read_e0.execute(ig_md.switchml_md.pool_index[15:0]); }
    action read_e0_a()     { ig_md.switchml_md.result_e0 = read_e0.execute(ig_md.switchml_md.pool_index[15:0]); }
    action write_e1_a()    { ig_md.switchml_md.result_e1 = write_e1.execute(ig_md.switchml_md.pool_index[15:0]); }
    action unset_e1_a()    { ig_md.switchml_md.result_e1 = unset_e1.execute(ig_md.switchml_md.pool_index[15:0]); }
    action max_read_e1_a() { ig_md.switchml_md.result_e1 = max_read_e1.execute(ig_md.switchml_md.pool_index[15:0]); }
    action read_e1_a()     { ig_md.switchml_md.result_e1 = read_e1.execute(ig_md.switchml_md.pool_index[15:0]); }
    action write_msg_id_a() { ig_md.switchml_md.result_msg_id = write_msg_id.execute(ig_md.switchml_md.pool_index[15:0]); }
    action reset_msg_id_a() { ig_md.switchml_md.result_msg_id = reset_msg_id.execute(ig_md.switchml_md.pool_index[15:0]); }
    action read_msg_id_a()  { ig_md.switchml_md.result_msg_id = read_msg_id.execute(ig_md.switchml_md.pool_index[15:0]); }
    // A result echoes the id of the request that asked for it: a
    // retransmission gets its own id back, which may name one packet of
    // the message (per-packet recovery, aggregation/wire.PacketMsgID;
    // switchmodel.Exponents).
    action echo_msg_id_a()  { ig_md.switchml_md.result_msg_id = hdr.ib_immediate.msg_id; }

    // One table per register (a logical table addresses one stateful
    // ALU), keyed on the values that choose the action, entries in
    // priority order — the cases of switchmodel.Exponents.Update:
    //   new, first (bitmap_before == 0), with ImmDt → write
    //   new, first, without                       → unset (−128, id 0)
    //   new, later, with ImmDt                     → max / write id
    //   otherwise (a retransmission; a later one without ImmDt) → read
    //     (the id: the request's own when it has one, else the stored).
    table exp_e0 {
        key = {
            ig_md.switchml_md.retransmission : ternary;
            ig_md.switchml_md.bitmap_before  : ternary;
            ig_md.switchml_md.has_imm        : ternary;
        }
        actions = { write_e0_a; unset_e0_a; max_read_e0_a; read_e0_a; @defaultonly NoAction; }
        const default_action = NoAction; // never: the last entry matches all
        size = 4;
        const entries = {
            (0, 0, true)  : write_e0_a();
            (0, 0, false) : unset_e0_a();
            (0, _, true)  : max_read_e0_a();
            (_, _, _)     : read_e0_a();
        }
    }

    table exp_e1 {
        key = {
            ig_md.switchml_md.retransmission : ternary;
            ig_md.switchml_md.bitmap_before  : ternary;
            ig_md.switchml_md.has_imm        : ternary;
        }
        actions = { write_e1_a; unset_e1_a; max_read_e1_a; read_e1_a; @defaultonly NoAction; }
        const default_action = NoAction; // never: the last entry matches all
        size = 4;
        const entries = {
            (0, 0, true)  : write_e1_a();
            (0, 0, false) : unset_e1_a();
            (0, _, true)  : max_read_e1_a();
            (_, _, _)     : read_e1_a();
        }
    }

    table exp_msg_id {
        key = {
            ig_md.switchml_md.retransmission : ternary;
            ig_md.switchml_md.bitmap_before  : ternary;
            ig_md.switchml_md.has_imm        : ternary;
        }
        actions = { write_msg_id_a; reset_msg_id_a; read_msg_id_a; echo_msg_id_a; @defaultonly NoAction; }
        const default_action = NoAction; // never: the last entry matches all
        size = 5;
        const entries = {
            (0, 0, true)  : write_msg_id_a();
            (0, 0, false) : reset_msg_id_a();
            (0, _, true)  : write_msg_id_a();
            (_, _, true)  : echo_msg_id_a();
            (_, _, _)     : read_msg_id_a();
        }
    }

    apply {
        exp_e0.apply();
        exp_e1.apply();
        exp_msg_id.apply();
    }
}

#endif /* _EXPONENTS_P4_ */
