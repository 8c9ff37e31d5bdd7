/* The optimizer API: groups, state, missing gradients, zero_grad, low-precision and strided parameters, errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "optim_cases.h"

/* A leaf of the given values that requires grad, outside any scope. */
static mx_tensor *leaf(const float *values, mx_shape shape, mx_dtype dtype) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_keep(mx_to_dtype(mx_from_data(values, shape, MX_F32, MX_CPU), dtype));
  mx_scope_end(s);
  cr_assert_not_null(t, "%s", mx_last_error());
  cr_assert_eq(mx_set_requires_grad(t, true), MX_OK, "%s", mx_last_error());
  return t;
}

/* The gradient of sum(p * g) is g. */
static void set_grad(mx_tensor *p, const float *g) {
  mx_scope *s = mx_scope_begin();
  mx_zero_grad(p);
  mx_tensor *gt = mx_to_dtype(mx_from_data(g, mx_shape_get(p), MX_F32, MX_CPU), mx_dtype_of(p));
  cr_assert_eq(mx_backward(mx_sum(mx_mul(p, gt), MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
  mx_scope_end(s);
}

static double state_at(const mx_optimizer *opt, int i, const char *name, mx_shape index) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_optimizer_state(opt, i, name);
  cr_assert_not_null(t, "%s", mx_last_error());
  double v = mx_at(t, index);
  mx_scope_end(s);
  return v;
}

/* --- properties and state -------------------------------------------------------------------------------- */

Test(optim_api, names_groups_params_and_lr) {
  mx_tensor *params[OC_PARAMS];
  oc_params(MX_F32, params);
  mx_optimizer *opt = mx_adamw_new(1, params, NULL);
  cr_assert_not_null(opt, "%s", mx_last_error());
  cr_expect_str_eq(mx_optimizer_name(opt), "AdamW");
  mx_adam_opts o = mx_adam_defaults();
  o.lr = 0.5;
  cr_assert_eq(mx_adam_add_group(opt, 1, params + 1, &o), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_optimizer_num_groups(opt), 2);
  cr_expect_eq(mx_optimizer_num_params(opt), 2);
  cr_expect_eq(mx_optimizer_param(opt, 0), params[0]);
  cr_expect_eq(mx_optimizer_param(opt, 1), params[1]);
  cr_expect_eq(mx_optimizer_lr(opt, 0), 1e-3);
  cr_expect_eq(mx_optimizer_lr(opt, 1), 0.5);
  cr_assert_eq(mx_optimizer_set_lr(opt, 0, 0.25), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_optimizer_lr(opt, 0), 0.25);
  mx_optimizer_free(opt);

  mx_sgd_opts s = mx_sgd_defaults();
  cr_expect_eq(s.lr, 1e-3);
  cr_expect(s.momentum == 0 && s.dampening == 0 && s.weight_decay == 0 && !s.nesterov && !s.maximize);
  mx_adam_opts a = mx_adam_defaults(), w = mx_adamw_defaults();
  cr_expect(a.lr == 1e-3 && a.beta1 == 0.9 && a.beta2 == 0.999 && a.eps == 1e-8 && a.weight_decay == 0);
  cr_expect(!a.amsgrad && !a.maximize);
  cr_expect(w.weight_decay == 1e-2 && w.lr == 1e-3);
  opt = mx_sgd_new(2, params, NULL);
  cr_expect_str_eq(mx_optimizer_name(opt), "SGD");
  mx_optimizer_free(opt);
  opt = mx_adam_new(2, params, NULL);
  cr_expect_str_eq(mx_optimizer_name(opt), "Adam");
  mx_optimizer_free(opt);
  for (int k = 0; k < OC_PARAMS; k++) mx_release(params[k]);
}

/* The optimizer owns its parameters and state: releasing the caller's
 * handles, or ending the scope they were made in, breaks nothing. */
Test(optim_api, owns_params_and_state_across_scopes) {
  mx_scope *s = mx_scope_begin();
  float v[3] = {1, 2, 3}, g[3] = {1, 1, 1};
  mx_tensor *p = mx_from_data(v, MX_SHAPE(3), MX_F32, MX_CPU);
  mx_set_requires_grad(p, true);
  mx_sgd_opts o = {.lr = 0.5, .momentum = 0.5};
  mx_optimizer *opt = mx_sgd_new(1, &p, &o);
  cr_assert_not_null(opt, "%s", mx_last_error());
  mx_scope_end(s);
  mx_tensor *q = mx_optimizer_param(opt, 0);
  for (int step = 0; step < 2; step++) {
    set_grad(q, g);
    cr_assert_eq(mx_optimizer_step(opt), MX_OK, "%s", mx_last_error());
  }
  /* buf 1 then 1.5; p = 1 - 0.5 - 0.75 */
  cr_expect_eq(mx_at(q, MX_SHAPE(0)), -0.25);
  cr_expect_eq(state_at(opt, 0, "momentum_buffer", MX_SHAPE(2)), 1.5);
  cr_expect_eq(state_at(opt, 0, "step", MX_SCALAR), 2);
  mx_optimizer_free(opt);
}

Test(optim_api, state_views_have_the_params_shape_and_state_dtype) {
  mx_tensor *params[OC_PARAMS];
  oc_params(MX_F64, params);
  mx_adam_opts o = mx_adam_defaults();
  o.amsgrad = true;
  mx_optimizer *opt = mx_adam_new(2, params, &o);
  cr_assert_not_null(opt, "%s", mx_last_error());
  oc_set_grads(params, 0, 1.0, NULL);
  cr_assert_eq(mx_optimizer_step(opt), MX_OK, "%s", mx_last_error());
  mx_scope *s = mx_scope_begin();
  const char *names[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  for (int k = 0; k < 3; k++) {
    mx_tensor *t = mx_optimizer_state(opt, 0, names[k]);
    cr_assert_not_null(t, "%s", mx_last_error());
    cr_expect_eq(mx_dtype_of(t), MX_F64);
    cr_expect_eq(mx_ndim(t), 2);
    cr_expect_eq(mx_size(t, 0), 3);
    cr_expect_eq(mx_size(t, 1), 4);
  }
  /* after one step: exp_avg = 0.1 g, exp_avg_sq = 0.001 g^2 = max_exp_avg_sq */
  mx_tensor *g = mx_grad_of(params[1]);
  double g3 = mx_at(g, MX_SHAPE(3));
  cr_expect_eq(mx_at(mx_optimizer_state(opt, 1, "exp_avg"), MX_SHAPE(3)), (1 - 0.9) * g3);
  cr_expect_eq(mx_at(mx_optimizer_state(opt, 1, "exp_avg_sq"), MX_SHAPE(3)), (1 - 0.999) * g3 * g3);
  cr_expect_eq(mx_at(mx_optimizer_state(opt, 1, "max_exp_avg_sq"), MX_SHAPE(3)), (1 - 0.999) * g3 * g3);
  mx_tensor *step = mx_optimizer_state(opt, 1, "step");
  cr_expect_eq(mx_dtype_of(step), MX_I64);
  cr_expect_eq(mx_ndim(step), 0);
  cr_expect_eq(mx_item(step), 1);
  mx_clear_error();
  cr_expect_null(mx_optimizer_state(opt, 0, "momentum_buffer"));
  cr_expect_str_eq(mx_last_error(), "mx_optimizer_state: this Adam keeps no state 'momentum_buffer' for parameter 0");
  cr_expect_null(mx_optimizer_state(opt, 2, "step"));
  cr_expect_str_eq(mx_last_error(), "mx_optimizer_state: parameter 2 is out of range (the optimizer has 2)");
  mx_scope_end(s);
  mx_optimizer_free(opt);
  for (int k = 0; k < OC_PARAMS; k++) mx_release(params[k]);
}

/* --- skipping, zero_grad, versions ------------------------------------------------------------------------ */

/* A parameter without a gradient keeps its value, its moments and its step
 * count; the others step. */
Test(optim_api, params_without_grad_are_skipped) {
  mx_tensor *params[OC_PARAMS];
  oc_params(MX_F32, params);
  mx_adam_opts o = mx_adam_defaults();
  o.weight_decay = 0.1; /* would move p1 even with a zero gradient */
  mx_optimizer *opt = mx_adam_new(2, params, &o);
  oc_set_grads(params, 0, 1.0, NULL);
  mx_zero_grad(params[1]);
  double p1 = mx_at(params[1], MX_SHAPE(2)), p0 = mx_at(params[0], MX_SHAPE(1, 1));
  uint64_t version = mx_version(params[1]);
  cr_assert_eq(mx_optimizer_step(opt), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_at(params[1], MX_SHAPE(2)), p1);
  cr_expect_neq(mx_at(params[0], MX_SHAPE(1, 1)), p0);
  cr_expect_eq(mx_version(params[1]), version);
  cr_expect_eq(state_at(opt, 0, "step", MX_SCALAR), 1);
  cr_expect_eq(state_at(opt, 1, "step", MX_SCALAR), 0);
  cr_expect_eq(state_at(opt, 1, "exp_avg", MX_SHAPE(2)), 0);
  cr_expect_eq(state_at(opt, 1, "exp_avg_sq", MX_SHAPE(2)), 0);
  /* no gradient anywhere: nothing to do */
  mx_zero_grad(params[0]);
  cr_expect_eq(mx_optimizer_step(opt), MX_OK, "%s", mx_last_error());
  cr_expect_eq(state_at(opt, 0, "step", MX_SCALAR), 1);
  mx_optimizer_free(opt);
  for (int k = 0; k < OC_PARAMS; k++) mx_release(params[k]);
}

Test(optim_api, step_bumps_the_version_of_updated_params) {
  mx_tensor *params[OC_PARAMS];
  oc_params(MX_F32, params);
  mx_optimizer *opt = mx_sgd_new(2, params, NULL);
  oc_set_grads(params, 0, 1.0, NULL);
  uint64_t v0 = mx_version(params[0]), v1 = mx_version(params[1]);
  cr_assert_eq(mx_optimizer_step(opt), MX_OK, "%s", mx_last_error());
  cr_expect_gt(mx_version(params[0]), v0);
  cr_expect_gt(mx_version(params[1]), v1);
  mx_optimizer_free(opt);
  for (int k = 0; k < OC_PARAMS; k++) mx_release(params[k]);
}

Test(optim_api, zero_grad_frees_or_zeroes) {
  mx_tensor *params[OC_PARAMS];
  oc_params(MX_F32, params);
  mx_optimizer *opt = mx_sgd_new(2, params, NULL);
  oc_set_grads(params, 0, 1.0, NULL);
  mx_zero_grad(params[1]);
  mx_tensor *g0 = mx_grad_of(params[0]);
  cr_assert_eq(mx_optimizer_zero_grad(opt, false), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_grad_of(params[0]), g0, "set_to_none=false keeps the gradient tensor");
  cr_expect_null(mx_grad_of(params[1]), "a missing gradient stays missing");
  for (int i = 0; i < 12; i++) cr_expect_eq(mx_at(g0, MX_SHAPE(i / 4, i % 4)), 0.0);
  cr_assert_eq(mx_optimizer_zero_grad(opt, true), MX_OK, "%s", mx_last_error());
  cr_expect_null(mx_grad_of(params[0]));
  /* a zeroed gradient accumulates afresh */
  oc_set_grads(params, 1, 1.0, NULL);
  cr_assert_eq(mx_optimizer_zero_grad(opt, false), MX_OK, "%s", mx_last_error());
  mx_scope *s = mx_scope_begin();
  cr_assert_eq(mx_backward(mx_sum(mx_mul_scalar(params[1], 2.0), MX_ALL_DIMS, false), NULL, false), MX_OK);
  mx_scope_end(s);
  cr_expect_eq(mx_at(mx_grad_of(params[1]), MX_SHAPE(3)), 2.0);
  mx_optimizer_free(opt);
  for (int k = 0; k < OC_PARAMS; k++) mx_release(params[k]);
}

/* --- dtypes and layouts ------------------------------------------------------------------------------------- */

/* float16 and bfloat16 parameters keep float32 state: one step is the
 * float32 step on the same values, rounded once into the parameter. */
Test(optim_api, half_params_keep_float32_state) {
  const float v[4] = {0.5f, -1.25f, 2.0f, 0.75f}, g[4] = {0.125f, -0.5f, 0.25f, 1.0f};
  mx_dtype dtypes[] = {MX_F16, MX_BF16};
  for (int d = 0; d < 2; d++) {
    mx_tensor *half = leaf(v, MX_SHAPE(4), dtypes[d]), *full = leaf(v, MX_SHAPE(4), MX_F32);
    mx_adam_opts o = mx_adam_defaults();
    o.lr = 0.01;
    o.weight_decay = 0.1;
    mx_optimizer *a = mx_adam_new(1, &half, &o), *b = mx_adam_new(1, &full, &o);
    set_grad(half, g);
    set_grad(full, g);
    cr_assert_eq(mx_optimizer_step(a), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_optimizer_step(b), MX_OK, "%s", mx_last_error());
    mx_scope *s = mx_scope_begin();
    mx_tensor *m = mx_optimizer_state(a, 0, "exp_avg_sq");
    cr_expect_eq(mx_dtype_of(m), MX_F32);
    mx_tensor *rounded = mx_to_dtype(full, dtypes[d]);
    for (int i = 0; i < 4; i++) {
      cr_expect_eq(mx_at(half, MX_SHAPE(i)), mx_at(rounded, MX_SHAPE(i)), "%s[%d]", mx_dtype_name(dtypes[d]), i);
      cr_expect_eq(mx_at(m, MX_SHAPE(i)), state_at(b, 0, "exp_avg_sq", MX_SHAPE(i)));
    }
    cr_expect_neq(mx_at(half, MX_SHAPE(0)), 0.5);
    mx_scope_end(s);
    mx_optimizer_free(a);
    mx_optimizer_free(b);
    mx_release(half);
    mx_release(full);
  }
}

/* A transposed parameter and a broadcast (stride 0) gradient: the update
 * follows the strides; the state follows the parameter's row-major order. */
Test(optim_api, strided_params_and_grads) {
  const float v[6] = {1, 2, 3, 4, 5, 6};
  mx_scope *s = mx_scope_begin();
  mx_tensor *base = mx_from_data(v, MX_SHAPE(2, 3), MX_F32, MX_CPU);
  mx_tensor *p = mx_keep(mx_transpose(base, 0, 1)); /* (3, 2): [[1, 4], [2, 5], [3, 6]] */
  mx_scope_end(s);
  cr_assert_eq(mx_set_requires_grad(p, true), MX_OK, "%s", mx_last_error());
  cr_assert(!mx_is_contiguous(p));
  mx_sgd_opts o = {.lr = 0.5, .momentum = 0.5, .weight_decay = 1.0};
  mx_optimizer *opt = mx_sgd_new(1, &p, &o);
  cr_assert_not_null(opt, "%s", mx_last_error());
  s = mx_scope_begin();
  cr_assert_eq(mx_backward(mx_sum(p, MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_optimizer_step(opt), MX_OK, "%s", mx_last_error());
  /* d = 1 + p; p -= 0.5 d; buffer = d in p's row-major order */
  const double want[6] = {0, 1.5, 0.5, 2, 1, 2.5}, buf[6] = {2, 5, 3, 6, 4, 7};
  mx_tensor *b = mx_optimizer_state(opt, 0, "momentum_buffer");
  for (int i = 0; i < 6; i++) {
    cr_expect_eq(mx_at(p, MX_SHAPE(i / 2, i % 2)), want[i], "p[%d]", i);
    cr_expect_eq(mx_at(b, MX_SHAPE(i / 2, i % 2)), buf[i], "buf[%d]", i);
  }
  mx_scope_end(s);
  mx_optimizer_free(opt);
  mx_release(p);
}

/* A parameter large enough for the CPU loop to go parallel: every element's
 * state is its own (kernels/math.h's update replayed here, serially). */
Test(optim_api, large_params_keep_each_elements_state) {
  enum { ROWS = 300, COLS = 400, N = ROWS * COLS };
  mx_generator *gen = mx_generator_new(5);
  mx_scope *s = mx_scope_begin();
  mx_tensor *p = mx_keep(mx_randn(MX_SHAPE(ROWS, COLS), MX_F32, MX_CPU, gen));
  cr_assert_eq(mx_set_requires_grad(p, true), MX_OK, "%s", mx_last_error());
  mx_adam_opts o = mx_adam_defaults();
  o.lr = 0.01, o.amsgrad = true;
  mx_optimizer *opt = mx_adam_new(1, &p, &o);
  static float value[N], grad[N];
  static double m[N], v[N], vmax[N], want[N];
  cr_assert_eq(mx_to_host(p, value, sizeof value), MX_OK, "%s", mx_last_error());
  for (int i = 0; i < N; i++) want[i] = value[i];
  mx_adam_hparams h = {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad, o.maximize, false};
  for (int step = 1; step <= 2; step++) {
    mx_tensor *g = mx_randn(MX_SHAPE(ROWS, COLS), MX_F32, MX_CPU, gen);
    cr_assert_eq(mx_to_host(g, grad, sizeof grad), MX_OK, "%s", mx_last_error());
    mx_zero_grad(p);
    cr_assert_eq(mx_backward(mx_sum(mx_mul(p, g), MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_optimizer_step(opt), MX_OK, "%s", mx_last_error());
    mx_adam_factors f = mx_adam_factors_of(&h, step);
    for (int i = 0; i < N; i++)
      want[i] = mx_adam_update_element(want[i], grad[i], &m[i], &v[i], &vmax[i], &h, f, false);
  }
  cr_assert_eq(mx_to_host(p, value, sizeof value), MX_OK, "%s", mx_last_error());
  int wrong = 0;
  for (int i = 0; i < N; i++) wrong += (double)value[i] != want[i];
  cr_expect_eq(wrong, 0, "%d of %d elements differ from the serial replay", wrong, N);
  cr_expect_eq(mx_at(mx_optimizer_state(opt, 0, "max_exp_avg_sq"), MX_SHAPE(ROWS - 1, COLS - 1)), vmax[N - 1]);
  mx_scope_end(s);
  mx_optimizer_free(opt);
  mx_release(p);
  mx_generator_free(gen);
}
