/* A user-written optimizer (examples/optimizers/lion.c, on the public
 * interface only): its update against values worked out by hand, a
 * GradScaler step skipped on overflow, a checkpoint that resumes bit for
 * bit, schedules and clipping. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "lion.h"
#include "tests/common/tmp_files.h"

#define OK(call) cr_assert_eq((call), MX_OK, "%s", mx_last_error())

TestSuite(custom_optimizer, .init = make_tmp_dir, .fini = remove_tmp_dir);

/* A leaf of the given values that requires grad, outside any scope. */
static mx_tensor *leaf(const double *values, int64_t n, mx_dtype dtype) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_keep(mx_to_dtype(mx_from_data(values, MX_SHAPE(n), MX_F64, MX_CPU), dtype));
  mx_scope_end(s);
  cr_assert_not_null(t, "%s", mx_last_error());
  OK(mx_set_requires_grad(t, true));
  return t;
}

/* loss = sum(p * g) * scale: its gradient is g * scale. */
static mx_tensor *linear_loss(mx_tensor *p, const double *g, double scale) {
  mx_tensor *gt = mx_to_dtype(mx_from_data(g, mx_shape_get(p), MX_F64, MX_CPU), mx_dtype_of(p));
  return mx_mul_scalar(mx_sum(mx_mul(p, gt), MX_ALL_DIMS, false), scale);
}

static void set_grad(mx_tensor *p, const double *g, double scale) {
  mx_scope *s = mx_scope_begin();
  mx_zero_grad(p);
  OK(mx_backward(linear_loss(p, g, scale), NULL, false));
  mx_scope_end(s);
}

static void expect_values(const mx_tensor *t, const double *want, int64_t n, const char *what) {
  for (int64_t k = 0; k < n; k++) {
    double got = mx_at(t, MX_SHAPE(k));
    cr_expect_eq(got, want[k], "%s[%lld]: %.17g, want %.17g", what, (long long)k, got, want[k]);
  }
}

static double state_at(const mx_optimizer *opt, int i, int64_t k) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *m = mx_optimizer_state(opt, i, "exp_avg");
  cr_assert_not_null(m, "%s", mx_last_error());
  double v = mx_at(m, MX_SHAPE(k));
  mx_scope_end(s);
  return v;
}

/* The bytes of the parameters and their exp_avg, to compare two moments. */
static size_t snapshot(const mx_optimizer *opt, unsigned char *out, size_t room) {
  size_t n = 0;
  for (int i = 0; i < mx_optimizer_num_params(opt); i++) {
    mx_scope *s = mx_scope_begin();
    const mx_tensor *parts[2] = {mx_contiguous(mx_optimizer_param(opt, i)), mx_optimizer_state(opt, i, "exp_avg")};
    for (int k = 0; k < 2; k++) {
      size_t bytes = (size_t)mx_numel(parts[k]) * mx_dtype_size(mx_dtype_of(parts[k]));
      cr_assert_leq(n + bytes, room);
      OK(mx_to_host(parts[k], out + n, bytes));
      n += bytes;
    }
    mx_scope_end(s);
  }
  return n;
}

/* --- the update by hand ------------------------------------------------------------------------ */

/* lr 0.25, betas (0.5, 0.75), weight_decay 0.5: every value is a short
 * binary fraction, exact in every floating dtype.
 *   step 1, g = [0.5, -1, 0, 2], m = 0:
 *     c = 0.5 g = [0.25, -0.5, 0, 1], sign [1, -1, 0, 1]
 *     p = 0.875 p - 0.25 sign = [0.625, -1.5, 0.4375, 3.25]
 *     m = 0.25 g = [0.125, -0.25, 0, 0.5]
 *   step 2, g = [-1, -1, 1, 0.25]:
 *     c = 0.5 m + 0.5 g = [-0.4375, -0.625, 0.5, 0.375], sign [-1, -1, 1, 1]
 *     p = [0.796875, -1.0625, 0.1328125, 2.59375]
 *     m = 0.75 m + 0.25 g = [-0.15625, -0.4375, 0.25, 0.4375] */
