/* The CUDA backend against the CPU backend: every kernel on the same inputs
 * must give the same bits on both devices, or, where the two sum in
 * different orders or call different libm functions, agree within the
 * bound each test states and explains. Skips without a GPU, except the
 * test of the error a missing device gives. */
#include <criterion/criterion.h>
#include <math.h>
#include <mixgrad.h>
#include "kernels/elementwise.h"
#include "kernels/math.h"
#include "tensor/tensor_impl.h" /* the AMP and elementwise kernels are called through the backends */
#include <stdlib.h>
#include <string.h>

static const mx_dtype all_dtypes[] = {MX_F32, MX_F64, MX_F16, MX_BF16, MX_I64, MX_I32, MX_U8, MX_BOOL};
static const mx_dtype float_dtypes[] = {MX_F32, MX_F64, MX_F16, MX_BF16};
#define COUNT(a) ((int)(sizeof(a) / sizeof *(a)))

static void require_gpu(void) {
  if (mx_cuda_device_count() == 0)
    cr_skip_test("no CUDA device here (%s): the CUDA backend is not compared",
                 mx_cuda_built() ? "mixgrad built with CUDA" : "mixgrad built without CUDA");
}

/* --- comparing a CPU tensor with a CUDA tensor ------------------------------------- */

/* t's elements in row-major order, as its dtype's C type, in a malloc'ed
 * buffer of *bytes bytes. */
static void *host_copy(const mx_tensor *t, size_t *bytes) {
  size_t n = (size_t)mx_numel(t) * mx_dtype_size(mx_dtype_of(t));
  void *buf = malloc(n ? n : 1);
  cr_assert_not_null(buf);
  cr_assert_eq(mx_to_host(t, buf, n), MX_OK, "mx_to_host: %s", mx_last_error());
  *bytes = n;
  return buf;
}

static void assert_same_geometry(const mx_tensor *cpu, const mx_tensor *gpu, const char *what) {
  cr_assert_not_null(cpu, "%s: CPU result is NULL: %s", what, mx_last_error());
  cr_assert_not_null(gpu, "%s: CUDA result is NULL: %s", what, mx_last_error());
  cr_assert_eq(mx_device_of(cpu), MX_CPU, "%s", what);
  cr_assert_eq(mx_device_of(gpu), MX_CUDA, "%s", what);
  cr_assert_eq(mx_dtype_of(cpu), mx_dtype_of(gpu), "%s: dtypes %s and %s", what,
               mx_dtype_name(mx_dtype_of(cpu)), mx_dtype_name(mx_dtype_of(gpu)));
  mx_shape a = mx_shape_get(cpu), b = mx_shape_get(gpu);
  cr_assert_eq(a.ndim, b.ndim, "%s: %d dims and %d dims", what, a.ndim, b.ndim);
  for (int i = 0; i < a.ndim; i++)
    cr_assert_eq(a.d[i], b.d[i], "%s: dim %d is %lld and %lld", what, i, (long long)a.d[i],
                 (long long)b.d[i]);
}

/* Whether the element at p (of a float dtype) is a NaN. */
static bool is_nan_element(const unsigned char *p, mx_dtype dtype) {
  uint16_t h;
  float f;
  double d;
  switch (dtype) {
  case MX_F16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7c00;
  case MX_BF16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7f80;
  case MX_F32: memcpy(&f, p, 4); return isnan(f);
  case MX_F64: memcpy(&d, p, 8); return isnan(d);
  default: return false;
  }
}

/* Where cpu and gpu first differ, written to why (empty if they agree):
 * with rel 0, in their bits, except that a NaN matches any NaN (which NaN
 * payload a conversion keeps is the hardware's business); with rel > 0 (a
 * float dtype), by more than rel of the larger magnitude, or of `floor` if
 * that is larger, infinities being equal. Returns how many elements differ. */
static size_t differences(const mx_tensor *cpu, const mx_tensor *gpu, double rel, double floor, char *why,
                          size_t why_size) {
  assert_same_geometry(cpu, gpu, "differences");
  mx_dtype dtype = mx_dtype_of(cpu);
  bool exact = rel == 0;
  const mx_tensor *c = cpu, *g = gpu;
  mx_tensor *c64 = NULL, *g64 = NULL;
  if (!exact) {
    c = c64 = mx_to_dtype(cpu, MX_F64);
    g = g64 = mx_to_dtype(gpu, MX_F64);
    cr_assert(c64 && g64, "%s", mx_last_error());
  }
  size_t na, nb, size = mx_dtype_size(mx_dtype_of(c)), count = 0;
  unsigned char *a = host_copy(c, &na), *b = host_copy(g, &nb);
  cr_assert_eq(na, nb);
  why[0] = 0;
  for (size_t i = 0; i < na / size; i++) {
    const unsigned char *x = a + i * size, *y = b + i * size;
    bool same;
    if (exact) {
      same = memcmp(x, y, size) == 0 || (is_nan_element(x, dtype) && is_nan_element(y, dtype));
    } else {
      double u, v;
      memcpy(&u, x, 8);
      memcpy(&v, y, 8);
      same = u == v || (isnan(u) && isnan(v)) || fabs(u - v) <= rel * fmax(fmax(fabs(u), fabs(v)), floor);
    }
    if (same || count++) continue;
    uint64_t xb = 0, yb = 0;
    memcpy(&xb, x, size);
    memcpy(&yb, y, size);
    double u = mx_element_load(x, mx_dtype_of(c)), v = mx_element_load(y, mx_dtype_of(c));
    snprintf(why, why_size, "%s: element %zu differs: CPU %.17g (bits 0x%llx), CUDA %.17g (bits 0x%llx)",
             mx_dtype_name(dtype), i, u, (unsigned long long)xb, v, (unsigned long long)yb);
  }
  free(a);
  free(b);
  mx_release(c64);
  mx_release(g64);
  return count;
}

static void assert_identical(const mx_tensor *cpu, const mx_tensor *gpu, const char *what) {
  char why[256];
  cr_assert_eq(differences(cpu, gpu, 0, 0, why, sizeof why), 0, "%s (%s)", what, why);
}

/* The smallest normal value of a float dtype. */
static double smallest_normal(mx_dtype dtype) {
  return dtype == MX_F64 ? 0x1p-1022 : dtype == MX_F16 ? 0x1p-14 : 0x1p-126;
}

/* Within rel of the larger magnitude; subnormal results compare absolutely. */
static void assert_close(const mx_tensor *cpu, const mx_tensor *gpu, double rel, const char *what) {
  char why[256];
  cr_assert_eq(differences(cpu, gpu, rel, smallest_normal(mx_dtype_of(cpu)), why, sizeof why), 0, "%s (%s)",
               what, why);
}

/* --- inputs --------------------------------------------------------------------------- */

/* Normal values at scales from 1e-3 to 1e5, with the awkward cases of every
 * conversion planted among them: NaN, infinities, signed zero, fp16/bf16
 * ties and overflow edges, subnormals, and the edges of the integer ranges. */
