/* How the linear kernel is put to cuBLASLt, as plain numbers: which cases
 * its BIAS and RELU_BIAS epilogues take and each operand's layout as
 * cuBLASLt sees it.
 * kernels/cuda/matmul.cu makes its descriptors from these; the CPU tests
 * check them (tests/kernels/test_linear_lt_case.c), since no GPU runs in CI.
 *
 * out (1, M, N) row-major is, column-major, D = out^T (N x M); cuBLASLt
 * computes it as D = op(A) op(B) with A from b (1, K, N), op(A) N x K, and B
 * from a (1, M, K), op(B) K x M. The bias (N) runs along D's rows, as the
 * epilogue adds it. */
#ifndef MX_KERNELS_LINEAR_LT_CASE_H
#define MX_KERNELS_LINEAR_LT_CASE_H

#include <stdint.h>

#include "kernels/base_internal.h"

/* One operand as a cuBLASLt matrix layout: transposed (CUBLAS_OP_T) or not,
 * the stored matrix's rows, columns and leading dimension (column-major),
 * and the largest power of two up to 256 that its address is a multiple of
 * (the heuristic's minimum-alignment preference). */
typedef struct {
  int transposed;
  int64_t rows, cols, ld;
  uint32_t alignment;
} mx_lt_operand;

typedef struct {
  int dtype; /* mx_dtype: float32, float16 or bfloat16 */
  int relu;  /* the RELU_BIAS epilogue; 0: BIAS */
  mx_lt_operand a, b, d; /* cuBLASLt's A (from b), B (from a) and D (out) */
  uint32_t bias_alignment; /* the bias's address, as the operands' (the heuristic reads it from the pointer) */
} mx_lt_linear_case;

static inline uint32_t mx__lt_alignment(const void *p) {
  uintptr_t address = (uintptr_t)p;
  uint32_t alignment = 1;
  while (alignment < 256 && address % (alignment * 2) == 0) alignment *= 2;
  return alignment;
}

/* v (1, R, C) as a layout whose op gives the C x R column-major matrix v's
 * memory is: rows of v contiguous (op N, stored C x R, ld the row stride),
 * or columns contiguous (op T, stored R x C, ld the column stride). False
 * when neither (the op then runs linear's ops). */
static inline bool mx__lt_layout(const mx_kview *v, mx_lt_operand *o) {
  int64_t R = v->shape[1], C = v->shape[2], sr = v->strides[1], sc = v->strides[2];
  if ((C == 1 || sc == 1) && (R == 1 || sr >= C)) {
    o->transposed = 0, o->rows = C, o->cols = R, o->ld = R == 1 ? C : sr;
  } else if ((R == 1 || sr == 1) && (C == 1 || sc >= R)) {
    o->transposed = 1, o->rows = R, o->cols = C, o->ld = C == 1 ? R : sc;
  } else {
    return false;
  }
  o->alignment = mx__lt_alignment(v->data);
  return true;
}

/* Whether the BIAS epilogue takes out = a @ b + bias (RELU_BIAS, with relu:
 * relu(a @ b + bias)), and its case if so: float32, float16 or bfloat16
 * throughout (float32 accumulation, as the cuBLAS matmul, and the bias
 * added before the one rounding), a batch of one, out contiguous, bias a
 * contiguous vector of N on a 16-byte boundary (the epilogue reads it in
 * vectors). */
static inline bool mx__lt_linear_case_of(const mx_kview *out, const mx_kview *a, const mx_kview *b,
                                         const mx_kview *bias, bool relu, mx_lt_linear_case *c) {
  mx_dtype dt = out->dtype;
  if (dt != MX_F32 && dt != MX_F16 && dt != MX_BF16) return false;
  if (a->dtype != dt || b->dtype != dt || bias->dtype != dt) return false;
  if (out->ndim != 3 || a->ndim != 3 || b->ndim != 3 || bias->ndim != 1) return false;
  int64_t M = out->shape[1], N = out->shape[2], K = a->shape[2];
  if (out->shape[0] != 1 || a->shape[0] != 1 || b->shape[0] != 1 || M < 1 || N < 1 || K < 1) return false;
  if (a->shape[1] != M || b->shape[1] != K || b->shape[2] != N || bias->shape[0] != N) return false;
  if ((N > 1 && out->strides[2] != 1) || (M > 1 && out->strides[1] != N)) return false;
  if ((N > 1 && bias->strides[0] != 1) || mx__lt_alignment(bias->data) < 16) return false;
  c->dtype = dt, c->relu = relu;
  if (!mx__lt_layout(b, &c->a) || !mx__lt_layout(a, &c->b)) return false;
  c->d = (mx_lt_operand){.transposed = 0, .rows = N, .cols = M, .ld = N, .alignment = mx__lt_alignment(out->data)};
  c->bias_alignment = mx__lt_alignment(bias->data);
  return true;
}

#endif