static const double p0[4] = {1, -2, 0.5, 4}, g1[4] = {0.5, -1, 0, 2}, g2[4] = {-1, -1, 1, 0.25};
static const double p1[4] = {0.625, -1.5, 0.4375, 3.25}, m1[4] = {0.125, -0.25, 0, 0.5};
static const double p2[4] = {0.796875, -1.0625, 0.1328125, 2.59375}, m2[4] = {-0.15625, -0.4375, 0.25, 0.4375};
static const lion_opts hand = {.lr = 0.25, .beta1 = 0.5, .beta2 = 0.75, .weight_decay = 0.5};

static void expect_state(const mx_optimizer *opt, const double *want) {
  for (int64_t k = 0; k < 4; k++) cr_expect_eq(state_at(opt, 0, k), want[k], "exp_avg[%lld]", (long long)k);
}

Test(custom_optimizer, lion_update_by_hand_in_every_dtype) {
  const mx_dtype dtypes[] = {MX_F32, MX_F64, MX_BF16, MX_F16};
  for (int d = 0; d < 4; d++) {
    mx_tensor *p = leaf(p0, 4, dtypes[d]);
    mx_optimizer *opt = lion_new(1, &p, &hand);
    cr_assert_not_null(opt, "%s", mx_last_error());
    cr_expect_str_eq(mx_optimizer_name(opt), "Lion");
    cr_expect_eq(mx_optimizer_num_states(opt, 0), 1);
    cr_expect_str_eq(mx_optimizer_state_name(opt, 0, 0), "exp_avg");
    mx_scope *s = mx_scope_begin();
    cr_expect_eq(mx_dtype_of(mx_optimizer_state(opt, 0, "exp_avg")), dtypes[d] == MX_F64 ? MX_F64 : MX_F32);
    mx_scope_end(s);
    set_grad(p, g1, 1);
    OK(mx_optimizer_step(opt));
    expect_values(p, p1, 4, mx_dtype_name(dtypes[d]));
    expect_state(opt, m1);
    set_grad(p, g2, 1);
    OK(mx_optimizer_step(opt));
    expect_values(p, p2, 4, mx_dtype_name(dtypes[d]));
    expect_state(opt, m2);
    cr_expect_eq(mx_dtype_of(p), dtypes[d]);
    mx_optimizer_free(opt);
    mx_release(p);
  }
}

/* Its hyper-parameters read by name, and its lr and momentum (beta1) as
 * the schedules see them. */
Test(custom_optimizer, lion_hyper_parameters) {
  mx_tensor *p = leaf(p0, 4, MX_F32), *q = leaf(g1, 4, MX_F32);
  mx_optimizer *opt = lion_new(1, &p, &hand);
  lion_opts other = {.lr = 0.5, .beta1 = 0.25, .beta2 = 0.5};
  OK(lion_add_group(opt, 1, &q, &other));
  cr_expect_eq(mx_optimizer_num_groups(opt), 2);
  cr_expect_eq(mx_optimizer_group_first(opt, 1), 1);
  cr_expect_eq(mx_optimizer_group_size(opt, 1), 1);
  cr_expect_eq(mx_optimizer_get_hparam(opt, 0, "beta2"), 0.75);
  cr_expect_eq(mx_optimizer_get_hparam(opt, 1, "weight_decay"), 0);
  cr_expect_eq(mx_optimizer_lr(opt, 1), 0.5);
  cr_expect_eq(mx_optimizer_momentum(opt, 0), 0.5, "beta1 is its momentum");
  OK(mx_optimizer_set_momentum(opt, 1, 0.125));
  cr_expect_eq(mx_optimizer_hparams(opt, 1)[1], 0.125);
  OK(mx_optimizer_set_hparam(opt, 0, "weight_decay", 0.0625));
  cr_expect_eq(mx_optimizer_get_hparam(opt, 0, "weight_decay"), 0.0625);
  mx_optimizer_free(opt);
  mx_release(p);
  mx_release(q);
}

