/* The GradScaler, part 2: update (backoff, growth, the non-finite guard,
 * update_to, several optimizers, guard rails), getters and setters,
 * state_dict, stats, the overflow report, the underflow fraction and
 * MegEngine's one-call backward. Part 1 is test_scaler.c. */
#include "scaler_fixture.h"

TestSuite(scaler_update, .init = open_scope, .fini = close_scope);

/* --- update --------------------------------------------------------------------------- */

Test(scaler_update, update_backs_off_on_inf) {
  mx_scaler *s = default_scaler();
  mx_tensor *p = param_full(3, 1.0, MX_F32);
  mx_optimizer *opt = sgd(1, &p, 0.1);
  inf_iteration(s, opt, p);
  cr_assert_eq(mx_scaler_get_scale(s), 32768.0);
  cr_assert_eq(tracker_of(s), 0);
  inf_iteration(s, opt, p);
  cr_assert_eq(mx_scaler_get_scale(s), 16384.0);
  expect_values(p, 3, (double[]){1, 1, 1});
  /* NaN backs off too */
  OK(mx_optimizer_zero_grad(opt, true));
  scaled_backward(s, p, vec(3, (float[]){0.0f, NAN, 1.0f}));
  mx_scaler_step_info info;
  OK(mx_scaler_step(s, opt, &info));
  cr_assert_not(info.stepped);
  cr_assert_eq(info.nans, 1);
  OK(mx_scaler_update(s));
  cr_assert_eq(mx_scaler_get_scale(s), 8192.0);
  mx_scaler_stats st = mx_scaler_stats_get(s);
  cr_assert_eq(st.updates, 3);
  cr_assert_eq(st.skipped, 3);
  cr_assert_eq(st.consecutive_skips, 3);
  cr_assert_eq(st.scale, 8192.0);
}

Test(scaler_update, update_grows_after_growth_interval_clean_steps) {
  mx_scaler *s = scaler_init(1024.0, 3);
  mx_tensor *p = param_full(2, 0.0, MX_F32);
  mx_optimizer *opt = sgd(1, &p, 0.1);
  const double scales[7] = {1024, 1024, 2048, 2048, 2048, 4096, 4096};
  const int64_t trackers[7] = {1, 2, 0, 1, 2, 0, 1};
  for (int i = 0; i < 7; i++) {
    clean_iteration(s, opt, p);
    cr_assert_eq(mx_scaler_get_scale(s), scales[i], "after clean update %d: %g", i + 1, mx_scaler_get_scale(s));
    cr_assert_eq(tracker_of(s), trackers[i], "after clean update %d", i + 1);
  }
  mx_scaler_stats st = mx_scaler_stats_get(s);
  cr_assert_eq(st.updates, 7);
  cr_assert_eq(st.skipped, 0);
}

Test(scaler_update, an_inf_resets_the_growth_tracker) {
  mx_scaler *s = scaler_init(1024.0, 3);
  mx_tensor *p = param_full(2, 0.0, MX_F32);
  mx_optimizer *opt = sgd(1, &p, 0.1);
  clean_iteration(s, opt, p);
  clean_iteration(s, opt, p);
  cr_assert_eq(tracker_of(s), 2);
  inf_iteration(s, opt, p);
  cr_assert_eq(mx_scaler_get_scale(s), 512.0);
  cr_assert_eq(tracker_of(s), 0);
  clean_iteration(s, opt, p);
  clean_iteration(s, opt, p);
  cr_assert_eq(mx_scaler_get_scale(s), 512.0, "two clean steps after the inf are not yet three");
  clean_iteration(s, opt, p);
  cr_assert_eq(mx_scaler_get_scale(s), 1024.0);
  mx_scaler_stats st = mx_scaler_stats_get(s);
  cr_assert_eq(st.updates, 6);
  cr_assert_eq(st.skipped, 1);
  cr_assert_eq(st.consecutive_skips, 0);
}

Test(scaler_update, a_non_finite_grown_scale_is_not_applied) {
  mx_scaler *s = scaler_init(0x1p126, 1);
  mx_tensor *p = param_full(2, 0.0, MX_F32);
  mx_optimizer *opt = sgd(1, &p, 0.1);
  prime(s);
  for (int i = 0; i < 3; i++) {
    OK(mx_optimizer_zero_grad(opt, true));
    set_grad_f32(p, 2, (float[]){0x1p100f, 0.0f}); /* finite */
    OK(mx_scaler_step(s, opt, NULL));
    OK(mx_scaler_update(s));
    cr_assert_eq(mx_scaler_get_scale(s), 0x1p127, "update %d: %a (2^128 would be inf in float32)", i,
                 mx_scaler_get_scale(s));
    cr_assert_eq(tracker_of(s), 0);
  }
  /* a finite growth near the top is applied (1.5 * 2^127 < FLT_MAX), the
   * next one (2.25 * 2^127) is not */
  OK(mx_scaler_set_growth_factor(s, 1.5));
  for (int i = 0; i < 2; i++) {
    OK(mx_optimizer_zero_grad(opt, true));
    set_grad_f32(p, 2, (float[]){1.0f, 0.0f});
    OK(mx_scaler_step(s, opt, NULL));
    OK(mx_scaler_update(s));
    cr_assert_eq(mx_scaler_get_scale(s), 0x1.8p127, "update %d: %a", i, mx_scaler_get_scale(s));
  }
  cr_assert_lt(0x1.8p127, FLT_MAX);
}

