/* Autocast: regions, each policy, eligibility, the cast cache, gradients
 * through casts, custom_fwd/custom_bwd, the trace and the report. */
#include <criterion/criterion.h>
#include <math.h>
#include <mixgrad.h>
#include <pthread.h>
#include <string.h>

#include "amp_suite.h"

TestSuite(autocast, .init = amp_suite_open, .fini = amp_suite_close);

static mx_tensor *filled(mx_shape shape, double value, mx_dtype dtype) { return mx_full(shape, value, dtype, MX_CPU); }

static mx_tensor *weight(mx_shape shape, double value) {
  mx_tensor *w = filled(shape, value, MX_F32);
  mx_set_requires_grad(w, true);
  return w;
}

/* --- regions ------------------------------------------------------------------------ */

Test(autocast, regions_nest_and_restore) {
  cr_assert_not(mx_autocast_is_enabled(MX_CPU));
  cr_assert_eq(mx_autocast_dtype(MX_CPU), MX_BF16);
  cr_assert_eq(mx_autocast_dtype(MX_CUDA), MX_F16);
  OK(mx_autocast_begin(MX_CPU, MX_AUTOCAST_DEFAULT_DTYPE, true, true));
  cr_assert(mx_autocast_is_enabled(MX_CPU));
  cr_assert_not(mx_autocast_is_enabled(MX_CUDA));
  cr_assert_eq(mx_autocast_dtype(MX_CPU), MX_BF16);
  OK(mx_autocast_begin(MX_CPU, MX_F16, false, false));
  cr_assert_not(mx_autocast_is_enabled(MX_CPU));
  cr_assert_not(mx_autocast_is_cache_enabled());
  cr_assert_eq(mx_autocast_depth(), 2);
  OK(mx_autocast_end());
  cr_assert(mx_autocast_is_enabled(MX_CPU));
  cr_assert(mx_autocast_is_cache_enabled());
  cr_assert_eq(mx_autocast_dtype(MX_CPU), MX_BF16);
  OK(mx_autocast_end());
  cr_assert_eq(mx_autocast_depth(), 0);
  cr_assert_not(mx_autocast_is_enabled(MX_CPU));
}

Test(autocast, bad_regions_are_errors) {
  cr_assert_eq(mx_autocast_end(), MX_STATE_ERROR);
  cr_assert_str_eq(mx_last_error(), "mx_autocast_end: no autocast region is open");
  cr_assert_eq(mx_autocast_begin(MX_CPU, MX_F32, true, true), MX_DTYPE_ERROR);
  cr_assert_str_eq(mx_last_error(), "mx_autocast_begin: autocast dtype must be float16 or bfloat16, got float32");
  cr_assert_eq(mx_autocast_begin((mx_device)7, MX_F16, true, true), MX_INVALID_ARGUMENT);
  cr_assert_str_eq(mx_last_error(), "mx_autocast_begin: device_type 7 is not MX_CPU or MX_CUDA");
  cr_assert_eq(mx_autocast_depth(), 0);
}

static int leave_early(void) {
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    if (mx_autocast_is_enabled(MX_CPU)) return 1;
  }
  return 0;
}

Test(autocast, block_macro_ends_on_break_and_return) {
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    cr_assert_eq(mx_autocast_depth(), 1);
    break;
  }
  cr_assert_eq(mx_autocast_depth(), 0);
  cr_assert_eq(leave_early(), 1);
  cr_assert_eq(mx_autocast_depth(), 0);
}

/* A region that cannot begin still runs its block once (so every variable
 * assigned there is set: GCC warns -Wmaybe-uninitialized at -O2 otherwise),
 * but every op in it fails, naming itself and the region's error; the
 * failed region ends with the block, nested regions included. */
