/* mx_max_pool_relu against mx_max_pool(mx_relu(x)): hand-computed values and gradients (NaN, -0, ties), the same
 * bits forward and backward in every float dtype, row-major and channels-last, over the kernels' paths (2x2 tiles,
 * overlapping and padded windows, dilation, 1-d and 3-d, int64 indices); its errors name it. The gradients against
 * float64 finite differences are the op suite's gradcheck of the max_pool_relu cases (op_cases_appended.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "../common/expect_error.h"

static const mx_dtype float_dtypes[4] = {MX_F32, MX_BF16, MX_F16, MX_F64};

/* t as float64 values (row-major order), malloc'ed. */
static double *values_of(const mx_tensor *t) {
  mx_tensor *d = mx_contiguous(mx_to_dtype(t, MX_F64));
  cr_assert(d, "%s", mx_last_error());
  size_t n = (size_t)mx_numel(d);
  double *v = malloc(sizeof(double) * (n ? n : 1));
  cr_assert(v && mx_to_host(d, v, sizeof(double) * n) == MX_OK, "%s", mx_last_error());
  mx_release(d);
  return v;
}

/* a and b hold the same dtype, shape and bits (in row-major order). */
static void expect_same_bits(const mx_tensor *a, const mx_tensor *b, const char *what, int k, mx_dtype dt,
                             bool channels_last) {
  cr_assert(a && b, "case %d %s (%s): %s", k, what, mx_dtype_name(dt), mx_last_error());
  cr_assert_eq(mx_dtype_of(a), mx_dtype_of(b));
  mx_tensor *ca = mx_contiguous(a), *cb = mx_contiguous(b);
  size_t n = (size_t)mx_numel(ca) * mx_dtype_size(mx_dtype_of(a));
  cr_assert_eq(mx_numel(ca), mx_numel(cb));
  char *ba = malloc(n + 1), *bb = malloc(n + 1);
  cr_assert(ba && bb && mx_to_host(ca, ba, n) == MX_OK && mx_to_host(cb, bb, n) == MX_OK);
  cr_expect(!memcmp(ba, bb, n), "case %d %s (%s, %s): fused and unfused differ", k, what, mx_dtype_name(dt),
            channels_last ? "channels-last" : "row-major");
  free(ba);
  free(bb);
  mx_release(ca);
  mx_release(cb);
}

/* --- hand-computed values ------------------------------------------------------------------------------------- */

/* One (1, 1, 4, 4) plane in 2x2 windows: relu then max gives
 *   window (0,0) {1, -2, 3, 3}:      3, the first of the tie (row 1, col 0)
 *   window (0,1) {-1, -3, -4, -0}:   +0, relu's zeros tie and the first wins (relu(-1); relu after the max
 *                                    would give relu(-0) = -0)
 *   window (1,0) {-0, -6, -7, -5}:   -0, the first zero is relu(-0) = -0
 *   window (1,1) {NaN, 2, 5, NaN}:   NaN, the last one (row 3, col 3)
 * and the gradient of sum(y * g) for g = (1, 2, 3, 4) is 1 at (1, 0), 4 at (3, 3) (relu passes a NaN's gradient,
 * as PyTorch's threshold_backward) and +0 elsewhere. */
static const double hand_input[16] = {1, -2, -1, -3, 3, 3, -4, -0.0, -0.0, -6, NAN, 2, -7, -5, 5, NAN};