Test(scaler_update, update_to_sets_the_scale_and_keeps_the_tracker) {
  mx_scaler *s = scaler_init(1024.0, 3);
  mx_tensor *p = param_full(2, 0.0, MX_F32);
  mx_optimizer *opt = sgd(1, &p, 0.1);
  clean_iteration(s, opt, p);
  cr_assert_eq(tracker_of(s), 1);
  OK(mx_optimizer_zero_grad(opt, true));
  scaled_backward(s, p, vec(2, (float[]){1, 1}));
  OK(mx_scaler_step(s, opt, NULL));
  OK(mx_scaler_update_to(s, 0.1));
  cr_assert_eq(mx_scaler_get_scale(s), (double)0.1f, "the scale is float32");
  cr_assert_eq(tracker_of(s), 1, "update_to keeps the growth tracker");
  mx_scaler_stats st = mx_scaler_stats_get(s);
  cr_assert_eq(st.updates, 1, "update_to is not an update with inf checks");
  /* it ends the iteration: the checks are consumed, the optimizer is READY */
  FAILS(mx_scaler_update(s), MX_STATE_ERROR, "mx_scaler_update: No inf checks were recorded prior to update.");
  OK(mx_scaler_update_to(s, 4096.0));
  cr_assert_eq(mx_scaler_get_scale(s), 4096.0);
  OK(mx_optimizer_zero_grad(opt, true));
  scaled_backward(s, p, vec(2, (float[]){1, 1}));
  expect_values(mx_grad_of(p), 2, (double[]){4096.0, 4096.0});
  OK(mx_scaler_unscale(s, opt));
  OK(mx_scaler_step(s, opt, NULL));
  OK(mx_scaler_update(s));
  cr_assert_eq(tracker_of(s), 2);
  /* invalid scales */
  FAILS(mx_scaler_update_to(s, 0.0), MX_INVALID_ARGUMENT, "mx_scaler_update_to: new_scale must be a finite number > 0, got 0");
  FAILS(mx_scaler_update_to(s, -1.0), MX_INVALID_ARGUMENT,
        "mx_scaler_update_to: new_scale must be a finite number > 0, got -1");
  FAILS(mx_scaler_update_to(s, INFINITY), MX_INVALID_ARGUMENT,
        "mx_scaler_update_to: new_scale must be a finite number > 0, got inf");
  FAILS(mx_scaler_update_to(s, NAN), MX_INVALID_ARGUMENT,
        "mx_scaler_update_to: new_scale must be a finite number > 0, got nan");
  cr_assert_eq(mx_scaler_get_scale(s), 4096.0);
}

Test(scaler_update, two_optimizers_decide_alone_and_the_scale_backs_off_once) {
  mx_scaler *s = default_scaler();
  mx_tensor *p0 = param_full(2, 1.0, MX_F32), *p1 = param_full(2, 1.0, MX_F32);
  mx_optimizer *opt0 = sgd(1, &p0, 0.5), *opt1 = sgd(1, &p1, 0.5);
  /* one overflowing: opt0 steps, opt1 skips (PyTorch: each optimizer decides
   * alone), and the scale backs off once, not twice */
  mx_tensor *loss = mx_add(mx_sum(mx_mul(p0, vec(2, (float[]){1, 2})), MX_ALL_DIMS, false),
                           mx_sum(mx_mul(p1, vec(2, (float[]){INFINITY, 2})), MX_ALL_DIMS, false));
  OK(mx_backward(mx_scaler_scale(s, loss), NULL, false));
  mx_scaler_step_info i0, i1;
  OK(mx_scaler_step(s, opt0, &i0));
  OK(mx_scaler_step(s, opt1, &i1));
  cr_assert(i0.stepped);
  cr_assert_not(i1.stepped);
  expect_values(p0, 2, (double[]){0.5, 0.0});
  expect_values(p1, 2, (double[]){1.0, 1.0});
  OK(mx_scaler_update(s));
  cr_assert_eq(mx_scaler_get_scale(s), 32768.0);
  mx_scaler_stats st = mx_scaler_stats_get(s);
  cr_assert_eq(st.updates, 1);
  cr_assert_eq(st.skipped, 1);

  /* both overflowing: still one backoff */
  OK(mx_optimizer_zero_grad(opt0, true));
  OK(mx_optimizer_zero_grad(opt1, true));
  loss = mx_add(mx_sum(mx_mul(p0, vec(2, (float[]){NAN, 2})), MX_ALL_DIMS, false),
                mx_sum(mx_mul(p1, vec(2, (float[]){INFINITY, 2})), MX_ALL_DIMS, false));
  OK(mx_backward(mx_scaler_scale(s, loss), NULL, false));
  OK(mx_scaler_unscale(s, opt0));
  OK(mx_scaler_step(s, opt0, &i0));
  OK(mx_scaler_step(s, opt1, &i1));
  cr_assert_not(i0.stepped);
  cr_assert_not(i1.stepped);
  OK(mx_scaler_update(s));
  cr_assert_eq(mx_scaler_get_scale(s), 16384.0);

  /* both clean with growth_interval 2: one update counts once */
  OK(mx_scaler_set_growth_interval(s, 2));
  for (int it = 0; it < 2; it++) {
    OK(mx_optimizer_zero_grad(opt0, true));
    OK(mx_optimizer_zero_grad(opt1, true));
    loss = mx_add(mx_sum(p0, MX_ALL_DIMS, false), mx_sum(p1, MX_ALL_DIMS, false));
    OK(mx_backward(mx_scaler_scale(s, loss), NULL, false));
    OK(mx_scaler_step(s, opt0, NULL));
    OK(mx_scaler_step(s, opt1, NULL));
    OK(mx_scaler_update(s));
    cr_assert_eq(tracker_of(s), it == 0 ? 1 : 0);
    cr_assert_eq(mx_scaler_get_scale(s), it == 0 ? 16384.0 : 32768.0);
  }
  /* an optimizer only unscaled, not stepped, still counts its check */
  OK(mx_optimizer_zero_grad(opt0, true));
  OK(mx_optimizer_zero_grad(opt1, true));
  loss = mx_add(mx_sum(p0, MX_ALL_DIMS, false), mx_sum(mx_mul(p1, vec(2, (float[]){INFINITY, 0})), MX_ALL_DIMS, false));
  OK(mx_backward(mx_scaler_scale(s, loss), NULL, false));
  OK(mx_scaler_step(s, opt0, NULL));
  OK(mx_scaler_unscale(s, opt1));
  OK(mx_scaler_update(s));
  cr_assert_eq(mx_scaler_get_scale(s), 16384.0);
}

