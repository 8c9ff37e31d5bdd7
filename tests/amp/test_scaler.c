/* The GradScaler, part 1: construction and its errors, the disabled
 * scaler, scale, unscale (the f64-computed inverse, f32/f64/bf16 gradients,
 * the state machine's errors) and step (a skipped step leaves parameters
 * and every piece of optimizer state untouched). Part 2 is
 * test_scaler_update.c. */
#include <unistd.h>

#include "scaler_fixture.h"

TestSuite(scaler, .init = open_scope, .fini = close_scope);

/* --- construction ------------------------------------------------------------------- */

Test(scaler, defaults_are_pytorchs) {
  mx_scaler_opts d = mx_scaler_defaults();
  cr_assert_eq(d.init_scale, 65536.0);
  cr_assert_eq(d.growth_factor, 2.0);
  cr_assert_eq(d.backoff_factor, 0.5);
  cr_assert_eq(d.growth_interval, 2000);
  cr_assert(d.enabled);
  cr_assert_eq(d.min_scale, 0.0);
  cr_assert_eq(d.max_scale, 0.0);
  cr_assert_eq(d.max_consecutive_skips, 0);

  mx_scaler *s = default_scaler();
  cr_assert(mx_scaler_is_enabled(s));
  cr_assert_eq(mx_scaler_get_scale(s), 65536.0);
  cr_assert_eq(mx_scaler_get_growth_factor(s), 2.0);
  cr_assert_eq(mx_scaler_get_backoff_factor(s), 0.5);
  cr_assert_eq(mx_scaler_get_growth_interval(s), 2000);
  cr_assert_null(mx_scaler_scale_tensor(s), "the scale is made lazily, by the first scale");
  mx_scaler_stats st = mx_scaler_stats_get(s);
  cr_assert_eq(st.updates, 0);
  cr_assert_eq(st.skipped, 0);
  cr_assert_eq(st.consecutive_skips, 0);
  cr_assert_eq(st.scale, 65536.0);
  mx_scaler_state state;
  OK(mx_scaler_state_dict(s, &state));
  cr_assert(state.present);
  cr_assert_eq(state.scale, 65536.0);
  cr_assert_eq(state.growth_factor, 2.0);
  cr_assert_eq(state.backoff_factor, 0.5);
  cr_assert_eq(state.growth_interval, 2000);
  cr_assert_eq(state.growth_tracker, 0);
}

typedef struct {
  const char *field;
  double value;
  const char *message;
} bad_option;

static const bad_option bad_options[] = {
    {"growth_factor", 1.0, "mx_scaler_new: growth_factor must be a finite number > 1.0, got 1"},
    {"growth_factor", 0.5, "mx_scaler_new: growth_factor must be a finite number > 1.0, got 0.5"},
    {"growth_factor", -2.0, "mx_scaler_new: growth_factor must be a finite number > 1.0, got -2"},
    {"growth_factor", INFINITY, "mx_scaler_new: growth_factor must be a finite number > 1.0, got inf"},
    {"growth_factor", NAN, "mx_scaler_new: growth_factor must be a finite number > 1.0, got nan"},
    {"backoff_factor", 1.0, "mx_scaler_new: backoff_factor must be in (0, 1), got 1"},
    {"backoff_factor", 1.5, "mx_scaler_new: backoff_factor must be in (0, 1), got 1.5"},
    {"backoff_factor", 0.0, "mx_scaler_new: backoff_factor must be in (0, 1), got 0"},
    {"backoff_factor", -0.5, "mx_scaler_new: backoff_factor must be in (0, 1), got -0.5"},
    {"backoff_factor", NAN, "mx_scaler_new: backoff_factor must be in (0, 1), got nan"},
    {"growth_interval", 0, "mx_scaler_new: growth_interval must be in [1, 2^31), got 0"},
    {"growth_interval", -5, "mx_scaler_new: growth_interval must be in [1, 2^31), got -5"},
    {"growth_interval", 2147483648.0, "mx_scaler_new: growth_interval must be in [1, 2^31), got 2147483648"},
    {"init_scale", 0.0, "mx_scaler_new: init_scale must be a finite number > 0, got 0"},
    {"init_scale", -1.0, "mx_scaler_new: init_scale must be a finite number > 0, got -1"},
    {"init_scale", INFINITY, "mx_scaler_new: init_scale must be a finite number > 0, got inf"},
    {"init_scale", NAN, "mx_scaler_new: init_scale must be a finite number > 0, got nan"},
    {"min_scale", -1.0, "mx_scaler_new: min_scale -1, max_scale 0 and max_consecutive_skips 0 must not be negative "
                        "(0 turns each off)"},
    {"max_scale", -2.0, "mx_scaler_new: min_scale 0, max_scale -2 and max_consecutive_skips 0 must not be negative "
                        "(0 turns each off)"},
    {"max_consecutive_skips", -3, "mx_scaler_new: min_scale 0, max_scale 0 and max_consecutive_skips -3 must not be "
                                  "negative (0 turns each off)"},
};

