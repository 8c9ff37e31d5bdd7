/* Reading float32 tensors back in tests (float_values.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "float_values.h"

float *values(const mx_tensor *t) {
  cr_assert(t, "%s", mx_last_error());
  size_t bytes = sizeof(float) * (size_t)mx_numel(t);
  float *v = malloc(bytes ? bytes : 1);
  cr_assert_eq(mx_to_host(t, v, bytes), MX_OK, "%s", mx_last_error());
  return v;
}

double max_abs_diff(const mx_tensor *a, const mx_tensor *b) {
  cr_assert_eq(mx_numel(a), mx_numel(b));
  float *va = values(a), *vb = values(b);
  double d = 0;
  for (int64_t i = 0; i < mx_numel(a); i++) d = fmax(d, fabs((double)va[i] - vb[i]));
  free(va);
  free(vb);
  return d;
}
