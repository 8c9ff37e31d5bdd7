/* Reductions and scans: sum, prod, amax/amin, max/min with indices,
 * argmax/argmin, all/any, cumsum/cumprod as primitives; mean, var, std,
 * logsumexp and norm as composites. dims is a list or MX_ALL_DIMS. */
#include <math.h>

#include "ops/op_table.h"

/* The dims as a bit mask, checked against the tensor; all dims for
 * MX_ALL_DIMS. */
static mx_status dims_mask(const char *op, mx_shape dims, int ndim, uint32_t *mask) {
  *mask = 0;
  if (dims.ndim < 0) {
    *mask = ndim ? (1u << ndim) - 1 : 0;
    return MX_OK;
  }
  for (int k = 0; k < dims.ndim; k++) {
    int d = mx__wrap_dim(op, (int)dims.d[k], ndim);
    if (d < 0) return mx_last_status();
    if (ndim == 0) continue;
    if (*mask & (1u << d)) return mx__error(MX_INVALID_ARGUMENT, "%s: dim %d appears more than once", op, d);
    *mask |= 1u << d;
  }
  return MX_OK;
}

static mx_shape kept_shape(const mx_tensor *t, uint32_t mask) {
  mx_shape s = mx_shape_get(t);
  for (int d = 0; d < s.ndim; d++)
    if (mask & (1u << d)) s.d[d] = 1;
  return s;
}

static mx_shape dropped_shape(const mx_tensor *t, uint32_t mask) {
  mx_shape s = {0};
  for (int d = 0; d < t->ndim; d++)
    if (!(mask & (1u << d))) s.d[s.ndim++] = t->shape[d];
  return s;
}

/* Allocates out (and index) in keepdim layout, runs the kernel, then views
 * the results without the reduced dims unless keepdim. */
static mx_status reduce(mx__call *c, int code, mx_dtype out_dtype, bool values, bool want_index, uint32_t mask) {
  const char *op = mx__ops[c->op].api_name;
  mx_tensor *x = c->in[0];
  const mx_backend *be = mx__kernel_backend(c->op, x->device, MX_KERNEL_REDUCE, x->dtype);
  if (!be) return mx_last_status();
  mx_shape kept = kept_shape(x, mask);
  for (int d = 0; d < x->ndim; d++)
    if ((mask & (1u << d)) && x->shape[d] == 0 && (code == MX_RED_MAX || code == MX_RED_MIN))
      return mx__error(MX_SHAPE_ERROR, "%s: cannot reduce an empty dim %d (no identity for max/min)", op, d);
  mx_tensor *out = values ? mx__tensor_alloc(op, kept, out_dtype, x->device) : NULL;
  mx_tensor *index = want_index ? mx__tensor_alloc(op, kept, MX_I64, x->device) : NULL;
  if ((values && !out) || (want_index && !index)) return mx_last_status();
  mx_kview ov, iv, xv = mx__kview_of(x);
  if (out) ov = mx__kview_of(out);
  if (index) iv = mx__kview_of(index);
  mx_status status = be->reduce(code, out ? &ov : NULL, index ? &iv : NULL, &xv, mask);
  if (status != MX_OK) return status;
  mx_shape final = c->args->keepdim ? kept : dropped_shape(x, mask);
  int k = 0;
  if (out) c->out[k++] = mx__tensor_reshape(out, final);
  if (index) c->out[k++] = mx__tensor_reshape(index, final);
  return MX_OK;
}

static mx_dtype accumulate_dtype(mx_dtype t) { return mx_dtype_is_floating(t) ? t : MX_I64; }

mx_status mx__fwd_sum(mx__call *c) {
  uint32_t mask;
  if (dims_mask("mx_sum", c->args->shape, c->in[0]->ndim, &mask) != MX_OK) return mx_last_status();
  if (c->args->dtype != MX_DTYPE_COUNT) {
    c->in[0] = mx__prepare(c->in[0], c->args->dtype, c->in[0]->device);
    if (!c->in[0]) return mx_last_status();
  }
  return reduce(c, MX_RED_SUM, accumulate_dtype(c->in[0]->dtype), true, false, mask);
}

