/* Normalisation: batch_norm (with running statistics) over its primitives,
 * batch_norm_relu (relu fused into them), layer_norm and group_norm as
 * composites. Optional tensors (weight, bias, running statistics) are
 * passed only when given; args.i[0] says which. Batch norm keeps a
 * channels-last input's layout in its output and input gradient. */
#include "ops/op_table.h"

enum { HAS_WEIGHT = 1, HAS_BIAS = 2, HAS_RUNNING_MEAN = 4, HAS_RUNNING_VAR = 8 };

/* The optional input with flag `which`, or NULL. */
static mx_tensor *optional(mx__call *c, int which) {
  int mask = (int)c->args->i[0], k = 1;
  for (int bit = 1; bit < which; bit <<= 1) k += (mask & bit) != 0;
  return mask & which ? c->in[k] : NULL;
}

/* Normalising needs a float input (PyTorch's kernels refuse the others). */
static mx_status require_float(const char *op, const mx_tensor *x) {
  if (mx_dtype_is_floating(x->dtype)) return MX_OK;
  return mx__error(MX_DTYPE_ERROR, "%s: input dtype %s is not floating; convert it first", op,
                   mx_dtype_name(x->dtype));
}

/* A per-channel vector viewed as (1, C, 1, ...) to broadcast over x. */
static mx_tensor *per_channel(const mx_tensor *v, int ndim) {
  mx_shape shape = {ndim, {0}};
  for (int d = 0; d < ndim; d++) shape.d[d] = d == 1 ? -1 : 1;
  return mx_reshape(v, shape);
}

static mx_tensor *affine(mx_tensor *y, const mx_tensor *weight, const mx_tensor *bias, int ndim, bool channels) {
  if (weight) y = mx_mul(y, channels ? per_channel(weight, ndim) : (mx_tensor *)weight);
  if (bias) y = mx_add(y, channels ? per_channel(bias, ndim) : (mx_tensor *)bias);
  return y;
}

/* Batch norm: computed as PyTorch's CUDA kernels split it (batch_norm_stats,
 * batch_norm_elemt):
 *
 *   batch_norm_stats(x) -> (mean, var)
 *   invstd = rsqrt(var + eps)                               (C) ops
 *   batch_norm_elemt(x, mean, invstd, weight, bias) -> y    saves its inputs
 *
 * With the batch's statistics (training) the three run inside one primitive,
 * batch_norm_training -> (y, mean, var), whose node saves x, y and vectors
 * of C (a composite of elementwise ops held x - mean and the normalised x as
 * well) and whose backward is the whole chain's (one pass for x's gradient,
 * where a node per step gave two and an add). In eval mode the statistics
 * are the running ones and need no gradient: elemt's node alone. Each
 * formula is its own op's exact gradient, so gradients of gradients need
 * nothing more. */

/* The statistics' dtype: float32 for 16- and 32-bit floats, as PyTorch's saved mean and invstd. */
static mx_dtype stats_dtype(mx_dtype x) { return x == MX_F64 ? MX_F64 : MX_F32; }

/* The values per channel of an input of shape s. */
static double per_channel_count(mx_shape s) {
  double n = 1;
  for (int d = 0; d < s.ndim; d++)
    if (d != 1) n *= (double)s.d[d];
  return n;
}

/* The kernels' view of t, in the layout mx__tensor_in_layout gave it: a channels-last
 * (N, C, H, W) tensor as the contiguous (N H W, C) matrix its memory is,
 * which the per-channel kernels read as a batch of N H W vectors of C
 * (every backend's kernels take that shape as they are). */
static mx_kview channel_view(const mx_tensor *t, bool channels_last) {
  mx_kview v = mx__kview_of(t);
  if (!channels_last) return v;
  int64_t pixels = v.shape[0] * v.shape[2] * v.shape[3], channels = v.shape[1];
  v.ndim = 2;
  v.shape[0] = pixels, v.shape[1] = channels;
  v.strides[0] = channels, v.strides[1] = 1;
  return v;
}

/* Whether mask (relu's output, for relu's backward of t, its gradient:
 * the same shape) can ride along in a kernel reading t: t's dtype. */
static bool mask_fits(const mx_tensor *mask, const mx_tensor *t) { return !mask || mask->dtype == t->dtype; }

/* x * scale[c] + shift[c] in dtype (the backend's channel_affine without a center),
 * x taken as relu_backward(x, mask) with a mask and the result through
 * relu with relu, laid out as like (the input batch norm normalises):
 * one kernel pass where the backend has it, the dtypes are its own and
 * nothing records (a backward that builds a graph for double backward
 * takes the ops, whose arithmetic it repeats). */
