/* cross_entropy's fused primitive (cross_entropy_indices, ops/cross_entropy_fused.c) against its composite, which a
 * weight of ones forces: values and input gradients within a few float32 (or float64) roundings on random shapes, C =
 * 1 and 1000, N = 1, ignored rows, all rows ignored, extreme logits; hand-computed values; float64 gradcheck and
 * gradgradcheck; 16-bit inputs directly and under autocast; strided inputs; the errors of bad targets. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#define FUSED_NODE "CROSS_ENTROPY_INDICESBackward"

static const mx_reduction reductions[] = {MX_REDUCTION_NONE, MX_REDUCTION_MEAN, MX_REDUCTION_SUM};

/* Class indices for n rows of c classes: (i * 7 + 3) % c, ignore_index where (i % ignore_every) == 1. */
static mx_tensor *targets(int64_t n, int64_t c, int ignore_every, int64_t ignore_index) {
  int64_t *v = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) v[i] = ignore_every && i % ignore_every == 1 ? ignore_index : (i * 7 + 3) % c;
  mx_tensor *t = mx_from_data(v, MX_SHAPE(n), MX_I64, MX_CPU);
  free(v);
  return t;
}

static double *host_f64(const mx_tensor *t) {
  mx_tensor *d = mx_to_dtype(t, MX_F64);
  double *v = malloc(sizeof(double) * (size_t)(mx_numel(d) + 1));
  cr_assert_eq(mx_to_host(mx_contiguous(d), v, sizeof(double) * (size_t)mx_numel(d)), MX_OK, "%s", mx_last_error());
  return v;
}

/* max |a - b| over max |b| (NaN and infinities where the other has them, equal) within rtol */
static void expect_close(const mx_tensor *a, const mx_tensor *b, double rtol, const char *what) {
  cr_assert_eq(mx_numel(a), mx_numel(b), "%s: sizes", what);
  int64_t n = mx_numel(a);
  double *x = host_f64(a), *y = host_f64(b), scale = 0, err = 0;
  for (int64_t k = 0; k < n; k++)
    if (isfinite(y[k])) scale = fmax(scale, fabs(y[k]));
  for (int64_t k = 0; k < n; k++) {
    if (!isfinite(x[k]) || !isfinite(y[k])) {
      cr_expect(isnan(x[k]) ? isnan(y[k]) : x[k] == y[k], "%s[%lld]: %g, expected %g", what, (long long)k, x[k], y[k]);
      continue;
    }
    err = fmax(err, fabs(x[k] - y[k]));
  }
  cr_expect_leq(err, rtol * (scale > 0 ? scale : 1), "%s: off by %g of %g (rtol %g)", what, err, scale, rtol);
  free(x), free(y);
}

typedef struct {
  mx_tensor *loss, *dx;
} result;

/* The loss and d sum(loss * r) / dx, r a ramp for an unreduced loss (so each row's gradient differs); the fused path
 * (no weight), or the composite (a weight of ones). */
static result run(const mx_tensor *x, mx_tensor *t, mx_reduction red, int64_t ignore_index, bool composite) {
  mx_tensor *leaf = mx_detach(x);
  cr_assert_eq(mx_set_requires_grad(leaf, true), MX_OK);
  mx_tensor *w = composite ? mx_ones(MX_SHAPE(mx_size(leaf, 1)), mx_dtype_of(leaf), MX_CPU) : NULL;
  result r = {mx_cross_entropy(leaf, t, w, ignore_index, red, 0), NULL};
  cr_assert(r.loss, "%s", mx_last_error());
  cr_assert_eq(!strcmp(mx_grad_fn_name(r.loss), FUSED_NODE), !composite, "%s path: %s",
               composite ? "composite" : "fused", mx_grad_fn_name(r.loss));
  mx_tensor *out = r.loss;
  if (red == MX_REDUCTION_NONE) {
    mx_tensor *ramp = mx_add_scalar(mx_arange(0, (double)mx_size(leaf, 0), 1, mx_dtype_of(r.loss), MX_CPU), 0.5);
    out = mx_sum(mx_mul(r.loss, ramp), MX_ALL_DIMS, false);
  }
  cr_assert_eq(mx_grad(1, &out, 1, &leaf, NULL, false, false, false, &r.dx), MX_OK, "%s", mx_last_error());
  return r;
}