static double *awkward_values(int64_t n, uint64_t seed) {
  mx_generator *g = mx_generator_new(seed);
  mx_tensor *r = mx_randn(MX_SHAPE(n), MX_F64, MX_CPU, g);
  cr_assert_not_null(r, "%s", mx_last_error());
  size_t bytes;
  double *v = host_copy(r, &bytes);
  mx_release(r);
  mx_generator_free(g);
  static const double scales[] = {1e-3, 0.1, 1, 10, 300, 1e5};
  for (int64_t i = 0; i < n; i++) v[i] *= scales[i % COUNT(scales)];
  static const double special[] = {
      NAN, INFINITY, -INFINITY, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5,
      65504, 65519.99, 65520, -65520, 1e-8, 5.9604644775390625e-8, 2.98e-8, 1e-40, 3.4e38, 1e39,
      255, 255.5, 256, -1, 127.9, 2147483647.0, 2147483648.0, -2147483649.0, 3e9, 9.3e18,
      -9.3e18, 9007199254740993.0, 1.00390625, 1.001953125, 0.99999999, 1e300, -1e-300, 0.1, 7, -7};
  for (int i = 0; i < COUNT(special) && 3 * i < n; i++) v[3 * i] = special[i];
  return v;
}

/* A (6, 7, 9) CPU tensor of `dtype` made from awkward_values. */
static mx_tensor *awkward_tensor(mx_dtype dtype, uint64_t seed) {
  double *v = awkward_values(6 * 7 * 9, seed);
  mx_tensor *f64 = mx_from_data(v, MX_SHAPE(6, 7, 9), MX_F64, MX_CPU);
  free(v);
  cr_assert_not_null(f64, "%s", mx_last_error());
  mx_tensor *t = mx_to_dtype(f64, dtype);
  mx_release(f64);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

static mx_tensor *to_cuda(const mx_tensor *t) {
  mx_tensor *g = mx_to_device(t, MX_CUDA);
  cr_assert_not_null(g, "mx_to_device(cuda): %s", mx_last_error());
  return g;
}

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

/* --- the elementwise kernels --------------------------------------------------------- */

/* The codes computed by libm-like functions (exp, log, the trigonometric
 * family, erf, pow): CUDA's libdevice and glibc may round their last bit
 * differently, so these compare within a few units in the last place; every
 * other code must give the same bits on both devices. */
static bool unary_uses_libm(int code) {
  switch (code) {
  case MX_UN_EXP: case MX_UN_EXPM1: case MX_UN_LOG: case MX_UN_LOG1P: case MX_UN_LOG2: case MX_UN_LOG10:
  case MX_UN_SIN: case MX_UN_COS: case MX_UN_TAN: case MX_UN_ASIN: case MX_UN_ACOS: case MX_UN_ATAN:
  case MX_UN_SINH: case MX_UN_COSH: case MX_UN_TANH: case MX_UN_SIGMOID: case MX_UN_ELU: case MX_UN_GELU:
  case MX_UN_GELU_TANH: case MX_UN_SILU: case MX_UN_SOFTPLUS: case MX_UN_ERF: case MX_UN_ERFINV: return true;
  default: return false;
  }
}

static bool binary_uses_libm(int code) { return code == MX_BIN_POW || code == MX_BIN_ATAN2; }

/* 8 units in the last place of a float dtype, relative. */
static double eight_ulps(mx_dtype dtype) {
  return 8 * (dtype == MX_F64 ? 0x1p-52 : dtype == MX_F32 ? 0x1p-23 : dtype == MX_F16 ? 0x1p-10 : 0x1p-7);
}

/* Expects the same results of one kernel code on both devices (the same
 * bits, or within eight_ulps for a libm code on a float dtype), and goes on
 * to the next code either way, so that one run names every code that
 * differs. GELU's 1 + erf(x / sqrt 2) (and its tanh form) cancels for
 * negative x, where the two devices agree to a few ulp of 1 rather than of
 * the result: those compare with a floor of 1. */
static void expect_same_results(const mx_tensor *cpu, const mx_tensor *gpu, bool libm, bool cancels,
                                const char *what) {
  mx_dtype dtype = mx_dtype_of(cpu);
  bool close = libm && mx_dtype_is_floating(dtype);
  char why[256];
  size_t n = differences(cpu, gpu, close ? eight_ulps(dtype) : 0, cancels ? 1.0 : smallest_normal(dtype), why,
                         sizeof why);
  cr_expect_eq(n, 0, "%s: %zu elements differ; the first, %s", what, n, why);
}

/* A (6, 7, 9) CPU tensor of `dtype`: awkward_values for the floats, small
 * integers in [-20, 20) for the others (wrapped to uint8, nonzero to bool),
 * so that integer arithmetic stays clear of signed overflow. */
static mx_tensor *elementwise_input(mx_dtype dtype, uint64_t seed) {
  if (mx_dtype_is_floating(dtype)) return awkward_tensor(dtype, seed);
  mx_generator *g = mx_generator_new(seed);
  mx_tensor *i64 = mx_randint(-20, 20, MX_SHAPE(6, 7, 9), MX_I64, MX_CPU, g);
  mx_generator_free(g);
  cr_assert_not_null(i64, "%s", mx_last_error());
  mx_tensor *t = mx_to_dtype(i64, dtype);
  mx_release(i64);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

/* The same (9, 7, 6) transposed view of one input on both devices. */
typedef struct {
  mx_tensor *cpu, *gpu;
} device_pair;

static device_pair strided_input(mx_dtype dtype, uint64_t seed) {
  mx_tensor *c = elementwise_input(dtype, seed);
  return (device_pair){mx_transpose(c, 0, 2), mx_transpose(to_cuda(c), 0, 2)};
}

/* A (1, 7, 1) input broadcast to (9, 7, 6) on both devices (stride 0 on two dims). */
static device_pair broadcast_input(mx_dtype dtype, uint64_t seed) {
  mx_tensor *c = mx_reshape(mx_transpose(elementwise_input(dtype, seed), 0, 2), MX_SHAPE(-1));
  c = mx_reshape(mx_slice(c, 0, 0, 7, 1), MX_SHAPE(1, 7, 1));
  cr_assert_not_null(c, "%s", mx_last_error());
  return (device_pair){mx_expand(c, MX_SHAPE(9, 7, 6)), mx_expand(to_cuda(c), MX_SHAPE(9, 7, 6))};
}

static void new_outputs(device_pair like, mx_dtype dtype, device_pair *out, mx_kview views[2]) {
  out->cpu = mx_empty(mx_shape_get(like.cpu), dtype, MX_CPU);
  out->gpu = mx_empty(mx_shape_get(like.gpu), dtype, MX_CUDA);
  cr_assert(out->cpu && out->gpu, "%s", mx_last_error());
  views[0] = mx__kview_of(out->cpu);
  views[1] = mx__kview_of(out->gpu);
}

/* Every unary code on every dtype that has it, from a strided view, against
 * the CPU kernel; the parameters (1.5, 3) serve every code that takes them
 * (leaky slope, ELU alpha, softplus beta and threshold, clamp's bounds). */
Test(gpu, unary_every_code_matches_cpu) {
  require_gpu();
  const mx_backend *bc = mx__backend(MX_CPU), *bg = mx__backend(MX_CUDA);
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    mx_dtype dtype = all_dtypes[d];
    mx_scope *scope = mx_scope_begin();
    device_pair in = strided_input(dtype, 80 + (uint64_t)d);
    mx_kview in_c = mx__kview_of(in.cpu), in_g = mx__kview_of(in.gpu);
    for (int code = 0; code < MX_UN_COUNT; code++) {
      if (!mx_dtype_is_floating(dtype) && !mx__unary_has_int(code)) continue;
      device_pair out;
      mx_kview o[2];
      new_outputs(in, dtype, &out, o);
      char what[96];
      snprintf(what, sizeof what, "unary code %d on %s", code, mx_dtype_name(dtype));
      cr_assert_eq(bc->unary(code, &o[0], &in_c, 1.5, 3.0), MX_OK, "%s: %s", what, mx_last_error());
      cr_assert_eq(bg->unary(code, &o[1], &in_g, 1.5, 3.0), MX_OK, "%s: %s", what, mx_last_error());
      expect_same_results(out.cpu, out.gpu, unary_uses_libm(code),
                          code == MX_UN_GELU || code == MX_UN_GELU_TANH, what);
      mx_release(out.cpu);
      mx_release(out.gpu);
    }
    mx_scope_end(scope);
  }
}

/* Every binary code (arithmetic, comparisons, logical) on every dtype that
 * has it: x a strided view, y broadcast along two dims, alpha 0.75. */
Test(gpu, binary_every_code_matches_cpu) {
  require_gpu();
  const mx_backend *bc = mx__backend(MX_CPU), *bg = mx__backend(MX_CUDA);
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    mx_dtype dtype = all_dtypes[d];
    mx_scope *scope = mx_scope_begin();
    device_pair x = strided_input(dtype, 90 + (uint64_t)d), y = broadcast_input(dtype, 100 + (uint64_t)d);
    mx_kview x_c = mx__kview_of(x.cpu), x_g = mx__kview_of(x.gpu);
    mx_kview y_c = mx__kview_of(y.cpu), y_g = mx__kview_of(y.gpu);
    for (int code = 0; code < MX_BIN_COUNT; code++) {
      if (!mx_dtype_is_floating(dtype) && !mx__binary_has_int(code)) continue;
      device_pair out;
      mx_kview o[2];
      new_outputs(x, code >= MX_BIN_EQ ? MX_BOOL : dtype, &out, o);
      char what[96];
      snprintf(what, sizeof what, "binary code %d on %s", code, mx_dtype_name(dtype));
      cr_assert_eq(bc->binary(code, &o[0], &x_c, &y_c, 0.75), MX_OK, "%s: %s", what, mx_last_error());
      cr_assert_eq(bg->binary(code, &o[1], &x_g, &y_g, 0.75), MX_OK, "%s: %s", what, mx_last_error());
      expect_same_results(out.cpu, out.gpu, binary_uses_libm(code), false, what);
      mx_release(out.cpu);
      mx_release(out.gpu);
    }
    mx_scope_end(scope);
  }
}

