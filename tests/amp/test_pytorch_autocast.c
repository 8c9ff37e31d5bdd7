/* PyTorch's own autocast test cases beyond the op lists, translated to
 * mixgrad (sections 2-5 of the translation: regions, eligibility, the cast
 * cache, custom functions; test_pytorch_cases.c has section 1 and the
 * sources and adaptations common to all). Every case asserts PyTorch's
 * values. */
#include <criterion/criterion.h>
#include <math.h>
#include <mixgrad.h>
#include <stdlib.h>
#include <string.h>

#include "pytorch_cases.h"

TestSuite(pytorch_autocast, .init = amp_suite_open, .fini = amp_suite_close);

/* ===================================================================================
 * 2. regions: defaults, nesting, enabled=False, bad arguments
 * =================================================================================== */

/* test_autocast.py TestTorchAutocast.test_autocast_fast_dtype: the default
 * lower dtypes, float16 on CUDA and bfloat16 on the CPU. */
Test(pytorch_autocast, autocast_fast_dtype) {
  cr_assert_eq(mx_autocast_dtype(MX_CUDA), MX_F16);
  cr_assert_eq(mx_autocast_dtype(MX_CPU), MX_BF16);
  MX_AUTOCAST(MX_CPU, MX_AUTOCAST_DEFAULT_DTYPE, true, true) { cr_assert_eq(mx_autocast_dtype(MX_CPU), MX_BF16); }
  MX_AUTOCAST(MX_CUDA, MX_AUTOCAST_DEFAULT_DTYPE, true, true) { cr_assert_eq(mx_autocast_dtype(MX_CUDA), MX_F16); }
}

/* test_autocast.py TestTorchAutocast.test_invalid_device: a device type that
 * does not exist is an error when the region begins. */
Test(pytorch_autocast, invalid_device) {
  cr_assert_eq(mx_autocast_begin((mx_device)MX_DEVICE_COUNT, MX_F16, true, true), MX_INVALID_ARGUMENT);
  cr_assert_eq(mx_autocast_depth(), 0);
  cr_assert_not(mx_autocast_is_enabled((mx_device)MX_DEVICE_COUNT));
}

/* test_autocast.py TestAutocastCPU.test_autocast_disabled_with_fp32_dtype:
 *     with torch.autocast(device_type="cpu", dtype=torch.float32, enabled=False):
 *         _ = torch.ones(10)
 * must run (a config that turns AMP off by setting dtype=float32 and
 * enabled=False is common). This suite found mixgrad refusing it
 * (mx_autocast_begin checked the dtype before looking at enabled); fixed,
 * and kept as a regression test. */
Test(pytorch_autocast, autocast_disabled_with_fp32_dtype) {
  bool ran = false;
  mx_tensor *ones = NULL;
  MX_AUTOCAST(MX_CPU, MX_F32, false, true) {
    ran = true;
    cr_assert_not(mx_autocast_is_enabled(MX_CPU));
    ones = mx_ones(MX_SHAPE(10), MX_F32, MX_CPU);
  }
  cr_assert(ran, "a disabled region with dtype float32 must begin: %s", mx_last_error());
  NOT_NULL(ones);
  cr_assert_eq(mx_autocast_depth(), 0);
}

/* torch.autocast's documented nesting example (torch/amp/autocast_mode.py,
 * "autocast(enabled=False) subregions can be nested in autocast-enabled
 * regions"), with test_cuda.py's (8, 8) float32 operands:
 *     with autocast():
 *         e_float16 = torch.mm(a_float32, b_float32)
 *         with autocast(enabled=False):
 *             f_float32 = torch.mm(c_float32, e_float16.float())
 *         g_float16 = torch.mm(d_float32, f_float32)
 * plus a nested region of another lower dtype, which wins inside it and
 * hands the outer one back after. */
Test(pytorch_autocast, autocast_nested_regions) {
  mx_generator *gen = mx_generator_new(7);
  mx_tensor *a = mx_rand(MX_SHAPE(8, 8), MX_F32, MX_CPU, gen), *b = mx_rand(MX_SHAPE(8, 8), MX_F32, MX_CPU, gen);
  mx_tensor *c = mx_rand(MX_SHAPE(8, 8), MX_F32, MX_CPU, gen), *d = mx_rand(MX_SHAPE(8, 8), MX_F32, MX_CPU, gen);
  mx_generator_free(gen);
  mx_tensor *e = NULL, *f = NULL, *g = NULL, *h = NULL, *i = NULL;
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
    e = mx_mm(a, b);
    MX_AUTOCAST(MX_CPU, MX_F16, false, true) {
      cr_assert_not(mx_autocast_is_enabled(MX_CPU));
      cr_assert_eq(mx_autocast_depth(), 2);
      f = mx_mm(c, mx_to_dtype(e, MX_F32));
    }
    cr_assert(mx_autocast_is_enabled(MX_CPU));
    g = mx_mm(d, f);
    MX_AUTOCAST(MX_CPU, MX_BF16, true, true) { h = mx_mm(a, b); }
    i = mx_mm(a, b);
    cr_assert_eq(mx_autocast_dtype(MX_CPU), MX_F16);
  }
  cr_assert_eq(mx_autocast_depth(), 0);
  cr_assert_eq(mx_dtype_of(e), MX_F16);
  cr_assert_eq(mx_dtype_of(f), MX_F32);
  cr_assert_eq(mx_dtype_of(g), MX_F16);
  cr_assert_eq(mx_dtype_of(h), MX_BF16);
  cr_assert_eq(mx_dtype_of(i), MX_F16);
  expect_bitwise("e", e, mx_mm(mx_to_dtype(a, MX_F16), mx_to_dtype(b, MX_F16)));
  expect_bitwise("f", f, mx_mm(c, mx_to_dtype(e, MX_F32)));
  expect_bitwise("g", g, mx_mm(mx_to_dtype(d, MX_F16), mx_to_dtype(f, MX_F16)));
  expect_bitwise("h", h, mx_mm(mx_to_dtype(a, MX_BF16), mx_to_dtype(b, MX_BF16)));
}

