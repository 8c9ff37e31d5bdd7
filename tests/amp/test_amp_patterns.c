/* The patterns of PyTorch's "Automatic Mixed Precision examples" page, each
 * run with autocast + GradScaler on the CPU and compared with a float32 run
 * of the same model from the same initial weights: the typical loop
 * (bfloat16 and float16), clipping unscaled gradients, gradient
 * accumulation, the gradient penalty, several models, losses and optimizers
 * with one update, and a forced float16 overflow.
 *
 * The model is an MLP 8-32-4 (linear, tanh, linear) fitted by MSE to
 * y = tanh(x A^T) on 64 points, all drawn from seeded mx_generators.
 *
 * Tolerances. Autocast rounds the inputs of both linear layers to the lower
 * dtype and their outputs too; the MSE runs in float32. With u the relative
 * spacing of the lower dtype (bfloat16 2^-8, float16 2^-11; a rounding
 * moves a value by at most u/2 relatively), each of the about six roundings
 * a value meets between input and loss moves it by at most u/2, and the
 * loss (a mean of squared differences of the size of the outputs) by a few
 * u, as do the gradients of the first step (the weights still equal): we
 * allow 4u relative, 0.0156 for bfloat16 and 0.00195 for float16. Training
 * then separates the runs only slowly (the steps are contractive on this
 * problem): the worst differences measured over whole runs are 0.3u to
 * 0.8u for the loss trajectories, 1.7u for accumulated gradients and 2.5u
 * for the gradient penalty's second-order gradients (each test logs its
 * worst), so 4u holds along the trajectories too. float32 summation order
 * moves results by ~1e-7, far below u. The GradScaler alone (no autocast)
 * with power-of-two scales is exact: there the runs must agree bit for
 * bit. */
#include <criterion/criterion.h>
#include <math.h>
#include <mixgrad.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp_suite.h"

/* expects rel <= tol and keeps the worst rel seen (logged by each test) */
#define CLOSE(worst, rel, tol, ...)                                                                \
  do {                                                                                             \
    double rel_ = (rel);                                                                           \
    (worst) = fmax((worst), rel_);                                                                 \
    cr_expect_leq(rel_, (tol), __VA_ARGS__);                                                       \
  } while (0)

enum { N = 64, IN = 8, HID = 32, OUT = 4, STEPS = 30 };
static const double U_BF16 = 0x1p-8, U_F16 = 0x1p-11;

TestSuite(amp_patterns, .init = amp_suite_open, .fini = amp_suite_close);

/* --- the model and the data ------------------------------------------------------------ */

typedef struct {
  mx_tensor *p[4]; /* w1 (HID, IN), b1 (HID), w2 (OUT, HID), b2 (OUT) */
} mlp;

static mx_tensor *leaf(mx_tensor *t) {
  NOT_NULL(t);
  OK(mx_set_requires_grad(t, true));
  return t;
}

/* The same weights for every seed value, whatever run asks. */
static mlp mlp_init(uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mlp m;
  m.p[0] = leaf(mx_mul_scalar(mx_randn(MX_SHAPE(HID, IN), MX_F32, MX_CPU, gen), 1.0 / sqrt(IN)));
  m.p[1] = leaf(mx_mul_scalar(mx_randn(MX_SHAPE(HID), MX_F32, MX_CPU, gen), 0.1));
  m.p[2] = leaf(mx_mul_scalar(mx_randn(MX_SHAPE(OUT, HID), MX_F32, MX_CPU, gen), 1.0 / sqrt(HID)));
  m.p[3] = leaf(mx_mul_scalar(mx_randn(MX_SHAPE(OUT), MX_F32, MX_CPU, gen), 0.1));
  mx_generator_free(gen);
  return m;
}

static mx_tensor *forward(const mlp *m, const mx_tensor *x) {
  return mx_linear(mx_tanh(mx_linear(x, m->p[0], m->p[1])), m->p[2], m->p[3]);
}

static void make_data(mx_tensor **x, mx_tensor **y) {
  mx_generator *gen = mx_generator_new(2024);
  *x = mx_randn(MX_SHAPE(N, IN), MX_F32, MX_CPU, gen);
  mx_tensor *a = mx_randn(MX_SHAPE(OUT, IN), MX_F32, MX_CPU, gen);
  *y = mx_tanh(mx_matmul(*x, mx_transpose(a, 0, 1)));
  NOT_NULL(*y);
  mx_generator_free(gen);
}

typedef enum { FP32, SCALER_ONLY, AMP_BF16, AMP_F16 } mode;
static const char *const mode_names[] = {"fp32", "scaler only", "bf16", "f16"};
static bool autocast_of(mode md) { return md == AMP_BF16 || md == AMP_F16; }
static mx_dtype dtype_of(mode md) { return md == AMP_F16 ? MX_F16 : MX_BF16; }
static double unit_of(mode md) { return md == AMP_F16 ? U_F16 : md == AMP_BF16 ? U_BF16 : 0; }