Test(scaler_update, guard_rails_clamp_the_scale) {
  mx_scaler_opts o = mx_scaler_defaults();
  o.min_scale = 16384, o.max_scale = 131072, o.growth_interval = 1;
  mx_scaler *s = scaler_with(&o);
  mx_tensor *p = param_full(2, 0.0, MX_F32);
  mx_optimizer *opt = sgd(1, &p, 0.1);
  const double after_inf[3] = {32768, 16384, 16384};
  for (int i = 0; i < 3; i++) {
    inf_iteration(s, opt, p);
    cr_assert_eq(mx_scaler_get_scale(s), after_inf[i], "inf update %d: %g", i, mx_scaler_get_scale(s));
  }
  const double after_clean[4] = {32768, 65536, 131072, 131072};
  for (int i = 0; i < 4; i++) {
    clean_iteration(s, opt, p);
    cr_assert_eq(mx_scaler_get_scale(s), after_clean[i], "clean update %d: %g", i, mx_scaler_get_scale(s));
  }
  /* a bound that is not a power of two is met exactly */
  o = mx_scaler_defaults();
  o.init_scale = 1000, o.min_scale = 300;
  s = scaler_with(&o);
  inf_iteration(s, opt, p);
  cr_assert_eq(mx_scaler_get_scale(s), 500.0);
  inf_iteration(s, opt, p);
  cr_assert_eq(mx_scaler_get_scale(s), 300.0);
}

Test(scaler_update, too_many_consecutive_skips_stop_the_update) {
  mx_scaler_opts o = mx_scaler_defaults();
  o.max_consecutive_skips = 2;
  mx_scaler *s = scaler_with(&o);
  mx_tensor *p = param_full(3, 1.0, MX_F32);
  mx_optimizer *opt = sgd(1, &p, 0.1);
  /* up to max_consecutive_skips skips in a row are allowed ... */
  inf_iteration(s, opt, p);
  inf_iteration(s, opt, p);
  cr_assert_eq(mx_scaler_stats_get(s).consecutive_skips, 2);
  /* ... a clean step ends the run ... */
  clean_iteration(s, opt, p);
  cr_assert_eq(mx_scaler_stats_get(s).consecutive_skips, 0);
  inf_iteration(s, opt, p);
  inf_iteration(s, opt, p);
  cr_assert_eq(mx_scaler_get_scale(s), 4096.0);
  /* ... and one more than the limit stops with the overflow report */
  OK(mx_optimizer_zero_grad(opt, true));
  scaled_backward(s, p, vec(3, (float[]){INFINITY, NAN, -INFINITY}));
  OK(mx_scaler_step(s, opt, NULL));
  FAILS(mx_scaler_update(s), MX_STATE_ERROR,
        "mx_scaler_update: 3 consecutive steps skipped (limit 2): the gradients keep overflowing at scale 2048; "
        "checked set 0: 1 gradients held 2 inf and 1 NaN");
  mx_scaler_stats st = mx_scaler_stats_get(s);
  cr_assert_eq(st.consecutive_skips, 3);
  cr_assert_eq(st.skipped, 5);
  cr_assert_eq(st.updates, 6);
  cr_assert_eq(st.scale, 2048.0, "the backoff itself was applied");
  /* training may go on: a clean step ends the run */
  clean_iteration(s, opt, p);
  cr_assert_eq(mx_scaler_stats_get(s).consecutive_skips, 0);
}

