/* The CUDA backend's tensors against the CPU's: the error a missing device
 * gives, fill, every dtype conversion, strided views made contiguous,
 * copies between devices, element access, random numbers (the same
 * generator state gives the same values) and memory statistics. Skips
 * without a GPU, except the test of the missing device's error. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"

/* --- without a GPU: a clear error, not a crash ------------------------------------- */

Test(gpu, missing_device_is_a_clear_error) {
  mx_clear_error();
  if (mx_cuda_device_count() > 0) { /* the other answer: it works */
    mx_tensor *t = mx_zeros(MX_SHAPE(2), MX_F32, MX_CUDA);
    cr_assert_not_null(t, "%s", mx_last_error());
    cr_assert_eq(mx_device_of(t), MX_CUDA);
    mx_release(t);
    return;
  }
  const char *expected = mx_cuda_built() ? "no CUDA device" : "mixgrad was built without CUDA";
  mx_status status = mx_cuda_built() ? MX_NO_CUDA_DEVICE : MX_NOT_BUILT;
  for (int attempt = 0; attempt < 2; attempt++) { /* the second answer is the same */
    mx_clear_error();
    mx_tensor *t = mx_zeros(MX_SHAPE(2), MX_F32, MX_CUDA);
    cr_assert_null(t);
    cr_assert_not_null(strstr(mx_last_error(), expected), "message '%s' lacks '%s'", mx_last_error(),
                       expected);
    cr_assert_not_null(strstr(mx_last_error(), "mx_zeros"), "message '%s' lacks the op", mx_last_error());
    cr_assert_eq(mx_last_status(), status, "status %s", mx_status_str(mx_last_status()));
  }
  /* moving a CPU tensor there fails the same way, and leaks nothing */
  mx_memory_stats cpu_base = mx_memory_stats_get(MX_CPU);
  mx_clear_error();
  mx_tensor *c = mx_ones(MX_SHAPE(3), MX_F32, MX_CPU);
  cr_assert_null(mx_to_device(c, MX_CUDA));
  cr_assert_not_null(strstr(mx_last_error(), expected), "%s", mx_last_error());
  mx_release(c);
  mx_memory_stats st = mx_memory_stats_get(MX_CUDA);
  cr_assert_eq(st.bytes_in_use, 0);
  cr_assert_eq(st.live_tensors, 0);
  cr_assert_eq(mx_memory_stats_get(MX_CPU).live_tensors, cpu_base.live_tensors);
  cr_assert_eq(mx_memory_stats_get(MX_CPU).bytes_in_use, cpu_base.bytes_in_use);
}

/* mx_synchronize waits for queued CUDA work; without a GPU it says why. */
Test(gpu, synchronize_waits_or_says_why_not) {
  cr_assert_eq(mx_synchronize(MX_CPU), MX_OK, "%s", mx_last_error());
  mx_clear_error();
  cr_assert_eq(mx_synchronize((mx_device)7), MX_DEVICE_ERROR);
  cr_assert_not_null(strstr(mx_last_error(), "mx_synchronize: invalid device 7"), "%s", mx_last_error());
  if (mx_cuda_device_count() > 0) { /* a product queued, then waited for: its value is there */
    mx_tensor *a = mx_ones(MX_SHAPE(512, 512), MX_F32, MX_CUDA);
    mx_tensor *p = mx_matmul(a, a);
    cr_assert_not_null(p, "%s", mx_last_error());
    cr_assert_eq(mx_synchronize(MX_CUDA), MX_OK, "%s", mx_last_error());
    size_t bytes;
    float *host = host_copy(p, &bytes);
    for (size_t i = 0; i < bytes / sizeof *host; i++) cr_assert_eq(host[i], 512.0f, "element %zu: %g", i, host[i]);
    free(host);
    mx_release(p);
    mx_release(a);
    return;
  }
  const char *expected = mx_cuda_built() ? "no CUDA device" : "mixgrad was built without CUDA";
  mx_clear_error();
  cr_assert_eq(mx_synchronize(MX_CUDA), mx_cuda_built() ? MX_NO_CUDA_DEVICE : MX_NOT_BUILT);
  cr_assert_not_null(strstr(mx_last_error(), "mx_synchronize: "), "%s", mx_last_error());
  cr_assert_not_null(strstr(mx_last_error(), expected), "message '%s' lacks '%s'", mx_last_error(), expected);
}

/* --- fill -------------------------------------------------------------------------- */