/* The fused loss and gradient against the composite's. */
static void expect_as_composite(mx_tensor *x, mx_tensor *t, int64_t ignore_index, double rtol, const char *what) {
  for (int k = 0; k < 3; k++) {
    result f = run(x, t, reductions[k], ignore_index, false), c = run(x, t, reductions[k], ignore_index, true);
    char name[160];
    snprintf(name, sizeof name, "%s, reduction %d: loss", what, (int)reductions[k]);
    cr_expect_eq(mx_dtype_of(f.loss), mx_dtype_of(c.loss), "%s dtype", name);
    cr_expect_eq(mx_ndim(f.loss), mx_ndim(c.loss), "%s ndim", name);
    expect_close(f.loss, c.loss, rtol, name);
    snprintf(name, sizeof name, "%s, reduction %d: dx", what, (int)reductions[k]);
    expect_close(f.dx, c.dx, rtol, name);
  }
}

Test(cross_entropy_fused, matches_the_composite_on_random_shapes) {
  static const int64_t shapes[][2] = {{1, 1}, {1, 10}, {7, 1}, {128, 10}, {5, 1000}, {33, 17}, {3, 40}};
  mx_manual_seed(7);
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int ignore = 0; ignore < 3; ignore++) {
      mx_scope *scope = mx_scope_begin();
      int64_t n = shapes[s][0], c = shapes[s][1];
      /* ignore_index -100, then a class index (2: the rows of class 2 are ignored too; never row 0, so that some
       * row counts: every_row_ignored checks the rest) */
      int64_t ignore_index = ignore == 2 ? 2 : -100;
      mx_tensor *t = targets(n, c, ignore ? 3 : 0, ignore_index);
      char what[96];
      for (int dt = 0; dt < 2; dt++) {
        mx_dtype dtype = dt ? MX_F64 : MX_F32;
        mx_tensor *x = mx_mul_scalar(mx_randn(MX_SHAPE(n, c), dtype, MX_CPU, NULL), 3);
        snprintf(what, sizeof what, "(%lld, %lld) %s, ignoring %d", (long long)n, (long long)c,
                 dt ? "float64" : "float32", ignore);
        expect_as_composite(x, t, ignore_index, dt ? 1e-13 : 2e-6, what);
      }
      mx_scope_end(scope);
    }
}

/* An input that is a transposed view, and one whose rows are strided: the values of its contiguous copy. */
Test(cross_entropy_fused, strided_inputs) {
  mx_scope *s = mx_scope_begin();
  mx_manual_seed(3);
  mx_tensor *base = mx_randn(MX_SHAPE(9, 6), MX_F32, MX_CPU, NULL);
  mx_tensor *t = targets(6, 9, 4, -100);
  mx_tensor *views[2] = {mx_transpose(base, 0, 1),
                         mx_slice(mx_transpose(mx_randn(MX_SHAPE(18, 6), MX_F32, MX_CPU, NULL), 0, 1), 1, 0, 18, 2)};
  for (int v = 0; v < 2; v++) {
    for (int k = 0; k < 3; k++) {
      result a = run(views[v], t, reductions[k], -100, false),
             b = run(mx_contiguous(views[v]), t, reductions[k], -100, false);
      /* within rounding: the contiguous rows take the vectorised float32 exponential */
      expect_close(a.loss, b.loss, 2e-6, "strided loss");
      expect_close(a.dx, b.dx, 2e-6, "strided dx");
    }
  }
  mx_scope_end(s);
}

/* log(e + e^2 + e^3) - 3 and softmax - onehot, by hand; a -100 row counts for nothing. */
Test(cross_entropy_fused, hand_computed) {
  mx_scope *s = mx_scope_begin();
  float xv[] = {1, 2, 3, 5, -1, 0.5f};
  int64_t tv[] = {2, -100};
  mx_tensor *x = mx_from_data(xv, MX_SHAPE(2, 3), MX_F32, MX_CPU), *t = mx_from_data(tv, MX_SHAPE(2), MX_I64, MX_CPU);
  double lse = log(exp(1) + exp(2) + exp(3));
  for (int k = 0; k < 3; k++) {
    result r = run(x, t, reductions[k], -100, false);
    double *loss = host_f64(r.loss), *dx = host_f64(r.dx);
    cr_expect_float_eq(loss[0], lse - 3, 1e-6, "loss %g", loss[0]);
    if (reductions[k] == MX_REDUCTION_NONE) cr_expect_eq(loss[1], 0, "an ignored row's loss: %g", loss[1]);
    double g = reductions[k] == MX_REDUCTION_NONE ? 0.5 : 1; /* the ramp's weight of row 0 */
    for (int j = 0; j < 3; j++)
      cr_expect_float_eq(dx[j], (exp(j + 1 - lse) - (j == 2)) * g, 1e-6, "dx[0, %d] = %g", j, dx[j]);
    for (int j = 3; j < 6; j++) cr_expect_eq(dx[j], 0, "an ignored row's dx: %g", dx[j]);
    free(loss), free(dx);
  }
  mx_scope_end(s);
}

