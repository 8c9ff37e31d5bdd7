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
  cr_assert(t, "%s: %s", what, mx_last_error());
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
  /* the ops keep the layout such a tensor was made in: its size-1 dims' strides tell */
  mx_tensor *made_cl = mx_to_channels_last(one_channel);
  cr_assert(made_cl, "%s", mx_last_error());
  cr_expect(mx_shares_storage(made_cl, one_channel), "no copy");
  expect_strides(made_cl, MX_SHAPE(20, 1, 5, 1), "one channel made channels-last");
  expect_strides(mx_relu(made_cl), MX_SHAPE(20, 1, 5, 1), "relu of one channel made channels-last");
  expect_strides(mx_relu(one_channel), MX_SHAPE(20, 20, 5, 1), "relu of one row-major channel");
  expect_strides(mx_clone(mx_to_channels_last(one_pixel)), MX_SHAPE(6, 1, 6, 6), "clone of one pixel made channels-last");
  expect_strides(mx_clone(one_pixel), MX_SHAPE(6, 1, 1, 1), "clone of one row-major pixel");
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

/* --- ops that keep the layout ----------------------------------------------------------------------------------------- */

/* An (N, C, H, W) tensor of dtype laid out channels-last, and its row-major twin. */
typedef struct {
  mx_tensor *cl, *rm;
} twins;

static twins twins_of(mx_shape shape, mx_dtype dtype, uint64_t seed) {
  mx_tensor *rm = randn(shape, dtype, seed);
  twins t = {mx_to_channels_last(rm), rm};
  cr_assert(t.cl && mx_is_channels_last(t.cl) && !mx_is_contiguous(t.cl), "%s", mx_last_error());
  return t;
}

static void expect_layout(const mx_tensor *t, bool channels_last, const char *what) {
  cr_assert(t, "%s: %s", what, mx_last_error());
  cr_expect(channels_last ? mx_is_channels_last(t) && !mx_is_contiguous(t) : mx_is_contiguous(t) && !mx_is_channels_last(t),
            "%s: expected %s", what, channels_last ? "channels-last" : "row-major");
}

Test(channels_last, elementwise_ops_keep_it) {
  mx_scope *s = mx_scope_begin();
  mx_dtype dtypes[] = {MX_F32, MX_BF16, MX_F16, MX_F64};
  for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++) {
    mx_dtype dt = dtypes[k];
    /* big enough for the kernels' threads and their long rows */
    twins x = twins_of(MX_SHAPE(4, 24, 20, 20), dt, 10 + k), y = twins_of(MX_SHAPE(4, 24, 20, 20), dt, 20 + k);
    mx_tensor *bias = randn(MX_SHAPE(1, 24, 1, 1), dt, 30 + k);
    char what[64];
#define SAME_AS_ROW_MAJOR(name, expr_cl, expr_rm, layout)                      \
  do {                                                                          \
    snprintf(what, sizeof what, "%s (%s)", name, mx_dtype_name(dt));            \
    mx_tensor *a = (expr_cl), *b = (expr_rm);                                   \
    expect_layout(a, layout, what);                                             \
    expect_same_values(a, b, what);                                             \
  } while (0)
    SAME_AS_ROW_MAJOR("relu", mx_relu(x.cl), mx_relu(x.rm), true);
    SAME_AS_ROW_MAJOR("exp", mx_exp(x.cl), mx_exp(x.rm), true);
    SAME_AS_ROW_MAJOR("add", mx_add(x.cl, y.cl), mx_add(x.rm, y.rm), true);
    SAME_AS_ROW_MAJOR("a bias added", mx_add(x.cl, bias), mx_add(x.rm, bias), true);
    SAME_AS_ROW_MAJOR("a bias first", mx_add(bias, x.cl), mx_add(bias, x.rm), true);
    SAME_AS_ROW_MAJOR("a scalar", mx_mul_scalar(x.cl, 0.5), mx_mul_scalar(x.rm, 0.5), true);
    SAME_AS_ROW_MAJOR("relu_backward", mx_relu_backward(y.cl, x.cl), mx_relu_backward(y.rm, x.rm), true);
    SAME_AS_ROW_MAJOR("a comparison", mx_gt(x.cl, y.cl), mx_gt(x.rm, y.rm), true);
    SAME_AS_ROW_MAJOR("where", mx_where(mx_gt(x.cl, y.cl), x.cl, y.cl), mx_where(mx_gt(x.rm, y.rm), x.rm, y.rm), true);
    /* mixed: the first input that fills the shape decides */
    SAME_AS_ROW_MAJOR("channels-last + row-major", mx_add(x.cl, y.rm), mx_add(x.rm, y.rm), true);
    SAME_AS_ROW_MAJOR("row-major + channels-last", mx_sub(y.rm, x.cl), mx_sub(y.rm, x.rm), false);
    SAME_AS_ROW_MAJOR("a broadcast view first", mx_mul(mx_expand(bias, MX_SHAPE(4, 24, 20, 20)), x.cl),
                      mx_mul(bias, x.rm), true);
    SAME_AS_ROW_MAJOR("where, a row-major condition", mx_where(mx_gt(x.rm, y.rm), x.cl, y.cl),
                      mx_where(mx_gt(x.rm, y.rm), x.rm, y.rm), false);
    /* copies and casts */
    SAME_AS_ROW_MAJOR("clone", mx_clone(x.cl), x.rm, true);
    SAME_AS_ROW_MAJOR("to float64", mx_to_dtype(x.cl, MX_F64), mx_to_dtype(x.rm, MX_F64), true);
    SAME_AS_ROW_MAJOR("to bfloat16", mx_to_dtype(x.cl, MX_BF16), mx_to_dtype(x.rm, MX_BF16), true);
    SAME_AS_ROW_MAJOR("to the CPU", mx_to_device(x.cl, MX_CPU), x.rm, true);
#undef SAME_AS_ROW_MAJOR
  }
  mx_scope_end(s);
}