/* grad_scale divides the gradients as the built-ins' fused unscale does:
 * gradients 1024 times too large give the same step. */
Test(custom_optimizer, lion_grad_scale_unscales) {
  mx_tensor *p = leaf(p0, 4, MX_F32);
  mx_optimizer *opt = lion_new(1, &p, &hand);
  mx_tensor *clean = mx_scalar(0, MX_F32, MX_CPU), *scale = mx_scalar(1024, MX_F32, MX_CPU);
  set_grad(p, g1, 1024);
  OK(mx_optimizer_step_amp(opt, clean, scale));
  expect_values(p, p1, 4, "p");
  expect_state(opt, m1);
  mx_release(clean);
  mx_release(scale);
  mx_optimizer_free(opt);
  mx_release(p);
}

/* --- under the GradScaler ------------------------------------------------------------------------ */

/* An overflowing step: mx_scaler_step hands Lion the found_inf flag, Lion
 * keeps every bit of its parameter and state (decided on the device), and
 * the update halves the scale. The next, clean, step is the first step by
 * hand. */
Test(custom_optimizer, lion_under_the_grad_scaler_skips_an_overflow) {
  mx_tensor *p = leaf(p0, 4, MX_F32);
  mx_optimizer *opt = lion_new(1, &p, &hand);
  mx_scaler_opts so = mx_scaler_defaults();
  so.init_scale = 1024;
  mx_scaler *scaler = mx_scaler_new(&so);
  unsigned char before[64], after[64];
  size_t n = snapshot(opt, before, sizeof before);

  const double overflowing[4] = {0.5, INFINITY, 0, 2};
  mx_scope *s = mx_scope_begin();
  OK(mx_backward(mx_scaler_scale(scaler, linear_loss(p, overflowing, 1)), NULL, false));
  mx_scaler_step_info info;
  OK(mx_scaler_step(scaler, opt, &info));
  cr_expect(!info.stepped, "the step was not skipped");
  cr_expect_eq(info.infs, 1);
  cr_assert_eq(snapshot(opt, after, sizeof after), n);
  cr_expect(!memcmp(before, after, n), "a skipped step changed the parameter or its exp_avg");
  OK(mx_scaler_update(scaler));
  cr_expect_eq(mx_scaler_get_scale(scaler), 512, "the overflow halves the scale");
  mx_scope_end(s);

  s = mx_scope_begin();
  mx_zero_grad(p);
  OK(mx_backward(mx_scaler_scale(scaler, linear_loss(p, g1, 1)), NULL, false));
  OK(mx_scaler_step(scaler, opt, &info));
  cr_expect(info.stepped);
  OK(mx_scaler_update(scaler));
  mx_scope_end(s);
  expect_values(p, p1, 4, "p");
  expect_state(opt, m1);
  cr_expect_eq(mx_scaler_get_scale(scaler), 512);

  /* no gradient, no inf check: PyTorch's error, and the scale stays */
  mx_zero_grad(p);
  mx_clear_error();
  cr_expect_neq(mx_scaler_step(scaler, opt, NULL), MX_OK);
  cr_expect_str_eq(mx_last_error(), "mx_scaler_step: No inf checks were recorded for this optimizer. (none of its 1 "
                                    "parameters has a gradient: was backward run on the scaled loss?)");
  cr_expect_eq(mx_scaler_get_scale(scaler), 512);
  mx_scaler_free(scaler);
  mx_optimizer_free(opt);
  mx_release(p);
}

/* --- checkpoints -------------------------------------------------------------------------------- */

typedef struct {
  mx_module *model;
  mx_optimizer *opt;
  mx_scaler *scaler;
  mx_schedule *schedule;
  mx_generator *gen;
} lion_run;