Test(scaler, invalid_options_are_errors_naming_the_value) {
  for (size_t i = 0; i < sizeof bad_options / sizeof *bad_options; i++) {
    const bad_option *b = &bad_options[i];
    mx_scaler_opts o = mx_scaler_defaults();
    if (!strcmp(b->field, "growth_factor")) o.growth_factor = b->value;
    if (!strcmp(b->field, "backoff_factor")) o.backoff_factor = b->value;
    if (!strcmp(b->field, "growth_interval")) o.growth_interval = (int64_t)b->value;
    if (!strcmp(b->field, "init_scale")) o.init_scale = b->value;
    if (!strcmp(b->field, "min_scale")) o.min_scale = b->value;
    if (!strcmp(b->field, "max_scale")) o.max_scale = b->value;
    if (!strcmp(b->field, "max_consecutive_skips")) o.max_consecutive_skips = (int64_t)b->value;
    mx_scaler *s = mx_scaler_new(&o);
    if (s) mx_scaler_free(s);
    cr_assert_null(s, "%s = %g was accepted", b->field, b->value);
    cr_assert_eq(mx_last_status(), MX_INVALID_ARGUMENT, "%s = %g", b->field, b->value);
    cr_assert_str_eq(mx_last_error(), b->message);
  }
  mx_scaler_opts o = mx_scaler_defaults();
  o.min_scale = 10, o.max_scale = 5;
  cr_assert_null(mx_scaler_new(&o));
  cr_assert_eq(mx_last_status(), MX_INVALID_ARGUMENT);
  cr_assert_str_eq(mx_last_error(), "mx_scaler_new: min_scale 10 is above max_scale 5");
  /* the edges that are valid */
  o = mx_scaler_defaults();
  o.growth_factor = 1.0000001, o.backoff_factor = 0.9999999, o.growth_interval = 1, o.init_scale = 1e-30;
  o.min_scale = 5, o.max_scale = 5, o.max_consecutive_skips = 1;
  NOT_NULL(scaler_with(&o));
}

Test(scaler, disabled_scaler_is_a_pass_through) {
  mx_scaler_opts o = mx_scaler_defaults();
  o.enabled = false;
  o.growth_factor = 0.5; /* PyTorch checks the factors only when enabled */
  mx_scaler *s = scaler_with(&o);
  cr_assert_not(mx_scaler_is_enabled(s));
  cr_assert_eq(mx_scaler_get_scale(s), 1.0);

  mx_tensor *p = param(2, (float[]){1.0f, -2.0f});
  mx_optimizer *opt = sgd(1, &p, 0.25);
  mx_tensor *loss = mx_sum(mx_mul(p, vec(2, (float[]){0.5f, 3.0f})), MX_ALL_DIMS, false); /* -5.5 */
  mx_tensor *scaled = mx_scaler_scale(s, loss);
  NOT_NULL(scaled);
  cr_assert_eq(mx_item(scaled), -5.5, "the loss passes unchanged in value");
  cr_assert_eq(mx_dtype_of(scaled), MX_F32);
  cr_assert_null(mx_scaler_scale_tensor(s));
  OK(mx_backward(scaled, NULL, false));
  expect_values(mx_grad_of(p), 2, (double[]){0.5, 3.0});
  OK(mx_scaler_unscale(s, opt));
  OK(mx_scaler_unscale(s, opt)); /* no state machine either */
  expect_values(mx_grad_of(p), 2, (double[]){0.5, 3.0});
  mx_scaler_step_info info = {.stepped = false, .infs = 9, .nans = 9, .params_with_nonfinite = 9};
  OK(mx_scaler_step(s, opt, &info));
  cr_assert(info.stepped);
  cr_assert_eq(info.infs + info.nans + info.params_with_nonfinite, 0);
  expect_values(p, 2, (double[]){1.0 - 0.125, -2.0 - 0.75}); /* a plain SGD step, lr 0.25 */
  OK(mx_scaler_update(s));
  OK(mx_scaler_update_to(s, 1024.0));
  cr_assert_eq(mx_scaler_get_scale(s), 1.0);
  mx_scaler_stats st = mx_scaler_stats_get(s);
  cr_assert_eq(st.scale, 1.0);
  cr_assert_eq(st.updates, 0);

  /* even inf gradients step: the disabled scaler checks nothing */
  set_grad_f32(p, 2, (float[]){INFINITY, 0.0f});
  OK(mx_scaler_step(s, opt, &info));
  cr_assert(info.stepped);
  cr_assert(isinf(at(p, 0)));

  mx_scaler_state state = {.present = true, .scale = 7};
  OK(mx_scaler_state_dict(s, &state));
  cr_assert_not(state.present, "a disabled scaler's state is empty");
  OK(mx_scaler_load_state_dict(s, &state)); /* a no-op, as in PyTorch */
}

