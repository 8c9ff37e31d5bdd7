/* PyTorch's own GradScaler test cases, translated to mixgrad (section 6 of
 * the translation; test_pytorch_cases.c has section 1 and the sources and
 * adaptations common to all, test_pytorch_autocast.c sections 2-5). Every case asserts
 * PyTorch's values. */
#include <criterion/criterion.h>
#include <math.h>
#include <mixgrad.h>
#include <stdlib.h>
#include <string.h>

#include "pytorch_cases.h"

TestSuite(pytorch_scaling, .init = amp_suite_open, .fini = amp_suite_close);

/* ===================================================================================
 * 6. GradScaler
 * =================================================================================== */

/* test_cuda.py test_grad_scaling_update_scale: torch._amp_update_scale_ with
 * growth 2, backoff 0.25, growth_interval 2 from scale 4, tracker 0: two
 * unskipped iterations (tracker 1 and scale 4, then tracker 0 and scale 8),
 * then a skipped one (tracker 0, scale 2). mixgrad's kernel for it is
 * mx_amp_update_scale (kernels/math.h, the same on the CPU and CUDA). */
Test(pytorch_scaling, grad_scaling_update_scale) {
  float scale = 4.0f, found_inf = 0.0f;
  int32_t growth_tracker = 0;
  int64_t counters[3] = {0};
  const mx_amp_update_params p = {.growth_factor = 2.0, .backoff_factor = 0.25, .growth_interval = 2};
  mx_amp_update_scale(&scale, &growth_tracker, found_inf, &p, counters);
  cr_assert_eq(growth_tracker, 1);
  cr_assert_eq(scale, 4.0f);
  mx_amp_update_scale(&scale, &growth_tracker, found_inf, &p, counters);
  cr_assert_eq(growth_tracker, 0);
  cr_assert_eq(scale, 8.0f);
  found_inf = 1.0f;
  mx_amp_update_scale(&scale, &growth_tracker, found_inf, &p, counters);
  cr_assert_eq(growth_tracker, 0);
  cr_assert_eq(scale, 2.0f);
}

/* A scaler whose loss has gradients that are all finite, or hold an inf. */
static mx_tensor *toy_loss(mx_tensor *w, bool inf) {
  mx_tensor *c = mx_ones(mx_shape_get(w), MX_F32, MX_CPU);
  if (inf) OK(mx_set(c, MX_SHAPE(0), INFINITY));
  return mx_sum(mx_mul(w, c), MX_ALL_DIMS, false);
}

/* The same sequence through the scaler (GradScaler(init_scale=4,
 * growth_factor=2, backoff_factor=0.25, growth_interval=2)): update after
 * two clean iterations and a skipped one; the growth tracker read from the
 * state dict, as GradScaler._get_growth_tracker. Each iteration scales,
 * backpropagates and unscales the leaves' gradients (mx_scaler_backward,
 * which needs no optimizer) and updates. */
Test(pytorch_scaling, grad_scaling_update_scale_through_the_scaler) {
  mx_scaler_opts o = mx_scaler_defaults();
  o.init_scale = 4.0, o.growth_factor = 2.0, o.backoff_factor = 0.25, o.growth_interval = 2;
  mx_scaler *s = mx_scaler_new(&o);
  NOT_NULL(s);
  mx_tensor *w = leaf(mx_ones(MX_SHAPE(3), MX_F32, MX_CPU));
  const bool inf[3] = {false, false, true};
  const double scales[3] = {4.0, 8.0, 2.0};
  const int64_t trackers[3] = {1, 0, 0};
  for (int i = 0; i < 3; i++) {
    mx_zero_grad(w);
    OK(mx_scaler_backward(s, toy_loss(w, inf[i]), true, true));
    mx_scaler_state st;
    OK(mx_scaler_state_dict(s, &st));
    cr_assert_eq(st.growth_tracker, trackers[i], "iteration %d", i);
    cr_assert_eq(mx_scaler_get_scale(s), scales[i], "iteration %d", i);
  }
  mx_scaler_free(s);
}

/* test_cuda.py test_grad_scale_will_not_overflow: growth that would carry
 * the scale past float32's range leaves it where it is
 * (GradScaler(growth_interval=1, growth_factor=2**4, init_scale=1e38));
 * never inf or NaN. Through the kernel with a clean step, and through the
 * scaler with a Linear(5, 1) and Adam, as the test has it. */
Test(pytorch_scaling, grad_scale_will_not_overflow) {
  float scale = 1e38f;
  int32_t tracker = 0;
  int64_t counters[3] = {0};
  const mx_amp_update_params p = {.growth_factor = 16.0, .backoff_factor = 0.5, .growth_interval = 1};
  mx_amp_update_scale(&scale, &tracker, 0.0f, &p, counters);
  cr_assert_eq(scale, 1e38f);
  cr_assert_eq(tracker, 0);

  mx_generator *gen = mx_generator_new(5);
  linear_layer model = make_linear(5, 1, gen);
  mx_tensor *x = mx_randn(MX_SHAPE(1, 5), MX_F32, MX_CPU, gen);
  mx_tensor *y = mx_mul_scalar(mx_randn(MX_SHAPE(1, 1), MX_F32, MX_CPU, gen), 1e-30);
  mx_generator_free(gen);
  mx_tensor *params[2] = {model.weight, model.bias};
  mx_optimizer *opt = mx_adam_new(2, params, NULL);
  NOT_NULL(opt);
  mx_scaler_opts o = mx_scaler_defaults();
  o.growth_interval = 1, o.growth_factor = 16.0, o.init_scale = 1e38;
  mx_scaler *s = mx_scaler_new(&o);
  OK(mx_optimizer_zero_grad(opt, true));
  mx_tensor *d = mx_sub(apply_linear(&model, x), y);
  mx_tensor *l = mx_mean(mx_mul(d, d), MX_ALL_DIMS, false);
  OK(mx_backward(mx_scaler_scale(s, l), NULL, false));
  OK(mx_scaler_step(s, opt, NULL));
  OK(mx_scaler_update(s));
  double now = mx_scaler_get_scale(s);
  cr_assert(isfinite(now), "scale %g", now);
  cr_assert(now == (double)1e38f || now == (double)5e37f, "scale %g: kept, or backed off after an overflow", now);
  mx_scaler_free(s);
  mx_optimizer_free(opt);
}

