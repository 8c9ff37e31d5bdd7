/* Edge shapes: empty tensors, 0-d tensors, keepdim over every dim, bad
 * dims. Expected values are PyTorch 1.13's. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include <mixgrad.h>

#include "op_checks.h"

static void expect_item(const char *what, const mx_tensor *t, double want) {
  cr_assert_not_null(t, "%s: %s", what, mx_last_error());
  cr_assert_eq(mx_numel(t), 1, "%s: %lld elements", what, (long long)mx_numel(t));
  double got = mx_item(t);
  cr_expect(isnan(want) ? isnan(got) : got == want, "%s: %.17g, expected %.17g", what, got, want);
}

Test(ops_edges, empty_tensors) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *e = mx_zeros(MX_SHAPE(0), MX_F32, MX_CPU);
  expect_item("sum of []", mx_sum(e, MX_ALL_DIMS, false), 0);
  expect_item("prod of []", mx_prod(e, MX_ALL_DIMS, false), 1);
  expect_item("mean of []", mx_mean(e, MX_ALL_DIMS, false), NAN);
  op_expect_shape("cumsum of []", mx_cumsum(e, 0), MX_SHAPE(0));
  op_expect_shape("exp of (2,0)", mx_exp(mx_zeros(MX_SHAPE(2, 0), MX_F32, MX_CPU)), MX_SHAPE(2, 0));
  mx_tensor *rows = mx_sum(mx_zeros(MX_SHAPE(2, 0), MX_F32, MX_CPU), MX_DIMS(1), false);
  op_expect_shape("sum of (2,0) over dim 1", rows, MX_SHAPE(2));
  cr_expect_eq(mx_at(rows, MX_SHAPE(1)), 0.0);
  op_expect_shape("sum of (0,3) over dim 0", mx_sum(mx_zeros(MX_SHAPE(0, 3), MX_F32, MX_CPU), MX_DIMS(0), false),
                  MX_SHAPE(3));
  cr_expect_null(mx_amax(e, MX_ALL_DIMS, false), "amax of [] has no identity");
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  /* a gradient through an empty tensor is empty */
  mx_tensor *x = mx_zeros(MX_SHAPE(2, 0), MX_F64, MX_CPU);
  mx_set_requires_grad(x, true);
  mx_tensor *loss = mx_sum(mx_exp(x), MX_ALL_DIMS, false), *g = NULL;
  cr_assert_eq(mx_grad(1, &loss, 1, &x, NULL, false, false, true, &g), MX_OK, "%s", mx_last_error());
  if (g) op_expect_shape("grad of (2,0)", g, MX_SHAPE(2, 0));
  mx_scope_end(s);
}

Test(ops_edges, zero_dim_tensors) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_scalar(3, MX_F32, MX_CPU);
  expect_item("exp of 0-d", mx_exp(mx_scalar(0, MX_F32, MX_CPU)), 1);
  op_expect_shape("exp of 0-d keeps 0 dims", mx_exp(t), MX_SCALAR);
  expect_item("cumsum of 0-d", mx_cumsum(t, 0), 3);
  expect_item("argmax of 0-d", mx_argmax(t, MX_FLAT, false), 0);
  expect_item("sum of 0-d over dim 0", mx_sum(t, MX_DIMS(0), false), 3);
  expect_item("amax of 0-d", mx_amax(t, MX_ALL_DIMS, false), 3);
  expect_item("logsumexp of 0-d", mx_logsumexp(t, MX_DIMS(0), false), 3);
  expect_item("norm of 0-d", mx_norm(mx_scalar(-3, MX_F32, MX_CPU), 2, MX_ALL_DIMS, false), 3);
  expect_item("var of one element", mx_var(t, MX_ALL_DIMS, 1, false), NAN);
  mx_tensor *v = NULL, *i = NULL;
  cr_assert_eq(mx_max_dim(t, 0, false, &v, &i), MX_OK, "%s", mx_last_error());
  expect_item("max_dim of 0-d", v, 3);
  expect_item("max_dim index of 0-d", i, 0);
  /* gradients to and from 0-d tensors */
  mx_tensor *x = mx_scalar(0.5, MX_F64, MX_CPU);
  mx_set_requires_grad(x, true);
  mx_tensor *y = mx_mul(mx_ones(MX_SHAPE(2, 3), MX_F64, MX_CPU), x), *g = NULL;
  mx_tensor *loss = mx_sum(mx_mul(y, y), MX_ALL_DIMS, false);
  cr_assert_eq(mx_grad(1, &loss, 1, &x, NULL, false, false, false, &g), MX_OK, "%s", mx_last_error());
  op_expect_shape("grad of a 0-d input", g, MX_SCALAR);
  expect_item("grad of a 0-d input", g, 6.0); /* d/dx sum_6 x^2 = 12 x */
  mx_scope_end(s);
}

