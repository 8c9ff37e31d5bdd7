/* Pooling: max (with indices) and average over 1-3 spatial dims, with
 * backward kernels that are ops themselves; adaptive average pooling as
 * two small matrix products. A channels-last input gives channels-last
 * outputs and input gradients, with no copy in another layout. */
#include <stdlib.h>

#include "ops/op_table.h"

static mx_status pooled_shape(const char *op, const mx_tensor *x, const mx_pool_params *p, mx_shape *out) {
  return mx__pooled_shape(op, mx_shape_get(x), p, out);
}

mx_status mx__pooled_shape(const char *op, mx_shape in, const mx_pool_params *p, mx_shape *out) {
  if (in.ndim != p->spatial + 2)
    return mx__error(MX_SHAPE_ERROR, "%s: expected a %d-d input (N, C, %d spatial dims), got %d dims", op,
                     p->spatial + 2, p->spatial, in.ndim);
  *out = in;
  for (int i = 0; i < p->spatial; i++) {
    int64_t k = p->kernel[i], s = p->stride[i], pad = p->padding[i], d = p->dilation[i] ? p->dilation[i] : 1;
    if (k <= 0 || s <= 0 || pad < 0 || pad > k / 2)
      return mx__error(MX_INVALID_ARGUMENT,
                       "%s: kernel %lld, stride %lld and padding %lld: kernel and stride must be positive and padding "
                       "at most half the kernel", op, (long long)k, (long long)s, (long long)pad);
    if (d < 0)
      return mx__error(MX_INVALID_ARGUMENT, "%s: dilation %lld in spatial dim %d must be positive", op, (long long)d, i);
    /* in + 2 * pad - d * (k - 1) - 1, summed so that nothing overflows but d * (k - 1), which is checked:
     * 2 * pad <= k, so the second term is at most 1 */
    int64_t reach, span;
    if (mx__mul_overflows(d, k - 1, &reach) || (span = (in.d[2 + i] - 1) + (2 * pad - reach)) < 0)
      return mx__error(MX_SHAPE_ERROR, "%s: input size %lld is smaller than the kernel %lld in spatial dim %d", op,
                       (long long)in.d[2 + i], (long long)k, i);
    out->d[2 + i] = span / s + 1;
  }
  /* the kernels visit every kernel element for every output: that count must fit too */
  int64_t outputs, visits;
  if (mx__numel_overflows(out->ndim, out->d, &outputs)) return mx__error_too_many_elements(op, out->ndim, out->d);
  if (mx__numel_overflows(p->spatial, p->kernel, &visits) || mx__mul_overflows(visits, outputs, &visits)) {
    char a[MX__DIMS_STR], b[MX__DIMS_STR];
    return mx__error(MX_SHAPE_ERROR, "%s: kernel %s over output %s makes more than 2^63-1 window reads", op,
                     mx__dims_str(a, p->spatial, p->kernel), mx__dims_str(b, out->ndim, out->d));
  }
  return MX_OK;
}

/* The forward's input layout, recorded by the public functions in args.i[0]
 * for the backward: its input gradient keeps it even where the output
 * gradient cannot tell (one-pixel planes, as after ResNet's last pooling). */
#define INPUT_CHANNELS_LAST(args) ((args)->i[0])

/* A new output of op, channels-last when asked (4-d shapes only) or row-major. */
static mx_tensor *alloc_in_layout(const char *op, mx_shape shape, mx_dtype dtype, mx_device device,
                                  bool channels_last) {
  if (channels_last && shape.ndim == 4) return mx__tensor_alloc_channels_last(op, shape, dtype, device);
  return mx__tensor_alloc(op, shape, dtype, device);
}

bool mx__window_offsets_fit(const mx_pool_params *p) {
  int64_t volume = 1;
  for (int i = 0; i < p->spatial; i++) {
    if (p->dilation[i] > 1) return false;
    volume *= p->kernel[i];
  }
  return volume <= 256;
}