/* test_torch.py test_grad_scaling_scale: GradScaler(init_scale=2.0).scale()
 * of several 4.0 tensors gives 8.0 each, and the scale lives on their
 * device. (PyTorch takes nested containers and tensors on two GPUs; here a
 * flat list on the CPU.) */
Test(pytorch_scaling, grad_scaling_scale) {
  mx_scaler_opts o = mx_scaler_defaults();
  o.init_scale = 2.0;
  mx_scaler *s = mx_scaler_new(&o);
  mx_tensor *outputs[6], *scaled[6];
  for (int i = 0; i < 6; i++) outputs[i] = mx_full(MX_SHAPE(1), 4.0, MX_F32, MX_CPU);
  OK(mx_scaler_scale_list(s, 6, outputs, scaled));
  for (int i = 0; i < 6; i++) cr_assert_eq(mx_item(scaled[i]), 8.0, "output %d", i);
  cr_assert_not_null(mx_scaler_scale_tensor(s));
  cr_assert_eq(mx_device_of(mx_scaler_scale_tensor(s)), MX_CPU);
  cr_assert_eq(mx_dtype_of(mx_scaler_scale_tensor(s)), MX_F32);
  mx_scaler_free(s);
}

/* test_torch.py test_grad_scaling_unscale, through the public API: PyTorch
 * calls _amp_foreach_non_finite_check_and_unscale_ on lists of gradients
 * of 4.0 with inv_scale 0.25 (found_inf 0 and every gradient 1.0), some
 * holding an inf or a NaN at [2, 2] (found_inf 1), contiguous, transposed
 * (g.t()) or sliced (g[:, :5]). Here the gradients are made that way by
 * backward: two (20, 20) float32 parameters, loss terms sum(p * c),
 * sum(p^T * c) or sum(p[:, :5] * c[:, :5]) with c ones (or an inf/NaN at
 * [2, 2]), scaled by 4.0; mx_scaler_unscale divides by 4 and records the
 * check, which a step then acts on (skipping the update when found). A
 * sliced term leaves zeros outside the slice, which stay zeros. */
typedef enum { G_FULL, G_T, G_SLICE } grad_form;
typedef enum { CLEAN, POISON_INF, POISON_NAN } poison;

static mx_tensor *grad_term(mx_tensor *p, grad_form form, poison what, mx_dtype dtype) {
  mx_tensor *c = mx_ones(MX_SHAPE(20, 20), dtype, MX_CPU);
  if (what != CLEAN) OK(mx_set(c, MX_SHAPE(2, 2), what == POISON_INF ? INFINITY : NAN));
  mx_tensor *term = form == G_FULL ? mx_mul(p, c)
                    : form == G_T  ? mx_mul(mx_transpose(p, 0, 1), mx_transpose(c, 0, 1))
                                   : mx_mul(mx_slice(p, 1, 0, 5, 1), mx_slice(c, 1, 0, 5, 1));
  return mx_sum(mx_to_dtype(term, MX_F32), MX_ALL_DIMS, false);
}

static void expect_unscaled(const char *what, const mx_tensor *g, grad_form form) {
  double *v = values_of(g);
  int bad = 0;
  for (int r = 0; r < 20; r++)
    for (int c = 0; c < 20; c++) bad += v[20 * r + c] != (form == G_SLICE && c >= 5 ? 0.0 : 1.0);
  free(v);
  cr_assert_eq(bad, 0, "%s: %d gradient values are not 4.0 / 4", what, bad);
}

/* Runs one list: returns whether the scaler found an inf/NaN (and checks
 * the parameters were left alone by the step when it did). */
static bool unscale_case(int n, const grad_form *forms, const poison *poisons, const mx_dtype *dtypes) {
  mx_tensor *params[4], *before[4];
  mx_tensor *loss = NULL;
  for (int i = 0; i < n; i++) {
    params[i] = leaf(mx_zeros(MX_SHAPE(20, 20), dtypes[i], MX_CPU));
    before[i] = mx_clone(mx_detach(params[i]));
    mx_tensor *term = grad_term(params[i], forms[i], poisons[i], dtypes[i]);
    loss = loss ? mx_add(loss, term) : term;
  }
  mx_sgd_opts so = mx_sgd_defaults();
  so.lr = 1.0;
  mx_optimizer *opt = mx_sgd_new(n, params, &so);
  NOT_NULL(opt);
  mx_scaler_opts o = mx_scaler_defaults();
  o.init_scale = 4.0; /* inv_scale 0.25 */
  mx_scaler *s = mx_scaler_new(&o);
  OK(mx_backward(mx_scaler_scale(s, loss), NULL, false));
  for (int i = 0; i < n; i++) {
    mx_tensor *g = mx_grad_of(params[i]);
    NOT_NULL(g);
    cr_assert_eq(mx_dtype_of(g), dtypes[i]);
  }
  OK(mx_scaler_unscale(s, opt));
  int with_nonfinite = mx_scaler_overflow_report(s, opt, NULL, NULL);
  mx_scaler_step_info info;
  OK(mx_scaler_step(s, opt, &info));
  bool found = !info.stepped;
  cr_assert_eq(found, with_nonfinite > 0);
  for (int i = 0; i < n; i++) {
    char what[64];
    snprintf(what, sizeof what, "parameter %d (%s)", i, mx_dtype_name(dtypes[i]));
    if (found) {
      expect_bitwise(what, params[i], before[i]); /* skipped: untouched */
    } else {
      expect_unscaled(what, mx_grad_of(params[i]), forms[i]);
      expect_close(what, params[i], mx_neg(mx_grad_of(params[i])), 0, 0); /* 0 - lr * 1 */
    }
  }
  mx_scaler_free(s);
  mx_optimizer_free(opt);
  return found;
}