mx_status mx__fwd_prod(mx__call *c) {
  uint32_t mask;
  if (dims_mask("mx_prod", c->args->shape, c->in[0]->ndim, &mask) != MX_OK) return mx_last_status();
  return reduce(c, MX_RED_PROD, accumulate_dtype(c->in[0]->dtype), true, false, mask);
}

mx_status mx__fwd_amax(mx__call *c) {
  uint32_t mask;
  if (dims_mask("mx_amax", c->args->shape, c->in[0]->ndim, &mask) != MX_OK) return mx_last_status();
  return reduce(c, MX_RED_MAX, c->in[0]->dtype, true, false, mask);
}

mx_status mx__fwd_amin(mx__call *c) {
  uint32_t mask;
  if (dims_mask("mx_amin", c->args->shape, c->in[0]->ndim, &mask) != MX_OK) return mx_last_status();
  return reduce(c, MX_RED_MIN, c->in[0]->dtype, true, false, mask);
}

static mx_status one_dim(mx__call *c, int code, bool values) {
  const char *op = mx__ops[c->op].api_name;
  int dim = (int)c->args->i[0];
  uint32_t mask;
  if (dim == MX_FLAT) { /* over the flattened tensor */
    mask = c->in[0]->ndim ? (1u << c->in[0]->ndim) - 1 : 0;
  } else {
    if (dims_mask(op, MX_DIMS(dim), c->in[0]->ndim, &mask) != MX_OK) return mx_last_status();
  }
  return reduce(c, code, c->in[0]->dtype, values, true, mask);
}

mx_status mx__fwd_max_dim(mx__call *c) { return one_dim(c, MX_RED_MAX, true); }
mx_status mx__fwd_min_dim(mx__call *c) { return one_dim(c, MX_RED_MIN, true); }
mx_status mx__fwd_argmax(mx__call *c) { return one_dim(c, MX_RED_MAX, false); }
mx_status mx__fwd_argmin(mx__call *c) { return one_dim(c, MX_RED_MIN, false); }

mx_status mx__fwd_all(mx__call *c) {
  uint32_t mask;
  if (dims_mask("mx_all", c->args->shape, c->in[0]->ndim, &mask) != MX_OK) return mx_last_status();
  return reduce(c, MX_RED_ALL, MX_BOOL, true, false, mask);
}

mx_status mx__fwd_any(mx__call *c) {
  uint32_t mask;
  if (dims_mask("mx_any", c->args->shape, c->in[0]->ndim, &mask) != MX_OK) return mx_last_status();
  return reduce(c, MX_RED_ANY, MX_BOOL, true, false, mask);
}

static mx_status scan(mx__call *c, int code) {
  const char *op = mx__ops[c->op].api_name;
  mx_tensor *x = c->in[0];
  int dim = mx__wrap_dim(op, (int)c->args->i[0], x->ndim);
  if (dim < 0) return mx_last_status();
  const mx_backend *be = mx__kernel_backend(c->op, x->device, MX_KERNEL_SCAN, x->dtype);
  if (!be) return mx_last_status();
  if (x->ndim == 0) return OUT0(c, mx__tensor_to_dtype(x, accumulate_dtype(x->dtype)));
  mx_tensor *out = mx__tensor_alloc(op, mx_shape_get(x), accumulate_dtype(x->dtype), x->device);
  if (!out) return mx_last_status();
  c->out[0] = out;
  mx_kview ov = mx__kview_of(out), xv = mx__kview_of(x);
  return be->scan(code, &ov, &xv, dim, c->args->i[1] != 0);
}

mx_status mx__fwd_cumsum(mx__call *c) { return scan(c, MX_RED_SUM); }
mx_status mx__fwd_cumprod(mx__call *c) { return scan(c, MX_RED_PROD); }

/* --- backward formulas ------------------------------------------------------------------ */

/* g reshaped to the keepdim layout of the reduction over mask. */
static mx_tensor *unreduce(mx__bw *bw, mx_tensor *g, uint32_t mask) {
  mx_shape in = mx__in_shape(bw, 0);
  mx_shape kept = in;
  for (int d = 0; d < in.ndim; d++)
    if (mask & (1u << d)) kept.d[d] = 1;
  return mx_reshape(g, kept);
}

