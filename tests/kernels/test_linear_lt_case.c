/* kernels/linear_lt_case.h: which linear products the CUDA backend hands to cuBLASLt's BIAS or RELU_BIAS epilogue, and
 * the layouts (transposes, rows, columns, leading dimensions, alignments) cuBLASLt is given. The GPU suite checks the
 * results (tests/gpu/test_gpu_linear_relu.c); these checks run everywhere. */
#include <criterion/criterion.h>
#include <stdalign.h>
#include <string.h>

#include "kernels/linear_lt_case.h"
#include "shape_view.h"

/* Data for the views: 256-byte aligned, so that offsets into it set each pointer's alignment. */
static alignas(256) char memory[1 << 16];

/* The operands of a linear layer: x (1, M, K) contiguous, weight (N, K) seen as b (1, K, N) transposed, out
 * (1, M, N), bias (N). */
typedef struct {
  mx_kview out, a, b, bias;
} operands;

static operands linear(mx_dtype dt, int64_t M, int64_t K, int64_t N) {
  operands o;
  o.out = shape_view(dt, 3, (int64_t[]){1, M, N});
  o.a = shape_view(dt, 3, (int64_t[]){1, M, K});
  o.b = shape_view(dt, 3, (int64_t[]){1, K, N});
  o.b.strides[1] = 1, o.b.strides[2] = K; /* weight^T */
  o.bias = shape_view(dt, 1, (int64_t[]){N});
  o.out.data = memory, o.a.data = memory + 4096, o.b.data = memory + 8192, o.bias.data = memory + 12288;
  return o;
}

static void expect_operand(const mx_lt_operand *o, int transposed, int64_t rows, int64_t cols, int64_t ld,
                           uint32_t alignment, const char *what) {
  cr_expect_eq(o->transposed, transposed, "%s transposed %d", what, o->transposed);
  cr_expect_eq(o->rows, rows, "%s rows %lld", what, (long long)o->rows);
  cr_expect_eq(o->cols, cols, "%s cols %lld", what, (long long)o->cols);
  cr_expect_eq(o->ld, ld, "%s ld %lld", what, (long long)o->ld);
  cr_expect_eq(o->alignment, alignment, "%s alignment %u", what, o->alignment);
}

/* x (128, 784) @ weight (256, 784)^T: A is the weight as stored, transposed (N x K); B is x, K x M; D is N x M. */
Test(linear_lt_case, a_linear_layer_is_weight_transposed_times_x) {
  mx_dtype dtypes[3] = {MX_F32, MX_F16, MX_BF16};
  for (int d = 0; d < 3; d++) {
    operands o = linear(dtypes[d], 128, 784, 256);
    mx_lt_linear_case c;
    cr_assert(mx__lt_linear_case_of(&o.out, &o.a, &o.b, &o.bias, true, &c), "%s", mx_dtype_name(dtypes[d]));
    cr_expect_eq(c.dtype, dtypes[d]);
    expect_operand(&c.a, 1, 784, 256, 784, 256, "A");
    expect_operand(&c.b, 0, 784, 128, 784, 256, "B");
    expect_operand(&c.d, 0, 256, 128, 256, 256, "D");
    cr_expect_eq(c.relu, 1, "RELU_BIAS");
    /* the plain linear: the BIAS epilogue, the same layouts */
    mx_lt_linear_case plain;
    cr_assert(mx__lt_linear_case_of(&o.out, &o.a, &o.b, &o.bias, false, &plain));
    cr_expect_eq(plain.relu, 0, "BIAS");
    expect_operand(&plain.a, 1, 784, 256, 784, 256, "BIAS's A");
    expect_operand(&plain.b, 0, 784, 128, 784, 256, "BIAS's B");
    expect_operand(&plain.d, 0, 256, 128, 256, 256, "BIAS's D");
    cr_expect_eq(plain.bias_alignment, c.bias_alignment);
  }
}