Test(pytorch_scaling, grad_scaling_unscale) {
  static const struct {
    grad_form form[2];
    poison poison[2];
    bool has_inf;
  } cases[] = {
      {{G_FULL, G_FULL}, {CLEAN, CLEAN}, false},           /* [g, g] */
      {{G_FULL, G_T}, {CLEAN, CLEAN}, false},              /* [g, g.t()] */
      {{G_FULL, G_SLICE}, {CLEAN, CLEAN}, false},          /* [g, g[:, :5]] */
      {{G_SLICE, G_SLICE}, {CLEAN, CLEAN}, false},         /* [g[:, :5], g[:, :5]] */
      {{G_FULL, G_FULL}, {CLEAN, POISON_INF}, true},       /* [g, ginf] */
      {{G_FULL, G_FULL}, {CLEAN, POISON_NAN}, true},       /* [g, gnan] */
      {{G_FULL, G_SLICE}, {CLEAN, POISON_INF}, true},      /* [g, ginf[:, :5]] */
      {{G_FULL, G_SLICE}, {CLEAN, POISON_NAN}, true},      /* [g, gnan[:, :5]] */
      {{G_FULL, G_SLICE}, {POISON_INF, CLEAN}, true},      /* [ginf, g[:, :5]] */
      {{G_SLICE, G_SLICE}, {POISON_INF, CLEAN}, true},     /* [ginf[:, :5], g[:, :5]] */
      {{G_T, G_FULL}, {POISON_NAN, CLEAN}, true},          /* a NaN through a transpose */
  };
  const mx_dtype f32[2] = {MX_F32, MX_F32};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    cr_assert_eq(unscale_case(2, cases[k].form, cases[k].poison, f32), cases[k].has_inf, "case %zu", k);
}

/* test_torch.py test_grad_scaling_unscale, its "perfect storm": gradients of
 * several dtypes (and layouts) in one optimizer; _unscale_grads_ sorts them
 * out, and an inf in any one of them is found. PyTorch's storm has float16
 * gradients, which only the private allow_fp16=True path takes; the public
 * unscale_ refuses them ("Attempting to unscale FP16 gradients."), and so
 * does mixgrad. Here the storm is float32, float32 sliced, bfloat16 and
 * float64, which unscale_ takes. */
Test(pytorch_scaling, grad_scaling_unscale_perfect_storm) {
  const grad_form forms[4] = {G_FULL, G_SLICE, G_FULL, G_FULL};
  const mx_dtype dtypes[4] = {MX_F32, MX_F32, MX_BF16, MX_F64};
  for (int inject_inf = -1; inject_inf < 4; inject_inf++) {
    poison poisons[4] = {CLEAN, CLEAN, CLEAN, CLEAN};
    if (inject_inf >= 0) poisons[inject_inf] = POISON_INF;
    cr_assert_eq(unscale_case(4, forms, poisons, dtypes), inject_inf >= 0, "inf injected into %d", inject_inf);
  }
}

/* grad_scaler.py _unscale_grads_(allow_fp16=False), reached from unscale_
 * and step: "Attempting to unscale FP16 gradients." */
Test(pytorch_scaling, grad_scaling_refuses_fp16_gradients) {
  mx_tensor *p = leaf(mx_ones(MX_SHAPE(4), MX_F16, MX_CPU));
  mx_optimizer *opt = mx_sgd_new(1, &p, NULL);
  NOT_NULL(opt);
  mx_scaler *s = mx_scaler_new(NULL);
  OK(mx_backward(mx_scaler_scale(s, mx_sum(mx_to_dtype(p, MX_F32), MX_ALL_DIMS, false)), NULL, false));
  cr_assert_eq(mx_scaler_unscale(s, opt), MX_DTYPE_ERROR);
  cr_assert(strstr(mx_last_error(), "Attempting to unscale FP16 gradients."), "%s", mx_last_error());
  mx_scaler_free(s);
  mx_optimizer_free(opt);
}

/* grad_scaler.py's state machine, as PyTorch's messages have it:
 * unscale_ twice, unscale_ after step, step twice, update without any
 * inf check recorded. */
Test(pytorch_scaling, grad_scaling_call_order) {
  mx_tensor *p = leaf(mx_ones(MX_SHAPE(4), MX_F32, MX_CPU));
  mx_optimizer *opt = mx_sgd_new(1, &p, NULL);
  mx_scaler *s = mx_scaler_new(NULL);
  OK(mx_backward(mx_scaler_scale(s, mx_sum(p, MX_ALL_DIMS, false)), NULL, false));
  cr_assert_eq(mx_scaler_update(s), MX_STATE_ERROR);
  cr_assert(strstr(mx_last_error(), "No inf checks were recorded prior to update."), "%s", mx_last_error());
  OK(mx_scaler_unscale(s, opt));
  cr_assert_eq(mx_scaler_unscale(s, opt), MX_STATE_ERROR);
  cr_assert(strstr(mx_last_error(), "unscale_() has already been called on this optimizer since the last update()."),
            "%s", mx_last_error());
  OK(mx_scaler_step(s, opt, NULL));
  cr_assert_eq(mx_scaler_unscale(s, opt), MX_STATE_ERROR);
  cr_assert(strstr(mx_last_error(), "unscale_() is being called after step()."), "%s", mx_last_error());
  cr_assert_eq(mx_scaler_step(s, opt, NULL), MX_STATE_ERROR);
  cr_assert(strstr(mx_last_error(), "step() has already been called since the last update()."), "%s",
            mx_last_error());
  OK(mx_scaler_update(s));
  mx_scaler_free(s);
  mx_optimizer_free(opt);
}

/* test_cuda.py test_grad_scaling_state_dict: for lazy_init_scale in (True,
 * False): s0 = GradScaler(init_scale=3, growth_factor=4, backoff_factor=.5,
 * growth_interval=2), s1 = GradScaler(6, 7, .8, 1); with lazy_init_scale a
 * scale() call makes s1's scale tensor first (a float32 tensor); after
 * s1.load_state_dict(s0.state_dict()) s1 has s0's scale, factors, interval
 * and a growth tracker of 0. (PyTorch also pokes s1._init_growth_tracker =
 * 7 beforehand, a private field with no counterpart.) */