/* torch.autocast as a decorator (autocast_mode.py: "autocast can also be
 * used as a decorator"): mx_autocast_run, autocast off again afterwards. */
static mx_status decorated_mm(void *ctx) {
  mx_tensor **io = ctx;
  io[2] = mx_mm(io[0], io[1]);
  return io[2] ? MX_OK : mx_last_status();
}

Test(pytorch_autocast, autocast_as_decorator) {
  mx_tensor *io[3] = {mx_ones(MX_SHAPE(2, 3), MX_F32, MX_CPU), mx_ones(MX_SHAPE(3, 2), MX_F32, MX_CPU), NULL};
  OK(mx_autocast_run(MX_CPU, MX_F16, true, true, decorated_mm, io));
  cr_assert_eq(mx_dtype_of(io[2]), MX_F16);
  cr_assert(all_equal_to(io[2], 3.0));
  cr_assert_not(mx_autocast_is_enabled(MX_CPU));
}

/* ===================================================================================
 * 3. eligibility: float64 and integer inputs, explicit dtype arguments
 * =================================================================================== */

/* test_cuda.py test_autocast_ignored_types: inside a region float64 and
 * int32 operands are left alone by every policy:
 *   - lower (mm): mm(f64, f16) raises (autocast does not cast the f64 and mm
 *     does not promote); mm(f64, f64) has the dtype it has outside;
 *   - fp32 (pow(t, 2.0)), fp32_set_opt_dtype (sum), fp32_append_dtype (norm,
 *     f64 only): the dtype they have outside. */
Test(pytorch_autocast, autocast_ignored_types) {
  const mx_dtype ignore_types[] = {MX_F64, MX_I32};
  for (int k = 0; k < 2; k++) {
    mx_dtype type = ignore_types[k];
    mx_tensor *a = mx_ones(MX_SHAPE(8, 8), type, MX_CPU), *b = mx_ones(MX_SHAPE(8, 8), type, MX_CPU);
    mx_tensor *c16 = mx_ones(MX_SHAPE(8, 8), MX_F16, MX_CPU);
    mx_tensor *mixed = NULL, *mm = NULL, *pow = NULL, *sum = NULL, *norm = NULL;
    MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
      if (type == MX_F64) {
        mixed = mx_mm(a, c16);
        mm = mx_mm(a, b);
        norm = mx_norm(a, 2, MX_ALL_DIMS, false);
      }
      pow = mx_pow_scalar(a, 2.0);
      sum = mx_sum(a, MX_ALL_DIMS, false);
    }
    if (type == MX_F64) {
      cr_expect_null(mixed, "mm(float64, float16) in a region: PyTorch raises (no autocast cast, no promotion); "
                            "got a %s result", mixed ? mx_dtype_name(mx_dtype_of(mixed)) : "");
      NOT_NULL(mm);
      cr_assert_eq(mx_dtype_of(mm), mx_dtype_of(mx_mm(a, b)));
      NOT_NULL(norm);
      cr_assert_eq(mx_dtype_of(norm), mx_dtype_of(mx_norm(a, 2, MX_ALL_DIMS, false)));
      expect_bitwise("norm(f64)", norm, mx_norm(a, 2, MX_ALL_DIMS, false));
    }
    NOT_NULL(pow);
    NOT_NULL(sum);
    cr_assert_eq(mx_dtype_of(pow), mx_dtype_of(mx_pow_scalar(a, 2.0)), "%s", mx_dtype_name(type));
    cr_assert_eq(mx_dtype_of(sum), mx_dtype_of(mx_sum(a, MX_ALL_DIMS, false)), "%s", mx_dtype_name(type));
    cr_assert_eq(mx_item(sum), 64.0);
  }
}

/* Float64 is never autocast (autocast_mode.h cached_cast: "arg.scalar_type()
 * != at::kDouble"; prioritize ignores double): under a float16 region f64
 * operands of a lower, a float32 and a promote op run as they do outside,
 * bit for bit; in promote a float64 neither joins nor widens the promoted
 * type (the f16 operands stay f16 and type promotion then gives f64). */