/* A transposed x (its columns contiguous) is B with op T; a weight stored (K, N) row-major is A with op N. */
Test(linear_lt_case, transposed_operands_swap_the_ops) {
  operands o = linear(MX_F32, 6, 5, 3);
  o.a.strides[1] = 1, o.a.strides[2] = 6;  /* x^T stored */
  o.b.strides[1] = 3, o.b.strides[2] = 1;  /* b plain (K, N) */
  mx_lt_linear_case c;
  cr_assert(mx__lt_linear_case_of(&o.out, &o.a, &o.b, &o.bias, true, &c));
  expect_operand(&c.a, 0, 3, 5, 3, 256, "A");
  expect_operand(&c.b, 1, 6, 5, 6, 256, "B");
}

/* Views that start mid-buffer tell the heuristic their alignment: 4 bytes past 256 is 4-aligned. The bias's
 * alignment is part of the case too: the heuristic reads it from the bias pointer, so a plan chosen for a 256-byte
 * aligned bias must not serve one on a 16-byte boundary. */
Test(linear_lt_case, alignments_follow_the_pointers) {
  operands o = linear(MX_F32, 4, 8, 16);
  o.a.data = memory + 4096 + 4, o.b.data = memory + 8192 + 32, o.out.data = memory + 64, o.bias.data = memory + 12288 + 16;
  mx_lt_linear_case c;
  cr_assert(mx__lt_linear_case_of(&o.out, &o.a, &o.b, &o.bias, true, &c));
  cr_expect_eq(c.b.alignment, 4);
  cr_expect_eq(c.a.alignment, 32);
  cr_expect_eq(c.d.alignment, 64);
  cr_expect_eq(c.bias_alignment, 16);
  o.bias.data = memory + 12288;
  cr_assert(mx__lt_linear_case_of(&o.out, &o.a, &o.b, &o.bias, true, &c));
  cr_expect_eq(c.bias_alignment, 256);
}

/* What the epilogue does not take: the op then runs matmul, add and relu. */
Test(linear_lt_case, cases_the_epilogue_does_not_take) {
  mx_lt_linear_case c;
  operands o = linear(MX_F64, 4, 8, 16); /* float64: cuBLAS's, unfused */
  cr_expect_not(mx__lt_linear_case_of(&o.out, &o.a, &o.b, &o.bias, true, &c), "float64");
  o = linear(MX_F32, 4, 8, 16);
  o.bias.dtype = MX_F16; /* the bias in another dtype */
  cr_expect_not(mx__lt_linear_case_of(&o.out, &o.a, &o.b, &o.bias, true, &c), "bias dtype");
  o = linear(MX_F32, 4, 8, 16);
  o.bias.data = memory + 12288 + 8; /* bias off a 16-byte boundary */
  cr_expect_not(mx__lt_linear_case_of(&o.out, &o.a, &o.b, &o.bias, true, &c), "bias alignment");
  o = linear(MX_F32, 4, 8, 16);
  o.bias.strides[0] = 2; /* a strided bias */
  cr_expect_not(mx__lt_linear_case_of(&o.out, &o.a, &o.b, &o.bias, true, &c), "bias stride");
  o = linear(MX_F32, 4, 8, 16);
  o.a.strides[1] = 2, o.a.strides[2] = 3; /* x's rows and columns both strided */
  cr_expect_not(mx__lt_linear_case_of(&o.out, &o.a, &o.b, &o.bias, true, &c), "x strided both ways");
  o = linear(MX_F32, 4, 8, 16);
  o.out.shape[0] = o.a.shape[0] = o.b.shape[0] = 2; /* a batch */
  cr_expect_not(mx__lt_linear_case_of(&o.out, &o.a, &o.b, &o.bias, true, &c), "batch");
  o = linear(MX_F32, 0, 8, 16); /* no rows */
  cr_expect_not(mx__lt_linear_case_of(&o.out, &o.a, &o.b, &o.bias, true, &c), "empty");
}
