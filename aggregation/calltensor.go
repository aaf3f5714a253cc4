package aggregation

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// This file is what a call's tensor is to the engine: the codec of its
// element type on the session's wire (int32 or int16 lanes, Config.Wire) —
// float32, 16-bit floats (bfloat16, float16) quantized straight into the
// wire, or int32 — the block exponents and the non-finite marker
// (Config.PropagateNonFinite), and the length check of the exponent round.

// ErrLengthMismatch: the workers of a job called an all-reduce with tensors
// of different lengths.
var ErrLengthMismatch = errors.New("length mismatch")

// codec is what a call's element type is to the engine on the session's
// wire (Config.Wire): chosen once, when the call starts (Session.codec),
// so that no stage of a message tests the type again. Its functions read
// the call's tensor of their type (call.f, call.h or call.i).
type codec struct {
	// float: block floating point (float32 or a 16-bit format). Its
	// tensor is read once for the block exponents before anything is
	// sent (lane.exponents), and each message is quantized with the
	// scale of the switch's maximum exponent for it and carries the next
	// one's exponent as its look-ahead. int32 is summed as it is.
	float bool
	// exponent (float codecs) is the block exponent of elements [lo,
	// hi); with marked, a non-finite block gives quant.NonFiniteExponent
	// instead of an error.
	exponent func(c *call, lo, hi int, marked bool) (int8, error)
	// scale is the scale of a message whose maximum block exponent over
	// the workers is maxE: 31 or 15 bits of a lane the workers share
	// (docs/quantization.md); int32's is the zero Scale, unused.
	scale func(workers int, maxE int8) (quant.Scale, error)
	// quantize writes elements [lo, hi) into buf, in the wire's lanes.
	quantize func(c *call, buf []byte, lo, hi int, sc quant.Scale) error
	// dequantize writes the sums in res back to elements [lo, hi).
	dequantize func(c *call, lo, hi int, res []byte, sc quant.Scale)
	// lookAhead is the exponent a tensor message carries for message j
	// (e0 of the immediate): 0 for int32, as p4app-switchML's workers send.
	lookAhead func(c *call, j int) int8
}

// elemType is a call's element type: the API call it came through.
type elemType int

const (
	elemFloat32  elemType = iota // AllReduce
	elemBFloat16                 // AllReduce16 with quant.BFloat16
	elemFloat16                  // AllReduce16 with quant.Float16
	elemInt32                    // AllReduceInt32 (32-bit wire only: Open refuses it on 16)
)

// codecs are the codecs by element type, on the 32-bit wire and on the
// 16-bit wire (int32 has only the first; both entries are its).
var codecs = [...][2]codec{
	elemFloat32: {
		{float: true, exponent: float32Exponent, scale: quant.NewScale, lookAhead: (*call).exponent,
			quantize: func(c *call, buf []byte, lo, hi int, sc quant.Scale) error {
				return quant.Quantize(buf, c.f[lo:hi], sc)
			},
			dequantize: func(c *call, lo, hi int, res []byte, sc quant.Scale) {
				quant.Dequantize(c.f[lo:hi], res, sc)
			}},
		{float: true, exponent: float32Exponent, scale: quant.NewScaleWire16, lookAhead: (*call).exponent,
			quantize: func(c *call, buf []byte, lo, hi int, sc quant.Scale) error {
				return quant.QuantizeWire16(buf, c.f[lo:hi], sc)
			},
			dequantize: func(c *call, lo, hi int, res []byte, sc quant.Scale) {
				quant.DequantizeWire16(c.f[lo:hi], res, sc)
			}},
	},
	elemBFloat16: halfCodecs(quant.BFloat16),
	elemFloat16:  halfCodecs(quant.Float16),
	elemInt32:    {int32Codec, int32Codec},
}

// codec is the codec of element type t on the session's wire.
func (s *Session) codec(t elemType) *codec {
	if s.cfg.Wire == 16 {
		return &codecs[t][1]
	}
	return &codecs[t][0]
}

func float32Exponent(c *call, lo, hi int, marked bool) (int8, error) {
	if marked {
		return quant.MarkedBlockExponent(c.f[lo:hi]), nil
	}
	return quant.BlockExponent(c.f[lo:hi])
}