Test(pytorch_autocast, float64_inputs_untouched) {
  mx_generator *gen = mx_generator_new(11);
  mx_tensor *a = mx_randn(MX_SHAPE(8, 8), MX_F64, MX_CPU, gen), *b = mx_randn(MX_SHAPE(8, 8), MX_F64, MX_CPU, gen);
  mx_tensor *h = mx_to_dtype(mx_randn(MX_SHAPE(8, 8), MX_F32, MX_CPU, gen), MX_F16);
  mx_generator_free(gen);
  mx_tensor *mm = NULL, *e = NULL, *sm = NULL, *p = NULL, *lin = NULL;
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
    mm = mx_mm(a, b);
    lin = mx_linear(a, b, NULL);
    e = mx_exp(a);
    sm = mx_softmax(a, 1);
    p = mx_addcmul(a, h, h, 1.0);
  }
  expect_bitwise("mm(f64)", mm, mx_mm(a, b));
  expect_bitwise("linear(f64)", lin, mx_linear(a, b, NULL));
  expect_bitwise("exp(f64)", e, mx_exp(a));
  expect_bitwise("softmax(f64)", sm, mx_softmax(a, 1));
  expect_bitwise("addcmul(f64, f16, f16)", p, mx_addcmul(a, h, h, 1.0));
  cr_assert_eq(mx_autocast_cache_stats_get().casts, 0, "nothing is cast");
}

/* Integer inputs are not eligible (is_autocast_eligible: floating point
 * only): lower, float32 and promote ops give what they give outside. */
Test(pytorch_autocast, autocast_integer_inputs) {
  mx_tensor *i = mx_arange(0, 8, 1, MX_I64, MX_CPU), *j = mx_arange(0, 8, 1, MX_I32, MX_CPU);
  mx_tensor *sum = NULL, *prod = NULL, *cs = NULL, *add = NULL, *idx = NULL;
  mx_tensor *x = mx_to_dtype(mx_arange(0, 8, 1, MX_F32, MX_CPU), MX_F16);
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
    sum = mx_sum(j, MX_ALL_DIMS, false);
    prod = mx_prod(mx_arange(1, 9, 1, MX_I32, MX_CPU), MX_ALL_DIMS, false);
    cs = mx_cumsum(i, 0);
    add = mx_add(i, j);
    idx = mx_index_select(x, 0, i); /* an int64 index next to an f16 input */
  }
  cr_assert_eq(mx_dtype_of(sum), MX_I64);
  cr_assert_eq(mx_item(sum), 28.0);
  cr_assert_eq(mx_dtype_of(prod), MX_I64);
  cr_assert_eq(mx_item(prod), 40320.0);
  cr_assert_eq(mx_dtype_of(cs), MX_I64);
  cr_assert_eq(mx_at(cs, MX_SHAPE(7)), 28.0);
  cr_assert_eq(mx_dtype_of(add), MX_I64);
  cr_assert_eq(mx_dtype_of(idx), MX_F16);
  cr_assert_eq(mx_autocast_cache_stats_get().casts, 0);
}

/* autocast_mode.h's fp32_set_opt_dtype policy (sum, prod, softmax,
 * log_softmax, cumsum, cumprod): with no dtype argument an eligible input
 * runs in float32; with an explicit dtype the call runs as given, neither
 * input nor dtype overridden. Values: the same call outside the region. */
Test(pytorch_autocast, explicit_dtype_arguments) {
  mx_generator *gen = mx_generator_new(5);
  mx_tensor *x = mx_to_dtype(mx_randn(MX_SHAPE(4, 6), MX_F32, MX_CPU, gen), MX_F16);
  mx_generator_free(gen);
  mx_tensor *s16 = NULL, *s64 = NULL, *sm16 = NULL, *lsm16 = NULL, *sm32 = NULL, *s = NULL;
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
    s = mx_sum(x, MX_DIMS(1), false);
    s16 = mx_sum_dtype(x, MX_DIMS(1), false, MX_F16);
    s64 = mx_sum_dtype(x, MX_ALL_DIMS, false, MX_F64);
    sm16 = mx_softmax_dtype(x, 1, MX_F16);
    lsm16 = mx_log_softmax_dtype(x, 1, MX_F16);
    sm32 = mx_softmax_dtype(x, 1, MX_F32);
  }
  cr_assert_eq(mx_dtype_of(s), MX_F32);
  expect_bitwise("sum(x)", s, mx_sum(mx_to_dtype(x, MX_F32), MX_DIMS(1), false));
  expect_bitwise("sum(x, dtype=f16)", s16, mx_sum_dtype(x, MX_DIMS(1), false, MX_F16));
  expect_bitwise("sum(x, dtype=f64)", s64, mx_sum_dtype(x, MX_ALL_DIMS, false, MX_F64));
  expect_bitwise("softmax(x, dtype=f16)", sm16, mx_softmax_dtype(x, 1, MX_F16));
  expect_bitwise("log_softmax(x, dtype=f16)", lsm16, mx_log_softmax_dtype(x, 1, MX_F16));
  expect_bitwise("softmax(x, dtype=f32)", sm32, mx_softmax_dtype(x, 1, MX_F32));
}

