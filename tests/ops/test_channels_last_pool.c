/* Pooling on channels-last inputs: max pooling (values, indices, input
 * gradient) and average pooling (values, input gradient) give the bits of
 * the row-major path in every float dtype, with channels-last outputs and
 * input gradients, on odd sizes (19 channels, 9x11 planes) with padding,
 * strides, overlapping and dilated windows, ties and NaN; ResNet's last
 * pooling (4x4 planes to one pixel) keeps the gradient's layout; gradcheck
 * in float64 through the channels-last kernels. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>

#include <mixgrad.h>

#include "tests/ops/channels_last_case.h"

static const mx_dtype float_dtypes[4] = {MX_F32, MX_BF16, MX_F16, MX_F64};

typedef struct {
  const char *name;
  mx_shape shape, kernel, stride, padding, dilation;
  bool count_include_pad; /* average pooling */
} pool_case;

/* The cases (a function: compound literals are no constant initialisers). */
static pool_case case_at(int k) {
  const pool_case cases[] = {
    {"2x2 stride 2", MX_SHAPE(3, 19, 9, 11), MX_DIMS(2), MX_DIMS(2), MX_DIMS(0), MX_DIMS(1), true},
    {"3x3 stride 2 padding 1", MX_SHAPE(3, 19, 9, 11), MX_DIMS(3), MX_DIMS(2), MX_DIMS(1), MX_DIMS(1), false},
    {"3x3 stride 1 padding 1 (overlapping)", MX_SHAPE(2, 19, 9, 11), MX_DIMS(3), MX_DIMS(1), MX_DIMS(1), MX_DIMS(1),
     true},
    {"2x3 stride (1, 2) padding (1, 0)", MX_SHAPE(2, 70, 7, 9), MX_DIMS(2, 3), MX_DIMS(1, 2), MX_DIMS(1, 0),
     MX_DIMS(1), false},
    {"3x3 dilation 2 (int64 indices)", MX_SHAPE(2, 19, 9, 11), MX_DIMS(3), MX_DIMS(2), MX_DIMS(1), MX_DIMS(2), true},
    {"4x4 planes to one pixel", MX_SHAPE(2, 20, 4, 4), MX_DIMS(4), MX_DIMS(4), MX_DIMS(0), MX_DIMS(1), true},
  };
  return cases[k];
}
enum { N_CASES = 6 };

typedef struct {
  mx_tensor *y, *indices, *dx;
} pool_run;

/* Max (or average) pooling of a copy of x and the gradient of x for grad_y. */
static pool_run run(const pool_case *pc, const mx_tensor *x, const mx_tensor *grad_y, bool max) {
  pool_run r = {0};
  mx_tensor *input = mx_detach(x);
  cr_assert_eq(mx_set_requires_grad(input, true), MX_OK, "%s", mx_last_error());
  if (max)
    cr_assert_eq(mx_max_pool_with_indices(input, 2, pc->kernel, pc->stride, pc->padding, pc->dilation, &r.y,
                                          &r.indices),
                 MX_OK, "%s: %s", pc->name, mx_last_error());
  else
    r.y = mx_avg_pool(input, 2, pc->kernel, pc->stride, pc->padding, pc->count_include_pad);
  cr_assert_not_null(r.y, "%s: %s", pc->name, mx_last_error());
  cr_assert_eq(mx_grad(1, &r.y, 1, &input, (mx_tensor *const *)&grad_y, false, false, false, &r.dx), MX_OK, "%s: %s",
               pc->name, mx_last_error());
  return r;
}

/* The output shape of pc's pooling (through the row-major op). */
static mx_shape output_shape(const pool_case *pc, mx_dtype dtype) {
  mx_tensor *y = NULL;
  mx_tensor *x = mx_zeros(pc->shape, dtype, MX_CPU);
  cr_assert_eq(mx_max_pool_with_indices(x, 2, pc->kernel, pc->stride, pc->padding, pc->dilation, &y, NULL), MX_OK,
               "%s", mx_last_error());
  return mx_shape_get(y);
}

