package aggregation

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// Defaults for the zero fields of Config.
const (
	// DefaultQPs is 8: with 16-packet messages that is 128 KiB in flight
	// per worker, enough to keep the switch busy while results travel back
	// (4 QPs left the pipeline idle between rounds: 0.99× the ring
	// all-reduce on loopback against 1.17× with 8; docs/benchmarks.md).
	DefaultQPs               = 8
	DefaultPacketSize        = 1024
	DefaultPacketsPerMessage = 16
	// LargeJobWorkers is where the default geometry changes
	// (DefaultGeometry): more workers than one Tofino pipe aggregates.
	LargeJobWorkers = 32
	// LargeJobQPs and LargeJobPacketsPerMessage are the geometry of a job
	// of more than LargeJobWorkers workers: the same 128 packets in flight
	// per worker as DefaultQPs × DefaultPacketsPerMessage, in messages a
	// quarter as long.
	LargeJobQPs               = 32
	LargeJobPacketsPerMessage = 4
	// DefaultRetransmitTimeout is the floor of the adaptive retransmission
	// timeout: 1 ms, tens of round trips of a data-centre link. The timer
	// is the last resort: most losses are repaired by RACK about one round
	// trip after they happen (docs/protocol.md "Loss recovery"), so the
	// floor matters for the last messages of a call and for a lost resend.
	// (p4app-switchML uses a fixed 10 ms; with it, 1 % loss made an
	// all-reduce 80 times slower than a loss-free one.)
	DefaultRetransmitTimeout = 1 * time.Millisecond
	// DefaultBackoffAfter is 1: a QP's timeout doubles on every expiry of
	// the same message (RFC 6298, 5.5), so a slow peer or a long wait for
	// the other workers to join a call costs a few resends, not one per
	// floor period. (p4app-switchML doubles after 100.)
	DefaultBackoffAfter = 1
	// DefaultQueueDelay is Config.QueueDelay's default.
	DefaultQueueDelay = 500 * time.Microsecond
	// DefaultMaxRetransmitTimeout caps the doubling.
	DefaultMaxRetransmitTimeout = time.Second
	// DefaultPeerTimeout bounds how long a message may go without a result
	// before AllReduce gives up on the switch or a peer.
	DefaultPeerTimeout = 10 * time.Second
)

// DefaultGeometry is the QPs and packets per message of a job of workers
// workers whose Config leaves them zero. Up to LargeJobWorkers workers:
// DefaultQPs messages of DefaultPacketsPerMessage packets. Beyond that,
// LargeJobQPs messages of LargeJobPacketsPerMessage packets: the same
// packets in flight, in shorter messages. A QP's next message waits until
// all of its last one's results are back, so a message is held up by a
// repair round trip whenever one of the 2·n·k packets that carry it (k
// packets of each of n workers, up and down) is lost; at 1 % loss and 64
// workers every 16-packet message was, and a call took 1.71× its
// loss-free time, against 1.29–1.34× with 4-packet messages (the simulation,
// docs/benchmarks.md "Message geometry at scale"). Up to 32 workers — one
// Tofino's jobs, and every job one host can run — fewer, longer messages
// cost the host less per byte.
func DefaultGeometry(workers int) (qps, packetsPerMessage int) {
	if workers > LargeJobWorkers {
		return LargeJobQPs, LargeJobPacketsPerMessage
	}
	return DefaultQPs, DefaultPacketsPerMessage
}

// Limits of Config.
const (
	// MaxQPs is the most queue pairs per worker (Config.QPs).
	MaxQPs = 1 << 12
	// MaxPacketsPerMessage is the most packets per message
	// (Config.PacketsPerMessage).
	MaxPacketsPerMessage = 1 << 14
)

