/* Indexing and joining: gather, scatter, index_select/add/copy as
 * primitives; index_put, embedding, cat's relatives, pad, flip, roll,
 * repeat, tril/triu, one_hot and dropout composed from them. */
#include <math.h>
#include <stdlib.h>

#include "ops/op_table.h"

static mx_status need_index(const char *op, const mx_tensor *index) {
  if (index->dtype == MX_I64) return MX_OK;
  return mx__error(MX_DTYPE_ERROR, "%s: indices must be int64, got %s", op, mx_dtype_name(index->dtype));
}

/* the backend of device when its kernel takes x's dtype */
#define BACKEND(c, device, KERNEL, x) mx__kernel_backend((c)->op, device, MX_KERNEL_##KERNEL, (x)->dtype)

/* --- gather and scatter ---------------------------------------------------------------- */

static mx_status check_gather_shapes(const char *op, const mx_tensor *x, const mx_tensor *index, int dim) {
  char a[MX__DIMS_STR], b[MX__DIMS_STR];
  bool ok = index->ndim == x->ndim;
  for (int d = 0; ok && d < x->ndim; d++) ok = d == dim || index->shape[d] <= x->shape[d];
  if (ok) return MX_OK;
  return mx__error(MX_SHAPE_ERROR, "%s: index of shape %s does not fit a tensor of shape %s along dim %d", op,
                   mx__dims_str(a, index->ndim, index->shape), mx__dims_str(b, x->ndim, x->shape), dim);
}

mx_status mx__fwd_gather(mx__call *c) {
  mx_tensor *x = c->in[0], *index = c->in[1];
  int dim = mx__wrap_dim("mx_gather", (int)c->args->i[0], x->ndim);
  if (dim < 0 || need_index("mx_gather", index) || check_gather_shapes("mx_gather", x, index, dim))
    return mx_last_status();
  const mx_backend *be = BACKEND(c, x->device, GATHER, x);
  if (!be) return mx_last_status();
  mx_tensor *out = mx__tensor_alloc("mx_gather", mx_shape_get(index), x->dtype, x->device);
  if (!out) return mx_last_status();
  c->out[0] = out;
  mx_kview ov = mx__kview_of(out), xv = mx__kview_of(x), iv = mx__kview_of(index);
  return be->gather(&ov, &xv, &iv, dim);
}

static mx_status scatter_forward(mx__call *c, bool accumulate) {
  const char *op = accumulate ? "mx_scatter_add" : "mx_scatter";
  mx_tensor *x = c->in[0], *index = c->in[1];
  int dim = mx__wrap_dim(op, (int)c->args->i[0], x->ndim);
  if (dim < 0 || need_index(op, index) || check_gather_shapes(op, x, index, dim)) return mx_last_status();
  mx_tensor *src = mx__prepare(c->in[2], x->dtype, x->device);
  if (!src || check_gather_shapes(op, src, index, -1)) return mx_last_status();
  const mx_backend *be = BACKEND(c, x->device, SCATTER, x);
  mx_tensor *out = be ? mx__tensor_clone(x) : NULL;
  if (!out) return mx_last_status();
  c->out[0] = out;
  mx_kview ov = mx__kview_of(out), iv = mx__kview_of(index), sv = mx__kview_of(src);
  return be->scatter(&ov, &iv, &sv, dim, accumulate);
}

mx_status mx__fwd_scatter(mx__call *c) { return scatter_forward(c, false); }
mx_status mx__fwd_scatter_add(mx__call *c) { return scatter_forward(c, true); }

mx_status mx__bwd_gather(mx__bw *bw) {
  mx_tensor *index = mx__saved_in(bw, 1);
  mx_tensor *zeros = mx_zeros(mx__in_shape(bw, 0), bw->node->in_meta[0].dtype, bw->node->in_meta[0].device);
  GRAD(0, mx_scatter_add(zeros, (int)bw->args->i[0], index, G));
  return MX_OK;
}

mx_status mx__bwd_scatter(mx__bw *bw) {
  mx_tensor *index = mx__saved_in(bw, 1);
  int dim = (int)bw->args->i[0];
  GRAD(0, mx_scatter(G, dim, index, mx_zeros_like(mx__saved_in(bw, 2))));
  GRAD(2, mx_gather(G, dim, index));
  return MX_OK;
}