Test(ops_edges, reduction_dims) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_arange(0, 24, 1, MX_F32, MX_CPU);
  mx_tensor *x3 = mx_reshape(x, MX_SHAPE(2, 3, 4));
  op_expect_shape("sum all keepdim", mx_sum(x3, MX_ALL_DIMS, true), MX_SHAPE(1, 1, 1));
  expect_item("sum all keepdim", mx_sum(x3, MX_ALL_DIMS, true), 276);
  op_expect_shape("sum (-1, 0)", mx_sum(x3, MX_DIMS(-1, 0), false), MX_SHAPE(3));
  cr_expect_eq(mx_at(mx_sum(x3, MX_DIMS(-1, 0), false), MX_SHAPE(1)), 4 + 5 + 6 + 7 + 16 + 17 + 18 + 19.0);
  op_expect_shape("amax (0, 2) keepdim", mx_amax(x3, MX_DIMS(0, 2), true), MX_SHAPE(1, 3, 1));
  cr_expect_eq(mx_at(mx_amax(x3, MX_DIMS(0, 2), true), MX_SHAPE(0, 2, 0)), 23.0);
  op_expect_shape("mean over dim 1", mx_mean(x3, MX_DIMS(1), false), MX_SHAPE(2, 4));
  cr_expect_null(mx_sum(x3, MX_DIMS(0, 0), false), "a dim twice");
  cr_expect(strstr(mx_last_error(), "more than once") != NULL, "%s", mx_last_error());
  cr_expect_null(mx_sum(x3, MX_DIMS(3), false), "dim 3 of a 3-d tensor");
  cr_expect_eq(mx_last_status(), MX_INDEX_ERROR, "%s", mx_status_str(mx_last_status()));
  cr_expect_null(mx_cumsum(x3, -4), "dim -4 of a 3-d tensor");
  cr_expect_null(mx_argmax(x3, 5, false), "argmax dim 5");
  /* the composites over sum name themselves, not their helpers */
  mx_tensor *scalar = mx_scalar(2, MX_F32, MX_CPU);
  cr_expect_null(mx_mean(scalar, MX_DIMS(1), false), "mean over dim 1 of a 0-d tensor");
  cr_expect_str_eq(mx_last_error(), "mx_mean: dim 1 out of range for a 0-d tensor (expected -1 to 0)");
  cr_expect_null(mx_var(x3, MX_DIMS(-4), 1, false), "var over dim -4 of a 3-d tensor");
  cr_expect_str_eq(mx_last_error(), "mx_var: dim -4 out of range for a 3-d tensor (expected -3 to 2)");
  cr_expect_null(mx_std(x3, MX_DIMS(3), 1, false), "std over dim 3 of a 3-d tensor");
  cr_expect_str_eq(mx_last_error(), "mx_std: dim 3 out of range for a 3-d tensor (expected -3 to 2)");
  mx_clear_error();
  mx_scope_end(s);
}