/* mse(model(x), y) under the mode's autocast (the loss itself is float32). */
static mx_tensor *loss_of(const mlp *m, const mx_tensor *x, const mx_tensor *y, mode md) {
  mx_tensor *loss = NULL;
  MX_AUTOCAST(MX_CPU, dtype_of(md), autocast_of(md), true) {
    mx_tensor *out = forward(m, x);
    if (autocast_of(md)) cr_assert_eq(mx_dtype_of(out), dtype_of(md), "the linear layers run in the lower dtype");
    loss = mx_mse_loss(out, y, MX_REDUCTION_MEAN);
  }
  NOT_NULL(loss);
  cr_assert_eq(mx_dtype_of(loss), MX_F32);
  return loss;
}

static mx_optimizer *sgd_of(mlp *m, double lr, double momentum) {
  mx_sgd_opts o = mx_sgd_defaults();
  o.lr = lr, o.momentum = momentum;
  mx_optimizer *opt = mx_sgd_new(4, m->p, &o);
  NOT_NULL(opt);
  return opt;
}

static mx_scaler *scaler_of(double init_scale) {
  mx_scaler_opts o = mx_scaler_defaults();
  o.init_scale = init_scale;
  mx_scaler *s = mx_scaler_new(&o);
  NOT_NULL(s);
  return s;
}

/* --- comparisons -------------------------------------------------------------------------- */

static float *host(const mx_tensor *t) {
  NOT_NULL(t);
  float *v = malloc(sizeof *v * (size_t)mx_numel(t));
  OK(mx_to_host(mx_contiguous(mx_to_dtype(t, MX_F32)), v, sizeof *v * (size_t)mx_numel(t)));
  return v;
}

static void expect_same_bits(const mx_tensor *a, const mx_tensor *b, const char *what) {
  float *x = host(a), *y = host(b);
  int same = memcmp(x, y, sizeof *x * (size_t)mx_numel(a)) == 0;
  free(x);
  free(y);
  cr_assert(same, "%s differs bit for bit", what);
}

/* max |a - b| / max |b|: the error relative to the reference's size. */
static double rel_diff(const mx_tensor *a, const mx_tensor *b) {
  cr_assert_eq(mx_numel(a), mx_numel(b));
  float *x = host(a), *y = host(b);
  double diff = 0, size = 0;
  for (int64_t i = 0; i < mx_numel(a); i++) {
    diff = fmax(diff, fabs((double)x[i] - y[i]));
    size = fmax(size, fabs((double)y[i]));
  }
  free(x);
  free(y);
  return size > 0 ? diff / size : diff;
}

/* sqrt(sum of g^2) over the gradients, with mx ops. */
static mx_tensor *global_norm(int n, mx_tensor *const *params) {
  mx_tensor *sum = NULL;
  for (int i = 0; i < n; i++) {
    mx_tensor *g = mx_grad_of(params[i]);
    NOT_NULL(g);
    mx_tensor *sq = mx_sum(mx_mul(g, g), MX_ALL_DIMS, false);
    sum = sum ? mx_add(sum, sq) : sq;
  }
  return mx_sqrt(sum);
}

/* --- the typical loop ------------------------------------------------------------------------ */

typedef struct {
  double loss[STEPS];
  mx_tensor *grad0[4]; /* the gradients of the first step (unscaled) */
  mx_tensor *final[4];
  int skipped;
} run;

static void typical_loop(mode md, run *r) {
  mx_tensor *x, *y;
  make_data(&x, &y);
  mlp m = mlp_init(7);
  mx_optimizer *opt = sgd_of(&m, 0.1, 0.9);
  mx_scaler *s = md == FP32 ? NULL : scaler_of(65536.0);
  r->skipped = 0;
  for (int t = 0; t < STEPS; t++) {
    mx_scope *it = mx_scope_begin();
    OK(mx_optimizer_zero_grad(opt, true));
    mx_tensor *loss = loss_of(&m, x, y, md);
    r->loss[t] = mx_item(loss);
    if (!s) {
      OK(mx_backward(loss, NULL, false));
      if (t == 0)
        for (int i = 0; i < 4; i++) r->grad0[i] = mx_keep(mx_clone(mx_grad_of(m.p[i])));
      OK(mx_optimizer_step(opt));
    } else {
      mx_tensor *scaled = mx_scaler_scale(s, loss);
      NOT_NULL(scaled);
      cr_assert_eq(mx_item(scaled), (double)(float)(r->loss[t] * mx_scaler_get_scale(s)));
      OK(mx_backward(scaled, NULL, false));
      if (t == 0) {
        OK(mx_scaler_unscale(s, opt));
        for (int i = 0; i < 4; i++) r->grad0[i] = mx_keep(mx_clone(mx_grad_of(m.p[i])));
      }
      mx_scaler_step_info info;
      OK(mx_scaler_step(s, opt, &info));
      r->skipped += !info.stepped;
      OK(mx_scaler_update(s));
    }
    mx_scope_end(it);
  }
  for (int i = 0; i < 4; i++) r->final[i] = mx_clone(m.p[i]);
  mx_optimizer_free(opt);
  mx_scaler_free(s);
}