/* where on every dtype: a broadcast condition, x strided, y broadcast. */
Test(gpu, where_matches_cpu) {
  require_gpu();
  const mx_backend *bc = mx__backend(MX_CPU), *bg = mx__backend(MX_CUDA);
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    mx_dtype dtype = all_dtypes[d];
    mx_scope *scope = mx_scope_begin();
    device_pair x = strided_input(dtype, 110 + (uint64_t)d), y = broadcast_input(dtype, 120 + (uint64_t)d);
    device_pair cond = broadcast_input(MX_BOOL, 130 + (uint64_t)d);
    mx_kview x_c = mx__kview_of(x.cpu), x_g = mx__kview_of(x.gpu), y_c = mx__kview_of(y.cpu);
    mx_kview y_g = mx__kview_of(y.gpu), c_c = mx__kview_of(cond.cpu), c_g = mx__kview_of(cond.gpu);
    device_pair out;
    mx_kview o[2];
    new_outputs(x, dtype, &out, o);
    cr_assert_eq(bc->where(&o[0], &c_c, &x_c, &y_c), MX_OK, "%s", mx_last_error());
    cr_assert_eq(bg->where(&o[1], &c_g, &x_g, &y_g), MX_OK, "%s", mx_last_error());
    assert_identical(out.cpu, out.gpu, "where");
    mx_scope_end(scope);
  }
}

/* Through the ops: broadcasting, type promotion and autograd run on CUDA
 * tensors as on the CPU, and a code without an integer version is refused. */
Test(gpu, elementwise_ops_and_their_gradients_on_cuda) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  mx_tensor *a = mx_from_data((float[]){1, -2, 3, -4, 5, -6}, MX_SHAPE(2, 3), MX_F32, MX_CPU);
  mx_tensor *b = mx_from_data((double[]){0.5, 2, -1}, MX_SHAPE(3), MX_F64, MX_CPU);
  mx_tensor *ag = to_cuda(a), *bg = to_cuda(b);
  cr_assert_eq(mx_set_requires_grad(ag, true), MX_OK);
  mx_tensor *y = mx_relu(mx_mul(ag, bg)); /* float32 * float64: float64, as in PyTorch */
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_assert_eq(mx_device_of(y), MX_CUDA);
  cr_assert_eq(mx_dtype_of(y), MX_F64);
  assert_identical(mx_relu(mx_mul(a, b)), y, "relu(a * b)");
  cr_assert_eq(mx_backward(y, mx_full(MX_SHAPE(2, 3), 1.0, MX_F64, MX_CUDA), false), MX_OK, "%s", mx_last_error());
  /* d/da relu(a * b) = b where a * b > 0 (a * b = 0.5, -4, -3; -2, 10, 6),
   * else 0 * b: -0 where b is negative, as IEEE multiplication gives */
  mx_tensor *expected = mx_from_data((float[]){0.5f, 0, -0.0f, 0, 2, -1}, MX_SHAPE(2, 3), MX_F32, MX_CPU);
  assert_identical(expected, mx_grad_of(ag), "the gradient of a");

  mx_tensor *ints = to_cuda(mx_from_data((int64_t[]){1, 2}, MX_SHAPE(2), MX_I64, MX_CPU));
  mx_kview v = mx__kview_of(ints);
  mx_clear_error();
  cr_assert_eq(mx__backend(MX_CUDA)->unary(MX_UN_EXP, &v, &v, 0, 0), MX_DTYPE_ERROR);
  cr_assert_str_eq(mx_last_error(), "cuda unary kernel 3: no int64 version");
  mx_scope_end(scope);
}

/* --- matrix products, reductions, softmax -------------------------------------------- */

/* A CPU tensor of `shape` holding integers in [low, high] as `dtype`: sums
 * and products of these are exact in any order, so the devices must agree
 * bit for bit however cuBLAS or a block reduction orders them. */
