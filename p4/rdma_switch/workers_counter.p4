/*
 * WorkersCounter — mirrors switchmodel.WorkersCounter (aggregation/
 * switchmodel/bitmap.go).
 *
 * Per (slot, set) — register index = wire.PoolIndex — the number of
 * contributions still missing. A new contribution that finds 0 starts a
 * round (n−1 missing after it); others decrement; reaching 0 is the last.
 * The register action returns the value before the update, so
 *   first = before == 0,  last = before == 1 || (before == 0 && n == 1).
 * A retransmission only reads: 0 means complete. One stateful ALU.
 */
#ifndef _WORKERS_COUNTER_P4_
#define _WORKERS_COUNTER_P4_

#include "types.p4"

control WorkersCounter(inout ingress_metadata_t ig_md) {

    Register<bit<8>, pool_index_t>(NUM_SLOTS_X2) missing;

    RegisterAction<bit<8>, pool_index_t, bit<8>>(missing) count_new = {
        void apply(inout bit<8> m, out bit<8> before) {
            before = m;
            if (m == 0) {
                m = ig_md.switchml_md.num_workers - 1;
            } else {
                m = m - 1;
            }
        }
    };

    RegisterAction<bit<8>, pool_index_t, bit<8>>(missing) read_missing = {
        void apply(inout bit<8> m, out bit<8> before) {
            before = m;
        }
    };

    apply {
        pool_index_t idx = (pool_index_t) ig_md.switchml_md.pool_index;
        if (ig_md.switchml_md.retransmission) {
            ig_md.switchml_md.missing_before = read_missing.execute(idx);
            ig_md.switchml_md.complete = ig_md.switchml_md.missing_before == 0;
        } else {
            ig_md.switchml_md.missing_before = count_new.execute(idx);
            ig_md.switchml_md.first_contribution = ig_md.switchml_md.missing_before == 0;
            ig_md.switchml_md.last_contribution =
                ig_md.switchml_md.missing_before == 1 ||
                (ig_md.switchml_md.missing_before == 0 && ig_md.switchml_md.num_workers == 1);
            ig_md.switchml_md.complete = ig_md.switchml_md.last_contribution;
        }
    }
}

#endif /* _WORKERS_COUNTER_P4_ */
