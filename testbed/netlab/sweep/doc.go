// Package sweep measures all-reduces in the network lab of testbed/netlab
// (docs/netlab.md): for every combination of worker count, link rate,
// loss and tensor size it runs SwitchML (the switch daemon and one worker
// process per worker namespace, optionally several jobs at once), Gloo
// (torch.distributed, one Python process per worker namespace) and the
// project's ring (in this process, each NIC's socket in its worker's
// namespace) over the same links, and, as the DDP systems, PyTorch's
// DistributedDataParallel training through the swml backend or Gloo (one
// Python rank per worker namespace), verifies every result, and reports each
// system's times against its link-rate ceiling (netlab.LinkCeilings), its
// retransmissions and the lab's drops. `swml-rdma lab` is its command: it
// parses the flags into a Config and prints, plots or writes the Report as
// JSON.
//
// With Config.Leaves SwitchML also runs on a two-level tree of switches
// (a spine and a leaf switch per leaf namespace), whose results must be
// the single switch's bit for bit.
//
// Run builds one lab per worker count and shape, needs root and Linux (netlab) and
// starts processes of Config.Exe; the arithmetic of a Report — ceilings,
// ratios, shares, fairness — is plain Go and tested without either. Run is
// one sweep at a time per Config.Prefix and process; a Report is plain
// data.
package sweep
