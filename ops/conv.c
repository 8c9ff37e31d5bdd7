/* Convolution over 1-3 spatial dims: the forward (with its optional bias,
 * added inside the kernel as oneDNN and cuDNN fuse it) and its two
 * gradients are primitives, each the others' backward, so gradients of
 * gradients work (the weight's gradient with the bias's, when the bias
 * needs one, is one primitive too: one pass over the output's gradient);
 * conv1d/2d/3d and the transposed convolutions are
 * composites; conv2d_relu, a primitive, runs the ReLU that follows a
 * convolution inside its kernel. */
#include "ops/conv_pool.h"
#include "ops/op_table.h"

static mx_status same_dtype(const char *op, const mx_tensor *a, const mx_tensor *b) {
  if (a->dtype == b->dtype) return MX_OK;
  return mx__error(MX_DTYPE_ERROR, "%s: expected one dtype for input and weight, got %s and %s", op,
                   mx_dtype_name(a->dtype), mx_dtype_name(b->dtype));
}

static mx_status shapes_fit(const char *op, const mx_tensor *x, const mx_tensor *w, const mx_conv_params *p) {
  int n = p->spatial + 2;
  char a[MX__DIMS_STR], b[MX__DIMS_STR];
  if (x->ndim != n || w->ndim != n)
    return mx__error(MX_SHAPE_ERROR, "%s: input %s and weight %s must both be %d-d for %d spatial dims", op,
                     mx__dims_str(a, x->ndim, x->shape), mx__dims_str(b, w->ndim, w->shape), n, p->spatial);
  int64_t expected; /* input channels */
  if (mx__mul_overflows(w->shape[1], p->groups, &expected))
    return mx__error(MX_SHAPE_ERROR, "%s: weight %s times %lld groups expects more than 2^63-1 input channels", op,
                     mx__dims_str(b, w->ndim, w->shape), (long long)p->groups);
  if (p->groups > 0 && x->shape[1] == expected && w->shape[0] % p->groups)
    return mx__error(MX_SHAPE_ERROR, "%s: %lld output channels do not split into %lld groups", op,
                     (long long)w->shape[0], (long long)p->groups);
  if (p->groups <= 0 || x->shape[1] != expected || w->shape[0] % p->groups)
    return mx__error(MX_SHAPE_ERROR, "%s: input %s has %lld channels, weight %s expects %lld (groups %lld)", op,
                     mx__dims_str(a, x->ndim, x->shape), (long long)x->shape[1], mx__dims_str(b, w->ndim, w->shape),
                     (long long)expected, (long long)p->groups);
  return MX_OK;
}

static mx_status out_size_overflows(const char *op, const mx_conv_params *p, int64_t in, int64_t kernel, int dim) {
  return mx__error(MX_SHAPE_ERROR, "%s: the output size of spatial dim %d passes 2^63-1 (input %lld, kernel %lld, "
                   "stride %lld, padding %lld, dilation %lld)", op, dim, (long long)in, (long long)kernel,
                   (long long)p->stride[dim], (long long)p->padding[dim], (long long)p->dilation[dim]);
}

/* S_out per spatial dim, or an error when the kernel does not fit. */
static mx_status conv_out_shape(const char *op, const mx_tensor *x, const mx_tensor *w, const mx_conv_params *p,
                                mx_shape *out) {
  *out = (mx_shape){x->ndim, {x->shape[0], w->shape[0]}};
  for (int i = 0; i < p->spatial; i++) {
    if (p->stride[i] <= 0)
      return mx__error(MX_INVALID_ARGUMENT, "%s: stride %lld in spatial dim %d must be positive", op,
                       (long long)p->stride[i], i);
    /* in + 2 * padding - dilation * (kernel - 1) - 1, in the order the kernels' own check computes it */
    int64_t span, twice_pad, reach;
    if (mx__mul_overflows(2, p->padding[i], &twice_pad) || mx__add_overflows(x->shape[2 + i], twice_pad, &span) ||
        mx__mul_overflows(p->dilation[i], w->shape[2 + i] - 1, &reach) || mx__mul_overflows(reach, -1, &reach) ||
        mx__add_overflows(span, reach, &span) || mx__add_overflows(span, -1, &span))
      return out_size_overflows(op, p, x->shape[2 + i], w->shape[2 + i], i);
    if (span < 0)
      return mx__error(MX_SHAPE_ERROR, "%s: kernel %lld (dilation %lld) does not fit input size %lld + padding %lld "
                       "in spatial dim %d", op, (long long)w->shape[2 + i], (long long)p->dilation[i],
                       (long long)x->shape[2 + i], (long long)p->padding[i], i);
    out->d[2 + i] = span / p->stride[i] + 1;
  }
  return MX_OK;
}

/* The bias as PyTorch takes it: a vector of one element per output channel,
 * in x's dtype; contiguous for the kernels. */
