/* The op cases (every differentiable op in ops/ops.def, and the
 * non-differentiable ones the PyTorch fixtures check) as one list over the
 * two tables, the helpers their functions share, and the inputs drawn from
 * each case's domains. */
#include "op_case_table.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

mx_tensor *op_case_constant(const mx_tensor *like, mx_shape shape, const double *v) {
  return mx_to_dtype(mx_from_data(v, shape, MX_F64, MX_CPU), mx_dtype_of(like));
}

mx_tensor *op_case_zero_leaf(mx_shape shape, const mx_tensor *like) {
  mx_tensor *x = mx_zeros(shape, mx_dtype_of(like), MX_CPU);
  if (x && mx_set_requires_grad(x, true) != MX_OK) return NULL;
  return x;
}

/* gy . d f(x) / d x, with a graph of its own when grad mode is on (as in gradgradcheck): the
 * backward ops (softmax_backward, max_pool_backward, conv_backward_data, ...) as functions of
 * their inputs, so gradcheck and the fixtures differentiate them. */
mx_tensor *op_case_vjp(op_case_forward f, mx_tensor *x, mx_tensor *const *in, mx_tensor *gy) {
  if (!x || !gy) return NULL;
  bool create = mx_is_grad_enabled();
  bool previous = mx_set_grad_enabled(true);
  mx_tensor *y = f(x, in), *g = NULL;
  if (y && mx_grad(1, &y, 1, &x, &gy, create, create, true, &g) == MX_OK && !g) g = mx_zeros_like(x);
  mx_set_grad_enabled(previous);
  return g;
}

int op_case_count(void) { return op_cases_basic_count + op_cases_appended_count; }

const op_case *op_case_at(int k) {
  return k < op_cases_basic_count ? &op_cases_basic[k] : &op_cases_appended[k - op_cases_basic_count];
}

const op_case *op_case_find(const char *name) {
  for (int k = 0; k < op_case_count(); k++)
    if (!strcmp(op_case_at(k)->name, name)) return op_case_at(k);
  return NULL;
}

static double from_domain(op_domain domain, double u) {
  switch (domain) {
  case DOM_POS: return 0.5 + 2 * u;
  case DOM_UNIT: return -0.9 + 1.8 * u;
  case DOM_AWAY: { /* the low half of u picks the sign */
    double v = u < 0.5 ? 2 * u : 2 * u - 1;
    return (u < 0.5 ? -1 : 1) * (0.3 + 1.5 * v);
  }
  case DOM_NONINT: {
    double scaled = 4 * u;
    double k = floor(scaled);
    return k - 2 + 0.1 + 0.3 * (scaled - k);
  }
  case DOM_ANY:
  case DOM_BOOL:
  default: return -2 + 4 * u;
  }
}

mx_tensor *op_case_input(mx_shape shape, op_domain domain, mx_generator *gen) {
  if (domain == DOM_BOOL) return mx_bernoulli_p(shape, 0.5, MX_BOOL, MX_CPU, gen);
  mx_tensor *u = mx_rand(shape, MX_F64, MX_CPU, gen);
  if (!u) return NULL;
  int64_t n = mx_numel(u);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  mx_tensor *out = NULL;
  if (v && mx_to_host(u, v, sizeof(double) * (size_t)n) == MX_OK) {
    for (int64_t i = 0; i < n; i++) v[i] = from_domain(domain, v[i]);
    out = mx_from_data(v, shape, MX_F64, MX_CPU);
  }
  free(v);
  return out;
}

int op_case_stride(void) {
  const char *stride = getenv("MX_TEST_OP_STRIDE");
  int n = stride ? atoi(stride) : 1;
  return n > 0 ? n : 1;
}

int op_sample(int *ids, int n) {
  int stride = op_case_stride(), m = 0;
  for (int k = 0; k < n; k += stride) ids[m++] = ids[k];
  return m;
}

int op_case_row(const char *case_name) {
  int best = -1;
  size_t best_len = 0;
  for (int op = 0; op < mx_op_count(); op++) {
    size_t len = strlen(mx_op_name(op));
    if (len > best_len && !strncmp(case_name, mx_op_name(op), len) && (case_name[len] == '\0' || case_name[len] == '_'))
      best = op, best_len = len;
  }
  return best;
}