/* test_autocast.py TestAutocastGPU.test_autocast_prioritize (issue 132715):
 * index_put (promote) on bfloat16 operands in a bfloat16 region, then
 * backward inside the region, must not fail on a dtype mismatch. */
Test(pytorch_autocast, autocast_prioritize) {
  mx_generator *gen = mx_generator_new(132715);
  mx_tensor *t = leaf(mx_to_dtype(mx_randn(MX_SHAPE(3, 4, 5), MX_F32, MX_CPU, gen), MX_BF16));
  mx_tensor *index = mx_randint(0, 3, MX_SHAPE(3, 4, 5), MX_I64, MX_CPU, gen);
  mx_tensor *val = mx_to_dtype(mx_randn(MX_SHAPE(1), MX_F32, MX_CPU, gen), MX_BF16);
  mx_generator_free(gen);
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    mx_tensor *res = mx_index_put(t, 1, &index, val, false);
    NOT_NULL(res);
    cr_assert_eq(mx_dtype_of(res), MX_BF16);
    mx_tensor *loss = mx_mean(res, MX_ALL_DIMS, false);
    NOT_NULL(loss);
    OK(mx_backward(loss, NULL, false));
  }
  NOT_NULL(mx_grad_of(t));
  cr_assert_eq(mx_dtype_of(mx_grad_of(t)), MX_BF16);
}

/* ===================================================================================
 * 4. the cast cache
 * =================================================================================== */

/* test_cuda.py test_autocast_cache_leak (issue 48049): in a region under
 * no_grad, calling a Linear(10, 10) again does not cast its weights again,
 * so memory in use after the first call stays the same
 * (torch.cuda.memory_allocated -> mx_memory_stats_get(MX_CPU).bytes_in_use;
 * Python frees the previous `out` when the name is rebound, so the previous
 * output is released here). */
Test(pytorch_autocast, autocast_cache_leak) {
  mx_generator *gen = mx_generator_new(48049);
  linear_layer linear = make_linear(10, 10, gen);
  mx_tensor *data = mx_randn(MX_SHAPE(1, 10), MX_F32, MX_CPU, gen);
  mx_generator_free(gen);
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
    MX_NO_GRAD {
      mx_tensor *out = apply_linear(&linear, data);
      NOT_NULL(out);
      int64_t first_iter_mem = mx_memory_stats_get(MX_CPU).bytes_in_use;
      for (int k = 0; k < 3; k++) {
        mx_tensor *next = apply_linear(&linear, data);
        NOT_NULL(next);
        mx_release(out);
        out = next;
      }
      cr_assert_eq(mx_memory_stats_get(MX_CPU).bytes_in_use, first_iter_mem);
      mx_autocast_cache_stats st = mx_autocast_cache_stats_get();
      cr_assert_eq(st.entries, 2, "weight and bias, cached once");
      cr_assert_eq(st.hits, 6, "three calls after the first, two hits each");
    }
  }
}

/* autocast_mode.py: leaving the outermost region clears the cache
 * (torch.clear_autocast_cache in __exit__ when the nesting level drops to
 * 0), and with it the memory the casts held; an inner region's exit keeps
 * it. */
Test(pytorch_autocast, cache_cleared_on_exit) {
  mx_generator *gen = mx_generator_new(3);
  linear_layer linear = make_linear(64, 64, gen);
  mx_tensor *data = mx_randn(MX_SHAPE(2, 64), MX_F32, MX_CPU, gen);
  mx_generator_free(gen);
  int64_t before = mx_memory_stats_get(MX_CPU).bytes_in_use;
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
    MX_AUTOCAST(MX_CPU, MX_F16, true, true) { mx_release(apply_linear(&linear, data)); }
    cr_assert_eq(mx_autocast_cache_stats_get().entries, 2, "an inner region's exit keeps the cache");
    cr_assert_geq(mx_memory_stats_get(MX_CPU).bytes_in_use, before + 64 * 64 * 2, "the f16 weight is held");
  }
  cr_assert_eq(mx_autocast_cache_stats_get().entries, 0);
  cr_assert_eq(mx_memory_stats_get(MX_CPU).bytes_in_use, before, "the casts' memory is freed with the cache");
}

/* test_autocast.py's CustomLinear: linear in forward; backward opens its own
 * region and runs two matmuls (dL/dX with the weight, dL/dW). The region is
 * torch.autocast(device_type=...) with cache_enabled left at None, which
 * PyTorch resolves to the thread's current setting. */
static mx_status custom_linear_forward(mx_function_ctx *ctx, int n_in, mx_tensor *const *in, int n_out,
                                       mx_tensor **out) {
  mx_status status = mx_ctx_save(ctx, 2, in);
  if (status != MX_OK) return status;
  out[0] = mx_linear(in[0], in[1], NULL);
  return out[0] ? MX_OK : mx_last_status();
}

static mx_status custom_linear_backward(mx_function_ctx *ctx, int n_out, mx_tensor *const *g, int n_in,
                                        mx_tensor **gi) {
  mx_tensor *x = mx_ctx_saved(ctx, 0), *w_t = mx_ctx_saved(ctx, 1);
  MX_AUTOCAST(MX_CPU, MX_F16, true, mx_autocast_is_cache_enabled()) {
    gi[0] = mx_matmul(g[0], w_t);
    gi[1] = mx_transpose(mx_matmul(mx_transpose(x, 0, 1), g[0]), 0, 1);
  }
  return gi[0] && gi[1] ? MX_OK : mx_last_status();
}