static void expect_values(const char *what, const mx_tensor *t, mx_dtype dtype, int n, const double *want) {
  cr_assert_not_null(t, "%s: %s", what, mx_last_error());
  cr_assert_eq(mx_dtype_of(t), dtype, "%s: dtype %s", what, mx_dtype_name(mx_dtype_of(t)));
  cr_assert_eq(mx_numel(t), n, "%s", what);
  for (int i = 0; i < n; i++) {
    double got = mx_at(t, MX_SHAPE(i));
    cr_expect(isnan(want[i]) ? isnan(got) : got == want[i], "%s: element %d is %.17g, expected %.17g", what, i, got,
              want[i]);
  }
}

/* clamp is min(max(x, min), max), as PyTorch's: all max when min > max.
 * Integers stay integers, the bounds rounded inward, and a bound past the
 * dtype's range or NaN is none (casting it was undefined behaviour, found
 * by the ops fuzz target). Values are PyTorch 1.13's, with whole bounds for
 * the integer cases. */
Test(ops_edges, clamp_bounds) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_from_data((double[]){1, 4, 9}, MX_SHAPE(3), MX_F64, MX_CPU);
  expect_values("clamp(x, 5, 3)", mx_clamp(x, 5, 3), MX_F64, 3, (double[]){3, 3, 3});
  expect_values("clamp(x, NaN, 3)", mx_clamp(x, NAN, 3), MX_F64, 3, (double[]){1, 3, 3});
  mx_tensor *u8 = mx_from_data((uint8_t[]){1, 2, 250}, MX_SHAPE(3), MX_U8, MX_CPU);
  expect_values("u8 clamp(1.5, 200.7)", mx_clamp(u8, 1.5, 200.7), MX_U8, 3, (double[]){2, 2, 200});
  expect_values("u8 clamp(-0.5, inf)", mx_clamp(u8, -0.5, INFINITY), MX_U8, 3, (double[]){1, 2, 250});
  mx_tensor *i64 = mx_from_data((int64_t[]){INT64_MAX, -5, 7}, MX_SHAPE(3), MX_I64, MX_CPU);
  mx_tensor *y = mx_clamp(i64, 0, INFINITY);
  cr_assert_not_null(y, "%s", mx_last_error());
  int64_t got[3];
  cr_assert_eq(mx_to_host(y, got, sizeof got), MX_OK);
  cr_expect(got[0] == INT64_MAX && got[1] == 0 && got[2] == 7, "i64 clamp(0, inf): %lld %lld %lld", (long long)got[0],
            (long long)got[1], (long long)got[2]);
  expect_values("i64 clamp(NaN, 6.5)", mx_clamp(mx_narrow(i64, 0, 1, 2), NAN, 6.5), MX_I64, 2, (double[]){-5, 6});
  expect_values("i64 clamp(-1e300, 1e300)", mx_clamp(mx_narrow(i64, 0, 1, 2), -1e300, 1e300), MX_I64, 2,
                (double[]){-5, 7});
  mx_scope_end(s);
}

static void expect_i64(const char *what, const mx_tensor *t, int n, const int64_t *want) {
  cr_assert_not_null(t, "%s: %s", what, mx_last_error());
  cr_assert_eq(mx_dtype_of(t), MX_I64, "%s: dtype %s", what, mx_dtype_name(mx_dtype_of(t)));
  int64_t got[8];
  cr_assert(n <= 8 && mx_numel(t) == n, "%s", what);
  cr_assert_eq(mx_to_host(t, got, (size_t)n * sizeof *got), MX_OK);
  for (int i = 0; i < n; i++)
    cr_expect_eq(got[i], want[i], "%s: element %d is %lld, expected %lld", what, i, (long long)got[i],
                 (long long)want[i]);
}

/* int64 arithmetic wraps around on overflow, as PyTorch 1.13's does (its
 * values here), where C's signed overflow is undefined (found by the ops
 * fuzz target under UBSan); x % -1 is 0, where PyTorch dies of SIGFPE. */