mx_status mx__bwd_scatter_add(mx__bw *bw) {
  GRAD(0, G);
  GRAD(2, mx_gather(G, (int)bw->args->i[0], mx__saved_in(bw, 1)));
  return MX_OK;
}

/* --- index_select, index_add, index_copy ------------------------------------------------- */

static mx_status need_vector_index(const char *op, const mx_tensor *index) {
  if (need_index(op, index)) return mx_last_status();
  if (index->ndim == 1) return MX_OK;
  return mx__error(MX_SHAPE_ERROR, "%s: index must be 1-d, got %d dims", op, index->ndim);
}

mx_status mx__fwd_index_select(mx__call *c) {
  mx_tensor *x = c->in[0], *index = c->in[1];
  int dim = mx__wrap_dim("mx_index_select", (int)c->args->i[0], x->ndim > 0 ? x->ndim : 1);
  if (dim < 0 || need_vector_index("mx_index_select", index)) return mx_last_status();
  if (x->ndim == 0) return mx__error(MX_SHAPE_ERROR, "mx_index_select: cannot index a 0-d tensor");
  const mx_backend *be = BACKEND(c, x->device, INDEX_SELECT, x);
  if (!be) return mx_last_status();
  mx_shape shape = mx_shape_get(x);
  shape.d[dim] = index->shape[0];
  mx_tensor *out = mx__tensor_alloc("mx_index_select", shape, x->dtype, x->device);
  if (!out) return mx_last_status();
  c->out[0] = out;
  mx_kview ov = mx__kview_of(out), xv = mx__kview_of(x), iv = mx__kview_of(index);
  return be->index_select(&ov, &xv, &iv, dim);
}

static mx_status index_write(mx__call *c, bool accumulate) {
  const char *op = accumulate ? "mx_index_add" : "mx_index_copy";
  mx_tensor *x = c->in[0], *index = c->in[1];
  int dim = mx__wrap_dim(op, (int)c->args->i[0], x->ndim > 0 ? x->ndim : 1);
  if (dim < 0 || need_vector_index(op, index)) return mx_last_status();
  if (x->ndim == 0) return mx__error(MX_SHAPE_ERROR, "%s: cannot index a 0-d tensor", op); /* as index_select */
  mx_tensor *src = mx__prepare(c->in[2], x->dtype, x->device);
  if (!src) return mx_last_status();
  mx_shape want = mx_shape_get(x);
  want.d[dim] = index->shape[0];
  bool fits = src->ndim == want.ndim;
  for (int d = 0; fits && d < want.ndim; d++) fits = src->shape[d] == want.d[d];
  if (!fits) {
    char a[MX__DIMS_STR], b[MX__DIMS_STR];
    return mx__error(MX_SHAPE_ERROR, "%s: source of shape %s, expected %s", op, mx__dims_str(a, src->ndim, src->shape),
                     mx__dims_str(b, want.ndim, want.d));
  }
  const mx_backend *be = BACKEND(c, x->device, INDEX_ADD, x);
  mx_tensor *out = be ? mx__tensor_clone(x) : NULL;
  if (!out) return mx_last_status();
  c->out[0] = out;
  mx_kview ov = mx__kview_of(out), iv = mx__kview_of(index), sv = mx__kview_of(src);
  return be->index_add(&ov, &iv, &sv, dim, c->args->f[0], accumulate);
}

mx_status mx__fwd_index_add(mx__call *c) { return index_write(c, true); }
mx_status mx__fwd_index_copy(mx__call *c) { return index_write(c, false); }

mx_status mx__bwd_index_select(mx__bw *bw) {
  mx_tensor *zeros = mx_zeros(mx__in_shape(bw, 0), bw->node->in_meta[0].dtype, bw->node->in_meta[0].device);
  GRAD(0, mx_index_add(zeros, (int)bw->args->i[0], mx__saved_in(bw, 1), G, 1.0));
  return MX_OK;
}

