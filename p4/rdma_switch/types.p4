/*
 * types.p4 — typedefs, codes and metadata of the rdma_switch program.
 *
 * Widths follow the wire contract (aggregation/wire) and the Go model
 * (aggregation/switchmodel); each overloaded field names the Go type that
 * mirrors it.
 */
#ifndef _TYPES_P4_
#define _TYPES_P4_

#include "configuration.p4"

typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;
typedef bit<24> qpn_t;          // rdma.BTH DestQP
typedef bit<24> psn_t;          // rdma.BTH PSN
typedef bit<32> rkey_t;         // rdma.RETH RKey

// pool_index_t is the overloaded RETH rkey of a request: wire.PoolIndex.
// Bit 0 is the set (shadow copy), bits above are the slot; packet k of a
// message uses rkey + 2k (RDMAReceiver derives it from its per-QP state).
// 8192 slots × 2 sets = 14 bits; 16 bits kept for the test profile and
// headroom. Registers of (slot, set) state are indexed by it directly.
typedef bit<16> pool_index_t;
typedef bit<16> slot_t;         // wire.PoolIndex.Slot()

typedef bit<5>  worker_id_t;    // rank; wire.P4AppQPN has 5 rank bits
typedef bit<32> worker_bitmap_t;// one bit per rank (switchmodel.BitmapChecker word)
typedef bit<9>  qp_index_t;     // QP index; wire.P4AppQPN has 9 QP bits
typedef bit<16> qp_state_index_t; // index into the per-QP registers
typedef bit<8>  num_workers_t;
typedef bit<16> mgid_t;         // one multicast group per job
// One lane, big-endian on the wire: int32, or int16 in the 16-bit profile
// (-DWIRE_16; wire.Job.ElementBytes). Sums wrap at the lane width.
#ifdef WIRE_16
typedef bit<16> value_t;
#else
typedef bit<32> value_t;
#endif
typedef bit<32> counter_index_t;

// wire.Imm, 32-bit immediate: [31:16] msg id (echoed), [15:8] e0, [7:0] e1
// (signed 8-bit block exponents; the switch returns the maxima).
typedef bit<16> msg_id_t;
typedef int<8>  exponent_t;
const exponent_t EXPONENT_UNSET = -128; // switchmodel.Exponents "unset"

// A paired register entry: Processor lanes 2k (first, the high half of
// switchmodel.Processor's word) and 2k+1 (second); 64 bits, or 32 bits of
// two 16-bit halves in the 16-bit profile (each half its own 16-bit ALU:
// no carry crosses from one lane into the other).
struct value_pair_t {
    value_t first;
    value_t second;
}

// RDMAReceiver per switch-QP state (switchmodel.rxState), split over two
// registers because one Tofino 1 stateful ALU returns one word per pass and
// a MIDDLE/LAST needs both a verdict and a pool index:
//   rx_qp_state {next_psn, room}: the PSN the next MIDDLE/LAST must carry
//     (in the psn_key form, PSN << 8 | 0x80), and the pool index steps left
//     to the end of the job's pool range (a MIDDLE/LAST fits while room >
//     2). next_psn = INVALID_PSN (never a psn_key) is
//     switchmodel.rxState.valid == false: before the first FIRST/ONLY and
//     for the rest of a message after any drop (PSN gap, length, range).
//   rx_pool_index: the pool index the last packet used.
struct rx_state_t {
    bit<32> next_psn;
    bit<32> room;
}
const bit<32> INVALID_PSN = 0xFFFFFFFF;

// The 4-bit predicate a Tofino stateful ALU returns
// (RegisterAction.predicate(cmplo, cmphi)): one bit for the combination of
// the two conditions that held, bit (2·cmphi + cmplo).
typedef bit<4> salu_predicate_t;
const salu_predicate_t PRED_LO_HI     = 8; // cmplo && cmphi
const salu_predicate_t PRED_HI        = 4; // !cmplo && cmphi
const salu_predicate_t PRED_LO        = 2; // cmplo && !cmphi
const salu_predicate_t PRED_NONE      = 1; // !cmplo && !cmphi
// The predicate of a RegisterAction body. p4testgen (scripts/p4.sh
// testgen, docs/p4.md "Generated tests") cannot execute `this.predicate`
// and stops; under its test-only define the same value is spelled out.
#ifdef P4TESTGEN
#define SALU_PREDICATE(cmplo, cmphi) \
    ((cmplo) ? ((cmphi) ? PRED_LO_HI : PRED_LO) : ((cmphi) ? PRED_HI : PRED_NONE))
