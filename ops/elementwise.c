/* Elementwise ops: the unary and binary forwards (broadcasting and dtype
 * promotion, then one kernel), where, the composites built on them, and
 * the public functions. Backward formulas: ops/elementwise_grad.c. */
#include <math.h>

#include "kernels/elementwise.h"
#include "ops/op_table.h"

/* Whether t has the whole shape, not broadcast to it (no 0 stride along a
 * dim of more than one element, as mx_expand makes). */
static bool fills_shape(const mx_tensor *t, mx_shape shape) {
  if (t->ndim != shape.ndim) return false;
  for (int d = 0; d < shape.ndim; d++)
    if (t->shape[d] != shape.d[d] || (t->strides[d] == 0 && t->shape[d] > 1)) return false;
  return true;
}

/* The output, laid out by PyTorch's rule made simple: channels-last when
 * the first input that fills the output's shape is channels-last,
 * row-major otherwise. So a CNN's activations, and the gradients their
 * ops' backwards make, keep the layout its input was given
 * (mx_to_channels_last), whatever the layout of a bias or a scalar. */
static mx_tensor *alloc_out(mx_op op, int n, mx_tensor *const *in, mx_shape shape, mx_dtype dtype,
                            mx_device device) {
  for (int i = 0; i < n; i++) {
    if (!fills_shape(in[i], shape)) continue;
    if (mx__suggests_channels_last(in[i]))
      return mx__tensor_alloc_channels_last(mx__ops[op].api_name, shape, dtype, device);
    break;
  }
  return mx__tensor_alloc(mx__ops[op].api_name, shape, dtype, device);
}

/* The device of the call: that of its first input that is not a CPU
 * scalar (they may join tensors on any device). */
static mx_device call_device(mx__call *c) {
  for (int i = 0; i < c->n_in; i++)
    if (!(c->in[i]->ndim == 0 && c->in[i]->device == MX_CPU)) return c->in[i]->device;
  return MX_CPU;
}

mx_status mx__unary_forward(mx__call *c) {
  int code = mx__ops[c->op].code;
  mx_tensor *x = c->in[0];
  /* integer inputs to float functions compute in float32, like PyTorch */
  mx_dtype dtype = mx_dtype_is_floating(x->dtype) || mx__unary_has_int(code) ? x->dtype : MX_F32;
  const mx_backend *be = mx__kernel_backend(c->op, x->device, MX_KERNEL_UNARY, dtype);
  if (!be) return mx_last_status();
  x = mx__prepare(x, dtype, x->device);
  mx_tensor *out = x ? alloc_out(c->op, 1, &x, mx_shape_get(x), dtype, x->device) : NULL;
  if (!out) return mx_last_status();
  mx_kview ov = mx__kview_of(out), xv = mx__kview_of(x);
  double a = c->args ? c->args->f[0] : 0, b = c->args ? c->args->f[1] : 0;
  if (code == MX_UN_CLAMP && !mx_dtype_is_floating(dtype)) { /* integers: the bounds rounded inward; NaN: none */
    a = a != a ? -INFINITY : ceil(a);
    b = b != b ? INFINITY : floor(b);
  }
  mx_status status = be->unary(code, &ov, &xv, a, b);
  c->out[0] = out;
  return status;
}