/* All rows ignored: the mean is 0 / 0 (NaN, as PyTorch), the sum 0, and no gradient reaches x (PyTorch's zeros). */
Test(cross_entropy_fused, every_row_ignored) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_randn(MX_SHAPE(4, 5), MX_F32, MX_CPU, NULL), *t = mx_full(MX_SHAPE(4), -100, MX_I64, MX_CPU);
  for (int k = 0; k < 3; k++) {
    result r = run(x, t, reductions[k], -100, false);
    double *loss = host_f64(r.loss), *dx = host_f64(r.dx);
    if (reductions[k] == MX_REDUCTION_MEAN)
      cr_expect(isnan(loss[0]), "the mean of no rows: %g", loss[0]);
    else
      for (int64_t i = 0; i < mx_numel(r.loss); i++) cr_expect_eq(loss[i], 0, "loss[%lld] = %g", (long long)i, loss[i]);
    for (int j = 0; j < 20; j++) cr_expect_eq(dx[j], 0, "dx[%d] = %g", j, dx[j]);
    free(loss), free(dx);
  }
  mx_scope_end(s);
}

/* Logits of +-1e4 and -inf away from the targets: the shift by the max keeps everything finite. */
Test(cross_entropy_fused, extreme_logits) {
  mx_scope *s = mx_scope_begin();
  float xv[] = {1e4f, -1e4f, -INFINITY, 0, 0, -1e4f, 1e4f, 1e4f, -INFINITY, -INFINITY, 3, 1e4f};
  int64_t tv[] = {0, 1, 3};
  mx_tensor *x = mx_from_data(xv, MX_SHAPE(3, 4), MX_F32, MX_CPU), *t = mx_from_data(tv, MX_SHAPE(3), MX_I64, MX_CPU);
  expect_as_composite(x, t, -100, 2e-6, "extreme logits");
  result r = run(x, t, MX_REDUCTION_NONE, -100, false);
  double *loss = host_f64(r.loss), *dx = host_f64(r.dx);
  cr_expect_eq(loss[0], 0, "row 0: %g", loss[0]);
  cr_expect_float_eq(loss[1], 2e4 + log(2), 1e-2, "row 1: %g", loss[1]);
  cr_expect_eq(loss[2], 0, "row 2: %g", loss[2]);
  for (int k = 0; k < 12; k++) cr_expect(isfinite(dx[k]), "dx[%d] = %g", k, dx[k]);
  /* row 1: softmax (0, 0, 1/2, 1/2) less the target's one, times the ramp's 1.5 */
  cr_expect_eq(dx[4], 0, "dx[1, 0] = %g", dx[4]);
  cr_expect_float_eq(dx[5], -1.5, 1e-6, "dx[1, 1] = %g", dx[5]);
  cr_expect_float_eq(dx[6], 0.75, 1e-6, "dx[1, 2] = %g", dx[6]);
  free(loss), free(dx);
  mx_scope_end(s);
}

typedef struct {
  mx_tensor *t;
  mx_reduction red;
} fn_ctx;

static mx_tensor *loss_fn(int n, mx_tensor *const *in, void *ctx) {
  (void)n;
  const fn_ctx *c = ctx;
  return mx_cross_entropy(in[0], c->t, NULL, -100, c->red, 0);
}