// Config describes one worker of a job. Every worker of a job passes the same
// SessionID, Workers, QPs, PacketSize, PacketsPerMessage and DType (the
// controller refuses a mismatch and names it).
type Config struct {
	// Device is the RDMA NIC to use (verbs/soft, verbs/ibverbs). Required.
	// The session does not close it.
	Device verbs.Device

	// Controller is a connection to the controller, shared or owned by the
	// caller. If nil, Open dials ControllerAddr (control.DefaultAddr when
	// empty) and closes that connection in Close.
	Controller     *control.Client
	ControllerAddr string

	// SessionID names the job; every worker of the job passes the same.
	SessionID uint32
	// Rank is this worker's rank in [0, Workers).
	Rank int
	// Workers is the number of workers of the job (at least 1).
	Workers int

	// QPs is the number of UC queue pairs to the switch (if 0,
	// DefaultGeometry's for Workers).
	// With at most one message in flight per QP, the window is at most
	// QPs × PacketsPerMessage packets (QueueDelay trims it to what the
	// path needs): size it to the bandwidth-delay product.
	QPs int
	// Threads is how many goroutines drive the QPs (1 if 0): each drives
	// a block of QPs/Threads QPs through its own completion queue, so one call
	// uses up to Threads cores for quantizing, dequantizing and the NIC's
	// work requests, as p4app-switchML's client runs a thread per group
	// of QPs. At most QPs; a local choice that other workers need not
	// share. More than one pays off where the host is the bottleneck (a
	// fast RNIC); with the userspace NIC, whose socket is shared, it
	// mostly adds goroutines.
	Threads int
	// PacketSize is the payload bytes per packet (the path MTU): 256, 512,
	// 1024, 2048 or 4096 (the Tofino program: 256, or 1024 with
	// recirculation). DefaultPacketSize if 0.
	PacketSize int
	// PacketsPerMessage is a power of two (if 0, DefaultGeometry's for
	// Workers).
	PacketsPerMessage int
	// DType is the element type: wire.Float32 (block floating point) or
	// wire.Int32 (exact). AllReduce serves Float32 sessions,
	// AllReduceInt32 Int32 sessions.
	DType wire.DType
	// Wire is the width of an element on the wire in bits: 32 (the
	// default when 0) or 16 (docs/protocol.md "The 16-bit wire"). A 16-bit
	// job carries twice the elements per packet, with 15 − ⌈log2 Workers⌉
	// bits per worker instead of 31 − ⌈log2 Workers⌉ (docs/quantization.md);
	// it serves Float32 sessions only (int32 needs 32-bit lanes) and at
	// most wire.MaxWire16Workers workers. Every worker of a job passes the
	// same; Open fails with an error wrapping wire.ErrElementWidth when
	// the switch cannot sum 16-bit lanes (a front end falls back to the
	// 32-bit wire, or says to).
	Wire int
	// TensorBytes, when the length of every call's tensor is fixed (the
	// CLI's --size), is that length in bytes (4 per element). Open
	// registers it and the controller refuses workers whose lengths
	// differ, naming both, with an error wrapping control.ErrMismatch. 0:
	// lengths vary per call and are not checked at registration.
	TensorBytes int

	// RetransmitTimeout is the smallest per-QP retransmission timeout
	// (DefaultRetransmitTimeout if 0). A few round trips. The timeout of a
	// new message adapts to the measured times to result (RFC 6298: smoothed
	// RTT + 4 × its variation, sampled from messages sent once), within
	// [RetransmitTimeout, MaxRetransmitTimeout]; a QP's first message of a
	// call has its own estimate, since it also waits for the other workers
	// to join the call.
	RetransmitTimeout time.Duration
	// BackoffAfter doubles a QP's timeout after that many consecutive
	// timeouts of one message (DefaultBackoffAfter if 0), up to
	// MaxRetransmitTimeout (DefaultMaxRetransmitTimeout if 0).
	BackoffAfter         int
	MaxRetransmitTimeout time.Duration
	// QueueDelay sets the worker's window: it keeps in flight at most two
	// messages plus QueueDelay's worth of packets at the path's measured
	// delivery rate (docs/protocol.md "Congestion"), and never fewer
	// than two messages or more than one per QP. That is the bottleneck
	// link's round trip (a message up, its result down) and a queue that
	// rides out the hosts' delays; more only lengthens the queue.
	// DefaultQueueDelay if 0; negative: no window, every QP keeps a
	// message in flight.
	QueueDelay time.Duration
	// PeerTimeout: if a message has had no result for this long, the switch
	// or another worker is taken for dead and AllReduce fails
	// (DefaultPeerTimeout if 0). A worker that dies is normally reported
	// sooner by the controller, which aborts the job when the worker's
	// keep-alive stream breaks.
	PeerTimeout time.Duration

	// PropagateNonFinite sends a message whose float input holds a NaN or
	// ±Inf with the non-finite marker as its block exponent
	// (quant.NonFiniteExponent) instead of failing the all-reduce: the
	// switch's max carries the marker, and that message comes back NaN on
	// every worker (what fp16 mixed precision's loss scaling expects, to
	// skip the step). Off, a non-finite input fails AllReduce before
	// anything is sent (the CLI's bench and worker keep it off).
	PropagateNonFinite bool

	// WholeMessageResend resends whole messages, as p4app-switchML's
	// workers do, instead of the packets whose results are missing one by
	// one (per-packet recovery, docs/protocol.md "Loss recovery"). Set it
	// for a switch that answers a retransmission with the message id it
	// stored instead of the retransmission's own (p4app-switchML's Tofino
	// program does; ours and the software switch echo the request's id).
	// Per-packet recovery also needs PacketsPerMessage ≤ 64.
	WholeMessageResend bool

	// NoGapNotices tells the controller this worker does not take gap
	// notices: zero-length writes from the switch naming packet writes it
	// lost on the way up (docs/protocol.md "Gap notices"). By default it
	// takes them, and a job whose workers all do gets them from a switch
	// that sends them (the software switch); the lost packets are then
	// resent at once, and a worker waits a round trip longer before it
	// resends packets whose slots wait for another worker's.
	NoGapNotices bool

	// Writes chooses how a message goes on the wire: AdaptiveWrites (the
	// default), MessageWrites or PacketWrites. Give every worker of a job
	// the same value; mixed jobs give correct results, more slowly. The
	// job overrides it: when a worker's NIC wedges on a truncated
	// multi-packet WRITE (Linux rxe, verbs.UCTruncation), every worker of
	// the job sends packet writes, decided at registration (Open fails on
	// a worker set to MessageWrites then).
	Writes Writes
}