static const mx_function custom_linear = {"CustomLinear", custom_linear_forward, custom_linear_backward};

/* test_autocast.py TestAutocastGPU.test_cast_cache_is_global: forward and
 * backward of CustomLinear cast the weight to float16 once: the cache is
 * one per thread, shared by every region until the outermost ends. PyTorch
 * keeps the cache alive past the forward region by mocking
 * clear_autocast_cache; here an enclosing enabled=False region does that
 * (its end is then the outermost one). TestAutocastMPS.test_cast_cache_is_global
 * is the same without the mock: the cache is cleared between forward and
 * backward, so the weight is cast twice. WeightDTypeCastCounterMode counts
 * the weight's _to_copy calls; here the trace's cache misses (the weight is
 * the only cacheable operand: the data does not require grad). */
static int count_in(const char *text, const char *what) {
  int n = 0;
  for (const char *p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

static void weight_casts(bool mock_clear, int *casts, int *hits) {
  mx_generator *gen = mx_generator_new(2);
  mx_tensor *data = mx_randn(MX_SHAPE(2, 3), MX_F32, MX_CPU, gen);
  mx_tensor *weight = leaf(mx_randn(MX_SHAPE(4, 3), MX_F32, MX_CPU, gen));
  mx_generator_free(gen);
  static char trace[8192];
  memset(trace, 0, sizeof trace);
  FILE *f = fmemopen(trace, sizeof trace - 1, "w");
  cr_assert_not_null(f);
  mx_amp_trace(f);
  if (mock_clear) OK(mx_autocast_begin(MX_CPU, MX_F16, false, true));
  mx_tensor *in[2] = {data, weight}, *output = NULL, *s = NULL;
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
    OK(mx_function_apply(&custom_linear, NULL, 2, in, 1, &output));
    s = mx_sum(output, MX_ALL_DIMS, false);
  }
  NOT_NULL(s);
  OK(mx_backward(s, NULL, false));
  if (mock_clear) OK(mx_autocast_end());
  mx_amp_trace(NULL);
  fclose(f);
  *casts = count_in(trace, "(cache miss)");
  *hits = count_in(trace, "(cache hit)");
  NOT_NULL(mx_grad_of(weight));
  cr_assert_eq(mx_dtype_of(mx_grad_of(weight)), MX_F32);
  cr_assert_eq(mx_autocast_cache_stats_get().entries, 0);
}

Test(pytorch_autocast, cast_cache_is_global) {
  int casts, hits;
  weight_casts(true, &casts, &hits);
  cr_assert_eq(casts, 1, "one cache shared by forward's and backward's regions");
  cr_assert_eq(hits, 1, "the backward's weight comes from the cache");
  weight_casts(false, &casts, &hits);
  cr_assert_eq(casts, 2, "the cache was cleared when the forward's region ended");
  cr_assert_eq(hits, 0);
}

/* test_autocast.py TestAutocastGPU.test_cache_disabled: a weight the cache
 * must not hold (PyTorch: a tensor registered with _add_cached_tensor; here:
 * regions with cache_enabled = false) is cast each time it is used, twice
 * across CustomLinear's forward and backward. */
static mx_autocast_cache_stats custom_linear_casts(bool cache_enabled) {
  mx_generator *gen = mx_generator_new(2);
  mx_tensor *data = mx_randn(MX_SHAPE(2, 3), MX_F32, MX_CPU, gen);
  mx_tensor *weight = leaf(mx_randn(MX_SHAPE(4, 3), MX_F32, MX_CPU, gen));
  mx_generator_free(gen);
  mx_amp_report_reset();
  mx_tensor *in[2] = {data, weight}, *output = NULL, *s = NULL;
  OK(mx_autocast_begin(MX_CPU, MX_F16, false, cache_enabled)); /* one outermost region around both */
  MX_AUTOCAST(MX_CPU, MX_F16, true, cache_enabled) {
    OK(mx_function_apply(&custom_linear, NULL, 2, in, 1, &output));
    s = mx_sum(output, MX_ALL_DIMS, false);
  }
  OK(mx_backward(s, NULL, false));
  OK(mx_autocast_end());
  return mx_autocast_cache_stats_get();
}

Test(pytorch_autocast, cache_disabled) {
  /* casts: forward data, weight; sum's float16 -> float32; backward weight, data */
  mx_autocast_cache_stats off = custom_linear_casts(false), on = custom_linear_casts(true);
  cr_assert_eq(off.hits, 0);
  cr_assert_eq(off.casts, 5, "%lld casts", (long long)off.casts);
  cr_assert_eq(on.hits, 1, "with the cache the backward's weight is a hit");
  cr_assert_eq(on.casts, 4, "%lld casts", (long long)on.casts);
  cr_assert_eq(mx_autocast_cache_stats_get().entries, 0);
}

/* test_autocast.py TestTorchAutocast.test_autocast_nograd_caching_issue_158232
 * (the CPU form: bfloat16; the CUDA form: float16; both run here): a
 * forward under no_grad inside a region, then one with grad, must give an
 * output that requires grad and has a grad_fn, and backward must reach the
 * Linear's weight and bias (the cast cached under no_grad must not cut
 * the graph). */
static void nograd_then_grad(mx_dtype dtype) {
  mx_generator *gen = mx_generator_new(158232);
  linear_layer model = make_linear(2, 2, gen);
  mx_tensor *inp = mx_randn(MX_SHAPE(8, 2), MX_F32, MX_CPU, gen);
  mx_generator_free(gen);
  MX_AUTOCAST(MX_CPU, dtype, true, true) {
    MX_NO_GRAD {
      mx_tensor *out1 = apply_linear(&model, inp);
      NOT_NULL(out1);
      cr_assert_not(mx_requires_grad(out1), "Output in no_grad should not require grad");
    }
    mx_tensor *out2 = apply_linear(&model, inp);
    NOT_NULL(out2);
    cr_assert(mx_requires_grad(out2), "Output should require gradients after exiting no_grad");
    cr_assert_not_null(mx_grad_fn_name(out2), "Output should have grad_fn after exiting no_grad");
    OK(mx_backward(mx_mean(out2, MX_ALL_DIMS, false), NULL, false));
  }
  cr_assert_not_null(mx_grad_of(model.weight));
  cr_assert_not_null(mx_grad_of(model.bias));
  /* d mean / d bias = 8 rows / 16 elements */
  cr_assert(all_equal_to(mx_grad_of(model.bias), 0.5));
}

Test(pytorch_autocast, autocast_nograd_caching_issue_158232) {
  nograd_then_grad(MX_BF16);
  nograd_then_grad(MX_F16);
}

/* test_autocast.py TestTorchAutocast.test_autocast_mixed_grad_contexts:
 * no_grad, grad, no_grad, grad passes in one region; the two grad outputs
 * backpropagate together. */
Test(pytorch_autocast, autocast_mixed_grad_contexts) {
  const mx_dtype dtypes[] = {MX_BF16, MX_F16};
  for (int k = 0; k < 2; k++) {
    mx_generator *gen = mx_generator_new(9);
    linear_layer model = make_linear(2, 2, gen);
    mx_tensor *inp = mx_randn(MX_SHAPE(8, 2), MX_F32, MX_CPU, gen);
    mx_generator_free(gen);
    mx_tensor *out2 = NULL, *out4 = NULL;
    MX_AUTOCAST(MX_CPU, dtypes[k], true, true) {
      MX_NO_GRAD { cr_assert_not(mx_requires_grad(apply_linear(&model, inp))); }
      out2 = apply_linear(&model, inp);
      cr_assert(mx_requires_grad(out2));
      MX_NO_GRAD { cr_assert_not(mx_requires_grad(apply_linear(&model, inp))); }
      out4 = apply_linear(&model, inp);
      cr_assert(mx_requires_grad(out4));
      OK(mx_backward(mx_add(mx_mean(out2, MX_ALL_DIMS, false), mx_mean(out4, MX_ALL_DIMS, false)), NULL, false));
    }
    cr_assert(all_equal_to(mx_grad_of(model.bias), 1.0));
  }
}

/* test_autocast.py TestTorchAutocast.test_autocast_caching_still_works_with_gradients:
 * three passes with grad in one region (the weight cast served from the
 * cache twice), each output requiring grad with a grad_fn, each
 * backpropagating (retain_graph for the first two): the weight's gradient
 * is three times one pass's. */
Test(pytorch_autocast, autocast_caching_still_works_with_gradients) {
  const mx_dtype dtypes[] = {MX_BF16, MX_F16};
  for (int k = 0; k < 2; k++) {
    mx_generator *gen = mx_generator_new(10);
    linear_layer model = make_linear(2, 2, gen);
    mx_tensor *inp = mx_randn(MX_SHAPE(8, 2), MX_F32, MX_CPU, gen);
    mx_generator_free(gen);
    mx_tensor *single = NULL;
    MX_AUTOCAST(MX_CPU, dtypes[k], true, true) {
      OK(mx_backward(mx_mean(apply_linear(&model, inp), MX_ALL_DIMS, false), NULL, false));
    }
    single = mx_clone(mx_grad_of(model.weight));
    mx_zero_grad(model.weight);
    mx_zero_grad(model.bias);
    mx_amp_report_reset();
    MX_AUTOCAST(MX_CPU, dtypes[k], true, true) {
      mx_tensor *out[3];
      for (int i = 0; i < 3; i++) {
        out[i] = apply_linear(&model, inp);
        cr_assert(mx_requires_grad(out[i]));
        cr_assert_not_null(mx_grad_fn_name(out[i]));
      }
      cr_assert_eq(mx_autocast_cache_stats_get().hits, 4, "weight and bias, twice each");
      OK(mx_backward(mx_mean(out[0], MX_ALL_DIMS, false), NULL, true));
      OK(mx_backward(mx_mean(out[1], MX_ALL_DIMS, false), NULL, true));
      OK(mx_backward(mx_mean(out[2], MX_ALL_DIMS, false), NULL, false));
    }
    expect_close("3 x one pass's gradient", mx_grad_of(model.weight), mx_mul_scalar(single, 3), 1e-6, 1e-6);
  }
}

/* test_autocast.py TestTorchAutocast.test_autocast_inference_mode_interaction,
 * with no_grad for inference_mode (mixgrad has no inference mode): a no_grad
 * block inside a region gives region-dtype outputs that do not require
 * grad, and grad works again after it; a region inside no_grad likewise. */
Test(pytorch_autocast, autocast_no_grad_interaction) {
  mx_generator *gen = mx_generator_new(12);
  linear_layer model = make_linear(2, 2, gen);
  mx_tensor *inp = mx_randn(MX_SHAPE(8, 2), MX_F32, MX_CPU, gen);
  mx_generator_free(gen);
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    MX_NO_GRAD {
      mx_tensor *out1 = apply_linear(&model, inp);
      cr_assert_not(mx_requires_grad(out1));
      cr_assert_eq(mx_dtype_of(out1), MX_BF16);
    }
    mx_tensor *out2 = apply_linear(&model, inp);
    cr_assert(mx_requires_grad(out2));
    OK(mx_backward(mx_mean(out2, MX_ALL_DIMS, false), NULL, false));
  }
  MX_NO_GRAD {
    MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
      mx_tensor *out = apply_linear(&model, inp);
      cr_assert_not(mx_requires_grad(out));
      cr_assert_eq(mx_dtype_of(out), MX_BF16);
    }
  }
}

