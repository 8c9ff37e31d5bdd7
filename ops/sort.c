/* Sorting and sampling: sort as a primitive (a stable sort per line, NaN
 * larger than every number, as PyTorch orders it); argsort and topk
 * composed from sort; multinomial composed from cumsum, rand and topk. */
#include <math.h>

#include "ops/op_table.h"

/* t's kernel view, a 0-d tensor seen as one line of one element. */
static mx_kview line_view(const mx_tensor *t) {
  mx_kview v = mx__kview_of(t);
  if (v.ndim == 0) {
    v.ndim = 1;
    v.shape[0] = 1;
    v.strides[0] = 1;
  }
  return v;
}

/* args: i[0] the dim, i[1] descending */
mx_status mx__fwd_sort(mx__call *c) {
  mx_tensor *x = c->in[0];
  int dim = mx__wrap_dim("mx_sort", (int)c->args->i[0], x->ndim);
  if (dim < 0) return mx_last_status();
  const mx_backend *be = mx__kernel_backend(c->op, x->device, MX_KERNEL_SORT, x->dtype);
  if (!be) return mx_last_status();
  mx_tensor *values = mx__tensor_alloc("mx_sort", mx_shape_get(x), x->dtype, x->device);
  mx_tensor *indices = mx__tensor_alloc("mx_sort", mx_shape_get(x), MX_I64, x->device);
  if (!values || !indices) return mx_last_status();
  mx_kview vv = line_view(values), iv = line_view(indices), xv = line_view(x);
  mx_status status = be->sort(&vv, &iv, &xv, dim, c->args->i[1] != 0);
  if (status != MX_OK) return status;
  c->out[0] = values;
  c->out[1] = indices;
  return MX_OK;
}

/* The gradient goes back to where each value came from: g scattered through
 * the indices into zeros (scatter differentiates again, as a gather). */
mx_status mx__bwd_sort(mx__bw *bw) {
  mx_shape in = mx__in_shape(bw, 0);
  if (in.ndim == 0) {
    GRAD(0, mx_reshape(G, in));
    return MX_OK;
  }
  int dim = (int)bw->args->i[0];
  dim = dim < 0 ? dim + in.ndim : dim;
  mx_tensor *indices = mx__saved_out(bw, 1);
  mx_tensor *zeros = mx_zeros(in, G->dtype, bw->node->in_meta[0].device);
  GRAD(0, mx_scatter(zeros, dim, indices, G));
  return MX_OK;
}

static mx_status sort_both(const mx_tensor *x, int dim, bool descending, mx_tensor **values, mx_tensor **indices) {
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  const mx_tensor *in[1] = {x};
  mx__args a = {.i = {dim, descending}};
  mx_status status = mx__dispatch(MX_OP_SORT, 1, in, &a, out);
  if (values) *values = out[0];
  else mx_release(out[0]);
  if (indices) *indices = out[1];
  else mx_release(out[1]);
  return status;
}

/* args as sort's; the input is detached: the indices have no gradient */
mx_status mx__fwd_argsort(mx__call *c) {
  return sort_both(mx_detach(c->in[0]), (int)c->args->i[0], c->args->i[1] != 0, NULL, &c->out[0]);
}

/* args: i[0] k, i[1] the dim, i[2] largest. Always sorted (PyTorch leaves
 * the order unspecified when sorted is false), ties in input order. */
mx_status mx__fwd_topk(mx__call *c) {
  mx_tensor *x = c->in[0];
  int64_t k = c->args->i[0];
  int dim = mx__wrap_dim("mx_topk", (int)c->args->i[1], x->ndim);
  if (dim < 0) return mx_last_status();
  int64_t size = x->ndim ? x->shape[dim] : 1;
  if (k < 0 || k > size)
    return mx__error(MX_INDEX_ERROR, "mx_topk: k %lld is out of range for dim %d of size %lld", (long long)k, dim,
                     (long long)size);
  mx_tensor *values = NULL, *indices = NULL;
  mx_status status = sort_both(x, dim, c->args->i[2] != 0, &values, &indices);
  if (status != MX_OK) return status;
  if (x->ndim == 0) { /* PyTorch gives the 0-d tensor back for k 0 and 1 alike */
    c->out[0] = values;
    c->out[1] = indices;
    return MX_OK;
  }
  c->out[0] = mx_narrow(values, dim, 0, k);
  c->out[1] = mx_narrow(indices, dim, 0, k);
  return c->out[0] && c->out[1] ? MX_OK : mx_last_status();
}