Test(gpu, fill_every_dtype) {
  require_gpu();
  static const double values[] = {0, 1, -2.5, 0.1, 65519, 65520, 300.7, -1e10, 1e20, NAN, -INFINITY, 1e-40};
  mx_scope *s = mx_scope_begin();
  for (int d = 0; d < COUNT(all_dtypes); d++)
    for (int v = 0; v < COUNT(values); v++) {
      char what[64];
      snprintf(what, sizeof what, "mx_full(%g)", values[v]);
      assert_identical(mx_full(MX_SHAPE(3, 5), values[v], all_dtypes[d], MX_CPU),
                       mx_full(MX_SHAPE(3, 5), values[v], all_dtypes[d], MX_CUDA), what);
    }
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    assert_identical(mx_zeros(MX_SHAPE(4, 4), all_dtypes[d], MX_CPU),
                     mx_zeros(MX_SHAPE(4, 4), all_dtypes[d], MX_CUDA), "mx_zeros");
    assert_identical(mx_ones(MX_SHAPE(4), all_dtypes[d], MX_CPU), mx_ones(MX_SHAPE(4), all_dtypes[d], MX_CUDA),
                     "mx_ones");
    assert_identical(mx_eye(5, 3, all_dtypes[d], MX_CPU), mx_eye(5, 3, all_dtypes[d], MX_CUDA), "mx_eye");
  }
  mx_scope_end(s);
}

Test(gpu, fill_strided_view) {
  require_gpu();
  mx_scope *s = mx_scope_begin();
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    mx_tensor *c = mx_zeros(MX_SHAPE(6, 7, 9), all_dtypes[d], MX_CPU);
    mx_tensor *g = mx_zeros(MX_SHAPE(6, 7, 9), all_dtypes[d], MX_CUDA);
    /* every other row of the transposed tensor: strides (1, 9, 63) then a step */
    mx_tensor *cv = mx_slice(mx_transpose(c, 0, 2), 1, 1, 7, 2);
    mx_tensor *gv = mx_slice(mx_transpose(g, 0, 2), 1, 1, 7, 2);
    cr_assert_eq(mx_fill_(cv, 3.75), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_fill_(gv, 3.75), MX_OK, "%s", mx_last_error());
    assert_identical(c, g, "mx_fill_ on a strided view");
  }
  mx_scope_end(s);
}

/* --- convert: every dtype pair, dense and strided ------------------------------------- */

Test(gpu, to_dtype_every_pair) {
  require_gpu();
  for (int i = 0; i < COUNT(all_dtypes); i++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *c = awkward_tensor(all_dtypes[i], 100 + (uint64_t)i);
    mx_tensor *g = to_cuda(c);
    assert_identical(c, g, "mx_to_device round trip");
    mx_tensor *ct = mx_permute(c, MX_DIMS(2, 0, 1)), *gt = mx_permute(g, MX_DIMS(2, 0, 1));
    for (int o = 0; o < COUNT(all_dtypes); o++) {
      char what[96];
      snprintf(what, sizeof what, "mx_to_dtype %s -> %s", mx_dtype_name(all_dtypes[i]),
               mx_dtype_name(all_dtypes[o]));
      assert_identical(mx_to_dtype(c, all_dtypes[o]), mx_to_dtype(g, all_dtypes[o]), what);
      snprintf(what, sizeof what, "mx_to_dtype of a permuted view %s -> %s", mx_dtype_name(all_dtypes[i]),
               mx_dtype_name(all_dtypes[o]));
      assert_identical(mx_to_dtype(ct, all_dtypes[o]), mx_to_dtype(gt, all_dtypes[o]), what);
    }
    mx_scope_end(s);
  }
}

/* Every float16 and bfloat16 bit pattern (subnormals, infinities, quiet and
 * signalling NaNs) converted to every dtype. */
Test(gpu, to_dtype_every_16bit_pattern) {
  require_gpu();
  static uint16_t patterns[65536];
  for (int i = 0; i < 65536; i++) patterns[i] = (uint16_t)i;
  mx_dtype halves[] = {MX_F16, MX_BF16};
  for (int h = 0; h < COUNT(halves); h++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *c = mx_from_data(patterns, MX_SHAPE(256, 256), halves[h], MX_CPU);
    cr_assert_not_null(c, "%s", mx_last_error());
    mx_tensor *g = to_cuda(c);
    for (int o = 0; o < COUNT(all_dtypes); o++) {
      char what[96];
      snprintf(what, sizeof what, "every %s pattern -> %s", mx_dtype_name(halves[h]),
               mx_dtype_name(all_dtypes[o]));
      assert_identical(mx_to_dtype(c, all_dtypes[o]), mx_to_dtype(g, all_dtypes[o]), what);
    }
    mx_scope_end(s);
  }
}