static mx_tensor *channel_affine(mx_op op, mx_tensor *x, mx_tensor *scale, mx_tensor *shift, mx_dtype dtype,
                                 mx_tensor *mask, bool relu, const mx_tensor *like) {
  const mx_backend *be = mx__backend_of(op, x->device);
  if (!be || !scale || !shift) return NULL;
  mx_dtype stats = stats_dtype(x->dtype);
  if (be->channel_affine && !mx_is_grad_enabled() && mx_dtype_is_floating(x->dtype) && x->dtype == dtype &&
      scale->dtype == stats && shift->dtype == stats && mask_fits(mask, x)) {
    const char *name = mx__ops[op].api_name;
    bool cl = mx__suggests_channels_last(like) && x->ndim == 4;
    mx_tensor *xc = mx__tensor_in_layout(name, x, cl), *mc = mask ? mx__tensor_in_layout(name, mask, cl) : NULL;
    mx_tensor *sc = mx__tensor_contiguous(scale), *sh = mx__tensor_contiguous(shift);
    mx_tensor *y = NULL;
    if (xc && sc && sh && (!mask || mc))
      y = cl ? mx__tensor_alloc_channels_last(name, mx_shape_get(x), dtype, x->device)
             : mx__tensor_alloc(name, mx_shape_get(x), dtype, x->device);
    if (!y) return NULL;
    mx_kview yv = channel_view(y, cl), xv = channel_view(xc, cl), scv = mx__kview_of(sc), shv = mx__kview_of(sh);
    mx_kview mv = mc ? channel_view(mc, cl) : xv;
    return be->channel_affine(&yv, &xv, NULL, &scv, &shv, mc ? &mv : NULL, relu) == MX_OK ? y : NULL;
  }
  if (mask) x = mx_relu_backward(x, mask);
  mx_tensor *y = x ? mx_add(mx_mul(x, per_channel(scale, x->ndim)), per_channel(shift, x->ndim)) : NULL;
  y = y && y->dtype != dtype ? mx_to_dtype(y, dtype) : y;
  return relu ? mx_relu(y) : y;
}

/* A contiguous (C) tensor's view, or NULL for none. */
static const mx_kview *vector_view(mx_kview *v, const mx_tensor *t) {
  if (!t) return NULL;
  *v = mx__kview_of(t);
  return v;
}

/* The backend's per-channel sums (its channel_sums) of a, and of
 * (a - a_center)(b - b_center) when dot is wanted, as (C) vectors in the
 * statistics' dtype (NULL on failure), a taken as relu_backward(a, a_mask)
 * with a mask. False when the backend has no such kernel, an input is not
 * one it takes, or the caller records a graph (a backward building one for
 * double backward): the caller takes the ops. */
static bool channel_sums(mx_op op, const mx_tensor *a, const mx_tensor *b, const mx_tensor *a_center,
                         const mx_tensor *b_center, const mx_tensor *a_mask, mx_tensor **sum, mx_tensor **dot) {
  const mx_backend *be = mx__backend_of(op, a->device);
  mx_dtype dtype = stats_dtype(a->dtype);
  if (!be || !be->channel_sums || mx_is_grad_enabled() || !mx_dtype_is_floating(a->dtype) ||
      (dot && b->dtype != a->dtype) || (a_center && a_center->dtype != dtype) ||
      (b_center && b_center->dtype != dtype) || !mask_fits(a_mask, a))
    return false;
  const char *name = mx__ops[op].api_name;
  /* one layout for the three: channels-last where a or b is */
  bool cl = a->ndim == 4 && (mx__suggests_channels_last(a) || (dot && mx__suggests_channels_last(b)));
  mx_tensor *ac = mx__tensor_in_layout(name, a, cl), *bc = dot ? mx__tensor_in_layout(name, b, cl) : NULL;
  mx_tensor *mc = a_mask ? mx__tensor_in_layout(name, a_mask, cl) : NULL;
  mx_tensor *s = sum ? mx__tensor_alloc(name, MX_SHAPE(a->shape[1]), dtype, a->device) : NULL;
  mx_tensor *d = dot ? mx__tensor_alloc(name, MX_SHAPE(a->shape[1]), dtype, a->device) : NULL;
  if (ac && (!dot || (bc && d)) && (!sum || s) && (!a_mask || mc)) {
    mx_kview v[4], av = channel_view(ac, cl), bv = bc ? channel_view(bc, cl) : av, mv = mc ? channel_view(mc, cl) : av;
    if (be->channel_sums(vector_view(&v[0], s), vector_view(&v[1], d), &av, bc ? &bv : NULL,
                         vector_view(&v[2], a_center), vector_view(&v[3], b_center), mc ? &mv : NULL) != MX_OK)
      s = d = NULL;
  } else {
    s = d = NULL;
  }
  if (sum) *sum = s;
  if (dot) *dot = d;
  return true;
}

/* mean and biased variance per channel, in the statistics' dtype, as (C) vectors: the
 * backend's channel_moments in one read of x (16-bit x widened exactly, sums in double shifted
 * by a value of the data), or two passes of ops (centred before squaring) for precision. */
