/*
 * WorkersCounter — mirrors switchmodel.WorkersCounter (aggregation/
 * switchmodel/bitmap.go).
 *
 * Per (slot, set) — register index = wire.PoolIndex — the number of
 * contributions still missing. A new contribution that finds 0 starts a
 * round (n−1 missing after it); others decrement; reaching 0 is the last.
 * The register action returns the count AFTER the update (a retransmission
 * only reads it), so one test covers every case the model distinguishes:
 *   missing == 0  ⇔  Metadata.Complete (a retransmission: the slot is
 *                    complete; a new contribution: it was the last one,
 *                    n == 1 included, Metadata.LastContribution)
 * and NextStep tests it in a gateway. Tofino cannot assign a comparison to
 * a field in an action, and a gateway on the returned count costs no stage
 * (docs/p4.md "Stages"). Metadata.FirstContribution is not needed: the
 * Exponents and Processors take "first" from the bitmap. One stateful ALU.
 */
#ifndef _WORKERS_COUNTER_P4_
#define _WORKERS_COUNTER_P4_

#include "types.p4"
#include "testgen_steer.p4"

control WorkersCounter(inout ingress_metadata_t ig_md) {

    Register<bit<8>, pool_index_t>(NUM_SLOTS_X2) missing;

    RegisterAction<bit<8>, pool_index_t, bit<8>>(missing) count_new = {
        void apply(inout bit<8> m, out bit<8> after) {
            TESTGEN_ASSUME_MISSING(m)
            if (m == 0) {
                m = ig_md.switchml_md.num_workers - 1;
            } else {
                m = m - 1;
            }
            after = m;
        }
    };

    RegisterAction<bit<8>, pool_index_t, bit<8>>(missing) read_missing = {
        void apply(inout bit<8> m, out bit<8> now) {
            now = m;
        }
    };

    apply {
        pool_index_t idx = (pool_index_t) ig_md.switchml_md.pool_index;
        if (ig_md.switchml_md.retransmission != 0) {
            ig_md.switchml_md.missing = read_missing.execute(idx);
        } else {
            ig_md.switchml_md.missing = count_new.execute(idx);
        }
    }
}

#endif /* _WORKERS_COUNTER_P4_ */