// halfCodecs are the codecs of 16-bit floats in format f, quantized
// straight into the wire's lanes (docs/quantization.md, "16-bit inputs").
func halfCodecs(f quant.Format) [2]codec {
	exponent := func(c *call, lo, hi int, marked bool) (int8, error) {
		if marked {
			return quant.MarkedBlockExponent16(c.h[lo:hi], f), nil
		}
		return quant.BlockExponent16(c.h[lo:hi], f)
	}
	return [2]codec{
		{float: true, exponent: exponent, scale: quant.NewScale, lookAhead: (*call).exponent,
			quantize: func(c *call, buf []byte, lo, hi int, sc quant.Scale) error {
				return quant.Quantize16(buf, c.h[lo:hi], f, sc)
			},
			dequantize: func(c *call, lo, hi int, res []byte, sc quant.Scale) {
				quant.Dequantize16(c.h[lo:hi], res, f, sc)
			}},
		{float: true, exponent: exponent, scale: quant.NewScaleWire16, lookAhead: (*call).exponent,
			quantize: func(c *call, buf []byte, lo, hi int, sc quant.Scale) error {
				return quant.QuantizeHalfWire16(buf, c.h[lo:hi], f, sc)
			},
			dequantize: func(c *call, lo, hi int, res []byte, sc quant.Scale) {
				quant.DequantizeHalfWire16(c.h[lo:hi], res, f, sc)
			}},
	}
}

// int32Codec encodes int32 elements as they are: no exponents (round 0
// carries only the call's length), no scale.
var int32Codec = codec{
	scale:     func(int, int8) (quant.Scale, error) { return quant.Scale{}, nil },
	lookAhead: func(*call, int) int8 { return 0 },
	quantize: func(c *call, buf []byte, lo, hi int, _ quant.Scale) error {
		quant.EncodeInt32(buf, c.i[lo:hi])
		return nil
	},
	dequantize: func(c *call, lo, hi int, res []byte, _ quant.Scale) {
		quant.DecodeInt32(c.i[lo:hi], res)
	},
}

// exponents reads the lane's messages of a float call once, before
// anything of the call is sent: each message's block exponent, which the
// message before it on its QP carries as the look-ahead (send.go,
// sendNext), and so, without Config.PropagateNonFinite, the check that
// every element is finite: a NaN or ±Inf fails the call with nothing sent
// (driveLanes). Each lane reads its own messages on its own goroutine,
// the core that quantizes and dequantizes them next: with the pass split
// by halves of the tensor instead, two lanes were no faster than one
// (docs/benchmarks.md "Lanes: two cores for one worker"). A non-finite
// element's error names its index in the tensor (the lane's first).
func (s *lane) exponents(c *call) error {
	if !c.codec.float {
		return nil
	}
	first, last := s.qps[0].index, s.qps[len(s.qps)-1].index
	for base := 0; base+first < c.msgs; base += s.cfg.QPs {
		for j := base + first; j <= min(base+last, c.msgs-1); j++ {
			lo, hi := c.span(j)
			e, err := c.codec.exponent(c, lo, hi, s.cfg.PropagateNonFinite)
			if err != nil {
				var nf *quant.NonFiniteError
				if errors.As(err, &nf) {
					err = &quant.NonFiniteError{Index: lo + nf.Index, Value: nf.Value}
				}
				return err
			}
			c.exps[j] = e
		}
	}
	return nil
}

// firstBadElement is, of the lanes' exponents errors, the one of the
// lowest element of the tensor; nil if there is none.
func firstBadElement(errs []error) error {
	var first error
	at := -1
	for _, err := range errs {
		if err == nil {
			continue
		}
		var nf *quant.NonFiniteError
		switch {
		case !errors.As(err, &nf):
			return err
		case at < 0 || nf.Index < at:
			first, at = err, nf.Index
		}
	}
	return first
}

// badInput is an error of the caller's tensor, found before anything of
// the call was sent (exponents): the call fails and the session goes on.
type badInput struct{ error }

// inputError is AllReduce's error for a tensor exponents refused.
func inputError(err error) error {
	if err == nil {
		return nil
	}
	var nf *quant.NonFiniteError // declared here: it escapes
	switch {
	case errors.As(err, &nf):
		return fmt.Errorf("aggregation: AllReduce: element %d is %v: gradients must be finite (nothing was sent; the other workers wait for this one until their PeerTimeout; Config.PropagateNonFinite sends such blocks back as NaN instead): %w", nf.Index, nf.Value, err)
	}
	return fmt.Errorf("aggregation: AllReduce: %w", err)
}

// exponent is the block exponent of tensor message j (lane.exponents), or
// MinExponent (the identity of the switch's max) if there is no such
// message.
func (c *call) exponent(j int) int8 {
	if j >= c.msgs || c.exps == nil {
		return quant.MinExponent
	}
	return c.exps[j]
}