static mx_tensor *bias_vector(const char *op, const mx_tensor *bias, const mx_tensor *x, int64_t channels) {
  if (bias->ndim != 1 || bias->shape[0] != channels) {
    char b[MX__DIMS_STR];
    mx__error(MX_SHAPE_ERROR, "%s: bias of shape %s for %lld output channels (expected (%lld))", op,
              mx__dims_str(b, bias->ndim, bias->shape), (long long)channels, (long long)channels);
    return NULL;
  }
  if (bias->dtype != x->dtype) {
    mx__error(MX_DTYPE_ERROR, "%s: bias of %s for an input of %s (expected one dtype)", op, mx_dtype_name(bias->dtype),
              mx_dtype_name(x->dtype));
    return NULL;
  }
  return mx__tensor_contiguous(bias);
}

/* --- layouts ----------------------------------------------------------------------------------------- */
/* An activation laid out channels-last (mx_to_channels_last) gives outputs
 * and input gradients in that layout: oneDNN (kernels/cpu/dnnl_conv.c) and
 * cuDNN (kernels/cuda/conv_cudnn.cu) read and write it as it lies, so a
 * CNN's activations stay channels-last from the first convolution to the
 * last. A weight's gradient takes the weight's layout: row-major, or
 * channels-last (KRSC) in a model laid out by mx_module_to_channels_last,
 * which cuDNN then reads and writes beside channels-last activations
 * without copies. (The fused conv-pool kernels keep row-major gradients.) */

static mx_tensor *alloc_activation(const char *op, mx_shape shape, const mx_tensor *like, bool channels_last) {
  return channels_last ? mx__tensor_alloc_channels_last(op, shape, like->dtype, like->device)
                       : mx__tensor_alloc(op, shape, like->dtype, like->device);
}

/* conv_backward_weight's (and _bias's) args.i[0]: dw channels-last (the weight is), else row-major. */
static mx_tensor *alloc_weight_grad(const mx__call *c, const mx_tensor *g) {
  return c->args->i[0] ? mx__tensor_alloc_channels_last("mx_conv", c->args->shape, g->dtype, g->device)
                       : mx__tensor_alloc("mx_conv", c->args->shape, g->dtype, g->device);
}

/* conv_backward_data's args.i[0]: the layout of dx. As the gradient of a
 * convolution's input, that input's (the gradient g may come row-major);
 * as the transposed convolution, its input g's. */
enum { DX_LIKE_G, DX_ROW_MAJOR, DX_CHANNELS_LAST };

/* The forward's checks: its output's shape, and *bias made the contiguous vector the kernels take. */
static mx_status forward_checks(const char *op, const mx_tensor *x, const mx_tensor *w, mx_tensor **bias,
                                const mx_conv_params *p, mx_shape *shape) {
  if (same_dtype(op, x, w) || shapes_fit(op, x, w, p) || conv_out_shape(op, x, w, p, shape)) return mx_last_status();
  if (*bias && !(*bias = bias_vector(op, *bias, x, w->shape[0]))) return mx_last_status();
  return MX_OK;
}

mx_status mx__fwd_convolution(mx__call *c) {
  mx_tensor *x = c->in[0], *w = c->in[1], *bias = c->n_in > 2 ? c->in[2] : NULL;
  const mx_conv_params *p = &c->args->conv;
  mx_shape shape;
  if (forward_checks("mx_conv", x, w, &bias, p, &shape)) return mx_last_status();
  const mx_backend *be = mx__kernel_backend(c->op, x->device, MX_KERNEL_CONV_FORWARD, x->dtype);
  mx_tensor *y = be ? alloc_activation("mx_conv", shape, x, mx__suggests_channels_last(x)) : NULL;
  if (!y) return mx_last_status();
  c->out[0] = y;
  mx_kview yv = mx__kview_of(y), xv = mx__kview_of(x), wv = mx__kview_of(w), bv = bias ? mx__kview_of(bias) : xv;
  return be->conv_forward(&yv, &xv, &wv, bias ? &bv : NULL, p);
}

mx_status mx__fwd_conv_backward_data(mx__call *c) {
  mx_tensor *g = c->in[0], *w = c->in[1];
  if (same_dtype("mx_conv_transpose", g, w)) return mx_last_status();
  const mx_backend *be = mx__kernel_backend(c->op, g->device, MX_KERNEL_CONV_BACKWARD_DATA, g->dtype);
  int layout = (int)c->args->i[0];
  bool channels_last = layout == DX_LIKE_G ? mx__suggests_channels_last(g) : layout == DX_CHANNELS_LAST;
  mx_tensor *dx = be ? alloc_activation("mx_conv_transpose", c->args->shape, g, channels_last) : NULL;
  if (!dx) return mx_last_status();
  c->out[0] = dx;
  mx_kview dv = mx__kview_of(dx), gv = mx__kview_of(g), wv = mx__kview_of(w);
  return be->conv_backward_data(&dv, &gv, &wv, &c->args->conv);
}

mx_status mx__fwd_conv_backward_weight(mx__call *c) {
  mx_tensor *g = c->in[0], *x = c->in[1];
  if (same_dtype("mx_conv", g, x)) return mx_last_status();
  const mx_backend *be = mx__kernel_backend(c->op, g->device, MX_KERNEL_CONV_BACKWARD_WEIGHT, g->dtype);
  mx_tensor *dw = be ? alloc_weight_grad(c, g) : NULL;
  if (!dw) return mx_last_status();
  c->out[0] = dw;
  mx_kview dv = mx__kview_of(dw), gv = mx__kview_of(g), xv = mx__kview_of(x);
  return be->conv_backward_weight(&dv, &gv, &xv, &c->args->conv);
}