mx_status mx__fwd_batch_norm_stats(mx__call *c) {
  mx_tensor *x = c->in[0];
  double n = per_channel_count(mx_shape_get(x));
  const mx_backend *be = mx__backend_of(c->op, x->device);
  if (!be) return mx_last_status();
  if (be->channel_moments) { /* a forward records nothing: no graph to build */
    const char *name = mx__ops[c->op].api_name;
    bool cl = mx__suggests_channels_last(x);
    mx_tensor *xc = mx__tensor_in_layout(name, x, cl);
    c->out[0] = mx__tensor_alloc(name, MX_SHAPE(x->shape[1]), stats_dtype(x->dtype), x->device);
    c->out[1] = mx__tensor_alloc(name, MX_SHAPE(x->shape[1]), stats_dtype(x->dtype), x->device);
    if (!xc || !c->out[0] || !c->out[1]) return mx_last_status();
    mx_kview mean = mx__kview_of(c->out[0]), var = mx__kview_of(c->out[1]), xv = channel_view(xc, cl);
    return be->channel_moments(&mean, &var, &xv);
  }
  mx_shape dims = mx__all_but_channels(x->ndim);
  mx_tensor *mean = mx_div_scalar(mx_sum_dtype(x, dims, true, stats_dtype(x->dtype)), n);
  mx_tensor *centered = mx_sub(x, mean);
  c->out[0] = mx_reshape(mean, MX_SHAPE(-1));
  c->out[1] = mx_div_scalar(mx_sum(mx_mul(centered, centered), dims, false), n);
  return c->out[0] && c->out[1] ? MX_OK : mx_last_status();
}

/* y = x scale + shift with scale = weight invstd, shift = bias - mean scale, in args.dtype:
 * what the elementwise ops would give; then relu(y) for batch_norm_elemt_relu. */
static mx_status elemt_forward(mx__call *c, bool relu) {
  mx_tensor *x = c->in[0], *mean = c->in[1], *invstd = c->in[2], *weight = c->in[3], *bias = c->in[4];
  mx_tensor *scale = mx_mul(weight, invstd);
  mx_tensor *shift = scale ? mx_sub(bias, mx_mul(mean, scale)) : NULL;
  return OUT0(c, channel_affine(c->op, x, scale, shift, c->args->dtype, NULL, relu, x));
}

mx_status mx__fwd_batch_norm_elemt(mx__call *c) { return elemt_forward(c, false); }
mx_status mx__fwd_batch_norm_elemt_relu(mx__call *c) { return elemt_forward(c, true); }

/* With g the gradient, or relu_backward(gradient, y) given relu's output y (mask), and
 * xc = x - mean: dx = g weight invstd, dmean = -sum(g) weight invstd, dinvstd = sum(g xc) weight,
 * dweight = sum(g xc) invstd, dbias = sum(g), the sums over every dim but the channels in the
 * statistics' dtype; each only when needed. The kernels read the mask where they read the
 * gradient; the ops make g first. */
static mx_status elemt_backward(mx__bw *bw, mx_tensor *mask) {
  int ndim = mx__in_shape(bw, 0).ndim;
  mx_shape dims = mx__all_but_channels(ndim);
  mx_tensor *x = mx__saved_in(bw, 0), *mean = mx__saved_in(bw, 1), *invstd = mx__saved_in(bw, 2);
  mx_tensor *weight = mx__saved_in(bw, 3);
  mx_tensor *scale = mx_mul(weight, invstd);
  bool want_g = mx__needs_grad(bw, 1) || mx__needs_grad(bw, 4);
  bool want_gxc = mx__needs_grad(bw, 2) || mx__needs_grad(bw, 3);
  mx_tensor *sum_g = NULL, *sum_gxc = NULL;
  if ((want_g || want_gxc) && x && mean &&
      !channel_sums(bw->op, G, x, NULL, mean, mask, &sum_g, want_gxc ? &sum_gxc : NULL)) {
    mx_tensor *g = mask ? mx_relu_backward(G, mask) : G;
    if (want_g) sum_g = g ? mx_sum_dtype(g, dims, false, stats_dtype(g->dtype)) : NULL;
    if (want_gxc) sum_gxc = mx_sum(mx_mul(g, mx_sub(x, per_channel(mean, ndim))), dims, false);
  }
  if (mx__needs_grad(bw, 0)) { /* g scale + (-0): the product's bits, -0 kept */
    mx_tensor *minus_zero = scale ? mx_full_like(scale, -0.0) : NULL;
    GRAD(0, x ? channel_affine(bw->op, G, scale, minus_zero, G->dtype, mask, false, x) : NULL);
  }
  GRAD(1, mx_neg(mx_mul(sum_g, scale)));
  GRAD(2, mx_mul(sum_gxc, weight));
  GRAD(3, mx_mul(sum_gxc, invstd));
  GRAD(4, sum_g);
  return MX_OK;
}

mx_status mx__bwd_batch_norm_elemt(mx__bw *bw) { return elemt_backward(bw, NULL); }

mx_status mx__bwd_batch_norm_elemt_relu(mx__bw *bw) {
  mx_tensor *y = mx__saved_out(bw, 0);
  return y ? elemt_backward(bw, y) : mx_last_status();
}