static mx_tensor *small_integers(mx_shape shape, int64_t low, int64_t high, mx_dtype dtype, uint64_t seed) {
  mx_generator *g = mx_generator_new(seed);
  mx_tensor *i64 = mx_randint(low, high + 1, shape, MX_I64, MX_CPU, g);
  mx_generator_free(g);
  mx_tensor *t = mx_to_dtype(i64, dtype);
  mx_release(i64);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

/* A CPU tensor of `shape` holding integers in [-4, 4] but 0, as `dtype`:
 * exact products and sums, and no product of zero, whose sign (-0 from a
 * negative factor) would depend on where a sum starts (the CPU's reference
 * at +0, cuBLAS at the first product). */
static mx_tensor *nonzero_integers(mx_shape shape, mx_dtype dtype, uint64_t seed) {
  mx_tensor *draws = small_integers(shape, 0, 7, MX_I64, seed);
  size_t bytes;
  int64_t *v = host_copy(draws, &bytes);
  for (size_t i = 0; i < bytes / sizeof *v; i++) v[i] = v[i] < 4 ? v[i] - 4 : v[i] - 3;
  mx_tensor *i64 = mx_from_data(v, shape, MX_I64, MX_CPU);
  free(v);
  mx_release(draws);
  mx_tensor *t = mx_to_dtype(i64, dtype);
  mx_release(i64);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

/* How an operand (B, R, C) is laid out: row-major; the transpose of a
 * (B, C, R) tensor (column-major, cuBLAS's OP_T); a batch of one broadcast
 * (batch stride 0); every second column (no BLAS layout: copied first). */
typedef enum { ROW_MAJOR, COLUMN_MAJOR, BATCH_BROADCAST, EVERY_SECOND_COLUMN } operand_layout;

static device_pair operand(operand_layout layout, int64_t B, int64_t R, int64_t C, mx_dtype dtype, uint64_t seed) {
  mx_tensor *base;
  switch (layout) {
  case COLUMN_MAJOR: base = nonzero_integers(MX_SHAPE(B, C, R), dtype, seed); break;
  case BATCH_BROADCAST: base = nonzero_integers(MX_SHAPE(1, R, C), dtype, seed); break;
  case EVERY_SECOND_COLUMN: base = nonzero_integers(MX_SHAPE(B, R, 2 * C), dtype, seed); break;
  default: base = nonzero_integers(MX_SHAPE(B, R, C), dtype, seed); break;
  }
  mx_tensor *on[2] = {base, to_cuda(base)};
  for (int d = 0; d < 2; d++) {
    if (layout == COLUMN_MAJOR) on[d] = mx_transpose(on[d], 1, 2);
    if (layout == BATCH_BROADCAST) on[d] = mx_expand(on[d], MX_SHAPE(B, R, C));
    if (layout == EVERY_SECOND_COLUMN) on[d] = mx_slice(on[d], 2, 0, 2 * C, 2);
    cr_assert_not_null(on[d], "%s", mx_last_error());
  }
  return (device_pair){on[0], on[1]};
}

static void compare_matmul(operand_layout la, operand_layout lb, int64_t B, int64_t M, int64_t N, int64_t K,
                           mx_dtype dtype) {
  mx_scope *scope = mx_scope_begin();
  device_pair a = operand(la, B, M, K, dtype, 200 + (uint64_t)la), b = operand(lb, B, K, N, dtype, 300 + (uint64_t)lb);
  device_pair out;
  mx_kview o[2];
  out.cpu = mx_empty(MX_SHAPE(B, M, N), dtype, MX_CPU);
  out.gpu = mx_empty(MX_SHAPE(B, M, N), dtype, MX_CUDA);
  cr_assert(out.cpu && out.gpu, "%s", mx_last_error());
  o[0] = mx__kview_of(out.cpu), o[1] = mx__kview_of(out.gpu);
  mx_kview a_c = mx__kview_of(a.cpu), a_g = mx__kview_of(a.gpu), b_c = mx__kview_of(b.cpu), b_g = mx__kview_of(b.gpu);
  char what[128];
  snprintf(what, sizeof what, "matmul %s, (%lld, %lld, %lld) x %lld, layouts %d and %d", mx_dtype_name(dtype),
           (long long)M, (long long)N, (long long)K, (long long)B, (int)la, (int)lb);
  cr_assert_eq(mx__backend(MX_CPU)->matmul(&o[0], &a_c, &b_c), MX_OK, "%s: %s", what, mx_last_error());
  cr_assert_eq(mx__backend(MX_CUDA)->matmul(&o[1], &a_g, &b_g), MX_OK, "%s: %s", what, mx_last_error());
  char why[256];
  size_t n = differences(out.cpu, out.gpu, 0, 0, why, sizeof why);
  cr_expect_eq(n, 0, "%s: %zu elements differ; the first, %s", what, n, why);
  mx_scope_end(scope);
}

/* Every dtype (the floats through cuBLAS, the integers through the plain
 * kernel) and every operand layout, small nonzero integers: the products
 * and sums are exact, so the two devices agree bit for bit. Edge shapes: a
 * vector (M = 1, N = 1), K = 1, and K = 0 (zeros). */
Test(gpu, matmul_every_dtype_and_layout_matches_cpu) {
  require_gpu();
  const operand_layout layouts[] = {ROW_MAJOR, COLUMN_MAJOR, BATCH_BROADCAST, EVERY_SECOND_COLUMN};
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    if (all_dtypes[d] == MX_BOOL || all_dtypes[d] == MX_U8) continue; /* no products of these */
    for (int i = 0; i < COUNT(layouts); i++)
      for (int j = 0; j < COUNT(layouts); j++) compare_matmul(layouts[i], layouts[j], 3, 17, 9, 33, all_dtypes[d]);
    compare_matmul(ROW_MAJOR, COLUMN_MAJOR, 2, 1, 5, 7, all_dtypes[d]);
    compare_matmul(COLUMN_MAJOR, ROW_MAJOR, 2, 6, 1, 7, all_dtypes[d]);
    compare_matmul(ROW_MAJOR, ROW_MAJOR, 1, 4, 5, 1, all_dtypes[d]);
    compare_matmul(ROW_MAJOR, ROW_MAJOR, 2, 4, 5, 0, all_dtypes[d]);
  }
}

/* Random float32 and float64 values of one product, 128 x 96 x 300: the
 * devices sum in different orders, so they agree within a few ulp of the
 * partial sums' typical magnitude, sqrt(300) (a run on an H100 found
 * float32 differences of 1.1e-5 on results near 1). */
Test(gpu, matmul_random_values_close_to_cpu) {
  require_gpu();
  const mx_dtype dtypes[] = {MX_F32, MX_F64};
  for (int d = 0; d < 2; d++) {
    mx_scope *scope = mx_scope_begin();
    mx_generator *g = mx_generator_new(41);
    mx_tensor *a = mx_randn(MX_SHAPE(128, 300), dtypes[d], MX_CPU, g);
    mx_tensor *b = mx_randn(MX_SHAPE(300, 96), dtypes[d], MX_CPU, g);
    mx_generator_free(g);
    mx_tensor *b_column_major = mx_transpose(to_cuda(mx_contiguous(mx_transpose(b, 0, 1))), 0, 1);
    mx_tensor *c = mx_mm(a, b), *r = mx_mm(to_cuda(a), b_column_major);
    cr_assert(c && r, "%s", mx_last_error());
    char why[256];
    size_t n = differences(c, r, 64 * (dtypes[d] == MX_F64 ? 0x1p-52 : 0x1p-23), sqrt(300), why, sizeof why);
    cr_expect_eq(n, 0, "mm %s: %zu elements differ; the first, %s", mx_dtype_name(dtypes[d]), n, why);
    mx_scope_end(scope);
  }
}

/* Every reduction code over three masks (one dim, two dims, all) of a
 * strided (9, 7, 6) view, in every dtype: sum and product of integers in
 * [-2, 2] (exact in any order), max and min (with their indices), all and
 * any of the awkward values (NaN wins; the first extremum's index). */
Test(gpu, reduce_every_code_matches_cpu) {
  require_gpu();
  const uint32_t masks[] = {1u << 1, (1u << 0) | (1u << 2), 7u};
  const int codes[] = {MX_RED_SUM, MX_RED_PROD, MX_RED_MAX, MX_RED_MIN, MX_RED_ALL, MX_RED_ANY};
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    mx_dtype dtype = all_dtypes[d];
    for (int c = 0; c < COUNT(codes); c++) {
      int code = codes[c];
      bool arithmetic = code == MX_RED_SUM || code == MX_RED_PROD;
      if (arithmetic && dtype == MX_BOOL) continue;
      mx_scope *scope = mx_scope_begin();
      mx_tensor *base = arithmetic ? small_integers(MX_SHAPE(6, 7, 9), -2, 2, dtype, 400 + (uint64_t)d)
                                   : elementwise_input(dtype, 500 + (uint64_t)d);
      device_pair in = {mx_transpose(base, 0, 2), mx_transpose(to_cuda(base), 0, 2)};
      mx_kview in_c = mx__kview_of(in.cpu), in_g = mx__kview_of(in.gpu);
      mx_dtype out_dtype = code == MX_RED_ALL || code == MX_RED_ANY ? MX_BOOL
                           : arithmetic && !mx_dtype_is_floating(dtype) ? MX_I64
                                                                       : dtype;
      bool indexed = code == MX_RED_MAX || code == MX_RED_MIN;
      for (int m = 0; m < COUNT(masks); m++) {
        int64_t shape[3] = {9, 7, 6};
        for (int k = 0; k < 3; k++)
          if (masks[m] & (1u << k)) shape[k] = 1;
        device_pair out = {mx_empty(MX_SHAPE(shape[0], shape[1], shape[2]), out_dtype, MX_CPU),
                           mx_empty(MX_SHAPE(shape[0], shape[1], shape[2]), out_dtype, MX_CUDA)};
        device_pair idx = {mx_empty(MX_SHAPE(shape[0], shape[1], shape[2]), MX_I64, MX_CPU),
                           mx_empty(MX_SHAPE(shape[0], shape[1], shape[2]), MX_I64, MX_CUDA)};
        mx_kview o_c = mx__kview_of(out.cpu), o_g = mx__kview_of(out.gpu);
        mx_kview i_c = mx__kview_of(idx.cpu), i_g = mx__kview_of(idx.gpu);
        char what[128];
        snprintf(what, sizeof what, "reduce code %d, mask %u, %s", code, masks[m], mx_dtype_name(dtype));
        cr_assert_eq(mx__backend(MX_CPU)->reduce(code, &o_c, indexed ? &i_c : NULL, &in_c, masks[m]), MX_OK, "%s: %s",
                     what, mx_last_error());
        cr_assert_eq(mx__backend(MX_CUDA)->reduce(code, &o_g, indexed ? &i_g : NULL, &in_g, masks[m]), MX_OK,
                     "%s: %s", what, mx_last_error());
        char why[256];
        size_t n = differences(out.cpu, out.gpu, 0, 0, why, sizeof why);
        cr_expect_eq(n, 0, "%s: %zu elements differ; the first, %s", what, n, why);
        if (indexed) {
          n = differences(idx.cpu, idx.gpu, 0, 0, why, sizeof why);
          cr_expect_eq(n, 0, "%s, indices: %zu elements differ; the first, %s", what, n, why);
        }
      }
      mx_scope_end(scope);
    }
  }
}