/* --- scale ------------------------------------------------------------------------- */

Test(scaler, scale_multiplies_the_loss_and_places_the_scale_lazily) {
  mx_scaler *s = default_scaler();
  mx_tensor *p = param(1, (float[]){3.0f});
  mx_tensor *loss = mx_mul_scalar(p, 0.5); /* 1.5, requires grad */
  mx_tensor *scaled = mx_scaler_scale(s, mx_sum(loss, MX_ALL_DIMS, false));
  NOT_NULL(scaled);
  cr_assert_eq(mx_item(scaled), 98304.0);
  cr_assert_eq(mx_dtype_of(scaled), MX_F32);
  cr_assert_eq(at(loss, 0), 1.5, "the loss itself is untouched");
  const mx_tensor *scale = mx_scaler_scale_tensor(s);
  NOT_NULL(scale);
  cr_assert_eq(mx_dtype_of(scale), MX_F32);
  cr_assert_eq(mx_ndim(scale), 0);
  cr_assert_eq(mx_device_of(scale), MX_CPU);
  cr_assert_eq(mx_item(scale), 65536.0);
  OK(mx_backward(scaled, NULL, false));
  cr_assert_eq(grad_at(p, 0), 32768.0, "d(65536 * 0.5 p)/dp");
  /* the same scale tensor is reused by later calls */
  NOT_NULL(mx_scaler_scale(s, mx_scalar(-0.25, MX_F32, MX_CPU)));
  cr_assert_eq(mx_scaler_scale_tensor(s), scale);
  /* a float64 loss stays float64 (0-d times 0-d promotes) and is exact */
  mx_tensor *d = mx_scaler_scale(s, mx_scalar(1.0 / 3.0, MX_F64, MX_CPU));
  NOT_NULL(d);
  cr_assert_eq(mx_dtype_of(d), MX_F64);
  cr_assert_eq(mx_item(d), 65536.0 / 3.0);
  /* errors */
  cr_assert_null(mx_scaler_scale(s, NULL));
  cr_assert_eq(mx_last_status(), MX_NULL_INPUT);
}

Test(scaler, scale_list_scales_each_loss) {
  mx_scaler *s = scaler_init(1024.0, 2000);
  mx_tensor *losses[3] = {mx_scalar(1.5, MX_F32, MX_CPU), mx_scalar(-0.25, MX_F32, MX_CPU),
                          mx_full(MX_SHAPE(2), 3.0, MX_F32, MX_CPU)};
  mx_tensor *scaled[3];
  OK(mx_scaler_scale_list(s, 3, losses, scaled));
  cr_assert_eq(mx_item(scaled[0]), 1536.0);
  cr_assert_eq(mx_item(scaled[1]), -256.0);
  expect_values(scaled[2], 2, (double[]){3072.0, 3072.0});
  /* a NULL loss: an error, and every output is NULL or made before it */
  mx_tensor *bad[2] = {losses[0], NULL};
  mx_tensor *out[2] = {losses[0], losses[0]};
  cr_assert_neq(mx_scaler_scale_list(s, 2, bad, out), MX_OK);
  cr_assert_null(out[1]);
}

Test(scaler, scale_lives_on_the_cuda_device_of_the_loss) {
  /* runs where a CUDA device is (the GPU machines); elsewhere it only
   * checks that asking for one fails cleanly (no cr_skip_test: it ends the
   * process in a way valgrind counts as possibly leaking) */
  mx_tensor *probe = mx_zeros(MX_SHAPE(1), MX_F32, MX_CUDA);
  if (!probe) {
    cr_assert_neq(mx_last_status(), MX_OK);
    cr_log_info("no CUDA device (%s): the CUDA placement is not checked here", mx_last_error());
    mx_clear_error();
    return;
  }
  mx_scaler *s = default_scaler();
  mx_tensor *scaled = mx_scaler_scale(s, mx_scalar(0.5, MX_F32, MX_CUDA));
  NOT_NULL(scaled);
  cr_assert_eq(mx_device_of(scaled), MX_CUDA);
  cr_assert_eq(mx_device_of(mx_scaler_scale_tensor(s)), MX_CUDA);
  cr_assert_eq(mx_item(scaled), 32768.0);
}

/* --- unscale ----------------------------------------------------------------------- */

