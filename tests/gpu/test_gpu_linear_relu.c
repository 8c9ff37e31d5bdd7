/* mx_linear_relu and mx_linear with a bias on CUDA (cuBLASLt's RELU_BIAS and BIAS epilogues for float32, float16
 * and bfloat16; cuBLAS, add and relu for float64) against the CPU's, forward and backward, within the bounds the
 * convolutions use in test_gpu_layers.c; a repeated call, which reuses the case's plan (kernels/cuda/matmul.cu), with
 * the bits of the first; a call on other values; and a bias off 256-byte lines. Skips without a GPU. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "compare.h"

typedef struct {
  mx_shape x;
  int64_t out;
} linear_case;

/* rows, rows in a batch (folded into one product), and an output width whose rows start off 16-byte lines */
static const linear_case cases[] = {{{2, {32, 20}}, 16}, {{3, {2, 5, 20}}, 24}, {{2, {9, 20}}, 7}};

/* The output and the gradients of sum(y * seed) for x, weight and bias on one device. With bias_offset the bias
 * starts 16 bytes into a longer leaf (a 16-byte aligned address, where a fresh tensor's is 256-byte aligned), and its
 * gradient is that part of the leaf's. */
static void run(const linear_case *c, mx_dtype dtype, bool relu, bool gpu, uint64_t seed, bool bias_offset,
                mx_tensor **results) {
  mx_generator *g = mx_generator_new(seed);
  int64_t pad = bias_offset ? 16 / (int64_t)mx_dtype_size(dtype) : 0;
  mx_tensor *t[3] = {mx_randn(c->x, MX_F64, MX_CPU, g),
                     mx_randn(MX_SHAPE(c->out, c->x.d[c->x.ndim - 1]), MX_F64, MX_CPU, g),
                     mx_randn(MX_SHAPE(c->out + pad), MX_F64, MX_CPU, g)};
  for (int i = 0; i < 3; i++) {
    t[i] = mx_to_dtype(t[i], dtype);
    if (gpu) t[i] = to_cuda(t[i]);
    cr_assert_eq(mx_set_requires_grad(t[i], true), MX_OK, "%s", mx_last_error());
  }
  mx_tensor *bias = mx_narrow(t[2], 0, pad, c->out);
  results[0] = relu ? mx_linear_relu(t[0], t[1], bias) : mx_linear(t[0], t[1], bias);
  cr_assert_not_null(results[0], "%s: %s", gpu ? "cuda" : "cpu", mx_last_error());
  cr_expect_str_eq(mx_grad_fn_name(results[0]), relu ? "LINEAR_RELUBackward" : "LINEAR_BIASBackward");
  mx_tensor *s = mx_to_dtype(mx_randn(mx_shape_get(results[0]), MX_F64, MX_CPU, g), dtype);
  mx_generator_free(g);
  cr_assert_eq(mx_backward(results[0], gpu ? to_cuda(s) : s, false), MX_OK, "%s", mx_last_error());
  for (int i = 0; i < 3; i++) results[1 + i] = mx_grad_of(t[i]);
  results[3] = mx_contiguous(mx_narrow(results[3], 0, pad, c->out));
}

/* The four results of a CUDA run against another run's (moved to the CPU), within rel, or bit for bit (rel 0). */
static void expect_close(mx_tensor *const *want, mx_tensor *const *got, double rel, const char *what, int k,
                         mx_dtype dtype) {
  static const char *const names[4] = {"output", "dx", "dw", "db"};
  for (int i = 0; i < 4; i++) {
    char why[256];
    size_t n = differences(mx_to_device(want[i], MX_CPU), got[i], rel, rel > 0 ? 1.0 : 0, why, sizeof why);
    cr_expect_eq(n, 0, "case %d, %s, %s, %s: %zu elements differ; the first, %s", k, mx_dtype_name(dtype), what,
                 names[i], n, why);
  }
}

/* float32 within its rounding of sums of about 1; float16 and bfloat16 within one rounding of their own (both
 * round the product plus the bias once, from float32 sums taken in other orders); float64 the same products summed
 * in other orders. With and without the ReLU (the RELU_BIAS and BIAS epilogues). Each case runs three times on the
 * GPU: first; again on the same values, which reuses the case's plan (kernels/cuda/matmul.cu) and wants the first run's bits; and on other values while the
 * first run's tensors still live, which a plan holding on to the first bias would get wrong. Then with the bias
 * 16 bytes into its leaf: another plan, since the heuristic reads the bias's alignment from its address. */
Test(gpu, linear_and_linear_relu_forward_and_backward_match_cpu) {
  require_gpu();
  for (int d = 0; d < COUNT(float_dtypes); d++) {
    mx_dtype dtype = float_dtypes[d];
    double rel = dtype == MX_F64 ? 1e-12 : dtype == MX_F32 ? 1e-5 : dtype == MX_F16 ? 0x1p-9 : 0x1p-6;
    for (int k = 0; k < COUNT(cases); k++) {
      for (int variant = 0; variant < 4; variant++) {
        bool offset = variant & 1, relu = variant < 2;
        mx_scope *scope = mx_scope_begin();
        uint64_t seed = 3200 + 10 * (uint64_t)k + 2 * (uint64_t)variant;
        mx_tensor *cpu[4], *gpu[4], *again[4], *cpu_other[4], *gpu_other[4];
        run(&cases[k], dtype, relu, false, seed, offset, cpu);
        run(&cases[k], dtype, relu, true, seed, offset, gpu);
        run(&cases[k], dtype, relu, true, seed, offset, again);
        run(&cases[k], dtype, relu, false, seed + 1, offset, cpu_other);
        run(&cases[k], dtype, relu, true, seed + 1, offset, gpu_other);
        const char *bias = offset ? "bias off 256-byte lines" : "bias 256-byte aligned";
        char what[96];
        const char *op = relu ? "linear_relu" : "linear";
        snprintf(what, sizeof what, "%s, %s, first call", op, bias);
        expect_close(cpu, gpu, rel, what, k, dtype);
        snprintf(what, sizeof what, "%s, %s, the call repeated against the first", op, bias);
        expect_close(gpu, again, 0, what, k, dtype);
        snprintf(what, sizeof what, "%s, %s, other values", op, bias);
        expect_close(cpu_other, gpu_other, rel, what, k, dtype);
        mx_scope_end(scope);
      }
    }
  }
}