/* A linear layer under Lion (its bias in a group of its own), a scaler that
 * grows every 2 clean steps, StepLR; init_seed sets the weights. */
static lion_run run_new(uint64_t init_seed) {
  lion_run r = {.gen = mx_generator_new(11)};
  mx_generator *init = mx_generator_new(init_seed);
  r.model = mx_linear_new(4, 3, true, init);
  mx_generator_free(init);
  mx_tensor *w = mx_module_get_parameter(r.model, "weight"), *b = mx_module_get_parameter(r.model, "bias");
  lion_opts o = lion_defaults();
  o.lr = 0.01, o.weight_decay = 0.1;
  r.opt = lion_new(1, &w, &o);
  cr_assert_not_null(r.opt, "%s", mx_last_error());
  o.weight_decay = 0, o.beta2 = 0.9;
  OK(lion_add_group(r.opt, 1, &b, &o));
  mx_scaler_opts so = mx_scaler_defaults();
  so.init_scale = 256, so.growth_interval = 2;
  r.scaler = mx_scaler_new(&so);
  r.schedule = mx_step_lr_new(r.opt, 2, 0.5);
  cr_assert(r.scaler && r.schedule, "%s", mx_last_error());
  return r;
}

static void run_free(lion_run *r) {
  mx_schedule_free(r->schedule);
  mx_scaler_free(r->scaler);
  mx_optimizer_free(r->opt);
  mx_module_free(r->model);
  mx_generator_free(r->gen);
}

/* Steps [from, to) under the scaler; at step 3 an inf in the gradient. */
static void train(lion_run *r, int from, int to) {
  for (int step = from; step < to; step++) {
    mx_scope *s = mx_scope_begin();
    OK(mx_optimizer_zero_grad(r->opt, true));
    mx_tensor *x = mx_randn(MX_SHAPE(5, 4), MX_F32, MX_CPU, r->gen), *y = mx_randn(MX_SHAPE(5, 3), MX_F32, MX_CPU, r->gen);
    mx_tensor *loss = mx_mse_loss(mx_module_forward(r->model, x), y, MX_REDUCTION_MEAN);
    OK(mx_backward(mx_scaler_scale(r->scaler, loss), NULL, false));
    if (step == 3) OK(mx_fill_(mx_grad_of(mx_module_get_parameter(r->model, "bias")), INFINITY));
    OK(mx_scaler_step(r->scaler, r->opt, NULL));
    OK(mx_scaler_update(r->scaler));
    OK(mx_schedule_step(r->schedule));
    mx_scope_end(s);
  }
}

static mx_checkpoint checkpoint_of(lion_run *r) {
  return (mx_checkpoint){.model = r->model, .optimizer = r->opt, .scaler = r->scaler, .generator = r->gen,
                         .schedule = r->schedule};
}

/* Saved after 4 steps (one of them skipped) and resumed in a run made from
 * other weights, 4 more steps give every bit of the uninterrupted run:
 * parameters, exp_avg, hyper-parameters, scale. */