/* softmax and log_softmax of the awkward values along the contiguous dim
 * and along a strided one, every float dtype, within 8 ulp; except the
 * CPU's float32 softmax along a unit-stride dim, which shifts by the max
 * in float before its vectorised exp: up to 88 * 2^-24 relative for the
 * smallest results (the H100 run saw 16 ulp at 1.6e-37), so 64 ulp there,
 * and its exp gives 0 below the smallest normal result (the GPU 1.7e-43). */
Test(gpu, softmax_matches_cpu) {
  require_gpu();
  for (int d = 0; d < COUNT(float_dtypes); d++) {
    mx_scope *scope = mx_scope_begin();
    mx_dtype dtype = float_dtypes[d];
    mx_tensor *x = awkward_tensor(dtype, 600 + (uint64_t)d), *xg = to_cuda(x);
    for (int log = 0; log < 2; log++)
      for (int dim = 0; dim < 3; dim += 2) {
        mx_tensor *c = log ? mx_log_softmax(mx_transpose(x, 0, 1), dim) : mx_softmax(mx_transpose(x, 0, 1), dim);
        mx_tensor *g = log ? mx_log_softmax(mx_transpose(xg, 0, 1), dim) : mx_softmax(mx_transpose(xg, 0, 1), dim);
        cr_assert(c && g, "%s", mx_last_error());
        char what[64], why[256];
        snprintf(what, sizeof what, "%s along dim %d, %s", log ? "log_softmax" : "softmax", dim, mx_dtype_name(dtype));
        bool float_line = dtype == MX_F32 && dim == 2 && !log;
        double rel = eight_ulps(dtype) * (float_line ? 8 : 1);
        /* the float lines' exp flushes subnormal results to 0: those differ by up to the smallest normal */
        double floor = smallest_normal(dtype) * (float_line ? 1 / rel : 1);
        size_t n = differences(c, g, rel, floor, why, sizeof why);
        cr_expect_eq(n, 0, "%s: %zu elements differ; the first, %s", what, n, why);
      }
    mx_scope_end(scope);
  }
}

/* gather, index_select, scatter, scatter_add, index_add and index_copy
 * through the ops, every dtype, with repeated indices: the same bits on
 * both devices (the CUDA writes walk each line along dim in the CPU's
 * order). An index out of range gives the CPU's error. */
Test(gpu, indexing_matches_cpu) {
  require_gpu();
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    mx_dtype dtype = all_dtypes[d];
    mx_scope *scope = mx_scope_begin();
    mx_tensor *x = elementwise_input(dtype, 700 + (uint64_t)d), *src = elementwise_input(dtype, 710 + (uint64_t)d);
    mx_tensor *rows = small_integers(MX_SHAPE(6, 4, 9), 0, 6, MX_I64, 720 + (uint64_t)d); /* dim 1: 7 */
    mx_tensor *cols = small_integers(MX_SHAPE(5), 0, 8, MX_I64, 730 + (uint64_t)d);       /* dim 2: 9 */
    mx_tensor *src_rows = mx_slice(src, 1, 0, 4, 1), *src_cols = mx_slice(src, 2, 0, 5, 1);
    mx_tensor *xg = to_cuda(x), *rows_g = to_cuda(rows), *cols_g = to_cuda(cols);
    mx_tensor *src_rows_g = to_cuda(src_rows), *src_cols_g = to_cuda(src_cols);
    struct {
      const char *what;
      mx_tensor *cpu, *gpu;
    } cases[] = {
        {"gather", mx_gather(x, 1, rows), mx_gather(xg, 1, rows_g)},
        {"index_select", mx_index_select(x, 2, cols), mx_index_select(xg, 2, cols_g)},
        {"scatter", mx_scatter(x, 1, rows, src_rows), mx_scatter(xg, 1, rows_g, src_rows_g)},
        {"scatter_add", mx_scatter_add(x, 1, rows, src_rows), mx_scatter_add(xg, 1, rows_g, src_rows_g)},
        {"index_add", mx_index_add(x, 2, cols, src_cols, 2.5), mx_index_add(xg, 2, cols_g, src_cols_g, 2.5)},
        {"index_copy", mx_index_copy(x, 2, cols, src_cols), mx_index_copy(xg, 2, cols_g, src_cols_g)},
    };
    for (int c = 0; c < COUNT(cases); c++) {
      char what[64], why[256];
      snprintf(what, sizeof what, "%s, %s", cases[c].what, mx_dtype_name(dtype));
      cr_assert(cases[c].cpu && cases[c].gpu, "%s: %s", what, mx_last_error());
      size_t n = differences(cases[c].cpu, cases[c].gpu, 0, 0, why, sizeof why);
      cr_expect_eq(n, 0, "%s: %zu elements differ; the first, %s", what, n, why);
    }
    mx_scope_end(scope);
  }
  mx_scope *scope = mx_scope_begin();
  mx_tensor *x = to_cuda(mx_zeros(MX_SHAPE(3, 4), MX_F32, MX_CPU));
  mx_tensor *bad = to_cuda(mx_from_data((int64_t[]){0, 4, 1}, MX_SHAPE(3, 1), MX_I64, MX_CPU));
  mx_clear_error();
  cr_assert_null(mx_gather(x, 1, bad));
  cr_assert_str_eq(mx_last_error(), "mx_gather: index 4 out of range for dim 1 of size 4");
  cr_assert_null(mx_scatter_add(x, 1, bad, mx_gather(x, 1, mx_zeros_like(bad))));
  cr_assert_str_eq(mx_last_error(), "mx_scatter_add: index 4 out of range for dim 1 of size 4");
  mx_scope_end(scope);
}