Test(channels_last, autocast_keeps_it) {
  mx_scope *s = mx_scope_begin();
  twins x = twins_of(MX_SHAPE(2, 16, 6, 6), MX_BF16, 40);
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    /* exp runs in float32: its input cast first */
    mx_tensor *y = mx_exp(x.cl);
    expect_layout(y, true, "exp of bfloat16 under autocast");
    cr_expect_eq(mx_dtype_of(y), MX_F32);
    expect_same_values(y, mx_exp(mx_to_dtype(x.rm, MX_F32)), "exp of bfloat16 under autocast");
  }
  mx_scope_end(s);
}

/* Gradients of mixed layouts add up right: x reaches the loss through a
 * channels-last path and a row-major one, so its accumulated gradient is
 * the sum of one of each. */
Test(channels_last, gradients_of_mixed_layouts_accumulate) {
  mx_scope *s = mx_scope_begin();
  twins r = twins_of(MX_SHAPE(2, 5, 3, 4), MX_F64, 50), q = twins_of(MX_SHAPE(2, 5, 3, 4), MX_F64, 51);
  for (int cl_leaf = 0; cl_leaf < 2; cl_leaf++) {
    twins x0 = twins_of(MX_SHAPE(2, 5, 3, 4), MX_F64, 52);
    mx_tensor *x = mx_detach(cl_leaf ? x0.cl : x0.rm);
    OK(mx_set_requires_grad(x, true));
    mx_tensor *through_cl = mx_mul(mx_to_channels_last(x), r.cl); /* a channels-last gradient */
    mx_tensor *through_rm = mx_mul(mx_contiguous(x), q.rm);       /* a row-major one */
    mx_tensor *loss = mx_sum(mx_add(mx_tanh(through_cl), mx_tanh(through_rm)), MX_ALL_DIMS, false);
    OK(mx_backward(loss, NULL, false));
    /* d/dx = r (1 - tanh(x r)^2) + q (1 - tanh(x q)^2), all in row-major tensors */
    mx_tensor *tr = mx_tanh(mx_mul(x0.rm, r.rm)), *tq = mx_tanh(mx_mul(x0.rm, q.rm));
    mx_tensor *want = mx_add(mx_mul(r.rm, mx_rsub_scalar(1, mx_mul(tr, tr))),
                             mx_mul(q.rm, mx_rsub_scalar(1, mx_mul(tq, tq))));
    expect_same_values(mx_grad_of(x), want, cl_leaf ? "a channels-last leaf's gradient" : "a row-major leaf's gradient");
    /* a second backward adds into the gradient already there */
    OK(mx_backward(mx_sum(mx_mul(mx_to_channels_last(x), r.cl), MX_ALL_DIMS, false), NULL, false));
    expect_same_values(mx_grad_of(x), mx_add(want, r.rm), "the gradient accumulated again");
  }
  mx_scope_end(s);
}