/* PyTorch's indices, int64 flat positions in each input plane, from the
 * op's: a uint8 offset decodes as the window's corner, a function of the
 * output position, plus the offset's displacement in the plane (both
 * linear, so they are two small tables and an add, on any device); int64
 * ones already are. in: the input's spatial sizes. */
static mx_tensor *flat_indices(const mx_tensor *indices, const mx_pool_params *p, const int64_t *in) {
  if (indices->dtype != MX_U8) return mx_to_dtype(indices, MX_I64);
  int sp = p->spatial;
  mx_shape out = mx_shape_get(indices), corner_shape = {.ndim = sp}, delta_shape = {.ndim = 1, .d = {1}};
  int64_t plane_stride[3], corners = 1;
  for (int i = sp - 1; i >= 0; i--) plane_stride[i] = i == sp - 1 ? 1 : plane_stride[i + 1] * in[i + 1];
  for (int i = 0; i < sp; i++) {
    corner_shape.d[i] = out.d[2 + i];
    corners *= out.d[2 + i];
    delta_shape.d[0] *= p->kernel[i];
  }
  int64_t *corner = malloc(sizeof(int64_t) * (size_t)(corners + delta_shape.d[0]));
  if (!corner) {
    mx__error(MX_OUT_OF_MEMORY, "mx_max_pool: out of memory decoding indices");
    return NULL;
  }
  int64_t *delta = corner + corners;
  for (int64_t o = 0; o < corners; o++) { /* sum over dims of (o_i s_i - p_i) * plane_stride_i */
    int64_t rest = o, flat = 0;
    for (int i = sp - 1; i >= 0; rest /= out.d[2 + i], i--)
      flat += (rest % out.d[2 + i] * p->stride[i] - p->padding[i]) * plane_stride[i];
    corner[o] = flat;
  }
  for (int64_t r = 0; r < delta_shape.d[0]; r++) { /* sum over dims of k_i * plane_stride_i */
    int64_t rest = r, flat = 0;
    for (int i = sp - 1; i >= 0; rest /= p->kernel[i], i--) flat += rest % p->kernel[i] * plane_stride[i];
    delta[r] = flat;
  }
  mx_scope *scope = mx_scope_begin();
  mx_tensor *corner_t = mx_from_data(corner, corner_shape, MX_I64, indices->device);
  mx_tensor *delta_t = mx_from_data(delta, delta_shape, MX_I64, indices->device);
  free(corner);
  mx_tensor *offsets = mx_reshape(mx_to_dtype(indices, MX_I64), MX_SHAPE(mx_numel(indices)));
  mx_tensor *flat = mx_add(mx_reshape(mx_gather(delta_t, 0, offsets), out), corner_t);
  if (flat) mx_keep(flat);
  mx_scope_end(scope);
  return flat;
}

/* Max pooling (relu false), or max pooling of relu(x) (max_pool_relu), whose kernel takes each input's relu as
 * it searches: the maxima and indices of the unfused pair, bit for bit. */
static mx_status max_pool_forward(mx__call *c, bool relu) {
  const char *op = mx__ops[c->op].api_name;
  mx_shape shape;
  if (pooled_shape(op, c->in[0], &c->args->pool, &shape)) return mx_last_status();
  bool channels_last = mx__suggests_channels_last(c->in[0]);
  mx_tensor *x = mx__tensor_in_layout(op, c->in[0], channels_last);
  const mx_backend *be = x ? mx__kernel_backend(c->op, x->device, MX_KERNEL_MAX_POOL, x->dtype) : NULL;
  if (!be) return mx_last_status();
  /* uint8 offsets in the window where the kernel allows: the graph saves
   * them for backward, where int64 positions would outweigh bf16
   * activations 4:1. The public function hands out PyTorch's int64. */
  mx_dtype index_dtype = mx__window_offsets_fit(&c->args->pool) ? MX_U8 : MX_I64;
  c->out[0] = alloc_in_layout(op, shape, x->dtype, x->device, channels_last);
  c->out[1] = alloc_in_layout(op, shape, index_dtype, x->device, channels_last);
  if (!c->out[0] || !c->out[1]) return mx_last_status();
  mx_kview ov = mx__kview_of(c->out[0]), iv = mx__kview_of(c->out[1]), xv = mx__kview_of(x);
  mx_pool_params p = c->args->pool;
  p.relu = relu;
  return be->max_pool(&ov, &iv, &xv, &p);
}