/* --- batch norm with its batch's statistics as one primitive --------------------------------------------- */
/* batch_norm_training (ops/ops.def) is the pair above as one node: the same forward, and a backward that chains
 * elemt's formula through the statistics' and rsqrt's itself, so x's gradient is one pass over the gradient and x
 * (the backend's channel_combine) where the pair's two nodes gave two passes and autograd's add a third. */
#define TRAINING_RELU(args) ((args)->i[1])
#define TRAINING_EPS(args) ((args)->f[1])

/* The running statistics batch_norm hands batch_norm_training's forward (args.ptr; NULL: none) to update in the
 * backend's one pass over the coefficient vectors; updated says whether it did (else batch_norm runs the ops). */
typedef struct {
  mx_tensor *mean, *var;
  double momentum;
  bool updated;
} running_stats;

/* t as batch_norm_vectors takes an input: a contiguous (C) vector (t, or a copy) when it is of dtype on device,
 * else NULL (the caller takes the ops). */
static mx_tensor *vector_input(const mx_tensor *t, mx_dtype dtype, mx_device device) {
  return t && t->dtype == dtype && t->device == device ? mx__tensor_contiguous(t) : NULL;
}

/* Whether the running statistics can be updated in place by batch_norm_vectors: contiguous (C) vectors of dtype on
 * device, as the ops' result would be before mx_copy_ stored it, each in a storage of its own (no channel's write
 * reaches a value another channel reads). */
static bool running_fits(const running_stats *r, mx_dtype dtype, mx_device device, int64_t channels,
                         const mx_tensor *weight, const mx_tensor *bias) {
  const mx_tensor *t[2] = {r->mean, r->var};
  for (int k = 0; k < 2; k++)
    if (t[k]->dtype != dtype || t[k]->device != device || t[k]->ndim != 1 || t[k]->shape[0] != channels ||
        (channels > 1 && t[k]->strides[0] != 1) || t[k]->storage == weight->storage ||
        t[k]->storage == bias->storage)
      return false;
  return r->mean->storage != r->var->storage;
}

/* invstd = rsqrt(var + eps), scale = weight invstd and shift = bias - mean scale as (C) vectors in the statistics'
 * dtype, with the running statistics' update (c->args->ptr) where it fits: the backend's batch_norm_vectors in one
 * pass, where it has one, the vectors are of its dtype and nothing records. False: the caller takes the ops. */
static bool forward_vectors(mx__call *c, mx_tensor *mean, mx_tensor *var, mx_tensor **scale, mx_tensor **shift) {
  mx_tensor *x = c->in[0];
  const mx_backend *be = mx__backend_of(c->op, x->device);
  if (!be || !be->batch_norm_vectors || mx_is_grad_enabled()) return false;
  mx_dtype dtype = stats_dtype(x->dtype);
  mx_tensor *in[4] = {vector_input(mean, dtype, x->device), vector_input(var, dtype, x->device),
                      vector_input(c->in[1], dtype, x->device), vector_input(c->in[2], dtype, x->device)};
  if (!in[0] || !in[1] || !in[2] || !in[3]) return false;
  const char *name = mx__ops[c->op].api_name;
  int64_t channels = mx_numel(var);
  *scale = mx__tensor_alloc(name, MX_SHAPE(channels), dtype, x->device);
  *shift = mx__tensor_alloc(name, MX_SHAPE(channels), dtype, x->device);
  running_stats *running = c->args->ptr;
  bool update = running && running_fits(running, dtype, x->device, channels, c->in[1], c->in[2]);
  mx_kview v[8];
  mx_bn_vectors vectors = {.mean = vector_view(&v[0], in[0]), .var = vector_view(&v[1], in[1]),
                           .weight = vector_view(&v[2], in[2]), .bias = vector_view(&v[3], in[3]),
                           .running_mean = update ? vector_view(&v[4], running->mean) : NULL,
                           .running_var = update ? vector_view(&v[5], running->var) : NULL,
                           .scale = vector_view(&v[6], *scale), .shift = vector_view(&v[7], *shift),
                           .eps = TRAINING_EPS(c->args), .momentum = running ? running->momentum : 0,
                           .count = per_channel_count(mx_shape_get(x))};
  if (!*scale || !*shift || be->batch_norm_vectors(MX_BN_VECTORS_FORWARD, &vectors) != MX_OK) {
    *scale = *shift = NULL;
    return true;
  }
  if (update) { /* written in place, as mx_copy_ would have: the versions move on */
    mx__bump_version(running->mean);
    mx__bump_version(running->var);
    running->updated = true;
  }
  return true;
}