// Writes is how a worker puts a message on the wire (docs/protocol.md
// "Message writes and packet writes").
type Writes int

const (
	// AdaptiveWrites sends packet writes in the session's first call,
	// then message writes until a call shows loss (a worker's RACK found
	// at least one message in 64 lost, and it told the others through
	// the switch in e1), then packet writes, trying message writes again
	// after 16 calls, and after twice as many each time the try still
	// shows loss (up to 1024); every worker of the job decides alike
	// (docs/protocol.md). Without per-packet recovery
	// (WholeMessageResend, or more than 64 packets per message) it is
	// MessageWrites.
	AdaptiveWrites Writes = iota
	// MessageWrites sends each message as one multi-packet UC RDMA WRITE
	// (FIRST, MIDDLE…, LAST WITH IMMEDIATE), as p4app-switchML's workers
	// do: one completion per message at each end, the least CPU per byte.
	// With UC, one lost packet loses the whole message's result.
	MessageWrites
	// PacketWrites sends each packet of a message as a UC RDMA WRITE ONLY
	// WITH IMMEDIATE of its own (to its own slot, with a packet message
	// id), so the switch's results are one-packet writes too: a lost packet
	// costs a one-packet resend instead of the message, at one completion
	// per packet. Needs per-packet recovery; the only way to send more than
	// one packet per message to or from Soft-RoCE (rxe), so a job with an
	// rxe worker sends them whatever its workers' Writes (Config.Writes).
	PacketWrites
)

// String is the name ParseWrites accepts.
func (w Writes) String() string {
	switch w {
	case AdaptiveWrites:
		return "auto"
	case MessageWrites:
		return "message"
	case PacketWrites:
		return "packet"
	}
	return fmt.Sprintf("Writes(%d)", int(w))
}

// ParseWrites parses "auto", "message" or "packet".
func ParseWrites(s string) (Writes, error) {
	for w := AdaptiveWrites; w <= PacketWrites; w++ {
		if s == w.String() {
			return w, nil
		}
	}
	return 0, fmt.Errorf("writes %q: use auto, message or packet", s)
}

// ErrConfig is wrapped by every configuration error Open returns.
var ErrConfig = errors.New("invalid configuration")

