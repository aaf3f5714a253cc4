// Package netlab is a one-rack network lab on one Linux host, for
// measuring all-reduce transports on links with a rate, a queue and loss
// (docs/netlab.md). `swml-rdma lab` drives it.
//
// Topology: a switch network namespace holds a Linux bridge (br0, the
// switch's address) and one veth port per worker (w0, w1, …); worker i's
// namespace holds the other end of its veth (eth0, worker i's address).
// Every packet between two hosts of the lab crosses the sender's link and,
// through the bridge, the receiver's link, so worker-to-worker traffic
// (Gloo, the ring) and worker-to-switch traffic (SwitchML) take the same
// links. Links and addresses are made over rtnetlink; each direction of a
// link can be shaped to a rate with a tbf qdisc (Lab.Shape, through tc) and
// can drop a fraction of its packets at random on arrival (Lab.SetLoss: an
// nftables netdev ingress rule with numgen random, which a sender cannot
// tell from a loss on the wire; netem is not needed).
//
// A tree (Config.Leaves) has that shape once per leaf — each leaf
// namespace is the switch namespace of its share of the workers — and a
// spine namespace joined to every leaf by one more veth link (up0 in the
// leaf's, l0, l1, … in the spine's), shaped apart (Lab.ShapeSpine). Only
// host routes cross it, leaf ⇄ spine, so a worker reaches its own leaf
// alone.
//
// Namespaces are named Prefix + the owning process's pid + a role
// (swlab1234-sw, swlab1234-w0, a tree's swlab1234-l0, …), so labs of several processes coexist
// and Cleanup can remove what a crashed run left (its owner is dead)
// without touching a running lab.
//
// Everything needs root and Linux; on other systems every function returns
// ErrNotSupported. A Lab is not safe for concurrent use, except Do and
// Counters, which may run from any goroutine.
package netlab
