/*
 * BitmapChecker — mirrors switchmodel.BitmapChecker (aggregation/
 * switchmodel/bitmap.go).
 *
 * One 64-bit register entry per slot holds both sets' 32-bit worker
 * bitmaps (bitmap_pair_t). A packet for set s ORs the worker's bit into s,
 * clears it in ¬s, and reads s's bitmap before the update:
 * retransmission = before & worker_bit, nonzero for a retransmission. The Go model's bitmap is
 * wider (MaxWorkers); the P4 program holds 32 workers (wire.MaxP4AppWorkers).
 * One stateful ALU.
 */
#ifndef _BITMAP_CHECKER_P4_
#define _BITMAP_CHECKER_P4_

#include "types.p4"

// retransmission = bitmap_before & worker_bit is one 32-bit AND: the three
// must sit in whole 32-bit containers, bit for bit (bf-p4c otherwise
// splits them into bytes with different alignments).
@pa_container_size("ingress", "ig_md.switchml_md.retransmission", 32)
@pa_container_size("ingress", "ig_md.switchml_md.bitmap_before", 32)
@pa_container_size("ingress", "ig_md.switchml_md.worker_bit", 32)
control BitmapChecker(inout ingress_metadata_t ig_md) {

    Register<bitmap_pair_t, slot_t>(NUM_SLOTS) bitmap;

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

    // The stateful ALU's output and the worker's bit meet in the action
    // (one VLIW AND in the register's stage, p4app-switchML's map_result):
    // a comparison of them would need a stage of its own, which the
    // pipeline does not have (docs/p4.md "Stages"). retransmission is the
    // AND itself; its consumers test it against zero in gateways.
    // The slot is a slice of the pool index, taken by the register's
    // address unit (no shift: that would be a stage of its own).
    action check_set0() {
        ig_md.switchml_md.bitmap_before = update_set0.execute(ig_md.switchml_md.pool_index[16:1]);
        ig_md.switchml_md.retransmission =
            ig_md.switchml_md.bitmap_before & ig_md.switchml_md.worker_bit;
    }

    action check_set1() {
        ig_md.switchml_md.bitmap_before = update_set1.execute(ig_md.switchml_md.pool_index[16:1]);
        ig_md.switchml_md.retransmission =
            ig_md.switchml_md.bitmap_before & ig_md.switchml_md.worker_bit;
    }

    apply {
        if (ig_md.switchml_md.pool_index[0:0] == 0) {
            check_set0();
        } else {
            check_set1();
        }
    }
}

#endif /* _BITMAP_CHECKER_P4_ */