mx_status mx__binary_forward(mx__call *c) {
  int code = mx__ops[c->op].code;
  const char *name = mx__ops[c->op].api_name;
  mx_shape shape;
  mx_status status = mx__broadcast_shape(name, 2, c->in, &shape);
  if (status != MX_OK) return status;
  mx_dtype dtype = mx__result_type(2, c->in);
  /* true division and atan2 of integers are floats */
  if ((code == MX_BIN_DIV || code == MX_BIN_ATAN2 || !mx__binary_has_int(code)) && !mx_dtype_is_floating(dtype))
    dtype = MX_F32;
  double alpha = c->args ? c->args->f[0] : 1.0;
  if ((code == MX_BIN_ADD || code == MX_BIN_SUB) && !mx_dtype_is_floating(dtype) && alpha != floor(alpha))
    return mx__error(MX_INVALID_ARGUMENT, "%s: alpha %g must be a whole number for %s tensors", name, alpha,
                     mx_dtype_name(dtype));
  mx_device device = call_device(c);
  const mx_backend *be = mx__kernel_backend(c->op, device, MX_KERNEL_BINARY, dtype);
  if (!be) return mx_last_status();
  mx_tensor *a = mx__prepare(c->in[0], dtype, device);
  mx_tensor *b = a ? mx__prepare(c->in[1], dtype, device) : NULL;
  mx_tensor *out = b ? alloc_out(c->op, 2, c->in, shape, code >= MX_BIN_EQ ? MX_BOOL : dtype, device) : NULL;
  if (!out) return mx_last_status();
  mx_kview ov = mx__kview_of(out), av = mx__kview_broadcast(a, shape), bv = mx__kview_broadcast(b, shape);
  status = be->binary(code, &ov, &av, &bv, alpha);
  c->out[0] = out;
  return status;
}

mx_status mx__fwd_where(mx__call *c) {
  mx_shape shape;
  mx_status status = mx__broadcast_shape("mx_where", 3, c->in, &shape);
  if (status != MX_OK) return status;
  mx_dtype dtype = mx__result_type(2, c->in + 1);
  mx_device device = call_device(c);
  const mx_backend *be = mx__kernel_backend(c->op, device, MX_KERNEL_WHERE, dtype);
  if (!be) return mx_last_status();
  mx_tensor *cond = mx__prepare(c->in[0], MX_BOOL, device);
  mx_tensor *a = cond ? mx__prepare(c->in[1], dtype, device) : NULL;
  mx_tensor *b = a ? mx__prepare(c->in[2], dtype, device) : NULL;
  mx_tensor *out = b ? alloc_out(c->op, 3, c->in, shape, dtype, device) : NULL;
  if (!out) return mx_last_status();
  mx_kview ov = mx__kview_of(out), cv = mx__kview_broadcast(cond, shape);
  mx_kview av = mx__kview_broadcast(a, shape), bv = mx__kview_broadcast(b, shape);
  status = be->where(&ov, &cv, &av, &bv);
  c->out[0] = out;
  return status;
}

/* --- composites ------------------------------------------------------------------------ */

mx_status mx__fwd_logical_not(mx__call *c) { return OUT0(c, mx_eq_scalar(c->in[0], 0)); }

mx_status mx__fwd_addcmul(mx__call *c) {
  return OUT0(c, mx_add(c->in[0], mx_mul_scalar(mx_mul(c->in[1], c->in[2]), c->args->f[0])));
}

mx_status mx__fwd_addcdiv(mx__call *c) {
  return OUT0(c, mx_add(c->in[0], mx_mul_scalar(mx_div(c->in[1], c->in[2]), c->args->f[0])));
}

mx_status mx__fwd_lerp(mx__call *c) {
  return OUT0(c, mx_add(c->in[0], mx_mul(c->in[2], mx_sub(c->in[1], c->in[0]))));
}

static mx_tensor *with_scalar(mx_op op, const mx_tensor *t, double s, bool scalar_first, double alpha);

mx_status mx__fwd_rdiv(mx__call *c) { return OUT0(c, with_scalar(MX_OP_DIV, c->in[0], c->args->f[0], true, 1)); }

mx_status mx__fwd_masked_fill(mx__call *c) {
  /* a 0-d tensor of the input's dtype: the result keeps that dtype */
  mx_tensor *value = mx_scalar(c->args->f[0], c->in[0]->dtype, MX_CPU);
  return OUT0(c, mx_where(c->in[1], value, c->in[0]));
}

/* --- public functions ----------------------------------------------------------------- */

/* The functions of the MX_UNARY and MX_BINARY rows are written from the rows at build time
 * (ops/gen_elementwise_api.c); these are the other forms. */