Test(ops_edges, integers_wrap_around) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *m = mx_from_data((int64_t[]){INT64_MIN, INT64_MAX}, MX_SHAPE(2), MX_I64, MX_CPU);
  expect_i64("abs", mx_abs(m), 2, (int64_t[]){INT64_MIN, INT64_MAX});
  expect_i64("neg", mx_neg(m), 2, (int64_t[]){INT64_MIN, -INT64_MAX});
  expect_i64("m + m", mx_add(m, m), 2, (int64_t[]){0, -2});
  expect_i64("m * 3", mx_mul(m, mx_scalar(3, MX_I64, MX_CPU)), 2, (int64_t[]){INT64_MIN, INT64_MAX - 2});
  expect_i64("m - [1, -1]", mx_sub(m, mx_from_data((int64_t[]){1, -1}, MX_SHAPE(2), MX_I64, MX_CPU)), 2,
             (int64_t[]){INT64_MAX, INT64_MIN});
  expect_i64("m % -1", mx_remainder(m, mx_scalar(-1, MX_I64, MX_CPU)), 2, (int64_t[]){0, 0});
  mx_tensor *top = mx_from_data((int64_t[]){INT64_MAX, 1}, MX_SHAPE(2), MX_I64, MX_CPU);
  expect_i64("sum [max, 1]", mx_reshape(mx_sum(top, MX_ALL_DIMS, false), MX_SHAPE(1)), 1, (int64_t[]){INT64_MIN});
  expect_i64("prod [max, 2]", mx_reshape(mx_prod(mx_mul(top, mx_from_data((int64_t[]){1, 2}, MX_SHAPE(2), MX_I64,
                                                                         MX_CPU)),
                                                 MX_ALL_DIMS, false),
                                         MX_SHAPE(1)),
             1, (int64_t[]){-2});
  expect_i64("cumsum [max, 1]", mx_cumsum(top, 0), 2, (int64_t[]){INT64_MAX, INT64_MIN});
  mx_scope_end(s);
}

/* float32 softmax over rows takes a vectorised exponential of its own: it
 * stays within 4e-6 of the float64 softmax over 14 orders of magnitude (x -
 * max is rounded to float first, as in PyTorch's float kernel: half an ulp
 * of 26 is 1e-6 relative in the exponential), a masked (-inf) entry gives exactly 0, a NaN spreads over its
 * row, and a row of -inf gives NaN (0/0), as in PyTorch. */
Test(ops_edges, float32_softmax_rows) {
  mx_scope *s = mx_scope_begin();
  enum { N = 1003 };
  float v[3 * N];
  for (int k = 0; k < N; k++) {
    v[k] = k % 97 == 5 ? -INFINITY : (float)fmod(k * 0.37, 32.0) - 26.0f;
    v[N + k] = k == 500 ? NAN : (float)k * 0.01f;
    v[2 * N + k] = -INFINITY;
  }
  mx_tensor *x = mx_from_data(v, MX_SHAPE(3, N), MX_F32, MX_CPU);
  for (int log = 0; log < 2; log++) {
    mx_tensor *y = log ? mx_log_softmax(x, 1) : mx_softmax(x, 1);
    mx_tensor *ref = log ? mx_log_softmax(mx_to_dtype(x, MX_F64), 1) : mx_softmax(mx_to_dtype(x, MX_F64), 1);
    cr_assert(y && ref, "%s", mx_last_error());
    for (int k = 0; k < N; k++) {
      double got = mx_at(y, MX_SHAPE(0, k)), want = mx_at(ref, MX_SHAPE(0, k));
      if (isinf(want)) cr_expect_eq(got, want, "log %d, element %d", log, k);
      else cr_expect(fabs(got - want) <= 4e-6 * fabs(want) + (log ? 1e-5 : 1e-37), "log %d, element %d: %.9g, want %.9g",
                     log, k, got, want);
      if (k % 97 == 5 && !log) cr_expect_eq(got, 0.0, "a masked entry");
      cr_expect(isnan(mx_at(y, MX_SHAPE(1, k))), "log %d: NaN spreads over its row", log);
      cr_expect(isnan(mx_at(y, MX_SHAPE(2, k))), "log %d: a row of -inf", log);
    }
  }
  mx_scope_end(s);
}