Test(autocast, block_whose_region_cannot_begin_runs_once_with_every_op_failing) {
  mx_tensor *x = filled(MX_SHAPE(2, 2), 1, MX_F32);
  mx_tensor *y = x, *z = x;
  int runs = 0, depth_inside = -1;
  MX_AUTOCAST(MX_CPU, MX_F32, true, true) {
    runs++;
    depth_inside = mx_autocast_depth();
    y = mx_matmul(x, x);
    MX_AUTOCAST(MX_CPU, MX_BF16, true, true) { z = mx_relu(x); } /* nested inside the failed one: fails too */
  }
  cr_assert_eq(runs, 1);
  cr_assert_eq(depth_inside, 1);
  cr_assert_null(y);
  cr_assert_null(z);
  cr_assert_eq(mx_last_status(), MX_DTYPE_ERROR);
  cr_assert_eq(mx_autocast_depth(), 0);
  cr_assert_not_null(mx_matmul(x, x)); /* outside, ops run again */
  MX_AUTOCAST(MX_CPU, MX_F32, true, true) { y = mx_matmul(x, x); }
  cr_assert_str_eq(mx_last_error(), "mx_matmul: not run: its MX_AUTOCAST region could not begin (mx_autocast_begin: "
                                    "autocast dtype must be float16 or bfloat16, got float32)");
}

/* At the nesting limit a block's region cannot begin either; the failed
 * region still opens (one past the limit) and closes. */
Test(autocast, block_past_the_nesting_limit_fails_its_ops) {
  mx_tensor *x = filled(MX_SHAPE(2), 1, MX_F32), *y = x;
  for (int i = 0; i < 64; i++) OK(mx_autocast_begin(MX_CPU, MX_BF16, true, true));
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    cr_assert_eq(mx_autocast_depth(), 65);
    MX_AUTOCAST(MX_CPU, MX_BF16, true, true) { cr_assert_eq(mx_autocast_depth(), 65); }
    y = mx_relu(x);
  }
  cr_assert_null(y);
  cr_assert_str_eq(mx_last_error(), "mx_relu: not run: its MX_AUTOCAST region could not begin (mx_autocast_begin: "
                                    "more than 64 nested autocast regions)");
  cr_assert_eq(mx_autocast_depth(), 64);
  for (int i = 0; i < 64; i++) OK(mx_autocast_end());
}

static mx_status matmul_in_region(void *ctx) {
  mx_tensor **io = ctx;
  io[2] = mx_mm(io[0], io[1]);
  return io[2] ? MX_OK : mx_last_status();
}

Test(autocast, run_is_the_decorator) {
  mx_tensor *io[3] = {filled(MX_SHAPE(2, 2), 1, MX_F32), filled(MX_SHAPE(2, 2), 1, MX_F32), NULL};
  OK(mx_autocast_run(MX_CPU, MX_F16, true, true, matmul_in_region, io));
  cr_assert_eq(mx_dtype_of(io[2]), MX_F16);
  cr_assert_eq(mx_autocast_depth(), 0);
}

static void *report_enabled(void *arg) {
  *(bool *)arg = mx_autocast_is_enabled(MX_CPU) || mx_autocast_depth() != 0;
  return NULL;
}

Test(autocast, a_new_thread_starts_with_autocast_off) {
  bool seen = true;
  pthread_t thread;
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    cr_assert_eq(pthread_create(&thread, NULL, report_enabled, &seen), 0);
    pthread_join(thread, NULL);
  }
  cr_assert_not(seen);
}

/* --- policies -------------------------------------------------------------------------- */

Test(autocast, lower_casts_to_the_region_dtype) {
  mx_tensor *a = filled(MX_SHAPE(2, 3), 1.5, MX_F32), *b = filled(MX_SHAPE(3, 2), 2, MX_F32);
  mx_tensor *y16 = NULL, *ybf = NULL, *yout = NULL;
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) { y16 = mx_mm(a, b); }
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) { ybf = mx_linear(a, mx_transpose(b, 0, 1), NULL); }
  yout = mx_mm(a, b);
  NOT_NULL(y16);
  NOT_NULL(ybf);
  cr_assert_eq(mx_dtype_of(y16), MX_F16);
  cr_assert_eq(mx_dtype_of(ybf), MX_BF16);
  cr_assert_eq(mx_dtype_of(yout), MX_F32);
  cr_assert_eq(mx_at(y16, MX_SHAPE(1, 1)), 9.0);
}

Test(autocast, fp32_ops_run_in_float32) {
  mx_tensor *x = filled(MX_SHAPE(4), 0.5, MX_BF16);
  mx_tensor *e = NULL, *s = NULL, *sm = NULL, *si = NULL;
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    e = mx_exp(x);
    s = mx_sum(x, MX_ALL_DIMS, false);
    sm = mx_softmax(x, 0);
    si = mx_sum(mx_ones(MX_SHAPE(3), MX_I32, MX_CPU), MX_ALL_DIMS, false); /* integers pass through */
  }
  cr_assert_eq(mx_dtype_of(e), MX_F32);
  cr_assert_eq(mx_dtype_of(s), MX_F32);
  cr_assert_eq(mx_dtype_of(sm), MX_F32);
  cr_assert_eq(mx_dtype_of(si), MX_I64);
  cr_assert_eq(mx_item(s), 2.0);
}

