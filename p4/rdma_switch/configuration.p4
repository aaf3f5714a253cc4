/*
 * configuration.p4 — sizes of the rdma_switch program (Tofino 1, TNA).
 *
 * Every table and register size lives here. The default profile is the
 * production one: 8192 slots × 2 sets × 64 values (256 B) per slot, the
 * largest that fits Tofino 1's per-stage SRAM with 32 paired registers
 * (docs/p4.md "Resources"). Compile with -DTEST_PROFILE for a small build
 * (64 slots, 8 workers, 64 QPs) that compiles fast and fits the model.
 *
 * The controller must be told the same pool size (swml-rdma controller
 * --pool-size, control.Config.PoolSize; the Go model's switchmodel.Config
 * PoolSize) — the P4Runtime backend checks it against the register sizes
 * in the P4Info.
 *
 * -DPAYLOAD_1024 selects the 1024 B profile (docs/p4.md "1024 B
 * payloads"): the same sizes, four 256 B chunks per packet, chunk k
 * aggregated in pipe k of a 4-pipe Tofino 1 (every port of pipes 1–3 in
 * loopback). It combines with -DTEST_PROFILE. The P4Runtime backend reads
 * the profile from the P4Info (p4rt.P4Info.PacketSize) and needs the loop-
 * back ports of pipe 1 (p4rt.Config.LoopbackPorts).
 *
 * -DWIRE_16 selects the 16-bit profile (docs/p4.md "16-bit profile"): 256 B
 * payloads of 128 int16 big-endian lanes (wire.Job.ElementBytes 2), added
 * with 16-bit wrapping arithmetic in 16-bit register halves, two 128 B
 * chunks, chunk k aggregated in pipe k (every port of pipe 1 in loopback):
 * the 1024 B profile's plan with two chunks. It combines with
 * -DTEST_PROFILE, not with -DPAYLOAD_1024. The P4Runtime backend reads the
 * lane width from the P4Info (p4rt.P4Info.ElementBytes: the Processor
 * register's halves).
 */
#ifndef _CONFIGURATION_P4_
#define _CONFIGURATION_P4_

// One definition per size (the preprocessor's, so that register and table
// sizes can use them); everything else is derived from these.
#ifdef TEST_PROFILE
// aggregation slots (the pool size)
#define NUM_SLOTS 64
// receiver/sender QP state entries (all jobs)
#define MAX_RX_QPS 512
// worker entries (all jobs)
#define MAX_WORKER_ENTRIES 64
#else
#define NUM_SLOTS 8192
// 32 workers × 512 QPs
#define MAX_RX_QPS 16384
#define MAX_WORKER_ENTRIES 1024
#endif
// Registers indexed by the pool index hold both sets of every slot.
#define NUM_SLOTS_X2 (2 * NUM_SLOTS)

// CHUNKED: the payload is aggregated in chunks, chunk k in pipe k of a
// multi-pipe Tofino 1, every port of the pipes after pipe 0 that the
// chunks use in loopback (docs/p4.md "1024 B payloads"): the 1024 B
// profile (four 256 B chunks of 64 int32 lanes) and the 16-bit profile
// (two 128 B chunks of 64 int16 lanes).
#ifdef PAYLOAD_1024
#ifdef WIRE_16
#error "-DWIRE_16 and -DPAYLOAD_1024 do not combine: the 16-bit profile aggregates 256 B payloads"
#endif
#define CHUNKED
#endif
#ifdef WIRE_16
#define CHUNKED
#endif

// 32 workers: the bitmap is one 32-bit word per set, and the switch QPN
// encoding (wire.P4AppQPN) has 5 rank bits.
const bit<32> MAX_WORKERS      = 32;
// Payload bytes per packet and the IPv4 total length of a request without
// RETH/ImmDt: IPv4 20 + UDP 8 + BTH 12 + payload + ICRC 4.
#ifdef PAYLOAD_1024
const bit<16> PAYLOAD_BYTES   = 1024;
const bit<16> IPV4_LEN_NO_EXT = 1068;
#else
const bit<16> PAYLOAD_BYTES   = 256;
const bit<16> IPV4_LEN_NO_EXT = 300;
#endif