Test(pytorch_scaling, grad_scaling_state_dict) {
  for (int lazy_init_scale = 1; lazy_init_scale >= 0; lazy_init_scale--) {
    mx_scaler_opts o0 = mx_scaler_defaults(), o1 = mx_scaler_defaults();
    o0.init_scale = 3, o0.growth_factor = 4, o0.backoff_factor = .5, o0.growth_interval = 2;
    o1.init_scale = 6, o1.growth_factor = 7, o1.backoff_factor = .8, o1.growth_interval = 1;
    mx_scaler *s0 = mx_scaler_new(&o0), *s1 = mx_scaler_new(&o1);
    if (lazy_init_scale) {
      NOT_NULL(mx_scaler_scale(s1, mx_full(MX_SHAPE(1), 4.0, MX_F32, MX_CPU)));
      cr_assert_not_null(mx_scaler_scale_tensor(s1));
      cr_assert_eq(mx_dtype_of(mx_scaler_scale_tensor(s1)), MX_F32);
    }
    mx_scaler_state st;
    OK(mx_scaler_state_dict(s0, &st));
    OK(mx_scaler_load_state_dict(s1, &st));
    cr_assert_eq(mx_scaler_get_scale(s1), 3.0);
    cr_assert_eq(mx_scaler_get_growth_factor(s1), 4.0);
    cr_assert_eq(mx_scaler_get_backoff_factor(s1), 0.5);
    cr_assert_eq(mx_scaler_get_growth_interval(s1), 2);
    OK(mx_scaler_state_dict(s1, &st));
    cr_assert_eq(st.growth_tracker, 0);
    mx_scaler_free(s0);
    mx_scaler_free(s1);
  }
}

/* grad_scaler.py state_dict / load_state_dict: the state carries the growth
 * tracker (_get_growth_tracker), so a scaler restored mid-interval grows on
 * the same step as the original (test_grad_scaling_autocast's try_pickle
 * round trip relies on it); a disabled scaler's state is empty, and
 * loading an empty state raises "The source state dict is empty, possibly
 * because it was saved from a disabled instance of GradScaler." */
Test(pytorch_scaling, grad_scaling_state_dict_round_trip) {
  mx_scaler_opts o = mx_scaler_defaults();
  o.init_scale = 16, o.growth_interval = 3;
  mx_scaler *a = mx_scaler_new(&o);
  mx_tensor *w = leaf(mx_ones(MX_SHAPE(2), MX_F32, MX_CPU));
  for (int i = 0; i < 2; i++) {
    mx_zero_grad(w);
    OK(mx_scaler_backward(a, toy_loss(w, false), true, true));
  }
  mx_scaler_state st;
  OK(mx_scaler_state_dict(a, &st));
  cr_assert(st.present);
  cr_assert_eq(st.growth_tracker, 2);
  cr_assert_eq(st.scale, 16.0);
  mx_scaler *b = mx_scaler_new(NULL);
  OK(mx_scaler_load_state_dict(b, &st));
  for (mx_scaler **s = (mx_scaler *[]){a, b, NULL}; *s; s++) {
    mx_zero_grad(w);
    OK(mx_scaler_backward(*s, toy_loss(w, false), true, true));
    cr_assert_eq(mx_scaler_get_scale(*s), 32.0, "the third clean step grows the scale, restored or not");
  }
  mx_scaler_opts off = mx_scaler_defaults();
  off.enabled = false;
  mx_scaler *d = mx_scaler_new(&off);
  mx_scaler_state empty;
  OK(mx_scaler_state_dict(d, &empty));
  cr_assert_not(empty.present);
  cr_assert_eq(mx_scaler_load_state_dict(b, &empty), MX_STATE_ERROR);
  cr_assert(strstr(mx_last_error(), "The source state dict is empty, possibly because it was saved from a disabled "
                                    "instance of GradScaler."),
            "%s", mx_last_error());
  mx_scaler_free(a);
  mx_scaler_free(b);
  mx_scaler_free(d);
}

/* GradScaler.load_state_dict(state_dict()) restores any state the scaler
 * can be in (PyTorch copies the five fields without checks). One such
 * state: five clean steps at growth_interval 2000 (tracker 5), then
 * set_growth_interval(4), a legal call. This suite found mixgrad refusing
 * its own state dict there ("growth_tracker 5 is outside [0,
 * growth_interval 4)"); fixed, and kept as a regression test. */
Test(pytorch_scaling, grad_scaling_state_dict_round_trips_any_state) {
  mx_scaler *a = mx_scaler_new(NULL);
  mx_tensor *w = leaf(mx_ones(MX_SHAPE(2), MX_F32, MX_CPU));
  for (int i = 0; i < 5; i++) {
    mx_zero_grad(w);
    OK(mx_scaler_backward(a, toy_loss(w, false), true, true));
  }
  OK(mx_scaler_set_growth_interval(a, 4));
  mx_scaler_state st;
  OK(mx_scaler_state_dict(a, &st));
  cr_assert_eq(st.growth_tracker, 5);
  cr_assert_eq(st.growth_interval, 4);
  mx_scaler *b = mx_scaler_new(NULL);
  mx_status status = mx_scaler_load_state_dict(b, &st);
  char error[256];
  snprintf(error, sizeof error, "%s", status == MX_OK ? "" : mx_last_error());
  mx_clear_error(); /* grad_scaling_state_dict_after_an_error: state_dict would report it */
  mx_scaler_state back;
  OK(mx_scaler_state_dict(b, &back));
  mx_scaler_free(a);
  mx_scaler_free(b);
  cr_assert_eq(status, MX_OK, "load_state_dict(state_dict()) must round trip: %s", error);
  cr_assert_eq(back.growth_tracker, 5);
  cr_assert_eq(back.growth_interval, 4);
}

/* GradScaler.state_dict() reads the scaler's fields and cannot fail. This
 * suite found mx_scaler_state_dict returning mx_last_status(), the status of
 * whatever mixgrad call last failed on this thread, so that after any
 * unrelated error (here mx_autocast_end with no region open) a good
 * scaler's state_dict reported that error; fixed, and kept as a regression
 * test. */
Test(pytorch_scaling, grad_scaling_state_dict_after_an_error) {
  mx_scaler *s = mx_scaler_new(NULL);
  mx_scaler_state st;
  cr_assert_eq(mx_autocast_end(), MX_STATE_ERROR); /* an unrelated failure */
  mx_status fresh = mx_scaler_state_dict(s, &st);
  NOT_NULL(mx_scaler_scale(s, mx_ones(MX_SHAPE(1), MX_F32, MX_CPU)));
  mx_status initialised = mx_scaler_state_dict(s, &st);
  mx_scaler_free(s);
  cr_assert_eq(fresh, MX_OK, "state_dict of a fresh scaler returned %s", mx_status_str(fresh));
  cr_assert_eq(initialised, MX_OK, "state_dict after scale() returned %s", mx_status_str(initialised));
  cr_assert(st.present);
  cr_assert_eq(st.scale, 65536.0);
}