Test(autocast, explicit_dtype_is_not_autocast) {
  mx_tensor *x = filled(MX_SHAPE(4), 0.5, MX_BF16);
  mx_tensor *s = NULL, *sm = NULL;
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    s = mx_sum_dtype(x, MX_ALL_DIMS, false, MX_BF16);
    sm = mx_softmax_dtype(x, 0, MX_F64);
  }
  cr_assert_eq(mx_dtype_of(s), MX_BF16);
  cr_assert_eq(mx_dtype_of(sm), MX_F64);
  cr_assert_eq(mx_autocast_cache_stats_get().casts, 0);
}

Test(autocast, promote_casts_to_the_widest) {
  mx_tensor *a = filled(MX_SHAPE(3), 1, MX_BF16), *b = filled(MX_SHAPE(3), 2, MX_F32);
  mx_tensor *c = filled(MX_SHAPE(3), 3, MX_BF16), *d = filled(MX_SHAPE(3), 3, MX_F64);
  mx_tensor *wide = NULL, *narrow = NULL, *dbl = NULL;
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    wide = mx_addcmul(a, b, c, 1.0);
    narrow = mx_addcmul(a, c, c, 1.0);
    dbl = mx_addcmul(a, c, d, 1.0); /* f64 is not eligible; type promotion widens */
  }
  cr_assert_eq(mx_dtype_of(wide), MX_F32);
  cr_assert_eq(mx_dtype_of(narrow), MX_BF16);
  cr_assert_eq(mx_dtype_of(dbl), MX_F64);
  cr_assert_eq(mx_at(wide, MX_SHAPE(0)), 7.0);
}

Test(autocast, banned_op_names_the_safe_one) {
  mx_tensor *p = filled(MX_SHAPE(4), 0.25, MX_F32), *t = filled(MX_SHAPE(4), 1, MX_F32);
  mx_tensor *loss = NULL;
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) { loss = mx_binary_cross_entropy(p, t, NULL, MX_REDUCTION_MEAN); }
  cr_assert_null(loss);
  cr_assert_eq(mx_last_status(), MX_DTYPE_ERROR);
  cr_assert_str_eq(mx_last_error(),
                   "mx_binary_cross_entropy: unsafe to autocast. Models often apply a sigmoid right before binary "
                   "cross entropy, and in float16 that pair loses precision and can overflow. Combine the two with "
                   "mx_binary_cross_entropy_with_logits, which is safe to autocast, or call this op outside the "
                   "region (or in a region with enabled = false)");
  MX_AUTOCAST(MX_CPU, MX_BF16, false, true) { loss = mx_binary_cross_entropy(p, t, NULL, MX_REDUCTION_MEAN); }
  NOT_NULL(loss);
  cr_assert_float_eq(mx_item(loss), -log(0.25), 1e-6);
}

Test(autocast, none_leaves_inputs_alone) {
  mx_tensor *a = filled(MX_SHAPE(3), 1, MX_BF16), *b = filled(MX_SHAPE(3), 2, MX_F32), *y = NULL;
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) { y = mx_add(a, b); }
  cr_assert_eq(mx_dtype_of(y), MX_F32); /* ordinary type promotion */
  cr_assert_eq(mx_autocast_cache_stats_get().casts, 0);
}

Test(autocast, float64_and_other_devices_are_not_cast) {
  mx_tensor *a = filled(MX_SHAPE(2, 2), 1, MX_F64), *y = NULL, *z = NULL;
  mx_tensor *f = filled(MX_SHAPE(2, 2), 1, MX_F32);
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) { y = mx_mm(a, a); }
  MX_AUTOCAST(MX_CUDA, MX_F16, true, true) { z = mx_mm(f, f); } /* a CUDA region leaves CPU ops alone */
  cr_assert_eq(mx_dtype_of(y), MX_F64);
  cr_assert_eq(mx_dtype_of(z), MX_F32);
}