Test(scaler, unscale_divides_by_a_power_of_two_scale_exactly) {
  mx_scaler *s = default_scaler();
  mx_tensor *w = param(4, (float[]){1, 2, 3, 4}), *b = param(2, (float[]){0, 0}), *unused = param(1, (float[]){5});
  mx_tensor *params[3] = {w, unused, b};
  mx_optimizer *opt = sgd(3, params, 0.1);
  const float c[4] = {1.0f, -0.5f, 3.0f, 0x1p-20f};
  mx_tensor *loss = mx_add(mx_sum(mx_mul(w, vec(4, c)), MX_ALL_DIMS, false),
                           mx_sum(mx_mul(b, vec(2, (float[]){0.1f, -7.0f})), MX_ALL_DIMS, false));
  OK(mx_backward(mx_scaler_scale(s, loss), NULL, false));
  expect_values(mx_grad_of(w), 4, (double[]){65536.0, -32768.0, 196608.0, 0.0625});
  uint64_t version = mx_version(mx_grad_of(w));
  OK(mx_scaler_unscale(s, opt));
  expect_values(mx_grad_of(w), 4, (double[]){1.0, -0.5, 3.0, 0x1p-20});
  expect_values(mx_grad_of(b), 2, (double[]){0.1f, -7.0});
  cr_assert_null(mx_grad_of(unused), "a parameter without a gradient keeps none");
  cr_assert_gt(mx_version(mx_grad_of(w)), version, "unscaling writes the gradient in place");
  expect_values(w, 4, (double[]){1, 2, 3, 4}); /* unscale does not step */
}

Test(scaler, unscale_multiplies_by_the_f32_rounded_f64_inverse) {
  mx_scaler *s = scaler_init(3.0, 2000);
  prime(s);
  mx_tensor *f = param_full(4, 0, MX_F32), *d = param_full(2, 0, MX_F64), *h = param_full(3, 0, MX_BF16);
  mx_tensor *params[3] = {f, d, h};
  mx_optimizer *opt = sgd(3, params, 0.1);
  const float inv = (float)(1.0 / 3.0); /* 0x1.555556p-2, PyTorch's scale.double().reciprocal().float() */
  cr_assert_eq(inv, 0x1.555556p-2f);
  set_grad_f32(f, 4, (float[]){5.0f, 7.0f, 1.0f, 3.0f});
  set_grad(d, mx_from_data((double[]){1.0, 5.0}, MX_SHAPE(2), MX_F64, MX_CPU));
  /* bfloat16 1.0, 5.0, 3.0 */
  set_grad(h, mx_from_data((uint16_t[]){0x3f80, 0x40a0, 0x4040}, MX_SHAPE(3), MX_BF16, MX_CPU));
  OK(mx_scaler_unscale(s, opt));
  /* float32: the product with the rounded inverse, rounded to float32; 5 * inv is
   * 0x1.aaaaacp+0 where the true quotient 5 / 3 would round to 0x1.aaaaaap+0 */
  expect_values(mx_grad_of(f), 4, (double[]){0x1.aaaaacp+0, 0x1.2aaaacp+1, 0x1.555556p-2, 1.0});
  cr_assert_neq(grad_at(f, 0), (double)(5.0f / 3.0f));
  for (int i = 0; i < 4; i++) {
    float g = (float[]){5.0f, 7.0f, 1.0f, 3.0f}[i];
    cr_assert_eq((float)grad_at(f, i), g * inv);
  }
  /* float64: multiplied in float64 by the float32 inverse, not divided by 3 */
  expect_values(mx_grad_of(d), 2, (double[]){(double)inv, 5.0 * (double)inv});
  cr_assert_neq(grad_at(d, 0), 1.0 / 3.0);
  /* bfloat16: f32 product, rounded to nearest even: 0x3eaaaaab -> 0x3eab,
   * 0x3fd55556 -> 0x3fd5, 3 * inv = 1 exactly */
  expect_values(mx_grad_of(h), 3, (double[]){0.333984375, 1.6640625, 1.0});
  cr_assert_eq(mx_dtype_of(mx_grad_of(h)), MX_BF16);
  cr_assert_eq(mx_dtype_of(mx_grad_of(d)), MX_F64);
}