static uint32_t bw_mask(mx__bw *bw) {
  uint32_t mask = 0;
  dims_mask("backward", bw->args->shape, mx__in_shape(bw, 0).ndim, &mask);
  return mask;
}

mx_status mx__bwd_sum(mx__bw *bw) {
  GRAD(0, mx_expand(unreduce(bw, G, bw_mask(bw)), mx__in_shape(bw, 0)));
  return MX_OK;
}

mx_status mx__bwd_prod(mx__bw *bw) {
  /* prod / x_i; where x_i == 0, the product of the others, computed by
   * replacing the zeros with ones (exact when one element is zero) */
  uint32_t mask = bw_mask(bw);
  mx_tensor *x = mx__saved_in(bw, 0);
  mx_tensor *zero = mx_eq_scalar(x, 0);
  mx_tensor *others = mx_prod(mx_masked_fill(x, zero, 1), bw->args->shape, true);
  mx_tensor *out = unreduce(bw, mx__saved_out(bw, 0), mask);
  mx_tensor *safe = mx_where(zero, mx_mul(others, mx_eq_scalar(mx_sum(zero, bw->args->shape, true), 1)),
                             mx_div(out, mx_masked_fill(x, zero, 1)));
  GRAD(0, mx_mul(unreduce(bw, G, mask), safe));
  return MX_OK;
}

/* max/min over several dims: ties share the gradient evenly, as PyTorch's
 * amax backward does. */
static mx_status extremum_backward(mx__bw *bw) {
  uint32_t mask = bw_mask(bw);
  mx_tensor *x = mx__saved_in(bw, 0);
  mx_tensor *hit = mx_eq(x, unreduce(bw, mx__saved_out(bw, 0), mask));
  mx_tensor *count = mx_sum(hit, bw->args->shape, true);
  GRAD(0, mx_div(mx_mul(unreduce(bw, G, mask), hit), count));
  return MX_OK;
}
mx_status mx__bwd_amax(mx__bw *bw) { return extremum_backward(bw); }
mx_status mx__bwd_amin(mx__bw *bw) { return extremum_backward(bw); }

/* One dim with indices: the gradient goes to the chosen index only. */
static mx_status indexed_backward(mx__bw *bw) {
  mx_shape in = mx__in_shape(bw, 0);
  int dim = (int)bw->args->i[0];
  dim = dim < 0 ? dim + in.ndim : dim;
  uint32_t mask = in.ndim ? 1u << dim : 0;
  mx_tensor *indices = unreduce(bw, mx__saved_out(bw, 1), mask);
  mx_shape along = {in.ndim, {0}};
  for (int d = 0; d < in.ndim; d++) along.d[d] = d == dim ? in.d[d] : 1;
  mx_tensor *positions = mx_reshape(mx_arange(0, (double)(in.ndim ? in.d[dim] : 1), 1, MX_I64, bw->node->in_meta[0].device),
                                    in.ndim ? along : MX_SCALAR);
  GRAD(0, mx_mul(unreduce(bw, G, mask), mx_eq(positions, indices)));
  return MX_OK;
}
mx_status mx__bwd_max_dim(mx__bw *bw) { return indexed_backward(bw); }
mx_status mx__bwd_min_dim(mx__bw *bw) { return indexed_backward(bw); }

static mx_tensor *cumsum_dir(const mx_tensor *x, int64_t dim, bool reverse) {
  return mx__call1(MX_OP_CUMSUM, x, &(mx__args){.i = {dim, reverse}});
}

mx_status mx__bwd_cumsum(mx__bw *bw) {
  GRAD(0, cumsum_dir(G, bw->args->i[0], bw->args->i[1] == 0));
  return MX_OK;
}

mx_status mx__bwd_cumprod(mx__bw *bw) {
  /* sum over j >= i of g_j out_j / x_i (inputs without zeros) */
  mx_tensor *x = mx__saved_in(bw, 0), *out = mx__saved_out(bw, 0);
  GRAD(0, mx_div(cumsum_dir(mx_mul(G, out), bw->args->i[0], true), x));
  return MX_OK;
}