#define SALU_PREDICATE_LO(cmplo) ((cmplo) ? PRED_LO : PRED_NONE)
#else
#define SALU_PREDICATE(cmplo, cmphi) this.predicate(cmplo, cmphi)
#define SALU_PREDICATE_LO(cmplo) this.predicate(cmplo)
#endif

// RDMASender per (worker, QP) transmit position (switchmodel.txPos): the
// pool index the next MIDDLE/LAST result to that worker QP must have (the
// previous packet's + 2) while a message is open, TX_CLOSED otherwise.
const bit<32> TX_CLOSED = 0xFFFFFFFF;

// BitmapChecker per-slot state: one bitmap per set.
struct bitmap_pair_t {
    worker_bitmap_t set0;
    worker_bitmap_t set1;
}

// Pass of a packet through ingress (docs/p4.md "Passes"): a request makes
// PASS_REQUEST; a Broadcast or Unicast result needs the first halves of the
// paired registers and recirculates once as PASS_HARVEST.
typedef bit<2> pass_t;
const pass_t PASS_REQUEST = 0;
const pass_t PASS_HARVEST = 1;
#ifdef CHUNKED
// 1024 B and 16-bit profiles (docs/p4.md "1024 B payloads", "16-bit
// profile"), bridged_md_h.chunk = the chunk (= the pipe) of the pass:
//   PASS_REQUEST (pipe 0, from a worker): every control; chunk 0;
//   PASS_CONSUME (pipes 1–3): chunk k write / add / read, as pass 0 decided;
//   PASS_HARVEST (pipe k): read the first halves into the chunk window;
//   PASS_HARVEST_INSERT (pipe k): the parser inserts an empty chunk window
//     in front of the chunks already rebuilt; read the second halves.
const pass_t PASS_CONSUME        = 2;
const pass_t PASS_HARVEST_INSERT = 3;
typedef bit<2> chunk_t;
#endif

// switchmodel.Decision, same order.
typedef bit<2> decision_t;
const decision_t DECISION_DROP      = 0;
const decision_t DECISION_CONSUME   = 1;
const decision_t DECISION_BROADCAST = 2;
const decision_t DECISION_UNICAST   = 3;

// switchmodel.DropReason, same codes (index of Ingress.rdma_receiver.drops /
// next_step.drops counters).
typedef bit<8> drop_reason_t;
const drop_reason_t DROP_NONE               = 0;
const drop_reason_t DROP_OPCODE             = 1;
const drop_reason_t DROP_UNKNOWN_QP         = 2;
const drop_reason_t DROP_LENGTH             = 3;
const drop_reason_t DROP_PSN                = 4;
const drop_reason_t DROP_POOL_RANGE         = 5;
const drop_reason_t DROP_RETRANSMIT_INCOMPLETE = 6;
const drop_reason_t DROP_MALFORMED          = 7;
const drop_reason_t DROP_ICRC               = 8; // never: Tofino does not check the ICRC
const drop_reason_t DROP_INGRESS_LOSS       = 9;
const drop_reason_t DROP_EGRESS_LOSS        = 10;
const drop_reason_t DROP_SEND_ERROR         = 11; // never: the software switch's send failure
const drop_reason_t DROP_STALE_PSN          = 12; // older than a packet already seen on the QP
const drop_reason_t DROP_UPSTREAM_DUPLICATE = 13; // never: a leaf's second spine result (docs/switch.md "Switch hierarchy"; the Tofino leaf is a design, docs/p4.md)
const drop_reason_t DROP_TAIL_PROBE         = 14; // never: a tail probe (docs/protocol.md "Gap notices": software switch only, docs/p4.md)
const drop_reason_t DROP_TAIL_PROBE_MISSING = 15; // never: a tail probe whose contribution is missing (likewise)

// RDMASender.results counter indices (switchmodel.Counters ResultPackets,
// ResultsSkipped).
const bit<8> RESULT_SENT    = 0;
const bit<8> RESULT_SKIPPED = 1;