/* (dw, db): the backend's fused kernel where it has one, else its weight
 * gradient and a per-channel sum. */
mx_status mx__fwd_conv_backward_weight_bias(mx__call *c) {
  mx_tensor *g = c->in[0], *x = c->in[1];
  if (same_dtype("mx_conv", g, x)) return mx_last_status();
  if (g->ndim < 2) /* the kernels check the rest; the bias's length needs the channels */
    return mx__error(MX_SHAPE_ERROR, "mx_conv: a gradient of %d dims (expected (N, C_out, ...))", g->ndim);
  const mx_backend *be = mx__backend_of(c->op, g->device);
  bool fused = be && mx__backend_supports(be, MX_KERNEL_CONV_BACKWARD_WEIGHT_BIAS, g->dtype) != MX_KERNEL_NOT_BUILT;
  if (!be || !mx__kernel_usable(c->op, be, fused ? MX_KERNEL_CONV_BACKWARD_WEIGHT_BIAS : MX_KERNEL_CONV_BACKWARD_WEIGHT,
                                g->dtype))
    return mx_last_status();
  mx_tensor *dw = c->out[0] = alloc_weight_grad(c, g);
  mx_tensor *db = c->out[1] = fused ? mx__tensor_alloc("mx_conv", MX_SHAPE(g->shape[1]), g->dtype, g->device) : NULL;
  if (!dw || (fused && !db)) return mx_last_status();
  mx_kview dv = mx__kview_of(dw), gv = mx__kview_of(g), xv = mx__kview_of(x);
  if (fused) {
    mx_kview bv = mx__kview_of(db);
    return be->conv_backward_weight_bias(&dv, &bv, &gv, &xv, &c->args->conv);
  }
  mx_status status = be->conv_backward_weight(&dv, &gv, &xv, &c->args->conv);
  if (status != MX_OK) return status;
  c->out[1] = mx_sum(g, mx__all_but_channels(g->ndim), false);
  return c->out[1] ? MX_OK : mx_last_status();
}

/* dx = B(g, w) of shape x_shape, laid out as layout says (DX_*). */
static mx_tensor *backward_data(const mx_tensor *g, const mx_tensor *w, mx_shape x_shape, const mx_conv_params *p,
                                int layout) {
  return mx__call2(MX_OP_CONV_BACKWARD_DATA, g, w, &(mx__args){.shape = x_shape, .conv = *p, .i = {layout}});
}

/* The layout of the gradient of a convolution's input x: x's. */
static int layout_of_input(const mx_tensor *x) {
  return x && mx__suggests_channels_last(x) ? DX_CHANNELS_LAST : DX_ROW_MAJOR;
}

/* dw = W(g, x) of shape w_shape, laid out as w (NULL: row-major). */
static mx_tensor *backward_weight(const mx_tensor *g, const mx_tensor *x, mx_shape w_shape, const mx_conv_params *p,
                                  const mx_tensor *w) {
  mx__args args = {.shape = w_shape, .conv = *p, .i = {w && mx__suggests_channels_last(w)}};
  return mx__call2(MX_OP_CONV_BACKWARD_WEIGHT, g, x, &args);
}

static mx_tensor *convolution(const mx_tensor *x, const mx_tensor *w, const mx_tensor *bias, const mx_conv_params *p) {
  mx__args args = {.conv = *p};
  return bias ? mx__call3(MX_OP_CONVOLUTION, x, w, bias, &args) : mx__call2(MX_OP_CONVOLUTION, x, w, &args);
}

/* The gradients of a convolution's weight and bias, given its output's g:
 * both from one kernel when the bias needs one (it then sums g per channel
 * in the pass that reads g for the weight), else the weight's alone. */
static mx_status weight_and_bias_grads(mx__bw *bw, mx_tensor *g, mx_tensor *x, const mx_tensor *w,
                                       const mx_conv_params *p) {
  if (!mx__needs_grad(bw, 2)) { /* no bias, or one that needs no gradient */
    GRAD(1, backward_weight(g, x, mx__in_shape(bw, 1), p, w));
    return MX_OK;
  }
  mx__args args = {.shape = mx__in_shape(bw, 1), .conv = *p, .i = {w && mx__suggests_channels_last(w)}};
  const mx_tensor *in[2] = {g, x};
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  if (!g || !x || mx__dispatch(MX_OP_CONV_BACKWARD_WEIGHT_BIAS, 2, in, &args, out) != MX_OK) return mx_last_status();
  if (mx__needs_grad(bw, 1)) bw->grad_in[1] = out[0];
  bw->grad_in[2] = out[1];
  return MX_OK;
}

mx_status mx__bwd_convolution(mx__bw *bw) {
  const mx_conv_params *p = &bw->args->conv;
  mx_tensor *x = mx__saved_in(bw, 0), *w = mx__saved_in(bw, 1);
  GRAD(0, backward_data(G, w, mx__in_shape(bw, 0), p, layout_of_input(x)));
  return weight_and_bias_grads(bw, G, x, w, p);
}

