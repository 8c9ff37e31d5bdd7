/* mx_linear_relu against mx_relu(mx_linear(...)): the same bits forward and in every gradient (float32 and
 * bfloat16 through oneDNN's matmul with its bias and ReLU post-op; float16, float64, no bias and odd layouts through
 * linear's ops), under bfloat16 autocast, what the post-op does with NaN and -0, and its errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "../common/expect_error.h"
#include "fused_case.h"
#include "kernels/backend.h"
#include "kernels/cpu/dnnl.h"
#include "mx_config.h"
#include "tensor/tensor_impl.h"

typedef struct {
  mx_shape x;
  int64_t out;
  bool bias, transposed_x; /* transposed_x: x (2-d) stored column by column */
} linear_case;

/* A batch of rows, one vector, rows in a 3-d batch, a transposed input, no bias, one output feature, a width oneDNN
 * blocks (64). */
static const linear_case cases[] = {
    {{2, {8, 12}}, 16, true, false}, {{1, {12}}, 5, true, false},     {{3, {2, 3, 12}}, 7, true, false},
    {{2, {12, 9}}, 6, true, true},   {{2, {8, 12}}, 16, false, false}, {{2, {5, 12}}, 1, true, false},
    {{2, {33, 12}}, 64, true, false},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))


/* One case in one dtype: the output, then the gradients of sum(y * r) for x, weight and bias, fused and not. */
static void check_case(int k, mx_dtype dt, mx_dtype autocast) {
  const linear_case *c = &cases[k];
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(32 + (uint64_t)k);
  int64_t in = c->x.d[c->x.ndim - 1];
  mx_tensor *x = c->transposed_x ? fused_case_leaf(MX_SHAPE(c->x.d[1], c->x.d[0]), dt, gen) : fused_case_leaf(c->x, dt, gen);
  mx_tensor *x_used = c->transposed_x ? mx_transpose(x, 0, 1) : x;
  mx_tensor *w = fused_case_leaf(MX_SHAPE(c->out, in), dt, gen);
  mx_tensor *b = c->bias ? fused_case_leaf(MX_SHAPE(c->out), dt, gen) : NULL;
  mx_tensor *y[2];
  MX_AUTOCAST(MX_CPU, autocast, autocast != MX_DTYPE_COUNT, true) {
    y[0] = mx_relu(mx_linear(x_used, w, b));
    y[1] = mx_linear_relu(x_used, w, b);
  }
  fused_case_same_bits(y[0], y[1], "output", k, dt);
  cr_expect_str_eq(mx_grad_fn_name(y[1]), "LINEAR_RELUBackward");
  fused_case_same_gradients(y, x, w, b, gen, k, dt);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

Test(linear_relu, float32_is_relu_of_linear_bit_for_bit) {
  for (int k = 0; k < N_CASES; k++) check_case(k, MX_F32, MX_DTYPE_COUNT);
}

Test(linear_relu, other_dtypes_are_relu_of_linear_bit_for_bit) {
  mx_dtype dtypes[3] = {MX_BF16, MX_F16, MX_F64};
  for (int d = 0; d < 3; d++)
    for (int k = 0; k < N_CASES; k++) check_case(k, dtypes[d], MX_DTYPE_COUNT);
}

/* float32 leaves in a bfloat16 region: both lower x, weight and bias as linear does */
Test(linear_relu, bfloat16_autocast_lowers_it_as_linear) {
  for (int k = 0; k < N_CASES; k++) check_case(k, MX_F32, MX_BF16);
}

/* The fused kernel is oneDNN's matmul with the bias and the post-op (the comparisons above would pass trivially if
 * it declined), and its bits are the plain matmul's, plus the bias, then the ReLU. */
Test(linear_relu, the_cpu_runs_bias_and_relu_inside_onednn_matmul) {
  if (!MX_HAVE_DNNL || !mx__dnnl_native(MX_F32)) cr_skip_test("built without oneDNN");
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(7);
  mx_tensor *x = fused_case_leaf(MX_SHAPE(1, 33, 24), MX_F32, gen), *w = fused_case_leaf(MX_SHAPE(1, 24, 40), MX_F32, gen);
  mx_tensor *b = fused_case_leaf(MX_SHAPE(40), MX_F32, gen);
  mx_tensor *fused = mx_empty(MX_SHAPE(1, 33, 40), MX_F32, MX_CPU), *plain = mx_empty(MX_SHAPE(1, 33, 40), MX_F32, MX_CPU);
  mx_kview xv = mx__kview_of(x), wv = mx__kview_of(w), bv = mx__kview_of(b);
  mx_kview fv = mx__kview_of(fused), pv = mx__kview_of(plain);
  cr_assert_eq(mx__dnnl_linear(&fv, &xv, &wv, &bv, true), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx__dnnl_matmul(&pv, &xv, &wv), MX_OK, "%s", mx_last_error());
  mx_tensor *sums = mx_add(plain, b);
  fused_case_same_bits(fused, mx_relu(sums), "kernel output", 0, MX_F32);
  cr_expect_gt(mx_item(mx_sum(mx_lt_scalar(sums, 0), MX_ALL_DIMS, false)), 0, "no negative sum: the ReLU did nothing");
  /* bfloat16 where the CPU has its dot products: the kernel linear's own (one rounding of product plus bias) */
  mx_tensor *h[3] = {mx_to_dtype(x, MX_BF16), mx_to_dtype(w, MX_BF16), mx_to_dtype(b, MX_BF16)};
  mx_tensor *hy = mx_empty(MX_SHAPE(1, 33, 40), MX_BF16, MX_CPU);
  mx_kview hv[4] = {mx__kview_of(hy), mx__kview_of(h[0]), mx__kview_of(h[1]), mx__kview_of(h[2])};
  if (mx__dnnl_native(MX_BF16)) {
    cr_assert_eq(mx__dnnl_linear(&hv[0], &hv[1], &hv[2], &hv[3], true), MX_OK, "%s", mx_last_error());
    mx_tensor *x2 = mx_squeeze(h[0], 0), *w2 = mx_transpose(mx_squeeze(h[1], 0), 0, 1);
    fused_case_same_bits(mx_squeeze(hy, 0), mx_relu(mx_linear(x2, w2, h[2])), "bfloat16 kernel output", 0, MX_BF16);
  }
  mx_generator_free(gen);
  mx_scope_end(scope);
}

/* What oneDNN 2.6's clip post-op gives, as in conv2d_relu: a NaN sum becomes 0 (relu keeps NaN), and no output is
 * -0. Outside the fused kernel (float64 here) the op is relu's: NaN stays NaN. */
Test(linear_relu, nan_and_negative_zero_as_documented) {
  mx_scope *scope = mx_scope_begin();
  float xs[2 * 3] = {1, NAN, 2, -1, -2, -3}, ws[2 * 3] = {1, 1, 1, 1, 0, 0}, bs[2] = {0, -0.0f};
  mx_dtype dtypes[2] = {MX_F32, MX_F64};
  for (int d = 0; d < 2; d++) {
    mx_tensor *x = mx_to_dtype(mx_from_data(xs, MX_SHAPE(2, 3), MX_F32, MX_CPU), dtypes[d]);
    mx_tensor *w = mx_to_dtype(mx_from_data(ws, MX_SHAPE(2, 3), MX_F32, MX_CPU), dtypes[d]);
    mx_tensor *b = mx_to_dtype(mx_from_data(bs, MX_SHAPE(2), MX_F32, MX_CPU), dtypes[d]);
    double out[4];
    cr_assert_eq(mx_to_host(mx_to_dtype(mx_linear_relu(x, w, b), MX_F64), out, sizeof out), MX_OK, "%s",
                 mx_last_error());
    bool fused = dtypes[d] == MX_F32 && MX_HAVE_DNNL && mx__dnnl_native(MX_F32);
    /* row 0: x has a NaN, so both sums are NaN */
    for (int j = 0; j < 2; j++)
      cr_expect(fused ? out[j] == 0 && !signbit(out[j]) : isnan(out[j]), "%s: out[0][%d] = %g",
                mx_dtype_name(dtypes[d]), j, out[j]);
    /* row 1: sums -6 + 0 and -1 + -0, both negative: +0 */
    for (int j = 2; j < 4; j++)
      cr_expect(out[j] == 0 && !signbit(out[j]), "%s: out[1][%d] = %g", mx_dtype_name(dtypes[d]), j - 2, out[j]);
  }
  mx_scope_end(scope);
}

Test(linear_relu, its_errors_name_it) {
  mx_scope *scope = mx_scope_begin();
  mx_tensor *x = mx_zeros(MX_SHAPE(2, 4), MX_F32, MX_CPU), *w = mx_zeros(MX_SHAPE(3, 4), MX_F32, MX_CPU);
  EXPECT_ERROR(mx_linear_relu(x, mx_zeros(MX_SHAPE(4), MX_F32, MX_CPU), NULL),
               "mx_linear_relu: weight must be 2-d, got shape [4]");
  EXPECT_ERROR(mx_linear_relu(x, mx_zeros(MX_SHAPE(3, 5), MX_F32, MX_CPU), NULL),
               "mx_linear_relu: input [2,4] and weight [3,5] do not fit: 4 input features, weight expects 5");
  EXPECT_ERROR(mx_linear_relu(x, w, mx_zeros(MX_SHAPE(4), MX_F32, MX_CPU)),
               "mx_linear_relu: bias [4] does not fit weight [3,4] (expected [3])");
  EXPECT_ERROR(mx_linear_relu(x, mx_zeros(MX_SHAPE(3, 4), MX_F64, MX_CPU), NULL),
               "mx_linear_relu: expected both operands to have one dtype, got float32 and float64");
  EXPECT_ERROR(mx_linear_relu(x, w, mx_zeros(MX_SHAPE(3), MX_BF16, MX_CPU)),
               "mx_linear_relu: expected both operands to have one dtype, got float32 and bfloat16");
  mx_scope_end(scope);
}
