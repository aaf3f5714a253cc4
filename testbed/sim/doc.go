// Package sim runs the real SwitchML system at scale in virtual time: the
// worker engine (aggregation), the software switch (aggregation/swswitch)
// and its controller (aggregation/control), put together as
// aggregation/local does, with one userspace NIC (verbs/soft) per worker,
// over the in-memory network of verbs/soft/udp/memlink: a link per worker
// and direction with a rate, a queue, a propagation delay and loss. No part
// of the protocol is modelled again: the code users run is the code
// simulated (docs/sim.md). Config.Leaves puts the workers under leaf
// switches below a spine instead (local.StartTree, docs/switch.md "Switch
// hierarchy"), each leaf on a link of its own to the spine.
//
// Run inside a testing/synctest bubble, the links' rates, queues and
// delays are the only time: the bubble's clock moves only when every
// goroutine in it is blocked, so computing (quantizing, adding, the NICs'
// and the switch's packet work) costs no virtual time, as on a fast host
// behind a slow network. Everything runs off sockets for that reason: the
// NICs and the switches on memlink, every controller's gRPC on an
// in-memory listener, a leaf's client of the spine's controller included
// (a goroutine blocked on a socket would keep the clock from moving). The links order datagrams due at the same instant by source
// (memlink.Config.SourceOrder) and draw each link's losses from its own
// generator: loss-free times are exact and results the same for the same
// inputs; lossy times repeat at small points only (docs/sim.md "The
// virtual clock").
//
// TestSim is the command: `go test ./testbed/sim/ -run '^TestSim$' -args
// -workers 8,64,256 -size 4MiB -json out.json` (docs/sim.md). Run and its
// Config are safe to use from several goroutines, one bubble each.
package sim