mx_status mx__bwd_index_add(mx__bw *bw) {
  GRAD(0, G);
  mx_tensor *picked = mx_index_select(G, (int)bw->args->i[0], mx__saved_in(bw, 1));
  GRAD(2, bw->args->f[0] == 1 ? picked : mx_mul_scalar(picked, bw->args->f[0]));
  return MX_OK;
}

mx_status mx__bwd_index_copy(mx__bw *bw) {
  int dim = (int)bw->args->i[0];
  mx_tensor *index = mx__saved_in(bw, 1);
  GRAD(0, mx_index_copy(G, dim, index, mx_zeros_like(mx__saved_in(bw, 2))));
  GRAD(2, mx_index_select(G, dim, index));
  return MX_OK;
}

/* --- cat and its relatives ----------------------------------------------------------------- */

mx_status mx__fwd_cat(mx__call *c) {
  if (c->n_in == 0) return mx__error(MX_INVALID_ARGUMENT, "mx_cat: no tensors given");
  mx_tensor *first = c->in[0];
  int dim = mx__wrap_dim("mx_cat", (int)c->args->i[0], first->ndim);
  if (dim < 0) return mx_last_status();
  if (first->ndim == 0) return mx__error(MX_SHAPE_ERROR, "mx_cat: cannot join 0-d tensors; use mx_stack");
  mx_shape shape = mx_shape_get(first);
  shape.d[dim] = 0;
  for (int i = 0; i < c->n_in; i++) {
    mx_tensor *t = c->in[i];
    bool fits = t->ndim == first->ndim;
    for (int d = 0; fits && d < t->ndim; d++) fits = d == dim || t->shape[d] == first->shape[d];
    if (!fits) {
      char a[MX__DIMS_STR], b[MX__DIMS_STR];
      return mx__error(MX_SHAPE_ERROR, "mx_cat: tensor %d has shape %s, which does not match %s outside dim %d", i,
                       mx__dims_str(a, t->ndim, t->shape), mx__dims_str(b, first->ndim, first->shape), dim);
    }
    if (mx__add_overflows(shape.d[dim], t->shape[dim], &shape.d[dim])) {
      char a[MX__DIMS_STR];
      return mx__error(MX_SHAPE_ERROR, "mx_cat: sizes along dim %d add up past 2^63-1 at tensor %d of shape %s", dim,
                       i, mx__dims_str(a, t->ndim, t->shape));
    }
  }
  mx_tensor *out = mx__tensor_alloc("mx_cat", shape, mx__result_type(c->n_in, c->in), first->device);
  if (!out) return mx_last_status();
  c->out[0] = out;
  int64_t offset = 0;
  for (int i = 0; i < c->n_in; i++) {
    int64_t size = c->in[i]->shape[dim];
    mx_tensor *window = mx__tensor_narrow(out, dim, offset, size);
    mx_status status = window ? mx_copy_(window, c->in[i]) : mx_last_status();
    mx_release(window);
    if (status != MX_OK) return status;
    offset += size;
  }
  return MX_OK;
}

mx_status mx__bwd_cat(mx__bw *bw) {
  int ndim = bw->node->in_meta[0].ndim;
  int dim = (int)(bw->args->i[0] < 0 ? bw->args->i[0] + ndim : bw->args->i[0]);
  int64_t offset = 0;
  for (int i = 0; i < bw->node->n_inputs; i++) {
    int64_t size = bw->node->in_meta[i].shape[dim];
    GRAD(i, mx_narrow(G, dim, offset, size));
    offset += size;
  }
  return MX_OK;
}

mx_status mx__fwd_stack(mx__call *c) {
  if (c->n_in == 0) return mx__error(MX_INVALID_ARGUMENT, "mx_stack: no tensors given");
  mx_tensor **parts = malloc(sizeof(mx_tensor *) * (size_t)c->n_in);
  if (!parts) return mx__error(MX_OUT_OF_MEMORY, "mx_stack: out of memory");
  for (int i = 0; i < c->n_in; i++) parts[i] = mx_unsqueeze(c->in[i], (int)c->args->i[0]);
  mx_status status = OUT0(c, mx_cat(c->n_in, parts, (int)c->args->i[0]));
  free(parts);
  return status;
}

/* --- index_put and embedding ------------------------------------------------------------------- */

/* x[indices] = values (or += when accumulate): the indexed leading dims are
 * flattened into one, then one index_copy / index_add. */
