/* What the files of PyTorch's translated AMP cases share: value
 * comparisons as torch.equal and assertEqual make them, leaves, and
 * torch.nn.Linear. */
#include "pytorch_cases.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Row-major values of t as doubles (malloc'ed; free() them). */
double *values_of(const mx_tensor *t) {
  int64_t n = mx_numel(t);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  cr_assert_not_null(v);
  mx_tensor *d = mx_to_dtype(t, MX_F64);
  NOT_NULL(d);
  OK(mx_to_host(d, v, sizeof(double) * (size_t)n));
  mx_release(d);
  return v;
}

bool same_shape(const mx_tensor *a, const mx_tensor *b) {
  mx_shape sa = mx_shape_get(a), sb = mx_shape_get(b);
  if (sa.ndim != sb.ndim) return false;
  for (int d = 0; d < sa.ndim; d++)
    if (sa.d[d] != sb.d[d]) return false;
  return true;
}

/* torch.equal, made stricter: the same dtype, shape and bits. */
void expect_bitwise(const char *what, const mx_tensor *got, const mx_tensor *want) {
  cr_assert_eq(mx_dtype_of(got), mx_dtype_of(want), "%s: dtype %s, control %s", what, mx_dtype_name(mx_dtype_of(got)),
               mx_dtype_name(mx_dtype_of(want)));
  cr_assert(same_shape(got, want), "%s: the shapes differ", what);
  size_t bytes = (size_t)mx_numel(got) * mx_dtype_size(mx_dtype_of(got));
  unsigned char *a = malloc(bytes ? bytes : 1), *b = malloc(bytes ? bytes : 1);
  cr_assert(a && b);
  OK(mx_to_host(got, a, bytes));
  OK(mx_to_host(want, b, bytes));
  bool equal = memcmp(a, b, bytes) == 0;
  free(a);
  free(b);
  if (equal) return;
  double *g = values_of(got), *w = values_of(want);
  int64_t k = 0;
  while (k < mx_numel(got) && (g[k] == w[k] || (g[k] != g[k] && w[k] != w[k]))) k++;
  double gk = k < mx_numel(got) ? g[k] : NAN, wk = k < mx_numel(got) ? w[k] : NAN;
  free(g);
  free(w);
  cr_assert_fail("%s: differs from the control at element %lld: %.9g vs %.9g", what, (long long)k, gk, wk);
}

/* assertEqual(got, want, atol=, rtol=): |got - want| <= atol + rtol |want|. */
void expect_close(const char *what, const mx_tensor *got, const mx_tensor *want, double atol, double rtol) {
  cr_assert(same_shape(got, want), "%s: the shapes differ", what);
  double *g = values_of(got), *w = values_of(want);
  int64_t n = mx_numel(got), bad = 0, first = -1;
  for (int64_t k = 0; k < n; k++)
    if (!(fabs(g[k] - w[k]) <= atol + rtol * fabs(w[k]))) bad += 1, first = first < 0 ? k : first;
  double gf = first >= 0 ? g[first] : 0, wf = first >= 0 ? w[first] : 0;
  free(g);
  free(w);
  cr_assert_eq(bad, 0, "%s: %lld of %lld values differ (first at %lld: %.9g vs %.9g; atol %g, rtol %g)", what,
               (long long)bad, (long long)n, (long long)first, gf, wf, atol, rtol);
}

bool all_equal_to(const mx_tensor *t, double v) {
  double *x = values_of(t);
  bool ok = true;
  for (int64_t k = 0; k < mx_numel(t); k++) ok = ok && x[k] == v;
  free(x);
  return ok;
}

mx_tensor *leaf(mx_tensor *t) {
  NOT_NULL(t);
  OK(mx_set_requires_grad(t, true));
  return t;
}

/* torch.nn.Linear(in, out): weight (out, in) and bias (out), float32 leaves. */
linear_layer make_linear(int64_t in, int64_t out, mx_generator *gen) {
  double bound = 1.0 / sqrt((double)in);
  linear_layer l;
  l.weight = leaf(mx_mul_scalar(mx_add_scalar(mx_rand(MX_SHAPE(out, in), MX_F32, MX_CPU, gen), -0.5), 2 * bound));
  l.bias = leaf(mx_mul_scalar(mx_add_scalar(mx_rand(MX_SHAPE(out), MX_F32, MX_CPU, gen), -0.5), 2 * bound));
  return l;
}

mx_tensor *apply_linear(const linear_layer *l, const mx_tensor *x) { return mx_linear(x, l->weight, l->bias); }