/* The value and the gradients of sum(f(x, w, b) * seed) on both devices,
 * f a convolution or pooling; x, w, b and seed random normal values. */
typedef mx_tensor *(*layer_fn)(const mx_tensor *x, const mx_tensor *w, const mx_tensor *b, int config);

typedef struct {
  mx_tensor *y[2], *dx[2], *dw[2], *db[2];
} layer_results;

static layer_results run_layer(layer_fn f, int config, mx_shape xs, mx_shape ws, bool bias, mx_dtype dtype,
                               uint64_t seed) {
  layer_results r;
  memset(&r, 0, sizeof r);
  mx_generator *g = mx_generator_new(seed);
  mx_tensor *x = mx_to_dtype(mx_randn(xs, MX_F64, MX_CPU, g), dtype);
  mx_tensor *w = ws.ndim ? mx_to_dtype(mx_randn(ws, MX_F64, MX_CPU, g), dtype) : NULL;
  mx_tensor *b = bias ? mx_to_dtype(mx_randn(MX_SHAPE(ws.d[0]), MX_F64, MX_CPU, g), dtype) : NULL;
  mx_generator_free(g);
  for (int dev = 0; dev < 2; dev++) {
    mx_tensor *xd = dev ? to_cuda(x) : mx_clone(x), *wd = w ? (dev ? to_cuda(w) : mx_clone(w)) : NULL;
    mx_tensor *bd = b ? (dev ? to_cuda(b) : mx_clone(b)) : NULL;
    mx_set_requires_grad(xd, true);
    if (wd) mx_set_requires_grad(wd, true);
    if (bd) mx_set_requires_grad(bd, true);
    r.y[dev] = f(xd, wd, bd, config);
    cr_assert_not_null(r.y[dev], "%s: %s", dev ? "cuda" : "cpu", mx_last_error());
    mx_generator *sg = mx_generator_new(seed + 1);
    mx_tensor *seed_grad = mx_to_dtype(mx_randn(mx_shape_get(r.y[dev]), MX_F64, MX_CPU, sg), dtype);
    mx_generator_free(sg);
    if (dev) seed_grad = to_cuda(seed_grad);
    cr_assert_eq(mx_backward(r.y[dev], seed_grad, false), MX_OK, "%s: %s", dev ? "cuda" : "cpu", mx_last_error());
    r.dx[dev] = mx_grad_of(xd);
    r.dw[dev] = wd ? mx_grad_of(wd) : NULL;
    r.db[dev] = bd ? mx_grad_of(bd) : NULL;
  }
  return r;
}

/* rel and floor for the output and dx, dw; db_rel for the bias gradient,
 * a sum over the batch and positions that the devices order differently. */
static void expect_layer_results(const layer_results *r, double rel, double floor, double db_rel, const char *what) {
  const char *names[4] = {"output", "dx", "dw", "db"};
  mx_tensor *const *pairs[4] = {r->y, r->dx, r->dw, r->db};
  for (int i = 0; i < 4; i++) {
    if (!pairs[i][0]) continue;
    char why[256];
    size_t n = differences(pairs[i][0], pairs[i][1], i == 3 ? db_rel : rel, i == 3 ? 1.0 : floor, why, sizeof why);
    cr_expect_eq(n, 0, "%s, %s: %zu elements differ; the first, %s", what, names[i], n, why);
  }
}

static mx_tensor *conv_config(const mx_tensor *x, const mx_tensor *w, const mx_tensor *b, int config) {
  switch (config) {
  case 0: return mx_conv2d(x, w, b, MX_SHAPE(1), MX_SHAPE(1), MX_DEFAULT, 1);           /* 3x3, padding 1 */
  case 1: return mx_conv2d(x, w, b, MX_SHAPE(2, 1), MX_SHAPE(0, 2), MX_SHAPE(2, 1), 1); /* stride, dilation */
  default: return mx_conv2d(x, w, b, MX_SHAPE(1), MX_SHAPE(1), MX_DEFAULT, 2);          /* two groups */
  }
}

/* Convolutions forward and backward (data, weight, bias) in every float
 * dtype and three configurations. float64 runs the CPU's plain loops and
 * CUDA's direct kernels, which sum in the same order: the same bits (but
 * the bias gradient, a reduction, within 8 ulp). The others go through
 * oneDNN on the CPU and cuDNN on CUDA, other orders: within float32
 * rounding of sums of about 1, and one 16-bit rounding for float16 and
 * bfloat16 (cuDNN rounds its sum and the bias is added after: two). */
Test(gpu, conv2d_forward_and_backward_match_cpu) {
  require_gpu();
  for (int d = 0; d < COUNT(float_dtypes); d++) {
    mx_dtype dtype = float_dtypes[d];
    double rel = dtype == MX_F64 ? 0 : dtype == MX_F32 ? 1e-5 : dtype == MX_F16 ? 0x1p-9 : 0x1p-6;
    for (int config = 0; config < 3; config++) {
      mx_scope *scope = mx_scope_begin();
      layer_results r = run_layer(conv_config, config, MX_SHAPE(3, 4, 9, 8), MX_SHAPE(6, config == 2 ? 2 : 4, 3, 3),
                                  config != 1, dtype, 800 + (uint64_t)(10 * d + config));
      char what[64];
      snprintf(what, sizeof what, "conv2d config %d, %s", config, mx_dtype_name(dtype));
      expect_layer_results(&r, rel, rel ? 1.0 : 0, rel ? rel : eight_ulps(MX_F64), what);
      mx_scope_end(scope);
    }
  }
}

static mx_tensor *conv_other_config(const mx_tensor *x, const mx_tensor *w, const mx_tensor *b, int config) {
  switch (config) {
  case 0: return mx_conv1d(x, w, b, MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT, 1);  /* cuDNN: 2-d of height 1 */
  case 1: return mx_conv3d(x, w, b, MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 2);   /* 5-d operands, two groups */
  default: return mx_conv_transpose2d(x, w, b, MX_SHAPE(2), MX_SHAPE(1), MX_SHAPE(1), MX_DEFAULT, 1);
  }
}