Test(autocast, in_place_ops_are_not_autocast) {
  mx_tensor *x = filled(MX_SHAPE(3), 1, MX_BF16);
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) { OK(mx_exp_(x)); }
  cr_assert_eq(mx_dtype_of(x), MX_BF16);
  cr_assert_eq(mx_autocast_cache_stats_get().casts, 0); /* out of place, exp would cast to f32 */
}

Test(autocast, fp16_on_the_cpu_overflows_like_a_gpu) {
  mx_tensor *a = filled(MX_SHAPE(1, 2), 300, MX_F32), *b = filled(MX_SHAPE(2, 1), 300, MX_F32);
  mx_tensor *h = NULL, *bf = NULL;
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) { h = mx_mm(a, b); }
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) { bf = mx_mm(a, b); }
  cr_assert(isinf(mx_item(h)), "180000 is beyond float16's 65504");
  cr_assert_eq(mx_item(bf), 180224.0); /* 180000 rounded to bfloat16 (steps of 1024 there) */
}

/* --- the policy table as data ----------------------------------------------------------------- */

Test(autocast, policies_can_be_overridden_and_listed) {
  mx_tensor *a = filled(MX_SHAPE(2, 2), 1, MX_F32), *y = NULL;
  OK(mx_autocast_set_policy("mm", MX_CAST_FP32));
  OK(mx_autocast_set_policy("exp", MX_CAST_NONE));
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) { y = mx_mm(a, a); }
  cr_assert_eq(mx_dtype_of(y), MX_F32);
  char buf[256] = "";
  FILE *f = fmemopen(buf, sizeof buf, "w");
  cr_assert_eq(mx_autocast_print_policy_changes(f), 2);
  fclose(f);
  cr_assert_str_eq(buf, "exp: fp32 -> none\nmm: lower -> fp32\n");
  cr_assert_eq(mx_autocast_set_policy("no_such_op", MX_CAST_LOWER), MX_INVALID_ARGUMENT);
  cr_assert_str_eq(mx_last_error(),
                   "mx_autocast_set_policy: no op named \"no_such_op\" (docs/ops.md lists them)");
  mx_autocast_reset_policies();
  cr_assert_eq(mx_autocast_print_policy_changes(NULL), 0);
}

/* --- the cast cache ------------------------------------------------------------------------------ */

Test(autocast, weights_are_cast_once_per_region) {
  mx_tensor *w = weight(MX_SHAPE(2, 2), 0.5), *x = filled(MX_SHAPE(2, 2), 1, MX_F32);
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    mx_mm(x, w);
    mx_mm(x, w);
    mx_autocast_cache_stats st = mx_autocast_cache_stats_get();
    cr_assert_eq(st.entries, 1);
    cr_assert_eq(st.hits, 1);
    cr_assert_eq(st.casts, 3); /* w once, x (not a weight) each time */
    MX_AUTOCAST(MX_CPU, MX_BF16, false, true) {}
    cr_assert_eq(mx_autocast_cache_stats_get().entries, 1, "an inner region's end keeps the cache");
  }
  cr_assert_eq(mx_autocast_cache_stats_get().entries, 0, "the outermost region's end clears it");
}

/* mx_autocast_clear_cache drops the casts inside a region: the next use is
 * a miss that casts afresh, and the region keeps caching after it. */
Test(autocast, clearing_the_cache_inside_a_region_casts_afresh) {
  mx_tensor *w = weight(MX_SHAPE(2, 2), 0.5), *x = filled(MX_SHAPE(2, 2), 1, MX_F32);
  mx_autocast_cache_stats st = {0};
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    mx_mm(x, w);
    mx_autocast_clear_cache();
    cr_assert_eq(mx_autocast_cache_stats_get().entries, 0);
    mx_mm(x, w);
    mx_mm(x, w);
    st = mx_autocast_cache_stats_get();
  }
  cr_assert_eq(st.entries, 1);
  cr_assert_eq(st.hits, 1, "w was cast again after the clear, then served from the cache");
  cr_assert_eq(st.casts, 5); /* w twice, x three times */
  mx_autocast_clear_cache(); /* outside any region: nothing to drop, no harm */
  cr_assert_eq(mx_autocast_cache_stats_get().entries, 0);
}

Test(autocast, cache_disabled_casts_every_time) {
  mx_tensor *w = weight(MX_SHAPE(2, 2), 0.5), *x = filled(MX_SHAPE(2, 2), 1, MX_F32);
  MX_AUTOCAST(MX_CPU, MX_BF16, true, false) {
    mx_mm(x, w);
    mx_mm(x, w);
  }
  mx_autocast_cache_stats st = mx_autocast_cache_stats_get();
  cr_assert_eq(st.hits, 0);
  cr_assert_eq(st.casts, 4);
}