Test(custom_optimizer, lion_checkpoint_resumes_bit_for_bit) {
  const char *path = tmp_path("lion.ckpt");
  lion_run a = run_new(1), b = run_new(2);
  train(&a, 0, 4);
  mx_checkpoint ck = checkpoint_of(&a);
  ck.step = 4;
  OK(mx_checkpoint_save(path, &ck));
  train(&a, 4, 8);

  mx_checkpoint resumed = checkpoint_of(&b);
  OK(mx_checkpoint_load(path, &resumed));
  cr_expect_eq(resumed.step, 4);
  train(&b, 4, 8);
  unsigned char sa[256], sb[256];
  size_t na = snapshot(a.opt, sa, sizeof sa), nb = snapshot(b.opt, sb, sizeof sb);
  cr_assert_eq(na, nb);
  cr_expect(!memcmp(sa, sb, na), "the resumed run differs");
  for (int g = 0; g < 2; g++)
    for (int k = 0; k < mx_optimizer_type_of(a.opt)->n_hparams; k++)
      cr_expect_eq(mx_optimizer_hparams(a.opt, g)[k], mx_optimizer_hparams(b.opt, g)[k], "group %d, %s", g,
                   mx_optimizer_type_of(a.opt)->hparams[k].name);
  cr_expect_eq(mx_scaler_get_scale(a.scaler), mx_scaler_get_scale(b.scaler));

  /* what the file holds of Lion: its name, its hyper-parameters by name, exp_avg per parameter */
  mx_safetensors *f = mx_safetensors_load(path);
  cr_assert_not_null(f, "%s", mx_last_error());
  cr_expect_str_eq(mx_safetensors_metadata(f, "optimizer"), "Lion");
  cr_expect_str_eq(mx_safetensors_metadata(f, "optimizer.group.1.beta2"), "0.90000000000000002");
  cr_expect_not_null(mx_safetensors_get(f, "optimizer.1.exp_avg"));
  mx_safetensors_free(f);

  /* only into a Lion */
  mx_tensor *w = mx_module_get_parameter(b.model, "weight"), *bias = mx_module_get_parameter(b.model, "bias");
  mx_optimizer *adamw = mx_adamw_new(1, &w, NULL);
  OK(mx_adam_add_group(adamw, 1, &bias, NULL));
  mx_clear_error();
  cr_expect_neq(mx_checkpoint_load(path, &(mx_checkpoint){.model = b.model, .optimizer = adamw}), MX_OK);
  cr_expect_str_eq(mx_last_error(), fmt("mx_checkpoint_load: %s: the file's optimizer is Lion but the one given is "
                                        "AdamW", path));
  mx_optimizer_free(adamw);
  run_free(&a);
  run_free(&b);
}

/* --- schedules and clipping ---------------------------------------------------------------------- */

Test(custom_optimizer, lion_with_schedules_and_clipping) {
  mx_tensor *p = leaf(p0, 4, MX_F32);
  mx_optimizer *opt = lion_new(1, &p, &hand);
  mx_schedule *step_lr = mx_step_lr_new(opt, 1, 0.5);
  cr_assert_not_null(step_lr, "%s", mx_last_error());
  cr_expect_eq(mx_optimizer_initial_lr(opt, 0), 0.25);
  OK(mx_schedule_step(step_lr));
  cr_expect_eq(mx_optimizer_lr(opt, 0), 0.125);
  mx_schedule_free(step_lr);

  /* OneCycleLR starts at max_lr / div_factor with beta1 at max_momentum */
  mx_schedule *cycle = mx_one_cycle_lr_new(opt, &(mx_one_cycle_opts){.max_lr = 1, .total_steps = 10, .pct_start = 0.3,
                                                                     .cycle_momentum = true, .base_momentum = 0.5,
                                                                     .max_momentum = 0.75, .div_factor = 4,
                                                                     .final_div_factor = 10});
  cr_assert_not_null(cycle, "%s", mx_last_error());
  cr_expect_eq(mx_optimizer_lr(opt, 0), 0.25);
  cr_expect_eq(mx_optimizer_get_hparam(opt, 0, "beta1"), 0.75);
  mx_schedule_free(cycle);

  /* clipping works on its gradients: |[0.5, -1, 0, 2]| = 2.29..., scaled to norm 1 */
  set_grad(p, g1, 1);
  double norm;
  OK(mx_clip_grad_norm_optimizer(opt, 1.0, 2.0, false, &norm));
  cr_expect_float_eq(norm, sqrt(5.25), 1e-6);
  cr_expect_float_eq(mx_at(mx_grad_of(p), MX_SHAPE(3)), 2 / sqrt(5.25), 1e-6);
  mx_optimizer_free(opt);
  mx_release(p);
}
