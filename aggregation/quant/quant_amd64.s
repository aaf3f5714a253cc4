//go:build amd64 && !purego

#include "textflag.h"

// AVX2 kernels for dispatch_amd64.go. Each processes n values, n a multiple
// of 8, 32 per iteration while it can, then 8. They compute exactly what
// generic.go computes (see the comments there): VMULPS, VMAXPS and VMINPS
// with the value as the first source (so NaN becomes the bound), VCVTPS2DQ in
// the default MXCSR rounding (nearest even; Go never changes it), VPSHUFB to
// swap bytes, VCVTDQ2PS for int32 → float32.

// VPSHUFB control reversing the bytes of each 32-bit word of both lanes
// (package-wide: quant16_amd64.s uses it too).
DATA ·bswapMask+0x00(SB)/8, $0x0405060700010203
DATA ·bswapMask+0x08(SB)/8, $0x0c0d0e0f08090a0b
DATA ·bswapMask+0x10(SB)/8, $0x0405060700010203
DATA ·bswapMask+0x18(SB)/8, $0x0c0d0e0f08090a0b
GLOBL ·bswapMask(SB), RODATA|NOPTR, $32

// REDUCE_MAX leaves max over the 8 dwords of Y0 in X0 lane 0, clobbering Y1.
#define REDUCE_MAX \
	VEXTRACTI128 $1, Y0, X1 \
	VPMAXUD      X1, X0, X0 \
	VPSHUFD      $0x4E, X0, X1 \
	VPMAXUD      X1, X0, X0 \
	VPSHUFD      $0xB1, X0, X1 \
	VPMAXUD      X1, X0, X0

// func maxAbsBitsAVX2(src *float32, n int) uint32
TEXT ·maxAbsBitsAVX2(SB), NOSPLIT, $0-20
	MOVQ     src+0(FP), SI
	MOVQ     n+8(FP), CX
	VPCMPEQD Y15, Y15, Y15
	VPSRLD   $1, Y15, Y15  // 0x7FFFFFFF: clears the sign bit
	VPXOR    Y0, Y0, Y0
	VPXOR    Y1, Y1, Y1
	VPXOR    Y2, Y2, Y2
	VPXOR    Y3, Y3, Y3
	CMPQ     CX, $32
	JB       max8

max32:
	VPAND   (SI), Y15, Y4
	VPAND   32(SI), Y15, Y5
	VPAND   64(SI), Y15, Y6
	VPAND   96(SI), Y15, Y7
	VPMAXUD Y4, Y0, Y0
	VPMAXUD Y5, Y1, Y1
	VPMAXUD Y6, Y2, Y2
	VPMAXUD Y7, Y3, Y3
	ADDQ    $128, SI
	SUBQ    $32, CX
	CMPQ    CX, $32
	JAE     max32

max8:
	CMPQ    CX, $8
	JB      maxdone
	VPAND   (SI), Y15, Y4
	VPMAXUD Y4, Y0, Y0
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     max8

maxdone:
	VPMAXUD Y1, Y0, Y0
	VPMAXUD Y3, Y2, Y2
	VPMAXUD Y2, Y0, Y0
	REDUCE_MAX
	VMOVD   X0, DX
	MOVL    DX, ret+16(FP)
	VZEROUPPER
	RET

// QUANT8(off, x, a) quantizes the 8 floats at off(SI) into the big-endian
// int32 of x and folds x·0 into the accumulator a with one FMA: a stays ±0
// while every x is finite and becomes NaN (and stays NaN) after the first
// NaN or ±Inf. Constants: Y11 zero, Y12 factor, Y13 limit, Y14 −limit,
// Y15 byte-swap control.
#define QUANT8(off, x, a) \
	VMOVUPS     off(SI), x \
	VFMADD231PS Y11, x, a \
	VMULPS      Y12, x, x \
	VMAXPS      Y14, x, x \
	VMINPS      Y13, x, x \
	VCVTPS2DQ   x, x \
	VPSHUFB     Y15, x, x

// func quantizeAVX2(dst *byte, src *float32, n int, factor, limit float32, nt bool) (nonFinite uint32)
TEXT ·quantizeAVX2(SB), NOSPLIT, $0-44
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	MOVBQZX      nt+32(FP), AX
	VBROADCASTSS factor+24(FP), Y12
	VBROADCASTSS limit+28(FP), Y13
	VXORPS       Y14, Y14, Y14
	VSUBPS       Y13, Y14, Y14
	VMOVDQU      ·bswapMask(SB), Y15
	VXORPS       Y11, Y11, Y11
	VXORPS       Y4, Y4, Y4
	VXORPS       Y5, Y5, Y5
	VXORPS       Y6, Y6, Y6
	VXORPS       Y7, Y7, Y7
	CMPQ         CX, $32
	JB           q8
	TESTQ        AX, AX
	JNZ          q32nt

q32:
	QUANT8(0, Y0, Y4)
	QUANT8(32, Y1, Y5)
	QUANT8(64, Y2, Y6)
	QUANT8(96, Y3, Y7)
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	ADDQ    $128, SI
	ADDQ    $128, DI
	SUBQ    $32, CX
	CMPQ    CX, $32
	JAE     q32
	JMP     q8