static void expect_close_runs(const run *amp, const run *ref, mode md) {
  double tol = 4 * unit_of(md), worst = 0;
  for (int t = 0; t < STEPS; t++) {
    double rel = fabs(amp->loss[t] - ref->loss[t]) / ref->loss[t];
    worst = fmax(worst, rel);
    cr_expect_leq(rel, tol, "%s step %d: loss %.8g, fp32 %.8g (relative %.3g > %.3g)", mode_names[md], t, amp->loss[t],
                  ref->loss[t], rel, tol);
  }
  for (int i = 0; i < 4; i++) {
    double rel = rel_diff(amp->grad0[i], ref->grad0[i]);
    cr_expect_leq(rel, tol, "%s: first-step gradient of parameter %d: relative %.3g > %.3g", mode_names[md], i, rel,
                  tol);
  }
  cr_log_info("%s: worst relative loss difference over %d steps %.3g (%.2f u)", mode_names[md], STEPS, worst,
              worst / unit_of(md));
}

Test(amp_patterns, typical_loop_with_the_scaler_alone_is_exact) {
  run ref, scaled;
  typical_loop(FP32, &ref);
  typical_loop(SCALER_ONLY, &scaled);
  cr_assert_eq(scaled.skipped, 0);
  for (int t = 0; t < STEPS; t++)
    cr_assert_eq(scaled.loss[t], ref.loss[t], "step %d: %a vs %a", t, scaled.loss[t], ref.loss[t]);
  for (int i = 0; i < 4; i++) {
    expect_same_bits(scaled.grad0[i], ref.grad0[i], "a first-step gradient");
    expect_same_bits(scaled.final[i], ref.final[i], "a trained parameter");
  }
}

static void typical_loop_matches_fp32(mode md) {
  run ref, amp;
  typical_loop(FP32, &ref);
  typical_loop(md, &amp);
  cr_assert_eq(amp.skipped, 0, "no %s gradient overflows at 2^16 here", mode_names[md]);
  expect_close_runs(&amp, &ref, md);
  cr_assert_lt(amp.loss[STEPS - 1], 0.25 * amp.loss[0], "%s: the loss falls from %g to %g", mode_names[md],
               amp.loss[0], amp.loss[STEPS - 1]);
}

Test(amp_patterns, typical_loop_bf16_matches_fp32) { typical_loop_matches_fp32(AMP_BF16); }
Test(amp_patterns, typical_loop_f16_matches_fp32) { typical_loop_matches_fp32(AMP_F16); }

/* --- working with unscaled gradients: clipping ------------------------------------------------ */

/* Clips the gradients of m to a global norm of max_norm (torch's
 * clip_grad_norm_: coefficient max_norm / (norm + 1e-6), applied when below
 * 1). Returns the norm before clipping. */
static double clip_grad_norm(mlp *m, double max_norm) {
  double norm = mx_item(global_norm(4, m->p));
  double coef = max_norm / (norm + 1e-6);
  if (coef < 1)
    for (int i = 0; i < 4; i++) OK(mx_mul_scalar_(mx_grad_of(m->p[i]), coef));
  return norm;
}

typedef struct {
  double loss[STEPS], norm[STEPS];
} clip_run;

static const double MAX_NORM = 0.25;

static void clipping_loop(mode md, clip_run *r) {
  mx_tensor *x, *y;
  make_data(&x, &y);
  mlp m = mlp_init(7);
  mx_optimizer *opt = sgd_of(&m, 0.125, 0.0);
  mx_scaler *s = md == FP32 ? NULL : scaler_of(65536.0);
  int clipped = 0;
  for (int t = 0; t < STEPS; t++) {
    mx_scope *it = mx_scope_begin();
    OK(mx_optimizer_zero_grad(opt, true));
    mx_tensor *loss = loss_of(&m, x, y, md);
    r->loss[t] = mx_item(loss);
    OK(mx_backward(s ? mx_scaler_scale(s, loss) : loss, NULL, false));
    if (s) OK(mx_scaler_unscale(s, opt)); /* unscales in place, so clipping sees true gradients */
    r->norm[t] = clip_grad_norm(&m, MAX_NORM);
    if (r->norm[t] > MAX_NORM) {
      clipped++;
      /* max_norm * norm / (norm + 1e-6), up to float32 rounding of the sum of
       * squares and the scaling (a few ulps: 1e-6 relative) */
      double after = mx_item(global_norm(4, m.p)), expected = MAX_NORM * r->norm[t] / (r->norm[t] + 1e-6);
      cr_assert_leq(fabs(after - expected), 1e-6 * expected, "%s step %d: clipped norm %.9g, expected %.9g",
                    mode_names[md], t, after, expected);
    }
    /* the step takes the clipped gradients as they are: p - 0.125 g exactly
     * (the product is exact, the difference rounded once) */
    mx_tensor *before[4], *grads[4];
    for (int i = 0; i < 4; i++) before[i] = mx_clone(m.p[i]), grads[i] = mx_clone(mx_grad_of(m.p[i]));
    if (s) {
      mx_scaler_step_info info;
      OK(mx_scaler_step(s, opt, &info));
      cr_assert(info.stepped);
      OK(mx_scaler_update(s));
    } else {
      OK(mx_optimizer_step(opt));
    }
    for (int i = 0; i < 4; i++) {
      float *p0 = host(before[i]), *g = host(grads[i]), *p1 = host(m.p[i]);
      int64_t wrong = -1;
      for (int64_t k = 0; k < mx_numel(m.p[i]) && wrong < 0; k++)
        if (p1[k] != (float)((double)p0[k] - 0.125 * (double)g[k])) wrong = k;
      free(p0), free(g), free(p1);
      cr_assert_eq(wrong, -1, "%s step %d parameter %d [%lld]: not p - 0.125 g", mode_names[md], t, i,
                   (long long)wrong);
    }
    mx_scope_end(it);
  }
  cr_assert_gt(clipped, STEPS / 2, "%s: clipping was active on %d steps only", mode_names[md], clipped);
  mx_optimizer_free(opt);
  mx_scaler_free(s);
}