/* relu(convolution): the backend's fused kernel where it has one (the CPU:
 * oneDNN's ReLU post-op), else its convolution and its ReLU in turn. */
mx_status mx__fwd_conv2d_relu(mx__call *c) {
  static const char *const op = "mx_conv2d_relu";
  mx_tensor *x = c->in[0], *w = c->in[1], *bias = c->n_in > 2 ? c->in[2] : NULL;
  const mx_conv_params *p = &c->args->conv;
  mx_shape shape;
  if (forward_checks(op, x, w, &bias, p, &shape)) return mx_last_status();
  const mx_backend *be = mx__backend_of(c->op, x->device);
  bool fused = be && mx__backend_supports(be, MX_KERNEL_CONV_FORWARD_RELU, x->dtype) != MX_KERNEL_NOT_BUILT;
  bool usable = be && (fused ? mx__kernel_usable(c->op, be, MX_KERNEL_CONV_FORWARD_RELU, x->dtype)
                             : mx__kernel_usable(c->op, be, MX_KERNEL_CONV_FORWARD, x->dtype) &&
                                   mx__kernel_usable(c->op, be, MX_KERNEL_UNARY, x->dtype));
  mx_tensor *y = usable ? alloc_activation(op, shape, x, mx__suggests_channels_last(x)) : NULL;
  if (!y) return mx_last_status();
  c->out[0] = y;
  mx_kview yv = mx__kview_of(y), xv = mx__kview_of(x), wv = mx__kview_of(w), bv = bias ? mx__kview_of(bias) : xv;
  if (fused) return be->conv_forward_relu(&yv, &xv, &wv, bias ? &bv : NULL, p);
  mx_status status = be->conv_forward(&yv, &xv, &wv, bias ? &bv : NULL, p);
  return status != MX_OK ? status : be->unary(mx__ops[MX_OP_RELU].code, &yv, &yv, 0, 0);
}

/* ReLU's backward on the saved output (y > 0 exactly where the convolution
 * was), then the convolution's: the ops the unfused pair runs, so the same
 * gradients bit for bit. */
mx_status mx__bwd_conv2d_relu(mx__bw *bw) {
  const mx_conv_params *p = &bw->args->conv;
  mx_tensor *x = mx__saved_in(bw, 0), *w = mx__saved_in(bw, 1), *g = mx_relu_backward(G, mx__saved_out(bw, 0));
  if (!g) return mx_last_status();
  GRAD(0, backward_data(g, w, mx__in_shape(bw, 0), p, layout_of_input(x)));
  return weight_and_bias_grads(bw, g, x, w, p);
}

/* dx = B(g, w), linear in each: the adjoint in g is the forward, in w the
 * weight gradient with dx's cotangent standing in for x. */
mx_status mx__bwd_conv_backward_data(mx__bw *bw) {
  const mx_conv_params *p = &bw->args->conv;
  mx_tensor *g = mx__saved_in(bw, 0), *w = mx__saved_in(bw, 1);
  GRAD(0, convolution(G, w, NULL, p));
  GRAD(1, backward_weight(g, G, mx__in_shape(bw, 1), p, w));
  return MX_OK;
}

mx_status mx__bwd_conv_backward_weight(mx__bw *bw) {
  const mx_conv_params *p = &bw->args->conv;
  mx_tensor *g = mx__saved_in(bw, 0), *x = mx__saved_in(bw, 1);
  GRAD(0, convolution(x, G, NULL, p));
  GRAD(1, backward_data(g, G, mx__in_shape(bw, 1), p, DX_LIKE_G));
  return MX_OK;
}

/* (dw, db) = (W(g, x), g summed per channel): the adjoint in g is the
 * forward of x with dw's cotangent as the weight and db's as the bias (the
 * per-channel sum's adjoint broadcasts it), in x the input's gradient with
 * dw's cotangent as the weight. */
mx_status mx__bwd_conv_backward_weight_bias(mx__bw *bw) {
  const mx_conv_params *p = &bw->args->conv;
  mx_tensor *g = mx__saved_in(bw, 0), *x = mx__saved_in(bw, 1), *gw = bw->grad_out[0], *gb = bw->grad_out[1];
  GRAD(0, convolution(x, gw, gb, p));
  GRAD(1, backward_data(g, gw, mx__in_shape(bw, 1), p, DX_LIKE_G));
  return MX_OK;
}

/* A bias of shape (C) added along dim 1. */
static mx_tensor *add_bias(mx_tensor *y, const mx_tensor *bias) {
  if (!bias || !y) return y;
  mx_shape shape = {y->ndim, {0}};
  for (int d = 0; d < y->ndim; d++) shape.d[d] = d == 1 ? -1 : 1;
  return mx_add(y, mx_reshape(bias, shape));
}

mx_status mx__fwd_conv(mx__call *c) {
  return OUT0(c, convolution(c->in[0], c->in[1], c->n_in > 2 ? c->in[2] : NULL, &c->args->conv));
}

/* The transposed convolution is the gradient of a convolution with respect
 * to its input: weight (C_in, C_out / groups, *K) as PyTorch lays it out. */