/* -----------------------------------------------------------------------------------
 * Scaled against unscaled training (test_cuda.py _run_scaling_case and the
 * tests built on it). common_cuda.py _create_scaling_case: two copies of
 * Sequential(Linear(8, 8), Linear(8, 8)), one trained plainly (control) and
 * one with the scaler (scaling), each with its own optimizer (lr 1.0);
 * four (8, 8) batches of randn input and target; MSELoss; skip_iter 2,
 * where the scaling run writes inf into model[1].weight.grad and the
 * control run skips its step. GradScaler(init_scale=128, growth_factor=2,
 * growth_interval=1, enabled=enabled) for enabled in (True, False); after
 * the run the scale is 128 * 2^unskipped * 0.5^skipped (1.0 disabled), and
 * the gradients, optimizer state and parameters of the two copies agree.
 * ----------------------------------------------------------------------------------- */

typedef struct {
  mx_tensor *p[4]; /* model[0].weight, model[0].bias, model[1].weight, model[1].bias */
} mlp;

typedef enum { OPT_SGD, OPT_ADAM, OPT_ADAMW, OPT_ADAM_AMSGRAD, OPT_ADAMW_AMSGRAD } opt_kind;

typedef struct {
  mlp control, scaling;
  mx_optimizer *opt_control, *opt_scaling;
  mx_tensor *input[4], *target[4];
  int skip_iter;
} scaling_case;

static mx_tensor *mlp_forward(const mlp *m, const mx_tensor *x) {
  return mx_linear(mx_linear(x, m->p[0], m->p[1]), m->p[2], m->p[3]);
}

static mx_optimizer *make_optimizer(opt_kind kind, mlp *m) {
  if (kind == OPT_SGD) {
    mx_sgd_opts o = mx_sgd_defaults();
    o.lr = 1.0;
    return mx_sgd_new(4, m->p, &o);
  }
  bool w = kind == OPT_ADAMW || kind == OPT_ADAMW_AMSGRAD;
  mx_adam_opts o = w ? mx_adamw_defaults() : mx_adam_defaults();
  o.lr = 1.0;
  o.amsgrad = kind == OPT_ADAM_AMSGRAD || kind == OPT_ADAMW_AMSGRAD;
  return w ? mx_adamw_new(4, m->p, &o) : mx_adam_new(4, m->p, &o);
}

/* _create_scaling_models_optimizers: the scaling copy's parameters are the
 * control's, copied. */
static void create_models(mlp *control, mlp *scaling, mx_generator *gen) {
  const mx_shape shapes[4] = {MX_SHAPE(8, 8), MX_SHAPE(8), MX_SHAPE(8, 8), MX_SHAPE(8)};
  for (int i = 0; i < 4; i++) {
    mx_tensor *init = mx_mul_scalar(mx_add_scalar(mx_rand(shapes[i], MX_F32, MX_CPU, gen), -0.5), 2 / sqrt(8.0));
    control->p[i] = leaf(mx_clone(init));
    scaling->p[i] = leaf(mx_clone(init));
  }
}

static void create_scaling_case(scaling_case *c, opt_kind kind) {
  mx_generator *gen = mx_generator_new(8);
  create_models(&c->control, &c->scaling, gen);
  for (int i = 0; i < 4; i++) {
    c->input[i] = mx_randn(MX_SHAPE(8, 8), MX_F32, MX_CPU, gen);
    c->target[i] = mx_randn(MX_SHAPE(8, 8), MX_F32, MX_CPU, gen);
  }
  mx_generator_free(gen);
  c->opt_control = make_optimizer(kind, &c->control);
  c->opt_scaling = make_optimizer(kind, &c->scaling);
  NOT_NULL(c->opt_control);
  NOT_NULL(c->opt_scaling);
  c->skip_iter = 2;
}

static mx_tensor *loss_fn(const mx_tensor *output, const mx_tensor *target) {
  return mx_mse_loss(output, target, MX_REDUCTION_MEAN);
}

static void poison_grad(mx_tensor *p) { OK(mx_fill_(mx_grad_of(p), INFINITY)); }

/* Compares the two copies: gradients (both may be none), the optimizer's
 * state under PyTorch's names, parameters. */