mx_tensor *mx_add_scaled(const mx_tensor *a, const mx_tensor *b, double alpha) {
  return mx__call2(MX_OP_ADD, a, b, &(mx__args){.f = {alpha}});
}
mx_tensor *mx_logical_not(const mx_tensor *a) { return mx__call1(MX_OP_LOGICAL_NOT, a, NULL); }

/* A C scalar joins as a wrapped 0-d tensor: it never widens the dtype. */
static mx_tensor *with_scalar(mx_op op, const mx_tensor *t, double s, bool scalar_first, double alpha) {
  mx_tensor *w = mx__wrap_scalar(s);
  mx_tensor *out = scalar_first ? mx__call2(op, w, t, &(mx__args){.f = {alpha}})
                                : mx__call2(op, t, w, &(mx__args){.f = {alpha}});
  mx_release(w);
  return out;
}
mx_tensor *mx_add_scalar(const mx_tensor *a, double b) { return with_scalar(MX_OP_ADD, a, b, false, 1); }
mx_tensor *mx_sub_scalar(const mx_tensor *a, double b) { return with_scalar(MX_OP_SUB, a, b, false, 1); }
mx_tensor *mx_rsub_scalar(double a, const mx_tensor *b) { return with_scalar(MX_OP_SUB, b, a, true, 1); }
mx_tensor *mx_mul_scalar(const mx_tensor *a, double b) { return with_scalar(MX_OP_MUL, a, b, false, 1); }
mx_tensor *mx_div_scalar(const mx_tensor *a, double b) { return with_scalar(MX_OP_DIV, a, b, false, 1); }
mx_tensor *mx_rdiv_scalar(double a, const mx_tensor *b) { return mx__call1(MX_OP_RDIV, b, &(mx__args){.f = {a}}); }
mx_tensor *mx_pow_scalar(const mx_tensor *a, double b) { return with_scalar(MX_OP_POW, a, b, false, 1); }
mx_tensor *mx_rpow_scalar(double a, const mx_tensor *b) { return with_scalar(MX_OP_POW, b, a, true, 1); }
mx_tensor *mx_eq_scalar(const mx_tensor *a, double b) { return with_scalar(MX_OP_EQ, a, b, false, 1); }
mx_tensor *mx_gt_scalar(const mx_tensor *a, double b) { return with_scalar(MX_OP_GT, a, b, false, 1); }
mx_tensor *mx_ge_scalar(const mx_tensor *a, double b) { return with_scalar(MX_OP_GE, a, b, false, 1); }
mx_tensor *mx_lt_scalar(const mx_tensor *a, double b) { return with_scalar(MX_OP_LT, a, b, false, 1); }
mx_tensor *mx_le_scalar(const mx_tensor *a, double b) { return with_scalar(MX_OP_LE, a, b, false, 1); }

mx_tensor *mx_where(const mx_tensor *cond, const mx_tensor *a, const mx_tensor *b) {
  return mx__call3(MX_OP_WHERE, cond, a, b, NULL);
}
mx_tensor *mx_addcmul(const mx_tensor *a, const mx_tensor *t1, const mx_tensor *t2, double value) {
  return mx__call3(MX_OP_ADDCMUL, a, t1, t2, &(mx__args){.f = {value}});
}
mx_tensor *mx_addcdiv(const mx_tensor *a, const mx_tensor *t1, const mx_tensor *t2, double value) {
  return mx__call3(MX_OP_ADDCDIV, a, t1, t2, &(mx__args){.f = {value}});
}
mx_tensor *mx_lerp(const mx_tensor *start, const mx_tensor *end, const mx_tensor *weight) {
  return mx__call3(MX_OP_LERP, start, end, weight, NULL);
}
mx_tensor *mx_masked_fill(const mx_tensor *a, const mx_tensor *mask, double value) {
  return mx__call2(MX_OP_MASKED_FILL, a, mask, &(mx__args){.f = {value}});
}
