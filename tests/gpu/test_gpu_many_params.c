/* A GradScaler and Adam over more parameters than one multi-tensor launch
 * carries (kernels/cuda/common.cuh: 185 gradients an unscale launch and 81
 * parameters an optimizer launch in CUDA 13's 32 KiB of kernel arguments,
 * 22 and 9 in 4 KiB), through an overflowing iteration whose flag the
 * update clears: the parameters, the decisions and the counts are the
 * CPU's, bit for bit. Skips without a GPU (tests/gpu/test_host_grid.cu runs
 * the same chunking and clearing on the CPU). */
#include <criterion/criterion.h>
#include <math.h>

#include "compare.h"

enum { N_PARAMS = 300, ITERATIONS = 4, OVERFLOW_AT = 1, BAD_PARAM = 250 };

/* Parameter i, (i % 5 + 1, 3), on the device, from the same CPU values on both. */
static mx_tensor *make_param(int i, mx_device device) {
  mx_generator *gen = mx_generator_new(40 + (uint64_t)i);
  mx_scope *scope = mx_scope_begin();
  mx_tensor *p = mx_keep(mx_to_device(mx_randn(MX_SHAPE(i % 5 + 1, 3), MX_F32, MX_CPU, gen), device));
  mx_scope_end(scope);
  mx_generator_free(gen);
  cr_assert_not_null(p, "%s", mx_last_error());
  cr_assert_eq(mx_set_requires_grad(p, true), MX_OK, "%s", mx_last_error());
  return p;
}

/* sum over i of sum(p_i * c_i), so that p_i's gradient is c_i times the scale: c_i = (i + it) / 64 + k / 8, and
 * an inf in BAD_PARAM's at the overflowing iteration. */
static mx_tensor *loss_of(mx_tensor **p, int it, mx_device device) {
  mx_tensor *loss = NULL;
  for (int i = 0; i < N_PARAMS; i++) {
    int64_t n = mx_numel(p[i]);
    mx_tensor *c = mx_add_scalar(mx_mul_scalar(mx_arange(0, (double)n, 1, MX_F32, MX_CPU), 0.125), (i + it) / 64.0);
    if (it == OVERFLOW_AT && i == BAD_PARAM) cr_assert_eq(mx_set(c, MX_SHAPE(1), INFINITY), MX_OK);
    mx_tensor *term = mx_sum(mx_mul(p[i], mx_reshape(mx_to_device(c, device), mx_shape_get(p[i]))), MX_ALL_DIMS,
                             false);
    loss = loss ? mx_add(loss, term) : term;
  }
  cr_assert_not_null(loss, "%s", mx_last_error());
  return loss;
}

typedef struct {
  mx_tensor *p[N_PARAMS];
  mx_scaler_step_info info[ITERATIONS];
  int bad[ITERATIONS]; /* mx_scaler_overflow_report's count after each update */
  double scale;
} run;

static void train(run *r, mx_device device) {
  for (int i = 0; i < N_PARAMS; i++) r->p[i] = make_param(i, device);
  mx_adam_opts o = mx_adam_defaults();
  o.lr = 1e-2;
  mx_optimizer *opt = mx_adam_new(N_PARAMS, r->p, &o);
  mx_scaler_opts so = mx_scaler_defaults();
  so.init_scale = 1024;
  so.growth_interval = 2;
  mx_scaler *scaler = mx_scaler_new(&so);
  cr_assert(opt && scaler, "%s", mx_last_error());
  for (int it = 0; it < ITERATIONS; it++) {
    mx_scope *scope = mx_scope_begin();
    cr_assert_eq(mx_optimizer_zero_grad(opt, true), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_backward(mx_scaler_scale(scaler, loss_of(r->p, it, device)), NULL, false), MX_OK, "%s",
                 mx_last_error());
    cr_assert_eq(mx_scaler_step(scaler, opt, &r->info[it]), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_scaler_update(scaler), MX_OK, "%s", mx_last_error());
    r->bad[it] = mx_scaler_overflow_report(scaler, opt, NULL, NULL);
    mx_scope_end(scope);
  }
  r->scale = mx_scaler_get_scale(scaler);
  mx_optimizer_free(opt);
  mx_scaler_free(scaler);
}

Test(gpu_many_params, scaler_and_adam_past_one_launch_match_the_cpu) {
  require_gpu();
  static run cpu, gpu;
  train(&cpu, MX_CPU);
  train(&gpu, MX_CUDA);
  for (int it = 0; it < ITERATIONS; it++) {
    cr_expect_eq(gpu.info[it].stepped, it != OVERFLOW_AT, "iteration %d: stepped %d", it, gpu.info[it].stepped);
    cr_expect_eq(gpu.info[it].infs, it == OVERFLOW_AT, "iteration %d: %lld infs", it, (long long)gpu.info[it].infs);
    cr_expect_eq(gpu.info[it].params_with_nonfinite, cpu.info[it].params_with_nonfinite, "iteration %d", it);
    cr_expect_eq(gpu.bad[it], it == OVERFLOW_AT, "iteration %d: the report after the update counts %d", it,
                 gpu.bad[it]);
    cr_expect_eq(cpu.bad[it], gpu.bad[it]);
  }
  cr_expect_eq(gpu.scale, cpu.scale, "scale %g on the GPU, %g on the CPU", gpu.scale, cpu.scale);
  cr_expect_eq(gpu.scale, 1024.0, "x0.5 at the overflow, then x2 after two clean iterations");
  for (int i = 0; i < N_PARAMS; i++) {
    assert_identical(cpu.p[i], gpu.p[i], "a parameter after Adam's steps");
    mx_release(cpu.p[i]), mx_release(gpu.p[i]);
  }
}
