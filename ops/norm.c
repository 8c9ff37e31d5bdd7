/* Normalisation as composites: batch_norm (with running statistics),
 * layer_norm and group_norm. Optional tensors (weight, bias, running
 * statistics) are passed only when given; args.i[0] says which. */
#include "ops/op_table.h"

enum { HAS_WEIGHT = 1, HAS_BIAS = 2, HAS_RUNNING_MEAN = 4, HAS_RUNNING_VAR = 8 };

/* The optional input with flag `which`, or NULL. */
static mx_tensor *optional(mx__call *c, int which) {
  int mask = (int)c->args->i[0], k = 1;
  for (int bit = 1; bit < which; bit <<= 1) k += (mask & bit) != 0;
  return mask & which ? c->in[k] : NULL;
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

mx_status mx__fwd_batch_norm(mx__call *c) {
  mx_tensor *x = c->in[0];
  if (x->ndim < 2) return mx__error(MX_SHAPE_ERROR, "mx_batch_norm: expected (N, C, ...) input, got %d dims", x->ndim);
  mx_tensor *weight = optional(c, HAS_WEIGHT), *bias = optional(c, HAS_BIAS);
  mx_tensor *running_mean = optional(c, HAS_RUNNING_MEAN), *running_var = optional(c, HAS_RUNNING_VAR);
  bool training = c->args->keepdim;
  double momentum = c->args->f[0], eps = c->args->f[1];
  mx_shape dims = {0};
  int64_t count = 1;
  for (int d = 0; d < x->ndim; d++)
    if (d != 1) dims.d[dims.ndim++] = d, count *= x->shape[d];
  mx_tensor *mean, *var;
  if (training || !running_mean || !running_var) {
    if (training && count <= 1)
      return mx__error(MX_SHAPE_ERROR, "mx_batch_norm: training needs more than one value per channel");
    mean = mx_mean(x, dims, true);
    var = mx_var(x, dims, 0, true);
    if (training && running_mean && running_var) { /* running statistics, outside the graph */
      MX_NO_GRAD {
        mx_tensor *m = mx_reshape(mean, MX_SHAPE(-1));
        mx_tensor *v = mx_mul_scalar(mx_reshape(var, MX_SHAPE(-1)), (double)count / (double)(count - 1));
        mx_copy_(running_mean, mx_add(mx_mul_scalar(running_mean, 1 - momentum), mx_mul_scalar(m, momentum)));
        mx_copy_(running_var, mx_add(mx_mul_scalar(running_var, 1 - momentum), mx_mul_scalar(v, momentum)));
      }
    }
  } else {
    mean = per_channel(running_mean, x->ndim);
    var = per_channel(running_var, x->ndim);
  }
  mx_tensor *y = mx_mul(mx_sub(x, mean), mx_rsqrt(mx_add_scalar(var, eps)));
  return OUT0(c, affine(y, weight, bias, x->ndim, true));
}

mx_status mx__fwd_layer_norm(mx__call *c) {
  mx_tensor *x = c->in[0];
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
