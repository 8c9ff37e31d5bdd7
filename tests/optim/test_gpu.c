/* The optimizers on CUDA: PyTorch's trajectories, found_inf read on the device, multi-tensor launches against the
 * CPU, device errors. Skips without a GPU. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/node.h" /* gradients are set directly: CUDA has few ops yet */
#include "optim_cases.h"

static void require_gpu(void) {
  if (mx_cuda_device_count() == 0)
    cr_skip_test("no CUDA device here (%s): the optimizers' CUDA kernels are not run",
                 mx_cuda_built() ? "mixgrad built with CUDA" : "mixgrad built without CUDA");
}

ParameterizedTestParameters(optim_gpu, matches_pytorch) {
  size_t n;
  int *ids = fx_case_ids(oc_count(), &n); /* -1 for a missing file: the test reports it */
  return cr_make_param_array(int, ids, n);
}

ParameterizedTest(int *k, optim_gpu, matches_pytorch) {
  require_gpu();
  oc_replay(*k, MX_CUDA);
}

/* found_inf and grad_scale in device memory: the overflowing step keeps
 * every bit, the trajectory goes on as PyTorch's. */
Test(optim_gpu, found_inf_on_the_device_skips) {
  require_gpu();
  oc_case c;
  cr_assert(oc_find("adamw_amsgrad", &c), "%s has no case adamw_amsgrad", OC_FIXTURES);
  mx_tensor *params[OC_PARAMS];
  oc_params_on(c.dtype, MX_CUDA, params);
  mx_optimizer *opt = oc_optimizer(&c, params);
  oc_run(opt, params, &c, 0, 5);
  oc_snapshot before = oc_snapshot_take(opt);
  oc_set_grads(params, 5, INFINITY, NULL);
  mx_tensor *found_inf = mx_full(MX_SHAPE(1), 1.0, MX_F32, MX_CUDA);
  mx_tensor *scale = mx_full(MX_SHAPE(1), 512.0, MX_F32, MX_CUDA);
  cr_assert_eq(mx_optimizer_step_amp(opt, found_inf, scale), MX_OK, "%s", mx_last_error());
  oc_snapshot after = oc_snapshot_take(opt);
  cr_assert_eq(before.n, after.n);
  cr_expect(!memcmp(before.bytes, after.bytes, before.n), "a skipped step changed the state on CUDA");
  oc_run(opt, params, &c, 5, OC_STEPS);
  oc_expect_results(&c, params);

  mx_tensor *on_cpu = mx_zeros(MX_SHAPE(1), MX_F32, MX_CPU);
  mx_clear_error();
  cr_expect_neq(mx_optimizer_step_amp(opt, on_cpu, NULL), MX_OK);
  cr_expect_str_eq(mx_last_error(), "mx_optimizer_step_amp: found_inf is on cpu but the parameters are on cuda");
  mx_release(on_cpu);
  oc_snapshot_free(&before);
  oc_snapshot_free(&after);
  mx_release(found_inf);
  mx_release(scale);
  mx_optimizer_free(opt);
  for (int i = 0; i < OC_PARAMS; i++) mx_release(params[i]);
  oc_free(&c);
}

Test(optim_gpu, parameters_share_one_device) {
  require_gpu();
  mx_tensor *cpu[OC_PARAMS], *gpu[OC_PARAMS];
  oc_params(MX_F32, cpu);
  oc_params_on(MX_F32, MX_CUDA, gpu);
  mx_tensor *mixed[2] = {cpu[0], gpu[1]};
  mx_clear_error();
  cr_expect_null(mx_sgd_new(2, mixed, NULL));
  cr_expect_str_eq(mx_last_error(),
                   "mx_sgd_new: params[1] is on cuda but params[0] is on cpu; parameters share one device");
  mx_optimizer *opt = mx_sgd_new(1, cpu, NULL);
  mx_clear_error();
  cr_expect_neq(mx_sgd_add_group(opt, 1, gpu + 1, NULL), MX_OK);
  cr_expect_str_eq(mx_last_error(), "mx_sgd_add_group: params[0] is on cuda but the optimizer's parameters are on cpu");
  mx_optimizer_free(opt);
  for (int i = 0; i < OC_PARAMS; i++) {
    mx_release(cpu[i]);
    mx_release(gpu[i]);
  }
}

/* --- many parameters: the CUDA launches against the CPU loops ---------------------------------------------- */

#define N_MANY 30 /* about three launches */

/* Parameter i: its dtype, and its number of elements (one is empty). */
static mx_dtype many_dtype(int i) { return i % 7 == 3 ? MX_F16 : i % 7 == 5 ? MX_BF16 : i % 11 == 2 ? MX_F64 : MX_F32; }
static int64_t many_numel(int i) { return i == 4 ? 0 : (i * 7919) % 3000 + 1; }

/* The same parameters on the CPU and on CUDA; parameter 6 is a transposed
 * (numel / 5, 5) view. */
static void make_many(mx_device device, mx_tensor *params[N_MANY]) {
  mx_generator *gen = mx_generator_new(11);
  for (int i = 0; i < N_MANY; i++) {
    mx_scope *s = mx_scope_begin();
    int64_t n = many_numel(i);
    mx_tensor *t = mx_to_dtype(mx_randn(MX_SHAPE(n), MX_F32, MX_CPU, gen), many_dtype(i));
    if (i == 6) t = mx_reshape(t, MX_SHAPE(5, n / 5));
    t = mx_to_device(t, device);
    if (i == 6) t = mx_transpose(t, 0, 1);
    params[i] = mx_keep(t);
    mx_scope_end(s);
    cr_assert_not_null(params[i], "%s", mx_last_error());
    cr_assert_eq(mx_set_requires_grad(params[i], true), MX_OK, "%s", mx_last_error());
  }
  mx_generator_free(gen);
}