Test(max_pool_relu, hand_computed_values_nan_signed_zero_and_ties) {
  for (int d = 0; d < 4; d++) {
    mx_scope *scope = mx_scope_begin();
    mx_dtype dt = float_dtypes[d];
    mx_tensor *x = mx_to_dtype(mx_from_data(hand_input, MX_SHAPE(1, 1, 4, 4), MX_F64, MX_CPU), dt);
    x = mx_detach(x);
    cr_assert(x && mx_set_requires_grad(x, true) == MX_OK, "%s", mx_last_error());
    mx_tensor *y = mx_max_pool_relu(x, 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT);
    cr_assert(y, "%s", mx_last_error());
    cr_expect_str_eq(mx_grad_fn_name(y), "MAX_POOL_RELUBackward");
    double *v = values_of(y);
    cr_expect(v[0] == 3 && v[1] == 0 && !signbit(v[1]) && v[2] == 0 && signbit(v[2]) && isnan(v[3]),
              "%s: got %g %g %g %g", mx_dtype_name(dt), v[0], v[1], v[2], v[3]);
    free(v);
    double g_values[4] = {1, 2, 3, 4};
    mx_tensor *g = mx_to_dtype(mx_from_data(g_values, MX_SHAPE(1, 1, 2, 2), MX_F64, MX_CPU), dt);
    mx_tensor *grad = NULL;
    mx_tensor *loss = mx_sum(mx_mul(y, g), MX_ALL_DIMS, false);
    cr_assert_eq(mx_grad(1, &loss, 1, &x, NULL, false, false, false, &grad), MX_OK, "%s", mx_last_error());
    double *dx = values_of(grad);
    for (int i = 0; i < 16; i++) {
      double want = i == 4 ? 1 : i == 15 ? 4 : 0;
      cr_expect(dx[i] == want && !signbit(dx[i]), "%s: grad[%d] = %g, expected %g", mx_dtype_name(dt), i, dx[i],
                want);
    }
    free(dx);
    mx_scope_end(scope);
  }
}

/* --- against the unfused pair --------------------------------------------------------------------------------- */

typedef struct {
  int spatial;
  int64_t shape[5];
  mx_shape kernel, stride, padding, dilation;
} pool_case;

/* 2x2 tiles (even and odd sizes: an uncovered last row and column), overlapping windows with padding, dilation,
 * 1-d, 3-d, and a 17x17 kernel (more than 256 elements: int64 indices); 2-d cases have 3 and 70 channels (the
 * channels-last kernels' 64-channel tiles). */