Test(amp_patterns, clipping_after_unscale_sees_unscaled_gradients) {
  clip_run ref, amp, scaled;
  clipping_loop(FP32, &ref);
  clipping_loop(SCALER_ONLY, &scaled);
  clipping_loop(AMP_BF16, &amp);
  double tol = 4 * U_BF16, worst = 0;
  for (int t = 0; t < STEPS; t++) {
    cr_assert_eq(scaled.norm[t], ref.norm[t], "step %d: the scaler alone changes no norm", t);
    cr_assert_eq(scaled.loss[t], ref.loss[t]);
    double rel = fabs(amp.norm[t] - ref.norm[t]) / ref.norm[t];
    CLOSE(worst, rel, tol, "step %d: norm %.8g, fp32 %.8g", t, amp.norm[t], ref.norm[t]);
    rel = fabs(amp.loss[t] - ref.loss[t]) / ref.loss[t];
    CLOSE(worst, rel, tol, "step %d: loss %.8g, fp32 %.8g", t, amp.loss[t], ref.loss[t]);
  }
  cr_assert_lt(amp.loss[STEPS - 1], 0.5 * amp.loss[0], "the loss falls from %g to %g", amp.loss[0],
               amp.loss[STEPS - 1]);
  cr_log_info("%s: worst relative difference from fp32 %.3g (%.2f u)", __func__, worst, worst / U_BF16);
}

/* --- working with scaled gradients: accumulation ------------------------------------------------ */

enum { ACCUMULATE = 4, MICRO = N / ACCUMULATE, EFFECTIVE = 8 };

typedef struct {
  double loss[EFFECTIVE];
  mx_tensor *grad0[4]; /* the accumulated, unscaled gradients of the first effective batch */
  mx_tensor *final[4];
} accumulate_run;

static void accumulation_loop(mode md, accumulate_run *r) {
  mx_tensor *x, *y;
  make_data(&x, &y);
  mlp m = mlp_init(7);
  mx_optimizer *opt = sgd_of(&m, 0.1, 0.9);
  mx_scaler *s = md == FP32 ? NULL : scaler_of(65536.0);
  double scale_of_batch = 0;
  OK(mx_optimizer_zero_grad(opt, true));
  for (int i = 0; i < EFFECTIVE * ACCUMULATE; i++) {
    mx_scope *it = mx_scope_begin();
    int e = i / ACCUMULATE, micro = i % ACCUMULATE;
    mx_tensor *xi = mx_narrow(x, 0, micro * MICRO, MICRO), *yi = mx_narrow(y, 0, micro * MICRO, MICRO);
    mx_tensor *loss = NULL;
    MX_AUTOCAST(MX_CPU, dtype_of(md), autocast_of(md), true) {
      loss = mx_div_scalar(mx_mse_loss(forward(&m, xi), yi, MX_REDUCTION_MEAN), ACCUMULATE);
    }
    NOT_NULL(loss);
    if (micro == 0) r->loss[e] = 0;
    r->loss[e] += mx_item(loss);
    if (s) {
      if (micro == 0) scale_of_batch = mx_scaler_get_scale(s);
      cr_assert_eq(mx_scaler_get_scale(s), scale_of_batch, "the scale stays constant during accumulation");
      OK(mx_backward(mx_scaler_scale(s, loss), NULL, false));
    } else {
      OK(mx_backward(loss, NULL, false));
    }
    if (micro == ACCUMULATE - 1) {
      if (s) OK(mx_scaler_unscale(s, opt)); /* once, after the whole effective batch */
      if (e == 0)
        for (int k = 0; k < 4; k++) r->grad0[k] = mx_keep(mx_clone(mx_grad_of(m.p[k])));
      if (s) {
        mx_scaler_step_info info;
        OK(mx_scaler_step(s, opt, &info));
        cr_assert(info.stepped);
        OK(mx_scaler_update(s));
      } else {
        OK(mx_optimizer_step(opt));
      }
      OK(mx_optimizer_zero_grad(opt, true));
    }
    mx_scope_end(it);
  }
  if (s) {
    mx_scaler_stats st = mx_scaler_stats_get(s);
    cr_assert_eq(st.updates, EFFECTIVE, "one update per effective batch");
    cr_assert_eq(st.skipped, 0);
  }
  for (int k = 0; k < 4; k++) r->final[k] = mx_clone(m.p[k]);
  mx_optimizer_free(opt);
  mx_scaler_free(s);
}

