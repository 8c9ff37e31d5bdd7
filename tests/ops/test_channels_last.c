/* The channels-last layout (mx_to_channels_last, mx_is_channels_last): the
 * predicate, the conversion (values, strides, gradient), and the ops that
 * keep the layout: elementwise ops, clones and casts, on their own and mixed
 * with row-major operands, and reshape/flatten of a channels-last tensor. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "../common/expect_error.h"

#define OK(expr) cr_assert_eq((expr), MX_OK, "%s: %s", #expr, mx_last_error())

/* t's values in row-major order as doubles, malloc'ed. */
static double *values_of(const mx_tensor *t) {
  cr_assert(t, "%s", mx_last_error());
  mx_tensor *d = mx_to_dtype(t, MX_F64);
  cr_assert(d, "%s", mx_last_error());
  size_t n = (size_t)mx_numel(d);
  double *v = malloc((n ? n : 1) * sizeof *v);
  cr_assert(v);
  OK(mx_to_host(d, v, n * sizeof *v));
  mx_release(d);
  return v;
}

/* a and b hold the same values at the same indices, bit for bit. */
static void expect_same_values(const mx_tensor *a, const mx_tensor *b, const char *what) {
  cr_assert(a && b, "%s: %s", what, mx_last_error());
  cr_assert_eq(mx_numel(a), mx_numel(b), "%s: %lld and %lld elements", what, (long long)mx_numel(a),
               (long long)mx_numel(b));
  double *va = values_of(a), *vb = values_of(b);
  int64_t n = mx_numel(a), wrong = 0, first = -1;
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&va[i], &vb[i], sizeof *va) && wrong++ == 0) first = i;
  cr_expect_eq(wrong, 0, "%s: %lld of %lld values differ, first at %lld (%g, expected %g)", what, (long long)wrong,
               (long long)n, (long long)first, first >= 0 ? va[first] : 0, first >= 0 ? vb[first] : 0);
  free(va);
  free(vb);
}

static void expect_strides(const mx_tensor *t, mx_shape want, const char *what) {
  mx_shape got = mx_strides_get(t);
  cr_expect(got.ndim == want.ndim && !memcmp(got.d, want.d, sizeof(int64_t) * (size_t)want.ndim),
            "%s: strides (%lld, %lld, %lld, %lld), expected (%lld, %lld, %lld, %lld)", what, (long long)got.d[0],
            (long long)got.d[1], (long long)got.d[2], (long long)got.d[3], (long long)want.d[0], (long long)want.d[1],
            (long long)want.d[2], (long long)want.d[3]);
}

static mx_tensor *randn(mx_shape shape, mx_dtype dtype, uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_tensor *t = mx_to_dtype(mx_randn(shape, MX_F32, MX_CPU, gen), dtype);
  mx_generator_free(gen);
  cr_assert(t, "%s", mx_last_error());
  return t;
}

Test(channels_last, the_predicate) {
  mx_scope *s = mx_scope_begin();
  cr_expect_not(mx_is_channels_last(NULL));
  cr_expect_not(mx_is_channels_last(randn(MX_SHAPE(2, 3, 4, 5), MX_F32, 1)), "a row-major tensor");
  cr_expect_not(mx_is_channels_last(randn(MX_SHAPE(3, 4, 5), MX_F32, 1)), "a 3-d tensor");
  /* one channel, or one pixel: both layouts are the same memory, and both predicates hold */
  mx_tensor *one_channel = randn(MX_SHAPE(2, 1, 4, 5), MX_F32, 1), *one_pixel = randn(MX_SHAPE(2, 6, 1, 1), MX_F32, 1);
  cr_expect(mx_is_channels_last(one_channel) && mx_is_contiguous(one_channel));
  cr_expect(mx_is_channels_last(one_pixel) && mx_is_contiguous(one_pixel));
  /* a permuted (N, H, W, C) tensor viewed as (N, C, H, W) is one */
  mx_tensor *nhwc = randn(MX_SHAPE(2, 4, 5, 3), MX_F32, 1);
  mx_tensor *view = mx_permute(nhwc, MX_SHAPE(0, 3, 1, 2));
  cr_expect(mx_is_channels_last(view) && !mx_is_contiguous(view));
  /* a slice of one is not dense */
  cr_expect_not(mx_is_channels_last(mx_slice(view, 1, 0, 2, 1)), "two of three channels");
  mx_scope_end(s);
}