mx_status mx__fwd_max_pool(mx__call *c) { return max_pool_forward(c, false); }
mx_status mx__fwd_max_pool_relu(mx__call *c) { return max_pool_forward(c, true); }

/* dx, the input gradient of a pooling backward op, in the forward input's
 * layout (from args, or from the tensor the op was given in it); the
 * kernel's other tensors, into *in, in dx's. */
static mx_tensor *backward_in_layout(mx__call *c, const mx_tensor *given_as_input, int n, mx_tensor **in) {
  const char *op = mx__ops[c->op].api_name;
  bool wanted = INPUT_CHANNELS_LAST(c->args) || mx__suggests_channels_last(given_as_input);
  mx_tensor *dx = alloc_in_layout(op, c->args->shape, c->in[0]->dtype, c->in[0]->device, wanted);
  bool channels_last = dx && mx__suggests_channels_last(dx); /* one-pixel planes: both orders are one */
  for (int i = 0; i < n; i++) in[i] = dx ? mx__tensor_in_layout(op, c->in[i], channels_last) : NULL;
  return dx;
}

mx_status mx__fwd_max_pool_backward(mx__call *c) {
  const mx_backend *be = mx__kernel_backend(c->op, c->in[0]->device, MX_KERNEL_MAX_POOL_BACKWARD, c->in[0]->dtype);
  if (!be) return mx_last_status();
  mx_tensor *in[2];
  mx_tensor *dx = backward_in_layout(c, c->in[1], 2, in), *g = in[0], *indices = in[1];
  if (!dx || !g || !indices) return mx_last_status();
  c->out[0] = dx;
  mx_kview dv = mx__kview_of(dx), gv = mx__kview_of(g), iv = mx__kview_of(indices);
  return be->max_pool_backward(&dv, &gv, &iv, &c->args->pool);
}

static mx_tensor *max_pool_backward(const mx_tensor *g, const mx_tensor *indices, const mx__args *forward, mx_shape in) {
  mx__args args = *forward;
  args.shape = in;
  args.pool.relu = false;
  return mx__call2(MX_OP_MAX_POOL_BACKWARD, g, indices, &args);
}

mx_status mx__bwd_max_pool(mx__bw *bw) {
  GRAD(0, max_pool_backward(G, mx__saved_out(bw, 1), bw->args, mx__in_shape(bw, 0)));
  return MX_OK;
}

/* The pair's backward on the pooled side: relu's mask on the output (y > 0
 * exactly where the ReLU passed the window's max), then max_pool's scatter.
 * The pair scatters first and masks the full-resolution gradient; both
 * give 0 + g at each window's max where y > 0 (or NaN) and +0 elsewhere,
 * the same bits, and a window's sum over overlapping windows adds the
 * same values in the same order (a max's y decides every window it wins). */
mx_status mx__bwd_max_pool_relu(mx__bw *bw) {
  mx_tensor *g = mx_relu_backward(G, mx__saved_out(bw, 0));
  if (!g) return mx_last_status();
  GRAD(0, max_pool_backward(g, mx__saved_out(bw, 1), bw->args, mx__in_shape(bw, 0)));
  return MX_OK;
}

mx_tensor *mx__max_pool_gather(const mx_tensor *g, const mx_tensor *indices, const mx_pool_params *p, mx_shape in) {
  mx_tensor *flat = indices ? flat_indices(indices, p, in.d + 2) : NULL;
  if (!flat) return NULL;
  return mx_reshape(mx_gather(mx_flatten(g, 2, -1), 2, mx_flatten(flat, 2, -1)), mx_shape_get(flat));
}

/* The adjoint of scattering by indices is gathering by them (at flat positions). */
mx_status mx__bwd_max_pool_backward(mx__bw *bw) {
  GRAD(0, mx__max_pool_gather(G, mx__saved_in(bw, 1), &bw->args->pool, bw->args->shape));
  return MX_OK;
}