mx_status mx__fwd_conv_transpose(mx__call *c) {
  mx_tensor *x = c->in[0], *w = c->in[1];
  const mx_conv_params *p = &c->args->conv;
  int n = p->spatial + 2;
  if (x->ndim != n || w->ndim != n || x->shape[1] != w->shape[0])
    return mx__error(MX_SHAPE_ERROR, "mx_conv_transpose: input with %lld channels and weight with %lld input channels "
                     "(both %d-d) do not fit", (long long)(x->ndim > 1 ? x->shape[1] : 0),
                     (long long)(w->ndim > 0 ? w->shape[0] : 0), n);
  mx_shape shape = {n, {x->shape[0]}};
  if (mx__mul_overflows(w->shape[1], p->groups, &shape.d[1]))
    return mx__error(MX_SHAPE_ERROR, "mx_conv_transpose: %lld output channels per group times %lld groups pass 2^63-1",
                     (long long)w->shape[1], (long long)p->groups);
  for (int i = 0; i < p->spatial; i++) {
    int64_t extra = c->args->i[i]; /* output_padding */
    if (extra < 0 || (extra >= p->stride[i] && extra >= p->dilation[i]))
      return mx__error(MX_INVALID_ARGUMENT, "mx_conv_transpose: output_padding %lld must be smaller than the stride "
                       "or the dilation", (long long)extra);
    /* (in - 1) * stride + dilation * (kernel - 1) + extra + 1 - 2 * padding: the sum before the padding is what
     * the backward-data kernel's check adds the padding back to, so it must fit too */
    int64_t size, reach, minus_twice_pad, *out = &shape.d[2 + i];
    if (mx__mul_overflows(x->shape[2 + i] - 1, p->stride[i], &size) ||
        mx__mul_overflows(p->dilation[i], w->shape[2 + i] - 1, &reach) || mx__add_overflows(size, reach, &size) ||
        mx__add_overflows(size, extra, &size) || mx__add_overflows(size, 1, &size) ||
        mx__mul_overflows(-2, p->padding[i], &minus_twice_pad) || mx__add_overflows(size, minus_twice_pad, out))
      return out_size_overflows("mx_conv_transpose", p, x->shape[2 + i], w->shape[2 + i], i);
  }
  return OUT0(c, add_bias(backward_data(x, w, shape, p, DX_LIKE_G), c->n_in > 2 ? c->in[2] : NULL));
}

/* --- public functions --------------------------------------------------------------------------- */

static mx_conv_params conv_params(int spatial, mx_shape stride, mx_shape padding, mx_shape dilation, int64_t groups) {
  mx_conv_params p = {.spatial = spatial, .groups = groups};
  for (int i = 0; i < spatial; i++) {
    p.stride[i] = stride.ndim == 0 ? 1 : stride.d[stride.ndim == 1 ? 0 : i];
    p.padding[i] = padding.ndim == 0 ? 0 : padding.d[padding.ndim == 1 ? 0 : i];
    p.dilation[i] = dilation.ndim == 0 ? 1 : dilation.d[dilation.ndim == 1 ? 0 : i];
  }
  return p;
}

static mx_tensor *dispatch_conv(mx_op op, const mx_tensor *x, const mx_tensor *w, const mx_tensor *bias,
                               const mx__args *args) {
  const mx_tensor *in[3] = {x, w, bias};
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  return mx__dispatch(op, bias ? 3 : 2, in, args, out) == MX_OK ? out[0] : NULL;
}

mx_tensor *mx_conv(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, int spatial, mx_shape stride,
                   mx_shape padding, mx_shape dilation, int64_t groups) {
  if (spatial < 1 || spatial > 3) {
    mx__error(MX_INVALID_ARGUMENT, "mx_conv: %d spatial dims (1 to 3 are supported)", spatial);
    return NULL;
  }
  mx__args args = {.conv = conv_params(spatial, stride, padding, dilation, groups)};
  return dispatch_conv(MX_OP_CONV, x, weight, bias, &args);
}

mx_tensor *mx_conv_transpose(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, int spatial,
                             mx_shape stride, mx_shape padding, mx_shape output_padding, mx_shape dilation,
                             int64_t groups) {
  if (spatial < 1 || spatial > 3) {
    mx__error(MX_INVALID_ARGUMENT, "mx_conv_transpose: %d spatial dims (1 to 3 are supported)", spatial);
    return NULL;
  }
  mx__args args = {.conv = conv_params(spatial, stride, padding, dilation, groups)};
  for (int i = 0; i < spatial; i++)
    args.i[i] = output_padding.ndim == 0 ? 0 : output_padding.d[output_padding.ndim == 1 ? 0 : i];
  return dispatch_conv(MX_OP_CONV_TRANSPOSE, x, weight, bias, &args);
}

/* conv1d ... conv_transpose3d: rows of their own (PyTorch's autocast names
 * them), bodies that call the rank-generic ops */