Test(amp_patterns, accumulation_unscales_once_per_effective_batch) {
  accumulate_run ref, scaled, amp;
  accumulation_loop(FP32, &ref);
  accumulation_loop(SCALER_ONLY, &scaled);
  accumulation_loop(AMP_BF16, &amp);
  for (int k = 0; k < 4; k++) {
    expect_same_bits(scaled.grad0[k], ref.grad0[k], "an accumulated gradient (scaler alone)");
    expect_same_bits(scaled.final[k], ref.final[k], "a trained parameter (scaler alone)");
  }
  double tol = 4 * U_BF16, worst = 0;
  for (int k = 0; k < 4; k++) {
    double rel = rel_diff(amp.grad0[k], ref.grad0[k]);
    CLOSE(worst, rel, tol, "accumulated gradient of parameter %d: relative %.3g", k, rel);
  }
  for (int e = 0; e < EFFECTIVE; e++) {
    cr_assert_eq(scaled.loss[e], ref.loss[e]);
    double rel = fabs(amp.loss[e] - ref.loss[e]) / ref.loss[e];
    CLOSE(worst, rel, tol, "effective batch %d: loss %.8g, fp32 %.8g", e, amp.loss[e], ref.loss[e]);
  }
  cr_assert_lt(amp.loss[EFFECTIVE - 1], 0.5 * amp.loss[0], "the loss falls from %g to %g", amp.loss[0],
               amp.loss[EFFECTIVE - 1]);
  cr_log_info("%s: worst relative difference from fp32 %.3g (%.2f u)", __func__, worst, worst / U_BF16);
}

/* --- working with scaled gradients: the gradient penalty ------------------------------------------ */

enum { PENALTY_STEPS = 10 };

typedef struct {
  double loss[PENALTY_STEPS], penalty[PENALTY_STEPS];
  mx_tensor *grad0[4]; /* d(loss + penalty)/dp at the first step, unscaled */
  mx_tensor *final[4];
} penalty_run;

static mx_tensor *l2_norm(int n, mx_tensor *const *grads) {
  mx_tensor *sum = NULL;
  for (int i = 0; i < n; i++) {
    mx_tensor *sq = mx_sum(mx_pow_scalar(grads[i], 2.0), MX_ALL_DIMS, false);
    sum = sum ? mx_add(sum, sq) : sq;
  }
  return mx_sqrt(sum);
}

static void penalty_loop(mode md, penalty_run *r) {
  mx_tensor *x, *y;
  make_data(&x, &y);
  mlp m = mlp_init(7);
  mx_optimizer *opt = sgd_of(&m, 0.05, 0.0);
  mx_scaler *s = md == FP32 ? NULL : scaler_of(65536.0);
  for (int t = 0; t < PENALTY_STEPS; t++) {
    mx_scope *it = mx_scope_begin();
    OK(mx_optimizer_zero_grad(opt, true));
    mx_tensor *loss = loss_of(&m, x, y, md);
    r->loss[t] = mx_item(loss);
    mx_tensor *grads[4], *norm = NULL, *total = NULL;
    if (!s) {
      OK(mx_grad(1, &loss, 4, m.p, NULL, true, true, false, grads));
      norm = l2_norm(4, grads);
      total = mx_add(loss, norm);
      OK(mx_backward(total, NULL, false));
    } else {
      /* the examples page: autograd.grad of the scaled loss, unscaled by
       * ordinary multiplication (these gradients belong to no optimizer) */
      mx_tensor *scaled = mx_scaler_scale(s, loss), *scaled_grads[4];
      OK(mx_grad(1, &scaled, 4, m.p, NULL, true, true, false, scaled_grads));
      double inv_scale = 1.0 / mx_scaler_get_scale(s);
      for (int i = 0; i < 4; i++) grads[i] = mx_mul_scalar(scaled_grads[i], inv_scale);
      MX_AUTOCAST(MX_CPU, dtype_of(md), autocast_of(md), true) {
        norm = l2_norm(4, grads);
        total = mx_add(loss, norm);
      }
      NOT_NULL(total);
      OK(mx_backward(mx_scaler_scale(s, total), NULL, false));
      OK(mx_scaler_unscale(s, opt));
    }
    NOT_NULL(norm);
    r->penalty[t] = mx_item(norm);
    for (int i = 0; i < 4; i++) {
      NOT_NULL(grads[i]);
      cr_assert(mx_requires_grad(grads[i]), "create_graph: the gradients are differentiable");
      cr_assert_eq(mx_dtype_of(grads[i]), MX_F32, "a float32 parameter's gradient is float32");
    }
    if (t == 0)
      for (int i = 0; i < 4; i++) r->grad0[i] = mx_keep(mx_clone(mx_grad_of(m.p[i])));
    if (s) {
      mx_scaler_step_info info;
      OK(mx_scaler_step(s, opt, &info));
      cr_assert(info.stepped);
      OK(mx_scaler_update(s));
    } else {
      OK(mx_optimizer_step(opt));
    }
    mx_scope_end(it);
  }
  for (int i = 0; i < 4; i++) r->final[i] = mx_clone(m.p[i]);
  mx_optimizer_free(opt);
  mx_scaler_free(s);
}

