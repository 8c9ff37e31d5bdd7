/* mx_linear_relu on CUDA (cuBLASLt's RELU_BIAS epilogue for float32, float16 and bfloat16; cuBLAS, add and relu for
 * float64) against the CPU's, forward and backward, within the bounds the convolutions use in test_gpu_layers.c; and a
 * repeated call, which reuses the case's plan (kernels/cuda/matmul.cu), with the bits of the first. Skips without a
 * GPU. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "compare.h"

typedef struct {
  mx_shape x;
  int64_t out;
} linear_case;

/* rows, rows in a batch (folded into one product), and an output width whose rows start off 16-byte lines */
static const linear_case cases[] = {{{2, {32, 20}}, 16}, {{3, {2, 5, 20}}, 24}, {{2, {9, 20}}, 7}};

/* The output and the gradients of sum(y * seed) for x, weight and bias on one device. */
static void run(const linear_case *c, mx_dtype dtype, bool gpu, uint64_t seed, mx_tensor **results) {
  mx_generator *g = mx_generator_new(seed);
  mx_tensor *t[4] = {mx_randn(c->x, MX_F64, MX_CPU, g), mx_randn(MX_SHAPE(c->out, c->x.d[c->x.ndim - 1]), MX_F64,
                                                                  MX_CPU, g),
                     mx_randn(MX_SHAPE(c->out), MX_F64, MX_CPU, g), NULL};
  for (int i = 0; i < 3; i++) {
    t[i] = mx_to_dtype(t[i], dtype);
    if (gpu) t[i] = to_cuda(t[i]);
    cr_assert_eq(mx_set_requires_grad(t[i], true), MX_OK, "%s", mx_last_error());
  }
  results[0] = mx_linear_relu(t[0], t[1], t[2]);
  cr_assert_not_null(results[0], "%s: %s", gpu ? "cuda" : "cpu", mx_last_error());
  cr_expect_str_eq(mx_grad_fn_name(results[0]), "LINEAR_RELUBackward");
  mx_tensor *s = mx_to_dtype(mx_randn(mx_shape_get(results[0]), MX_F64, MX_CPU, g), dtype);
  mx_generator_free(g);
  cr_assert_eq(mx_backward(results[0], gpu ? to_cuda(s) : s, false), MX_OK, "%s", mx_last_error());
  for (int i = 0; i < 3; i++) results[1 + i] = mx_grad_of(t[i]);
}

/* float32 within its rounding of sums of about 1; float16 and bfloat16 within one rounding of their own (the
 * epilogue rounds the product plus the bias once, the CPU the product and then the sum: two); float64 the same
 * products summed in other orders. */
Test(gpu, linear_relu_forward_and_backward_match_cpu) {
  require_gpu();
  const char *names[4] = {"output", "dx", "dw", "db"};
  for (int d = 0; d < COUNT(float_dtypes); d++) {
    mx_dtype dtype = float_dtypes[d];
    double rel = dtype == MX_F64 ? 1e-12 : dtype == MX_F32 ? 1e-5 : dtype == MX_F16 ? 0x1p-9 : 0x1p-6;
    for (int k = 0; k < COUNT(cases); k++) {
      mx_scope *scope = mx_scope_begin();
      mx_tensor *cpu[4], *gpu[4];
      mx_tensor *again[4];
      run(&cases[k], dtype, false, 3200 + (uint64_t)k, cpu);
      run(&cases[k], dtype, true, 3200 + (uint64_t)k, gpu);
      run(&cases[k], dtype, true, 3200 + (uint64_t)k, again);
      for (int i = 0; i < 4; i++) {
        char why[256];
        size_t n = differences(cpu[i], gpu[i], rel, 1.0, why, sizeof why);
        cr_expect_eq(n, 0, "case %d, %s, %s: %zu elements differ; the first, %s", k, mx_dtype_name(dtype), names[i],
                     n, why);
        n = differences(mx_to_device(gpu[i], MX_CPU), again[i], 0, 0, why, sizeof why);
        cr_expect_eq(n, 0, "case %d, %s, %s, the call repeated: %zu elements differ; the first, %s", k,
                     mx_dtype_name(dtype), names[i], n, why);
      }
      mx_scope_end(scope);
    }
  }
}