/* Step `step`'s gradients (parameter 9 has none), the same on every device. */
static void grad_many(mx_tensor *params[N_MANY], int step) {
  mx_generator *gen = mx_generator_new(100 + (uint64_t)step);
  for (int i = 0; i < N_MANY; i++) {
    mx_zero_grad(params[i]);
    mx_scope *s = mx_scope_begin();
    mx_tensor *g = mx_to_dtype(mx_randn(mx_shape_get(params[i]), MX_F32, MX_CPU, gen), mx_dtype_of(params[i]));
    g = mx_to_device(g, mx_device_of(params[i]));
    cr_assert_not_null(g, "%s", mx_last_error());
    if (i != 9) mx__meta_of(params[i])->grad = mx__retain(g);
    mx_scope_end(s);
  }
  mx_generator_free(gen);
}

/* a (CPU) and b (CUDA) within tol relative units (0: the same values). */
static void expect_close(const mx_tensor *a, const mx_tensor *b, double tol, const char *what, int i) {
  mx_scope *s = mx_scope_begin();
  int64_t n = mx_numel(a);
  double *x = calloc((size_t)n + 1, sizeof *x), *y = calloc((size_t)n + 1, sizeof *y);
  cr_assert_eq(mx_to_host(mx_to_dtype(a, MX_F64), x, sizeof *x * (size_t)n), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_to_host(mx_to_dtype(mx_to_device(b, MX_CPU), MX_F64), y, sizeof *y * (size_t)n), MX_OK, "%s",
               mx_last_error());
  int wrong = 0;
  for (int64_t k = 0; k < n; k++)
    if (!(fabs(x[k] - y[k]) <= tol * fabs(x[k])) && wrong++ < 3)
      cr_expect(false, "%s of parameter %d [%lld]: CPU %.17g, CUDA %.17g", what, i, (long long)k, x[k], y[k]);
  cr_expect_eq(wrong, 0, "%s of parameter %d: %d of %lld values differ", what, i, wrong, (long long)n);
  free(x);
  free(y);
  mx_scope_end(s);
}

/* One unit in the last place, relative, of each dtype's arithmetic. */
static double ulp_of(mx_dtype dtype) {
  return dtype == MX_F64 ? 0x1p-52 : dtype == MX_F16 ? 0x1p-10 : dtype == MX_BF16 ? 0x1p-7 : 0x1p-23;
}

static void compare_many(mx_optimizer *(*make)(mx_tensor **params), bool exact) {
  static const char *const names[] = {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"};
  mx_tensor *cpu[N_MANY], *gpu[N_MANY];
  make_many(MX_CPU, cpu);
  make_many(MX_CUDA, gpu);
  mx_optimizer *a = make(cpu), *b = make(gpu);
  for (int step = 0; step < 3; step++) {
    grad_many(cpu, step);
    grad_many(gpu, step);
    cr_assert_eq(mx_optimizer_step(a), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_optimizer_step(b), MX_OK, "%s", mx_last_error());
  }
  /* Adam's bias corrections use pow, within 2 ulp on CUDA: an ulp or two of slack there */
  for (int i = 0; i < N_MANY; i++) {
    mx_dtype dtype = many_dtype(i);
    expect_close(cpu[i], gpu[i], exact ? 0 : 4 * ulp_of(dtype), "the value", i);
    mx_scope *s = mx_scope_begin();
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
      mx_tensor *x = mx_optimizer_state(a, i, names[k]), *y = mx_optimizer_state(b, i, names[k]);
      mx_clear_error();
      cr_expect_eq(x == NULL, y == NULL, "parameter %d: state %s on one device only", i, names[k]);
      if (x && y) expect_close(x, y, exact ? 0 : 4 * ulp_of(dtype == MX_F64 ? MX_F64 : MX_F32), names[k], i);
    }
    mx_scope_end(s);
  }
  mx_optimizer_free(a);
  mx_optimizer_free(b);
  for (int i = 0; i < N_MANY; i++) {
    mx_release(cpu[i]);
    mx_release(gpu[i]);
  }
}

static mx_optimizer *make_sgd(mx_tensor **params) {
  mx_sgd_opts o = {.lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 0.01};
  mx_optimizer *opt = mx_sgd_new(N_MANY / 2, params, &o);
  o.nesterov = false, o.dampening = 0.5, o.maximize = true;
  cr_assert_eq(mx_sgd_add_group(opt, N_MANY - N_MANY / 2, params + N_MANY / 2, &o), MX_OK, "%s", mx_last_error());
  return opt;
}

static mx_optimizer *make_adam(mx_tensor **params) {
  mx_adam_opts o = mx_adam_defaults();
  o.lr = 0.01, o.amsgrad = true, o.weight_decay = 0.1;
  return mx_adam_new(N_MANY, params, &o);
}

static mx_optimizer *make_adamw(mx_tensor **params) {
  mx_adam_opts o = mx_adamw_defaults();
  o.lr = 0.01, o.maximize = true;
  return mx_adamw_new(N_MANY, params, &o);
}

Test(optim_gpu, many_sgd_params_match_the_cpu) {
  require_gpu();
  compare_many(make_sgd, true);
}

Test(optim_gpu, many_adam_params_match_the_cpu) {
  require_gpu();
  compare_many(make_adam, false);
}

Test(optim_gpu, many_adamw_params_match_the_cpu) {
  require_gpu();
  compare_many(make_adamw, false);
}