mx_status mx__fwd_index_put(mx__call *c) {
  mx_tensor *x = c->in[0], *values = c->in[1];
  int k = c->n_in - 2;
  if (k < 1 || k > x->ndim)
    return mx__error(MX_INVALID_ARGUMENT, "mx_index_put: %d index tensors for a %d-d tensor", k, x->ndim);
  mx_tensor *idx[MX_MAX_DIMS];
  for (int d = 0; d < k; d++) {
    if (need_index("mx_index_put", c->in[2 + d])) return mx_last_status();
    mx_tensor *t = c->in[2 + d];
    int64_t size = x->shape[d];
    if (mx_numel(t)) { /* each index against its own dim, negatives counting from the end */
      int64_t lo = (int64_t)mx_item(mx_amin(t, MX_ALL_DIMS, false));
      int64_t hi = (int64_t)mx_item(mx_amax(t, MX_ALL_DIMS, false));
      int64_t bad = lo < -size ? lo : hi >= size ? hi : 0;
      if (lo < -size || hi >= size)
        return mx__error(MX_INDEX_ERROR, "mx_index_put: index %lld out of range for dim %d of size %lld",
                         (long long)bad, d, (long long)size);
    }
    idx[d] = mx_where(mx_lt_scalar(t, 0), mx_add(t, mx_scalar((double)size, MX_I64, MX_CPU)), t);
  }
  mx_tensor *flat = NULL;
  int64_t rows = 1;
  for (int d = k - 1; d >= 0; d--) { /* the flat index: sum of idx_d * stride_d */
    mx_tensor *term = mx_mul(idx[d], mx_scalar((double)rows, MX_I64, MX_CPU)); /* stays int64 */
    flat = flat ? mx_add(flat, term) : term;
    rows *= x->shape[d];
  }
  mx_shape rest = {0}, x2 = {1, {rows}}, v2 = {1, {-1}};
  for (int d = k; d < x->ndim; d++) rest.d[rest.ndim++] = x->shape[d];
  for (int d = 0; d < rest.ndim; d++) x2.d[x2.ndim++] = rest.d[d], v2.d[v2.ndim++] = rest.d[d];
  mx_tensor *index = mx_reshape(flat, MX_SHAPE(-1));
  if (!index) return mx_last_status();
  mx_shape values_shape = mx_shape_get(flat); /* the indices' shape, then the rest */
  for (int d = 0; d < rest.ndim; d++) values_shape.d[values_shape.ndim++] = rest.d[d];
  mx_tensor *v = mx_reshape(mx_expand(mx_to_dtype(values, x->dtype), values_shape), v2);
  mx_tensor *x_rows = mx_reshape(x, x2);
  mx_tensor *done = c->args->keepdim ? mx_index_add(x_rows, 0, index, v, 1.0) : mx_index_copy(x_rows, 0, index, v);
  return OUT0(c, mx_reshape(done, mx_shape_get(x)));
}

mx_status mx__fwd_embedding(mx__call *c) {
  mx_tensor *weight = c->in[0], *indices = c->in[1];
  if (weight->ndim != 2)
    return mx__error(MX_SHAPE_ERROR, "mx_embedding: weight must be 2-d (num_embeddings, dim), got %d dims", weight->ndim);
  mx_shape shape = mx_shape_get(indices);
  if (shape.ndim == MX_MAX_DIMS) return mx__error(MX_SHAPE_ERROR, "mx_embedding: indices have too many dims");
  shape.d[shape.ndim++] = weight->shape[1];
  return OUT0(c, mx_reshape(mx_index_select(weight, 0, mx_reshape(indices, MX_SHAPE(-1))), shape));
}

/* --- shape games: pad, flip, roll, repeat, tril, triu, one_hot -------------------------------- */

static mx_tensor *arange_on(int64_t n, mx_device device) { return mx_arange(0, (double)n, 1, MX_I64, device); }

