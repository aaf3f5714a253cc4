/*
 * BitmapChecker — mirrors switchmodel.BitmapChecker (aggregation/
 * switchmodel/bitmap.go).
 *
 * One 64-bit register entry per slot holds both sets' 32-bit worker
 * bitmaps (bitmap_pair_t). A packet for set s ORs the worker's bit into s,
 * clears it in ¬s, and reads s's bitmap before the update:
 * (before & worker_bit) != 0 is a retransmission. The Go model's bitmap is
 * wider (MaxWorkers); the P4 program holds 32 workers (wire.MaxP4AppWorkers).
 * One stateful ALU.
 */
#ifndef _BITMAP_CHECKER_P4_
#define _BITMAP_CHECKER_P4_

#include "types.p4"

control BitmapChecker(inout ingress_metadata_t ig_md) {

    Register<bitmap_pair_t, slot_t>(NUM_SLOTS_I) bitmap;

    RegisterAction<bitmap_pair_t, slot_t, worker_bitmap_t>(bitmap) update_set0 = {
        void apply(inout bitmap_pair_t b, out worker_bitmap_t before) {
            before = b.set0;
            b.set0 = b.set0 | ig_md.switchml_md.worker_bit;
            b.set1 = b.set1 & ~ig_md.switchml_md.worker_bit;
        }
    };

    RegisterAction<bitmap_pair_t, slot_t, worker_bitmap_t>(bitmap) update_set1 = {
        void apply(inout bitmap_pair_t b, out worker_bitmap_t before) {
            before = b.set1;
            b.set1 = b.set1 | ig_md.switchml_md.worker_bit;
            b.set0 = b.set0 & ~ig_md.switchml_md.worker_bit;
        }
    };

    apply {
        slot_t slot = (slot_t) (ig_md.switchml_md.pool_index >> 1);
        if (ig_md.switchml_md.pool_index[0:0] == 0) {
            ig_md.switchml_md.bitmap_before = update_set0.execute(slot);
        } else {
            ig_md.switchml_md.bitmap_before = update_set1.execute(slot);
        }
        ig_md.switchml_md.retransmission =
            (ig_md.switchml_md.bitmap_before & ig_md.switchml_md.worker_bit) != 0;
    }
}

#endif /* _BITMAP_CHECKER_P4_ */
