/* Checks the op suite's files share: an exact error (status and message), bitwise equality, a shape, a tensor's
 * values. */
#include "op_checks.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

void op_expect_error(const char *what, bool failed, mx_status status, const char *message) {
  cr_expect(failed, "%s: expected an error (%s), the call succeeded", what, message);
  if (!failed) return;
  cr_expect_eq(mx_last_status(), status, "%s: status \"%s\", expected \"%s\"", what, mx_status_str(mx_last_status()),
               mx_status_str(status));
  cr_expect_str_eq(mx_last_error(), message, "%s:\n  got      \"%s\"\n  expected \"%s\"", what, mx_last_error(),
                   message);
}

bool op_bitwise_equal(const mx_tensor *a, const mx_tensor *b) {
  cr_assert_not_null(a, "%s", mx_last_error());
  cr_assert_not_null(b, "%s", mx_last_error());
  if (mx_numel(a) != mx_numel(b)) return false;
  int64_t n = mx_numel(a);
  double *x = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n);
  cr_assert_eq(mx_to_host(a, x, sizeof(double) * (size_t)n), MX_OK);
  cr_assert_eq(mx_to_host(b, y, sizeof(double) * (size_t)n), MX_OK);
  bool same = memcmp(x, y, sizeof(double) * (size_t)n) == 0;
  free(x);
  free(y);
  return same;
}

double *op_host_values(const mx_tensor *t) {
  cr_assert_not_null(t, "%s", mx_last_error());
  mx_tensor *d = mx_to_dtype(mx_contiguous(t), MX_F64);
  cr_assert_not_null(d, "%s", mx_last_error());
  int64_t n = mx_numel(d);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  cr_assert_eq(mx_to_host(d, v, sizeof(double) * (size_t)n), MX_OK, "%s", mx_last_error());
  return v;
}

void op_expect_shape(const char *what, const mx_tensor *t, mx_shape want) {
  cr_assert_not_null(t, "%s: %s", what, mx_last_error());
  mx_shape got = mx_shape_get(t);
  cr_assert_eq(got.ndim, want.ndim, "%s: %d dims, expected %d", what, got.ndim, want.ndim);
  for (int d = 0; d < want.ndim; d++)
    cr_expect_eq(got.d[d], want.d[d], "%s: dim %d is %lld, expected %lld", what, d, (long long)got.d[d],
                 (long long)want.d[d]);
}