Test(channels_last, the_conversion_keeps_values_and_sets_strides) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = randn(MX_SHAPE(2, 3, 4, 5), MX_F32, 2);
  mx_tensor *y = mx_to_channels_last(x);
  cr_assert(y, "%s", mx_last_error());
  cr_expect(mx_is_channels_last(y) && !mx_is_contiguous(y));
  expect_strides(y, MX_SHAPE(60, 1, 15, 3), "to_channels_last");
  cr_expect_not(mx_shares_storage(x, y), "a row-major tensor is copied");
  expect_same_values(y, x, "to_channels_last");
  /* already channels-last: a new handle on the same memory */
  mx_tensor *again = mx_to_channels_last(y);
  cr_assert(again, "%s", mx_last_error());
  cr_expect(again != y && mx_shares_storage(again, y) && mx_offset(again) == mx_offset(y));
  expect_strides(again, MX_SHAPE(60, 1, 15, 3), "to_channels_last twice");
  /* mx_contiguous still means row-major */
  mx_tensor *back = mx_contiguous(y);
  cr_assert(back, "%s", mx_last_error());
  cr_expect(mx_is_contiguous(back) && !mx_is_channels_last(back));
  expect_strides(back, MX_SHAPE(60, 20, 5, 1), "contiguous");
  expect_same_values(back, x, "contiguous of channels-last");
  /* every dtype, and a strided source */
  mx_dtype dtypes[] = {MX_F64, MX_F16, MX_BF16, MX_I64, MX_U8};
  for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++) {
    mx_tensor *t = mx_to_dtype(mx_mul_scalar(x, 3), dtypes[k]);
    mx_tensor *c = mx_to_channels_last(t);
    cr_assert(c, "%s", mx_last_error());
    cr_expect(mx_is_channels_last(c) && mx_dtype_of(c) == dtypes[k]);
    expect_same_values(c, t, mx_dtype_name(dtypes[k]));
  }
  mx_tensor *strided = mx_slice(randn(MX_SHAPE(2, 3, 8, 5), MX_F32, 3), 2, 0, 8, 2);
  expect_same_values(mx_to_channels_last(strided), strided, "a strided source");
  mx_scope_end(s);
}

Test(channels_last, the_conversion_refuses_other_ranks) {
  mx_scope *s = mx_scope_begin();
  EXPECT_ERROR(mx_to_channels_last(randn(MX_SHAPE(2, 3, 4), MX_F32, 1)),
               "mx_to_channels_last: a channels-last tensor has 4 dims (N, C, H, W); got shape [2,3,4]");
  EXPECT_ERROR(mx_to_channels_last(randn(MX_SHAPE(1, 2, 3, 4, 5), MX_F32, 1)),
               "mx_to_channels_last: a channels-last tensor has 4 dims (N, C, H, W); got shape [1,2,3,4,5]");
  EXPECT_ERROR(mx_to_channels_last(NULL), "mx_to_channels_last: argument 't' is NULL");
  mx_scope_end(s);
}

Test(channels_last, the_gradient_passes_through) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = randn(MX_SHAPE(2, 3, 4, 5), MX_F32, 4), *r = randn(MX_SHAPE(2, 3, 4, 5), MX_F32, 5);
  OK(mx_set_requires_grad(x, true));
  mx_tensor *y = mx_to_channels_last(x);
  cr_expect_str_eq(mx_grad_fn_name(y), "TO_CHANNELS_LASTBackward");
  OK(mx_backward(mx_sum(mx_mul(y, r), MX_ALL_DIMS, false), NULL, false));
  expect_same_values(mx_grad_of(x), r, "the gradient of sum(to_channels_last(x) * r)");
  mx_scope_end(s);
}
