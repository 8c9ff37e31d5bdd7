/* What the GPU suite's files share: the skip without a device, comparing a
 * CPU tensor with a CUDA tensor, and inputs full of awkward values. */
#include "compare.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const mx_dtype all_dtypes[8] = {MX_F32, MX_F64, MX_F16, MX_BF16, MX_I64, MX_I32, MX_U8, MX_BOOL};
const mx_dtype float_dtypes[4] = {MX_F32, MX_F64, MX_F16, MX_BF16};

void require_gpu(void) {
  if (mx_cuda_device_count() == 0)
    cr_skip_test("no CUDA device here (%s): the CUDA backend is not compared",
                 mx_cuda_built() ? "mixgrad built with CUDA" : "mixgrad built without CUDA");
}

/* --- comparing a CPU tensor with a CUDA tensor ------------------------------------- */

/* t's elements in row-major order, as its dtype's C type, in a malloc'ed
 * buffer of *bytes bytes. */
void *host_copy(const mx_tensor *t, size_t *bytes) {
  size_t n = (size_t)mx_numel(t) * mx_dtype_size(mx_dtype_of(t));
  void *buf = malloc(n ? n : 1);
  cr_assert_not_null(buf);
  cr_assert_eq(mx_to_host(t, buf, n), MX_OK, "mx_to_host: %s", mx_last_error());
  *bytes = n;
  return buf;
}

void assert_same_geometry(const mx_tensor *cpu, const mx_tensor *gpu, const char *what) {
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
size_t differences(const mx_tensor *cpu, const mx_tensor *gpu, double rel, double floor, char *why,
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

void assert_identical(const mx_tensor *cpu, const mx_tensor *gpu, const char *what) {
  char why[256];
  cr_assert_eq(differences(cpu, gpu, 0, 0, why, sizeof why), 0, "%s (%s)", what, why);
}

/* 8 units in the last place of a float dtype, relative. */
double eight_ulps(mx_dtype dtype) {
  return 8 * (dtype == MX_F64 ? 0x1p-52 : dtype == MX_F32 ? 0x1p-23 : dtype == MX_F16 ? 0x1p-10 : 0x1p-7);
}

/* The smallest normal value of a float dtype. */
double smallest_normal(mx_dtype dtype) {
  return dtype == MX_F64 ? 0x1p-1022 : dtype == MX_F16 ? 0x1p-14 : 0x1p-126;
}

/* Within rel of the larger magnitude; subnormal results compare absolutely. */
void assert_close(const mx_tensor *cpu, const mx_tensor *gpu, double rel, const char *what) {
  char why[256];
  cr_assert_eq(differences(cpu, gpu, rel, smallest_normal(mx_dtype_of(cpu)), why, sizeof why), 0, "%s (%s)",
               what, why);
}

/* --- inputs --------------------------------------------------------------------------- */

/* Normal values at scales from 1e-3 to 1e5, with the awkward cases of every
 * conversion planted among them: NaN, infinities, signed zero, fp16/bf16
 * ties and overflow edges, subnormals, and the edges of the integer ranges. */
double *awkward_values(int64_t n, uint64_t seed) {
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
mx_tensor *awkward_tensor(mx_dtype dtype, uint64_t seed) {
  double *v = awkward_values(6 * 7 * 9, seed);
  mx_tensor *f64 = mx_from_data(v, MX_SHAPE(6, 7, 9), MX_F64, MX_CPU);
  free(v);
  cr_assert_not_null(f64, "%s", mx_last_error());
  mx_tensor *t = mx_to_dtype(f64, dtype);
  mx_release(f64);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

mx_tensor *to_cuda(const mx_tensor *t) {
  mx_tensor *g = mx_to_device(t, MX_CUDA);
  cr_assert_not_null(g, "mx_to_device(cuda): %s", mx_last_error());
  return g;
}
