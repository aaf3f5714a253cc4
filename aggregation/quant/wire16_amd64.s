//go:build amd64 && !purego

#include "textflag.h"

// AVX2 (and F16C) kernels of the 16-bit wire (int16 lanes, big-endian), for
// dispatch_amd64.go. They compute exactly what wire16.go's scalar code
// computes:
//
//   - quantize: the float32 quantizer of quant_amd64.s (VMULPS, VMAXPS and
//     VMINPS with the value first, so NaN becomes −limit, VCVTPS2DQ in the
//     default rounding, the x·0 FMA as the finiteness check) on float32,
//     bfloat16 (VPUNPCKLWD/VPUNPCKHWD with zero; VPMOVZXWD, VPSLLD $16 for
//     the last 8-value steps) or float16 (VCVTPH2PS) input, then VPACKSSDW
//     to int16 (|q| ≤ limit ≤ 2^15−1, so it never saturates: the int16 is
//     the int32's low half, as the scalar code takes it), VPERMQ $0xD8 to
//     undo the in-lane order of the pack (bfloat16's unpack already left
//     the values in the order the pack restores), and VPSHUFB to swap the
//     bytes of each word.
//   - dequantize: VBROADCASTI128 puts 8 big-endian int16 in both lanes,
//     VPSHUFB moves each to the top half of a dword, byte-swapped
//     (lane 0 takes values 0–3, lane 1 values 4–7), VPSRAD $16 sign-extends
//     it; then VCVTDQ2PS (exact: |sum| < 2^24) and VMULPS by the inverse,
//     and for 16-bit results the narrowing of quant16_amd64.s (bfloat16:
//     the scalar integer rule; float16: VCVTPS2PH imm8 0).

// VPSHUFB control reversing the bytes of each 16-bit word of both lanes.
DATA ·bswap16Mask+0x00(SB)/8, $0x0607040502030001
DATA ·bswap16Mask+0x08(SB)/8, $0x0e0f0c0d0a0b0809
DATA ·bswap16Mask+0x10(SB)/8, $0x0607040502030001
DATA ·bswap16Mask+0x18(SB)/8, $0x0e0f0c0d0a0b0809
GLOBL ·bswap16Mask(SB), RODATA|NOPTR, $32

// VPSHUFB control turning 16 bytes (8 big-endian int16, in both lanes) into
// dwords whose top half is one int16 in native order and bottom half zero:
// dword i of lane 0 takes bytes 2i+1, 2i of value i into its bytes 2, 3;
// lane 1 does the same for values 4–7 (bytes 8–15). 0x80 writes zero.
DATA ·wire16Spread+0x00(SB)/8, $0x0203808000018080
DATA ·wire16Spread+0x08(SB)/8, $0x0607808004058080
DATA ·wire16Spread+0x10(SB)/8, $0x0a0b808008098080
DATA ·wire16Spread+0x18(SB)/8, $0x0e0f80800c0d8080
GLOBL ·wire16Spread(SB), RODATA|NOPTR, $32

// QW(x, a) quantizes the 8 floats of x into 8 int32 in x and folds x·0 into
// the finiteness accumulator a. Constants: Y11 zero, Y12 factor, Y13 limit,
// Y14 −limit.
#define QW(x, a) \
	VFMADD231PS Y11, x, a \
	VMULPS      Y12, x, x \
	VMAXPS      Y14, x, x \
	VMINPS      Y13, x, x \
	VCVTPS2DQ   x, x

// The loads of 8 input values at off(SI) into x, as floats.
#define LF32(off, x) \
	VMOVUPS off(SI), x

#define LBF16(off, x) \
	VPMOVZXWD off(SI), x \
	VPSLLD    $16, x, x

#define LF16(off, x) \
	VCVTPH2PS off(SI), x

// P32(L, o1, o2, o3) quantizes the 32 values at (SI), loaded 8 at a time by
// L from offsets 0, o1, o2, o3, into 32 int16 in Y0 (the first 16) and Y2,
// in order (VPACKSSDW packs lane by lane; VPERMQ $0xD8 restores the order).
#define P32(L, o1, o2, o3) \
	L(0, Y0) \
	QW(Y0, Y4) \
	L(o1, Y1) \
	QW(Y1, Y5) \
	L(o2, Y2) \
	QW(Y2, Y6) \
	L(o3, Y3) \
	QW(Y3, Y7) \
	VPACKSSDW Y1, Y0, Y0 \
	VPACKSSDW Y3, Y2, Y2 \
	VPERMQ    $0xD8, Y0, Y0 \
	VPERMQ    $0xD8, Y2, Y2

