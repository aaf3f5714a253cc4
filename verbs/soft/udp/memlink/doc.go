// Package memlink is an in-memory datagram network for tests: endpoints
// that implement udp.Endpoint (the seam of the userspace NIC and the
// software switch), joined by links that can delay, rate-limit, queue
// (bounded, drop-tail), drop and reorder. The real NIC (verbs/soft) and the
// real switch (aggregation/swswitch) run over it unchanged, without
// sockets, addresses or network namespaces, so such tests run in parallel.
//
// A link is one direction between two addresses (SetLink; Config.Link for
// the rest): a FIFO that serialises each datagram at Rate behind at most
// Queue waiting ones, then Delay; Loss and Reorder draw from the link's own
// generator, seeded with Config.Seed and the pair's addresses, in the
// link's send order (so other links' traffic does not move a link's
// losses: concurrent senders on a virtual clock lose the same packets every
// run, testbed/sim); LinkConfig.Drop is a
// deterministic loss pattern, LinkConfig.Hold a deterministic reordering
// (packets kept back until a later one releases them). Every endpoint has a bounded receive queue
// (the socket buffer) ordered by arrival time.
//
// Time is real by default. With Config.Clock a test moves time itself
// (ManualClock.Advance): then the congestion behaviour of a link — which
// packets wait, which are dropped at a full queue, when each arrives — is
// a pure function of what was sent when, and tests of it are exact.
//
// Costs: WriteBatch copies each datagram once into the receiver's queue
// (slots allocated in chunks the first time the queue grows that far);
// ReadBatch copies it out; neither allocates per packet. One mutex per Network serialises sends and receives, taken once
// per batch.
//
// Concurrency: a Network and its endpoints are safe for concurrent use,
// except that ReadBatch must be called from one goroutine at a time per
// endpoint (as udp.Endpoint says).
package memlink