Test(autocast, a_weight_changed_in_place_is_cast_afresh) {
  mx_tensor *w = weight(MX_SHAPE(1, 1), 1.0), *x = filled(MX_SHAPE(1, 1), 1, MX_F32);
  mx_tensor *before = NULL, *after = NULL;
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    before = mx_mm(x, w);
    MX_NO_GRAD { OK(mx_mul_scalar_(w, 3.0)); }
    after = mx_mm(x, w);
  }
  cr_assert_eq(mx_item(before), 1.0);
  cr_assert_eq(mx_item(after), 3.0, "a stale cache would answer 1");
  cr_assert_eq(mx_autocast_cache_stats_get().hits, 0);
}

Test(autocast, a_cast_cached_without_grad_still_reaches_the_weight) {
  mx_tensor *w = weight(MX_SHAPE(2, 2), 0.5), *x = filled(MX_SHAPE(2, 2), 2, MX_F32), *y = NULL;
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    MX_NO_GRAD { mx_mm(x, w); } /* fills the cache */
    y = mx_sum(mx_mm(x, w), MX_ALL_DIMS, false);
    cr_assert_eq(mx_autocast_cache_stats_get().hits, 1);
  }
  OK(mx_backward(y, NULL, false));
  mx_tensor *g = mx_grad_of(w);
  NOT_NULL(g);
  cr_assert_eq(mx_dtype_of(g), MX_F32, "the gradient reaches the f32 weight in f32");
  cr_assert_eq(mx_at(g, MX_SHAPE(0, 0)), 4.0); /* column sums of x */
}

static mx_tensor *two_layer_loss(mx_tensor *x, mx_tensor *w1, mx_tensor *w2) {
  return mx_sum(mx_mm(mx_relu(mx_mm(x, w1)), w2), MX_ALL_DIMS, false);
}

Test(autocast, backward_inside_a_region_gives_the_same_gradients) {
  mx_generator *gen = mx_generator_new(3);
  mx_tensor *x = mx_randn(MX_SHAPE(4, 3), MX_F32, MX_CPU, gen);
  mx_tensor *w1 = mx_randn(MX_SHAPE(3, 5), MX_F32, MX_CPU, gen), *w2 = mx_randn(MX_SHAPE(5, 2), MX_F32, MX_CPU, gen);
  mx_generator_free(gen);
  mx_set_requires_grad(w1, true);
  mx_set_requires_grad(w2, true);
  mx_tensor *loss = NULL;
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) { loss = two_layer_loss(x, w1, w2); }
  OK(mx_backward(loss, NULL, false));
  mx_tensor *g_outside = mx_clone(mx_grad_of(w1));
  mx_zero_grad(w1);
  mx_zero_grad(w2);
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
    loss = two_layer_loss(x, w1, w2);
    OK(mx_backward(loss, NULL, false));
  }
  mx_tensor *g_inside = mx_grad_of(w1);
  cr_assert_eq(mx_item(mx_all(mx_eq(g_inside, g_outside), MX_ALL_DIMS, false)), 1.0);
}

/* --- custom functions --------------------------------------------------------------------------- */

typedef struct {
  bool forward_autocast, backward_autocast;
  mx_dtype forward_input, backward_dtype;
} seen_state;

static mx_status double_forward(mx_function_ctx *ctx, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
  seen_state *seen = mx_ctx_user(ctx);
  seen->forward_autocast = mx_autocast_is_enabled(MX_CPU);
  seen->forward_input = mx_dtype_of(in[0]);
  out[0] = mx_mul_scalar(in[0], 2.0);
  return out[0] ? MX_OK : mx_last_status();
}

static mx_status double_backward(mx_function_ctx *ctx, int n_out, mx_tensor *const *g, int n_in, mx_tensor **gi) {
  seen_state *seen = mx_ctx_user(ctx);
  seen->backward_autocast = mx_autocast_is_enabled(MX_CPU);
  seen->backward_dtype = mx_autocast_dtype(MX_CPU);
  gi[0] = mx_mul_scalar(g[0], 2.0);
  return gi[0] ? MX_OK : mx_last_status();
}

static const mx_function doubler = {"Doubler", double_forward, double_backward};