/* ===================================================================================
 * 5. custom functions: custom_fwd / custom_bwd
 * =================================================================================== */

typedef struct {
  mx_dtype expect_type;   /* the inputs' dtype forward must see */
  bool fwd_inputs_ok;     /* both inputs of that dtype */
  bool fwd_autocast;      /* torch.is_autocast_enabled() in forward */
  bool bwd_autocast;      /* ... in backward */
  mx_dtype bwd_grad_type; /* the dtype of a_grad and b_grad */
  bool bwd_ran;
} mymm_seen;

static mx_status mymm_forward(mx_function_ctx *ctx, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
  mymm_seen *seen = mx_ctx_user(ctx);
  seen->fwd_inputs_ok = mx_dtype_of(in[0]) == seen->expect_type && mx_dtype_of(in[1]) == seen->expect_type;
  seen->fwd_autocast = mx_autocast_is_enabled(MX_CPU);
  mx_status status = mx_ctx_save(ctx, 2, in);
  if (status != MX_OK) return status;
  out[0] = mx_mm(in[0], in[1]);
  return out[0] ? MX_OK : mx_last_status();
}

static mx_status mymm_backward(mx_function_ctx *ctx, int n_out, mx_tensor *const *g, int n_in, mx_tensor **gi) {
  mymm_seen *seen = mx_ctx_user(ctx);
  mx_tensor *a = mx_ctx_saved(ctx, 0), *b = mx_ctx_saved(ctx, 1);
  seen->bwd_ran = true;
  seen->bwd_autocast = mx_autocast_is_enabled(MX_CPU);
  gi[0] = mx_mm(g[0], mx_transpose(b, 0, 1));
  gi[1] = mx_mm(mx_transpose(a, 0, 1), g[0]);
  if (!gi[0] || !gi[1]) return mx_last_status();
  seen->bwd_grad_type = mx_dtype_of(gi[0]) == mx_dtype_of(gi[1]) ? mx_dtype_of(gi[0]) : MX_DTYPE_COUNT;
  return MX_OK;
}