mx_status mx__fwd_avg_pool(mx__call *c) {
  mx_shape shape;
  if (pooled_shape("mx_avg_pool", c->in[0], &c->args->pool, &shape)) return mx_last_status();
  bool channels_last = mx__suggests_channels_last(c->in[0]);
  mx_tensor *x = mx__tensor_in_layout("mx_avg_pool", c->in[0], channels_last);
  const mx_backend *be = x ? mx__kernel_backend(c->op, x->device, MX_KERNEL_AVG_POOL, x->dtype) : NULL;
  if (!be) return mx_last_status();
  c->out[0] = alloc_in_layout("mx_avg_pool", shape, x->dtype, x->device, channels_last);
  if (!c->out[0]) return mx_last_status();
  mx_kview ov = mx__kview_of(c->out[0]), xv = mx__kview_of(x);
  return be->avg_pool(&ov, &xv, &c->args->pool);
}

mx_status mx__fwd_avg_pool_backward(mx__call *c) {
  const mx_backend *be = mx__kernel_backend(c->op, c->in[0]->device, MX_KERNEL_AVG_POOL_BACKWARD, c->in[0]->dtype);
  if (!be) return mx_last_status();
  mx_tensor *g;
  mx_tensor *dx = backward_in_layout(c, c->in[0], 1, &g);
  if (!dx || !g) return mx_last_status();
  c->out[0] = dx;
  mx_kview dv = mx__kview_of(dx), gv = mx__kview_of(g);
  return be->avg_pool_backward(&dv, &gv, &c->args->pool);
}

mx_status mx__bwd_avg_pool(mx__bw *bw) {
  mx__args args = *bw->args;
  args.shape = mx__in_shape(bw, 0);
  GRAD(0, mx__call1(MX_OP_AVG_POOL_BACKWARD, G, &args));
  return MX_OK;
}

/* Average pooling is linear: its backward's adjoint is itself. */
mx_status mx__bwd_avg_pool_backward(mx__bw *bw) {
  GRAD(0, mx__call1(MX_OP_AVG_POOL, G, bw->args));
  return MX_OK;
}

/* (out, in) matrix averaging the adaptive windows [floor(i in/out), ceil((i+1) in/out)). */
static mx_tensor *window_matrix(int64_t out, int64_t in, mx_dtype dtype, mx_device device) {
  mx_tensor *m = mx_zeros(MX_SHAPE(out, in), MX_F64, MX_CPU);
  if (!m) return NULL;
  double *v = mx_data_ptr(m);
  for (int64_t i = 0; i < out; i++) {
    int64_t start = i * in / out, end = ((i + 1) * in + out - 1) / out;
    for (int64_t j = start; j < end; j++) v[i * in + j] = 1.0 / (double)(end - start);
  }
  mx_tensor *moved = mx_to_device(mx_to_dtype(m, dtype), device);
  mx_release(m);
  return moved;
}

mx_status mx__fwd_adaptive_avg_pool2d(mx__call *c) {
  mx_tensor *x = c->in[0];
  if (x->ndim < 3 || c->args->shape.ndim != 2 || c->args->shape.d[0] <= 0 || c->args->shape.d[1] <= 0)
    return mx__error(MX_SHAPE_ERROR, "mx_adaptive_avg_pool2d: needs (..., H, W) input and a positive (h, w) size");
  int64_t h = x->shape[x->ndim - 2], w = x->shape[x->ndim - 1];
  mx_tensor *rows = window_matrix(c->args->shape.d[0], h, x->dtype, x->device);
  mx_tensor *cols = window_matrix(c->args->shape.d[1], w, x->dtype, x->device);
  return OUT0(c, mx_matmul(mx_matmul(rows, x), mx_transpose(cols, 0, 1)));
}

/* --- public functions -------------------------------------------------------------------------- */