Test(amp_patterns, gradient_penalty_with_scaled_autograd_grad) {
  penalty_run ref, scaled, amp;
  penalty_loop(FP32, &ref);
  penalty_loop(SCALER_ONLY, &scaled);
  penalty_loop(AMP_BF16, &amp);
  for (int t = 0; t < PENALTY_STEPS; t++) {
    cr_assert_eq(scaled.penalty[t], ref.penalty[t], "step %d: %a vs %a", t, scaled.penalty[t], ref.penalty[t]);
    cr_assert_eq(scaled.loss[t], ref.loss[t]);
  }
  for (int i = 0; i < 4; i++) {
    expect_same_bits(scaled.grad0[i], ref.grad0[i], "a penalized gradient (scaler alone)");
    expect_same_bits(scaled.final[i], ref.final[i], "a trained parameter (scaler alone)");
  }
  /* the penalty is a gradient norm: its bf16 error is that of a backward
   * pass, the same few u */
  double tol = 4 * U_BF16, worst = 0;
  for (int t = 0; t < PENALTY_STEPS; t++) {
    CLOSE(worst, fabs(amp.penalty[t] - ref.penalty[t]) / ref.penalty[t], tol, "step %d: penalty %.8g, fp32 %.8g", t,
                  amp.penalty[t], ref.penalty[t]);
    CLOSE(worst, fabs(amp.loss[t] - ref.loss[t]) / ref.loss[t], tol, "step %d: loss %.8g, fp32 %.8g", t, amp.loss[t],
                  ref.loss[t]);
  }
  for (int i = 0; i < 4; i++) {
    double rel = rel_diff(amp.grad0[i], ref.grad0[i]);
    CLOSE(worst, rel, tol, "penalized gradient of parameter %d: relative %.3g", i, rel);
  }
  cr_assert_lt(amp.loss[PENALTY_STEPS - 1] + amp.penalty[PENALTY_STEPS - 1], amp.loss[0] + amp.penalty[0]);
  cr_log_info("%s: worst relative difference from fp32 %.3g (%.2f u)", __func__, worst, worst / U_BF16);
}

/* --- multiple models, losses and optimizers --------------------------------------------------------- */

enum { MULTI_STEPS = 20 };

typedef struct {
  double loss[MULTI_STEPS];
  mx_tensor *final[8];
} multi_run;

typedef struct {
  mlp m0, m1;
  mx_optimizer *opt0, *opt1;
  mx_tensor *x, *y;
} two_models;

static two_models two_models_new(void) {
  two_models tm;
  make_data(&tm.x, &tm.y);
  tm.m0 = mlp_init(7);
  tm.m1 = mlp_init(8);
  tm.opt0 = sgd_of(&tm.m0, 0.05, 0.9);
  mx_adam_opts o = mx_adam_defaults();
  o.lr = 0.01;
  tm.opt1 = mx_adam_new(4, tm.m1.p, &o);
  NOT_NULL(tm.opt1);
  return tm;
}

/* One iteration of the examples page's loop; with s NULL the fp32 one. */
static double multi_iteration(two_models *tm, mx_scaler *s, mode md, mx_scaler_step_info *i0,
                              mx_scaler_step_info *i1) {
  OK(mx_optimizer_zero_grad(tm->opt0, true));
  OK(mx_optimizer_zero_grad(tm->opt1, true));
  mx_tensor *loss0 = NULL, *loss1 = NULL;
  MX_AUTOCAST(MX_CPU, dtype_of(md), autocast_of(md), true) {
    mx_tensor *out0 = forward(&tm->m0, tm->x), *out1 = forward(&tm->m1, tm->x);
    loss0 = mx_mse_loss(mx_add(mx_mul_scalar(out0, 2), mx_mul_scalar(out1, 3)), tm->y, MX_REDUCTION_MEAN);
    loss1 = mx_mse_loss(mx_sub(mx_mul_scalar(out0, 3), mx_mul_scalar(out1, 5)), tm->y, MX_REDUCTION_MEAN);
  }
  NOT_NULL(loss0);
  NOT_NULL(loss1);
  double value = mx_item(loss0) + mx_item(loss1);
  if (!s) {
    OK(mx_backward(loss0, NULL, true)); /* both backward passes share the models' graphs */
    OK(mx_backward(loss1, NULL, false));
    OK(mx_optimizer_step(tm->opt0));
    OK(mx_optimizer_step(tm->opt1));
    return value;
  }
  OK(mx_backward(mx_scaler_scale(s, loss0), NULL, true));
  OK(mx_backward(mx_scaler_scale(s, loss1), NULL, false));
  OK(mx_scaler_unscale(s, tm->opt0)); /* explicit for one optimizer only */
  OK(mx_scaler_step(s, tm->opt0, i0));
  OK(mx_scaler_step(s, tm->opt1, i1));
  OK(mx_scaler_update(s)); /* once, after every optimizer stepped */
  return value;
}

