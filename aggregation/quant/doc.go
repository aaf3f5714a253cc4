// Package quant is the SwitchML quantizer: it turns a worker's float32
// gradients into the big-endian int32 payload the switch adds up, and the
// switch's int32 sums back into float32 results.
//
// # Block floating point
//
// A worker cuts its tensor into messages. For every message it computes the
// block exponent e = [BlockExponent] (the smallest e with 2^e > max|x|) and
// sends it to the switch one message ahead, in the immediate of the previous
// message on the same QP (see aggregation/wire.Imm). The switch returns the
// maximum exponent over the workers, and every worker quantizes that message
// with the same [Scale], built by [NewScale] from the number of workers n and
// that maximum exponent:
//
//	factor = 2^(31 − ⌈log2 n⌉ − e)   (at most 2^126)
//	q      = roundToNearestEven(clamp(x·factor, ±limit)),  limit = ⌊(2^31−1)/n⌋
//
// so the n-way int32 sum computed by the switch can never wrap. The factor is
// a power of two: x·factor is exact, and inputs that fit the block's
// 31 − ⌈log2 n⌉ bits (small integers, powers of two, ones) sum exactly.
// [Quantize] writes q as big-endian int32 into the QP's registered buffer;
// [Dequantize] turns the switch's sums back into float32 with one exact
// float32 multiplication by the reciprocal of the factor. Every step is a fixed sequence of IEEE-754
// operations in round-to-nearest-even, so all workers get bit-identical results
// from identical sums, and the AVX2 kernels give bit-identical results to the
// scalar reference code. The error bound of the whole round trip is
// [Scale.ErrorBound]; docs/quantization.md derives it.
//
// Int32 jobs are exact: [EncodeInt32] and [DecodeInt32] only swap bytes.
//
// Non-finite input (NaN, ±Inf) is never quantized silently: [BlockExponent]
// and [Quantize] return a *[NonFiniteError] naming the first bad element.
// Where an overflow must reach every worker instead (fp16 loss scaling),
// [MarkedBlockExponent] gives [NonFiniteExponent], the largest int8, which
// no finite block reaches and the switch's max carries unchanged; a Scale
// built for it quantizes to zeros and dequantizes to NaN.
//
// # 16-bit inputs
//
// bfloat16 and float16 tensors ([Format]) are quantized straight into the
// same int32 wire ([BlockExponent16], [Quantize16], [Dequantize16]): each
// value widens to float32 exactly and is quantized as float32 would be; the
// result is rounded back to the format ([Scale.ErrorBound16]).
//
// # The 16-bit wire
//
// A job may put int16 lanes on the wire, twice the elements per packet:
// [NewScaleWire16] builds its scale with 15 magnitude bits instead of 31
// (factor 2^(15 − ⌈log2 n⌉ − e), limit ⌊(2^15−1)/n⌋, n ≤ 2^14), and
// [QuantizeWire16], [DequantizeWire16], [QuantizeHalfWire16] and
// [DequantizeHalfWire16] write and read big-endian int16 with the same
// float semantics. A [Scale] knows its width ([Scale.WireBytes]); the
// functions of the other width refuse it.
//
// # Implementation
//
// On amd64 CPUs with AVX2 (and FMA) the loops run in Go assembly (8 lanes per
// instruction, non-temporal stores for outputs of 1 MiB or more, like the
// runtime's memmove), for float32, int32 and both 16-bit formats (float16
// also needs F16C); elsewhere, with the purego build tag, or on CPUs
// without them, the scalar Go reference runs. The choice is made once at
// start-up (golang.org/x/sys/cpu) and does not change results.
//
// # Concurrency
//
// Everything in this package is a pure function of its arguments or a plain
// value: safe for concurrent use, provided concurrent calls do not write the
// same destination memory. Nothing allocates except the error values returned
// for non-finite input.
package quant