// 64 int32 values per packet, 2 per Processor instance (paired 64-bit
// register entry), 32 instances. 16-bit profile: 128 int16 values, 64 per
// chunk, 2 per Processor instance (a 32-bit register entry of two 16-bit
// halves) in each of the two pipes. PAYLOAD_BYTES / VALUES_PER_PACKET is
// the lane width on the wire (wire.Job.ElementBytes: 4, or 2).
#ifdef WIRE_16
const bit<32> VALUES_PER_PACKET = 128;
#else
const bit<32> VALUES_PER_PACKET = 64;
#endif
const bit<32> NUM_PROCESSORS    = 32;

// RoCEv2 UDP destination port.
const bit<16> ROCE_V2_UDP_PORT = 4791;

// Tofino 1 recirculation port of pipe 0 (68); pipes 1–3 use 196, 324, 452.
// The harvest pass (docs/p4.md "Passes") recirculates through the pipe the
// packet arrived on: pipe bits ++ 7w68.
const bit<7> RECIRC_PORT_LOW = 68;

#ifdef CHUNKED
// 1024 B profile. A pass through one pipe's ingress aggregates one 256 B
// chunk (64 values: the 32 Processors, as in the 256 B profile); chunk k
// lives in pipe k's copy of the Processor registers (p4app-switchML's
// plan). CHUNK_BYTES is the payload_h window every pass parses or inserts.
// 16-bit profile: the same with two 128 B chunks of 64 int16 values.
#ifdef WIRE_16
const bit<16> CHUNK_BYTES     = 128;
const bit<32> NUM_CHUNKS      = 2;
const bit<2>  LAST_CHUNK      = 1;
#else
const bit<16> CHUNK_BYTES     = 256;
const bit<32> NUM_CHUNKS      = 4;
const bit<2>  LAST_CHUNK      = 3;
#endif
// Consume pass 1 leaves pipe 0 through a loopback port of pipe 1, picked
// by NextStep.loopback_port from the pool index: key = pool index bits
// [LOOPBACK_KEY_HI:LOOPBACK_KEY_LO] (blocks of 16 slots × 2 sets), one
// entry per key value (the controller writes all of them; Go:
// p4rt.LoopbackKeyEntries, LoopbackKeyShift). Every contribution to one
// (slot, set) takes the same ports through pipes 1–3, so they reach each
// pipe in the order pipe 0 saw them (the first one writes, the last one
// completes the chunk: the order is what makes the sums right). Passes 2
// and 3 use the same port number in the next pipe; the harvest passes
// use each pipe's recirculation port (pipe bits ++ RECIRC_PORT_LOW).
const PortId_t RECIRC_PORT_PIPE0 = 68;
// Each pipe's recirculation port (pipe bits ++ RECIRC_PORT_LOW), for the
// harvest passes' egress port (NextStep.step entries).
const PortId_t RECIRC_PORT_LOW_PIPE0 = 68;  // 0 ++ 68
const PortId_t RECIRC_PORT_LOW_PIPE1 = 196; // 1 ++ 68
const PortId_t RECIRC_PORT_LOW_PIPE2 = 324; // 2 ++ 68
const PortId_t RECIRC_PORT_LOW_PIPE3 = 452; // 3 ++ 68
#define LOOPBACK_KEY_ENTRIES 16
#define LOOPBACK_KEY_LO 5
#define LOOPBACK_KEY_HI 8
#endif

// Counter sizes (indices are the codes in types.p4).
#define NUM_DECISION_CODES 4
#define NUM_DROP_CODES 16
#define NUM_RESULT_CODES 2

#endif /* _CONFIGURATION_P4_ */