/* --- reshape and flatten --------------------------------------------------------------------------------------------- */

Test(channels_last, flatten_before_a_classifier_copies) {
  mx_scope *s = mx_scope_begin();
  twins x = twins_of(MX_SHAPE(2, 3, 4, 5), MX_F32, 60);
  mx_tensor *flat = mx_flatten(x.cl, 1, -1);
  cr_assert(flat, "%s", mx_last_error());
  cr_expect(mx_ndim(flat) == 2 && mx_size(flat, 0) == 2 && mx_size(flat, 1) == 60);
  cr_expect(mx_is_contiguous(flat) && !mx_shares_storage(flat, x.cl), "flatten(1) of channels-last copies");
  expect_same_values(flat, mx_flatten(x.rm, 1, -1), "flatten(1)");
  expect_same_values(mx_reshape(x.cl, MX_SHAPE(6, 20)), mx_reshape(x.rm, MX_SHAPE(6, 20)), "reshape to (6, 20)");
  EXPECT_ERROR(mx_view(x.cl, MX_SHAPE(2, 60)),
               "mx_view: shape [2,60] cannot view a tensor of shape [2,3,4,5] and strides [60,1,15,3] without a "
               "copy; use mx_reshape");
  mx_scope_end(s);
}

Test(channels_last, legal_views_stay_views) {
  mx_scope *s = mx_scope_begin();
  twins x = twins_of(MX_SHAPE(2, 3, 4, 5), MX_F32, 61);
  /* H and W are one run in memory: (N, C, H*W) is a view */
  mx_tensor *hw = mx_flatten(x.cl, 2, 3);
  cr_assert(hw, "%s", mx_last_error());
  cr_expect(mx_shares_storage(hw, x.cl), "flatten(2, 3) of channels-last is a view");
  expect_same_values(hw, mx_flatten(x.rm, 2, 3), "flatten(2, 3)");
  mx_tensor *same = mx_reshape(x.cl, MX_SHAPE(2, 3, 4, 5));
  cr_expect(mx_shares_storage(same, x.cl) && mx_is_channels_last(same), "a reshape to its own shape");
  mx_tensor *split = mx_view(x.cl, MX_SHAPE(2, 3, 2, 2, 5));
  cr_assert(split, "%s", mx_last_error());
  expect_same_values(split, mx_reshape(x.rm, MX_SHAPE(2, 3, 2, 2, 5)), "H split in two");
  mx_scope_end(s);
}

/* The classifier's gradient comes back in the layout of its input: the
 * convolutions below it then read every gradient channels-last. */
Test(channels_last, flatten_gives_the_gradient_back_channels_last) {
  mx_scope *s = mx_scope_begin();
  twins x0 = twins_of(MX_SHAPE(2, 3, 4, 5), MX_F32, 62);
  mx_tensor *w = randn(MX_SHAPE(60, 7), MX_F32, 63), *x = mx_detach(x0.cl), *xr = mx_detach(x0.rm);
  OK(mx_set_requires_grad(x, true));
  OK(mx_set_requires_grad(xr, true));
  OK(mx_backward(mx_sum(mx_matmul(mx_flatten(x, 1, -1), w), MX_ALL_DIMS, false), NULL, false));
  OK(mx_backward(mx_sum(mx_matmul(mx_flatten(xr, 1, -1), w), MX_ALL_DIMS, false), NULL, false));
  expect_same_values(mx_grad_of(x), mx_grad_of(xr), "the gradient through flatten(1)");
  cr_expect(mx_is_channels_last(mx_grad_of(x)) && !mx_is_contiguous(mx_grad_of(x)),
            "the gradient of a channels-last input through flatten(1) is channels-last");
  cr_expect(mx_is_contiguous(mx_grad_of(xr)), "a row-major input's stays row-major");
  mx_scope_end(s);
}
