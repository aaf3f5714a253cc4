/*
 * Processor — mirrors switchmodel.Processor (aggregation/switchmodel/
 * processor.go).
 *
 * One instance per pair of int32 lanes (2k, 2k+1): 32 instances cover the
 * 64 values of a 256 B packet. Each holds a paired 64-bit register indexed
 * by wire.PoolIndex (slot·2 + set) — the same pairing as the Go model's
 * uint64 words (lane 2k = first = high half). The first contribution
 * overwrites, later ones add (wrapping, two's complement), a
 * retransmission reads.
 *
 * A Tofino 1 stateful ALU returns one 32-bit word per pass, so a pair is
 * read in two passes (docs/p4.md "Passes"):
 *   PASS_REQUEST: write or add both halves, return the second half;
 *                 a retransmission returns the second half;
 *   PASS_HARVEST: (the recirculated Broadcast/Unicast) return the first.
 * Between the two passes no new contribution can reach the (slot, set):
 * every worker must first receive this result.
 * 1024 B profile: each pipe's instances hold that pipe's chunk; PASS_CONSUME
 * (pipes 1–3) writes / adds / reads like PASS_REQUEST, and
 * PASS_HARVEST_INSERT reads the second halves into an inserted window.
 * 16-bit profile (-DWIRE_16): the same over two pipes, value_t is bit<16>
 * and an entry is 32 bits of two 16-bit halves; the stateful ALU adds each
 * half in its own 16-bit ALU, so the sums wrap mod 2^16 lane by lane
 * (switchmodel's 16-bit lanes) and return one 16-bit lane per pass.
 */
#ifndef _PROCESSOR_P4_
#define _PROCESSOR_P4_

#include "types.p4"

control Processor(
    inout value_t first,
    inout value_t second,
    in pool_index_t slot,
    in worker_bitmap_t retransmission,
    in worker_bitmap_t bitmap_before,
    in pass_t pass,
    in bool accepted) {

    Register<value_pair_t, pool_index_t>(NUM_SLOTS_X2) values;

    RegisterAction<value_pair_t, pool_index_t, value_t>(values) write_read1 = {
        void apply(inout value_pair_t v, out value_t r) {
            v.first = first;
            v.second = second;
            r = v.second;
        }
    };

    RegisterAction<value_pair_t, pool_index_t, value_t>(values) sum_read1 = {
        void apply(inout value_pair_t v, out value_t r) {
            v.first = v.first + first;
            v.second = v.second + second;
            r = v.second;
        }
    };

    RegisterAction<value_pair_t, pool_index_t, value_t>(values) read0 = {
        void apply(inout value_pair_t v, out value_t r) { r = v.first; }
    };

    RegisterAction<value_pair_t, pool_index_t, value_t>(values) read1 = {
        void apply(inout value_pair_t v, out value_t r) { r = v.second; }
    };

    action write_read1_action() { second = write_read1.execute(slot); }
    action sum_read1_action()   { second = sum_read1.execute(slot); }
    action read0_action()       { first = read0.execute(slot); }
    action read1_action()       { second = read1.execute(slot); }

    // One table keyed on the values that choose the register action
    // (p4app-switchML's form): one logical table per Processor instead of
    // a gateway and a table per branch, which 32 instances could not
    // afford (Tofino 1 has 16 logical tables per stage). Entries in
    // priority order: retransmission and bitmap_before are tested against
    // zero by their ternary masks.
    table sum {
        key = {
            pass               : ternary;
            retransmission     : ternary;
            bitmap_before      : ternary;
        }
        actions = { write_read1_action; sum_read1_action; read0_action; read1_action; @defaultonly NoAction; }
        const default_action = NoAction;
        size = 8;
        const entries = {
            (PASS_HARVEST, _, _)        : read0_action();
#ifdef CHUNKED
            (PASS_HARVEST_INSERT, _, _) : read1_action();
            (PASS_CONSUME, 0, 0)        : write_read1_action();
            (PASS_CONSUME, 0, _)        : sum_read1_action();
            (PASS_CONSUME, _, _)        : read1_action();
#endif
            (PASS_REQUEST, 0, 0)        : write_read1_action();
            (PASS_REQUEST, 0, _)        : sum_read1_action();
            (PASS_REQUEST, _, _)        : read1_action();
        }
    }

    // The gate and the table make one logical table, so the 32
    // Processors are 32 independent tables that bf-p4c can interleave
    // with NextStep (a gate around all 32 would be one subtree).
    apply {
        if (accepted) {
            sum.apply();
        }
    }
}

#endif /* _PROCESSOR_P4_ */
