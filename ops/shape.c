/* Views, copies, casts and moves as differentiable ops. The geometry lives
 * in tensor/views.c; here each gets a backward formula. */
#include "ops/op_table.h"

/* --- forwards ---------------------------------------------------------------------------- */

mx_status mx__fwd_reshape(mx__call *c) { return OUT0(c, mx__tensor_reshape(c->in[0], c->args->shape)); }
mx_status mx__fwd_view(mx__call *c) { return OUT0(c, mx__tensor_view_shape(c->in[0], c->args->shape)); }
mx_status mx__fwd_transpose(mx__call *c) {
  return OUT0(c, mx__tensor_transpose(c->in[0], (int)c->args->i[0], (int)c->args->i[1]));
}
mx_status mx__fwd_permute(mx__call *c) { return OUT0(c, mx__tensor_permute(c->in[0], c->args->shape)); }
mx_status mx__fwd_squeeze(mx__call *c) { return OUT0(c, mx__tensor_squeeze(c->in[0], (int)c->args->i[0])); }
mx_status mx__fwd_squeeze_all(mx__call *c) { return OUT0(c, mx__tensor_squeeze_all(c->in[0])); }
mx_status mx__fwd_unsqueeze(mx__call *c) { return OUT0(c, mx__tensor_unsqueeze(c->in[0], (int)c->args->i[0])); }
mx_status mx__fwd_slice(mx__call *c) {
  const int64_t *i = c->args->i;
  return OUT0(c, mx__tensor_slice(c->in[0], (int)i[0], i[1], i[2], i[3]));
}
mx_status mx__fwd_select(mx__call *c) {
  return OUT0(c, mx__tensor_select(c->in[0], (int)c->args->i[0], c->args->i[1]));
}
mx_status mx__fwd_expand(mx__call *c) { return OUT0(c, mx__tensor_expand(c->in[0], c->args->shape)); }
/* args->ptr, when set, is the cast already made (mx__to_dtype_precomputed): the output is a new handle on it. */
mx_status mx__fwd_to_dtype(mx__call *c) {
  const mx_tensor *made = c->args->ptr;
  if (made) return OUT0(c, mx__tensor_view(made, made->ndim, made->shape, made->strides, made->offset));
  return OUT0(c, mx__tensor_to_dtype(c->in[0], c->args->dtype));
}
mx_status mx__fwd_to_device(mx__call *c) {
  return OUT0(c, mx__tensor_to_device(c->in[0], (mx_device)c->args->i[0]));
}
mx_status mx__fwd_clone(mx__call *c) { return OUT0(c, mx__tensor_clone(c->in[0])); }
mx_status mx__fwd_contiguous(mx__call *c) { return OUT0(c, mx__tensor_contiguous(c->in[0])); }
mx_status mx__fwd_to_channels_last(mx__call *c) { return OUT0(c, mx__tensor_to_channels_last(c->in[0])); }

mx_status mx__fwd_flatten(mx__call *c) {
  mx_tensor *flat = mx__tensor_flatten(c->in[0], (int)c->args->i[0], (int)c->args->i[1]);
  if (!flat) return mx_last_status();
  mx_shape shape = mx_shape_get(flat);
  mx_release(flat);
  return OUT0(c, mx_reshape(c->in[0], shape));
}

mx_status mx__fwd_broadcast_to(mx__call *c) {
  mx_tensor *probe = mx__tensor_broadcast_to(c->in[0], c->args->shape); /* its errors name broadcast_to */
  if (!probe) return mx_last_status();
  mx_release(probe);
  return OUT0(c, mx_expand(c->in[0], c->args->shape));
}

mx_status mx__fwd_narrow(mx__call *c) {
  mx_tensor *probe = mx__tensor_narrow(c->in[0], (int)c->args->i[0], c->args->i[1], c->args->i[2]);
  if (!probe) return mx_last_status();
  mx_release(probe);
  int64_t start = c->args->i[1] < 0 ? c->args->i[1] + mx_size(c->in[0], (int)c->args->i[0]) : c->args->i[1];
  return OUT0(c, mx_slice(c->in[0], (int)c->args->i[0], start, start + c->args->i[2], 1));
}

/* g written into zeros of the input's shape at the slice (i[3] = step) or
 * the selected index (i[3] = 0, i[1] = index). */
mx_status mx__fwd_slice_backward(mx__call *c) {
  const int64_t *i = c->args->i;
  mx_tensor *g = c->in[0];
  mx_tensor *out = mx_zeros(c->args->shape, g->dtype, g->device);
  mx_tensor *window = !out ? NULL
                      : i[3] ? mx__tensor_slice(out, (int)i[0], i[1], i[2], i[3])
                             : mx__tensor_select(out, (int)i[0], i[1]);
  mx_status status = window ? mx_copy_(window, g) : mx_last_status();
  mx_release(window);
  c->out[0] = out;
  return status;
}