#define P32F32 P32(LF32, 32, 64, 96)

#define P32F16 P32(LF16, 16, 32, 48)

// P32BF16 is P32 for bfloat16 without the widening shifts and the VPERMQ:
// VPUNPCKLWD and VPUNPCKHWD with zero (Y11) make each bfloat16 the top
// half of a dword, values 0–3 and 8–11 in one vector, 4–7 and 12–15 in the
// other, the order VPACKSSDW's lane-by-lane pack puts back in sequence.
#define P32BF16 \
	VPUNPCKLWD (SI), Y11, Y0 \
	QW(Y0, Y4) \
	VPUNPCKHWD (SI), Y11, Y1 \
	QW(Y1, Y5) \
	VPUNPCKLWD 32(SI), Y11, Y2 \
	QW(Y2, Y6) \
	VPUNPCKHWD 32(SI), Y11, Y3 \
	QW(Y3, Y7) \
	VPACKSSDW  Y1, Y0, Y0 \
	VPACKSSDW  Y3, Y2, Y2

// QUANTW16(Q32, L8, o1, step) is the body of a quantize kernel: Q32 turns
// the 32 values at (SI) into 32 int16 in Y0 and Y2, L8 loads 8 values as
// floats, o1 is the input bytes of 8 values and step of 32. 32 values per
// iteration into 64 bytes, then 8 into 16, leaving the finiteness result
// in CX. Arguments: DI dst, SI src, CX n, AX nt, Y12 factor, Y13 limit. (go
// vet's asmdecl reads a macro as part of the function above it, so the
// arguments are loaded and stored outside the macros.)
#define QUANTW16(Q32, L8, o1, step) \
	VXORPS       Y14, Y14, Y14 \
	VSUBPS       Y13, Y14, Y14 \
	VMOVDQU      ·bswap16Mask(SB), Y15 \
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
	Q32 \
	VPSHUFB   Y15, Y0, Y0 \
	VPSHUFB   Y15, Y2, Y2 \
	VMOVDQU   Y0, (DI) \
	VMOVDQU   Y2, 32(DI) \
	ADDQ      $step, SI \
	ADDQ      $64, DI \
	SUBQ      $32, CX \
	CMPQ      CX, $32 \
	JAE       q32 \
	JMP       q8 \
q32nt: \
	Q32 \
	VPSHUFB   Y15, Y0, Y0 \
	VPSHUFB   Y15, Y2, Y2 \
	VMOVNTDQ  Y0, (DI) \
	VMOVNTDQ  Y2, 32(DI) \
	ADDQ      $step, SI \
	ADDQ      $64, DI \
	SUBQ      $32, CX \
	CMPQ      CX, $32 \
	JAE       q32nt \
q8: \
	CMPQ         CX, $8 \
	JB           qdone \
	L8(0, Y0) \
	QW(Y0, Y4) \
	VEXTRACTI128 $1, Y0, X1 \
	VPACKSSDW    X1, X0, X0 \
	VPSHUFB      X15, X0, X0 \
	VMOVDQU      X0, (DI) \
	ADDQ         $o1, SI \
	ADDQ         $16, DI \
	SUBQ         $8, CX \
	JMP          q8 \
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

// func quantizeW16AVX2(dst *byte, src *float32, n int, factor, limit float32, nt bool) (nonFinite uint32)
TEXT ·quantizeW16AVX2(SB), NOSPLIT, $0-44
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	MOVBQZX      nt+32(FP), AX
	VBROADCASTSS factor+24(FP), Y12
	VBROADCASTSS limit+28(FP), Y13
	QUANTW16(P32F32, LF32, 32, 128)
	MOVL         CX, nonFinite+40(FP)
	VZEROUPPER
	RET