/* Index tensors that read each output position of a padded dim. */
static mx_tensor *pad_index(int64_t size, int64_t left, int64_t right, int mode, mx_device device) {
  int64_t n = size + left + right;
  int64_t *idx = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  if (!idx) return NULL;
  for (int64_t i = 0; i < n; i++) {
    int64_t j = i - left;
    if (mode == MX_PAD_REPLICATE) j = j < 0 ? 0 : j >= size ? size - 1 : j;
    else { /* reflect, without repeating the edge */
      int64_t period = 2 * (size - 1);
      j = period ? ((j % period) + period) % period : 0;
      if (j >= size) j = period - j;
    }
    idx[i] = j;
  }
  mx_tensor *t = mx_from_data(idx, MX_SHAPE(n), MX_I64, device);
  free(idx);
  return t;
}

mx_status mx__fwd_pad(mx__call *c) {
  mx_tensor *x = c->in[0];
  mx_shape pads = c->args->shape;
  int mode = (int)c->args->i[0];
  if (pads.ndim % 2 || pads.ndim / 2 > x->ndim)
    return mx__error(MX_INVALID_ARGUMENT, "mx_pad: %d pad values for a %d-d tensor (two per dim, from the last)",
                     pads.ndim, x->ndim);
  mx_tensor *out = x;
  for (int p = 0; p < pads.ndim / 2; p++) {
    int dim = x->ndim - 1 - p;
    int64_t left = pads.d[2 * p], right = pads.d[2 * p + 1], size = mx_size(out, dim), padded;
    if (mx__add_overflows(size, left, &padded) || mx__add_overflows(padded, right, &padded))
      return mx__error(MX_SHAPE_ERROR, "mx_pad: padding (%lld, %lld) takes dim %d of size %lld past 2^63-1",
                       (long long)left, (long long)right, dim, (long long)size);
    if (mode != MX_PAD_CONSTANT && (left < 0 || right < 0 || (mode == MX_PAD_REFLECT && (left >= size || right >= size))))
      return mx__error(MX_INVALID_ARGUMENT, "mx_pad: padding (%lld, %lld) is invalid for %s mode and size %lld",
                       (long long)left, (long long)right, mode == MX_PAD_REFLECT ? "reflect" : "replicate",
                       (long long)size);
    if (mode != MX_PAD_CONSTANT) {
      out = mx_index_select(out, dim, pad_index(size, left, right, mode, x->device));
      if (!out) return mx_last_status();
      continue;
    }
    if (left < 0 || right < 0) { /* negative padding crops */
      int64_t a = left < 0 ? -left : 0, b = right < 0 ? -right : 0;
      if (a + b > size)
        return mx__error(MX_INVALID_ARGUMENT, "mx_pad: padding (%lld, %lld) crops more than dim %d's size %lld",
                         (long long)left, (long long)right, dim, (long long)size);
      out = mx_narrow(out, dim, a, size - a - b);
      if (!out) return mx_last_status();
      left = left < 0 ? 0 : left, right = right < 0 ? 0 : right;
    }
    mx_tensor *parts[3];
    int n = 0;
    mx_shape side = mx_shape_get(out);
    if (left) side.d[dim] = left, parts[n++] = mx_full(side, c->args->f[0], out->dtype, out->device);
    parts[n++] = out;
    if (right) side.d[dim] = right, parts[n++] = mx_full(side, c->args->f[0], out->dtype, out->device);
    out = n > 1 ? mx_cat(n, parts, dim) : out;
    if (!out) return mx_last_status();
  }
  return OUT0(c, out == x ? mx_reshape(x, mx_shape_get(x)) : out);
}

mx_status mx__fwd_flip(mx__call *c) {
  mx_tensor *out = c->in[0];
  for (int k = 0; k < c->args->shape.ndim; k++) {
    int dim = mx__wrap_dim("mx_flip", (int)c->args->shape.d[k], c->in[0]->ndim);
    if (dim < 0) return mx_last_status();
    int64_t n = c->in[0]->shape[dim];
    mx_tensor *reversed = mx_arange((double)n - 1, -1, -1, MX_I64, c->in[0]->device);
    out = mx_index_select(out, dim, reversed);
  }
  return OUT0(c, out == c->in[0] ? mx_reshape(out, mx_shape_get(out)) : out);
}