/* float32 to float16 where rounding decides: each finite float16 value,
 * the midpoint between it and the next (a tie: to even), and the float32
 * values either side of that midpoint, both signs; past 65504 the
 * midpoint 65520 and its neighbours (to inf or not), and the subnormals'
 * ties down to half the smallest one (to zero). The device converts
 * with its own instruction (kernels/cuda/common.cuh), the CPU in code. */
Test(gpu, to_dtype_float32_at_every_float16_rounding_edge) {
  require_gpu();
  enum { PER = 4, N = 2 * 0x7c00 * PER };
  static float values[N];
  int n = 0;
  for (int sign = 0; sign < 2; sign++)
    for (uint32_t h = 0; h < 0x7c00; h++) { /* every finite magnitude; 0x7bff's next is inf's place, 65536 */
      float low = mx_f16_to_f32((uint16_t)h);
      float high = h + 1 < 0x7c00 ? mx_f16_to_f32((uint16_t)(h + 1)) : 65536.0f;
      float mid = low + (high - low) / 2; /* exact: float16's 11 bits fit float32's 24 */
      float edge[PER] = {low, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
      for (int k = 0; k < PER; k++) values[n++] = sign ? -edge[k] : edge[k];
    }
  mx_scope *s = mx_scope_begin();
  mx_tensor *c = mx_from_data(values, MX_SHAPE(n), MX_F32, MX_CPU);
  cr_assert_not_null(c, "%s", mx_last_error());
  assert_identical(mx_to_dtype(c, MX_F16), mx_to_dtype(to_cuda(c), MX_F16), "float32 -> float16 at rounding edges");
  mx_scope_end(s);
}

/* --- strided views made contiguous ----------------------------------------------------- */

typedef mx_tensor *(*view_fn)(const mx_tensor *t);
static mx_tensor *v_transpose(const mx_tensor *t) { return mx_transpose(t, 0, 2); }
static mx_tensor *v_permute(const mx_tensor *t) { return mx_permute(t, MX_DIMS(1, 2, 0)); }
static mx_tensor *v_slice_step(const mx_tensor *t) { return mx_slice(t, 2, 1, 9, 3); }
static mx_tensor *v_slice_rows(const mx_tensor *t) { return mx_slice(t, 1, 1, 6, 2); }
static mx_tensor *v_select(const mx_tensor *t) { return mx_select(t, 0, 4); }
static mx_tensor *v_narrow_t(const mx_tensor *t) { return mx_transpose(mx_narrow(t, 2, 2, 5), 1, 2); }
static mx_tensor *v_expand(const mx_tensor *t) {
  return mx_expand(mx_unsqueeze(mx_select(mx_select(t, 0, 1), 0, 2), 0), MX_SHAPE(4, 9));
}
static mx_tensor *v_scalar(const mx_tensor *t) { return mx_select(mx_select(mx_select(t, 0, 5), 0, 6), 0, 8); }

Test(gpu, strided_views_contiguous) {
  require_gpu();
  static const view_fn views[] = {v_transpose, v_permute, v_slice_step, v_slice_rows,
                                  v_select,    v_narrow_t, v_expand,     v_scalar};
  static const char *const names[] = {"transpose", "permute", "slice step 3", "slice rows",
                                      "select",    "narrow+transpose", "expand", "0-d element"};
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *c = awkward_tensor(all_dtypes[d], 7);
    mx_tensor *g = to_cuda(c);
    for (int v = 0; v < COUNT(views); v++) {
      mx_tensor *cv = views[v](c), *gv = views[v](g);
      cr_assert(cv && gv, "%s: %s", names[v], mx_last_error());
      assert_identical(mx_contiguous(cv), mx_contiguous(gv), names[v]);
      assert_identical(mx_clone(cv), mx_clone(gv), names[v]);
      assert_identical(mx_to_dtype(cv, MX_F16), mx_to_dtype(gv, MX_F16), names[v]);
      assert_identical(mx_to_dtype(cv, MX_I32), mx_to_dtype(gv, MX_I32), names[v]);
    }
    mx_scope_end(s);
  }
}

/* --- mx_copy_ between devices ------------------------------------------------------------ */

