/* Norms and distances as composites: normalize, dist, cdist, pdist,
 * cosine_similarity and renorm, all on one p-norm whose gradient is 0
 * where the norm is 0 (as PyTorch's is), not NaN. */
#include <math.h>
#include <stdlib.h>

#include "ops/op_table.h"

/* where(mask, value, t) without a gradient through the masked places */
static mx_tensor *fill(mx_tensor *t, mx_tensor *mask, double value) { return mx_masked_fill(t, mask, value); }

/* t^e with e a 0-d float64 tensor rather than a C scalar: mx_pow_scalar's
 * gradient forms e - 1 from two C scalars, which rounds it to float32. A 0-d
 * t is promoted by it, so the result goes back to t's dtype. */
static mx_tensor *power(mx_tensor *t, double e) {
  mx_tensor *y = mx_pow(t, mx_scalar(e, MX_F64, MX_CPU));
  return y && mx_dtype_of(y) != mx_dtype_of(t) ? mx_to_dtype(y, mx_dtype_of(t)) : y;
}

/* s^(1/p) for s >= 0, 0 (with gradient 0) where s == 0 */
static mx_tensor *safe_root(mx_tensor *s, double p) {
  mx_tensor *zero = mx_eq_scalar(s, 0);
  mx_tensor *safe = fill(s, zero, 1);
  return fill(p == 2 ? mx_sqrt(safe) : power(safe, 1 / p), zero, 0);
}

/* The p-norm of x over dims: p = 0 counts non-zeros (gradient 0), +-inf
 * take the largest / smallest |x|, any other p is (sum |x|^p)^(1/p). */
static mx_tensor *pnorm(const mx_tensor *x, double p, mx_shape dims, bool keepdim) {
  if (p == 0) { /* 1 where x != 0, as a value of x's graph with gradient 0 */
    mx_tensor *one = mx_scalar(1, mx_dtype_of(x), MX_CPU);
    mx_tensor *nonzero = mx_logical_not(mx_eq_scalar(x, 0));
    return mx_sum(mx_where(nonzero, one, mx_mul_scalar(x, 0)), dims, keepdim);
  }
  if (isinf(p)) return p > 0 ? mx_amax(mx_abs(x), dims, keepdim) : mx_amin(mx_abs(x), dims, keepdim);
  if (p == 1) return mx_sum(mx_abs(x), dims, keepdim);
  if (p == 2) return safe_root(mx_sum(mx_mul(x, x), dims, keepdim), 2);
  mx_tensor *a = mx_abs(x);
  if (p < 0) return power(mx_sum(power(a, p), dims, keepdim), 1 / p);
  mx_tensor *zero = mx_eq_scalar(a, 0); /* |x|^p with gradient 0 at 0 (not 0 * inf for p < 1) */
  mx_tensor *powered = fill(power(fill(a, zero, 1), p), zero, 0);
  return safe_root(mx_sum(powered, dims, keepdim), p);
}

static mx_status need_floating(const char *op, const mx_tensor *t) {
  if (mx_dtype_is_floating(t->dtype)) return MX_OK;
  return mx__error(MX_DTYPE_ERROR, "%s: expected a floating input, got %s", op, mx_dtype_name(t->dtype));
}

static mx_status need_p(const char *op, double p) {
  if (p >= 0) return MX_OK;
  return mx__error(MX_INVALID_ARGUMENT, "%s: p must be non-negative, got %g", op, p);
}

/* --- normalize and renorm ------------------------------------------------------------------- */

/* x / max(||x||_p, eps) along dim */
mx_status mx__fwd_normalize(mx__call *c) {
  mx_tensor *x = c->in[0];
  int dim = mx__wrap_dim("mx_normalize", (int)c->args->i[0], x->ndim);
  if (dim < 0 || need_floating("mx_normalize", x)) return mx_last_status();
  mx_tensor *norm = pnorm(x, c->args->f[0], MX_DIMS(dim), true);
  return OUT0(c, mx_div(x, mx_clamp(norm, c->args->f[1], INFINITY)));
}