mx_status mx__fwd_batch_norm_training(mx__call *c) {
  mx_tensor *x = c->in[0], *weight = c->in[1], *bias = c->in[2];
  mx_tensor *stats[MX__MAX_OUTPUTS] = {0};
  mx_status status = mx__dispatch(MX_OP_BATCH_NORM_STATS, 1, (const mx_tensor *const[]){x}, NULL, stats);
  if (status != MX_OK) return status;
  mx_tensor *scale = NULL, *shift = NULL;
  if (!forward_vectors(c, stats[0], stats[1], &scale, &shift)) {
    mx_tensor *invstd = mx_rsqrt(mx_add_scalar(stats[1], TRAINING_EPS(c->args)));
    scale = mx_mul(weight, invstd); /* elemt_forward's arithmetic, so its bits */
    shift = scale ? mx_sub(bias, mx_mul(stats[0], scale)) : NULL;
  }
  c->out[0] = channel_affine(c->op, x, scale, shift, c->args->dtype, NULL, TRAINING_RELU(c->args), x);
  c->out[1] = stats[0], c->out[2] = stats[1];
  return c->out[0] ? MX_OK : mx_last_status();
}

/* a scale_a + (b - center_b) scale_b + shift in a's dtype, laid out as b, a taken as relu_backward(a, a_mask) with
 * a mask: the backend's channel_combine in one pass where it has one, the dtypes are its own and nothing records
 * (a backward building a graph for double backward); else the ops. */
static mx_tensor *combine(mx_op op, mx_tensor *a, mx_tensor *b, mx_tensor *scale_a, mx_tensor *center_b,
                          mx_tensor *scale_b, mx_tensor *shift, mx_tensor *a_mask) {
  const mx_backend *be = mx__backend_of(op, a->device);
  if (!be || !scale_a || !center_b || !scale_b || !shift) return NULL;
  mx_dtype stats = stats_dtype(a->dtype);
  if (be->channel_combine && !mx_is_grad_enabled() && mx_dtype_is_floating(a->dtype) && b->dtype == a->dtype &&
      scale_a->dtype == stats && center_b->dtype == stats && scale_b->dtype == stats && shift->dtype == stats &&
      mask_fits(a_mask, a)) {
    const char *name = mx__ops[op].api_name;
    bool cl = mx__suggests_channels_last(b) && b->ndim == 4;
    mx_tensor *ac = mx__tensor_in_layout(name, a, cl), *bc = mx__tensor_in_layout(name, b, cl);
    mx_tensor *mc = a_mask ? mx__tensor_in_layout(name, a_mask, cl) : NULL;
    mx_tensor *v[4] = {mx__tensor_contiguous(scale_a), mx__tensor_contiguous(center_b),
                       mx__tensor_contiguous(scale_b), mx__tensor_contiguous(shift)};
    mx_tensor *y = NULL;
    if (ac && bc && (!a_mask || mc) && v[0] && v[1] && v[2] && v[3])
      y = cl ? mx__tensor_alloc_channels_last(name, mx_shape_get(b), a->dtype, a->device)
             : mx__tensor_alloc(name, mx_shape_get(b), a->dtype, a->device);
    if (!y) return NULL;
    mx_kview yv = channel_view(y, cl), av = channel_view(ac, cl), bv = channel_view(bc, cl);
    mx_kview mv = mc ? channel_view(mc, cl) : av, vv[4];
    for (int k = 0; k < 4; k++) vv[k] = mx__kview_of(v[k]);
    return be->channel_combine(&yv, &av, &bv, &vv[0], &vv[1], &vv[2], &vv[3], mc ? &mv : NULL) == MX_OK ? y : NULL;
  }
  int ndim = a->ndim;
  mx_tensor *g = a_mask ? mx_relu_backward(a, a_mask) : a;
  mx_tensor *p = g ? mx_mul(g, per_channel(scale_a, ndim)) : NULL;
  mx_tensor *q = mx_mul(mx_sub(b, per_channel(center_b, ndim)), per_channel(scale_b, ndim));
  mx_tensor *y = p && q ? mx_add(mx_add(p, q), per_channel(shift, ndim)) : NULL;
  return y && y->dtype != a->dtype ? mx_to_dtype(y, a->dtype) : y;
}

/* The backward's (C) vectors in the statistics' dtype, the ops' formulas below: dweight = sum_gxc invstd, and with
 * want_dx scale, xc_scale and shift (the mean and var outputs' gradients from bw): the backend's batch_norm_vectors
 * in one pass, where it has one, the vectors are of its dtype and nothing records (a backward building a graph for
 * double backward takes the ops). False: the caller takes the ops. */