Test(scaler, float16_gradients_are_refused_before_anything_is_unscaled) {
  mx_scaler *s = default_scaler();
  prime(s);
  mx_tensor *w = param_full(2, 1.0, MX_F32), *h = param_full(2, 1.0, MX_F16);
  mx_tensor *params[2] = {w, h};
  mx_optimizer *opt = sgd(2, params, 0.5);
  set_grad_f32(w, 2, (float[]){65536.0f, 131072.0f});
  set_grad(h, mx_full(MX_SHAPE(2), 2.0, MX_F16, MX_CPU));
  cr_assert_eq(mx_scaler_unscale(s, opt), MX_DTYPE_ERROR);
  const char *prefix = "mx_scaler_unscale: Attempting to unscale FP16 gradients.";
  cr_assert_eq(strncmp(mx_last_error(), prefix, strlen(prefix)), 0, "%s", mx_last_error());
  expect_values(mx_grad_of(w), 2, (double[]){65536.0, 131072.0});
  cr_assert_eq(mx_scaler_step(s, opt, NULL), MX_DTYPE_ERROR);
  prefix = "mx_scaler_step: Attempting to unscale FP16 gradients.";
  cr_assert_eq(strncmp(mx_last_error(), prefix, strlen(prefix)), 0, "%s", mx_last_error());
  expect_values(w, 2, (double[]){1.0, 1.0});
  expect_values(h, 2, (double[]){1.0, 1.0});
  /* the failed calls left the optimizer READY: without the fp16 gradient it goes */
  mx_zero_grad(h);
  OK(mx_scaler_unscale(s, opt));
  expect_values(mx_grad_of(w), 2, (double[]){1.0, 2.0});
  OK(mx_scaler_step(s, opt, NULL));
  expect_values(w, 2, (double[]){0.5, 0.0});
  OK(mx_scaler_update(s));
}

Test(scaler, the_state_machine_errors_are_pytorchs) {
  mx_scaler *s = default_scaler();
  mx_tensor *p = param(2, (float[]){1.0f, 1.0f});
  mx_optimizer *opt = sgd(1, &p, 0.5);
  /* before any scale */
  FAILS(mx_scaler_unscale(s, opt), MX_STATE_ERROR,
        "mx_scaler_unscale: the scale is not set up: call mx_scaler_scale(loss) earlier in the iteration");
  FAILS(mx_scaler_step(s, opt, NULL), MX_STATE_ERROR,
        "mx_scaler_step: the scale is not set up: call mx_scaler_scale(loss) earlier in the iteration");
  FAILS(mx_scaler_update(s), MX_STATE_ERROR,
        "mx_scaler_update: the scale is not set up: call mx_scaler_scale(loss) earlier in the iteration");
  FAILS(mx_scaler_update_to(s, 2.0), MX_STATE_ERROR,
        "mx_scaler_update_to: the scale is not set up: call mx_scaler_scale(loss) earlier in the iteration");
  expect_values(p, 2, (double[]){1.0, 1.0});

  scaled_backward(s, p, vec(2, (float[]){1.0f, 2.0f}));
  FAILS(mx_scaler_update(s), MX_STATE_ERROR, "mx_scaler_update: No inf checks were recorded prior to update.");
  OK(mx_scaler_unscale(s, opt));
  FAILS(mx_scaler_unscale(s, opt), MX_STATE_ERROR,
        "mx_scaler_unscale: unscale_() has already been called on this optimizer since the last update().");
  expect_values(mx_grad_of(p), 2, (double[]){1.0, 2.0}); /* unscaled once only */
  OK(mx_scaler_step(s, opt, NULL));
  expect_values(p, 2, (double[]){0.5, 0.0});
  FAILS(mx_scaler_unscale(s, opt), MX_STATE_ERROR, "mx_scaler_unscale: unscale_() is being called after step().");
  FAILS(mx_scaler_step(s, opt, NULL), MX_STATE_ERROR,
        "mx_scaler_step: step() has already been called since the last update().");
  expect_values(p, 2, (double[]){0.5, 0.0}); /* stepped once only */
  expect_values(mx_grad_of(p), 2, (double[]){1.0, 2.0});
  OK(mx_scaler_update(s));
  FAILS(mx_scaler_update(s), MX_STATE_ERROR, "mx_scaler_update: No inf checks were recorded prior to update.");

  /* the next iteration starts READY again; step unscales by itself */
  OK(mx_optimizer_zero_grad(opt, true));
  scaled_backward(s, p, vec(2, (float[]){-1.0f, 4.0f}));
  OK(mx_scaler_step(s, opt, NULL));
  expect_values(mx_grad_of(p), 2, (double[]){-1.0, 4.0});
  expect_values(p, 2, (double[]){1.0, -2.0});
  OK(mx_scaler_update(s));

  /* NULL arguments */
  cr_assert_eq(mx_scaler_unscale(NULL, opt), MX_NULL_INPUT);
  cr_assert_eq(mx_scaler_unscale(s, NULL), MX_NULL_INPUT);
  cr_assert_eq(mx_scaler_step(s, NULL, NULL), MX_NULL_INPUT);
  cr_assert_eq(mx_scaler_update(NULL), MX_NULL_INPUT);
}

/* PyTorch's step asserts "No inf checks were recorded for this optimizer."
 * when none of its parameters has a gradient, and update() then refuses too:
 * a scale grown on unchecked gradients would be a guess. The scale stays,
 * the parameters stay, and the next real iteration runs as usual. */
