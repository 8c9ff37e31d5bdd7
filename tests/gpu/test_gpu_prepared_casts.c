/* Prepared casts on a GPU (tensor/tensor_impl.h): the CUDA optimizer step
 * writes each autocast weight's 16-bit cast for the next step. Training an
 * MLP under float16 autocast with a GradScaler, an overflowing batch among
 * the steps (skipped on the device, where the step still writes the casts,
 * of the parameters as they stand), ends with the parameters bit for bit of
 * the same training with prepared casts off, and the casts are used. Skips
 * without a GPU (tests/gpu/test_host_grid.cu checks the kernel's casts on
 * the CPU; test_gpu_graph.c, that a captured step casts afresh). */
#include <criterion/criterion.h>

#include "amp/amp_internal.h"
#include "compare.h"
#include "tensor/tensor_impl.h"

enum { N_PARAMS = 4, STEPS = 6, OVERFLOW_AT = 3, BATCH = 8, IN = 12, HIDDEN = 40, OUT = 5 };

static void make_params(mx_tensor **p) {
  const mx_shape shapes[N_PARAMS] = {MX_SHAPE(HIDDEN, IN), MX_SHAPE(HIDDEN), MX_SHAPE(OUT, HIDDEN), MX_SHAPE(OUT)};
  for (int i = 0; i < N_PARAMS; i++) {
    mx_generator *gen = mx_generator_new(7 + (uint64_t)i);
    mx_scope *scope = mx_scope_begin();
    p[i] = mx_keep(mx_to_device(mx_mul_scalar(mx_randn(shapes[i], MX_F32, MX_CPU, gen), 0.3), MX_CUDA));
    mx_scope_end(scope);
    mx_generator_free(gen);
    cr_assert_not_null(p[i], "%s", mx_last_error());
    cr_assert_eq(mx_set_requires_grad(p[i], true), MX_OK, "%s", mx_last_error());
  }
}

/* Batch s on the device (in the caller's scope): the overflowing one holds 1e30, inf in float16. */
static mx_tensor *batch(int s, int which) {
  mx_generator *gen = mx_generator_new(1000 + 2 * (uint64_t)s + (uint64_t)which);
  mx_tensor *t = mx_randn(which ? MX_SHAPE(BATCH, OUT) : MX_SHAPE(BATCH, IN), MX_F32, MX_CPU, gen);
  mx_generator_free(gen);
  if (s == OVERFLOW_AT && !which) cr_assert_eq(mx_set(t, MX_SHAPE(0, 0), 1e30), MX_OK, "%s", mx_last_error());
  return mx_to_device(t, MX_CUDA);
}

static void step(mx_optimizer *opt, mx_scaler *scaler, mx_tensor **p, int s) {
  mx_scope *scope = mx_scope_begin();
  cr_assert_eq(mx_optimizer_zero_grad(opt, true), MX_OK, "%s", mx_last_error());
  mx_tensor *loss = NULL;
  MX_AUTOCAST(MX_CUDA, MX_F16, true, true) {
    mx_tensor *h = mx_relu(mx_linear(batch(s, 0), p[0], p[1]));
    loss = mx_mse_loss(mx_to_dtype(mx_linear(h, p[2], p[3]), MX_F32), batch(s, 1), MX_REDUCTION_MEAN);
  }
  cr_assert_not_null(loss, "%s", mx_last_error());
  cr_assert_eq(mx_backward(mx_scaler_scale(scaler, loss), NULL, false), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_scaler_step(scaler, opt, NULL), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_scaler_update(scaler), MX_OK, "%s", mx_last_error());
  mx_scope_end(scope);
}

/* The parameters after STEPS steps of Adam through a GradScaler, and the casts served from prepared ones. */
static int64_t train(mx_tensor **p) {
  make_params(p);
  mx_adam_opts o = mx_adam_defaults();
  o.lr = 1e-2;
  mx_optimizer *opt = mx_adam_new(N_PARAMS, p, &o);
  mx_scaler_opts so = mx_scaler_defaults();
  so.init_scale = 1024;
  mx_scaler *scaler = mx_scaler_new(&so);
  cr_assert(opt && scaler, "%s", mx_last_error());
  int64_t before = mx__amp_prepared_casts_used();
  for (int s = 0; s < STEPS; s++) step(opt, scaler, p, s);
  cr_expect_eq(mx_scaler_stats_get(scaler).skipped, 1, "the overflowing step was not skipped");
  mx_optimizer_free(opt);
  mx_scaler_free(scaler);
  return mx__amp_prepared_casts_used() - before;
}

Test(gpu_prepared_casts, training_matches_training_without_through_a_skipped_step) {
  require_gpu();
  mx_tensor *on[N_PARAMS], *off[N_PARAMS];
  int64_t used = train(on);
  /* every step after the first takes the four weights' casts, the one after the skip included */
  cr_expect_eq(used, N_PARAMS * (STEPS - 1), "prepared casts used: %lld", (long long)used);
  mx__prepared_casts_set_enabled(false);
  used = train(off);
  mx__prepared_casts_set_enabled(true);
  cr_expect_eq(used, 0);
  for (int i = 0; i < N_PARAMS; i++) {
    mx_tensor *without = mx_to_device(off[i], MX_CPU);
    assert_identical(without, on[i], "a parameter trained without prepared casts (CPU copy) and with");
    mx_release(without), mx_release(on[i]), mx_release(off[i]);
  }
}
