/* The AMP hooks of mx_optimizer_step_amp: a found_inf step changes nothing, grad_scale unscales inside the pass. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <string.h>

#include "optim_cases.h"

static void release_all(mx_tensor *const *params, int n) {
  for (int i = 0; i < n; i++) mx_release(params[i]);
}

/* --- found_inf ----------------------------------------------------------------------------------------------- */

/* Parameters cross into the test's process by value: no pointers. */
typedef struct {
  char id[32];
  int skip_at; /* the problem step before which the overflowing step comes */
} skip_case;

typedef struct {
  char id[32];
} case_id;

ParameterizedTestParameters(optim_amp, found_inf_step_changes_nothing) {
  static skip_case cases[] = {{"sgd_momentum_dampening", 0}, {"sgd_groups", 4},  {"sgd_nograd", 5},
                              {"adam_amsgrad", 0},           {"adam_amsgrad", 7}, {"adam_nograd", 3},
                              {"adamw_amsgrad", 11},         {"adam_f64", 12},   {"sgd_f64", 1}};
  return cr_make_param_array(skip_case, cases, sizeof cases / sizeof *cases);
}

/* Steps [0, skip_at), then a step whose gradients overflowed (inf and NaN,
 * scaled too) with found_inf = 1: parameters, momentum, moments, maxima and
 * step counts keep every bit. The remaining steps then give PyTorch's
 * trajectory, which never saw the skipped step. */
ParameterizedTest(skip_case *sc, optim_amp, found_inf_step_changes_nothing) {
  oc_case c;
  cr_assert(oc_find(sc->id, &c), "%s has no case %s", OC_FIXTURES, sc->id);
  mx_tensor *params[OC_PARAMS];
  oc_params(c.dtype, params);
  mx_optimizer *opt = oc_optimizer(&c, params);
  oc_run(opt, params, &c, 0, sc->skip_at);
  oc_snapshot before = oc_snapshot_take(opt);

  oc_set_grads(params, sc->skip_at, INFINITY, NULL); /* inf, and NaN where a gradient is 0 */
  mx_tensor *found_inf = mx_full(MX_SHAPE(1), 1.0, MX_F32, MX_CPU);
  mx_tensor *scale = mx_full(MX_SHAPE(1), 1024.0, MX_F32, MX_CPU);
  cr_assert_eq(mx_optimizer_step_amp(opt, found_inf, scale), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_optimizer_step_amp(opt, found_inf, NULL), MX_OK, "%s", mx_last_error());
  oc_snapshot after = oc_snapshot_take(opt);
  cr_assert_eq(after.n, before.n);
  cr_expect(before.n > 0 && !memcmp(before.bytes, after.bytes, before.n), "%s: a skipped step changed the state",
            sc->id);

  oc_run(opt, params, &c, sc->skip_at, OC_STEPS);
  oc_expect_results(&c, params);
  oc_snapshot_free(&before);
  oc_snapshot_free(&after);
  mx_release(found_inf);
  mx_release(scale);
  mx_optimizer_free(opt);
  release_all(params, OC_PARAMS);
  oc_free(&c);
}

/* --- grad_scale -------------------------------------------------------------------------------------------- */

ParameterizedTestParameters(optim_amp, grad_scale_matches_unscaled_steps) {
  static case_id ids[] = {{"sgd_nesterov"}, {"sgd_maximize"}, {"adam_amsgrad"}, {"adam_weight_decay"},
                          {"adamw_plain"},  {"adam_groups"},  {"adam_f64"}};
  return cr_make_param_array(case_id, ids, sizeof ids / sizeof *ids);
}

/* Gradients multiplied by S = 2^16 and stepped with grad_scale = S (and a
 * clear found_inf) give, bit for bit, the plain steps on the unscaled
 * gradients, hence PyTorch's trajectory. */
ParameterizedTest(case_id *p, optim_amp, grad_scale_matches_unscaled_steps) {
  const char *id = p->id;
  oc_case c;
  cr_assert(oc_find(id, &c), "%s has no case %s", OC_FIXTURES, id);
  mx_tensor *plain[OC_PARAMS], *scaled[OC_PARAMS];
  oc_params(c.dtype, plain);
  oc_params(c.dtype, scaled);
  mx_optimizer *opt_plain = oc_optimizer(&c, plain), *opt_scaled = oc_optimizer(&c, scaled);
  oc_run(opt_plain, plain, &c, 0, OC_STEPS);
  mx_tensor *found_inf = mx_zeros(MX_SHAPE(1), MX_F32, MX_CPU);
  mx_tensor *scale = mx_scalar(65536.0, MX_F32, MX_CPU);
  for (int step = 0; step < OC_STEPS; step++) {
    oc_set_grads(scaled, step, 65536.0, &c);
    cr_assert_eq(mx_optimizer_step_amp(opt_scaled, found_inf, scale), MX_OK, "%s", mx_last_error());
  }
  oc_snapshot a = oc_snapshot_take(opt_plain), b = oc_snapshot_take(opt_scaled);
  cr_assert_eq(a.n, b.n);
  cr_expect(!memcmp(a.bytes, b.bytes, a.n), "%s: the scaled steps differ from the plain ones", id);
  oc_expect_results(&c, scaled);
  /* the gradients themselves are only read: still scaled */
  cr_expect_eq(mx_at(mx_grad_of(scaled[1]), MX_SHAPE(0)), 65536.0 * mx_at(mx_grad_of(plain[1]), MX_SHAPE(0)));
  oc_snapshot_free(&a);
  oc_snapshot_free(&b);
  mx_release(found_inf);
  mx_release(scale);
  mx_optimizer_free(opt_plain);
  mx_optimizer_free(opt_scaled);
  release_all(plain, OC_PARAMS);
  release_all(scaled, OC_PARAMS);
  oc_free(&c);
}