static mx_pool_params pool_params(int spatial, mx_shape kernel, mx_shape stride, mx_shape padding, mx_shape dilation) {
  mx_pool_params p = {.spatial = spatial, .count_include_pad = true};
  for (int i = 0; i < spatial; i++) {
    p.kernel[i] = kernel.d[kernel.ndim == 1 ? 0 : i];
    p.stride[i] = stride.ndim == 0 ? p.kernel[i] : stride.d[stride.ndim == 1 ? 0 : i];
    p.padding[i] = padding.ndim == 0 ? 0 : padding.d[padding.ndim == 1 ? 0 : i];
    p.dilation[i] = dilation.ndim == 0 ? 1 : dilation.d[dilation.ndim == 1 ? 0 : i];
  }
  return p;
}

/* Dispatches max pooling op (MAX_POOL or MAX_POOL_RELU) on x; its two outputs (values, offsets or positions). */
static mx_status max_pool_dispatch(mx_op op, const mx_tensor *x, int spatial, mx_shape kernel, mx_shape stride,
                                   mx_shape padding, mx_shape dilation, mx__args *args, mx_tensor **out) {
  if (spatial < 1 || spatial > 3 || kernel.ndim < 1)
    return mx__error(MX_INVALID_ARGUMENT, "%s: %d spatial dims (1 to 3) and a kernel size are needed",
                     mx__ops[op].api_name, spatial);
  args->pool = pool_params(spatial, kernel, stride, padding, dilation);
  INPUT_CHANNELS_LAST(args) = x && mx__suggests_channels_last(x);
  const mx_tensor *in[1] = {x};
  return mx__dispatch(op, 1, in, args, out);
}

mx_status mx_max_pool_with_indices(const mx_tensor *x, int spatial, mx_shape kernel, mx_shape stride, mx_shape padding,
                                   mx_shape dilation, mx_tensor **values, mx_tensor **indices) {
  mx__args args = {0};
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  mx_status status = max_pool_dispatch(MX_OP_MAX_POOL, x, spatial, kernel, stride, padding, dilation, &args, out);
  if (values) *values = out[0];
  else mx_release(out[0]);
  if (indices) {
    mx_shape x_shape = out[1] ? mx_shape_get(x) : (mx_shape){0};
    *indices = out[1] ? flat_indices(out[1], &args.pool, x_shape.d + 2) : NULL;
    if (out[1] && !*indices) status = mx_last_status();
  }
  mx_release(out[1]);
  return status;
}

mx_tensor *mx_max_pool_relu(const mx_tensor *x, int spatial, mx_shape kernel, mx_shape stride, mx_shape padding,
                            mx_shape dilation) {
  mx__args args = {0};
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  max_pool_dispatch(MX_OP_MAX_POOL_RELU, x, spatial, kernel, stride, padding, dilation, &args, out);
  mx_release(out[1]);
  return out[0];
}

mx_tensor *mx_max_pool(const mx_tensor *x, int spatial, mx_shape kernel, mx_shape stride, mx_shape padding) {
  mx_tensor *values = NULL;
  mx_max_pool_with_indices(x, spatial, kernel, stride, padding, MX_DIMS(1), &values, NULL);
  return values;
}

mx_tensor *mx_avg_pool(const mx_tensor *x, int spatial, mx_shape kernel, mx_shape stride, mx_shape padding,
                       bool count_include_pad) {
  if (spatial < 1 || spatial > 3 || kernel.ndim < 1) {
    mx__error(MX_INVALID_ARGUMENT, "mx_avg_pool: %d spatial dims (1 to 3) and a kernel size are needed", spatial);
    return NULL;
  }
  mx__args args = {.pool = pool_params(spatial, kernel, stride, padding, MX_DIMS(1))};
  args.pool.count_include_pad = count_include_pad;
  INPUT_CHANNELS_LAST(&args) = x && mx__suggests_channels_last(x);
  return mx__call1(MX_OP_AVG_POOL, x, &args);
}

mx_tensor *mx_adaptive_avg_pool2d(const mx_tensor *x, int64_t out_h, int64_t out_w) {
  return mx__call1(MX_OP_ADAPTIVE_AVG_POOL2D, x, &(mx__args){.shape = MX_SHAPE(out_h, out_w)});
}