/* --- backward formulas ---------------------------------------------------------------------- */

/* reshape and view: the gradient in the input's layout when that was
 * channels-last (args.i[0], set by the public functions), so that a CNN's
 * gradients keep the layout from the classifier's flatten down to its
 * first convolution: converted there once, as its input was. */
static mx_tensor *reshape_back(mx__bw *bw) {
  mx_tensor *g = mx_reshape(G, mx__in_shape(bw, 0));
  return bw->args->i[0] ? mx_to_channels_last(g) : g;
}
mx_status mx__bwd_reshape(mx__bw *bw) { GRAD(0, reshape_back(bw)); return MX_OK; }
mx_status mx__bwd_view(mx__bw *bw) { GRAD(0, reshape_back(bw)); return MX_OK; }
mx_status mx__bwd_squeeze(mx__bw *bw) { GRAD(0, mx_reshape(G, mx__in_shape(bw, 0))); return MX_OK; }
mx_status mx__bwd_squeeze_all(mx__bw *bw) { GRAD(0, mx_reshape(G, mx__in_shape(bw, 0))); return MX_OK; }
mx_status mx__bwd_unsqueeze(mx__bw *bw) { GRAD(0, mx_reshape(G, mx__in_shape(bw, 0))); return MX_OK; }
mx_status mx__bwd_transpose(mx__bw *bw) {
  GRAD(0, mx_transpose(G, (int)bw->args->i[0], (int)bw->args->i[1]));
  return MX_OK;
}
mx_status mx__bwd_permute(mx__bw *bw) {
  mx_shape inverse = bw->args->shape;
  for (int k = 0; k < inverse.ndim; k++) {
    int64_t d = bw->args->shape.d[k];
    inverse.d[d < 0 ? d + inverse.ndim : d] = k;
  }
  GRAD(0, mx_permute(G, inverse));
  return MX_OK;
}
mx_status mx__bwd_expand(mx__bw *bw) { GRAD(0, G); return MX_OK; } /* the engine sums to shape */
mx_status mx__bwd_to_dtype(mx__bw *bw) { GRAD(0, G); return MX_OK; } /* the engine casts back */
mx_status mx__bwd_to_device(mx__bw *bw) { GRAD(0, mx_to_device(G, bw->node->in_meta[0].device)); return MX_OK; }
mx_status mx__bwd_clone(mx__bw *bw) { GRAD(0, G); return MX_OK; }
mx_status mx__bwd_contiguous(mx__bw *bw) { GRAD(0, G); return MX_OK; }
mx_status mx__bwd_to_channels_last(mx__bw *bw) { GRAD(0, G); return MX_OK; }

/* The start and end a slice really used (Python's clamping). */
static void normalize_slice(int64_t size, int64_t *start, int64_t *end) {
  if (*start < 0) *start += size;
  if (*end < 0) *end += size;
  *start = *start < 0 ? 0 : *start > size ? size : *start;
  *end = *end < *start ? *start : *end > size ? size : *end;
}

static mx_tensor *slice_backward(mx_tensor *g, mx_shape shape, int64_t dim, int64_t a, int64_t b, int64_t step) {
  mx__args args = {.shape = shape, .i = {dim, a, b, step}};
  return mx__call1(MX_OP_SLICE_BACKWARD, g, &args);
}

mx_status mx__bwd_slice(mx__bw *bw) {
  mx_shape shape = mx__in_shape(bw, 0);
  int64_t dim = bw->args->i[0] < 0 ? bw->args->i[0] + shape.ndim : bw->args->i[0];
  int64_t start = bw->args->i[1], end = bw->args->i[2];
  normalize_slice(shape.d[dim], &start, &end);
  GRAD(0, slice_backward(G, shape, dim, start, end, bw->args->i[3]));
  return MX_OK;
}

mx_status mx__bwd_select(mx__bw *bw) {
  mx_shape shape = mx__in_shape(bw, 0);
  int64_t dim = bw->args->i[0] < 0 ? bw->args->i[0] + shape.ndim : bw->args->i[0];
  int64_t index = bw->args->i[1] < 0 ? bw->args->i[1] + shape.d[dim] : bw->args->i[1];
  GRAD(0, slice_backward(G, shape, dim, index, 0, 0));
  return MX_OK;
}

mx_status mx__bwd_slice_backward(mx__bw *bw) {
  const int64_t *i = bw->args->i;
  GRAD(0, i[3] ? mx_slice(G, (int)i[0], i[1], i[2], i[3]) : mx_select(G, (int)i[0], i[1]));
  return MX_OK;
}