static seen_state run_custom(bool in_region, mx_dtype cast_inputs, mx_dtype *out_dtype, mx_dtype *grad_dtype) {
  seen_state seen = {0};
  mx_tensor *x = filled(MX_SHAPE(3), 1.5, MX_BF16);
  mx_set_requires_grad(x, true);
  mx_tensor *y = NULL;
  if (in_region) OK(mx_autocast_begin(MX_CPU, MX_F16, true, true));
  OK(mx_amp_function_apply(&doubler, &seen, MX_CPU, cast_inputs, 1, &x, 1, &y));
  if (in_region) OK(mx_autocast_end());
  *out_dtype = mx_dtype_of(y);
  OK(mx_backward(mx_sum(mx_to_dtype(y, MX_F32), MX_ALL_DIMS, false), NULL, false));
  *grad_dtype = mx_dtype_of(mx_grad_of(x));
  cr_assert_eq(mx_at(mx_grad_of(x), MX_SHAPE(0)), 2.0);
  return seen;
}

Test(autocast, custom_fwd_with_cast_inputs) {
  mx_dtype out, grad;
  seen_state seen = run_custom(true, MX_F32, &out, &grad);
  cr_assert_eq(seen.forward_input, MX_F32, "inputs cast to cast_inputs");
  cr_assert_not(seen.forward_autocast, "forward runs with autocast off");
  cr_assert_not(seen.backward_autocast, "backward runs as forward ran: autocast off");
  cr_assert_eq(seen.backward_dtype, MX_F16);
  cr_assert_eq(out, MX_F32);
  cr_assert_eq(grad, MX_BF16, "the gradient flows back through the cast to the input's dtype");
}

Test(autocast, custom_fwd_without_cast_inputs) {
  mx_dtype out, grad;
  seen_state seen = run_custom(true, MX_DTYPE_COUNT, &out, &grad);
  cr_assert_eq(seen.forward_input, MX_BF16);
  cr_assert(seen.forward_autocast);
  cr_assert(seen.backward_autocast);
  seen = run_custom(false, MX_F32, &out, &grad); /* outside a region nothing is cast */
  cr_assert_eq(seen.forward_input, MX_BF16);
  cr_assert_not(seen.backward_autocast);
}

/* --- watching ---------------------------------------------------------------------------------- */

Test(autocast, trace_prints_one_line_per_op) {
  char buf[1024] = "";
  FILE *f = fmemopen(buf, sizeof buf, "w");
  mx_amp_trace(f);
  mx_tensor *w = weight(MX_SHAPE(2, 2), 0.5), *x = filled(MX_SHAPE(2, 2), 1, MX_F32);
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    mx_mm(x, w);
    mx_softmax(mx_mm(x, w), 1);
  }
  mx_amp_trace(NULL);
  fclose(f);
  /* On a CPU without bfloat16 dot products (or under valgrind, which hides
   * them) the dispatcher first notes that mm runs via float32 (ops/dispatch.c,
   * tested in tests/ops/test_supports.c): not one of autocast's lines. */
  const char *via_f32 = "amp: mm                   bfloat16 on cpu runs via float32: no bfloat16 kernel here (said once)\n";
  const char *lines = strncmp(buf, via_f32, strlen(via_f32)) ? buf : buf + strlen(via_f32);
  cr_assert_str_eq(lines,
                   "amp: mm                   lower   float32->bfloat16, float32->bfloat16 (cache miss) => bfloat16\n"
                   "amp: mm                   lower   float32->bfloat16, float32->bfloat16 (cache hit) => bfloat16\n"
                   "amp: softmax              fp32    bfloat16->float32 => float32\n");
}

Test(autocast, report_counts_ops_casts_and_hits) {
  mx_tensor *w = weight(MX_SHAPE(2, 2), 0.5), *x = filled(MX_SHAPE(2, 2), 1, MX_F32);
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    mx_mm(x, w);
    mx_mm(x, w);
  }
  char buf[1024] = "";
  FILE *f = fmemopen(buf, sizeof buf, "w");
  mx_amp_report(f);
  fclose(f);
  cr_assert(strstr(buf, "mm                                  2        3        1  bfloat16 x2\n"), "%s", buf);
  cr_assert(strstr(buf, "total: 2 ops in autocast regions, 3 casts (0.00 MB), 1 cache hits\n"), "%s", buf);
}