mx_status mx__fwd_roll(mx__call *c) {
  mx_tensor *x = c->in[0];
  int dim = mx__wrap_dim("mx_roll", (int)c->args->i[1], x->ndim);
  if (dim < 0) return mx_last_status();
  int64_t n = x->shape[dim];
  int64_t s = n ? ((c->args->i[0] % n) + n) % n : 0;
  if (s == 0) return OUT0(c, mx_reshape(x, mx_shape_get(x)));
  mx_tensor *parts[2] = {mx_narrow(x, dim, n - s, s), mx_narrow(x, dim, 0, n - s)};
  return OUT0(c, mx_cat(2, parts, dim));
}

mx_status mx__fwd_repeat(mx__call *c) {
  mx_tensor *x = c->in[0];
  mx_shape r = c->args->shape;
  if (r.ndim < x->ndim)
    return mx__error(MX_INVALID_ARGUMENT, "mx_repeat: %d repeats for a %d-d tensor (need at least one per dim)", r.ndim,
                     x->ndim);
  if (2 * r.ndim > MX_MAX_DIMS)
    return mx__error(MX_SHAPE_ERROR, "mx_repeat: %d repeated dims need %d dims on the way; at most %d", r.ndim,
                     2 * r.ndim, MX_MAX_DIMS);
  /* (a, b) repeated (r0, r1): view as (1, a, 1, b), expand to (r0, a, r1, b), merge pairs */
  mx_shape pairs = {2 * r.ndim, {0}}, expanded = pairs, out = {r.ndim, {0}};
  int lead = r.ndim - x->ndim;
  bool negative = false, overflows = false;
  for (int d = 0; d < r.ndim; d++) {
    int64_t size = d < lead ? 1 : x->shape[d - lead];
    pairs.d[2 * d] = 1, pairs.d[2 * d + 1] = size;
    expanded.d[2 * d] = r.d[d], expanded.d[2 * d + 1] = size;
    negative |= r.d[d] < 0; /* refused by mx_expand below, as before */
    overflows |= mx__mul_overflows(r.d[d], size, &out.d[d]);
  }
  int64_t count; /* expanded has at least out's sizes, zeros aside */
  if (!negative && (overflows || mx__numel_overflows(expanded.ndim, expanded.d, &count))) {
    char a[MX__DIMS_STR], b[MX__DIMS_STR];
    return mx__error(MX_SHAPE_ERROR, "mx_repeat: shape %s repeated %s has too many elements",
                     mx__dims_str(a, x->ndim, x->shape), mx__dims_str(b, r.ndim, r.d));
  }
  return OUT0(c, mx_reshape(mx_expand(mx_reshape(x, pairs), expanded), out));
}

static mx_status triangle(mx__call *c, bool lower) {
  const char *op = lower ? "mx_tril" : "mx_triu";
  mx_tensor *x = c->in[0];
  if (x->ndim < 2) return mx__error(MX_SHAPE_ERROR, "%s: needs at least 2 dims, got %d", op, x->ndim);
  int64_t rows = x->shape[x->ndim - 2], cols = x->shape[x->ndim - 1];
  mx_tensor *offset = mx_sub(mx_reshape(arange_on(cols, x->device), MX_SHAPE(1, cols)),
                             mx_reshape(arange_on(rows, x->device), MX_SHAPE(rows, 1))); /* col - row */
  double k = (double)c->args->i[0];
  mx_tensor *outside = lower ? mx_gt_scalar(offset, k) : mx_lt_scalar(offset, k);
  return OUT0(c, mx_masked_fill(x, outside, 0));
}

mx_status mx__fwd_tril(mx__call *c) { return triangle(c, true); }
mx_status mx__fwd_triu(mx__call *c) { return triangle(c, false); }

mx_status mx__fwd_one_hot(mx__call *c) {
  mx_tensor *indices = c->in[0];
  if (need_index("mx_one_hot", indices)) return mx_last_status();
  int64_t classes = c->args->i[0];
  if (classes < 0) { /* -1: one more than the largest index */
    mx_tensor *m = mx_numel(indices) ? mx_max(indices) : NULL;
    classes = m ? (int64_t)mx_item(m) + 1 : 0;
  }
  if (mx_numel(indices) && (mx_item(mx_min(indices)) < 0 || mx_item(mx_max(indices)) >= (double)classes))
    return mx__error(MX_INDEX_ERROR, "mx_one_hot: indices must lie in [0, %lld)", (long long)classes);
  return OUT0(c, mx_to_dtype(mx_eq(mx_unsqueeze(indices, -1), arange_on(classes, indices->device)), MX_I64));
}