/* --- getters, setters, state ---------------------------------------------------------- */

Test(scaler_update, setters_validate_like_the_constructor) {
  mx_scaler *s = default_scaler();
  FAILS(mx_scaler_set_growth_factor(s, 1.0), MX_INVALID_ARGUMENT,
        "mx_scaler_set_growth_factor: growth_factor must be a finite number > 1.0, got 1");
  FAILS(mx_scaler_set_growth_factor(s, INFINITY), MX_INVALID_ARGUMENT,
        "mx_scaler_set_growth_factor: growth_factor must be a finite number > 1.0, got inf");
  FAILS(mx_scaler_set_backoff_factor(s, 1.0), MX_INVALID_ARGUMENT,
        "mx_scaler_set_backoff_factor: backoff_factor must be in (0, 1), got 1");
  FAILS(mx_scaler_set_backoff_factor(s, 0.0), MX_INVALID_ARGUMENT,
        "mx_scaler_set_backoff_factor: backoff_factor must be in (0, 1), got 0");
  FAILS(mx_scaler_set_growth_interval(s, 0), MX_INVALID_ARGUMENT,
        "mx_scaler_set_growth_interval: growth_interval must be in [1, 2^31), got 0");
  cr_assert_eq(mx_scaler_get_growth_factor(s), 2.0);
  cr_assert_eq(mx_scaler_get_backoff_factor(s), 0.5);
  cr_assert_eq(mx_scaler_get_growth_interval(s), 2000);
  cr_assert_eq(mx_scaler_set_growth_factor(NULL, 3.0), MX_NULL_INPUT);

  OK(mx_scaler_set_growth_factor(s, 4.0));
  OK(mx_scaler_set_backoff_factor(s, 0.25));
  OK(mx_scaler_set_growth_interval(s, 1));
  cr_assert_eq(mx_scaler_get_growth_factor(s), 4.0);
  cr_assert_eq(mx_scaler_get_backoff_factor(s), 0.25);
  cr_assert_eq(mx_scaler_get_growth_interval(s), 1);
  /* and the update uses them */
  mx_tensor *p = param_full(2, 0.0, MX_F32);
  mx_optimizer *opt = sgd(1, &p, 0.1);
  clean_iteration(s, opt, p);
  cr_assert_eq(mx_scaler_get_scale(s), 262144.0);
  inf_iteration(s, opt, p);
  cr_assert_eq(mx_scaler_get_scale(s), 65536.0);
}

Test(scaler_update, state_dict_round_trips) {
  mx_scaler_opts o = mx_scaler_defaults();
  o.init_scale = 1024, o.growth_factor = 4, o.backoff_factor = 0.25, o.growth_interval = 3;
  mx_scaler *a = scaler_with(&o);
  mx_tensor *p = param_full(2, 0.0, MX_F32);
  mx_optimizer *opt = sgd(1, &p, 0.1);
  clean_iteration(a, opt, p);
  clean_iteration(a, opt, p);
  mx_scaler_state st;
  OK(mx_scaler_state_dict(a, &st));
  cr_assert(st.present);
  cr_assert_eq(st.scale, 1024.0);
  cr_assert_eq(st.growth_factor, 4.0);
  cr_assert_eq(st.backoff_factor, 0.25);
  cr_assert_eq(st.growth_interval, 3);
  cr_assert_eq(st.growth_tracker, 2);

  /* into a fresh scaler (its scale not made yet) */
  mx_scaler *b = default_scaler();
  OK(mx_scaler_load_state_dict(b, &st));
  cr_assert_eq(mx_scaler_get_scale(b), 1024.0);
  cr_assert_eq(mx_scaler_get_growth_factor(b), 4.0);
  cr_assert_eq(mx_scaler_get_backoff_factor(b), 0.25);
  cr_assert_eq(mx_scaler_get_growth_interval(b), 3);
  mx_scaler_state back;
  OK(mx_scaler_state_dict(b, &back));
  cr_assert(back.present);
  cr_assert_eq(back.scale, 1024.0);
  cr_assert_eq(back.growth_tracker, 2);
  /* the tracker carried over: one more clean update grows by 4 */
  clean_iteration(b, opt, p);
  cr_assert_eq(mx_scaler_get_scale(b), 4096.0);
  cr_assert_eq(tracker_of(b), 0);

  /* into a scaler whose scale exists: the device values are filled */
  mx_scaler *c = default_scaler();
  clean_iteration(c, opt, p);
  OK(mx_scaler_load_state_dict(c, &st));
  cr_assert_eq(mx_item(mx_scaler_scale_tensor(c)), 1024.0);
  cr_assert_eq(tracker_of(c), 2);
  inf_iteration(c, opt, p);
  cr_assert_eq(mx_scaler_get_scale(c), 256.0);

  /* errors */
  mx_scaler_state empty = {0};
  FAILS(mx_scaler_load_state_dict(c, &empty), MX_STATE_ERROR,
        "mx_scaler_load_state_dict: The source state dict is empty, possibly because it was saved from a disabled "
        "instance of GradScaler.");
  mx_scaler_state bad = st;
  bad.growth_tracker = -1;
  FAILS(mx_scaler_load_state_dict(c, &bad), MX_INVALID_ARGUMENT,
        "mx_scaler_load_state_dict: growth_tracker -1 is outside [0, 2^31)");
  bad.growth_tracker = 2147483648;
  FAILS(mx_scaler_load_state_dict(c, &bad), MX_INVALID_ARGUMENT,
        "mx_scaler_load_state_dict: growth_tracker 2147483648 is outside [0, 2^31)");
  bad = st;
  bad.backoff_factor = 2;
  FAILS(mx_scaler_load_state_dict(c, &bad), MX_INVALID_ARGUMENT,
        "mx_scaler_load_state_dict: backoff_factor must be in (0, 1), got 2");
  bad = st;
  bad.scale = 0;
  FAILS(mx_scaler_load_state_dict(c, &bad), MX_INVALID_ARGUMENT,
        "mx_scaler_load_state_dict: scale must be a finite number > 0, got 0");
  cr_assert_eq(mx_scaler_get_scale(c), 256.0, "a refused state changes nothing");
  cr_assert_eq(mx_scaler_get_backoff_factor(c), 0.25);

  /* a tracker at or past the interval is a state a scaler can be in (after
   * set_growth_interval lowers the interval): it round-trips, and as in
   * PyTorch (successful == interval) no growth follows until an inf resets it */
  mx_scaler *d = scaler_init(1024.0, 10);
  for (int i = 0; i < 4; i++) clean_iteration(d, opt, p);
  OK(mx_scaler_set_growth_interval(d, 3));
  OK(mx_scaler_state_dict(d, &st));
  cr_assert_eq(st.growth_tracker, 4);
  cr_assert_eq(st.growth_interval, 3);
  mx_scaler *e = default_scaler();
  OK(mx_scaler_load_state_dict(e, &st));
  OK(mx_scaler_state_dict(e, &back));
  cr_assert_eq(back.growth_tracker, 4);
  cr_assert_eq(back.growth_interval, 3);
  clean_iteration(e, opt, p);
  cr_assert_eq(mx_scaler_get_scale(e), 1024.0);
  cr_assert_eq(tracker_of(e), 5);
}