static void multi_loop(mode md, multi_run *r) {
  two_models tm = two_models_new();
  mx_scaler *s = md == FP32 ? NULL : scaler_of(65536.0);
  for (int t = 0; t < MULTI_STEPS; t++) {
    mx_scope *it = mx_scope_begin();
    mx_scaler_step_info i0, i1;
    r->loss[t] = multi_iteration(&tm, s, md, &i0, &i1);
    if (s) cr_assert(i0.stepped && i1.stepped, "%s step %d skipped", mode_names[md], t);
    mx_scope_end(it);
  }
  for (int i = 0; i < 4; i++) r->final[i] = mx_clone(tm.m0.p[i]), r->final[4 + i] = mx_clone(tm.m1.p[i]);
  if (s) cr_assert_eq(mx_scaler_stats_get(s).updates, MULTI_STEPS);
  mx_optimizer_free(tm.opt0);
  mx_optimizer_free(tm.opt1);
  mx_scaler_free(s);
}

Test(amp_patterns, two_models_two_losses_two_optimizers_one_update) {
  multi_run ref, scaled, amp;
  multi_loop(FP32, &ref);
  multi_loop(SCALER_ONLY, &scaled);
  multi_loop(AMP_BF16, &amp);
  for (int t = 0; t < MULTI_STEPS; t++) cr_assert_eq(scaled.loss[t], ref.loss[t], "step %d", t);
  for (int i = 0; i < 8; i++) expect_same_bits(scaled.final[i], ref.final[i], "a trained parameter (scaler alone)");
  double tol = 4 * U_BF16, worst = 0;
  for (int t = 0; t < MULTI_STEPS; t++)
    CLOSE(worst, fabs(amp.loss[t] - ref.loss[t]) / ref.loss[t], tol, "step %d: loss %.8g, fp32 %.8g", t, amp.loss[t],
                  ref.loss[t]);
  cr_assert_lt(amp.loss[MULTI_STEPS - 1], 0.5 * amp.loss[0], "the loss falls from %g to %g", amp.loss[0],
               amp.loss[MULTI_STEPS - 1]);
  cr_log_info("%s: worst relative difference from fp32 %.3g (%.2f u)", __func__, worst, worst / U_BF16);
}

Test(amp_patterns, an_overflow_in_the_shared_graph_skips_both_optimizers) {
  two_models tm = two_models_new();
  /* 2^16 already overflows the float16 weight gradients of this pair at the
   * first step; 2^10 does not */
  mx_scaler *s = scaler_of(1024.0);
  mx_scaler_step_info i0, i1;
  multi_iteration(&tm, s, AMP_F16, &i0, &i1);
  cr_assert(i0.stepped && i1.stepped);
  /* 2^28 times d loss / d output overflows the float16 gradient that flows
   * back into both models */
  OK(mx_scaler_update_to(s, 0x1p28));
  mx_tensor *before[8];
  for (int i = 0; i < 4; i++) before[i] = mx_clone(tm.m0.p[i]), before[4 + i] = mx_clone(tm.m1.p[i]);
  mx_tensor *m1_step = mx_optimizer_state(tm.opt1, 0, "step"), *m1_avg = mx_clone(mx_optimizer_state(tm.opt1, 0, "exp_avg"));
  mx_tensor *m0_buf = mx_clone(mx_optimizer_state(tm.opt0, 0, "momentum_buffer"));
  multi_iteration(&tm, s, AMP_F16, &i0, &i1);
  cr_assert_not(i0.stepped);
  cr_assert_not(i1.stepped);
  cr_assert_gt(i0.infs + i0.nans, 0);
  cr_assert_gt(i1.infs + i1.nans, 0);
  for (int i = 0; i < 4; i++) {
    expect_same_bits(tm.m0.p[i], before[i], "model 0 after the skipped step");
    expect_same_bits(tm.m1.p[i], before[4 + i], "model 1 after the skipped step");
  }
  cr_assert_eq(mx_item(m1_step), 1.0, "Adam's step count stays at 1");
  expect_same_bits(mx_optimizer_state(tm.opt1, 0, "exp_avg"), m1_avg, "Adam's exp_avg");
  expect_same_bits(mx_optimizer_state(tm.opt0, 0, "momentum_buffer"), m0_buf, "SGD's momentum buffer");
  cr_assert_eq(mx_scaler_get_scale(s), 0x1p27, "one backoff for the two optimizers");
  /* training goes on: the scale backs off until the gradients fit */
  int skipped = 1;
  double first = 0, last = 0;
  for (int t = 0; t < 30; t++) {
    mx_scope *it = mx_scope_begin();
    double scale = mx_scaler_get_scale(s);
    double loss = multi_iteration(&tm, s, AMP_F16, &i0, &i1);
    /* near the threshold one model's float16 weight gradient may overflow
     * alone: that optimizer skips, the other steps (each decides alone, as
     * the examples page says), and the scale backs off once */
    if (!i0.stepped || !i1.stepped) {
      skipped++;
      cr_assert_eq(mx_scaler_get_scale(s), scale / 2, "step %d", t);
    } else {
      cr_assert_eq(mx_scaler_get_scale(s), scale, "step %d", t);
      if (first == 0) first = loss;
      last = loss;
    }
    mx_scope_end(it);
  }
  mx_scaler_stats st = mx_scaler_stats_get(s);
  cr_log_info("%s: %d skipped iterations, scale %g", __func__, skipped, mx_scaler_get_scale(s));
  cr_assert_eq(st.skipped, skipped);
  cr_assert_eq(st.updates, 32);
  cr_assert_gt(first, 0, "training resumed");
  cr_assert_lt(last, first, "the loss falls once steps are taken: %g -> %g", first, last);
  cr_assert_lt(mx_scaler_get_scale(s), 0x1p27);
  mx_optimizer_free(tm.opt0);
  mx_optimizer_free(tm.opt1);
  mx_scaler_free(s);
}