// AllReduce16 is AllReduce for a tensor of 16-bit floats in format f
// (quant.BFloat16 or quant.Float16, as raw bits): each is quantized straight
// into the float32 session's block-floating-point wire (32-bit or, with
// Config.Wire 16, 16-bit lanes), and the result is rounded back to f
// (docs/quantization.md, "16-bit inputs"). The session
// must have been opened with DType wire.Float32; workers may mix float32
// and 16-bit calls only in the same order and with the same lengths.
func (s *Session) AllReduce16(ctx context.Context, x []uint16, f quant.Format) error {
	if s.cfg.DType != wire.Float32 {
		return fmt.Errorf("aggregation: AllReduce16 on an %v session: open the session with DType wire.Float32", s.cfg.DType)
	}
	if f != quant.BFloat16 && f != quant.Float16 {
		return fmt.Errorf("aggregation: AllReduce16: format %v: use quant.BFloat16 or quant.Float16", f)
	}
	if len(x) == 0 {
		return errors.New("aggregation: AllReduce16 of an empty tensor: pass at least one element")
	}
	t := elemBFloat16
	if f == quant.Float16 {
		t = elemFloat16
	}
	return s.runCall(ctx, call{h: x, n: len(x), codec: s.codec(t)})
}

// AllReduce16Async queues AllReduce16(ctx, x, f) and returns at once.
// Otherwise as AllReduceAsync.
func (s *Session) AllReduce16Async(ctx context.Context, x []uint16, f quant.Format) *Handle {
	return s.enqueue(asyncCall{ctx: ctx, x16: x, f16: f})
}

// The exponent round's payload carries the call's length, so workers
// that called with different lengths find out at once instead of after
// the peer timeout (docs/protocol.md "Length check"). On the 32-bit wire
// each worker writes the length's lengthLimbs bytes l_k as int32 pairs
// (l_k, l_k²); the switch sums them. Every worker then holds Σl_k and
// Σl_k² over the W workers, and all lengths are equal exactly when, for
// every k, Σl_k = W·l_k and Σl_k² = W·l_k² (Cauchy–Schwarz: equality only
// for equal l_k), so every worker sees a mismatch, not only those whose
// length differs from the mean. No sum can wrap: W ≤ 2^16 and l_k² < 2^16.
//
// On the 16-bit wire an int16 lane holds less than a byte's square times
// the workers, so the digits are bits: each worker writes the length's
// lengthBits16 bits b_k as one int16 lane each. Σb_k counts the workers
// whose bit k is set, so Σb_k = W·b_k holds for every k on every worker
// exactly when all lengths are equal (Σb_k is 0 or W only if every b_k
// agrees): no square is needed. No sum can wrap as long as W < 2^15, above
// the 16-bit wire's limit of wire.MaxWire16Workers workers (its
// headroom, docs/quantization.md), which Open enforces.
const (
	lengthLimbs  = 6  // lengths below 2^48
	lengthBits16 = 48 // lengths below 2^48
)

// lengthHeaderSize is the header's size on the session's wire: it fits
// the smallest packet on either.
func (s *Session) lengthHeaderSize() uint64 {
	if s.cfg.Wire == 16 {
		return 2 * lengthBits16
	}
	return 4 * 2 * lengthLimbs
}

// putLengthHeader writes the length header of a call of n elements into
// buf, in the lanes of a wireBits-bit wire.
func putLengthHeader(buf []byte, n, wireBits int) {
	if wireBits == 16 {
		for k := range lengthBits16 {
			binary.BigEndian.PutUint16(buf[2*k:], uint16(n>>k)&1)
		}
		return
	}
	for k := range lengthLimbs {
		l := uint32(n>>(8*k)) & 0xFF
		binary.BigEndian.PutUint32(buf[8*k:], l)
		binary.BigEndian.PutUint32(buf[8*k+4:], l*l)
	}
}

// checkLengthHeader checks the summed header res of an exponent round.
func (s *Session) checkLengthHeader(res []byte, n int) error {
	w := uint32(s.cfg.Workers)
	other := 0 // the other worker's length when there are two
	bad := false
	if s.cfg.Wire == 16 {
		for k := range lengthBits16 {
			b := uint32(n>>k) & 1
			// The lane's sum is at most W < 2^15: read as unsigned it is
			// the count itself.
			sum := uint32(binary.BigEndian.Uint16(res[2*k:]))
			if sum != w*b {
				bad = true
			}
			other |= int((sum-b)&1) << k
		}
	} else {
		for k := range lengthLimbs {
			l := uint32(n>>(8*k)) & 0xFF
			sum, sq := binary.BigEndian.Uint32(res[8*k:]), binary.BigEndian.Uint32(res[8*k+4:])
			if sum != w*l || sq != w*l*l {
				bad = true
			}
			other |= int(sum-l) << (8 * k)
		}
	}
	if !bad {
		return nil
	}
	if w == 2 {
		return fmt.Errorf("aggregation: %v: %w: this worker's all-reduce has %d elements, the other worker's %d: every worker must pass a tensor of the same length, in the same order of calls", s, ErrLengthMismatch, n, other)
	}
	return fmt.Errorf("aggregation: %v: %w: this worker's all-reduce has %d elements and at least one other worker's a different number: every worker must pass a tensor of the same length, in the same order of calls", s, ErrLengthMismatch, n)
}