Test(scaler_update, state_dict_succeeds_after_an_unrelated_earlier_error) {
  mx_scaler *s = scaler_init(1024.0, 3);
  /* a failure elsewhere that the caller did not clear (the message stays
   * until mx_clear_error) must not make a later successful call fail */
  cr_assert_null(mx_reshape(mx_zeros(MX_SHAPE(6), MX_F32, MX_CPU), MX_SHAPE(4, 5)));
  cr_assert_neq(mx_last_status(), MX_OK);
  mx_scaler_state st = {0};
  OK(mx_scaler_state_dict(s, &st));
  cr_assert(st.present);
  cr_assert_eq(st.scale, 1024.0);
  cr_assert_eq(st.growth_interval, 3);
  mx_clear_error();
}

/* --- watching -------------------------------------------------------------------------- */

Test(scaler_update, stats_count_updates_and_skips) {
  mx_scaler *s = scaler_init(1024, 2000);
  mx_tensor *p = param_full(2, 0.0, MX_F32);
  mx_optimizer *opt = sgd(1, &p, 0.1);
  clean_iteration(s, opt, p);
  inf_iteration(s, opt, p);
  inf_iteration(s, opt, p);
  mx_scaler_stats st = mx_scaler_stats_get(s);
  cr_assert_eq(st.updates, 3);
  cr_assert_eq(st.skipped, 2);
  cr_assert_eq(st.consecutive_skips, 2);
  cr_assert_eq(st.scale, 256.0);
  clean_iteration(s, opt, p);
  st = mx_scaler_stats_get(s);
  cr_assert_eq(st.updates, 4);
  cr_assert_eq(st.skipped, 2);
  cr_assert_eq(st.consecutive_skips, 0);
  cr_assert_eq(st.scale, 256.0);
}

/* The report's text (in a static buffer, so a failed assertion leaks nothing). */
static const char *report_of(const mx_scaler *s, const mx_optimizer *opt, const char *const *names, int *n) {
  static char copy[1024];
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cr_assert_not_null(f);
  *n = mx_scaler_overflow_report(s, opt, names, f);
  fclose(f);
  snprintf(copy, sizeof copy, "%s", text ? text : "");
  free(text);
  return copy;
}

