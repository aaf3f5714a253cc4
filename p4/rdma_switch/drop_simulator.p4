/*
 * DropSimulator — the loss simulator of the software switch
 * (aggregation/swswitch Config drop probabilities; switchmodel
 * DropIngressLoss / DropEgressLoss). Instantiated in ingress
 * (ingress_drop_sim: requests) and egress (egress_drop_sim: results).
 * The controller sets drop_probability's default action with
 * threshold = p · 2^16; 0 (the default) never drops.
 *
 * Tofino compares two fields only in a stateful ALU, so "random <
 * threshold" is the saturating difference threshold |-| random, nonzero
 * exactly when random < threshold; the caller tests it against zero
 * (loss_compare). Three steps, one stage each: threshold and random
 * number into the PHV, the difference, the caller's test. 16 bits: the probability's
 * resolution is 2^-16, and a 16-bit value is what a gateway can test
 * beside the other conditions of its stage (docs/p4.md "DropSimulator").
 */
#ifndef _DROP_SIMULATOR_P4_
#define _DROP_SIMULATOR_P4_

#include "types.p4"

control DropSimulator(out bit<16> drop) {

    Random<bit<16>>() rng;
    bit<16> threshold;
    bit<16> r;

    action set_drop_probability(bit<16> drop_threshold) {
        threshold = drop_threshold;
    }

    table drop_probability {
        actions = { set_drop_probability; }
        default_action = set_drop_probability(0);
        size = 1;
    }

    action compare() {
        drop = threshold |-| r; // ≠ 0: dropped
    }

    // A table of its own, so the caller's gateway tests the field `drop`
    // and not the expression (bf-p4c propagates an apply-level assignment
    // into the condition, which a gateway cannot evaluate).
    table loss_compare {
        actions = { compare; }
        const default_action = compare();
        size = 1;
    }

    apply {
        drop_probability.apply();
#ifdef P4TESTGEN
        // p4testgen (scripts/p4.sh testgen, docs/p4.md "Generated tests")
        // cannot model Random and discards every path through it; the
        // generated tests draw 0, so a packet is dropped exactly when the
        // controller's threshold is nonzero. Never defined for a switch.
        r = 0;
#else
        r = rng.get();
#endif
        loss_compare.apply();
    }
}

#endif /* _DROP_SIMULATOR_P4_ */