/* --- composites ----------------------------------------------------------------------------- */

/* The elements reduced into each output of op over dims, or -1 with the error set. */
static int64_t reduced_count(mx_op op, const mx_tensor *x, mx_shape dims) {
  uint32_t mask = 0;
  if (dims_mask(mx__ops[op].api_name, dims, x->ndim, &mask) != MX_OK) return -1;
  int64_t n = 1;
  for (int d = 0; d < x->ndim; d++)
    if (mask & (1u << d)) n *= x->shape[d];
  return n;
}

mx_status mx__fwd_mean(mx__call *c) {
  mx_tensor *x = c->in[0];
  if (!mx_dtype_is_floating(x->dtype))
    return mx__error(MX_DTYPE_ERROR, "mx_mean: input dtype %s is not floating; convert it first",
                     mx_dtype_name(x->dtype));
  int64_t n = reduced_count(c->op, x, c->args->shape);
  if (n < 0) return mx_last_status();
  return OUT0(c, mx_div_scalar(mx_sum(x, c->args->shape, c->args->keepdim), (double)n));
}

static mx_tensor *variance(mx__call *c) {
  mx_tensor *x = c->in[0];
  int64_t n = reduced_count(c->op, x, c->args->shape);
  if (n < 0) return NULL;
  mx_tensor *centered = mx_sub(x, mx_mean(x, c->args->shape, true));
  double divisor = (double)n - (double)c->args->i[0];
  return mx_div_scalar(mx_sum(mx_mul(centered, centered), c->args->shape, c->args->keepdim),
                       divisor > 0 ? divisor : 0);
}

mx_status mx__fwd_var(mx__call *c) { return OUT0(c, variance(c)); }
mx_status mx__fwd_std(mx__call *c) { return OUT0(c, mx_sqrt(variance(c))); }

mx_status mx__fwd_logsumexp(mx__call *c) {
  mx_tensor *x = c->in[0];
  /* shift by the max (without a gradient: it cancels), 0 where it is inf */
  mx_tensor *m = mx_detach(mx_amax(x, c->args->shape, true));
  if (!m) return mx_last_status();
  m = mx_masked_fill(m, mx_eq_scalar(mx_abs(m), INFINITY), 0);
  mx_tensor *lse = mx_add(mx_log(mx_sum(mx_exp(mx_sub(x, m)), c->args->shape, true)), m);
  if (!lse || c->args->keepdim) return OUT0(c, lse);
  uint32_t mask;
  if (dims_mask("mx_logsumexp", c->args->shape, x->ndim, &mask) != MX_OK) return mx_last_status();
  return OUT0(c, mx_reshape(lse, dropped_shape(x, mask)));
}

/* (sum |x|^p)^(1/p), with a zero gradient (not NaN) where the sum is 0, as
 * PyTorch's norm backward gives: the root reads a sum that is never 0. */
static mx_tensor *root_of_sum(mx_tensor *sum, double p) {
  mx_tensor *zero = mx_eq_scalar(sum, 0);
  mx_tensor *safe = mx_masked_fill(sum, zero, 1);
  mx_tensor *root = p == 2 ? mx_sqrt(safe) : mx_pow_scalar(safe, 1 / p);
  return mx_masked_fill(root, zero, 0);
}

mx_status mx__fwd_norm(mx__call *c) {
  mx_tensor *x = c->in[0];
  double p = c->args->f[0];
  mx_shape dims = c->args->shape;
  bool keep = c->args->keepdim;
  if (p == 2) return OUT0(c, root_of_sum(mx_sum(mx_mul(x, x), dims, keep), 2));
  if (p == 1) return OUT0(c, mx_sum(mx_abs(x), dims, keep));
  if (isinf(p)) return OUT0(c, p > 0 ? mx_amax(mx_abs(x), dims, keep) : mx_amin(mx_abs(x), dims, keep));
  if (p == 0) return OUT0(c, mx_to_dtype(mx_sum(mx_ne(x, mx_zeros_like(x)), dims, keep), x->dtype));
  return OUT0(c, root_of_sum(mx_sum(mx_pow_scalar(mx_abs(x), p), dims, keep), p));
}

