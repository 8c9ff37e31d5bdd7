/* softmax and log_softmax (one kernel, numerically stable), softmin, and
 * their gradients as composite ops, so they differentiate again. */
#include "ops/op_table.h"

static mx_status softmax_forward(mx__call *c, bool log_softmax) {
  const char *op = log_softmax ? "mx_log_softmax" : "mx_softmax";
  mx_tensor *x = c->in[0];
  int dim = mx__wrap_dim(op, (int)c->args->i[0], x->ndim);
  if (dim < 0) return mx_last_status();
  mx_dtype dtype = c->args->dtype != MX_DTYPE_COUNT ? c->args->dtype : x->dtype;
  if (!mx_dtype_is_floating(dtype))
    return mx__error(MX_DTYPE_ERROR, "%s: dtype %s is not floating", op, mx_dtype_name(dtype));
  const mx_backend *be = mx__kernel_backend(c->op, x->device, MX_KERNEL_SOFTMAX, dtype);
  if (!be) return mx_last_status();
  x = mx__prepare(x, dtype, x->device);
  mx_tensor *out = x ? mx__tensor_alloc(op, mx_shape_get(x), dtype, x->device) : NULL;
  if (!out) return mx_last_status();
  c->out[0] = out;
  if (x->ndim == 0) /* one element: softmax 1, log_softmax 0 */
    return mx_fill_(out, log_softmax ? 0 : 1);
  mx_kview ov = mx__kview_of(out), xv = mx__kview_of(x);
  return be->softmax(&ov, &xv, dim, log_softmax);
}

mx_status mx__fwd_softmax(mx__call *c) { return softmax_forward(c, false); }
mx_status mx__fwd_log_softmax(mx__call *c) { return softmax_forward(c, true); }

mx_status mx__fwd_softmin(mx__call *c) {
  return OUT0(c, mx_softmax(mx_neg(c->in[0]), (int)c->args->i[0]));
}

static mx_tensor *grad_op(mx_op op, const mx_tensor *g, const mx_tensor *out, int64_t dim) {
  return mx__call2(op, g, out, &(mx__args){.i = {dim}});
}

/* y (g - sum(g y)) */
mx_status mx__fwd_softmax_backward(mx__call *c) {
  mx_tensor *g = c->in[0], *y = c->in[1];
  mx_tensor *gy = mx_mul(g, y);
  return OUT0(c, mx_sub(gy, mx_mul(y, mx_sum(gy, MX_DIMS((int)c->args->i[0]), true))));
}

/* g - exp(y) sum(g) */
mx_status mx__fwd_log_softmax_backward(mx__call *c) {
  mx_tensor *g = c->in[0], *y = c->in[1];
  return OUT0(c, mx_sub(g, mx_mul(mx_exp(y), mx_sum(g, MX_DIMS((int)c->args->i[0]), true))));
}

mx_status mx__bwd_softmax(mx__bw *bw) {
  GRAD(0, grad_op(MX_OP_SOFTMAX_BACKWARD, G, mx__saved_out(bw, 0), bw->args->i[0]));
  return MX_OK;
}

mx_status mx__bwd_log_softmax(mx__bw *bw) {
  GRAD(0, grad_op(MX_OP_LOG_SOFTMAX_BACKWARD, G, mx__saved_out(bw, 0), bw->args->i[0]));
  return MX_OK;
}

mx_tensor *mx_softmax(const mx_tensor *x, int dim) {
  return mx__call1(MX_OP_SOFTMAX, x, &(mx__args){.i = {dim}, .dtype = MX_DTYPE_COUNT});
}
mx_tensor *mx_log_softmax(const mx_tensor *x, int dim) {
  return mx__call1(MX_OP_LOG_SOFTMAX, x, &(mx__args){.i = {dim}, .dtype = MX_DTYPE_COUNT});
}
mx_tensor *mx_softmax_dtype(const mx_tensor *x, int dim, mx_dtype dtype) {
  return mx__call1(MX_OP_SOFTMAX, x, &(mx__args){.i = {dim}, .dtype = dtype});
}
mx_tensor *mx_log_softmax_dtype(const mx_tensor *x, int dim, mx_dtype dtype) {
  return mx__call1(MX_OP_LOG_SOFTMAX, x, &(mx__args){.i = {dim}, .dtype = dtype});
}
mx_tensor *mx_softmin(const mx_tensor *x, int dim) { return mx__call1(MX_OP_SOFTMIN, x, &(mx__args){.i = {dim}}); }