/* Finite differences in float64 of the loss, and of its gradient (the backward op differentiated). */
Test(cross_entropy_fused, gradcheck_and_gradgradcheck) {
  mx_scope *s = mx_scope_begin();
  mx_manual_seed(11);
  static const int64_t shapes[][2] = {{1, 1}, {4, 5}, {6, 3}};
  for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++)
    for (int k = 0; k < 3; k++) {
      mx_tensor *x = mx_randn(MX_SHAPE(shapes[sh][0], shapes[sh][1]), MX_F64, MX_CPU, NULL);
      cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
      fn_ctx ctx = {targets(shapes[sh][0], shapes[sh][1], 3, -100), reductions[k]};
      mx_tensor *probe = loss_fn(1, &x, &ctx);
      cr_assert(probe && !strcmp(mx_grad_fn_name(probe), FUSED_NODE), "the fused path");
      cr_expect_eq(mx_gradcheck(loss_fn, 1, &x, &ctx, 1e-6, 1e-5, 1e-4), MX_OK, "gradcheck (%lld, %lld), %d: %s",
                   (long long)shapes[sh][0], (long long)shapes[sh][1], k, mx_last_error());
      cr_expect_eq(mx_gradgradcheck(loss_fn, 1, &x, &ctx, 1e-6, 1e-5, 1e-4), MX_OK,
                   "gradgradcheck (%lld, %lld), %d: %s", (long long)shapes[sh][0], (long long)shapes[sh][1], k,
                   mx_last_error());
    }
  mx_scope_end(s);
}

/* Under autocast a 16-bit input is cast to float32 (the FP32 policy): the float32 call's bits, and the composite's
 * values under the same region. Called directly on 16-bit data, it computes in double and rounds once. */
Test(cross_entropy_fused, sixteen_bit_inputs) {
  mx_scope *s = mx_scope_begin();
  mx_manual_seed(5);
  mx_tensor *t = targets(16, 10, 5, -100);
  mx_dtype dtypes[2] = {MX_BF16, MX_F16};
  for (int d = 0; d < 2; d++) {
    mx_tensor *x16 = mx_to_dtype(mx_mul_scalar(mx_randn(MX_SHAPE(16, 10), MX_F32, MX_CPU, NULL), 2), dtypes[d]);
    mx_tensor *x32 = mx_to_dtype(x16, MX_F32);
    for (int k = 0; k < 3; k++) {
      result plain = run(x32, t, reductions[k], -100, false), fused = {0}, composite = {0};
      MX_AUTOCAST(MX_CPU, dtypes[d], true, true) {
        fused = run(x16, t, reductions[k], -100, false);
        composite = run(x16, t, reductions[k], -100, true);
      }
      cr_expect_eq(mx_dtype_of(fused.loss), MX_F32, "autocast's loss is float32");
      cr_expect_eq(mx_dtype_of(fused.dx), dtypes[d], "dx in the input's dtype");
      expect_close(fused.loss, plain.loss, 0, "autocast loss against float32");
      expect_close(fused.loss, composite.loss, 2e-6, "autocast loss against the composite");
      double ulp = dtypes[d] == MX_BF16 ? 0x1p-8 : 0x1p-11;
      expect_close(fused.dx, composite.dx, ulp, "autocast dx against the composite (both rounded to 16 bits)");
      result direct = run(x16, t, reductions[k], -100, false);
      cr_expect_eq(mx_dtype_of(direct.loss), dtypes[d], "a direct call's loss in the input's dtype");
      expect_close(direct.loss, plain.loss, ulp, "direct 16-bit loss");
      expect_close(direct.dx, plain.dx, 2 * ulp, "direct 16-bit dx");
    }
  }
  mx_scope_end(s);
}

/* Bad targets keep the composite's checks and messages. */
Test(cross_entropy_fused, bad_targets) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_zeros(MX_SHAPE(3, 4), MX_F32, MX_CPU);
  int64_t out_of_range[] = {0, 4, 1};
  cr_expect_null(
      mx_cross_entropy(x, mx_from_data(out_of_range, MX_SHAPE(3), MX_I64, MX_CPU), NULL, -100, MX_REDUCTION_MEAN, 0));
  cr_expect_eq(mx_last_status(), MX_INDEX_ERROR);
  cr_expect_str_eq(mx_last_error(), "mx_cross_entropy: target 4 out of range for 4 classes");
  cr_expect_null(mx_cross_entropy(x, mx_zeros(MX_SHAPE(2), MX_I64, MX_CPU), NULL, -100, MX_REDUCTION_MEAN, 0));
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  cr_expect_null(mx_cross_entropy(x, mx_zeros(MX_SHAPE(3), MX_I32, MX_CPU), NULL, -100, MX_REDUCTION_MEAN, 0));
  cr_expect_eq(mx_last_status(), MX_DTYPE_ERROR);
  mx_scope_end(s);
}
