//go:build amd64 && !purego

#include "textflag.h"

// AVX2 (and F16C) kernels for the 16-bit formats, for dispatch_amd64.go.
// They compute exactly what half.go's scalar code computes:
//
//   - widening: bfloat16 is the top half of a float32 (VPMOVZXWD, VPSLLD
//     $16); float16 converts exactly with VCVTPH2PS (subnormals included:
//     Go never sets MXCSR's DAZ). A float16 signalling NaN comes out quiet,
//     where the scalar table keeps it signalling: either quantizes to −limit
//     and reports non-finite input, so the outputs agree.
//   - then the float32 quantizer of quant_amd64.s (QFLOAT below is its
//     QUANT8 after the load).
//   - narrowing: bfloat16 is the scalar integer rule (b + 0x7FFF +
//     (b>>16)&1) >> 16 lane by lane (VPADDD wraps as uint32 does);
//     float16 is VCVTPS2PH with imm8 0 (round to nearest even, MXCSR
//     ignored): ±Inf from 65520 up, correctly rounded subnormals, as
//     Float16.FromFloat32. The two differ only for NaN input (VCVTPS2PH
//     keeps the payload, FromFloat32 gives 0x7E00), which Dequantize16
//     never narrows: its float32 is a finite sum times a finite inverse.
//   - the max-abs scan works on the 16-bit patterns: clear the sign
//     (VPAND 0x7FFF), unsigned max (VPMAXUW), as maxAbsBits16Generic.

// func maxAbsBits16AVX2(src *uint16, n int) uint16
TEXT ·maxAbsBits16AVX2(SB), NOSPLIT, $0-18
	MOVQ     src+0(FP), SI
	MOVQ     n+8(FP), CX
	VPCMPEQW Y15, Y15, Y15
	VPSRLW   $1, Y15, Y15   // 0x7FFF: clears the sign bit
	VPXOR    Y0, Y0, Y0
	VPXOR    Y1, Y1, Y1
	VPXOR    Y2, Y2, Y2
	VPXOR    Y3, Y3, Y3
	CMPQ     CX, $64
	JB       max16

max64:
	VPAND   (SI), Y15, Y4
	VPAND   32(SI), Y15, Y5
	VPAND   64(SI), Y15, Y6
	VPAND   96(SI), Y15, Y7
	VPMAXUW Y4, Y0, Y0
	VPMAXUW Y5, Y1, Y1
	VPMAXUW Y6, Y2, Y2
	VPMAXUW Y7, Y3, Y3
	ADDQ    $128, SI
	SUBQ    $64, CX
	CMPQ    CX, $64
	JAE     max64

max16:
	CMPQ    CX, $16
	JB      maxdone
	VPAND   (SI), Y15, Y4
	VPMAXUW Y4, Y0, Y0
	ADDQ    $32, SI
	SUBQ    $16, CX
	JMP     max16

maxdone:
	VPMAXUW      Y1, Y0, Y0
	VPMAXUW      Y3, Y2, Y2
	VPMAXUW      Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPMAXUW      X1, X0, X0
	VPSHUFD      $0x4E, X0, X1
	VPMAXUW      X1, X0, X0
	VPSHUFD      $0xB1, X0, X1
	VPMAXUW      X1, X0, X0
	VPSRLD       $16, X0, X1
	VPMAXUW      X1, X0, X0
	VMOVD        X0, DX
	MOVW         DX, ret+16(FP)
	VZEROUPPER
	RET

// QFLOAT(x, a) is quant_amd64.s's QUANT8 after the load: it quantizes the
// 8 floats of x into the big-endian int32 of x and folds x·0 into the
// finiteness accumulator a. Constants: Y11 zero, Y12 factor, Y13 limit,
// Y14 −limit, Y15 byte-swap control.
#define QFLOAT(x, a) \
	VFMADD231PS Y11, x, a \
	VMULPS      Y12, x, x \
	VMAXPS      Y14, x, x \
	VMINPS      Y13, x, x \
	VCVTPS2DQ   x, x \
	VPSHUFB     Y15, x, x

// QBF16(off, x, a) and QF16(off, x, a) quantize the 8 values at off(SI).
#define QBF16(off, x, a) \
	VPMOVZXWD off(SI), x \
	VPSLLD    $16, x, x \
	QFLOAT(x, a)

#define QF16(off, x, a) \
	VCVTPH2PS off(SI), x \
	QFLOAT(x, a)