static const pool_case cases[] = {
    {2, {2, 3, 6, 8}, {1, {2}}, {0}, {0}, {0}},
    {2, {2, 70, 7, 5}, {1, {2}}, {0}, {0}, {0}},
    {2, {1, 3, 7, 6}, {2, {3, 2}}, {2, {2, 1}}, {2, {1, 0}}, {0}},
    {2, {2, 70, 6, 6}, {1, {3}}, {1, {2}}, {1, {1}}, {0}},
    {2, {1, 3, 8, 8}, {1, {2}}, {1, {1}}, {1, {1}}, {1, {2}}},
    {2, {1, 2, 18, 18}, {1, {17}}, {1, {1}}, {0}, {0}},
    {1, {2, 3, 9}, {1, {3}}, {1, {2}}, {1, {1}}, {0}},
    {3, {1, 2, 4, 5, 4}, {1, {2}}, {0}, {0}, {0}},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

/* An input of case k's shape in dtype dt from few levels (so windows tie, relu's zeros tie with each other), with
 * NaN and -0 sprinkled in, requiring grad; channels-last when asked (4-d only). */
static mx_tensor *tie_heavy_input(int k, mx_dtype dt, bool channels_last, mx_generator *gen) {
  const pool_case *c = &cases[k];
  mx_shape shape = {c->spatial + 2, {0}};
  for (int i = 0; i < shape.ndim; i++) shape.d[i] = c->shape[i];
  mx_tensor *u = mx_rand(shape, MX_F64, MX_CPU, gen);
  double *v = values_of(u);
  static const double levels[8] = {-1.5, -1, -0.0, 0, 0.5, 1, 1, 2};
  int64_t n = mx_numel(u);
  for (int64_t i = 0; i < n; i++) {
    int level = (int)(v[i] * 1000) % 9;
    v[i] = level == 8 ? (i % 5 ? -0.25 : NAN) : levels[level];
  }
  mx_tensor *x = mx_to_dtype(mx_from_data(v, shape, MX_F64, MX_CPU), dt);
  free(v);
  if (channels_last) x = mx_to_channels_last(x);
  x = mx_detach(x);
  cr_assert(x && mx_set_requires_grad(x, true) == MX_OK, "%s", mx_last_error());
  return x;
}

static void check_case(int k, mx_dtype dt, bool channels_last) {
  const pool_case *c = &cases[k];
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(380 + (uint64_t)k);
  mx_tensor *x = tie_heavy_input(k, dt, channels_last, gen);
  mx_tensor *y[2];
  mx_max_pool_with_indices(mx_relu(x), c->spatial, c->kernel, c->stride, c->padding, c->dilation, &y[0], NULL);
  y[1] = mx_max_pool_relu(x, c->spatial, c->kernel, c->stride, c->padding, c->dilation);
  expect_same_bits(y[0], y[1], "output", k, dt, channels_last);
  /* gradients of sum(y * r), r with NaN and -0 too (the masks must pass or drop them alike) */
  mx_tensor *r = mx_randn(mx_shape_get(y[0]), MX_F64, MX_CPU, gen);
  double *rv = values_of(r);
  for (int64_t i = 0; i < mx_numel(r); i++)
    if (i % 7 == 3) rv[i] = i % 2 ? -0.0 : NAN;
  r = mx_to_dtype(mx_from_data(rv, mx_shape_get(y[0]), MX_F64, MX_CPU), dt);
  free(rv);
  mx_tensor *grads[2] = {NULL};
  for (int f = 0; f < 2; f++) {
    mx_tensor *loss = mx_sum(mx_mul(y[f], r), MX_ALL_DIMS, false);
    cr_assert_eq(mx_grad(1, &loss, 1, &x, NULL, false, false, false, &grads[f]), MX_OK, "%s", mx_last_error());
  }
  expect_same_bits(grads[0], grads[1], "grad of x", k, dt, channels_last);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

Test(max_pool_relu, every_dtype_row_major_is_max_pool_of_relu_bit_for_bit) {
  for (int d = 0; d < 4; d++)
    for (int k = 0; k < N_CASES; k++) check_case(k, float_dtypes[d], false);
}

Test(max_pool_relu, every_dtype_channels_last_is_max_pool_of_relu_bit_for_bit) {
  for (int d = 0; d < 4; d++)
    for (int k = 0; k < N_CASES; k++)
      if (cases[k].spatial == 2) check_case(k, float_dtypes[d], true);
}

/* The output and the input gradient keep the input's channels-last layout, as max_pool's do. */
Test(max_pool_relu, channels_last_in_channels_last_out) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(5);
  mx_tensor *x = tie_heavy_input(1, MX_F32, true, gen);
  mx_tensor *y = mx_max_pool_relu(x, 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT);
  cr_assert(y, "%s", mx_last_error());
  cr_expect(mx_is_channels_last(y) && !mx_is_contiguous(y));
  mx_tensor *grad = NULL, *loss = mx_sum(y, MX_ALL_DIMS, false);
  cr_assert_eq(mx_grad(1, &loss, 1, &x, NULL, false, false, false, &grad), MX_OK, "%s", mx_last_error());
  cr_expect(mx_is_channels_last(grad) && !mx_is_contiguous(grad));
  mx_generator_free(gen);
  mx_scope_end(scope);
}

Test(max_pool_relu, errors_name_it) {
  mx_scope *scope = mx_scope_begin();
  mx_tensor *x = mx_zeros(MX_SHAPE(2, 3, 4), MX_F32, MX_CPU);
  EXPECT_ERROR(mx_max_pool_relu(x, 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT),
               "mx_max_pool_relu: expected a 4-d input (N, C, 2 spatial dims), got 3 dims");
  EXPECT_ERROR(mx_max_pool_relu(x, 0, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT),
               "mx_max_pool_relu: 0 spatial dims (1 to 3) and a kernel size are needed");
  EXPECT_ERROR(mx_max_pool_relu(x, 1, MX_SHAPE(2), MX_DEFAULT, MX_SHAPE(2), MX_DEFAULT),
               "mx_max_pool_relu: kernel 2, stride 2 and padding 2: kernel and stride must be positive and padding "
               "at most half the kernel");
  mx_scope_end(scope);
}
