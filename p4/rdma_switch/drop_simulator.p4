/*
 * DropSimulator — the loss simulator of the software switch
 * (aggregation/swswitch Config drop probabilities; switchmodel
 * DropIngressLoss / DropEgressLoss). Instantiated in ingress
 * (ingress_drop_sim: requests) and egress (egress_drop_sim: results).
 * The controller sets drop_probability's default action with
 * threshold = p · 2^32; 0 (the default) never drops.
 */
#ifndef _DROP_SIMULATOR_P4_
#define _DROP_SIMULATOR_P4_

#include "types.p4"

control DropSimulator(out bool drop) {

    Random<bit<32>>() rng;
    bit<32> threshold;

    action set_drop_probability(bit<32> drop_threshold) {
        threshold = drop_threshold;
    }

    table drop_probability {
        actions = { set_drop_probability; }
        default_action = set_drop_probability(0);
        size = 1;
    }

    apply {
        threshold = 0;
        drop_probability.apply();
        drop = rng.get() < threshold;
    }
}

#endif /* _DROP_SIMULATOR_P4_ */
