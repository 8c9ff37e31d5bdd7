/* Larger tensors (the parallel and vectorised paths) against naive
 * references computed here: elementwise results exactly as IEEE arithmetic
 * in the compute type gives them (16-bit: computed in float32, rounded
 * once), transcendental ones within a few ulps, reductions within the
 * bound that grows with the reduction length (n u sum |x|). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include <mixgrad.h>

#include "op_checks.h"

static mx_tensor *randn(mx_shape shape, mx_dtype dtype, uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_tensor *t = mx_to_dtype(mx_randn(shape, MX_F32, MX_CPU, gen), dtype);
  mx_generator_free(gen);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

static float round_to(mx_dtype dtype, float v) {
  switch (dtype) {
  case MX_F16: return mx_f16_to_f32(mx_f32_to_f16(v));
  case MX_BF16: return mx_bf16_to_f32(mx_f32_to_bf16(v));
  default: return v;
  }
}

static double ulp_of(mx_dtype dtype, double v) {
  int mantissa = dtype == MX_F16 ? 10 : dtype == MX_BF16 ? 7 : dtype == MX_F32 ? 23 : 52;
  if (v == 0) return ldexp(1, dtype == MX_F16 ? -24 : -149);
  return ldexp(1, ilogb(v) - mantissa);
}

#define R 300
#define C 257

/* a (R, C) + b (C), a * b, and exp/tanh of a, in each floating dtype */
Test(ops_reference, broadcast_elementwise_every_float_dtype) {
  mx_dtype dtypes[] = {MX_F32, MX_F16, MX_BF16, MX_F64};
  for (int k = 0; k < 4; k++) {
    mx_scope *s = mx_scope_begin();
    mx_dtype dt = dtypes[k];
    mx_tensor *a = randn(MX_SHAPE(R, C), dt, 100 + (uint64_t)k), *b = randn(MX_SHAPE(C), dt, 200 + (uint64_t)k);
    double *av = op_host_values(a), *bv = op_host_values(b);
    double *sum = op_host_values(mx_add(a, b)), *prod = op_host_values(mx_mul(a, b));
    double *e = op_host_values(mx_exp(a)), *th = op_host_values(mx_tanh(a));
    int bad = 0;
    for (int i = 0; i < R && bad < 4; i++)
      for (int j = 0; j < C && bad < 4; j++) {
        int64_t x = (int64_t)i * C + j;
        double want_sum, want_prod;
        if (dt == MX_F64) {
          want_sum = av[x] + bv[j];
          want_prod = av[x] * bv[j];
        } else {
          want_sum = round_to(dt, (float)av[x] + (float)bv[j]);
          want_prod = round_to(dt, (float)av[x] * (float)bv[j]);
        }
        bool ok = sum[x] == want_sum && prod[x] == want_prod;
        /* exp and tanh: within 4 ulps of the exact value (glibc: tanhf is off by 2) */
        double want_e = exp(av[x]), want_t = tanh(av[x]);
        ok = ok && fabs(e[x] - want_e) <= 4 * ulp_of(dt, want_e) && fabs(th[x] - want_t) <= 4 * ulp_of(dt, want_t);
        if (!ok) {
          cr_expect(ok, "%s (%d, %d): a %.9g b %.9g: sum %.9g (want %.9g) prod %.9g (want %.9g) exp %.9g (%.9g) "
                    "tanh %.9g (%.9g)", mx_dtype_name(dt), i, j, av[x], bv[j], sum[x], want_sum, prod[x], want_prod,
                    e[x], want_e, th[x], want_t);
          bad++;
        }
      }
    free(av), free(bv), free(sum), free(prod), free(e), free(th);
    mx_scope_end(s);
  }
}

/* f16 + f32 on a transposed view: promotes to f32, reads the strides right */
Test(ops_reference, mixed_dtypes_on_strided_views) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = randn(MX_SHAPE(C, R), MX_F16, 1), *b = randn(MX_SHAPE(R, 1), MX_F32, 2);
  mx_tensor *at = mx_transpose(a, 0, 1); /* (R, C), strided */
  mx_tensor *out = mx_add(at, b);
  cr_assert_not_null(out, "%s", mx_last_error());
  cr_expect_eq(mx_dtype_of(out), MX_F32);
  double *av = op_host_values(a), *bv = op_host_values(b), *ov = op_host_values(out);
  int bad = 0;
  for (int i = 0; i < R && bad < 4; i++)
    for (int j = 0; j < C && bad < 4; j++) {
      double want = (float)av[(int64_t)j * R + i] + (float)bv[i];
      if (ov[(int64_t)i * C + j] != want) {
        cr_expect(false, "(%d, %d): %.9g, want %.9g", i, j, ov[(int64_t)i * C + j], want);
        bad++;
      }
    }
  free(av), free(bv), free(ov);
  mx_scope_end(s);
}