static void check_pooling(bool max) {
  for (int d = 0; d < 4; d++)
    for (int k = 0; k < N_CASES; k++) {
      const pool_case case_k = case_at(k), *pc = &case_k;
      if (!max && pc->dilation.d[0] > 1) continue; /* average pooling has no dilation */
      mx_dtype dtype = float_dtypes[d];
      mx_scope *scope = mx_scope_begin();
      mx_tensor *x = random_input(pc->shape, dtype, 10 + (uint64_t)k, max, true);
      mx_tensor *grad_y = random_input(output_shape(pc, dtype), dtype, 20 + (uint64_t)k, false, false);
      pool_run want = run(pc, x, grad_y, max);
      /* the output gradient channels-last too, as a channels-last network's is, or (odd cases) row-major */
      pool_run got = run(pc, to_channels_last(x), k % 2 ? grad_y : to_channels_last(grad_y), max);
      char what[160];
      snprintf(what, sizeof what, "%s pooling, %s, %s: ", max ? "max" : "average", pc->name, mx_dtype_name(dtype));
      char *tail = what + strlen(what);
      size_t room = sizeof what - (size_t)(tail - what);
      snprintf(tail, room, "the output");
      expect_same_bits(got.y, want.y, what);
      /* one-pixel planes are row-major and channels-last at once */
      if (mx_numel(got.y) / (pc->shape.d[0] * pc->shape.d[1]) > 1) expect_channels_last(got.y, what);
      else cr_expect(has_channels_last_strides(got.y), "%s: not channels-last", what);
      snprintf(tail, room, "the input gradient");
      expect_same_bits(got.dx, want.dx, what);
      expect_channels_last(got.dx, what);
      if (max) {
        snprintf(tail, room, "the indices");
        expect_same_bits(got.indices, want.indices, what);
      }
      mx_scope_end(scope);
    }
}

Test(channels_last_pool, max_pooling_keeps_the_layout_and_the_row_major_bits) { check_pooling(true); }

Test(channels_last_pool, average_pooling_keeps_the_layout_and_the_row_major_bits) { check_pooling(false); }

/* A strided input that is neither row-major nor channels-last gives a
 * row-major output, as before; so does a channels-last one of one channel,
 * whose two orders are one. */
Test(channels_last_pool, other_layouts_give_row_major_outputs) {
  mx_scope *scope = mx_scope_begin();
  mx_tensor *x = random_input(MX_SHAPE(2, 5, 6, 8), MX_F32, 3, false, false);
  mx_tensor *transposed = mx_transpose(mx_contiguous(mx_transpose(x, 2, 3)), 2, 3);
  mx_tensor *y = mx_max_pool(transposed, 2, MX_DIMS(2), MX_DEFAULT, MX_DEFAULT);
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_expect(mx_is_contiguous(y));
  expect_same_bits(y, mx_max_pool(x, 2, MX_DIMS(2), MX_DEFAULT, MX_DEFAULT), "max pooling of a transposed input");
  mx_tensor *one_channel = to_channels_last(random_input(MX_SHAPE(2, 1, 6, 8), MX_F32, 4, false, false));
  cr_expect(mx_is_contiguous(mx_avg_pool(one_channel, 2, MX_DIMS(2), MX_DEFAULT, MX_DEFAULT, true)));
  mx_scope_end(scope);
}

/* pooling(x) through a channels-last copy of x: the gradient flows through
 * the channels-last kernels and the copy. */
static mx_tensor *max_pool_of_channels_last(int n, mx_tensor *const *in, void *ctx) {
  (void)n, (void)ctx;
  return mx_max_pool(to_channels_last(in[0]), 2, MX_DIMS(3), MX_DIMS(2), MX_DIMS(1));
}

static mx_tensor *avg_pool_of_channels_last(int n, mx_tensor *const *in, void *ctx) {
  (void)n, (void)ctx;
  return mx_avg_pool(to_channels_last(in[0]), 2, MX_DIMS(3), MX_DIMS(1), MX_DIMS(1), false);
}

Test(channels_last_pool, gradcheck_in_float64) {
  mx_scope *scope = mx_scope_begin();
  /* distinct values: a tie would make max pooling's gradient a choice */
  mx_tensor *x = random_input(MX_SHAPE(2, 3, 5, 7), MX_F64, 5, false, false);
  cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
  cr_expect_eq(mx_gradcheck(max_pool_of_channels_last, 1, &x, NULL, 1e-6, 1e-5, 1e-4), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_gradcheck(avg_pool_of_channels_last, 1, &x, NULL, 1e-6, 1e-5, 1e-4), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_gradgradcheck(avg_pool_of_channels_last, 1, &x, NULL, 1e-6, 1e-5, 1e-4), MX_OK, "%s",
               mx_last_error());
  mx_scope_end(scope);
}