static bool backward_vectors(mx__bw *bw, mx_tensor *var, mx_tensor *weight, mx_tensor *sum_g, mx_tensor *sum_gxc,
                             bool want_dx, mx_tensor **dweight, mx_tensor **scale, mx_tensor **xc_scale,
                             mx_tensor **shift) {
  const mx_backend *be = mx__backend_of(bw->op, var->device);
  if (!be || !be->batch_norm_vectors || mx_is_grad_enabled() || !sum_gxc || (want_dx && !sum_g)) return false;
  mx_dtype dtype = var->dtype;
  mx_device device = var->device;
  mx_tensor *in[6] = {vector_input(var, dtype, device), vector_input(sum_gxc, dtype, device), NULL, NULL, NULL, NULL};
  if (want_dx) {
    in[2] = vector_input(weight, dtype, device), in[3] = vector_input(sum_g, dtype, device);
    in[4] = vector_input(bw->grad_out[1], dtype, device), in[5] = vector_input(bw->grad_out[2], dtype, device);
  }
  for (int k = 0; k < (want_dx ? 6 : 2); k++)
    if (!in[k]) return false;
  const char *name = mx__ops[bw->op].api_name;
  int64_t channels = mx_numel(var);
  mx_tensor **out[4] = {dweight, scale, xc_scale, shift};
  bool failed = false;
  for (int k = 0; k < (want_dx ? 4 : 1); k++)
    failed |= !(*out[k] = mx__tensor_alloc(name, MX_SHAPE(channels), dtype, device));
  mx_kview v[10];
  mx_bn_vectors vectors = {.var = vector_view(&v[0], in[0]), .sum_gxc = vector_view(&v[1], in[1]),
                           .weight = vector_view(&v[2], in[2]), .sum_g = vector_view(&v[3], in[3]),
                           .grad_mean = vector_view(&v[4], in[4]), .grad_var = vector_view(&v[5], in[5]),
                           .dweight = vector_view(&v[6], *dweight), .scale = vector_view(&v[7], *scale),
                           .xc_scale = vector_view(&v[8], *xc_scale), .shift = vector_view(&v[9], *shift),
                           .eps = TRAINING_EPS(bw->args), .count = per_channel_count(mx__in_shape(bw, 0))};
  if (failed || be->batch_norm_vectors(MX_BN_VECTORS_BACKWARD, &vectors) != MX_OK)
    *dweight = *scale = *xc_scale = *shift = NULL;
  return true;
}

/* With g the gradient (relu_backward(gradient, y) for the relu variant), xc = x - mean, invstd = rsqrt(var + eps),
 * n values per channel, sum_g = sum of g and sum_gxc = sum of g xc per channel, and gmean, gvar the gradients of
 * the mean and var outputs (zeros unless a graph used them; the running statistics take them outside any):
 *   dweight = sum_gxc invstd, dbias = sum_g,
 *   dx = g w invstd + xc (2 gvar - w invstd^2 dweight) / n + (gmean - w invstd sum_g) / n,
 * elemt's formula chained through rsqrt's and the statistics' (whose dependence of var on the mean sums to zero).
 * Without a graph to record: one channel_sums pass and one channel_combine pass. Recording one (double backward),
 * the same with ops, mean and var leading back to this node (saved outputs), so gradients of gradients are exact. */
mx_status mx__bwd_batch_norm_training(mx__bw *bw) {
  mx_shape shape = mx__in_shape(bw, 0);
  double n = per_channel_count(shape);
  mx_tensor *x = mx__saved_in(bw, 0), *weight = mx__saved_in(bw, 1);
  mx_tensor *mean = mx__saved_out(bw, 1), *var = mx__saved_out(bw, 2);
  mx_tensor *mask = TRAINING_RELU(bw->args) ? mx__saved_out(bw, 0) : NULL;
  if (!x || !weight || !mean || !var || (TRAINING_RELU(bw->args) && !mask)) return mx_last_status();
  bool want_dx = mx__needs_grad(bw, 0), want_gxc = want_dx || mx__needs_grad(bw, 1);
  mx_tensor *sum_g = NULL, *sum_gxc = NULL;
  if (!channel_sums(bw->op, G, x, NULL, mean, mask, &sum_g, want_gxc ? &sum_gxc : NULL)) {
    mx_shape dims = mx__all_but_channels(shape.ndim);
    mx_tensor *g = mask ? mx_relu_backward(G, mask) : G;
    sum_g = g ? mx_sum_dtype(g, dims, false, stats_dtype(g->dtype)) : NULL;
    if (want_gxc) sum_gxc = mx_sum(mx_mul(g, mx_sub(x, per_channel(mean, shape.ndim))), dims, false);
  }
  mx_tensor *dweight = NULL, *scale = NULL, *xc_scale = NULL, *shift = NULL;
  if (want_gxc && !backward_vectors(bw, var, weight, sum_g, sum_gxc, want_dx, &dweight, &scale, &xc_scale, &shift)) {
    mx_tensor *invstd = mx_rsqrt(mx_add_scalar(var, TRAINING_EPS(bw->args)));
    dweight = mx_mul(sum_gxc, invstd);
    if (want_dx) { /* the (C) coefficients in 7 ops more */
      scale = mx_mul(weight, invstd);
      xc_scale = mx_add_scaled(mx_mul_scalar(bw->grad_out[2], 2 / n), mx_mul(mx_mul(scale, invstd), dweight), -1 / n);
      shift = mx_add_scaled(mx_mul_scalar(bw->grad_out[1], 1 / n), mx_mul(scale, sum_g), -1 / n);
    }
  }
  GRAD(1, dweight);
  GRAD(2, sum_g);
  if (!want_dx) return MX_OK;
  GRAD(0, combine(bw->op, G, x, scale, mean, xc_scale, shift, mask));
  return MX_OK;
}