/* t's one value on the host (t NULL: the error of the op that made it). */
static mx_status host_value(const mx_tensor *t, double *value) {
  if (!t) return mx_last_status();
  *value = mx_item(t);
  return MX_OK;
}

/* The weights' checks, read on the host: finite, non-negative, each row with
 * a positive sum (and, without replacement, enough positive weights). */
static mx_status check_weights(const mx_tensor *w, int64_t samples, bool replacement) {
  double largest = NAN, lowest = NAN, smallest_sum = NAN, row = -1;
  if (host_value(mx_amax(mx_abs(w), MX_ALL_DIMS, false), &largest) != MX_OK) return mx_last_status();
  if (!isfinite(largest)) return mx__error(MX_INVALID_ARGUMENT, "mx_multinomial: probs contain inf or NaN");
  if (host_value(mx_amin(w, MX_ALL_DIMS, false), &lowest) != MX_OK) return mx_last_status();
  if (lowest < 0)
    return mx__error(MX_INVALID_ARGUMENT, "mx_multinomial: probs contain a negative weight (%g)", lowest);
  mx_tensor *sums = mx_sum(w, MX_DIMS(1), false);
  if (host_value(mx_amin(sums, MX_ALL_DIMS, false), &smallest_sum) != MX_OK) return mx_last_status();
  if (smallest_sum == 0) {
    if (host_value(mx_argmin(sums, 0, false), &row) != MX_OK) return mx_last_status();
    return mx__error(MX_INVALID_ARGUMENT, "mx_multinomial: row %lld of probs has every weight zero", (long long)row);
  }
  if (replacement) return MX_OK;
  mx_tensor *positive = mx_sum(mx_gt_scalar(w, 0), MX_DIMS(1), false);
  double fewest = NAN;
  if (host_value(mx_amin(positive, MX_ALL_DIMS, false), &fewest) != MX_OK) return mx_last_status();
  if (fewest >= (double)samples) return MX_OK;
  if (host_value(mx_argmin(positive, 0, false), &row) != MX_OK) return mx_last_status();
  return mx__error(MX_INVALID_ARGUMENT,
                   "mx_multinomial: row %lld of probs has %lld nonzero weights, fewer than num_samples %lld "
                   "without replacement",
                   (long long)row, (long long)fewest, (long long)samples);
}

/* With replacement: inverse transform sampling. Each draw u * total counts
 * the cumulative weights at or below it; the cumulative weights from the
 * first one that reaches the total on count as infinite, so a draw never
 * lands past the last positive weight, nor on a zero weight (whose bound
 * equals the one before it). Compares every draw with every category:
 * (rows, samples, categories) bools. */
static mx_tensor *draw_with_replacement(const mx_tensor *w, int64_t samples, mx_generator *gen) {
  int64_t rows = w->shape[0], categories = w->shape[1];
  mx_tensor *cdf = mx_cumsum(w, 1);
  mx_tensor *total = mx_narrow(cdf, 1, categories - 1, 1);
  mx_tensor *target = mx_mul(mx_rand(MX_SHAPE(rows, samples), MX_F64, w->device, gen), total);
  mx_tensor *bounds = mx_masked_fill(cdf, mx_ge(cdf, total), INFINITY);
  return mx_sum(mx_le(mx_unsqueeze(bounds, 1), mx_unsqueeze(target, 2)), MX_DIMS(2), false);
}

/* Without replacement: the exponential race PyTorch uses, the samples the
 * largest w / E for E ~ Exp(1) per category; zero weights get key -1,
 * below every positive weight's. */