static void compare_copies(const mlp *c, const mlp *s, mx_optimizer *oc, mx_optimizer *os, int first, double atol,
                           double rtol) {
  static const char *const state_names[] = {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"};
  for (int i = 0; i < 4; i++) {
    char what[96];
    mx_tensor *gc = mx_grad_of(c->p[i]), *gs = mx_grad_of(s->p[i]);
    snprintf(what, sizeof what, "parameter %d's grad", i);
    cr_assert_eq(gc == NULL, gs == NULL, "%s: present in one copy only", what);
    if (gc) expect_close(what, gs, gc, atol, rtol);
    for (size_t k = 0; k < sizeof state_names / sizeof *state_names; k++) {
      mx_tensor *sc = mx_optimizer_state(oc, first + i, state_names[k]);
      mx_tensor *ss = mx_optimizer_state(os, first + i, state_names[k]);
      mx_clear_error();
      cr_assert_eq(sc == NULL, ss == NULL, "state %s", state_names[k]);
      if (!sc) continue;
      snprintf(what, sizeof what, "parameter %d's %s", i, state_names[k]);
      expect_close(what, ss, sc, atol, rtol);
      mx_release(sc);
      mx_release(ss);
    }
    snprintf(what, sizeof what, "parameter %d", i);
    expect_close(what, s->p[i], c->p[i], atol, rtol);
  }
}

typedef void (*scaling_run)(scaling_case *c, mlp *m, mx_optimizer *opt, mx_scaler **s, bool try_scaling_api);

static bool try_pickle; /* test_grad_scaling_autocast's second pass */

static void run_scaling_case(scaling_run run, int unskipped, int skipped, double atol, opt_kind kind) {
  for (int enabled = 1; enabled >= 0; enabled--) {
    scaling_case c;
    create_scaling_case(&c, kind);
    mx_scaler_opts o = mx_scaler_defaults();
    o.init_scale = 128.0, o.growth_factor = 2.0, o.growth_interval = 1, o.enabled = enabled;
    mx_scaler *s = mx_scaler_new(&o);
    NOT_NULL(s);
    run(&c, &c.control, c.opt_control, &s, false);
    run(&c, &c.scaling, c.opt_scaling, &s, true);
    if (enabled)
      cr_assert_eq(mx_scaler_get_scale(s), 128.0 * pow(mx_scaler_get_growth_factor(s), unskipped) *
                                               pow(mx_scaler_get_backoff_factor(s), skipped),
                   "scale %g", mx_scaler_get_scale(s));
    else
      cr_assert_eq(mx_scaler_get_scale(s), 1.0);
    compare_copies(&c.control, &c.scaling, c.opt_control, c.opt_scaling, 0, atol, 1e-5);
    mx_scaler_free(s);
    mx_optimizer_free(c.opt_control);
    mx_optimizer_free(c.opt_scaling);
  }
}

/* pickle.loads(pickle.dumps(scaler)), as state_dict / load_state_dict */
static void pickle_round_trip(mx_scaler **s) {
  mx_scaler_opts o = mx_scaler_defaults();
  o.enabled = mx_scaler_is_enabled(*s);
  mx_scaler *copy = mx_scaler_new(&o);
  NOT_NULL(copy);
  mx_scaler_state st;
  OK(mx_scaler_state_dict(*s, &st));
  if (st.present) OK(mx_scaler_load_state_dict(copy, &st));
  mx_scaler_free(*s);
  *s = copy;
}

/* test_cuda.py _grad_scaling_autocast_test / test_grad_scaling_autocast:
 * no scaling and no autocast against scaling and autocast (a float16
 * region, atol 1e-3 for pure float32 against float16 arithmetic), with
 * SGD, then again with the scaler pickled after every update. PyTorch runs
 * Adam and AdamW too but expects them to miss the tolerance (assertRaises
 * AssertionError), so they are not repeated here. */
static void run_autocast(scaling_case *c, mlp *m, mx_optimizer *opt, mx_scaler **s, bool try_scaling_api) {
  for (int i = 0; i < 4; i++) {
    OK(mx_optimizer_zero_grad(opt, true));
    mx_tensor *loss = NULL;
    MX_AUTOCAST(MX_CPU, MX_F16, try_scaling_api, true) { loss = loss_fn(mlp_forward(m, c->input[i]), c->target[i]); }
    NOT_NULL(loss);
    if (try_scaling_api) {
      OK(mx_backward(mx_scaler_scale(*s, loss), NULL, false));
      if (i == c->skip_iter && mx_scaler_is_enabled(*s)) poison_grad(m->p[2]);
      OK(mx_scaler_step(*s, opt, NULL));
      OK(mx_scaler_update(*s));
      if (try_pickle) pickle_round_trip(s);
    } else {
      OK(mx_backward(loss, NULL, false));
      if (!mx_scaler_is_enabled(*s) || i != c->skip_iter) OK(mx_optimizer_step(opt));
    }
  }
}

Test(pytorch_scaling, grad_scaling_autocast) {
  try_pickle = false;
  run_scaling_case(run_autocast, 3, 1, 1e-3, OPT_SGD);
  try_pickle = true;
  run_scaling_case(run_autocast, 3, 1, 1e-3, OPT_SGD);
}

/* torch.nn.utils.clip_grad_norm_(params, max_norm): the 2-norm of the
 * gradients' 2-norms, clip_coef = max_norm / (total + 1e-6) clamped to 1,
 * every gradient multiplied by it in place. */
static void clip_grad_norm(mlp *m, double max_norm) {
  mx_tensor *norms[4];
  for (int i = 0; i < 4; i++) norms[i] = mx_norm(mx_grad_of(m->p[i]), 2, MX_ALL_DIMS, false);
  mx_tensor *total = mx_norm(mx_stack(4, norms, 0), 2, MX_ALL_DIMS, false);
  mx_tensor *coef = mx_clamp(mx_rdiv_scalar(max_norm, mx_add_scalar(total, 1e-6)), -INFINITY, 1.0);
  NOT_NULL(coef);
  for (int i = 0; i < 4; i++) OK(mx_mul_(mx_grad_of(m->p[i]), coef));
}

/* test_cuda.py test_grad_scaling_clipping: clip the scaled gradients at
 * max_norm * scale (max_norm 0.2); the inf goes in after clipping
 * (atol 1e-5). */
static void run_clipping(scaling_case *c, mlp *m, mx_optimizer *opt, mx_scaler **s, bool try_scaling_api) {
  const double max_norm = 0.2;
  for (int i = 0; i < 4; i++) {
    OK(mx_optimizer_zero_grad(opt, true));
    mx_tensor *loss = loss_fn(mlp_forward(m, c->input[i]), c->target[i]);
    if (try_scaling_api) {
      OK(mx_backward(mx_scaler_scale(*s, loss), NULL, false));
      clip_grad_norm(m, max_norm * mx_scaler_get_scale(*s));
      if (i == c->skip_iter && mx_scaler_is_enabled(*s)) poison_grad(m->p[2]);
      OK(mx_scaler_step(*s, opt, NULL));
      OK(mx_scaler_update(*s));
    } else {
      OK(mx_backward(loss, NULL, false));
      clip_grad_norm(m, max_norm);
      if (!mx_scaler_is_enabled(*s) || i != c->skip_iter) OK(mx_optimizer_step(opt));
    }
  }
}

Test(pytorch_scaling, grad_scaling_clipping) { run_scaling_case(run_clipping, 3, 1, 1e-5, OPT_SGD); }

/* test_cuda.py test_grad_scaling_clipping_separate_unscale: inf in, then
 * unscale_, then clip at max_norm (error_if_nonfinite=False); default
 * tolerance (atol 1e-7). */
static void run_clipping_separate_unscale(scaling_case *c, mlp *m, mx_optimizer *opt, mx_scaler **s,
                                          bool try_scaling_api) {
  const double max_norm = 0.2;
  for (int i = 0; i < 4; i++) {
    OK(mx_optimizer_zero_grad(opt, true));
    mx_tensor *loss = loss_fn(mlp_forward(m, c->input[i]), c->target[i]);
    if (try_scaling_api) {
      OK(mx_backward(mx_scaler_scale(*s, loss), NULL, false));
      if (i == c->skip_iter && mx_scaler_is_enabled(*s)) poison_grad(m->p[2]);
      OK(mx_scaler_unscale(*s, opt));
      clip_grad_norm(m, max_norm);
      OK(mx_scaler_step(*s, opt, NULL));
      OK(mx_scaler_update(*s));
    } else {
      OK(mx_backward(loss, NULL, false));
      clip_grad_norm(m, max_norm);
      if (!mx_scaler_is_enabled(*s) || i != c->skip_iter) OK(mx_optimizer_step(opt));
    }
  }
}

Test(pytorch_scaling, grad_scaling_clipping_separate_unscale) {
  run_scaling_case(run_clipping_separate_unscale, 3, 1, 1e-7, OPT_SGD);
}

/* test_cuda.py test_grad_scaling_penalty: a gradient penalty. The scaled
 * run takes torch.autograd.grad(scaler.scale(loss), params,
 * create_graph=True), multiplies by 1 / get_scale(), adds the gradients'
 * 2-norm to the loss, then scales, backpropagates and steps as usual. */
static void run_penalty(scaling_case *c, mlp *m, mx_optimizer *opt, mx_scaler **s, bool try_scaling_api) {
  for (int i = 0; i < 4; i++) {
    OK(mx_optimizer_zero_grad(opt, true));
    mx_tensor *loss = loss_fn(mlp_forward(m, c->input[i]), c->target[i]);
    mx_tensor *grad_params[4];
    if (try_scaling_api) {
      mx_tensor *scaled = mx_scaler_scale(*s, loss);
      OK(mx_grad(1, &scaled, 4, m->p, NULL, true, true, false, grad_params));
      double inv_scale = 1.0 / mx_scaler_get_scale(*s);
      for (int k = 0; k < 4; k++) grad_params[k] = mx_mul_scalar(grad_params[k], inv_scale);
    } else {
      OK(mx_grad(1, &loss, 4, m->p, NULL, true, true, false, grad_params));
    }
    mx_tensor *grad_norm = NULL;
    for (int k = 0; k < 4; k++) {
      mx_tensor *sq = mx_sum(mx_pow_scalar(grad_params[k], 2), MX_ALL_DIMS, false);
      grad_norm = grad_norm ? mx_add(grad_norm, sq) : sq;
    }
    loss = mx_add(loss, mx_sqrt(grad_norm));
    NOT_NULL(loss);
    if (try_scaling_api) {
      OK(mx_backward(mx_scaler_scale(*s, loss), NULL, false));
      if (i == c->skip_iter && mx_scaler_is_enabled(*s)) poison_grad(m->p[2]);
      OK(mx_scaler_step(*s, opt, NULL));
      OK(mx_scaler_update(*s));
    } else {
      OK(mx_backward(loss, NULL, false));
      if (!mx_scaler_is_enabled(*s) || i != c->skip_iter) OK(mx_optimizer_step(opt));
    }
  }
}

Test(pytorch_scaling, grad_scaling_penalty) { run_scaling_case(run_penalty, 3, 1, 1e-7, OPT_SGD); }

/* test_cuda.py test_grad_scaling_accumulation: losses divided by
 * iters_to_accumulate = 2, gradients accumulated over two batches, one
 * step, update and zero_grad per two; nothing skipped. */
static void run_accumulation(scaling_case *c, mlp *m, mx_optimizer *opt, mx_scaler **s, bool try_scaling_api) {
  const int iters_to_accumulate = 2;
  for (int i = 0; i < 4; i++) {
    mx_tensor *loss = mx_div_scalar(loss_fn(mlp_forward(m, c->input[i]), c->target[i]), iters_to_accumulate);
    OK(mx_backward(try_scaling_api ? mx_scaler_scale(*s, loss) : loss, NULL, false));
    if ((i + 1) % iters_to_accumulate == 0) {
      if (try_scaling_api) {
        OK(mx_scaler_step(*s, opt, NULL));
        OK(mx_scaler_update(*s));
      } else {
        OK(mx_optimizer_step(opt));
      }
      OK(mx_optimizer_zero_grad(opt, true));
    }
  }
}

Test(pytorch_scaling, grad_scaling_accumulation) { run_scaling_case(run_accumulation, 2, 0, 1e-7, OPT_SGD); }

/* test_cuda.py test_grad_scaling_multiple: two models, two optimizers, two
 * losses that both reach both models (loss0 = mse(0.3 out0 + 0.7 out1),
 * loss1 = mse(0.6 out0 - 0.4 out1)); backward of both scaled losses
 * (retain_graph for the first), inf into model1[1].weight.grad at
 * skip_iter, a separate unscale_ for optimizer0, step both, update once:
 * the scale grows three times and backs off once; the parameters match
 * the control run (rtol 1e-5, atol 1e-7). */
Test(pytorch_scaling, grad_scaling_multiple) {
  for (int enabled = 1; enabled >= 0; enabled--) {
    scaling_case c0, c1;
    create_scaling_case(&c0, OPT_SGD);
    mx_generator *gen = mx_generator_new(80);
    create_models(&c1.control, &c1.scaling, gen);
    mx_generator_free(gen);
    c1.opt_control = make_optimizer(OPT_SGD, &c1.control);
    c1.opt_scaling = make_optimizer(OPT_SGD, &c1.scaling);
    mx_scaler_opts o = mx_scaler_defaults();
    o.init_scale = 128.0, o.growth_factor = 2.0, o.growth_interval = 1, o.enabled = enabled;
    mx_scaler *s = mx_scaler_new(&o);
    for (int try_scaling_api = 0; try_scaling_api <= 1; try_scaling_api++) {
      mlp *m0 = try_scaling_api ? &c0.scaling : &c0.control, *m1 = try_scaling_api ? &c1.scaling : &c1.control;
      mx_optimizer *o0 = try_scaling_api ? c0.opt_scaling : c0.opt_control;
      mx_optimizer *o1 = try_scaling_api ? c1.opt_scaling : c1.opt_control;
      for (int i = 0; i < 4; i++) {
        OK(mx_optimizer_zero_grad(o0, true));
        OK(mx_optimizer_zero_grad(o1, true));
        mx_tensor *out0 = mlp_forward(m0, c0.input[i]), *out1 = mlp_forward(m1, c0.input[i]);
        mx_tensor *loss0 = loss_fn(mx_add(mx_mul_scalar(out0, 0.3), mx_mul_scalar(out1, 0.7)), c0.target[i]);
        mx_tensor *loss1 = loss_fn(mx_sub(mx_mul_scalar(out0, 0.6), mx_mul_scalar(out1, 0.4)), c0.target[i]);
        if (try_scaling_api) {
          OK(mx_backward(mx_scaler_scale(s, loss0), NULL, true));
          OK(mx_backward(mx_scaler_scale(s, loss1), NULL, false));
          if (i == c0.skip_iter && enabled) poison_grad(m1->p[2]);
          OK(mx_scaler_unscale(s, o0));
          OK(mx_scaler_step(s, o0, NULL));
          OK(mx_scaler_step(s, o1, NULL));
          OK(mx_scaler_update(s));
        } else {
          OK(mx_backward(loss0, NULL, true));
          OK(mx_backward(loss1, NULL, false));
          OK(mx_optimizer_step(o0));
          if (!enabled || i != c0.skip_iter) OK(mx_optimizer_step(o1));
        }
      }
    }
    double expected = enabled ? 128.0 * pow(2.0, 3) * pow(0.5, 1) : 1.0;
    cr_assert_eq(mx_scaler_get_scale(s), expected, "scale %g", mx_scaler_get_scale(s));
    for (int i = 0; i < 4; i++) {
      expect_close("model0", c0.scaling.p[i], c0.control.p[i], 1e-7, 1e-5);
      expect_close("model1", c1.scaling.p[i], c1.control.p[i], 1e-7, 1e-5);
    }
    mx_scaler_free(s);
    mx_optimizer_free(c0.opt_control);
    mx_optimizer_free(c0.opt_scaling);
    mx_optimizer_free(c1.opt_control);
    mx_optimizer_free(c1.opt_scaling);
  }
}

/* test_cuda.py test_grad_scaling_autocast_fused_optimizers, reduced: Adam
 * and AdamW (amsgrad off and on), both copies trained with one shared
 * GradScaler(init_scale=128) and autocast; the scaling copy calls
 * unscale_ before step (separate_unscale) or not. PyTorch compares a
 * fused optimizer (which unscales inside its kernel) with an unfused one;
 * mixgrad has one optimizer, so this compares the two ways of reaching
 * its step: loss, gradients, state and parameters equal (assertEqual's
 * float32 tolerance). */
Test(pytorch_scaling, grad_scaling_autocast_fused_optimizers) {
  const opt_kind kinds[] = {OPT_ADAM, OPT_ADAMW, OPT_ADAM_AMSGRAD, OPT_ADAMW_AMSGRAD};
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    for (int separate_unscale = 0; separate_unscale <= 1; separate_unscale++) {
      scaling_case c;
      create_scaling_case(&c, kinds[k]);
      mx_scaler_opts o = mx_scaler_defaults();
      o.init_scale = 128.0;
      mx_scaler *s = mx_scaler_new(&o);
      for (int i = 0; i < 4; i++) {
        mx_tensor *loss_control = NULL, *loss_scaling = NULL;
        OK(mx_optimizer_zero_grad(c.opt_control, true));
        MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
          loss_control = loss_fn(mlp_forward(&c.control, c.input[i]), c.target[i]);
        }
        OK(mx_backward(mx_scaler_scale(s, loss_control), NULL, false));
        OK(mx_scaler_step(s, c.opt_control, NULL));
        OK(mx_scaler_update(s));

        OK(mx_optimizer_zero_grad(c.opt_scaling, true));
        MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
          loss_scaling = loss_fn(mlp_forward(&c.scaling, c.input[i]), c.target[i]);
        }
        OK(mx_backward(mx_scaler_scale(s, loss_scaling), NULL, false));
        if (separate_unscale) OK(mx_scaler_unscale(s, c.opt_scaling));
        OK(mx_scaler_step(s, c.opt_scaling, NULL));
        OK(mx_scaler_update(s));

        expect_close("loss", loss_scaling, loss_control, 1e-5, 1.3e-6);
        compare_copies(&c.control, &c.scaling, c.opt_control, c.opt_scaling, 0, 1e-5, 1.3e-6);
      }
      mx_scaler_free(s);
      mx_optimizer_free(c.opt_control);
      mx_optimizer_free(c.opt_scaling);
    }
  }
}

