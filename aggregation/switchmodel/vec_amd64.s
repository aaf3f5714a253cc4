//go:build amd64 && !purego

#include "textflag.h"

// Reverses the bytes of each 8-byte word (VPSHUFB works per 128-bit lane).
DATA bswap64Mask<>+0(SB)/8, $0x0001020304050607
DATA bswap64Mask<>+8(SB)/8, $0x08090a0b0c0d0e0f
DATA bswap64Mask<>+16(SB)/8, $0x0001020304050607
DATA bswap64Mask<>+24(SB)/8, $0x08090a0b0c0d0e0f
GLOBL bswap64Mask<>(SB), RODATA|NOPTR, $32

// func bswap64AVX2(dst, src unsafe.Pointer, n int)
TEXT ·bswap64AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VMOVDQU bswap64Mask<>(SB), Y15

loop128:
	CMPQ CX, $128
	JB   loop32
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VPSHUFB Y15, Y0, Y0
	VPSHUFB Y15, Y1, Y1
	VPSHUFB Y15, Y2, Y2
	VPSHUFB Y15, Y3, Y3
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $128, CX
	JMP  loop128

loop32:
	CMPQ CX, $32
	JB   loop8
	VMOVDQU (SI), Y0
	VPSHUFB Y15, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $32, CX
	JMP  loop32

loop8:
	CMPQ   CX, $8
	JB     done
	MOVQ   (SI), AX
	BSWAPQ AX
	MOVQ   AX, (DI)
	ADDQ   $8, SI
	ADDQ   $8, DI
	SUBQ   $8, CX
	JMP    loop8

done:
	VZEROUPPER
	RET

// func accumulateAVX2(acc, src unsafe.Pointer, n int)
TEXT ·accumulateAVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VMOVDQU bswap64Mask<>(SB), Y15

aloop128:
	CMPQ CX, $128
	JB   aloop32
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VPSHUFB Y15, Y0, Y0
	VPSHUFB Y15, Y1, Y1
	VPSHUFB Y15, Y2, Y2
	VPSHUFB Y15, Y3, Y3
	VPADDD  0(DI), Y0, Y0
	VPADDD  32(DI), Y1, Y1
	VPADDD  64(DI), Y2, Y2
	VPADDD  96(DI), Y3, Y3
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $128, CX
	JMP  aloop128

aloop32:
	CMPQ CX, $32
	JB   aloop8
	VMOVDQU (SI), Y0
	VPSHUFB Y15, Y0, Y0
	VPADDD  (DI), Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $32, CX
	JMP  aloop32

aloop8:
	CMPQ   CX, $8
	JB     adone
	MOVQ   (SI), AX
	BSWAPQ AX
	MOVQ   AX, X0
	MOVQ   (DI), X1
	PADDL  X1, X0
	MOVQ   X0, (DI)
	ADDQ   $8, SI
	ADDQ   $8, DI
	SUBQ   $8, CX
	JMP    aloop8

adone:
	VZEROUPPER
	RET

// func accumulate16AVX2(acc, src unsafe.Pointer, n int)
TEXT ·accumulate16AVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VMOVDQU bswap64Mask<>(SB), Y15

hloop128:
	CMPQ CX, $128
	JB   hloop32
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VPSHUFB Y15, Y0, Y0
	VPSHUFB Y15, Y1, Y1
	VPSHUFB Y15, Y2, Y2
	VPSHUFB Y15, Y3, Y3
	VPADDW  0(DI), Y0, Y0
	VPADDW  32(DI), Y1, Y1
	VPADDW  64(DI), Y2, Y2
	VPADDW  96(DI), Y3, Y3
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $128, CX
	JMP  hloop128

hloop32:
	CMPQ CX, $32
	JB   hloop8
	VMOVDQU (SI), Y0
	VPSHUFB Y15, Y0, Y0
	VPADDW  (DI), Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $32, CX
	JMP  hloop32

hloop8:
	CMPQ   CX, $8
	JB     hdone
	MOVQ   (SI), AX
	BSWAPQ AX
	MOVQ   AX, X0
	MOVQ   (DI), X1
	PADDW  X1, X0
	MOVQ   X0, (DI)
	ADDQ   $8, SI
	ADDQ   $8, DI
	SUBQ   $8, CX
	JMP    hloop8

hdone:
	VZEROUPPER
	RET