/* A per-channel input of op as a (C) vector, or an error naming it. */
static mx_tensor *channels(const char *op, const mx_tensor *t, int64_t n_channels, const char *what) {
  if (mx_numel(t) == n_channels) return mx_reshape(t, MX_SHAPE(-1));
  mx__error(MX_SHAPE_ERROR, "%s: %s has %lld elements, expected one per channel (%lld)", op, what,
            (long long)mx_numel(t), (long long)n_channels);
  return NULL;
}

/* batch_norm, or batch_norm_relu: the statistics, then elemt (batch_norm_elemt or batch_norm_elemt_relu). */
static mx_status batch_norm(mx__call *c, mx_op elemt_op) {
  const char *op = mx__ops[c->op].api_name;
  mx_tensor *x = c->in[0];
  if (x->ndim < 2) return mx__error(MX_SHAPE_ERROR, "%s: expected (N, C, ...) input, got %d dims", op, x->ndim);
  if (require_float(op, x) != MX_OK) return mx_last_status();
  mx_tensor *weight = optional(c, HAS_WEIGHT), *bias = optional(c, HAS_BIAS);
  mx_tensor *running_mean = optional(c, HAS_RUNNING_MEAN), *running_var = optional(c, HAS_RUNNING_VAR);
  bool training = c->args->keepdim;
  double momentum = c->args->f[0], eps = c->args->f[1];
  int64_t n_channels = x->shape[1];
  double count = per_channel_count(mx_shape_get(x));
  if (training && count <= 1)
    return mx__error(MX_SHAPE_ERROR, "%s: training needs more than one value per channel", op);
  mx_dtype dtype = stats_dtype(x->dtype);
  /* The output's dtype: a 16-bit float x keeps its own under float32
   * weight and bias (PyTorch's mixed-type batch norm: under autocast the
   * activations stay bf16); otherwise x's, promoted by weight and bias as
   * multiplying and adding them would. */
  mx_tensor *typed[3] = {x};
  int n_typed = 1;
  if (weight) typed[n_typed++] = weight;
  if (bias) typed[n_typed++] = bias;
  bool half = x->dtype == MX_F16 || x->dtype == MX_BF16;
  mx__args elemt = {.dtype = half ? x->dtype : mx__result_type(n_typed, typed)};
  weight = weight ? channels(op, weight, n_channels, "weight") : mx_ones(MX_SHAPE(n_channels), dtype, x->device);
  bias = bias ? channels(op, bias, n_channels, "bias") : mx_zeros(MX_SHAPE(n_channels), dtype, x->device);
  if (!weight || !bias) return mx_last_status();
  if (training || !running_mean || !running_var) { /* the batch's statistics: one primitive */
    elemt.i[1] = elemt_op == MX_OP_BATCH_NORM_ELEMT_RELU;
    elemt.f[1] = eps;
    running_stats running = {running_mean, running_var, momentum, false};
    elemt.ptr = training && running_mean && running_var ? &running : NULL; /* read by the forward only */
    mx_tensor *trained[MX__MAX_OUTPUTS] = {0}; /* y, mean, var */
    mx_status status =
        mx__dispatch(MX_OP_BATCH_NORM_TRAINING, 3, (const mx_tensor *const[]){x, weight, bias}, &elemt, trained);
    if (status != MX_OK) return status;
    if (elemt.ptr && !running.updated) { /* running statistics, outside the graph */
      MX_NO_GRAD {
        mx_tensor *unbiased = mx_mul_scalar(trained[2], count / (count - 1));
        mx_copy_(running_mean, mx_add(mx_mul_scalar(running_mean, 1 - momentum), mx_mul_scalar(trained[1], momentum)));
        mx_copy_(running_var, mx_add(mx_mul_scalar(running_var, 1 - momentum), mx_mul_scalar(unbiased, momentum)));
      }
    }
    c->out[0] = trained[0];
    return MX_OK;
  }
  mx_tensor *stats[2] = {channels(op, running_mean, n_channels, "running_mean")};
  stats[1] = channels(op, running_var, n_channels, "running_var");
  stats[0] = stats[0] ? mx_to_dtype(stats[0], dtype) : NULL;
  stats[1] = stats[1] ? mx_to_dtype(stats[1], dtype) : NULL;
  mx_tensor *invstd = stats[1] ? mx_rsqrt(mx_add_scalar(stats[1], eps)) : NULL;
  if (!stats[0] || !invstd) return mx_last_status();
  const mx_tensor *in[5] = {x, stats[0], invstd, weight, bias};
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  mx_status status = mx__dispatch(elemt_op, 5, in, &elemt, out);
  c->out[0] = out[0];
  return status;
}