/* --- public functions ---------------------------------------------------------------------- */

static mx__args reduce_args(mx_shape dims, bool keepdim) {
  return (mx__args){.shape = dims, .keepdim = keepdim, .dtype = MX_DTYPE_COUNT};
}

mx_tensor *mx_sum(const mx_tensor *x, mx_shape dims, bool keepdim) {
  mx__args a = reduce_args(dims, keepdim);
  return mx__call1(MX_OP_SUM, x, &a);
}
mx_tensor *mx_sum_dtype(const mx_tensor *x, mx_shape dims, bool keepdim, mx_dtype dtype) {
  mx__args a = reduce_args(dims, keepdim);
  a.dtype = dtype;
  return mx__call1(MX_OP_SUM, x, &a);
}
#define REDUCE_API(E, name)                                         \
  mx_tensor *mx_##name(const mx_tensor *x, mx_shape dims, bool keepdim) { \
    mx__args a = reduce_args(dims, keepdim);                        \
    return mx__call1(MX_OP_##E, x, &a);                             \
  }
REDUCE_API(MEAN, mean)
REDUCE_API(PROD, prod)
REDUCE_API(AMAX, amax)
REDUCE_API(AMIN, amin)
REDUCE_API(ALL, all)
REDUCE_API(ANY, any)
REDUCE_API(LOGSUMEXP, logsumexp)
#undef REDUCE_API

mx_tensor *mx_max(const mx_tensor *x) { return mx_amax(x, MX_ALL_DIMS, false); }
mx_tensor *mx_min(const mx_tensor *x) { return mx_amin(x, MX_ALL_DIMS, false); }

static mx_status with_indices(mx_op op, const mx_tensor *x, int dim, bool keepdim, mx_tensor **values,
                              mx_tensor **indices) {
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  const mx_tensor *in[1] = {x};
  mx__args a = {.i = {dim}, .keepdim = keepdim};
  mx_status status = mx__dispatch(op, 1, in, &a, out);
  if (values) *values = out[0];
  else mx_release(out[0]);
  if (indices) *indices = out[1];
  else mx_release(out[1]);
  return status;
}
mx_status mx_max_dim(const mx_tensor *x, int dim, bool keepdim, mx_tensor **values, mx_tensor **indices) {
  return with_indices(MX_OP_MAX_DIM, x, dim, keepdim, values, indices);
}
mx_status mx_min_dim(const mx_tensor *x, int dim, bool keepdim, mx_tensor **values, mx_tensor **indices) {
  return with_indices(MX_OP_MIN_DIM, x, dim, keepdim, values, indices);
}
mx_tensor *mx_argmax(const mx_tensor *x, int dim, bool keepdim) {
  return mx__call1(MX_OP_ARGMAX, x, &(mx__args){.i = {dim}, .keepdim = keepdim});
}
mx_tensor *mx_argmin(const mx_tensor *x, int dim, bool keepdim) {
  return mx__call1(MX_OP_ARGMIN, x, &(mx__args){.i = {dim}, .keepdim = keepdim});
}
mx_tensor *mx_var(const mx_tensor *x, mx_shape dims, int64_t correction, bool keepdim) {
  mx__args a = reduce_args(dims, keepdim);
  a.i[0] = correction;
  return mx__call1(MX_OP_VAR, x, &a);
}
mx_tensor *mx_std(const mx_tensor *x, mx_shape dims, int64_t correction, bool keepdim) {
  mx__args a = reduce_args(dims, keepdim);
  a.i[0] = correction;
  return mx__call1(MX_OP_STD, x, &a);
}
mx_tensor *mx_norm(const mx_tensor *x, double p, mx_shape dims, bool keepdim) {
  mx__args a = reduce_args(dims, keepdim);
  a.f[0] = p;
  return mx__call1(MX_OP_NORM, x, &a);
}
mx_tensor *mx_cumsum(const mx_tensor *x, int dim) { return cumsum_dir(x, dim, false); }
mx_tensor *mx_cumprod(const mx_tensor *x, int dim) { return mx__call1(MX_OP_CUMPROD, x, &(mx__args){.i = {dim}}); }