/* 1-d, 3-d and transposed convolutions, bounded as the 2-d ones above. */
Test(gpu, conv1d_conv3d_and_transposed_match_cpu) {
  require_gpu();
  mx_shape xs[3] = {MX_SHAPE(3, 4, 11), MX_SHAPE(2, 4, 5, 6, 5), MX_SHAPE(2, 4, 5, 6)};
  mx_shape ws[3] = {MX_SHAPE(6, 4, 3), MX_SHAPE(6, 2, 3, 3, 3), MX_SHAPE(4, 4, 3, 3)};
  for (int d = 0; d < COUNT(float_dtypes); d++) {
    mx_dtype dtype = float_dtypes[d];
    double rel = dtype == MX_F64 ? 0 : dtype == MX_F32 ? 1e-5 : dtype == MX_F16 ? 0x1p-9 : 0x1p-6;
    for (int config = 0; config < 3; config++) {
      mx_scope *scope = mx_scope_begin();
      layer_results r = run_layer(conv_other_config, config, xs[config], ws[config], true, dtype,
                                  900 + (uint64_t)(10 * d + config));
      char what[64];
      snprintf(what, sizeof what, "conv config %d, %s", config, mx_dtype_name(dtype));
      expect_layer_results(&r, rel, rel ? 1.0 : 0, rel ? rel : eight_ulps(MX_F64), what);
      mx_scope_end(scope);
    }
  }
}

static mx_tensor *pool_config(const mx_tensor *x, const mx_tensor *w, const mx_tensor *b, int config) {
  (void)w, (void)b;
  switch (config) {
  case 0: return mx_max_pool(x, 2, MX_SHAPE(2), MX_DEFAULT, MX_SHAPE(0));         /* the CNNs' 2x2 */
  case 1: return mx_max_pool(x, 2, MX_SHAPE(3), MX_SHAPE(2), MX_SHAPE(1));        /* overlapping, padded */
  case 2: return mx_avg_pool(x, 2, MX_SHAPE(3), MX_SHAPE(2), MX_SHAPE(1), false); /* padding not counted */
  default: return mx_avg_pool(x, 2, MX_SHAPE(2, 3), MX_SHAPE(1), MX_SHAPE(1), true);
  }
}

/* Max and average pooling forward and backward, every float dtype: the
 * CUDA kernels follow the CPU's rules (NaN-free random values here; the
 * planes' gradients added in the CPU's order), so the same bits. */
Test(gpu, pooling_forward_and_backward_match_cpu) {
  require_gpu();
  for (int d = 0; d < COUNT(float_dtypes); d++)
    for (int config = 0; config < 4; config++) {
      mx_scope *scope = mx_scope_begin();
      layer_results r = run_layer(pool_config, config, MX_SHAPE(2, 3, 10, 9), MX_DEFAULT, false, float_dtypes[d],
                                  900 + (uint64_t)(10 * d + config));
      char what[64];
      snprintf(what, sizeof what, "pooling config %d, %s", config, mx_dtype_name(float_dtypes[d]));
      expect_layer_results(&r, 0, 0, 0, what);
      mx_scope_end(scope);
    }
}

/* The running mean and variance of the last bn_config call on each device
 * (0: the CPU, 1: CUDA). */
static mx_tensor *bn_running[2][2];

/* Batch norm with weight w and bias b, training but in config 2; the
 * running statistics start at 0.5 and 2 (what config 2 normalises with). */
static mx_tensor *bn_config(const mx_tensor *x, const mx_tensor *w, const mx_tensor *b, int config) {
  mx_device device = mx_device_of(x);
  int64_t channels = mx_shape_get(x).d[1];
  mx_dtype stats = mx_dtype_of(x) == MX_F64 ? MX_F64 : MX_F32;
  mx_tensor **running = bn_running[device == MX_CUDA];
  running[0] = mx_full(MX_SHAPE(channels), 0.5, stats, device);
  running[1] = mx_full(MX_SHAPE(channels), 2.0, stats, device);
  return mx_batch_norm(x, running[0], running[1], w, b, config != 2, 0.1, 1e-5);
}

/* Batch norm forward and backward in every float dtype: training on a 4-d
 * input, on a 2-d one (planes of one value), and on channels of 8184
 * values (CUDA's sums cut them into several runs); and eval on a 3-d
 * input. Training's running statistics are compared too. The devices add
 * the per-channel sums in different orders (the CPU in float lanes, CUDA
 * in double), so float32 agrees within 1e-5 and float64 within 1e-12.
 * float16 and bfloat16 results may round the other way where the
 * statistics differ in their last bits, and the input's gradient adds two
 * such rounded terms: within 2^-7 and 2^-4 of the larger magnitude (8
 * units in the last place or more). The statistics themselves are float32
 * for every 16-bit input. */
Test(gpu, batch_norm_forward_and_backward_match_cpu) {
  require_gpu();
  mx_shape xs[4] = {MX_SHAPE(4, 3, 5, 6), MX_SHAPE(16, 5), MX_SHAPE(3, 4, 7), MX_SHAPE(8, 2, 33, 31)};
  for (int d = 0; d < COUNT(float_dtypes); d++) {
    mx_dtype dtype = float_dtypes[d];
    double rel = dtype == MX_F64 ? 1e-12 : dtype == MX_F32 ? 1e-5 : dtype == MX_F16 ? 0x1p-7 : 0x1p-4;
    double stats_rel = dtype == MX_F64 ? 1e-12 : 1e-5;
    for (int config = 0; config < COUNT(xs); config++) {
      mx_scope *scope = mx_scope_begin();
      layer_results r = run_layer(bn_config, config, xs[config], MX_SHAPE(xs[config].d[1]), true, dtype,
                                  1000 + (uint64_t)(10 * d + config));
      char what[64], why[256];
      snprintf(what, sizeof what, "batch norm config %d, %s", config, mx_dtype_name(dtype));
      expect_layer_results(&r, rel, 1.0, rel, what);
      for (int k = 0; config != 2 && k < 2; k++) {
        size_t n = differences(bn_running[0][k], bn_running[1][k], stats_rel, 1.0, why, sizeof why);
        cr_expect_eq(n, 0, "%s, running %s: %s", what, k ? "var" : "mean", why);
      }
      mx_scope_end(scope);
    }
  }
}

/* One training step of a small MLP through the ops on both devices:
 * log_softmax(relu(x w1 + b1) w2 + b2), the mean of the one-hot picked
 * log-probabilities as the loss, and backward. The loss and every gradient
 * agree within float32's rounding of the different summation orders: 1e-5
 * of the larger of the value and 0.01, the size of a gradient's terms (the
 * H100 run saw 1.5e-8 differences on gradients of 7.6e-4). */