// func quantizeBF16W16AVX2(dst *byte, src *uint16, n int, factor, limit float32, nt bool) (nonFinite uint32)
TEXT ·quantizeBF16W16AVX2(SB), NOSPLIT, $0-44
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	MOVBQZX      nt+32(FP), AX
	VBROADCASTSS factor+24(FP), Y12
	VBROADCASTSS limit+28(FP), Y13
	QUANTW16(P32BF16, LBF16, 16, 64)
	MOVL         CX, nonFinite+40(FP)
	VZEROUPPER
	RET

// func quantizeF16W16AVX2(dst *byte, src *uint16, n int, factor, limit float32, nt bool) (nonFinite uint32)
TEXT ·quantizeF16W16AVX2(SB), NOSPLIT, $0-44
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	MOVBQZX      nt+32(FP), AX
	VBROADCASTSS factor+24(FP), Y12
	VBROADCASTSS limit+28(FP), Y13
	QUANTW16(P32F16, LF16, 16, 64)
	MOVL         CX, nonFinite+40(FP)
	VZEROUPPER
	RET

// DW8(off, x) turns the 8 big-endian int16 at off(SI) into floats times the
// inverse in x. Constants: Y12 inverse, Y15 wire16Spread.
#define DW8(off, x) \
	VBROADCASTI128 off(SI), x \
	VPSHUFB        Y15, x, x \
	VPSRAD         $16, x, x \
	VCVTDQ2PS      x, x \
	VMULPS         Y12, x, x

// func dequantizeW16AVX2(dst *float32, src *byte, n int, inv float32, nt bool)
TEXT ·dequantizeW16AVX2(SB), NOSPLIT, $0-29
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS inv+24(FP), Y12
	MOVBQZX      nt+28(FP), AX
	VMOVDQU      ·wire16Spread(SB), Y15
	CMPQ         CX, $32
	JB           d8
	TESTQ        AX, AX
	JNZ          d32nt

d32:
	DW8(0, Y0)
	DW8(16, Y1)
	DW8(32, Y2)
	DW8(48, Y3)
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $64, SI
	ADDQ    $128, DI
	SUBQ    $32, CX
	CMPQ    CX, $32
	JAE     d32
	JMP     d8

d32nt:
	DW8(0, Y0)
	DW8(16, Y1)
	DW8(32, Y2)
	DW8(48, Y3)
	VMOVNTPS Y0, (DI)
	VMOVNTPS Y1, 32(DI)
	VMOVNTPS Y2, 64(DI)
	VMOVNTPS Y3, 96(DI)
	ADDQ     $64, SI
	ADDQ     $128, DI
	SUBQ     $32, CX
	CMPQ     CX, $32
	JAE      d32nt

d8:
	CMPQ    CX, $8
	JB      ddone
	DW8(0, Y0)
	VMOVUPS Y0, (DI)
	ADDQ    $16, SI
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

// NB16(x, t) rounds the 8 floats of x to bfloat16, each in the low half of
// its dword: (b + 0x7FFF + (b>>16)&1) >> 16. Constants: Y9 1, Y10 0x7FFF.
#define NB16(x, t) \
	VPSRLD $16, x, t \
	VPAND  Y9, t, t \
	VPADDD Y10, x, x \
	VPADDD t, x, x \
	VPSRLD $16, x, x

// The narrowings of 32 floats in Y0–Y3 to 16-bit values in Y0 (the first
// 16) and Y2, and of 8 floats in Y0 to X0. bfloat16: VPACKUSDW packs the
// low dwords (all ≤ 0xFFFF: no saturation) lane by lane, VPERMQ $0xD8
// restores the order.
#define NBF16_32 \
	NB16(Y0, Y4) \
	NB16(Y1, Y5) \
	NB16(Y2, Y6) \
	NB16(Y3, Y7) \
	VPACKUSDW Y1, Y0, Y0 \
	VPACKUSDW Y3, Y2, Y2 \
	VPERMQ    $0xD8, Y0, Y0 \
	VPERMQ    $0xD8, Y2, Y2

#define NBF16_8 \
	NB16(Y0, Y4) \
	VEXTRACTI128 $1, Y0, X1 \
	VPACKUSDW    X1, X0, X0