Test(scaler_update, overflow_report_names_the_parameters) {
  mx_scaler *s = default_scaler();
  mx_tensor *w1 = param_full(4, 0, MX_F32), *b1 = param_full(2, 0, MX_F32), *w2 = param_full(6, 0, MX_F32);
  mx_tensor *params[3] = {w1, b1, w2};
  mx_optimizer *opt = sgd(3, params, 0.1);
  int n = -1;
  const char *text = report_of(s, opt, NULL, &n);
  cr_assert_eq(n, 0, "no unscale yet");
  cr_assert_str_eq(text, "");

  prime(s);
  set_grad_f32(w1, 4, (float[]){INFINITY, 1.0f, NAN, -INFINITY});
  set_grad_f32(b1, 2, (float[]){1.0f, 2.0f});
  set_grad_f32(w2, 6, (float[]){0, 0, 0, 0, 0, NAN});
  OK(mx_scaler_unscale(s, opt));
  const char *const names[3] = {"fc1.weight", "fc1.bias", "fc2.weight"};
  text = report_of(s, opt, names, &n);
  cr_assert_eq(n, 2);
  cr_assert_str_eq(text, "fc1.weight: 2 inf, 1 NaN of 4\nfc2.weight: 0 inf, 1 NaN of 6\n");
  text = report_of(s, opt, NULL, &n);
  cr_assert_eq(n, 2);
  cr_assert_str_eq(text, "param 0: 2 inf, 1 NaN of 4\nparam 2: 0 inf, 1 NaN of 6\n");
  const char *const partial[3] = {"fc1.weight", NULL, NULL};
  text = report_of(s, opt, partial, &n);
  cr_assert_str_eq(text, "fc1.weight: 2 inf, 1 NaN of 4\nparam 2: 0 inf, 1 NaN of 6\n");
  cr_assert_eq(mx_scaler_overflow_report(s, opt, names, NULL), 2, "out NULL: counts only");

  /* the report is of the last unscale: a clean one reports nothing */
  OK(mx_scaler_step(s, opt, NULL));
  OK(mx_scaler_update(s));
  OK(mx_optimizer_zero_grad(opt, true));
  set_grad_f32(b1, 2, (float[]){1.0f, 2.0f});
  OK(mx_scaler_unscale(s, opt));
  text = report_of(s, opt, names, &n);
  cr_assert_eq(n, 0);
  cr_assert_str_eq(text, "");
}

Test(scaler_update, overflow_report_outlives_the_gradients) {
  /* the report is of the last unscale: dropping the gradients afterwards
   * (zero_grad(set_to_none) at the start of the next iteration) must not
   * change what it says about them */
  mx_scaler *s = default_scaler();
  mx_tensor *w = param_full(4, 0, MX_F32);
  mx_optimizer *opt = sgd(1, &w, 0.1);
  prime(s);
  set_grad_f32(w, 4, (float[]){INFINITY, 1.0f, NAN, 2.0f});
  OK(mx_scaler_step(s, opt, NULL));
  OK(mx_scaler_update(s));
  OK(mx_optimizer_zero_grad(opt, true));
  const char *const names[1] = {"fc.weight"};
  int n;
  const char *text = report_of(s, opt, names, &n);
  cr_assert_eq(n, 1);
  cr_assert_str_eq(text, "fc.weight: 1 inf, 1 NaN of 4\n");
}

/* One check of opt with the given gradients (NULL: none) through step and
 * update; the step's info, the report after the update, and the version of
 * the found_inf flag the check wrote. */
static mx_scaler_step_info checked_step(mx_scaler *s, mx_optimizer *opt, mx_tensor **params, const float *const *grads,
                                        const char **report, uint64_t *flag_version) {
  OK(mx_optimizer_zero_grad(opt, true));
  for (int i = 0; i < mx_optimizer_num_params(opt); i++)
    if (grads[i]) set_grad_f32(params[i], (int)mx_numel(params[i]), grads[i]);
  OK(mx_scaler_unscale(s, opt));
  *flag_version = mx_version(mx_scaler_found_inf(s, opt));
  mx_scaler_step_info info;
  OK(mx_scaler_step(s, opt, &info));
  OK(mx_scaler_update(s));
  const char *const names[2] = {"a", "b"};
  int n;
  *report = report_of(s, opt, names, &n);
  return info;
}

/* The update clears the flag it read and the counts of the check before
 * (the reports still read the last check's), so each check starts from
 * zero without filling anything: an inf in one iteration is neither in the
 * next one's decision nor in its counts. */