Test(gpu, mlp_step_through_the_ops_matches_cpu) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  mx_generator *g = mx_generator_new(7);
  mx_tensor *cpu[6] = {mx_randn(MX_SHAPE(32, 20), MX_F32, MX_CPU, g),  mx_randn(MX_SHAPE(20, 16), MX_F32, MX_CPU, g),
                       mx_randn(MX_SHAPE(16), MX_F32, MX_CPU, g),      mx_randn(MX_SHAPE(16, 5), MX_F32, MX_CPU, g),
                       mx_randn(MX_SHAPE(5), MX_F32, MX_CPU, g),       mx_rand(MX_SHAPE(32, 5), MX_F32, MX_CPU, g)};
  mx_generator_free(g);
  cpu[5] = mx_to_dtype(mx_eq(cpu[5], mx_amax(cpu[5], MX_DIMS(1), true)), MX_F32); /* a one-hot target per row */
  mx_tensor *gpu[6];
  for (int i = 0; i < 6; i++) gpu[i] = to_cuda(cpu[i]);
  mx_tensor *loss[2], *grads[2][4];
  for (int dev = 0; dev < 2; dev++) {
    mx_tensor **t = dev ? gpu : cpu;
    for (int i = 1; i < 5; i++) cr_assert_eq(mx_set_requires_grad(t[i], true), MX_OK);
    mx_tensor *h = mx_relu(mx_add(mx_mm(t[0], t[1]), t[2]));
    mx_tensor *logp = mx_log_softmax(mx_add(mx_mm(h, t[3]), t[4]), 1);
    loss[dev] = mx_neg(mx_mean(mx_sum(mx_mul(logp, t[5]), MX_DIMS(1), false), MX_ALL_DIMS, false));
    cr_assert_not_null(loss[dev], "%s: %s", dev ? "cuda" : "cpu", mx_last_error());
    cr_assert_eq(mx_backward(loss[dev], NULL, false), MX_OK, "%s: %s", dev ? "cuda" : "cpu", mx_last_error());
    for (int i = 0; i < 4; i++) grads[dev][i] = mx_grad_of(t[i + 1]);
  }
  char why[256];
  size_t n = differences(loss[0], loss[1], 1e-6, 1.0, why, sizeof why);
  cr_expect_eq(n, 0, "the loss: %s", why);
  for (int i = 0; i < 4; i++) {
    n = differences(grads[0][i], grads[1][i], 1e-5, 1e-2, why, sizeof why);
    cr_expect_eq(n, 0, "the gradient of parameter %d: %zu elements differ; the first, %s", i, n, why);
  }
  mx_scope_end(scope);
}

/* mx_module_to(cuda): the same handles, now on CUDA with the same values,
 * gradients dropped; the forward there matches the CPU's; and back. */
Test(gpu, module_to_cuda_and_back) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(5);
  mx_module *m = mx_sequential_new(2, (mx_module *[]){mx_linear_new(6, 4, true, gen), mx_relu_new()});
  mx_tensor *x = mx_randn(MX_SHAPE(3, 6), MX_F32, MX_CPU, gen);
  mx_generator_free(gen);
  cr_assert(m && x, "%s", mx_last_error());
  mx_tensor *w = mx_module_parameter(m, 0, NULL), *w_before = mx_clone(w);
  mx_tensor *y_cpu = mx_module_forward(m, x);
  cr_assert_eq(mx_backward(mx_sum(y_cpu, MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
  cr_assert_not_null(mx_grad_of(w));
  cr_assert_eq(mx_module_to(m, MX_CUDA), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_module_parameter(m, 0, NULL), w, "the module keeps its handles");
  cr_assert_eq(mx_device_of(w), MX_CUDA);
  cr_assert(mx_requires_grad(w));
  cr_assert_null(mx_grad_of(w), "the CPU gradient is dropped");
  assert_identical(w_before, w, "the weight on CUDA");
  mx_tensor *y_gpu = mx_module_forward(m, to_cuda(x));
  cr_assert_not_null(y_gpu, "%s", mx_last_error());
  char why[256]; /* within float32 rounding of sums of six terms of about 1 */
  cr_assert_eq(differences(y_cpu, y_gpu, 1e-6, 1.0, why, sizeof why), 0, "the forward on CUDA: %s", why);
  cr_assert_eq(mx_module_to(m, MX_CPU), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_device_of(w), MX_CPU);
  assert_identical(w_before, to_cuda(w), "the weight back on the CPU");
  mx_module_free(m);
  mx_scope_end(scope);
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

/* --- the AMP kernels ------------------------------------------------------------------ */

/* Check-and-unscale over gradients of each dtype it takes (one a strided
 * view), holding inf, NaN and subnormals, then four scale updates: the same
 * bits on both devices, found_inf and the per-gradient counts included. */
Test(gpu, amp_unscale_and_update_same_bits) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  const mx_dtype dtypes[] = {MX_F32, MX_F64, MX_BF16};
  mx_tensor *cpu[3], *gpu[3];
  mx_kview vc[3], vg[3];
  for (int d = 0; d < 3; d++) {
    mx_tensor *c = awkward_tensor(dtypes[d], 60 + (uint64_t)d);
    cpu[d] = d == 0 ? mx_transpose(c, 0, 2) : c;
    gpu[d] = d == 0 ? mx_transpose(to_cuda(c), 0, 2) : to_cuda(c);
    vc[d] = mx__kview_of(cpu[d]);
    vg[d] = mx__kview_of(gpu[d]);
  }
  mx_tensor *scale_c = mx_scalar(3072.0, MX_F32, MX_CPU), *scale_g = to_cuda(scale_c);
  mx_tensor *found_c = mx_scalar(0.0, MX_F32, MX_CPU), *found_g = to_cuda(found_c);
  mx_tensor *stats_c = mx_zeros(MX_SHAPE(3, 3), MX_I64, MX_CPU), *stats_g = to_cuda(stats_c);
  const mx_backend *bc = mx__backend(MX_CPU), *bg = mx__backend(MX_CUDA);
  cr_assert_eq(bc->amp_unscale(3, vc, mx__kview_of(scale_c).data, mx__kview_of(found_c).data,
                               mx__kview_of(stats_c).data), MX_OK, "%s", mx_last_error());
  cr_assert_eq(bg->amp_unscale(3, vg, mx__kview_of(scale_g).data, mx__kview_of(found_g).data,
                               mx__kview_of(stats_g).data), MX_OK, "%s", mx_last_error());
  for (int d = 0; d < 3; d++) assert_identical(cpu[d], gpu[d], "amp_unscale");
  assert_identical(found_c, found_g, "amp_unscale found_inf");
  assert_identical(stats_c, stats_g, "amp_unscale counts");
  cr_assert_eq(mx_item(found_c), 1.0, "the planted inf and NaN are found");

  mx_tensor *tracker_c = mx_scalar(0, MX_I32, MX_CPU), *tracker_g = to_cuda(tracker_c);
  mx_tensor *counters_c = mx_zeros(MX_SHAPE(3), MX_I64, MX_CPU), *counters_g = to_cuda(counters_c);
  mx_amp_update_params p = {2.0, 0.5, 2, 0, 0};
  for (int step = 0; step < 4; step++) {
    float flag = step == 1 ? 1.0f : 0.0f;
    mx_tensor *f_c = mx_scalar(flag, MX_F32, MX_CPU), *f_g = to_cuda(f_c);
    cr_assert_eq(bc->amp_update_scale(mx__kview_of(scale_c).data, mx__kview_of(tracker_c).data,
                                      mx__kview_of(f_c).data, &p, mx__kview_of(counters_c).data), MX_OK);
    cr_assert_eq(bg->amp_update_scale(mx__kview_of(scale_g).data, mx__kview_of(tracker_g).data,
                                      mx__kview_of(f_g).data, &p, mx__kview_of(counters_g).data), MX_OK,
                 "%s", mx_last_error());
    mx_release(f_c);
    mx_release(f_g);
  }
  assert_identical(scale_c, scale_g, "amp_update_scale scale");
  assert_identical(tracker_c, tracker_g, "amp_update_scale tracker");
  assert_identical(counters_c, counters_g, "amp_update_scale counters");
  cr_assert_eq(mx_item(scale_c), 3072.0, "x1 (no growth yet), x0.5 (inf), then 2 clean steps: x2");
  mx_scope_end(scope);
  cr_assert_eq(mx_memory_stats_get(MX_CUDA).live_tensors, 0, "the test's CUDA tensors are all released");
}