#define NF16_32 \
	VCVTPS2PH   $0, Y0, X0 \
	VCVTPS2PH   $0, Y1, X1 \
	VCVTPS2PH   $0, Y2, X2 \
	VCVTPS2PH   $0, Y3, X3 \
	VINSERTI128 $1, X1, Y0, Y0 \
	VINSERTI128 $1, X3, Y2, Y2

#define NF16_8 \
	VCVTPS2PH $0, Y0, X0

// DEQUANTHALFW16(N32, N8) is the body of a kernel from the 16-bit wire to
// 16-bit values, narrowing with N32 and N8: 32 values per iteration (64
// bytes in, 64 out), then 8. Arguments: DI dst, SI src, CX n, AX nt, Y12
// inverse.
#define DEQUANTHALFW16(N32, N8) \
	VMOVDQU  ·wire16Spread(SB), Y15 \
	VPCMPEQD Y10, Y10, Y10 \
	VPSRLD   $31, Y10, Y9 \
	VPSRLD   $17, Y10, Y10 \
	CMPQ     CX, $32 \
	JB       h8 \
	TESTQ    AX, AX \
	JNZ      h32nt \
h32: \
	DW8(0, Y0) \
	DW8(16, Y1) \
	DW8(32, Y2) \
	DW8(48, Y3) \
	N32 \
	VMOVDQU Y0, (DI) \
	VMOVDQU Y2, 32(DI) \
	ADDQ    $64, SI \
	ADDQ    $64, DI \
	SUBQ    $32, CX \
	CMPQ    CX, $32 \
	JAE     h32 \
	JMP     h8 \
h32nt: \
	DW8(0, Y0) \
	DW8(16, Y1) \
	DW8(32, Y2) \
	DW8(48, Y3) \
	N32 \
	VMOVNTDQ Y0, (DI) \
	VMOVNTDQ Y2, 32(DI) \
	ADDQ     $64, SI \
	ADDQ     $64, DI \
	SUBQ     $32, CX \
	CMPQ     CX, $32 \
	JAE      h32nt \
h8: \
	CMPQ    CX, $8 \
	JB      hdone \
	DW8(0, Y0) \
	N8 \
	VMOVDQU X0, (DI) \
	ADDQ    $16, SI \
	ADDQ    $16, DI \
	SUBQ    $8, CX \
	JMP     h8 \
hdone: \
	TESTQ AX, AX \
	JZ    hret \
	SFENCE \
hret:

// func dequantizeBF16W16AVX2(dst *uint16, src *byte, n int, inv float32, nt bool)
TEXT ·dequantizeBF16W16AVX2(SB), NOSPLIT, $0-29
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS inv+24(FP), Y12
	MOVBQZX      nt+28(FP), AX
	DEQUANTHALFW16(NBF16_32, NBF16_8)
	VZEROUPPER
	RET

// func dequantizeF16W16AVX2(dst *uint16, src *byte, n int, inv float32, nt bool)
TEXT ·dequantizeF16W16AVX2(SB), NOSPLIT, $0-29
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS inv+24(FP), Y12
	MOVBQZX      nt+28(FP), AX
	DEQUANTHALFW16(NF16_32, NF16_8)
	VZEROUPPER
	RET

// func bswap16AVX2(dst, src *byte, n int, nt bool) swaps the bytes of n
// 16-bit words, n a multiple of 16: 64 per iteration, then 16.
TEXT ·bswap16AVX2(SB), NOSPLIT, $0-25
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    n+16(FP), CX
	MOVBQZX nt+24(FP), AX
	VMOVDQU ·bswap16Mask(SB), Y15
	CMPQ    CX, $64
	JB      b16
	TESTQ   AX, AX
	JNZ     b64nt

b64:
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
	SUBQ    $64, CX
	CMPQ    CX, $64
	JAE     b64
	JMP     b16

b64nt:
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
	SUBQ     $64, CX
	CMPQ     CX, $64
	JAE      b64nt

b16:
	CMPQ    CX, $16
	JB      bdone
	VMOVDQU (SI), Y0
	VPSHUFB Y15, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $16, CX
	JMP     b16

bdone:
	TESTQ AX, AX
	JZ    bret
	SFENCE

bret:
	VZEROUPPER
	RET