mx_shape mx__all_but_channels(int ndim) {
  mx_shape dims = {0};
  for (int d = 0; d < ndim; d++)
    if (d != 1) dims.d[dims.ndim++] = d;
  return dims;
}

mx_tensor *mx__sum_to(const mx_tensor *t, mx_shape shape) {
  if (!t) return NULL;
  mx_shape dims = {0};
  int lead = t->ndim - shape.ndim;
  for (int d = 0; d < t->ndim; d++)
    if (d < lead || (shape.d[d - lead] == 1 && t->shape[d] != 1)) dims.d[dims.ndim++] = d;
  if (dims.ndim == 0) return mx_reshape(t, shape);
  mx_tensor *summed = mx_sum(t, dims, true);
  mx_tensor *out = mx_reshape(summed, shape);
  mx_release(summed);
  return out;
}

/* --- public functions ---------------------------------------------------------------------- */

mx_tensor *mx_reshape(const mx_tensor *t, mx_shape shape) {
  return mx__call1(MX_OP_RESHAPE, t, &(mx__args){.shape = shape, .i = {t && mx__suggests_channels_last(t)}});
}
mx_tensor *mx_view(const mx_tensor *t, mx_shape shape) {
  return mx__call1(MX_OP_VIEW, t, &(mx__args){.shape = shape, .i = {t && mx__suggests_channels_last(t)}});
}
mx_tensor *mx_transpose(const mx_tensor *t, int dim0, int dim1) {
  return mx__call1(MX_OP_TRANSPOSE, t, &(mx__args){.i = {dim0, dim1}});
}
mx_tensor *mx_permute(const mx_tensor *t, mx_shape dims) {
  return mx__call1(MX_OP_PERMUTE, t, &(mx__args){.shape = dims});
}
mx_tensor *mx_squeeze(const mx_tensor *t, int dim) { return mx__call1(MX_OP_SQUEEZE, t, &(mx__args){.i = {dim}}); }
mx_tensor *mx_squeeze_all(const mx_tensor *t) { return mx__call1(MX_OP_SQUEEZE_ALL, t, NULL); }
mx_tensor *mx_unsqueeze(const mx_tensor *t, int dim) {
  return mx__call1(MX_OP_UNSQUEEZE, t, &(mx__args){.i = {dim}});
}
mx_tensor *mx_slice(const mx_tensor *t, int dim, int64_t start, int64_t end, int64_t step) {
  return mx__call1(MX_OP_SLICE, t, &(mx__args){.i = {dim, start, end, step}});
}
mx_tensor *mx_narrow(const mx_tensor *t, int dim, int64_t start, int64_t length) {
  return mx__call1(MX_OP_NARROW, t, &(mx__args){.i = {dim, start, length}});
}
mx_tensor *mx_select(const mx_tensor *t, int dim, int64_t index) {
  return mx__call1(MX_OP_SELECT, t, &(mx__args){.i = {dim, index}});
}
mx_tensor *mx_expand(const mx_tensor *t, mx_shape shape) {
  return mx__call1(MX_OP_EXPAND, t, &(mx__args){.shape = shape});
}
mx_tensor *mx_broadcast_to(const mx_tensor *t, mx_shape shape) {
  return mx__call1(MX_OP_BROADCAST_TO, t, &(mx__args){.shape = shape});
}
mx_tensor *mx_flatten(const mx_tensor *t, int start_dim, int end_dim) {
  return mx__call1(MX_OP_FLATTEN, t, &(mx__args){.i = {start_dim, end_dim}});
}
mx_tensor *mx_contiguous(const mx_tensor *t) { return mx__call1(MX_OP_CONTIGUOUS, t, NULL); }
mx_tensor *mx_to_channels_last(const mx_tensor *t) { return mx__call1(MX_OP_TO_CHANNELS_LAST, t, NULL); }
mx_tensor *mx_clone(const mx_tensor *t) { return mx__call1(MX_OP_CLONE, t, NULL); }
mx_tensor *mx_to_dtype(const mx_tensor *t, mx_dtype dtype) {
  return mx__call1(MX_OP_TO_DTYPE, t, &(mx__args){.dtype = dtype});
}
mx_tensor *mx__to_dtype_precomputed(const mx_tensor *t, mx_tensor *cast) {
  return mx__call1(MX_OP_TO_DTYPE, t, &(mx__args){.dtype = cast->dtype, .ptr = cast});
}
mx_tensor *mx_to_device(const mx_tensor *t, mx_device device) {
  return mx__call1(MX_OP_TO_DEVICE, t, &(mx__args){.i = {device}});
}