mx_status mx__fwd_dropout(mx__call *c) {
  mx_tensor *x = c->in[0];
  double p = c->args->f[0];
  if (!(p >= 0 && p <= 1))
    return mx__error(MX_INVALID_ARGUMENT, "mx_dropout: probability %g is not in [0, 1]", p);
  if (!c->args->keepdim || p == 0) return OUT0(c, mx_reshape(x, mx_shape_get(x))); /* eval: the identity */
  if (p == 1) return OUT0(c, mx_mul_scalar(x, 0));
  mx_tensor *keep = mx_bernoulli_p(mx_shape_get(x), 1 - p, x->dtype, x->device, c->args->ptr);
  return OUT0(c, mx_mul(x, mx_mul_scalar(keep, 1 / (1 - p))));
}

/* --- public functions -------------------------------------------------------------------------- */

mx_tensor *mx_gather(const mx_tensor *x, int dim, const mx_tensor *index) {
  return mx__call2(MX_OP_GATHER, x, index, &(mx__args){.i = {dim}});
}
mx_tensor *mx_scatter(const mx_tensor *x, int dim, const mx_tensor *index, const mx_tensor *src) {
  return mx__call3(MX_OP_SCATTER, x, index, src, &(mx__args){.i = {dim}});
}
mx_tensor *mx_scatter_add(const mx_tensor *x, int dim, const mx_tensor *index, const mx_tensor *src) {
  return mx__call3(MX_OP_SCATTER_ADD, x, index, src, &(mx__args){.i = {dim}});
}
mx_tensor *mx_index_select(const mx_tensor *x, int dim, const mx_tensor *index) {
  return mx__call2(MX_OP_INDEX_SELECT, x, index, &(mx__args){.i = {dim}});
}
mx_tensor *mx_index_add(const mx_tensor *x, int dim, const mx_tensor *index, const mx_tensor *src, double alpha) {
  return mx__call3(MX_OP_INDEX_ADD, x, index, src, &(mx__args){.i = {dim}, .f = {alpha}});
}
mx_tensor *mx_index_copy(const mx_tensor *x, int dim, const mx_tensor *index, const mx_tensor *src) {
  return mx__call3(MX_OP_INDEX_COPY, x, index, src, &(mx__args){.i = {dim}});
}

/* The dispatcher takes a list: a handful of fixed slots plus the given ones. */
static mx_tensor *call_list(mx_op op, int n_fixed, const mx_tensor *const *fixed, int n, mx_tensor *const *list,
                            const mx__args *args) {
  if (n < 0 || (n > 0 && !list)) {
    mx__error(MX_INVALID_ARGUMENT, "mx_%s: %d tensors given", mx__ops[op].name, n);
    return NULL;
  }
  const mx_tensor **all = malloc(sizeof(mx_tensor *) * (size_t)(n_fixed + n + 1));
  if (!all) {
    mx__error(MX_OUT_OF_MEMORY, "mx_%s: out of memory", mx__ops[op].name);
    return NULL;
  }
  for (int i = 0; i < n_fixed; i++) all[i] = fixed[i];
  for (int i = 0; i < n; i++) all[n_fixed + i] = list[i];
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  mx_status status = mx__dispatch(op, n_fixed + n, all, args, out);
  free(all);
  return status == MX_OK ? out[0] : NULL;
}

mx_tensor *mx_index_put(const mx_tensor *x, int n_indices, mx_tensor *const *indices, const mx_tensor *values,
                        bool accumulate) {
  const mx_tensor *fixed[2] = {x, values};
  return call_list(MX_OP_INDEX_PUT, 2, fixed, n_indices, indices, &(mx__args){.keepdim = accumulate});
}
mx_tensor *mx_embedding(const mx_tensor *weight, const mx_tensor *indices) {
  return mx__call2(MX_OP_EMBEDDING, weight, indices, NULL);
}
mx_tensor *mx_cat(int n, mx_tensor *const *tensors, int dim) {
  return call_list(MX_OP_CAT, 0, NULL, n, tensors, &(mx__args){.i = {dim}});
}
mx_tensor *mx_stack(int n, mx_tensor *const *tensors, int dim) {
  return call_list(MX_OP_STACK, 0, NULL, n, tensors, &(mx__args){.i = {dim}});
}