/* --- a forced overflow ------------------------------------------------------------------------------ */

/* f16 autocast from a scale of 2^40: the first steps overflow and are
 * skipped, the scale halves each time, and from the first step taken the
 * run is the one that had started at that scale, bit for bit. */
Test(amp_patterns, forced_f16_overflow_skips_halves_and_recovers) {
  mx_tensor *x, *y;
  make_data(&x, &y);
  mlp m = mlp_init(7), init = mlp_init(7);
  mx_optimizer *opt = sgd_of(&m, 0.1, 0.9);
  mx_scaler *s = scaler_of(0x1p40);
  int skipped = 0;
  double first_loss = 0;
  for (;;) {
    mx_scope *it = mx_scope_begin();
    OK(mx_optimizer_zero_grad(opt, true));
    mx_tensor *loss = loss_of(&m, x, y, AMP_F16);
    if (skipped == 0) first_loss = mx_item(loss);
    OK(mx_backward(mx_scaler_scale(s, loss), NULL, false));
    mx_scaler_step_info info;
    OK(mx_scaler_step(s, opt, &info));
    OK(mx_scaler_update(s));
    mx_scope_end(it);
    if (info.stepped) break;
    cr_assert_gt(info.infs + info.nans, 0);
    skipped++;
    cr_assert_eq(mx_scaler_get_scale(s), ldexp(1.0, 40 - skipped));
    for (int i = 0; i < 4; i++) expect_same_bits(m.p[i], init.p[i], "a parameter after a skipped step");
    cr_assert_lt(skipped, 40);
  }
  /* 2^40 * 2 * |out - y| / 256 exceeds 65504 for a while: several skips */
  cr_assert_geq(skipped, 10, "only %d skips", skipped);
  cr_log_info("%s: %d skipped steps, recovered at 2^%d", __func__, skipped, 40 - skipped);
  double recovered = ldexp(1.0, 40 - skipped);

  /* the reference: the same model started at the recovered scale */
  mlp m2 = mlp_init(7);
  mx_optimizer *opt2 = sgd_of(&m2, 0.1, 0.9);
  mx_scaler *s2 = scaler_of(recovered);
  for (int t = 0; t < 20; t++) {
    mx_scope *it = mx_scope_begin();
    mx_scaler_step_info info;
    if (t > 0) { /* the first step of the forced run is already taken */
      OK(mx_optimizer_zero_grad(opt, true));
      OK(mx_backward(mx_scaler_scale(s, loss_of(&m, x, y, AMP_F16)), NULL, false));
      OK(mx_scaler_step(s, opt, &info));
      cr_assert(info.stepped);
      OK(mx_scaler_update(s));
    }
    OK(mx_optimizer_zero_grad(opt2, true));
    OK(mx_backward(mx_scaler_scale(s2, loss_of(&m2, x, y, AMP_F16)), NULL, false));
    OK(mx_scaler_step(s2, opt2, &info));
    cr_assert(info.stepped);
    OK(mx_scaler_update(s2));
    mx_scope_end(it);
  }
  for (int i = 0; i < 4; i++) expect_same_bits(m.p[i], m2.p[i], "a parameter after recovery");
  cr_assert_eq(mx_scaler_get_scale(s), mx_scaler_get_scale(s2));
  double final_loss = mx_item(loss_of(&m, x, y, AMP_F16));
  cr_assert_lt(final_loss, 0.5 * first_loss, "the loss falls from %g to %g", first_loss, final_loss);
  mx_scaler_stats st = mx_scaler_stats_get(s);
  cr_assert_eq(st.skipped, skipped);
  cr_assert_eq(st.updates, skipped + 20);
  mx_optimizer_free(opt);
  mx_optimizer_free(opt2);
  mx_scaler_free(s);
  mx_scaler_free(s2);
}