static const mx_function mymm = {"MyMM", mymm_forward, mymm_backward};

/* test_cuda.py test_autocast_custom_enabled: MyMM with custom_fwd (no
 * cast_inputs) / custom_bwd, applied in a region to float32 (8, 8) x and y
 * that require grad: forward sees float32 inputs and autocast on, its mm
 * gives the region's dtype; backward runs with autocast on, so its mms give
 * the region's dtype; loss.backward() reaches x and y. For float16 and
 * bfloat16 (TEST_BF16). */
Test(pytorch_autocast, autocast_custom_enabled) {
  const mx_dtype dtypes[] = {MX_F16, MX_BF16};
  for (int k = 0; k < 2; k++) {
    mx_dtype dtype = dtypes[k];
    mx_generator *gen = mx_generator_new(20);
    mx_tensor *x = leaf(mx_randn(MX_SHAPE(8, 8), MX_F32, MX_CPU, gen));
    mx_tensor *y = leaf(mx_randn(MX_SHAPE(8, 8), MX_F32, MX_CPU, gen));
    mx_generator_free(gen);
    mymm_seen seen = {.expect_type = MX_F32};
    mx_tensor *in[2] = {x, y}, *output = NULL, *loss = NULL;
    MX_AUTOCAST(MX_CPU, dtype, true, true) {
      OK(mx_amp_function_apply(&mymm, &seen, MX_CPU, MX_DTYPE_COUNT, 2, in, 1, &output));
      cr_assert_eq(mx_dtype_of(output), dtype);
      loss = mx_sum(output, MX_ALL_DIMS, false);
    }
    OK(mx_backward(loss, NULL, false));
    cr_assert(seen.fwd_inputs_ok, "%s: forward's inputs are float32", mx_dtype_name(dtype));
    cr_assert(seen.fwd_autocast, "%s: forward runs with autocast on", mx_dtype_name(dtype));
    cr_assert(seen.bwd_ran);
    cr_assert(seen.bwd_autocast, "%s: custom_bwd runs backward with autocast on", mx_dtype_name(dtype));
    cr_assert_eq(seen.bwd_grad_type, dtype, "%s: backward's mms give %s", mx_dtype_name(dtype),
                 mx_dtype_name(seen.bwd_grad_type));
    /* autograd hands a leaf its gradient in the leaf's dtype (validate_outputs) */
    NOT_NULL(mx_grad_of(x));
    NOT_NULL(mx_grad_of(y));
    cr_assert_eq(mx_dtype_of(mx_grad_of(x)), MX_F32);
    /* d sum(x y) / dx = ones y^T: row sums of y, rounded through the region's dtype */
    mx_tensor *ones = mx_ones(MX_SHAPE(8, 8), dtype, MX_CPU);
    expect_close("x.grad", mx_grad_of(x), mx_mm(ones, mx_transpose(mx_to_dtype(y, dtype), 0, 1)), 0.1, 0.02);
  }
}

