/* The channels-last op tests' shared helpers (tests/ops/channels_last_case.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "tests/ops/channels_last_case.h"

bool test_quick(void) {
  const char *q = getenv("MX_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0;
}

mx_tensor *to_channels_last(const mx_tensor *x) {
  mx_tensor *t = mx_permute(mx_contiguous(mx_permute(x, MX_DIMS(0, 2, 3, 1))), MX_DIMS(0, 3, 1, 2));
  cr_assert_not_null(t, "%s", mx_last_error());
  cr_assert(has_channels_last_strides(t));
  return t;
}

bool has_channels_last_strides(const mx_tensor *t) {
  mx_shape shape = mx_shape_get(t), strides = mx_strides_get(t);
  if (shape.ndim != 4) return false;
  int64_t C = shape.d[1], H = shape.d[2], W = shape.d[3];
  const int64_t expected[4] = {H * W * C, 1, W * C, C};
  for (int d = 0; d < 4; d++)
    if (shape.d[d] != 1 && strides.d[d] != expected[d]) return false;
  return true;
}

void expect_channels_last(const mx_tensor *t, const char *what) {
  cr_assert_not_null(t, "%s: %s", what, mx_last_error());
  mx_shape s = mx_strides_get(t);
  cr_expect(has_channels_last_strides(t) && !mx_is_contiguous(t),
            "%s: strides (%lld, %lld, %lld, %lld) are not channels-last", what, (long long)s.d[0], (long long)s.d[1],
            (long long)s.d[2], (long long)s.d[3]);
}

/* t's values as float64, in logical order (malloc'd). */
static double *values(const mx_tensor *t) {
  int64_t n = mx_numel(t);
  double *v = malloc(sizeof(double) * (size_t)(n + 1));
  cr_assert(v);
  cr_assert_eq(mx_to_host(mx_to_dtype(t, MX_F64), v, sizeof(double) * (size_t)n), MX_OK, "%s", mx_last_error());
  return v;
}

void expect_same_bits(const mx_tensor *a, const mx_tensor *b, const char *what) {
  cr_assert(a && b, "%s: missing (%s)", what, mx_last_error());
  cr_assert_eq(mx_dtype_of(a), mx_dtype_of(b), "%s: dtypes %s and %s", what, mx_dtype_name(mx_dtype_of(a)),
               mx_dtype_name(mx_dtype_of(b)));
  int64_t n = mx_numel(a);
  cr_assert_eq(n, mx_numel(b), "%s: %lld and %lld elements", what, (long long)n, (long long)mx_numel(b));
  size_t size = mx_dtype_size(mx_dtype_of(a)), bytes = (size_t)n * size;
  unsigned char *pa = malloc(bytes + 1), *pb = malloc(bytes + 1);
  cr_assert(pa && pb);
  cr_assert_eq(mx_to_host(a, pa, bytes), MX_OK);
  cr_assert_eq(mx_to_host(b, pb, bytes), MX_OK);
  double *va = values(a), *vb = values(b);
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < n; i++)
    if (memcmp(pa + (size_t)i * size, pb + (size_t)i * size, size) && !(isnan(va[i]) && isnan(vb[i])) &&
        differ++ == 0)
      first = i;
  cr_expect_eq(differ, 0, "%s: %lld of %lld elements differ; the first, %lld: %a against %a", what, (long long)differ,
               (long long)n, (long long)first, first >= 0 ? va[first] : 0.0, first >= 0 ? vb[first] : 0.0);
  free(pa), free(pb), free(va), free(vb);
}

void expect_close(const mx_tensor *a, const mx_tensor *b, double tol, const char *what) {
  cr_assert(a && b, "%s: missing (%s)", what, mx_last_error());
  int64_t n = mx_numel(a);
  cr_assert_eq(n, mx_numel(b), "%s: %lld and %lld elements", what, (long long)n, (long long)mx_numel(b));
  double *va = values(a), *vb = values(b);
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < n; i++) {
    bool same = isnan(va[i]) ? isnan(vb[i]) : va[i] == vb[i] || fabs(va[i] - vb[i]) <= tol * (1 + fabs(vb[i]));
    if (!same && differ++ == 0) first = i;
  }
  cr_expect_eq(differ, 0, "%s: %lld of %lld elements differ by more than %g; the first, %lld: %a against %a", what,
               (long long)differ, (long long)n, tol, (long long)first, first >= 0 ? va[first] : 0.0,
               first >= 0 ? vb[first] : 0.0);
  free(va), free(vb);
}

mx_tensor *random_input(mx_shape shape, mx_dtype dtype, uint64_t seed, bool ties, bool nans) {
  mx_generator *gen = mx_generator_new(seed);
  mx_tensor *x = mx_randn(shape, MX_F64, MX_CPU, gen);
  mx_generator_free(gen);
  if (ties) x = mx_div_scalar(mx_round(mx_mul_scalar(x, 4)), 4);
  cr_assert_not_null(x, "%s", mx_last_error());
  x = mx_clone(x);
  if (nans) {
    cr_assert_eq(mx_set(x, MX_SHAPE(0, shape.d[1] - 1, 1, 1), NAN), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_set(x, MX_SHAPE(shape.d[0] - 1, 0, shape.d[2] - 1, 0), NAN), MX_OK, "%s", mx_last_error());
  }
  return mx_to_dtype(x, dtype);
}