// QUANTIZE16(Q8) is the body of a quantize kernel whose 8-value step is
// Q8: quantizeAVX2's loops with 16-bit sources (32 values per iteration,
// then 8), leaving its finiteness result in CX. Arguments: DI dst, SI src,
// CX n, AX nt, Y12 factor, Y13 limit. (go vet's asmdecl reads a macro as
// part of the function above it, so the arguments are loaded and stored
// outside the macros.)
#define QUANTIZE16(Q8) \
	VXORPS       Y14, Y14, Y14 \
	VSUBPS       Y13, Y14, Y14 \
	VMOVDQU      ·bswapMask(SB), Y15 \
	VXORPS       Y11, Y11, Y11 \
	VXORPS       Y4, Y4, Y4 \
	VXORPS       Y5, Y5, Y5 \
	VXORPS       Y6, Y6, Y6 \
	VXORPS       Y7, Y7, Y7 \
	CMPQ         CX, $32 \
	JB           q8 \
	TESTQ        AX, AX \
	JNZ          q32nt \
q32: \
	Q8(0, Y0, Y4) \
	Q8(16, Y1, Y5) \
	Q8(32, Y2, Y6) \
	Q8(48, Y3, Y7) \
	VMOVDQU Y0, (DI) \
	VMOVDQU Y1, 32(DI) \
	VMOVDQU Y2, 64(DI) \
	VMOVDQU Y3, 96(DI) \
	ADDQ    $64, SI \
	ADDQ    $128, DI \
	SUBQ    $32, CX \
	CMPQ    CX, $32 \
	JAE     q32 \
	JMP     q8 \
q32nt: \
	Q8(0, Y0, Y4) \
	Q8(16, Y1, Y5) \
	Q8(32, Y2, Y6) \
	Q8(48, Y3, Y7) \
	VMOVNTDQ Y0, (DI) \
	VMOVNTDQ Y1, 32(DI) \
	VMOVNTDQ Y2, 64(DI) \
	VMOVNTDQ Y3, 96(DI) \
	ADDQ     $64, SI \
	ADDQ     $128, DI \
	SUBQ     $32, CX \
	CMPQ     CX, $32 \
	JAE      q32nt \
q8: \
	CMPQ    CX, $8 \
	JB      qdone \
	Q8(0, Y0, Y4) \
	VMOVDQU Y0, (DI) \
	ADDQ    $16, SI \
	ADDQ    $32, DI \
	SUBQ    $8, CX \
	JMP     q8 \
qdone: \
	TESTQ AX, AX \
	JZ    qret \
	SFENCE \
qret: \
	VADDPS    Y5, Y4, Y4 \
	VADDPS    Y7, Y6, Y6 \
	VADDPS    Y6, Y4, Y4 \
	VCMPPS    $3, Y4, Y4, Y4 \
	VMOVMSKPS Y4, DX \
	XORL      CX, CX \
	MOVL      $0x7F800000, BX \
	TESTL     DX, DX \
	CMOVLNE   BX, CX

// func quantizeBF16AVX2(dst *byte, src *uint16, n int, factor, limit float32, nt bool) (nonFinite uint32)
TEXT ·quantizeBF16AVX2(SB), NOSPLIT, $0-44
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	MOVBQZX      nt+32(FP), AX
	VBROADCASTSS factor+24(FP), Y12
	VBROADCASTSS limit+28(FP), Y13
	QUANTIZE16(QBF16)
	MOVL         CX, nonFinite+40(FP)
	VZEROUPPER
	RET

// func quantizeF16AVX2(dst *byte, src *uint16, n int, factor, limit float32, nt bool) (nonFinite uint32)
TEXT ·quantizeF16AVX2(SB), NOSPLIT, $0-44
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	MOVBQZX      nt+32(FP), AX
	VBROADCASTSS factor+24(FP), Y12
	VBROADCASTSS limit+28(FP), Y13
	QUANTIZE16(QF16)
	MOVL         CX, nonFinite+40(FP)
	VZEROUPPER
	RET

// DQ8(off, x) is quant_amd64.s's DEQUANT8: the 8 big-endian int32 at
// off(SI) times the inverse, as floats in x. Constants: Y12 inverse, Y15
// byte-swap control.
#define DQ8(off, x) \
	VMOVDQU   off(SI), x \
	VPSHUFB   Y15, x, x \
	VCVTDQ2PS x, x \
	VMULPS    Y12, x, x