Test(scaler, step_without_gradients_records_no_inf_check) {
  mx_scaler *s = scaler_init(1024.0, 1); /* growth after every clean step: a wrong update would show */
  mx_tensor *p = param(2, (float[]){1.0f, 1.0f});
  mx_optimizer *opt = sgd(1, &p, 0.5);
  prime(s);
  FAILS(mx_scaler_step(s, opt, NULL), MX_STATE_ERROR,
        "mx_scaler_step: No inf checks were recorded for this optimizer. (none of its 1 parameters has a "
        "gradient: was backward run on the scaled loss?)");
  FAILS(mx_scaler_update(s), MX_STATE_ERROR, "mx_scaler_update: No inf checks were recorded prior to update.");
  cr_assert_eq(mx_scaler_get_scale(s), 1024.0);
  expect_values(p, 2, (double[]){1.0, 1.0});
  cr_assert_eq(mx_scaler_stats_get(s).updates, 0);

  /* an explicit unscale of gradient-less parameters is no check either */
  OK(mx_scaler_unscale(s, opt));
  FAILS(mx_scaler_step(s, opt, NULL), MX_STATE_ERROR,
        "mx_scaler_step: No inf checks were recorded for this optimizer. (none of its 1 parameters has a "
        "gradient: was backward run on the scaled loss?)");
  FAILS(mx_scaler_update(s), MX_STATE_ERROR, "mx_scaler_update: No inf checks were recorded prior to update.");
  cr_assert_eq(mx_scaler_get_scale(s), 1024.0);

  scaled_backward(s, p, vec(2, (float[]){1.0f, 2.0f}));
  OK(mx_scaler_step(s, opt, NULL));
  expect_values(p, 2, (double[]){0.5, 0.0});
  OK(mx_scaler_update(s));
  cr_assert_eq(mx_scaler_get_scale(s), 2048.0);
}

/* A scaler's state (and a checkpoint holding it) is refused between
 * unscale/step and update: the iteration's checks would not be saved. */
Test(scaler, state_between_unscale_and_update_is_refused) {
  static const char refused[] =
      "mx_scaler_state_dict: a GradScaler may only be saved at the beginning of an iteration, or at its end after "
      "mx_scaler_update(): unscale or step has run since the last update, and that iteration's checks would be "
      "lost. Save after mx_scaler_update().";
  mx_scaler *s = scaler_init(8.0, 2000);
  mx_tensor *p = param(2, (float[]){1.0f, 1.0f});
  mx_optimizer *opt = sgd(1, &p, 0.5);
  mx_scaler_state st;
  scaled_backward(s, p, vec(2, (float[]){1.0f, 2.0f}));
  OK(mx_scaler_state_dict(s, &st)); /* after backward, before unscale: nothing checked yet */
  OK(mx_scaler_unscale(s, opt));
  FAILS(mx_scaler_state_dict(s, &st), MX_STATE_ERROR, refused);
  cr_assert_not(st.present);
  OK(mx_scaler_step(s, opt, NULL));
  FAILS(mx_scaler_state_dict(s, &st), MX_STATE_ERROR, refused);

  mx_module *net = mx_linear_new(2, 1, true, NULL);
  NOT_NULL(net);
  char path[] = "/tmp/mx_scaler_ckpt_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  mx_checkpoint ck = {.model = net, .scaler = s};
  mx_clear_error();
  cr_assert_eq(mx_checkpoint_save(path, &ck), MX_STATE_ERROR);
  cr_assert(strstr(mx_last_error(), refused), "%s", mx_last_error());

  OK(mx_scaler_update(s));
  OK(mx_scaler_state_dict(s, &st));
  cr_assert(st.present);
  cr_assert_eq(st.scale, 8.0);
  OK(mx_checkpoint_save(path, &ck));
  unlink(path);
  mx_module_free(net);
}

Test(scaler, step_after_explicit_unscale_does_not_unscale_again) {
  mx_scaler *s = scaler_init(256.0, 2000);
  mx_tensor *p = param(3, (float[]){0, 0, 0});
  mx_optimizer *opt = sgd(1, &p, 1.0);
  scaled_backward(s, p, vec(3, (float[]){0.5f, -1.5f, 8.0f}));
  OK(mx_scaler_unscale(s, opt));
  /* modify the unscaled gradients (what clipping does) */
  OK(mx_mul_scalar_(mx_grad_of(p), 0.5));
  mx_scaler_step_info info;
  OK(mx_scaler_step(s, opt, &info));
  cr_assert(info.stepped);
  expect_values(mx_grad_of(p), 3, (double[]){0.25, -0.75, 4.0});
  expect_values(p, 3, (double[]){-0.25, 0.75, -4.0});
  OK(mx_scaler_update(s));
}

/* --- step: a skipped step changes nothing ---------------------------------------------- */

typedef enum { SGD_NESTEROV, ADAM_AMSGRAD, ADAMW } opt_kind;

