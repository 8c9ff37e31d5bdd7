/* float16 and bfloat16 products on AVX-512 and AVX2 CPUs without 16-bit
 * arithmetic: a float32 GEMM of our own that converts a and b while it
 * packs them and rounds its tiles straight into out, where oneDNN's
 * float32 GEMM needs staging copies converted before and after it
 * (bench/NOTES.md, rounds 11 to 13). Runs on the calling thread; the
 * matmul's per-thread shares (kernels/cpu/matmul.c) call it. */
#ifndef MX_KERNELS_CPU_GEMM16_H
#define MX_KERNELS_CPU_GEMM16_H

#include <stdbool.h>

#include "kernels/base_internal.h"

/* Whether mx__cpu_gemm16 takes out = a @ b ((B, M, K) @ (B, K, N), the
 * shapes of mx__cpu_matmul): an AVX-512 CPU or one with AVX2, FMA and
 * F16C, a and b both float16 or both bfloat16, each with its rows or its
 * columns dense (a transposed operand: packing reads it either way). */
bool mx__cpu_gemm16_takes(const mx_kview *a, const mx_kview *b);

/* The floats of workspace mx__cpu_gemm16 needs for this product. */
int64_t mx__cpu_gemm16_workspace(const mx_kview *out, const mx_kview *a);

/* out = a @ b (+ bias) with float32 products and sums, the bias added to
 * the sums, rounded once into out's dtype, using workspace (64-byte
 * aligned, mx__cpu_gemm16_workspace floats). bias: NULL, or out's columns'
 * float32 bias, readable up to a multiple of 16 past them (zeros). Only
 * where mx__cpu_gemm16_takes(a, b). */
void mx__cpu_gemm16(const mx_kview *out, const mx_kview *a, const mx_kview *b, const float *bias, float *workspace);

#endif