// FieldError is a Config field whose value Open refuses; it wraps
// ErrConfig. A front end renders it in its own terms (errors.As), e.g. a
// command-line flag or an environment variable for Field.
type FieldError struct {
	Field  string // the Config field: "QPs", "PacketsPerMessage", …
	Value  any    // its value, defaults filled in
	Reason string // what a valid value is
	// Max is the largest valid value where the reason is a limit, else 0.
	Max int
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("aggregation: %v: Config.%s is %v: %s", ErrConfig, e.Field, e.Value, e.Reason)
}

// Unwrap returns ErrConfig.
func (e *FieldError) Unwrap() error { return ErrConfig }

func fieldError(field string, value any, format string, args ...any) error {
	return &FieldError{Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// packetSizeList is wire.PacketSizes in words: "256, 512, … and 4096".
func packetSizeList() string {
	s := ""
	for i, n := range wire.PacketSizes {
		switch {
		case i == 0:
		case i == len(wire.PacketSizes)-1:
			s += " and "
		default:
			s += ", "
		}
		s += strconv.Itoa(n)
	}
	return s
}

// Validate checks c as Open does, but for the Device, which may be nil:
// a job's parameters can be checked before a NIC is opened (every worker of
// a job, or a launcher, checking its flags). Zero fields stand for their
// defaults. Errors are *FieldError.
func (c Config) Validate() error {
	_, err := c.defaults()
	return err
}

// withDefaults fills the zero fields and validates the whole Config.
func (c Config) withDefaults() (Config, error) {
	if c.Device == nil {
		return c, fieldError("Device", "nil", "open an RDMA device (soft.Open, ibverbs.Open)")
	}
	c, err := c.defaults()
	if err != nil {
		return c, err
	}
	if !c.Device.Addr().IsValid() {
		return c, fieldError("Device", c.Device.Name(), "it has no IP address")
	}
	return c, nil
}

// defaults fills the zero fields and validates all but the Device.
func (c Config) defaults() (Config, error) {
	if c.Workers < 1 || c.Workers > quant.MaxWorkers {
		return c, &FieldError{Field: "Workers", Value: c.Workers, Max: quant.MaxWorkers, Reason: fmt.Sprintf("a job has 1 to %d workers", quant.MaxWorkers)}
	}
	if c.Rank < 0 || c.Rank >= c.Workers {
		return c, fieldError("Rank", c.Rank, "ranks of a %d-worker job are 0..%d", c.Workers, c.Workers-1)
	}
	if c.TensorBytes < 0 || c.TensorBytes%4 != 0 {
		return c, fieldError("TensorBytes", c.TensorBytes, "give the tensor's length in bytes (4 per element), or 0 when it varies")
	}
	qps, ppm := DefaultGeometry(c.Workers)
	if c.QPs == 0 {
		c.QPs = qps
	}
	if c.QPs < 0 || c.QPs > MaxQPs {
		return c, &FieldError{Field: "QPs", Value: c.QPs, Max: MaxQPs, Reason: fmt.Sprintf("use 1 to %d queue pairs", MaxQPs)}
	}
	if c.Threads == 0 {
		c.Threads = 1
	}
	if c.Threads < 0 || c.Threads > MaxQPs {
		return c, &FieldError{Field: "Threads", Value: c.Threads, Max: MaxQPs, Reason: "use 1 or more driving goroutines (a session uses at most one per QP)"}
	}
	if c.PacketSize == 0 {
		c.PacketSize = DefaultPacketSize
	}
	if err := wire.CheckPacketSize(c.PacketSize); err != nil {
		return c, fieldError("PacketSize", c.PacketSize, "use %s bytes", packetSizeList())
	}
	if c.PacketsPerMessage == 0 {
		c.PacketsPerMessage = ppm
	}
	if !wire.IsPowerOfTwo(c.PacketsPerMessage) || c.PacketsPerMessage > MaxPacketsPerMessage {
		return c, &FieldError{Field: "PacketsPerMessage", Value: c.PacketsPerMessage, Max: MaxPacketsPerMessage,
			Reason: fmt.Sprintf("use a power of two, at most %d packets", MaxPacketsPerMessage)}
	}
	if c.DType != wire.Float32 && c.DType != wire.Int32 {
		return c, fieldError("DType", c.DType, "use wire.Float32 or wire.Int32")
	}
	if c.Wire == 0 {
		c.Wire = 32
	}
	switch {
	case c.Wire != 32 && c.Wire != 16:
		return c, fieldError("Wire", c.Wire, "the wire carries 32-bit or 16-bit elements")
	case c.Wire == 16 && c.DType == wire.Int32:
		return c, fieldError("Wire", c.Wire, "int32 needs the 32-bit wire")
	case c.Wire == 16 && c.Workers > wire.MaxWire16Workers:
		return c, &FieldError{Field: "Workers", Value: c.Workers, Max: wire.MaxWire16Workers,
			Reason: fmt.Sprintf("the 16-bit wire holds at most %d workers; use the 32-bit wire", wire.MaxWire16Workers)}
	}
	if c.RetransmitTimeout == 0 {
		c.RetransmitTimeout = DefaultRetransmitTimeout
	}
	if c.MaxRetransmitTimeout == 0 {
		c.MaxRetransmitTimeout = max(DefaultMaxRetransmitTimeout, c.RetransmitTimeout)
	}
	if c.BackoffAfter == 0 {
		c.BackoffAfter = DefaultBackoffAfter
	}
	if c.PeerTimeout == 0 {
		c.PeerTimeout = DefaultPeerTimeout
	}
	if c.QueueDelay == 0 {
		c.QueueDelay = DefaultQueueDelay
	}
	switch {
	case c.Writes < AdaptiveWrites || c.Writes > PacketWrites:
		return c, fieldError("Writes", c.Writes, "use AdaptiveWrites, MessageWrites or PacketWrites")
	case c.Writes == PacketWrites && c.WholeMessageResend:
		return c, fieldError("Writes", c.Writes, "a WholeMessageResend switch cannot answer packet writes; use MessageWrites")
	case c.Writes == PacketWrites && c.PacketsPerMessage > 1<<wire.MaxPacketIDBits:
		return c, &FieldError{Field: "PacketsPerMessage", Value: c.PacketsPerMessage, Max: 1 << wire.MaxPacketIDBits,
			Reason: fmt.Sprintf("packet writes name at most %d packets of a message", 1<<wire.MaxPacketIDBits)}
	}
	switch {
	case c.RetransmitTimeout < 0:
		return c, fieldError("RetransmitTimeout", c.RetransmitTimeout, "use a positive duration of a few round trips")
	case c.MaxRetransmitTimeout < c.RetransmitTimeout:
		return c, fieldError("MaxRetransmitTimeout", c.MaxRetransmitTimeout, "below RetransmitTimeout %v", c.RetransmitTimeout)
	case c.BackoffAfter < 0:
		return c, fieldError("BackoffAfter", c.BackoffAfter, "use a positive count")
	case c.PeerTimeout < c.RetransmitTimeout:
		return c, fieldError("PeerTimeout", c.PeerTimeout, "below RetransmitTimeout %v: a peer would be taken for dead before the first resend", c.RetransmitTimeout)
	}
	return c, nil
}

// perPacketRecovery says whether a message's packets can be resent, and
// sent (packet writes), one by one: each needs a packet message id, which
// names at most 1<<wire.MaxPacketIDBits packets, and a switch that echoes
// the request's id (not WholeMessageResend).
func (c *Config) perPacketRecovery() bool {
	return c.PacketsPerMessage > 1 && c.PacketsPerMessage <= 1<<wire.MaxPacketIDBits && !c.WholeMessageResend
}

// RegisteredBytes is the registered memory Open allocates for c (zero
// fields: the defaults): per QP, recvRegions receive regions and a send
// staging region, one message each (docs/protocol.md "Buffer layout"). A front end checks it against the memory it has before it
// opens a session.
func (c Config) RegisteredBytes() int {
	qps, pkt, ppm := c.QPs, c.PacketSize, c.PacketsPerMessage
	dq, dp := DefaultGeometry(c.Workers)
	if qps == 0 {
		qps = dq
	}
	if pkt == 0 {
		pkt = DefaultPacketSize
	}
	if ppm == 0 {
		ppm = dp
	}
	return (recvRegions + 1) * qps * pkt * ppm
}

// messageBytes is the payload of one message.
func (c *Config) messageBytes() int { return c.PacketSize * c.PacketsPerMessage }

// elementBytes is the width of one element on the wire (Wire, defaults
// filled in): 4 or 2 bytes.
func (c *Config) elementBytes() int { return c.Wire / 8 }