Test(scaler_update, each_check_counts_afresh_after_the_update_cleared_for_it) {
  mx_scaler *s = default_scaler();
  mx_tensor *a = param_full(4, 0, MX_F32), *b = param_full(2, 0, MX_F32);
  mx_tensor *params[2] = {a, b};
  mx_optimizer *opt = sgd(2, params, 0.5);
  prime(s);
  const float a_inf[4] = {INFINITY, 1, -INFINITY, 2}, a_clean[4] = {1, 2, 3, 4}, b_clean[2] = {1, 2},
              b_nan[2] = {NAN, 1};
  const char *report;
  uint64_t v1, v2, v3, v4;
  mx_scaler_step_info i1 = checked_step(s, opt, params, (const float *[]){a_inf, b_clean}, &report, &v1);
  cr_assert(!i1.stepped && i1.infs == 2 && i1.nans == 0);
  cr_assert_str_eq(report, "a: 2 inf, 0 NaN of 4\n", "the report after the update is of its check: %s", report);
  mx_scaler_step_info i2 = checked_step(s, opt, params, (const float *[]){a_clean, b_clean}, &report, &v2);
  cr_assert(i2.stepped, "the first iteration's inf was cleared from the flag");
  cr_assert(i2.infs == 0 && i2.nans == 0 && i2.params_with_nonfinite == 0);
  cr_assert_str_eq(report, "");
  mx_scaler_step_info i3 = checked_step(s, opt, params, (const float *[]){a_clean, b_nan}, &report, &v3);
  cr_assert(!i3.stepped && i3.infs == 0 && i3.nans == 1 && i3.params_with_nonfinite == 1,
            "the first iteration's counts, in the buffer this check reused, were cleared: %lld inf, %lld NaN",
            (long long)i3.infs, (long long)i3.nans);
  cr_assert_str_eq(report, "b: 0 inf, 1 NaN of 2\n");
  mx_scaler_step_info i4 = checked_step(s, opt, params, (const float *[]){a_clean, NULL}, &report, &v4);
  cr_assert(i4.stepped && i4.infs == 0 && i4.nans == 0, "a check of fewer gradients counts afresh too");
  cr_assert_str_eq(report, "");
  cr_assert(v2 == v1 && v3 == v1, "the flag was cleared by the updates, not filled by the checks (versions %llu, "
            "%llu, %llu)", (unsigned long long)v1, (unsigned long long)v2, (unsigned long long)v3);
  cr_assert_eq(mx_scaler_get_scale(s), 16384.0, "two backoffs from 65536");
}

/* Two optimizers' flags are summed for the update, which then clears
 * neither: their checks fill their own, and decide alone each iteration. */
Test(scaler_update, two_optimizers_check_afresh_each_iteration) {
  mx_scaler *s = default_scaler();
  mx_tensor *p0 = param_full(2, 0, MX_F32), *p1 = param_full(2, 0, MX_F32);
  mx_optimizer *opt0 = sgd(1, &p0, 0.5), *opt1 = sgd(1, &p1, 0.5);
  prime(s);
  const float clean[2] = {1, 2}, inf[2] = {INFINITY, 2};
  for (int it = 0; it < 3; it++) {
    OK(mx_optimizer_zero_grad(opt0, true));
    OK(mx_optimizer_zero_grad(opt1, true));
    set_grad_f32(p0, 2, it == 0 ? inf : clean);
    set_grad_f32(p1, 2, it == 1 ? inf : clean);
    mx_scaler_step_info i0, i1;
    OK(mx_scaler_step(s, opt0, &i0));
    OK(mx_scaler_step(s, opt1, &i1));
    cr_assert(i0.stepped == (it != 0) && i0.infs == (it == 0), "iteration %d, optimizer 0", it);
    cr_assert(i1.stepped == (it != 1) && i1.infs == (it == 1), "iteration %d, optimizer 1", it);
    OK(mx_scaler_update(s));
  }
  cr_assert_eq(mx_scaler_get_scale(s), 16384.0);
}

Test(scaler_update, underflow_fraction_counts_fp16_zero_and_subnormal_scaled_values) {
  mx_scaler *s = default_scaler(); /* 65536 */
  mx_tensor *a = param_full(8, 0, MX_F32), *none = param_full(3, 0, MX_F32);
  mx_tensor *params[2] = {a, none};
  mx_optimizer *opt = sgd(2, params, 0.1);
  cr_assert_eq(mx_scaler_underflow_fraction(s, opt), -1.0, "before any unscale");
  /* scaled by 2^16: 2^16, 2^-15 (subnormal in fp16), 0, -2^-14 (the smallest
   * normal: not counted), 0x1.fffffep-15 (just below it), 65.536, -2^-4,
   * 2^15: three of eight are zero or subnormal in fp16 */
  const float c[8] = {1.0f, 0x1p-31f, 0.0f, -0x1p-30f, 0x1.fffffep-31f, 1e-3f, -0x1p-20f, 0.5f};
  scaled_backward(s, a, vec(8, c));
  OK(mx_scaler_unscale(s, opt));
  cr_assert_eq(mx_scaler_underflow_fraction(s, opt), 0.375, "got %g", mx_scaler_underflow_fraction(s, opt));
  for (int i = 0; i < 8; i++) cr_assert_eq(grad_at(a, i), (double)c[i], "element %d", i);
  /* another optimizer has no record */
  mx_tensor *q = param_full(1, 0, MX_F32);
  mx_optimizer *other = sgd(1, &q, 0.1);
  cr_assert_eq(mx_scaler_underflow_fraction(s, other), -1.0);
  OK(mx_scaler_step(s, opt, NULL));
  OK(mx_scaler_update(s));
  /* a larger scale lifts them: at 2^30 only the zero underflows */
  OK(mx_scaler_update_to(s, 0x1p30));
  OK(mx_optimizer_zero_grad(opt, true));
  const float c2[8] = {0x1p-20f, 0x1p-31f, 0.0f, -0x1p-30f, 0x1.fffffep-31f, 1e-3f, -0x1p-20f, 0x1p-10f};
  scaled_backward(s, a, vec(8, c2));
  OK(mx_scaler_unscale(s, opt));
  cr_assert_eq(mx_scaler_underflow_fraction(s, opt), 0.125);
}