/* Each slice along dim whose p-norm exceeds maxnorm scaled to maxnorm / (norm + 1e-7). */
mx_status mx__fwd_renorm(mx__call *c) {
  mx_tensor *x = c->in[0];
  double p = c->args->f[0], maxnorm = c->args->f[1];
  if (x->ndim < 2)
    return mx__error(MX_SHAPE_ERROR, "mx_renorm: input needs at least 2 dims, got %d", x->ndim);
  int dim = mx__wrap_dim("mx_renorm", (int)c->args->i[0], x->ndim);
  if (dim < 0 || need_floating("mx_renorm", x)) return mx_last_status();
  if (!(p > 0)) return mx__error(MX_INVALID_ARGUMENT, "mx_renorm: p must be positive, got %g", p);
  if (!(maxnorm >= 0)) return mx__error(MX_INVALID_ARGUMENT, "mx_renorm: maxnorm must be non-negative, got %g", maxnorm);
  mx_shape dims = {0};
  for (int d = 0; d < x->ndim; d++)
    if (d != dim) dims.d[dims.ndim++] = d;
  mx_tensor *norm = pnorm(x, p, dims, true);
  mx_tensor *scale = mx_rdiv_scalar(maxnorm, mx_add_scalar(norm, 1e-7));
  mx_tensor *factor = mx_where(mx_gt_scalar(norm, maxnorm), scale, mx_scalar(1, x->dtype, MX_CPU));
  return OUT0(c, mx_mul(x, factor));
}

/* --- distances --------------------------------------------------------------------------------- */

mx_status mx__fwd_dist(mx__call *c) {
  if (need_floating("mx_dist", c->in[0]) || need_floating("mx_dist", c->in[1])) return mx_last_status();
  return OUT0(c, pnorm(mx_sub(c->in[0], c->in[1]), c->args->f[0], MX_ALL_DIMS, false));
}

/* x1 (..., P, M), x2 (..., R, M) -> (..., P, R), batch dims broadcasting */
mx_status mx__fwd_cdist(mx__call *c) {
  mx_tensor *x1 = c->in[0], *x2 = c->in[1];
  double p = c->args->f[0];
  char a[MX__DIMS_STR], b[MX__DIMS_STR];
  if (x1->ndim < 2 || x2->ndim < 2)
    return mx__error(MX_SHAPE_ERROR, "mx_cdist: x1 %s and x2 %s need at least 2 dims (..., rows, M)",
                     mx__dims_str(a, x1->ndim, x1->shape), mx__dims_str(b, x2->ndim, x2->shape));
  if (x1->shape[x1->ndim - 1] != x2->shape[x2->ndim - 1])
    return mx__error(MX_SHAPE_ERROR, "mx_cdist: x1 %s and x2 %s have rows of different sizes (%lld != %lld)",
                     mx__dims_str(a, x1->ndim, x1->shape), mx__dims_str(b, x2->ndim, x2->shape),
                     (long long)x1->shape[x1->ndim - 1], (long long)x2->shape[x2->ndim - 1]);
  if (need_p("mx_cdist", p) || need_floating("mx_cdist", x1) || need_floating("mx_cdist", x2)) return mx_last_status();
  mx_tensor *diff = mx_sub(mx_unsqueeze(x1, -2), mx_unsqueeze(x2, -3)); /* (..., P, R, M) */
  return OUT0(c, pnorm(diff, p, MX_DIMS(-1), false));
}