/* test_cuda.py test_params_invalidated_with_grads_invalidated_between_unscale_and_step:
 * gradients finite when unscale_ checks them but overwritten with inf / NaN
 * before step: the step is not skipped (the check is done), so every
 * parameter turns inf or NaN. Adam and AdamW, autocast on. */
Test(pytorch_scaling, params_invalidated_with_grads_invalidated_between_unscale_and_step) {
  const opt_kind kinds[] = {OPT_ADAM, OPT_ADAMW};
  for (int k = 0; k < 2; k++) {
    scaling_case c;
    create_scaling_case(&c, kinds[k]);
    mx_scaler_opts o = mx_scaler_defaults();
    o.init_scale = 128.0;
    mx_scaler *s = mx_scaler_new(&o);
    for (int i = 0; i < 4; i++) {
      OK(mx_optimizer_zero_grad(c.opt_control, true));
      mx_tensor *loss = NULL;
      MX_AUTOCAST(MX_CPU, MX_F16, true, true) { loss = loss_fn(mlp_forward(&c.control, c.input[i]), c.target[i]); }
      OK(mx_backward(mx_scaler_scale(s, loss), NULL, false));
      OK(mx_scaler_unscale(s, c.opt_control));
      for (int j = 0; j < 4; j++) OK(mx_fill_(mx_grad_of(c.control.p[j]), j % 2 ? INFINITY : NAN));
      OK(mx_scaler_step(s, c.opt_control, NULL));
      OK(mx_scaler_update(s));
    }
    for (int j = 0; j < 4; j++) {
      double *v = values_of(c.control.p[j]);
      bool bad = false;
      for (int64_t e = 0; e < mx_numel(c.control.p[j]); e++) bad = bad || !isfinite(v[e]);
      free(v);
      cr_assert(bad, "%s: parameter %d has no inf or NaN", mx_optimizer_name(c.opt_control), j);
    }
    mx_scaler_free(s);
    mx_optimizer_free(c.opt_control);
    mx_optimizer_free(c.opt_scaling);
  }
}
