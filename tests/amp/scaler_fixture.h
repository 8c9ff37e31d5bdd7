/* What the GradScaler tests share (test_scaler.c, test_scaler_update.c):
 * assertions on statuses and exact values, a fixture that frees every
 * scaler and optimizer a test makes, and parameters whose gradients are set
 * to exact values. Scales are powers of two wherever values are asserted
 * exactly, so scaling and unscaling are exact. */
#ifndef MX_TESTS_AMP_SCALER_FIXTURE_H
#define MX_TESTS_AMP_SCALER_FIXTURE_H

#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <mixgrad.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp_suite.h"

/* expr fails with status and exactly msg as the last error (then cleared,
 * as a caller that handled it would) */
#define FAILS(expr, status, msg)                                                                   \
  do {                                                                                             \
    mx_clear_error();                                                                              \
    mx_status failed_ = (expr);                                                                    \
    cr_assert_eq(failed_, (status), "status %d, error '%s'", (int)failed_, mx_last_error());       \
    cr_assert_str_eq(mx_last_error(), (msg));                                                      \
    mx_clear_error();                                                                              \
  } while (0)

/* --- fixtures: every scaler and optimizer a test makes is freed at its end --- */

static mx_scope *scope;
static mx_scaler *scalers[16];
static mx_optimizer *optimizers[16];
static int n_scalers, n_optimizers;

static inline void open_scope(void) {
  scope = mx_scope_begin();
  n_scalers = n_optimizers = 0;
}
static inline void close_scope(void) {
  for (int i = 0; i < n_scalers; i++) mx_scaler_free(scalers[i]);
  for (int i = 0; i < n_optimizers; i++) mx_optimizer_free(optimizers[i]);
  mx_scope_end(scope);
}

static inline mx_scaler *scaler_with(const mx_scaler_opts *o) {
  mx_scaler *s = mx_scaler_new(o);
  NOT_NULL(s);
  cr_assert_lt(n_scalers, 16);
  return scalers[n_scalers++] = s;
}
static inline mx_scaler *default_scaler(void) { return scaler_with(NULL); }
static inline mx_scaler *scaler_init(double init_scale, int64_t interval) {
  mx_scaler_opts o = mx_scaler_defaults();
  o.init_scale = init_scale;
  o.growth_interval = interval;
  return scaler_with(&o);
}
static inline mx_optimizer *track(mx_optimizer *opt) {
  NOT_NULL(opt);
  cr_assert_lt(n_optimizers, 16);
  return optimizers[n_optimizers++] = opt;
}
static inline mx_optimizer *sgd(int n, mx_tensor **params, double lr) {
  mx_sgd_opts o = mx_sgd_defaults();
  o.lr = lr;
  return track(mx_sgd_new(n, params, &o));
}

/* --- tensors ------------------------------------------------------------------------ */

static inline mx_tensor *vec(int n, const float *v) {
  mx_tensor *t = mx_from_data(v, MX_SHAPE(n), MX_F32, MX_CPU);
  NOT_NULL(t);
  return t;
}
static inline mx_tensor *param(int n, const float *v) {
  mx_tensor *t = vec(n, v);
  OK(mx_set_requires_grad(t, true));
  return t;
}
static inline mx_tensor *param_full(int n, double v, mx_dtype dtype) {
  mx_tensor *t = mx_full(MX_SHAPE(n), v, dtype, MX_CPU);
  NOT_NULL(t);
  OK(mx_set_requires_grad(t, true));
  return t;
}
/* Makes p's gradient exactly g (same dtype as p). */
static inline void set_grad(mx_tensor *p, mx_tensor *g) {
  mx_zero_grad(p);
  OK(mx_backward(p, g, false));
  NOT_NULL(mx_grad_of(p));
}
static inline void set_grad_f32(mx_tensor *p, int n, const float *g) { set_grad(p, vec(n, g)); }
/* Backward of scale(sum(p * c)): p's gradient becomes scale * c (exact for
 * a power-of-two scale). */
static inline void scaled_backward(mx_scaler *s, mx_tensor *p, mx_tensor *c) {
  mx_tensor *loss = mx_sum(mx_mul(p, c), MX_ALL_DIMS, false);
  mx_tensor *scaled = mx_scaler_scale(s, loss);
  NOT_NULL(scaled);
  OK(mx_backward(scaled, NULL, false));
}
/* Sets up the scale (lazily made by the first scale call). */
static inline void prime(mx_scaler *s) { NOT_NULL(mx_scaler_scale(s, mx_scalar(0.0, MX_F32, MX_CPU))); }

static inline double at(const mx_tensor *t, int64_t i) { return mx_at(t, MX_SHAPE(i)); }
static inline double grad_at(const mx_tensor *p, int64_t i) { return at(mx_grad_of(p), i); }
static inline void expect_values(const mx_tensor *t, int n, const double *expected) {
  NOT_NULL(t);
  cr_assert_eq(mx_numel(t), n);
  mx_tensor *flat = mx_reshape(mx_contiguous(t), MX_SHAPE(n));
  for (int i = 0; i < n; i++) {
    double v = at(flat, i);
    cr_assert(v == expected[i] || (isnan(v) && isnan(expected[i])), "element %d: %a (%.9g), expected %a (%.9g)", i,
              v, v, expected[i], expected[i]);
  }
}
static inline void expect_bits_equal(const mx_tensor *a, const mx_tensor *b, const char *what) {
  NOT_NULL(a);
  NOT_NULL(b);
  cr_assert_eq(mx_dtype_of(a), mx_dtype_of(b));
  cr_assert_eq(mx_numel(a), mx_numel(b));
  size_t bytes = (size_t)mx_numel(a) * (mx_dtype_of(a) == MX_F64 || mx_dtype_of(a) == MX_I64 ? 8 : 4);
  void *x = malloc(bytes), *y = malloc(bytes);
  OK(mx_to_host(mx_contiguous(a), x, bytes));
  OK(mx_to_host(mx_contiguous(b), y, bytes));
  int same = memcmp(x, y, bytes) == 0;
  free(x);
  free(y);
  cr_assert(same, "%s differs bit for bit", what);
}

static inline int64_t tracker_of(const mx_scaler *s) {
  mx_scaler_state st;
  OK(mx_scaler_state_dict(s, &st));
  return st.growth_tracker;
}

/* One iteration with p's gradient set to scale * c: step and update. */
static inline void iterate(mx_scaler *s, mx_optimizer *opt, mx_tensor *p, mx_tensor *c, mx_scaler_step_info *info) {
  OK(mx_optimizer_zero_grad(opt, true));
  scaled_backward(s, p, c);
  OK(mx_scaler_step(s, opt, info));
  OK(mx_scaler_update(s));
}
static inline void clean_iteration(mx_scaler *s, mx_optimizer *opt, mx_tensor *p) {
  mx_scaler_step_info info;
  iterate(s, opt, p, mx_full(MX_SHAPE(mx_numel(p)), 0.25, MX_F32, MX_CPU), &info);
  cr_assert(info.stepped);
}
static inline void inf_iteration(mx_scaler *s, mx_optimizer *opt, mx_tensor *p) {
  mx_scaler_step_info info;
  mx_tensor *c = mx_full(MX_SHAPE(mx_numel(p)), 0.25, MX_F32, MX_CPU);
  OK(mx_set(c, MX_SHAPE(0), INFINITY));
  iterate(s, opt, p, c, &info);
  cr_assert_not(info.stepped);
}

#endif
