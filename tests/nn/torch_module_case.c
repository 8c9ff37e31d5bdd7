/* The module-against-PyTorch tests' shared helpers (torch_module_case.h). */
#include "torch_module_case.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

const fx_tensor *torch_find(const torch_named *list, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(list[i].name, name)) return &list[i].t;
  return NULL;
}

bool torch_same_shape(mx_shape a, mx_shape b) {
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; d++)
    if (a.d[d] != b.d[d]) return false;
  return true;
}

void torch_expect_identical(const char *id, const char *what, const mx_tensor *a, const mx_tensor *b) {
  cr_assert(a && b, "%s: %s is missing (%s)", id, what, mx_last_error());
  cr_assert(torch_same_shape(mx_shape_get(a), mx_shape_get(b)), "%s: %s shapes differ", id, what);
  int64_t n = mx_numel(a);
  float *va = malloc(sizeof *va * (size_t)n), *vb = malloc(sizeof *vb * (size_t)n);
  cr_assert(va && vb);
  cr_assert_eq(mx_to_host(a, va, sizeof *va * (size_t)n), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_to_host(b, vb, sizeof *vb * (size_t)n), MX_OK, "%s", mx_last_error());
  cr_expect(!memcmp(va, vb, sizeof *va * (size_t)n), "%s: %s differs", id, what);
  free(va);
  free(vb);
}

void torch_set_parameters(const char *id, const torch_named *param, int n, mx_module *m) {
  cr_assert_eq(mx_module_num_parameters(m), n, "%s: %d parameters, PyTorch has %d", id, mx_module_num_parameters(m),
               n);
  for (int i = 0; i < n; i++) {
    const char *name;
    mx_tensor *p = mx_module_parameter(m, i, &name);
    cr_assert(p, "%s", mx_last_error());
    cr_assert_str_eq(name, param[i].name, "%s: parameter %d", id, i);
    cr_assert(torch_same_shape(mx_shape_get(p), param[i].t.shape), "%s: %s has the wrong shape", id, name);
    mx_tensor *value = fx_to_mx(&param[i].t);
    cr_assert(value, "%s", mx_last_error());
    cr_assert_eq(mx_copy_(p, value), MX_OK, "%s: %s: %s", id, name, mx_last_error());
  }
}