static mx_tensor *draw_without_replacement(const mx_tensor *w, int64_t samples, mx_generator *gen) {
  mx_tensor *u = mx_rand(mx_shape_get(w), MX_F64, w->device, gen);
  mx_tensor *exponential = mx_neg(mx_log1p(mx_neg(u)));
  mx_tensor *keys = mx_masked_fill(mx_div(w, exponential), mx_le_scalar(w, 0), -1);
  mx_tensor *indices = NULL;
  return mx_topk(keys, samples, 1, true, true, NULL, &indices) == MX_OK ? indices : NULL;
}

/* args: i[0] num_samples, i[1] replacement, ptr the generator */
mx_status mx__fwd_multinomial(mx__call *c) {
  mx_tensor *probs = c->in[0];
  int64_t samples = c->args->i[0];
  bool replacement = c->args->i[1] != 0;
  if (!mx_dtype_is_floating(probs->dtype))
    return mx__error(MX_DTYPE_ERROR, "mx_multinomial: probs dtype %s is not floating", mx_dtype_name(probs->dtype));
  if (probs->ndim != 1 && probs->ndim != 2)
    return mx__error(MX_SHAPE_ERROR, "mx_multinomial: probs must be 1-D or 2-D, got %d-D", probs->ndim);
  int64_t categories = probs->shape[probs->ndim - 1];
  if (categories == 0) return mx__error(MX_SHAPE_ERROR, "mx_multinomial: probs has no categories");
  if (samples <= 0)
    return mx__error(MX_INVALID_ARGUMENT, "mx_multinomial: num_samples %lld is not positive", (long long)samples);
  if (!replacement && samples > categories)
    return mx__error(MX_INVALID_ARGUMENT,
                     "mx_multinomial: cannot draw %lld samples from %lld categories without replacement",
                     (long long)samples, (long long)categories);
  mx_tensor *w = mx_to_dtype(mx_detach(probs->ndim == 1 ? mx_unsqueeze(probs, 0) : probs), MX_F64);
  if (!w) return mx_last_status();
  mx_tensor *drawn;
  if (w->shape[0] == 0) {
    drawn = mx_zeros(MX_SHAPE(0, samples), MX_I64, w->device);
  } else {
    if (check_weights(w, samples, replacement) != MX_OK) return mx_last_status();
    drawn = replacement ? draw_with_replacement(w, samples, c->args->ptr)
                        : draw_without_replacement(w, samples, c->args->ptr);
  }
  return OUT0(c, probs->ndim == 1 && drawn ? mx_reshape(drawn, MX_SHAPE(samples)) : drawn);
}

/* --- public functions ---------------------------------------------------------------------- */

/* stable: PyTorch's argument; this sort is always stable */
mx_status mx_sort(const mx_tensor *x, int dim, bool descending, bool stable, mx_tensor **values,
                  mx_tensor **indices) {
  (void)stable;
  return sort_both(x, dim, descending, values, indices);
}

mx_tensor *mx_argsort(const mx_tensor *x, int dim, bool descending, bool stable) {
  (void)stable;
  return mx__call1(MX_OP_ARGSORT, x, &(mx__args){.i = {dim, descending}});
}

/* sorted: PyTorch's argument; the k values always come sorted */
mx_status mx_topk(const mx_tensor *x, int64_t k, int dim, bool largest, bool sorted, mx_tensor **values,
                  mx_tensor **indices) {
  (void)sorted;
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  const mx_tensor *in[1] = {x};
  mx__args a = {.i = {k, dim, largest}};
  mx_status status = mx__dispatch(MX_OP_TOPK, 1, in, &a, out);
  if (values) *values = out[0];
  else mx_release(out[0]);
  if (indices) *indices = out[1];
  else mx_release(out[1]);
  return status;
}

mx_tensor *mx_multinomial(const mx_tensor *probs, int64_t num_samples, bool replacement, mx_generator *gen) {
  return mx__call1(MX_OP_MULTINOMIAL, probs, &(mx__args){.i = {num_samples, replacement}, .ptr = gen});
}