// NBF16(x, t) rounds the 8 floats of x to bfloat16, each in the low half
// of its dword: (b + 0x7FFF + (b>>16)&1) >> 16. Constants: Y9 1, Y10 0x7FFF.
#define NBF16(x, t) \
	VPSRLD $16, x, t \
	VPAND  Y9, t, t \
	VPADDD Y10, x, x \
	VPADDD t, x, x \
	VPSRLD $16, x, x

// DEQUANTIZE16(D32, D8) is the body of a dequantize kernel: D32 turns the
// 32 int32 at (SI) into 32 16-bit values in Y0 (16) and Y2 (16), D8 turns 8
// into X0. 32 values per iteration, then 8. Arguments: DI dst, SI src,
// CX n, AX nt, Y12 inverse.
#define DEQUANTIZE16(D32, D8) \
	VMOVDQU      ·bswapMask(SB), Y15 \
	VPCMPEQD     Y10, Y10, Y10 \
	VPSRLD       $31, Y10, Y9 \
	VPSRLD       $17, Y10, Y10 \
	CMPQ         CX, $32 \
	JB           d8 \
	TESTQ        AX, AX \
	JNZ          d32nt \
d32: \
	D32 \
	VMOVDQU Y0, (DI) \
	VMOVDQU Y2, 32(DI) \
	ADDQ    $128, SI \
	ADDQ    $64, DI \
	SUBQ    $32, CX \
	CMPQ    CX, $32 \
	JAE     d32 \
	JMP     d8 \
d32nt: \
	D32 \
	VMOVNTDQ Y0, (DI) \
	VMOVNTDQ Y2, 32(DI) \
	ADDQ     $128, SI \
	ADDQ     $64, DI \
	SUBQ     $32, CX \
	CMPQ     CX, $32 \
	JAE      d32nt \
d8: \
	CMPQ    CX, $8 \
	JB      ddone \
	D8 \
	VMOVDQU X0, (DI) \
	ADDQ    $32, SI \
	ADDQ    $16, DI \
	SUBQ    $8, CX \
	JMP     d8 \
ddone: \
	TESTQ AX, AX \
	JZ    dret \
	SFENCE \
dret:

// bfloat16: VPACKUSDW packs the low dwords (all ≤ 0xFFFF, so no
// saturation) lane by lane; VPERMQ $0xD8 puts the quadwords back in order.
#define DBF16_32 \
	DQ8(0, Y0) \
	DQ8(32, Y1) \
	DQ8(64, Y2) \
	DQ8(96, Y3) \
	NBF16(Y0, Y4) \
	NBF16(Y1, Y5) \
	NBF16(Y2, Y6) \
	NBF16(Y3, Y7) \
	VPACKUSDW Y1, Y0, Y0 \
	VPACKUSDW Y3, Y2, Y2 \
	VPERMQ    $0xD8, Y0, Y0 \
	VPERMQ    $0xD8, Y2, Y2

#define DBF16_8 \
	DQ8(0, Y0) \
	NBF16(Y0, Y4) \
	VEXTRACTI128 $1, Y0, X1 \
	VPACKUSDW    X1, X0, X0

#define DF16_32 \
	DQ8(0, Y0) \
	DQ8(32, Y1) \
	DQ8(64, Y2) \
	DQ8(96, Y3) \
	VCVTPS2PH   $0, Y0, X0 \
	VCVTPS2PH   $0, Y1, X1 \
	VCVTPS2PH   $0, Y2, X2 \
	VCVTPS2PH   $0, Y3, X3 \
	VINSERTI128 $1, X1, Y0, Y0 \
	VINSERTI128 $1, X3, Y2, Y2

#define DF16_8 \
	DQ8(0, Y0) \
	VCVTPS2PH $0, Y0, X0

// func dequantizeBF16AVX2(dst *uint16, src *byte, n int, inv float32, nt bool)
TEXT ·dequantizeBF16AVX2(SB), NOSPLIT, $0-29
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS inv+24(FP), Y12
	MOVBQZX      nt+28(FP), AX
	DEQUANTIZE16(DBF16_32, DBF16_8)
	VZEROUPPER
	RET

// func dequantizeF16AVX2(dst *uint16, src *byte, n int, inv float32, nt bool)
TEXT ·dequantizeF16AVX2(SB), NOSPLIT, $0-29
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS inv+24(FP), Y12
	MOVBQZX      nt+28(FP), AX
	DEQUANTIZE16(DF16_32, DF16_8)
	VZEROUPPER
	RET