// switchml_md_t is the ingress metadata of a SwitchML packet, the P4 twin
// of switchmodel.Metadata.
struct switchml_md_t {
    drop_reason_t   drop_reason;
    worker_id_t     worker_id;       // Metadata.Rank
    worker_bitmap_t worker_bit;      // 1 << rank
    num_workers_t   num_workers;
    qp_index_t      qp_index;        // Metadata.QP
    qp_state_index_t qp_state_index; // qp_base + qp_index
    mgid_t          mgid;
    bit<32>         pool_index;      // Metadata.PoolIndex (32-bit from RETH)
    bool            first_packet;    // Metadata.First (FIRST/ONLY)
    bool            last_packet;     // Metadata.Last  (LAST/ONLY)
    worker_bitmap_t bitmap_before;   // my set's bitmap before this packet
    // Metadata.Retransmission: bitmap_before & worker_bit, nonzero for a
    // retransmission (BitmapChecker; tested against 0 in gateways).
    worker_bitmap_t retransmission;
    // WorkersCounter: contributions still missing after this packet (a
    // retransmission: as it stands). 0 = Metadata.Complete; with
    // retransmission == 0 also Metadata.LastContribution.
    bit<8>          missing;
    bool            has_imm;         // Metadata.HasImm
    msg_id_t        result_msg_id;   // Exponents: the result's wire.Imm
    exponent_t      result_e0;
    exponent_t      result_e1;
    bit<32>         psn_key;         // PSN << 8 | 0x80 (rx_high_psn's form)
}

// RDMAReceiver's working fields (rdma_receiver.p4), set by the parser.
struct rx_md_t {
    bit<16>          expected_len;   // opcode_position: the request's IPv4 total length
    // FIRST/ONLY range figures, one saturating subtraction each in set_qp
    // (Tofino compares two fields only in a stateful ALU; these leave a
    // value a gateway tests against zero):
    //   first_room = pool_end_index |-| rkey: 0 if rkey is past the job's
    //     range, else the pool index steps left to its end (room);
    //   below = pool_first_index |-| rkey: nonzero if rkey is before it.
    // Both are < 2^16 (pool indices are), so their low 16 bits decide.
    bit<32>          first_room;
    bit<32>          below;
    // num_qps − QPN[15:0]: 0 or negative (bit 15) when the QP index is not
    // below num_qps (a receive_qp hit has QPN bits 15..9 zero, so QPN[15:0]
    // is the QP index; both are ≤ 512).
    bit<16>          qp_room;
    salu_predicate_t verdict;        // rx_qp_state's answer (PRED_LO_HI: accepted)
    salu_predicate_t stale;          // rx_high_psn's answer (PRED_LO_HI: stale)
}

// NextStep.step's keys from the bridged header, copied by the parser
// under p4testgen's test-only define (scripts/p4.sh testgen, docs/p4.md
// "Generated tests"): the table reads them also when the header is
// invalid, where every entry that can match wildcards them, but the tool
// takes an invalid header's fields for taint and abandons the path. On a
// switch the keys are the header's fields.
#ifdef P4TESTGEN
struct testgen_bridged_t {
    pass_t     pass;
    decision_t decision;
    bit<2>     chunk;
}
#endif

struct ingress_metadata_t {
    switchml_md_t switchml_md;
    rx_md_t       rx;
    mac_addr_t    switch_mac;        // ARPICMPResponder.switch_address
    ipv4_addr_t   switch_ip;
    bit<16>       sim_drop;          // DropSimulator: ≠ 0 dropped
    // Ingress' dispatch flags, set by the parser (Ingress.apply).
    bool          responded;         // ARPICMPResponder answered
    bool          forward;           // not for the switch IP: Forwarder
    bool          accepted;          // the Processors run (accepted() held, or a bridged pass)
#ifdef CHUNKED
    bit<4>        loopback_key;      // NextStep.loopback_port key (pool index bits)
#endif
#ifdef P4TESTGEN
    testgen_bridged_t testgen_bridged;
    bit<32>       testgen_pool_first; // set_qp's pool range (testgen_steer.p4)
    bit<32>       testgen_pool_end;
#endif
}

#endif /* _TYPES_P4_ */