static mx_optimizer *make_optimizer(opt_kind kind, int n, mx_tensor **params) {
  if (kind == SGD_NESTEROV) {
    mx_sgd_opts o = mx_sgd_defaults();
    o.lr = 0.05, o.momentum = 0.9, o.weight_decay = 0.01, o.nesterov = true;
    return track(mx_sgd_new(n, params, &o));
  }
  mx_adam_opts o = kind == ADAMW ? mx_adamw_defaults() : mx_adam_defaults();
  o.lr = 0.01;
  o.amsgrad = kind == ADAM_AMSGRAD;
  return track(kind == ADAMW ? mx_adamw_new(n, params, &o) : mx_adam_new(n, params, &o));
}

static const char *const sgd_states[] = {"momentum_buffer", "step", NULL};
static const char *const adam_states[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step", NULL};
static const char *const adamw_states[] = {"exp_avg", "exp_avg_sq", "step", NULL};
static const char *const *states_of(opt_kind kind) {
  return kind == SGD_NESTEROV ? sgd_states : kind == ADAM_AMSGRAD ? adam_states : adamw_states;
}

/* Copies of every parameter and state tensor of opt. */
static int snapshot(mx_optimizer *opt, opt_kind kind, mx_tensor **out) {
  int k = 0;
  for (int i = 0; i < mx_optimizer_num_params(opt); i++) {
    out[k++] = mx_clone(mx_optimizer_param(opt, i));
    for (const char *const *name = states_of(kind); *name; name++) {
      mx_tensor *state = mx_optimizer_state(opt, i, *name);
      cr_assert_not_null(state, "%s of parameter %d: %s", *name, i, mx_last_error());
      out[k++] = mx_clone(state);
    }
  }
  return k;
}

/* Two parameters trained on gradient sets g[0..n); with a skip, an
 * overflowing set is inserted after the first step. */
static void train(opt_kind kind, bool with_skip, mx_tensor **final, int *n_final) {
  mx_generator *gen = mx_generator_new(11);
  mx_tensor *w = mx_randn(MX_SHAPE(2, 3), MX_F32, MX_CPU, gen), *b = mx_randn(MX_SHAPE(3), MX_F32, MX_CPU, gen);
  OK(mx_set_requires_grad(w, true));
  OK(mx_set_requires_grad(b, true));
  mx_tensor *params[2] = {w, b};
  mx_optimizer *opt = make_optimizer(kind, 2, params);
  mx_scaler *s = scaler_init(1024.0, 2);
  for (int it = 0; it < 5; it++) {
    mx_tensor *cw = mx_randn(MX_SHAPE(2, 3), MX_F32, MX_CPU, gen), *cb = mx_randn(MX_SHAPE(3), MX_F32, MX_CPU, gen);
    bool bad = with_skip && it == 1;
    if (bad) {
      OK(mx_set(cw, MX_SHAPE(0, 1), INFINITY));
      OK(mx_set(cw, MX_SHAPE(1, 2), -INFINITY));
      OK(mx_set(cb, MX_SHAPE(2), NAN));
    }
    if (!with_skip && it == 1) continue; /* the same draws, without the bad set */
    OK(mx_optimizer_zero_grad(opt, true));
    mx_tensor *loss = mx_add(mx_sum(mx_mul(w, cw), MX_ALL_DIMS, false), mx_sum(mx_mul(b, cb), MX_ALL_DIMS, false));
    OK(mx_backward(mx_scaler_scale(s, loss), NULL, false));
    mx_tensor *before[16];
    int n_before = bad ? snapshot(opt, kind, before) : 0;
    mx_scaler_step_info info;
    OK(mx_scaler_step(s, opt, &info));
    cr_assert_eq(info.stepped, !bad, "iteration %d", it);
    if (bad) {
      cr_assert_eq(info.infs, 2);
      cr_assert_eq(info.nans, 1);
      cr_assert_eq(info.params_with_nonfinite, 2);
      mx_tensor *after[16];
      cr_assert_eq(snapshot(opt, kind, after), n_before);
      for (int i = 0; i < n_before; i++) expect_bits_equal(before[i], after[i], "a parameter or state after a skip");
    } else {
      cr_assert_eq(info.infs + info.nans + info.params_with_nonfinite, 0);
    }
    OK(mx_scaler_update(s));
  }
  *n_final = snapshot(opt, kind, final);
  mx_scaler_stats st = mx_scaler_stats_get(s);
  cr_assert_eq(st.skipped, with_skip ? 1 : 0);
  /* with growth_interval 2: 4 clean updates grow twice (1024 -> 4096); with
   * the skip, backoff to 512 then clean, clean (grow), clean: 1024 */
  cr_assert_eq(st.scale, with_skip ? 1024.0 : 4096.0);
  mx_generator_free(gen);
}

static void skipped_step_leaves_no_trace(opt_kind kind) {
  mx_tensor *clean[16], *skipped[16];
  int n_clean, n_skipped;
  train(kind, false, clean, &n_clean);
  train(kind, true, skipped, &n_skipped);
  cr_assert_eq(n_clean, n_skipped);
  for (int i = 0; i < n_clean; i++) expect_bits_equal(clean[i], skipped[i], "the trajectory with a skipped step");
}

Test(scaler, skipped_step_leaves_sgd_momentum_untouched) { skipped_step_leaves_no_trace(SGD_NESTEROV); }
Test(scaler, skipped_step_leaves_adam_moments_and_steps_untouched) { skipped_step_leaves_no_trace(ADAM_AMSGRAD); }
Test(scaler, skipped_step_leaves_adamw_untouched) { skipped_step_leaves_no_trace(ADAMW); }

Test(scaler, skipped_step_keeps_the_step_counts) {
  mx_tensor *p = param(2, (float[]){1.0f, 2.0f});
  mx_optimizer *opt = make_optimizer(ADAM_AMSGRAD, 1, &p);
  mx_scaler *s = default_scaler();
  clean_iteration(s, opt, p);
  cr_assert_eq(mx_item(mx_optimizer_state(opt, 0, "step")), 1.0);
  inf_iteration(s, opt, p);
  cr_assert_eq(mx_item(mx_optimizer_state(opt, 0, "step")), 1.0);
  clean_iteration(s, opt, p);
  cr_assert_eq(mx_item(mx_optimizer_state(opt, 0, "step")), 2.0);
}

Test(scaler, step_info_counts_infs_nans_and_parameters) {
  mx_scaler *s = default_scaler();
  mx_tensor *a = param_full(5, 0, MX_F32), *b = param_full(3, 0, MX_F32), *c = param_full(2, 0, MX_F32);
  mx_tensor *params[3] = {a, b, c};
  mx_optimizer *opt = sgd(3, params, 0.5);
  prime(s);
  set_grad_f32(a, 5, (float[]){INFINITY, -INFINITY, NAN, 1.0f, INFINITY});
  set_grad_f32(b, 3, (float[]){1.0f, 2.0f, 3.0f});
  set_grad_f32(c, 2, (float[]){NAN, NAN});
  mx_scaler_step_info info;
  OK(mx_scaler_step(s, opt, &info));
  cr_assert_not(info.stepped);
  cr_assert_eq(info.infs, 3);
  cr_assert_eq(info.nans, 3);
  cr_assert_eq(info.params_with_nonfinite, 2);
  expect_values(a, 5, (double[]){0, 0, 0, 0, 0});
  expect_values(b, 3, (double[]){0, 0, 0});
  OK(mx_scaler_update(s));
  cr_assert_eq(mx_scaler_get_scale(s), 32768.0);
  /* a step without info works the same (and reads nothing back) */
  OK(mx_optimizer_zero_grad(opt, true));
  set_grad_f32(b, 3, (float[]){32768.0f, 0.0f, -65536.0f});
  OK(mx_scaler_step(s, opt, NULL));
  expect_values(b, 3, (double[]){-0.5, 0.0, 1.0});
  OK(mx_scaler_update(s));
}

/* The same scaled values as a float32, a float64 and a bfloat16 gradient
 * count the same infs, NaNs and values below float16's normal range (0,
 * 2^-20 and -2^-15 of the six), whether the unscale reads them by their
 * bits (dense float32) or as values (the other dtypes). */
Test(scaler, every_gradient_dtype_counts_infs_nans_and_underflows_alike) {
  const float scaled[6] = {INFINITY, NAN, 0.0f, 0x1p-20f, -0x1p-15f, 0x1p-14f};
  const mx_dtype dtypes[3] = {MX_F32, MX_F64, MX_BF16};
  for (int k = 0; k < 3; k++) {
    mx_scaler *s = default_scaler();
    mx_tensor *p = param_full(6, 0, dtypes[k]);
    mx_optimizer *opt = sgd(1, &p, 0.5);
    prime(s);
    set_grad(p, mx_to_dtype(vec(6, scaled), dtypes[k]));
    mx_scaler_step_info info;
    OK(mx_scaler_step(s, opt, &info));
    const char *name = mx_dtype_name(dtypes[k]);
    cr_expect_eq(info.infs, 1, "%s", name);
    cr_expect_eq(info.nans, 1, "%s", name);
    cr_expect_eq(info.params_with_nonfinite, 1, "%s", name);
    cr_expect_eq(mx_scaler_underflow_fraction(s, opt), 3.0 / 6.0, "%s: %g", name,
                 mx_scaler_underflow_fraction(s, opt));
    OK(mx_scaler_update(s));
  }
}