/* sums, means, cumsums of float32 over long dims: |error| <= n u sum |x| */
Test(ops_reference, f32_reductions_within_the_length_bound) {
  mx_scope *s = mx_scope_begin();
  const int rows = 37, n = 5000;
  mx_tensor *x = randn(MX_SHAPE(rows, n), MX_F32, 3);
  double *xv = op_host_values(x);
  double *row_sum = op_host_values(mx_sum(x, MX_DIMS(1), false));
  double *row_mean = op_host_values(mx_mean(x, MX_DIMS(1), false));
  double *col_sum = op_host_values(mx_sum(x, MX_DIMS(0), false)), *all = op_host_values(mx_sum(x, MX_ALL_DIMS, false));
  double *cum = op_host_values(mx_cumsum(x, 1)), *amax = op_host_values(mx_amax(x, MX_DIMS(1), false));
  const double u = ldexp(1, -24);
  double total = 0, total_abs = 0;
  for (int i = 0; i < rows; i++) {
    double exact = 0, mag = 0, max = -INFINITY;
    for (int j = 0; j < n; j++) {
      double v = xv[(int64_t)i * n + j];
      exact += v, mag += fabs(v), max = v > max ? v : max;
      double c = cum[(int64_t)i * n + j];
      if (j % 997 == 0 || j == n - 1)
        cr_expect(fabs(c - exact) <= (j + 1) * u * mag + 1e-30, "cumsum (%d, %d): %.9g, exact %.17g", i, j, c, exact);
    }
    total += exact, total_abs += mag;
    cr_expect(fabs(row_sum[i] - exact) <= n * u * mag, "row %d: sum %.9g, exact %.17g", i, row_sum[i], exact);
    cr_expect(fabs(row_mean[i] - exact / n) <= (n + 1) * u * mag / n, "row %d: mean %.9g, exact %.17g", i,
              row_mean[i], exact / n);
    cr_expect_eq(amax[i], max, "row %d: amax %.9g, exact %.9g", i, amax[i], max);
  }
  for (int j = 0; j < n; j += 499) {
    double exact = 0, mag = 0;
    for (int i = 0; i < rows; i++) exact += xv[(int64_t)i * n + j], mag += fabs(xv[(int64_t)i * n + j]);
    cr_expect(fabs(col_sum[j] - exact) <= rows * u * mag, "column %d: sum %.9g, exact %.17g", j, col_sum[j], exact);
  }
  cr_expect(fabs(all[0] - total) <= (double)rows * n * u * total_abs, "sum %.9g, exact %.17g", all[0], total);
  free(xv), free(row_sum), free(row_mean), free(col_sum), free(all), free(cum), free(amax);
  mx_scope_end(s);
}

/* argmax/argmin over long rows with a planted unique extremum */
Test(ops_reference, argmax_of_long_rows) {
  mx_scope *s = mx_scope_begin();
  const int rows = 5, n = 10007;
  mx_tensor *x = mx_to_dtype(randn(MX_SHAPE(rows, n), MX_F32, 4), MX_F64);
  int64_t where_max[5] = {0, 1, 5000, 10005, 10006}, where_min[5] = {10006, 7, 0, 3, 9999};
  for (int i = 0; i < rows; i++) {
    cr_assert_eq(mx_set(x, MX_SHAPE(i, where_max[i]), 100.0 + i), MX_OK);
    cr_assert_eq(mx_set(x, MX_SHAPE(i, where_min[i]), -100.0 - i), MX_OK);
  }
  mx_tensor *am = mx_argmax(x, 1, false), *an = mx_argmin(x, 1, false);
  cr_assert_not_null(am, "%s", mx_last_error());
  cr_assert_not_null(an, "%s", mx_last_error());
  for (int i = 0; i < rows; i++) {
    cr_expect_eq((int64_t)mx_at(am, MX_SHAPE(i)), where_max[i], "row %d: argmax %g", i, mx_at(am, MX_SHAPE(i)));
    cr_expect_eq((int64_t)mx_at(an, MX_SHAPE(i)), where_min[i], "row %d: argmin %g", i, mx_at(an, MX_SHAPE(i)));
  }
  mx_tensor *flat = mx_argmax(x, MX_FLAT, false);
  cr_expect_eq((int64_t)mx_item(flat), 4 * (int64_t)n + where_max[4]);
  mx_scope_end(s);
}

/* A gradient through a long broadcast: d sum(a + b) / d b sums over 300 rows. */
Test(ops_reference, broadcast_gradient_sums_the_rows) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = randn(MX_SHAPE(R, C), MX_F64, 5), *b = randn(MX_SHAPE(C), MX_F64, 6);
  mx_set_requires_grad(a, true);
  mx_set_requires_grad(b, true);
  mx_tensor *w = randn(MX_SHAPE(R, C), MX_F64, 7);
  mx_tensor *loss = mx_sum(mx_mul(mx_mul(a, b), w), MX_ALL_DIMS, false);
  mx_tensor *grads[2] = {0}, *inputs[2] = {a, b};
  cr_assert_eq(mx_grad(1, &loss, 2, inputs, NULL, false, false, false, grads), MX_OK, "%s", mx_last_error());
  double *av = op_host_values(a), *bv = op_host_values(b), *wv = op_host_values(w);
  double *ga = op_host_values(grads[0]), *gb = op_host_values(grads[1]);
  for (int j = 0; j < C; j++) {
    double want = 0, mag = 0;
    for (int i = 0; i < R; i++) want += av[i * C + j] * wv[i * C + j], mag += fabs(av[i * C + j] * wv[i * C + j]);
    cr_expect(fabs(gb[j] - want) <= R * ldexp(1, -53) * mag, "d/db[%d]: %.17g, want %.17g", j, gb[j], want);
  }
  for (int x = 0; x < R * C; x += 101)
    cr_expect_eq(ga[x], bv[x % C] * wv[x], "d/da[%d]: %.17g, want %.17g", x, ga[x], bv[x % C] * wv[x]);
  free(av), free(bv), free(wv), free(ga), free(gb);
  mx_scope_end(s);
}