/* test_cuda.py test_autocast_custom_cast_inputs: MyMM with
 * custom_fwd(cast_inputs=torch.float32) / custom_bwd, x float16 requiring
 * grad, y float16 not (PyTorch passes y inside a nested container; C has
 * none, so y is a plain input and MyMM gives it no gradient):
 *   - in a region: forward sees both inputs float32 and autocast off; the
 *     output is float32; backward runs with autocast off
 *     (custom_fwd sets _fwd_used_autocast = False when it casts, and
 *     custom_bwd restores that);
 *   - outside a region custom_fwd is a no-op: forward sees float16 inputs
 *     and the output is float16.
 * This suite found mixgrad running that backward with autocast on
 * (amp/custom.c restored the region's enabled flag although forward ran
 * with autocast off); fixed, and kept as a regression test. */
static mx_status mymm_cast_backward(mx_function_ctx *ctx, int n_out, mx_tensor *const *g, int n_in, mx_tensor **gi) {
  mymm_seen *seen = mx_ctx_user(ctx);
  mx_tensor *b = mx_ctx_saved(ctx, 1);
  seen->bwd_ran = true;
  seen->bwd_autocast = mx_autocast_is_enabled(MX_CPU);
  gi[0] = mx_mm(g[0], mx_transpose(b, 0, 1));
  gi[1] = NULL;
  if (!gi[0]) return mx_last_status();
  seen->bwd_grad_type = mx_dtype_of(gi[0]);
  return MX_OK;
}

static const mx_function mymm_cast = {"MyMM", mymm_forward, mymm_cast_backward};

Test(pytorch_autocast, autocast_custom_cast_inputs) {
  mx_generator *gen = mx_generator_new(21);
  mx_tensor *x = leaf(mx_to_dtype(mx_randn(MX_SHAPE(8, 8), MX_F32, MX_CPU, gen), MX_F16));
  mx_tensor *y = mx_to_dtype(mx_randn(MX_SHAPE(8, 8), MX_F32, MX_CPU, gen), MX_F16);
  mx_generator_free(gen);
  mx_tensor *in[2] = {x, y}, *output = NULL, *loss = NULL;

  mymm_seen inside = {.expect_type = MX_F32};
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
    OK(mx_amp_function_apply(&mymm_cast, &inside, MX_CPU, MX_F32, 2, in, 1, &output));
    cr_assert_eq(mx_dtype_of(output), MX_F32);
    loss = mx_sum(output, MX_ALL_DIMS, false);
  }
  OK(mx_backward(loss, NULL, false));
  cr_assert(inside.fwd_inputs_ok, "forward sees the inputs cast to float32");
  cr_assert_not(inside.fwd_autocast, "forward runs with autocast off");
  cr_assert(inside.bwd_ran);
  cr_assert_eq(mx_dtype_of(mx_grad_of(x)), MX_F16, "the gradient reaches x in x's dtype");

  /* outside a region custom_fwd is a no-op */
  mymm_seen outside = {.expect_type = MX_F16};
  OK(mx_amp_function_apply(&mymm_cast, &outside, MX_CPU, MX_F32, 2, in, 1, &output));
  cr_assert_eq(mx_dtype_of(output), MX_F16);
  OK(mx_backward(mx_sum(output, MX_ALL_DIMS, false), NULL, false));
  cr_assert(outside.fwd_inputs_ok, "outside a region forward sees the float16 inputs");
  cr_assert_not(outside.fwd_autocast);
  cr_assert_not(outside.bwd_autocast);

  cr_assert_not(inside.bwd_autocast, "with cast_inputs custom_bwd runs backward with autocast off "
                                     "(_fwd_used_autocast is False), as forward ran");
}