/* --- MegEngine's backward ---------------------------------------------------------------- */

Test(scaler_update, backward_unscales_the_leaves) {
  mx_scaler *s = scaler_init(1024.0, 1);
  mx_tensor *w = param(3, (float[]){1, 2, 3}), *b = param(1, (float[]){0.5f});
  mx_tensor *x = vec(3, (float[]){0.5f, -2.0f, 0.125f}); /* no grad */
  mx_tensor *loss = mx_add(mx_sum(mx_mul(w, x), MX_ALL_DIMS, false), mx_sum(mx_mul_scalar(b, 3.0), MX_ALL_DIMS, false));
  OK(mx_scaler_backward(s, loss, true, false));
  expect_values(mx_grad_of(w), 3, (double[]){0.5, -2.0, 0.125});
  expect_values(mx_grad_of(b), 1, (double[]){3.0});
  cr_assert_null(mx_grad_of(x));
  cr_assert_eq(mx_scaler_get_scale(s), 1024.0, "no update asked for");
  /* the check is recorded: an update may follow */
  OK(mx_scaler_update(s));
  cr_assert_eq(mx_scaler_get_scale(s), 2048.0);

  /* with update_scale the scale grows at once (growth_interval 1) */
  mx_zero_grad(w);
  mx_zero_grad(b);
  loss = mx_sum(mx_mul(w, x), MX_ALL_DIMS, false);
  OK(mx_scaler_backward(s, loss, true, true));
  expect_values(mx_grad_of(w), 3, (double[]){0.5, -2.0, 0.125});
  cr_assert_null(mx_grad_of(b), "b was not in this graph");
  cr_assert_eq(mx_scaler_get_scale(s), 4096.0);
  mx_scaler_stats st = mx_scaler_stats_get(s);
  cr_assert_eq(st.updates, 2);
}

Test(scaler_update, backward_drops_the_gradients_on_inf) {
  mx_scaler *s = default_scaler();
  mx_tensor *w = param(2, (float[]){1, 2}), *b = param(1, (float[]){0.5f});
  mx_tensor *loss = mx_add(mx_sum(mx_mul(w, vec(2, (float[]){INFINITY, 1.0f})), MX_ALL_DIMS, false),
                           mx_sum(b, MX_ALL_DIMS, false));
  OK(mx_scaler_backward(s, loss, true, true));
  cr_assert_null(mx_grad_of(w), "MegEngine drops every gradient of the backward");
  cr_assert_null(mx_grad_of(b));
  cr_assert_eq(mx_scaler_get_scale(s), 32768.0);
  mx_scaler_stats st = mx_scaler_stats_get(s);
  cr_assert_eq(st.updates, 1);
  cr_assert_eq(st.skipped, 1);
  /* a plain optimizer step now leaves the parameters alone */
  mx_tensor *params[2] = {w, b};
  mx_optimizer *opt = sgd(2, params, 0.5);
  OK(mx_optimizer_step(opt));
  expect_values(w, 2, (double[]){1, 2});
  expect_values(b, 1, (double[]){0.5});
}

Test(scaler_update, backward_without_unscale_leaves_the_gradients_scaled) {
  mx_scaler *s = scaler_init(256.0, 1);
  mx_tensor *w = param(2, (float[]){1, 2});
  mx_tensor *loss = mx_sum(mx_mul(w, vec(2, (float[]){0.5f, INFINITY})), MX_ALL_DIMS, false);
  OK(mx_scaler_backward(s, loss, false, true)); /* update_scale ignored without unscale */
  NOT_NULL(mx_grad_of(w));
  cr_assert_eq(grad_at(w, 0), 128.0);
  cr_assert(isinf(grad_at(w, 1)));
  cr_assert_eq(mx_scaler_get_scale(s), 256.0);
  cr_assert_eq(mx_scaler_stats_get(s).updates, 0);
  /* accumulation then one unscaling backward: 2 * 0.25 * 256 / 256 */
  mx_zero_grad(w);
  OK(mx_scaler_backward(s, mx_sum(mx_mul_scalar(w, 0.25), MX_ALL_DIMS, false), false, false));
  OK(mx_scaler_backward(s, mx_sum(mx_mul_scalar(w, 0.25), MX_ALL_DIMS, false), true, false));
  /* the unscaling call unscales the leaf's whole gradient: the sum of the
   * two scaled halves, once */
  expect_values(mx_grad_of(w), 2, (double[]){0.5, 0.5});

  /* disabled: a plain backward */
  mx_scaler_opts o = mx_scaler_defaults();
  o.enabled = false;
  mx_scaler *off = scaler_with(&o);
  mx_zero_grad(w);
  OK(mx_scaler_backward(off, mx_sum(mx_mul_scalar(w, 3.0), MX_ALL_DIMS, false), true, true));
  expect_values(mx_grad_of(w), 2, (double[]){3.0, 3.0});
  cr_assert_eq(mx_scaler_get_scale(off), 1.0);
}