/* The distances between rows i < j of x (N, M), in row-major order: N (N - 1) / 2 of them. */
mx_status mx__fwd_pdist(mx__call *c) {
  mx_tensor *x = c->in[0];
  double p = c->args->f[0];
  if (x->ndim != 2) {
    char a[MX__DIMS_STR];
    return mx__error(MX_SHAPE_ERROR, "mx_pdist: input must be 2-d (N, M), got shape %s", mx__dims_str(a, x->ndim, x->shape));
  }
  if (need_p("mx_pdist", p) || need_floating("mx_pdist", x)) return mx_last_status();
  int64_t n = x->shape[0], pairs, bytes; /* the index holds both rows of each pair, 8 bytes each */
  if (mx__mul_overflows(n, n - 1, &pairs) || mx__mul_overflows(pairs /= 2, 16, &bytes) ||
      mx__add_overflows(bytes, 8, &bytes))
    return mx__error(MX_SHAPE_ERROR, "mx_pdist: %lld rows make too many pairs", (long long)n);
  int64_t *index = malloc((size_t)bytes);
  if (!index) return mx__error(MX_OUT_OF_MEMORY, "mx_pdist: out of memory");
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = i + 1; j < n; j++) index[k] = i, index[pairs + k] = j, k++;
  mx_tensor *first = mx_from_data(index, MX_SHAPE(pairs), MX_I64, x->device);
  mx_tensor *second = mx_from_data(index + pairs, MX_SHAPE(pairs), MX_I64, x->device);
  free(index);
  mx_tensor *diff = mx_sub(mx_index_select(x, 0, first), mx_index_select(x, 0, second));
  return OUT0(c, pnorm(diff, p, MX_DIMS(1), false));
}

/* PyTorch's: sum((x1 / max(||x1||, eps)) (x2 / max(||x2||, eps))) along dim, the inputs broadcast
 * first. Like PyTorch, the clamp is applied outside the graph: where a norm is below eps the
 * gradient still flows through the norm. */
mx_status mx__fwd_cosine_similarity(mx__call *c) {
  mx_shape shape;
  mx_status status = mx__broadcast_shape("mx_cosine_similarity", 2, c->in, &shape);
  if (status != MX_OK) return status;
  int dim = mx__wrap_dim("mx_cosine_similarity", (int)c->args->i[0], shape.ndim);
  if (dim < 0) return mx_last_status();
  mx_dtype dtype = mx__result_type(2, c->in);
  if (!mx_dtype_is_floating(dtype))
    return mx__error(MX_DTYPE_ERROR, "mx_cosine_similarity: expected floating inputs, got %s and %s",
                     mx_dtype_name(c->in[0]->dtype), mx_dtype_name(c->in[1]->dtype));
  double eps = c->args->f[0];
  mx_tensor *unit[2];
  for (int k = 0; k < 2; k++) {
    mx_tensor *x = mx_broadcast_to(mx_to_dtype(c->in[k], dtype), shape);
    mx_tensor *norm = pnorm(x, 2, MX_DIMS(dim), true);
    mx_tensor *lift = norm ? mx_detach(mx_sub(mx_clamp(norm, eps, INFINITY), norm)) : NULL;
    unit[k] = mx_div(x, mx_add(norm, lift));
  }
  return OUT0(c, mx_sum(mx_mul(unit[0], unit[1]), MX_DIMS(dim), false));
}

/* --- public functions ------------------------------------------------------------------------------ */

mx_tensor *mx_normalize(const mx_tensor *x, double p, int dim, double eps) {
  return mx__call1(MX_OP_NORMALIZE, x, &(mx__args){.f = {p, eps}, .i = {dim}});
}
mx_tensor *mx_renorm(const mx_tensor *x, double p, int dim, double maxnorm) {
  return mx__call1(MX_OP_RENORM, x, &(mx__args){.f = {p, maxnorm}, .i = {dim}});
}
mx_tensor *mx_dist(const mx_tensor *a, const mx_tensor *b, double p) {
  return mx__call2(MX_OP_DIST, a, b, &(mx__args){.f = {p}});
}
mx_tensor *mx_cdist(const mx_tensor *x1, const mx_tensor *x2, double p) {
  return mx__call2(MX_OP_CDIST, x1, x2, &(mx__args){.f = {p}});
}
mx_tensor *mx_pdist(const mx_tensor *x, double p) { return mx__call1(MX_OP_PDIST, x, &(mx__args){.f = {p}}); }
mx_tensor *mx_cosine_similarity(const mx_tensor *x1, const mx_tensor *x2, int dim, double eps) {
  return mx__call2(MX_OP_COSINE_SIMILARITY, x1, x2, &(mx__args){.f = {eps}, .i = {dim}});
}