Test(gpu, copy_between_devices) {
  require_gpu();
  for (int i = 0; i < COUNT(all_dtypes); i++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *src_c = awkward_tensor(all_dtypes[i], 31);
    mx_tensor *src_g = to_cuda(src_c);
    mx_tensor *row_c = mx_unsqueeze(mx_select(mx_select(src_c, 0, 2), 1, 3), 0); /* (1, 7): broadcasts */
    for (int o = 0; o < COUNT(all_dtypes); o++) {
      char what[96];
      /* CPU source -> strided CUDA destination, and the same on the CPU */
      mx_tensor *dst_g = mx_zeros(MX_SHAPE(9, 7, 6), all_dtypes[o], MX_CUDA);
      mx_tensor *dst_c = mx_zeros(MX_SHAPE(9, 7, 6), all_dtypes[o], MX_CPU);
      snprintf(what, sizeof what, "mx_copy_ cpu %s -> cuda %s", mx_dtype_name(all_dtypes[i]),
               mx_dtype_name(all_dtypes[o]));
      cr_assert_eq(mx_copy_(mx_transpose(dst_g, 0, 2), src_c), MX_OK, "%s: %s", what, mx_last_error());
      cr_assert_eq(mx_copy_(mx_transpose(dst_c, 0, 2), src_c), MX_OK, "%s: %s", what, mx_last_error());
      assert_identical(dst_c, dst_g, what);

      /* CUDA source -> strided CPU destination */
      mx_tensor *back = mx_zeros(MX_SHAPE(9, 7, 6), all_dtypes[o], MX_CPU);
      snprintf(what, sizeof what, "mx_copy_ cuda %s -> cpu %s", mx_dtype_name(all_dtypes[i]),
               mx_dtype_name(all_dtypes[o]));
      cr_assert_eq(mx_copy_(mx_transpose(back, 0, 2), src_g), MX_OK, "%s: %s", what, mx_last_error());
      assert_identical(back, dst_g, what);

      /* a broadcast CPU row into a CUDA slice */
      mx_tensor *bg = mx_zeros(MX_SHAPE(5, 7), all_dtypes[o], MX_CUDA);
      mx_tensor *bc = mx_zeros(MX_SHAPE(5, 7), all_dtypes[o], MX_CPU);
      cr_assert_eq(mx_copy_(mx_slice(bg, 0, 1, 5, 2), row_c), MX_OK, "%s", mx_last_error());
      cr_assert_eq(mx_copy_(mx_slice(bc, 0, 1, 5, 2), row_c), MX_OK, "%s", mx_last_error());
      assert_identical(bc, bg, "mx_copy_ broadcast row into a CUDA slice");
    }
    mx_scope_end(s);
  }
}

Test(gpu, element_access_and_round_trip) {
  require_gpu();
  mx_scope *s = mx_scope_begin();
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    mx_tensor *g = mx_zeros(MX_SHAPE(3, 4), all_dtypes[d], MX_CUDA);
    cr_assert_eq(mx_set(g, MX_SHAPE(2, 1), 1.0), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_at(g, MX_SHAPE(2, 1)), 1.0, "%s", mx_dtype_name(all_dtypes[d]));
    cr_assert_eq(mx_at(g, MX_SHAPE(1, 2)), 0.0);
    cr_assert_eq(mx_item(mx_scalar(1, all_dtypes[d], MX_CUDA)), 1.0);
  }
  /* from host data and back, byte for byte */
  int64_t data[10];
  for (int i = 0; i < 10; i++) data[i] = (int64_t)0x0123456789abcdefLL * (i + 1);
  mx_tensor *g = mx_from_data(data, MX_SHAPE(2, 5), MX_I64, MX_CUDA);
  cr_assert_not_null(g, "%s", mx_last_error());
  int64_t back[10] = {0};
  cr_assert_eq(mx_to_host(g, back, sizeof back), MX_OK, "%s", mx_last_error());
  cr_assert_eq(memcmp(data, back, sizeof data), 0);
  mx_scope_end(s);
}