q32nt:
	QUANT8(0, Y0, Y4)
	QUANT8(32, Y1, Y5)
	QUANT8(64, Y2, Y6)
	QUANT8(96, Y3, Y7)
	VMOVNTDQ Y0, (DI)
	VMOVNTDQ Y1, 32(DI)
	VMOVNTDQ Y2, 64(DI)
	VMOVNTDQ Y3, 96(DI)
	ADDQ     $128, SI
	ADDQ     $128, DI
	SUBQ     $32, CX
	CMPQ     CX, $32
	JAE      q32nt

q8:
	CMPQ    CX, $8
	JB      qdone
	QUANT8(0, Y0, Y4)
	VMOVDQU Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     q8

qdone:
	TESTQ AX, AX
	JZ    qret
	SFENCE

qret:
	// Any NaN lane in the accumulators means a non-finite input.
	VADDPS    Y5, Y4, Y4
	VADDPS    Y7, Y6, Y6
	VADDPS    Y6, Y4, Y4
	VCMPPS    $3, Y4, Y4, Y4 // unordered: NaN lanes become all ones
	VMOVMSKPS Y4, DX
	XORL      CX, CX
	MOVL      $0x7F800000, BX
	TESTL     DX, DX
	CMOVLNE   BX, CX
	MOVL      CX, nonFinite+40(FP)
	VZEROUPPER
	RET

// DEQUANT8(off, x) turns the 8 big-endian int32 at off(SI) into floats in x.
// Constants: Y12 inverse factor, Y15 byte-swap control.
#define DEQUANT8(off, x) \
	VMOVDQU   off(SI), x \
	VPSHUFB   Y15, x, x \
	VCVTDQ2PS x, x \
	VMULPS    Y12, x, x

// func dequantizeAVX2(dst *float32, src *byte, n int, inv float32, nt bool)
TEXT ·dequantizeAVX2(SB), NOSPLIT, $0-29
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS inv+24(FP), Y12
	MOVBQZX      nt+28(FP), AX
	VMOVDQU      ·bswapMask(SB), Y15
	CMPQ         CX, $32
	JB           d8
	TESTQ        AX, AX
	JNZ          d32nt

d32:
	DEQUANT8(0, Y0)
	DEQUANT8(32, Y1)
	DEQUANT8(64, Y2)
	DEQUANT8(96, Y3)
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, SI
	ADDQ    $128, DI
	SUBQ    $32, CX
	CMPQ    CX, $32
	JAE     d32
	JMP     d8

d32nt:
	DEQUANT8(0, Y0)
	DEQUANT8(32, Y1)
	DEQUANT8(64, Y2)
	DEQUANT8(96, Y3)
	VMOVNTPS Y0, (DI)
	VMOVNTPS Y1, 32(DI)
	VMOVNTPS Y2, 64(DI)
	VMOVNTPS Y3, 96(DI)
	ADDQ     $128, SI
	ADDQ     $128, DI
	SUBQ     $32, CX
	CMPQ     CX, $32
	JAE      d32nt

d8:
	CMPQ    CX, $8
	JB      ddone
	DEQUANT8(0, Y0)
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     d8

ddone:
	TESTQ AX, AX
	JZ    dret
	SFENCE

dret:
	VZEROUPPER
	RET

// func bswap32AVX2(dst, src *byte, n int, nt bool)
TEXT ·bswap32AVX2(SB), NOSPLIT, $0-25
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    n+16(FP), CX
	MOVBQZX nt+24(FP), AX
	VMOVDQU ·bswapMask(SB), Y15
	CMPQ    CX, $32
	JB      b8
	TESTQ   AX, AX
	JNZ     b32nt

b32:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VPSHUFB Y15, Y0, Y0
	VPSHUFB Y15, Y1, Y1
	VPSHUFB Y15, Y2, Y2
	VPSHUFB Y15, Y3, Y3
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	ADDQ    $128, SI
	ADDQ    $128, DI
	SUBQ    $32, CX
	CMPQ    CX, $32
	JAE     b32
	JMP     b8

b32nt:
	VMOVDQU  (SI), Y0
	VMOVDQU  32(SI), Y1
	VMOVDQU  64(SI), Y2
	VMOVDQU  96(SI), Y3
	VPSHUFB  Y15, Y0, Y0
	VPSHUFB  Y15, Y1, Y1
	VPSHUFB  Y15, Y2, Y2
	VPSHUFB  Y15, Y3, Y3
	VMOVNTDQ Y0, (DI)
	VMOVNTDQ Y1, 32(DI)
	VMOVNTDQ Y2, 64(DI)
	VMOVNTDQ Y3, 96(DI)
	ADDQ     $128, SI
	ADDQ     $128, DI
	SUBQ     $32, CX
	CMPQ     CX, $32
	JAE      b32nt

b8:
	CMPQ    CX, $8
	JB      bdone
	VMOVDQU (SI), Y0
	VPSHUFB Y15, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     b8

bdone:
	TESTQ AX, AX
	JZ    bret
	SFENCE

bret:
	VZEROUPPER
	RET