#define CONV_API(n)                                                                                           \
  mx_status mx__fwd_conv##n##d(mx__call *c) {                                                                \
    return OUT0(c, dispatch_conv(MX_OP_CONV, c->in[0], c->in[1], c->n_in > 2 ? c->in[2] : NULL, \
                                 c->args));                                                                   \
  }                                                                                                           \
  mx_status mx__fwd_conv_transpose##n##d(mx__call *c) {                                                      \
    return OUT0(c, dispatch_conv(MX_OP_CONV_TRANSPOSE, c->in[0], c->in[1], c->n_in > 2 ? c->in[2] : NULL,    \
                                 c->args));                                                                   \
  }                                                                                                           \
  mx_tensor *mx_conv##n##d(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, mx_shape stride, \
                           mx_shape padding, mx_shape dilation, int64_t groups) {                             \
    mx__args args = {.conv = conv_params(n, stride, padding, dilation, groups)};                              \
    return dispatch_conv(MX_OP_CONV##n##D, x, weight, bias, &args);                                           \
  }                                                                                                           \
  mx_tensor *mx_conv_transpose##n##d(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias,      \
                                     mx_shape stride, mx_shape padding, mx_shape output_padding,              \
                                     mx_shape dilation, int64_t groups) {                                     \
    mx__args args = {.conv = conv_params(n, stride, padding, dilation, groups)};                              \
    for (int i = 0; i < n; i++)                                                                               \
      args.i[i] = output_padding.ndim == 0 ? 0 : output_padding.d[output_padding.ndim == 1 ? 0 : i];          \
    return dispatch_conv(MX_OP_CONV_TRANSPOSE##n##D, x, weight, bias, &args);                                 \
  }
CONV_API(1)
CONV_API(2)
CONV_API(3)
#undef CONV_API

mx_tensor *mx_conv2d_relu(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, mx_shape stride,
                          mx_shape padding, mx_shape dilation, int64_t groups) {
  mx__args args = {.conv = conv_params(2, stride, padding, dilation, groups)};
  return dispatch_conv(MX_OP_CONV2D_RELU, x, weight, bias, &args);
}

/* --- conv2d, ReLU and max pooling as one op ----------------------------------------------------------------- */
/* The convolution's full-resolution output, and its gradient, exist only to be pooled and to come out of the
 * pooling's scatter: the backend's fused kernels keep both in their own layout (the CPU: oneDNN's blocked one),
 * and where a backend has none, or declines the case, the op runs the unfused kernels inside (the same bits). */

#define POOL_CHANNELS_LAST(args) ((args)->i[0]) /* x's layout, the full-resolution output's */
#define WANT_DX(args) ((args)->i[1])
#define WANT_DB(args) ((args)->i[2])

static const char *const conv_pool_op = "mx_conv2d_max_pool_relu";

mx_status mx__fwd_conv2d_max_pool_relu(mx__call *c) {
  mx_tensor *x = c->in[0], *w = c->in[1], *bias = c->n_in > 2 ? c->in[2] : NULL;
  const mx_conv_params *cp = &c->args->conv;
  mx_pool_params pp = c->args->pool;
  pp.relu = true;
  bool channels_last = POOL_CHANNELS_LAST(c->args);
  mx_shape full, pooled;
  if (forward_checks(conv_pool_op, x, w, &bias, cp, &full) || mx__pooled_shape(conv_pool_op, full, &pp, &pooled))
    return mx_last_status();
  const mx_backend *be = mx__backend_of(c->op, x->device);
  if (!be || !mx__kernel_usable(c->op, be, MX_KERNEL_CONV_FORWARD, x->dtype) ||
      !mx__kernel_usable(c->op, be, MX_KERNEL_MAX_POOL, x->dtype))
    return mx_last_status();
  mx_dtype index_dtype = mx__window_offsets_fit(&pp) ? MX_U8 : MX_I64;
  mx_tensor *y = c->out[0] = alloc_activation(conv_pool_op, pooled, x, channels_last);
  mx_tensor *indices = c->out[1] = channels_last && pooled.ndim == 4
                                       ? mx__tensor_alloc_channels_last(conv_pool_op, pooled, index_dtype, x->device)
                                       : mx__tensor_alloc(conv_pool_op, pooled, index_dtype, x->device);
  if (!y || !indices) return mx_last_status();
  mx_kview yv = mx__kview_of(y), iv = mx__kview_of(indices), xv = mx__kview_of(x), wv = mx__kview_of(w);
  mx_kview bv = bias ? mx__kview_of(bias) : xv;
  if (be->conv_max_pool_relu) {
    mx_status status = be->conv_max_pool_relu(&yv, &iv, &xv, &wv, bias ? &bv : NULL, cp, &pp, channels_last);
    if (status != MX_NOT_SUPPORTED) return status;
  }
  mx_tensor *t = alloc_activation(conv_pool_op, full, x, channels_last); /* the unfused kernels */
  if (!t) return mx_last_status();
  mx_kview tv = mx__kview_of(t);
  mx_status status = be->conv_forward(&tv, &xv, &wv, bias ? &bv : NULL, cp);
  return status != MX_OK ? status : be->max_pool(&yv, &iv, &tv, &pp);
}

/* All in the backward op, relu's mask (as max_pool_relu's backward) too: it goes with the unmasked gradient, and the
 * backend's kernel applies it as it reads the gradient, with no relu_backward pass over it. */
mx_status mx__bwd_conv2d_max_pool_relu(mx__bw *bw) {
  mx_tensor *x = mx__saved_in(bw, 0), *w = mx__saved_in(bw, 1), *y = mx__saved_out(bw, 0);
  mx_tensor *indices = mx__saved_out(bw, 1);
  if (!x || !w || !y || !indices) return mx_last_status();
  mx__args args = *bw->args;
  WANT_DX(&args) = mx__needs_grad(bw, 0);
  WANT_DB(&args) = mx__needs_grad(bw, 2);
  const mx_tensor *in[5] = {G, indices, x, w, y};
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  if (mx__dispatch(MX_OP_CONV2D_MAX_POOL_RELU_BACKWARD, 5, in, &args, out) != MX_OK) return mx_last_status();
  for (int i = 0; i < 3; i++)
    if (mx__needs_grad(bw, i)) bw->grad_in[i] = out[i];
  return MX_OK;
}

/* The full-resolution gradient of the forward's convolution output: g scattered by the indices. */
static mx_tensor *full_gradient(const mx_tensor *g, const mx_tensor *indices, const mx__args *forward, mx_shape full) {
  mx__args args = {.shape = full, .pool = forward->pool, .i = {POOL_CHANNELS_LAST(forward)}};
  args.pool.relu = false;
  return mx__call2(MX_OP_MAX_POOL_BACKWARD, g, indices, &args);
}

/* (dx, dw, db) from the unfused ops (run with grad off, inside the op) and g, the gradient with relu's mask applied
 * (NULL: relu_backward failed): max_pool_backward's scatter, then the convolution's gradients as
 * mx__bwd_convolution takes them. */
static mx_status conv_pool_backward_unfused(mx__call *c, mx_tensor *g, mx_shape full) {
  mx_tensor *indices = c->in[1], *x = c->in[2], *w = c->in[3];
  const mx_conv_params *cp = &c->args->conv;
  mx_tensor *dy = g ? full_gradient(g, indices, c->args, full) : NULL;
  if (!dy) return mx_last_status();
  mx_shape x_shape = mx_shape_get(x), w_shape = mx_shape_get(w);
  c->out[0] = WANT_DX(c->args) ? backward_data(dy, w, x_shape, cp, layout_of_input(x))
                               : mx_zeros(x_shape, x->dtype, x->device);
  if (WANT_DB(c->args)) {
    mx__args args = {.shape = w_shape, .conv = *cp};
    const mx_tensor *in[2] = {dy, x};
    if (mx__dispatch(MX_OP_CONV_BACKWARD_WEIGHT_BIAS, 2, in, &args, c->out + 1) != MX_OK) return mx_last_status();
  } else {
    c->out[1] = backward_weight(dy, x, w_shape, cp, NULL);
    c->out[2] = mx_zeros(MX_SHAPE(w->shape[0]), x->dtype, x->device);
  }
  return c->out[0] && c->out[1] && c->out[2] ? MX_OK : mx_last_status();
}

/* The backend's kernel masks g by relu's output y as it reads it where y is g's dtype and shape (any strides); else,
 * and where the kernel declines or the backend has none, relu_backward(g, y) runs first, as an op. */
mx_status mx__fwd_conv2d_max_pool_relu_backward(mx__call *c) {
  if (c->n_in < 5)
    return mx__error(MX_INVALID_ARGUMENT, "%s: its backward takes 5 inputs (grad, indices, x, weight, y), got %d",
                     conv_pool_op, c->n_in);
  mx_tensor *g = c->in[0], *indices = c->in[1], *x = c->in[2], *w = c->in[3], *y = c->in[4];
  const mx_conv_params *cp = &c->args->conv;
  bool channels_last = POOL_CHANNELS_LAST(c->args), want_dx = WANT_DX(c->args), want_db = WANT_DB(c->args);
  mx_shape full;
  mx_tensor *no_bias = NULL;
  if (forward_checks(conv_pool_op, x, w, &no_bias, cp, &full) || same_dtype(conv_pool_op, g, x))
    return mx_last_status();
  const mx_backend *be = mx__backend_of(c->op, x->device);
  if (!be) return mx_last_status();
  if (!be->conv_max_pool_relu_backward) return conv_pool_backward_unfused(c, mx_relu_backward(g, y), full);
  bool mask_fits = g->dtype == y->dtype && g->ndim == y->ndim;
  for (int d = 0; d < g->ndim && mask_fits; d++) mask_fits = g->shape[d] == y->shape[d];
  mx_tensor *masked = mask_fits ? NULL : mx_relu_backward(g, y);
  if (!mask_fits && !masked) return mx_last_status();
  mx_tensor *dx = c->out[0] = want_dx ? alloc_activation(conv_pool_op, mx_shape_get(x), x, channels_last)
                                      : mx_zeros(mx_shape_get(x), x->dtype, x->device);
  mx_tensor *dw = c->out[1] = mx__tensor_alloc(conv_pool_op, mx_shape_get(w), x->dtype, x->device);
  mx_tensor *db = c->out[2] = want_db ? mx__tensor_alloc(conv_pool_op, MX_SHAPE(w->shape[0]), x->dtype, x->device)
                                      : mx_zeros(MX_SHAPE(w->shape[0]), x->dtype, x->device);
  if (!dx || !dw || !db) return mx_last_status();
  mx_kview dxv = mx__kview_of(dx), dwv = mx__kview_of(dw), dbv = mx__kview_of(db);
  mx_kview gv = mx__kview_of(mask_fits ? g : masked), yv = mx__kview_of(y);
  mx_kview iv = mx__kview_of(indices), xv = mx__kview_of(x), wv = mx__kview_of(w);
  mx_status status = be->conv_max_pool_relu_backward(want_dx ? &dxv : NULL, &dwv, want_db ? &dbv : NULL, &gv,
                                                      mask_fits ? &yv : NULL, &iv, &xv, &wv, cp, &c->args->pool,
                                                      channels_last);
  if (status != MX_NOT_SUPPORTED) return status;
  for (int i = 0; i < 3; i++) c->out[i] = NULL; /* in the call's scope, which frees them */
  return conv_pool_backward_unfused(c, masked ? masked : mx_relu_backward(g, y), full);
}

/* dx = B(S(M(g)), w), dw = W(S(M(g)), x), db = sum of S(M(g)), M relu_backward's mask by y and S max_pool_backward's
 * scatter (both linear in g): the adjoint in g gathers, at the maxima, the forward of dx's cotangent through w plus
 * that of x through dw's cotangent with db's as the bias (mx__bwd_conv_backward_data's and
 * mx__bwd_conv_backward_weight_bias's), then masks it (relu_backward's own adjoint); in x and in w as theirs, of
 * M(g). y, a mask only, gets no gradient, as relu_backward's mask gets none. */
mx_status mx__bwd_conv2d_max_pool_relu_backward(mx__bw *bw) {
  const mx_conv_params *cp = &bw->args->conv;
  mx_tensor *g = mx__saved_in(bw, 0), *indices = mx__saved_in(bw, 1), *x = mx__saved_in(bw, 2);
  mx_tensor *w = mx__saved_in(bw, 3), *y = mx__saved_in(bw, 4);
  mx_tensor *gdx = bw->grad_out[0], *gdw = bw->grad_out[1], *gdb = bw->grad_out[2];
  if (!g || !indices || !x || !w || !y) return mx_last_status();
  bool want_dx = WANT_DX(bw->args), want_db = WANT_DB(bw->args);
  mx_shape full;
  if (conv_out_shape(conv_pool_op, x, w, cp, &full)) return mx_last_status();
  if (mx__needs_grad(bw, 0)) {
    mx_tensor *through_w = convolution(x, gdw, want_db ? gdb : NULL, cp);
    mx_tensor *sum = want_dx ? mx_add(convolution(gdx, w, NULL, cp), through_w) : through_w;
    GRAD(0, mx_relu_backward(mx__max_pool_gather(sum, indices, &bw->args->pool, full), y));
  }
  if (!mx__needs_grad(bw, 2) && !mx__needs_grad(bw, 3)) return MX_OK;
  mx_tensor *dy = full_gradient(mx_relu_backward(g, y), indices, bw->args, full);
  GRAD(2, backward_data(dy, gdw, mx_shape_get(x), cp, DX_LIKE_G));
  GRAD(3, want_dx ? backward_weight(dy, gdx, mx_shape_get(w), cp, NULL)
                  : mx_zeros(mx_shape_get(w), w->dtype, w->device));
  return MX_OK;
}

mx_status mx__conv2d_max_pool_relu(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, mx_shape stride,
                                   mx_shape padding, mx_shape dilation, int64_t groups, mx_shape kernel,
                                   mx_shape pool_stride, mx_shape pool_padding, mx_shape pool_dilation, mx_tensor **y,
                                   mx_tensor **indices) {
  if (y) *y = NULL;
  if (indices) *indices = NULL;
  if (kernel.ndim < 1)
    return mx__error(MX_INVALID_ARGUMENT, "%s: a pooling kernel size is needed", conv_pool_op);
  mx__args args = {.conv = conv_params(2, stride, padding, dilation, groups), .pool = {.spatial = 2}};
  for (int i = 0; i < 2; i++) {
    args.pool.kernel[i] = kernel.d[kernel.ndim == 1 ? 0 : i];
    args.pool.stride[i] = pool_stride.ndim == 0 ? args.pool.kernel[i] : pool_stride.d[pool_stride.ndim == 1 ? 0 : i];
    args.pool.padding[i] = pool_padding.ndim == 0 ? 0 : pool_padding.d[pool_padding.ndim == 1 ? 0 : i];
    args.pool.dilation[i] = pool_dilation.ndim == 0 ? 1 : pool_dilation.d[pool_dilation.ndim == 1 ? 0 : i];
  }
  POOL_CHANNELS_LAST(&args) = x && mx__suggests_channels_last(x);
  const mx_tensor *in[3] = {x, weight, bias};
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  mx_status status = mx__dispatch(MX_OP_CONV2D_MAX_POOL_RELU, bias ? 3 : 2, in, &args, out);
  if (y) *y = out[0];
  else mx_release(out[0]);
  if (indices) *indices = out[1];
  else mx_release(out[1]);
  return status;
}