Test(gpu, empty_scalar_and_large) {
  require_gpu();
  mx_scope *s = mx_scope_begin();
  /* empty: no kernel runs, nothing breaks */
  mx_tensor *e = mx_zeros(MX_SHAPE(0, 3), MX_F32, MX_CUDA);
  cr_assert_not_null(e, "%s", mx_last_error());
  assert_identical(mx_zeros(MX_SHAPE(0, 3), MX_F16, MX_CPU), mx_to_dtype(e, MX_F16), "empty");
  assert_identical(mx_zeros(MX_SHAPE(0, 3), MX_F32, MX_CPU), mx_rand(MX_SHAPE(0, 3), MX_F32, MX_CUDA, NULL),
                   "empty rand");
  /* 0-d */
  assert_identical(mx_scalar(2.5, MX_BF16, MX_CPU), mx_scalar(2.5, MX_BF16, MX_CUDA), "0-d");
  /* larger than one pass of the grid: the grid-stride loop wraps */
  int64_t n = 3000017;
  mx_generator *gen = mx_generator_new(5);
  mx_tensor *rc = mx_rand(MX_SHAPE(n), MX_F32, MX_CPU, gen);
  mx_generator_set_state(gen, 5, 0);
  mx_tensor *rg = mx_rand(MX_SHAPE(n), MX_F32, MX_CUDA, gen);
  assert_identical(rc, rg, "rand of 3M elements");
  assert_identical(mx_to_dtype(rc, MX_F16), mx_to_dtype(rg, MX_F16), "3M elements to float16");
  assert_identical(mx_full(MX_SHAPE(n), -3, MX_I32, MX_CPU), mx_full(MX_SHAPE(n), -3, MX_I32, MX_CUDA),
                   "fill of 3M elements");
  mx_generator_free(gen);
  mx_scope_end(s);
}

/* --- random numbers: the same generator state, the same values ----------------------------- */

static const uint64_t states[][2] = {{0, 0}, {42, 12345}, {0x8000000000000007ull, 0xfffffffffffff000ull}};

typedef mx_tensor *(*draw_fn)(mx_dtype dtype, mx_device device, mx_generator *gen);
static mx_tensor *d_rand(mx_dtype t, mx_device d, mx_generator *g) { return mx_rand(MX_SHAPE(33, 65), t, d, g); }
static mx_tensor *d_randn(mx_dtype t, mx_device d, mx_generator *g) { return mx_randn(MX_SHAPE(33, 65), t, d, g); }
static mx_tensor *d_randint_small(mx_dtype t, mx_device d, mx_generator *g) {
  return mx_randint(-100, 300, MX_SHAPE(33, 65), t, d, g);
}
/* int64 draws beyond 2^53 take the exact path; the range stays below 2^63
 * so high - low fits in an int64 */
static mx_tensor *d_randint_huge(mx_dtype t, mx_device d, mx_generator *g) {
  return mx_randint(-(INT64_C(1) << 62) + 1, INT64_C(1) << 62, MX_SHAPE(33, 65), t, d, g);
}
static mx_tensor *d_bernoulli_p(mx_dtype t, mx_device d, mx_generator *g) {
  return mx_bernoulli_p(MX_SHAPE(33, 65), 0.3, t, d, g);
}

/* Draws with `fn` on both devices from each state in `states`: the values
 * agree within `rel` (0: bit for bit) and the generators advance alike. */
static void compare_draws(draw_fn fn, mx_dtype dtype, double rel, const char *name) {
  mx_generator *g = mx_generator_new(0);
  cr_assert_not_null(g);
  for (int k = 0; k < COUNT(states); k++) {
    mx_scope *s = mx_scope_begin();
    uint64_t seed_c, off_c, seed_g, off_g;
    mx_generator_set_state(g, states[k][0], states[k][1]);
    mx_tensor *c = fn(dtype, MX_CPU, g);
    mx_generator_get_state(g, &seed_c, &off_c);
    mx_generator_set_state(g, states[k][0], states[k][1]);
    mx_tensor *d = fn(dtype, MX_CUDA, g);
    mx_generator_get_state(g, &seed_g, &off_g);
    cr_assert_eq(seed_c, seed_g);
    cr_assert_eq(off_c, off_g, "%s: the generator advanced by %llu on the CPU, %llu on CUDA", name,
                 (unsigned long long)(off_c - states[k][1]), (unsigned long long)(off_g - states[k][1]));
    char what[96];
    snprintf(what, sizeof what, "%s from state %d", name, k);
    if (rel == 0)
      assert_identical(c, d, what);
    else
      assert_close(c, d, rel, what);
    mx_scope_end(s);
  }
  mx_generator_free(g);
}

Test(gpu, rand_same_values) {
  require_gpu();
  for (int d = 0; d < COUNT(float_dtypes); d++) compare_draws(d_rand, float_dtypes[d], 0, "mx_rand");
}