mx_status mx__fwd_batch_norm(mx__call *c) { return batch_norm(c, MX_OP_BATCH_NORM_ELEMT); }
mx_status mx__fwd_batch_norm_relu(mx__call *c) { return batch_norm(c, MX_OP_BATCH_NORM_ELEMT_RELU); }

mx_status mx__fwd_layer_norm(mx__call *c) {
  mx_tensor *x = c->in[0];
  if (require_float("mx_layer_norm", x) != MX_OK) return mx_last_status();
  mx_shape normalized = c->args->shape;
  bool fits = normalized.ndim >= 1 && normalized.ndim <= x->ndim;
  for (int k = 0; fits && k < normalized.ndim; k++)
    fits = normalized.d[k] == x->shape[x->ndim - normalized.ndim + k];
  if (!fits) {
    char a[MX__DIMS_STR], b[MX__DIMS_STR];
    return mx__error(MX_SHAPE_ERROR, "mx_layer_norm: normalized shape %s does not end the input shape %s",
                     mx__dims_str(a, normalized.ndim > 0 ? normalized.ndim : 0, normalized.d),
                     mx__dims_str(b, x->ndim, x->shape));
  }
  mx_shape dims = {0};
  for (int d = x->ndim - normalized.ndim; d < x->ndim; d++) dims.d[dims.ndim++] = d;
  mx_tensor *y = mx_mul(mx_sub(x, mx_mean(x, dims, true)), mx_rsqrt(mx_add_scalar(mx_var(x, dims, 0, true), c->args->f[1])));
  return OUT0(c, affine(y, optional(c, HAS_WEIGHT), optional(c, HAS_BIAS), x->ndim, false));
}

mx_status mx__fwd_group_norm(mx__call *c) {
  mx_tensor *x = c->in[0];
  if (require_float("mx_group_norm", x) != MX_OK) return mx_last_status();
  int64_t groups = c->args->i[1];
  if (x->ndim < 2 || groups <= 0 || x->shape[1] % groups)
    return mx__error(MX_SHAPE_ERROR, "mx_group_norm: %lld groups do not divide %lld channels", (long long)groups,
                     (long long)(x->ndim >= 2 ? x->shape[1] : 0));
  mx_tensor *grouped = mx_reshape(x, MX_SHAPE(x->shape[0], groups, -1));
  mx_tensor *y = mx_mul(mx_sub(grouped, mx_mean(grouped, MX_DIMS(2), true)),
                        mx_rsqrt(mx_add_scalar(mx_var(grouped, MX_DIMS(2), 0, true), c->args->f[1])));
  return OUT0(c, affine(mx_reshape(y, mx_shape_get(x)), optional(c, HAS_WEIGHT), optional(c, HAS_BIAS), x->ndim, true));
}

/* --- public functions ------------------------------------------------------------------------- */

static mx_tensor *call_optional(mx_op op, const mx_tensor *x, const mx_tensor *const *opt, int n_opt, mx__args *args) {
  const mx_tensor *in[5] = {x};
  int n = 1, mask = 0;
  for (int k = 0; k < n_opt; k++)
    if (opt[k]) in[n++] = opt[k], mask |= 1 << k;
  args->i[0] = mask;
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  return mx__dispatch(op, n, in, args, out) == MX_OK ? out[0] : NULL;
}

mx_tensor *mx_batch_norm(const mx_tensor *x, mx_tensor *running_mean, mx_tensor *running_var, const mx_tensor *weight,
                         const mx_tensor *bias, bool training, double momentum, double eps) {
  const mx_tensor *opt[4] = {weight, bias, running_mean, running_var};
  mx__args args = {.keepdim = training, .f = {momentum, eps}};
  return call_optional(MX_OP_BATCH_NORM, x, opt, 4, &args);
}

mx_tensor *mx_batch_norm_relu(const mx_tensor *x, mx_tensor *running_mean, mx_tensor *running_var,
                              const mx_tensor *weight, const mx_tensor *bias, bool training, double momentum,
                              double eps) {
  const mx_tensor *opt[4] = {weight, bias, running_mean, running_var};
  mx__args args = {.keepdim = training, .f = {momentum, eps}};
  return call_optional(MX_OP_BATCH_NORM_RELU, x, opt, 4, &args);
}

mx_tensor *mx_layer_norm(const mx_tensor *x, mx_shape normalized_shape, const mx_tensor *weight, const mx_tensor *bias,
                         double eps) {
  const mx_tensor *opt[2] = {weight, bias};
  mx__args args = {.shape = normalized_shape, .f = {0, eps}};
  return call_optional(MX_OP_LAYER_NORM, x, opt, 2, &args);
}

mx_tensor *mx_group_norm(const mx_tensor *x, int64_t groups, const mx_tensor *weight, const mx_tensor *bias, double eps) {
  const mx_tensor *opt[2] = {weight, bias};
  mx__args args = {.i = {0, groups}, .f = {0, eps}};
  return call_optional(MX_OP_GROUP_NORM, x, opt, 2, &args);
}