/* A scale whose inverse is inexact: the gradient is multiplied by the
 * float32 inverse (float)(1.0 / (double)scale), in float32, as
 * GradScaler.unscale_ would leave it; the step is the plain step on that. */
Test(optim_amp, grad_scale_multiplies_by_the_float32_inverse) {
  oc_case c;
  cr_assert(oc_find("adam_plain", &c), "%s has no case adam_plain", OC_FIXTURES);
  mx_tensor *plain[OC_PARAMS], *scaled[OC_PARAMS];
  oc_params(MX_F32, plain);
  oc_params(MX_F32, scaled);
  mx_optimizer *opt_plain = oc_optimizer(&c, plain), *opt_scaled = oc_optimizer(&c, scaled);
  float s = 3.0f, inv = mx_amp_inv_scale(s);
  cr_assert_eq(inv, 0.333333343267f);
  mx_tensor *scale = mx_scalar(s, MX_F32, MX_CPU);
  for (int step = 0; step < 3; step++) {
    oc_set_grads(scaled, step, s, NULL);
    cr_assert_eq(mx_optimizer_step_amp(opt_scaled, NULL, scale), MX_OK, "%s", mx_last_error());
    oc_set_grads(plain, step, s, NULL);
    for (int k = 0; k < OC_PARAMS; k++) /* what unscale_ does to the gradient in place */
      cr_assert_eq(mx_mul_scalar_(mx_grad_of(plain[k]), inv), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_optimizer_step(opt_plain), MX_OK, "%s", mx_last_error());
  }
  oc_snapshot a = oc_snapshot_take(opt_plain), b = oc_snapshot_take(opt_scaled);
  cr_assert_eq(a.n, b.n);
  cr_expect(!memcmp(a.bytes, b.bytes, a.n), "the in-pass unscaling differs from unscaling the gradients first");
  oc_snapshot_free(&a);
  oc_snapshot_free(&b);
  mx_release(scale);
  mx_optimizer_free(opt_plain);
  mx_optimizer_free(opt_scaled);
  release_all(plain, OC_PARAMS);
  release_all(scaled, OC_PARAMS);
  oc_free(&c);
}

/* A found_inf that is 0 and no grad_scale: the same as mx_optimizer_step. */
Test(optim_amp, clear_found_inf_steps) {
  oc_case c;
  cr_assert(oc_find("sgd_momentum_dampening", &c), "%s has no case", OC_FIXTURES);
  mx_tensor *params[OC_PARAMS];
  oc_params(MX_F32, params);
  mx_optimizer *opt = oc_optimizer(&c, params);
  mx_tensor *found_inf = mx_zeros(MX_SHAPE(1, 1), MX_F32, MX_CPU);
  for (int step = 0; step < OC_STEPS; step++) {
    oc_set_grads(params, step, 1.0, &c);
    cr_assert_eq(mx_optimizer_step_amp(opt, found_inf, NULL), MX_OK, "%s", mx_last_error());
  }
  oc_expect_results(&c, params);
  mx_release(found_inf);
  mx_optimizer_free(opt);
  release_all(params, OC_PARAMS);
  oc_free(&c);
}

/* Bad flags are refused before anything changes. */
Test(optim_amp, flag_errors_name_the_function_and_the_values) {
  mx_tensor *params[OC_PARAMS];
  oc_params(MX_F32, params);
  mx_optimizer *opt = mx_adam_new(OC_PARAMS, params, NULL);
  cr_assert_not_null(opt, "%s", mx_last_error());
  oc_set_grads(params, 0, 1.0, NULL);
  oc_snapshot before = oc_snapshot_take(opt);
  struct {
    mx_tensor *found_inf, *grad_scale;
    const char *message;
  } bad[] = {
      {mx_zeros(MX_SHAPE(1), MX_F64, MX_CPU), NULL, "mx_optimizer_step_amp: found_inf is float64; it must be float32"},
      {mx_zeros(MX_SHAPE(2), MX_F32, MX_CPU), NULL,
       "mx_optimizer_step_amp: found_inf has shape [2] (2 elements); it must have one element"},
      {mx_zeros(MX_SCALAR, MX_F32, MX_CPU), mx_ones(MX_SHAPE(1), MX_F16, MX_CPU),
       "mx_optimizer_step_amp: grad_scale is float16; it must be float32"},
      {NULL, mx_ones(MX_SHAPE(0), MX_F32, MX_CPU),
       "mx_optimizer_step_amp: grad_scale has shape [0] (0 elements); it must have one element"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    mx_clear_error();
    cr_expect_neq(mx_optimizer_step_amp(opt, bad[i].found_inf, bad[i].grad_scale), MX_OK);
    cr_expect_str_eq(mx_last_error(), bad[i].message);
    mx_release(bad[i].found_inf);
    mx_release(bad[i].grad_scale);
  }
  oc_snapshot after = oc_snapshot_take(opt);
  cr_expect(!memcmp(before.bytes, after.bytes, before.n), "a refused step changed the state");
  oc_snapshot_free(&before);
  oc_snapshot_free(&after);
  mx_optimizer_free(opt);
  release_all(params, OC_PARAMS);
}