/* The normal draws go through log and cos, whose last bit may differ between
 * glibc and CUDA's libdevice (both within 1-2 ulp in double), so they are
 * compared within a few ulp of each format rather than bit for bit. */
Test(gpu, randn_same_values) {
  require_gpu();
  compare_draws(d_randn, MX_F64, 1e-14, "mx_randn");
  compare_draws(d_randn, MX_F32, 0x1p-22, "mx_randn");
  compare_draws(d_randn, MX_F16, 0x1p-9, "mx_randn");
  compare_draws(d_randn, MX_BF16, 0x1p-6, "mx_randn");
}

Test(gpu, randint_same_values) {
  require_gpu();
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    if (all_dtypes[d] == MX_BOOL) continue; /* randint refuses bool */
    compare_draws(d_randint_small, all_dtypes[d], 0, "mx_randint(-100, 300)");
    compare_draws(d_randint_huge, all_dtypes[d], 0, "mx_randint(1-2^62, 2^62)");
  }
}

Test(gpu, bernoulli_same_values) {
  require_gpu();
  for (int d = 0; d < COUNT(all_dtypes); d++) compare_draws(d_bernoulli_p, all_dtypes[d], 0, "mx_bernoulli_p");

  /* per-element probabilities from a strided view, in several dtypes */
  mx_generator *g = mx_generator_new(11);
  mx_dtype p_dtypes[] = {MX_F32, MX_F64, MX_F16, MX_BF16};
  for (int d = 0; d < COUNT(p_dtypes); d++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *pc = mx_transpose(mx_rand(MX_SHAPE(40, 30), p_dtypes[d], MX_CPU, g), 0, 1);
    mx_tensor *pg = mx_transpose(to_cuda(mx_transpose(pc, 0, 1)), 0, 1);
    assert_identical(mx_contiguous(pc), mx_contiguous(pg), "probabilities");
    mx_generator_set_state(g, 77, 1000);
    mx_tensor *c = mx_bernoulli(pc, g);
    mx_generator_set_state(g, 77, 1000);
    mx_tensor *r = mx_bernoulli(pg, g);
    assert_identical(c, r, "mx_bernoulli with a strided probability tensor");
    mx_scope_end(s);
  }
  mx_generator_free(g);
}

/* --- memory statistics -------------------------------------------------------------------------- */

Test(gpu, memory_stats_go_up_and_back_to_zero) {
  require_gpu();
  mx_memory_stats cpu_base = mx_memory_stats_get(MX_CPU);
  mx_memory_stats st = mx_memory_stats_get(MX_CUDA);
  cr_assert_eq(st.bytes_in_use, 0);
  cr_assert_eq(st.live_tensors, 0);
  cr_assert_eq(st.live_storages, 0);

  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_zeros(MX_SHAPE(1000), MX_F32, MX_CUDA);
  mx_tensor *b = mx_transpose(mx_zeros(MX_SHAPE(10, 20), MX_F64, MX_CUDA), 0, 1);
  mx_tensor *c = mx_zeros(MX_SHAPE(0), MX_F16, MX_CUDA);
  cr_assert(a && b && c, "%s", mx_last_error());
  st = mx_memory_stats_get(MX_CUDA);
  cr_assert_eq(st.bytes_in_use, 4000 + 1600, "bytes in use %lld", (long long)st.bytes_in_use);
  cr_assert_eq(st.live_storages, 3);
  cr_assert_eq(st.live_tensors, 4); /* a, the (10, 20) tensor, its transpose, c */
  mx_scope_end(s);
  st = mx_memory_stats_get(MX_CUDA);
  cr_assert_eq(st.bytes_in_use, 0, "bytes in use %lld", (long long)st.bytes_in_use);
  cr_assert_eq(st.live_tensors, 0);
  cr_assert_eq(st.live_storages, 0);
  cr_assert_geq(st.peak_bytes, 5600);

  /* many rounds of large allocations: the pool hands memory back each time */
  for (int round = 0; round < 50; round++) {
    mx_tensor *big = mx_zeros(MX_SHAPE(16, 1024, 1024), MX_F32, MX_CUDA); /* 64 MiB */
    cr_assert_not_null(big, "round %d: %s", round, mx_last_error());
    mx_release(big);
  }
  st = mx_memory_stats_get(MX_CUDA);
  cr_assert_eq(st.bytes_in_use, 0);
  cr_assert_eq(st.live_storages, 0);
  cr_assert_eq(mx_memory_stats_get(MX_CPU).bytes_in_use, cpu_base.bytes_in_use);
}