int mx_split(const mx_tensor *x, int64_t split_size, int dim, mx_tensor **out, int max_out) {
  if (!x) {
    mx__null_input("mx_split", "x");
    return -1;
  }
  int d = mx__wrap_dim("mx_split", dim, x->ndim);
  if (d < 0) return -1;
  if (split_size <= 0) {
    mx__error(MX_INVALID_ARGUMENT, "mx_split: split_size must be positive, got %lld", (long long)split_size);
    return -1;
  }
  int64_t size = x->shape[d];
  /* an empty dim: one empty piece; size + split_size - 1 could overflow */
  int64_t pieces = size == 0 ? 1 : size / split_size + (size % split_size != 0);
  if (pieces > max_out) {
    mx__error(MX_INVALID_ARGUMENT, "mx_split: %lld pieces do not fit in %d slots", (long long)pieces, max_out);
    return -1;
  }
  int n = (int)pieces;
  for (int i = 0; i < n; i++) {
    int64_t start = (int64_t)i * split_size;
    out[i] = mx_narrow(x, d, start, size - start < split_size ? size - start : split_size);
    if (!out[i]) return -1;
  }
  return n;
}

int mx_chunk(const mx_tensor *x, int chunks, int dim, mx_tensor **out, int max_out) {
  if (!x) {
    mx__null_input("mx_chunk", "x");
    return -1;
  }
  if (chunks <= 0) {
    mx__error(MX_INVALID_ARGUMENT, "mx_chunk: chunks must be positive, got %d", chunks);
    return -1;
  }
  int d = mx__wrap_dim("mx_chunk", dim, x->ndim);
  if (d < 0) return -1;
  int64_t size = x->shape[d];
  if (size > 0) return mx_split(x, size / chunks + (size % chunks != 0), d, out, max_out); /* no size + chunks */
  /* an empty dim: `chunks` empty pieces, as PyTorch gives */
  if (chunks > max_out) {
    mx__error(MX_INVALID_ARGUMENT, "mx_chunk: %d pieces do not fit in %d slots", chunks, max_out);
    return -1;
  }
  for (int i = 0; i < chunks; i++)
    if (!(out[i] = mx_narrow(x, d, 0, 0))) return -1;
  return chunks;
}

mx_tensor *mx_pad(const mx_tensor *x, mx_shape pads, mx_pad_mode mode, double value) {
  return mx__call1(MX_OP_PAD, x, &(mx__args){.shape = pads, .i = {mode}, .f = {value}});
}
mx_tensor *mx_flip(const mx_tensor *x, mx_shape dims) { return mx__call1(MX_OP_FLIP, x, &(mx__args){.shape = dims}); }
mx_tensor *mx_roll(const mx_tensor *x, int64_t shift, int dim) {
  return mx__call1(MX_OP_ROLL, x, &(mx__args){.i = {shift, dim}});
}
mx_tensor *mx_repeat(const mx_tensor *x, mx_shape repeats) {
  return mx__call1(MX_OP_REPEAT, x, &(mx__args){.shape = repeats});
}
mx_tensor *mx_tril(const mx_tensor *x, int64_t diagonal) { return mx__call1(MX_OP_TRIL, x, &(mx__args){.i = {diagonal}}); }
mx_tensor *mx_triu(const mx_tensor *x, int64_t diagonal) { return mx__call1(MX_OP_TRIU, x, &(mx__args){.i = {diagonal}}); }
mx_tensor *mx_one_hot(const mx_tensor *indices, int64_t num_classes) {
  return mx__call1(MX_OP_ONE_HOT, indices, &(mx__args){.i = {num_classes}});
}
mx_tensor *mx_dropout(const mx_tensor *x, double p, bool training, mx_generator *gen) {
  return mx__call1(MX_OP_DROPOUT, x, &(mx__args){.f = {p}, .keepdim = training, .ptr = gen});
}
