/* Linear algebra: bmm and mm are the primitives (one backend matmul, oneDNN
 * on the CPU); matmul with torch.matmul's broadcasting, the add*-fused
 * forms, mv, dot and outer are composites of them; linear_bias and
 * linear_relu, primitives, add linear's bias (and run the ReLU after it)
 * inside the product. */
#include "ops/op_table.h"

static mx_status cannot_multiply(const char *op, const mx_tensor *a, const mx_tensor *b, int64_t ka, int64_t kb) {
  char x[MX__DIMS_STR], y[MX__DIMS_STR];
  return mx__error(MX_SHAPE_ERROR, "%s: shapes %s and %s cannot be multiplied (%lld != %lld)", op,
                   mx__dims_str(x, a->ndim, a->shape), mx__dims_str(y, b->ndim, b->shape), (long long)ka,
                   (long long)kb);
}

static mx_status need_dims(const char *op, const mx_tensor *t, int ndim, const char *what) {
  if (t->ndim == ndim) return MX_OK;
  char x[MX__DIMS_STR];
  return mx__error(MX_SHAPE_ERROR, "%s: %s must be %d-d, got shape %s", op, what, ndim,
                   mx__dims_str(x, t->ndim, t->shape));
}

static mx_status same_dtype(const char *op, const mx_tensor *a, const mx_tensor *b) {
  if (a->dtype == b->dtype) return MX_OK;
  return mx__error(MX_DTYPE_ERROR, "%s: expected both operands to have one dtype, got %s and %s", op,
                   mx_dtype_name(a->dtype), mx_dtype_name(b->dtype));
}

/* The backend's matmul into a new out_shape tensor, on (B, M, K) and
 * (B, K, N) views of a and b (c->in[0], c->in[1]) and (B, M, N) of out. */
static mx_status run_matmul(mx__call *c, const char *op, mx_shape out_shape,
                            mx_kview (*view)(const mx_tensor *)) {
  mx_tensor *a = c->in[0], *b = c->in[1];
  const mx_backend *be = mx__kernel_backend(c->op, a->device, MX_KERNEL_MATMUL, a->dtype);
  if (!be) return mx_last_status();
  mx_tensor *out = mx__tensor_alloc(op, out_shape, a->dtype, a->device);
  if (!out) return mx_last_status();
  c->out[0] = out;
  mx_kview ov = view(out), av = view(a), bv = view(b);
  return be->matmul(&ov, &av, &bv);
}

/* A matrix as a batch of one: the (1, R, C) view the backend's matmul takes,
 * without the unsqueeze and squeeze ops (and graph nodes) around a bmm. */
static mx_kview batch_of_one(const mx_tensor *t) {
  mx_kview v = mx__kview_of(t);
  v.ndim = 3;
  v.shape[2] = v.shape[1], v.shape[1] = v.shape[0], v.shape[0] = 1;
  v.strides[2] = v.strides[1], v.strides[1] = v.strides[0], v.strides[0] = 0;
  return v;
}

mx_status mx__fwd_bmm(mx__call *c) {
  mx_tensor *a = c->in[0], *b = c->in[1];
  if (need_dims("mx_bmm", a, 3, "the first operand") || need_dims("mx_bmm", b, 3, "the second operand") ||
      same_dtype("mx_bmm", a, b))
    return mx_last_status();
  if (a->shape[0] != b->shape[0]) {
    char x[MX__DIMS_STR], y[MX__DIMS_STR];
    return mx__error(MX_SHAPE_ERROR, "mx_bmm: batch sizes differ: shapes %s and %s", mx__dims_str(x, 3, a->shape),
                     mx__dims_str(y, 3, b->shape));
  }
  if (a->shape[2] != b->shape[1]) return cannot_multiply("mx_bmm", a, b, a->shape[2], b->shape[1]);
  return run_matmul(c, "mx_bmm", MX_SHAPE(a->shape[0], a->shape[1], b->shape[2]), mx__kview_of);
}

mx_status mx__fwd_mm(mx__call *c) {
  mx_tensor *a = c->in[0], *b = c->in[1];
  if (need_dims("mx_mm", a, 2, "the first operand") || need_dims("mx_mm", b, 2, "the second operand") ||
      same_dtype("mx_mm", a, b))
    return mx_last_status();
  if (a->shape[1] != b->shape[0]) return cannot_multiply("mx_mm", a, b, a->shape[1], b->shape[0]);
  return run_matmul(c, "mx_mm", MX_SHAPE(a->shape[0], b->shape[1]), batch_of_one);
}

/* Whether each matrix (the last two dims) of t is stored column by column,
 * as a transposed view (a linear layer's weight.t()) is. */
static bool column_major(const mx_tensor *t) {
  int r = t->ndim - 2, k = t->ndim - 1;
  return t->shape[r] > 1 && t->shape[k] > 1 && t->strides[r] == 1 && t->strides[k] == t->shape[r];
}

static mx_tensor *tr(const mx_tensor *t) { return mx_transpose(t, t->ndim - 2, t->ndim - 1); }

/* dA = G B^T, dB = A^T G, with product mm or bmm; an operand stored
 * column-major gets its gradient in that layout too, as (B G^T)^T or
 * (G^T A)^T (PyTorch's mm backward does the same), so that a weight's
 * gradient comes back contiguous through the transpose and later casts, sums
 * and optimizer steps read it densely. */
static mx_status product_backward(mx__bw *bw, mx_tensor *(*product)(const mx_tensor *, const mx_tensor *)) {
  const mx_tensor *a = mx__saved_in(bw, 0), *b = mx__saved_in(bw, 1);
  GRAD(0, column_major(a) ? tr(product(b, tr(G))) : product(G, tr(b)));
  GRAD(1, column_major(b) ? tr(product(tr(G), a)) : product(tr(a), G));
  return MX_OK;
}

mx_status mx__bwd_bmm(mx__bw *bw) { return product_backward(bw, mx_bmm); }
mx_status mx__bwd_mm(mx__bw *bw) { return product_backward(bw, mx_mm); }

/* --- linear with a bias, rounded once: linear_bias and linear_relu ------------------------------ */

static mx_status check_linear_bias(const char *op, const mx_tensor *x, const mx_tensor *w, const mx_tensor *bias) {
  char a[MX__DIMS_STR], b[MX__DIMS_STR];
  if (need_dims(op, w, 2, "weight")) return mx_last_status();
  if (x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
    return mx__error(MX_SHAPE_ERROR, "%s: input %s and weight %s do not fit: %lld input features, weight expects %lld",
                     op, mx__dims_str(a, x->ndim, x->shape), mx__dims_str(b, 2, w->shape),
                     (long long)(x->ndim ? x->shape[x->ndim - 1] : 0), (long long)w->shape[1]);
  if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0]))
    return mx__error(MX_SHAPE_ERROR, "%s: bias %s does not fit weight %s (expected [%lld])", op,
                     mx__dims_str(a, bias->ndim, bias->shape), mx__dims_str(b, 2, w->shape), (long long)w->shape[0]);
  if (same_dtype(op, x, w) || (bias && same_dtype(op, x, bias))) return mx_last_status();
  return MX_OK;
}

/* The backend's linear kernel on (1, M, K) x, (1, K, N) weight^T and (1, M, N)
 * y. MX_NOT_SUPPORTED, with nothing set, where it declines: x's rows not
 * evenly strided, or the kernel's own refusal (dtype, shape, no oneDNN). */
static mx_status fused_linear(mx__call *c, const mx_backend *be, const mx_tensor *x, const mx_tensor *w,
                              const mx_tensor *bias, bool relu) {
  int64_t k = w->shape[1], n = w->shape[0];
  mx_kview xv = mx__kview_of(x), av = xv;
  bool matrix = x->ndim == 2; /* else x's rows are evenly strided only when it is contiguous */
  if (k == 0 || n == 0 || mx__kview_numel(&xv) == 0 || (!matrix && !mx__kview_is_contiguous(&xv)))
    return MX_NOT_SUPPORTED;
  av.ndim = 3;
  av.shape[0] = 1, av.shape[1] = mx__kview_numel(&xv) / k, av.shape[2] = k;
  av.strides[0] = 0, av.strides[1] = matrix ? x->strides[0] : k, av.strides[2] = matrix ? x->strides[1] : 1;
  mx_shape shape = mx_shape_get(x);
  shape.d[shape.ndim - 1] = n;
  mx_tensor *y = mx__tensor_alloc(mx__ops[c->op].api_name, shape, x->dtype, x->device);
  if (!y) return mx_last_status();
  mx_kview yv = mx__kview_of(y), wv = mx__kview_of(w), bv = mx__kview_of(bias), ov = yv, bt = wv;
  ov.ndim = 3;
  ov.shape[0] = 1, ov.shape[1] = av.shape[1], ov.shape[2] = n;
  ov.strides[0] = 0, ov.strides[1] = n, ov.strides[2] = 1;
  bt.ndim = 3;
  bt.shape[0] = 1, bt.shape[1] = k, bt.shape[2] = n;
  bt.strides[0] = 0, bt.strides[1] = w->strides[1], bt.strides[2] = w->strides[0];
  mx_status status = be->linear(&ov, &av, &bt, &bv, relu); /* the caller asked supports(): the slot is there */
  if (status == MX_OK)
    c->out[0] = y;
  else
    mx_release(y);
  return status == MX_NOT_BUILT ? MX_NOT_SUPPORTED : status;
}

static bool is_16_bit(mx_dtype dtype) { return dtype == MX_F16 || dtype == MX_BF16; }

/* x @ weight^T + bias with the bias added before the one rounding of a
 * 16-bit result, as PyTorch's addmm (and the backends' linear kernels) do:
 * the backend's kernel where it takes the case, else matmul and add, on
 * float32 copies for 16 bits (a product of two 16-bit values is exact in
 * float32, so only the order of the sums differs from the kernel's). */
static mx_status linear_forward(mx__call *c, const mx_tensor *x, const mx_tensor *w, const mx_tensor *bias, bool relu) {
  const mx_backend *be = mx__backend_of(c->op, x->device);
  if (!be) return mx_last_status();
  if (bias && mx__backend_supports(be, MX_KERNEL_LINEAR, x->dtype) == MX_KERNEL_NATIVE) {
    mx_status status = fused_linear(c, be, x, w, bias, relu);
    if (status != MX_NOT_SUPPORTED) return status;
  }
  mx_tensor *y;
  if (bias && is_16_bit(x->dtype)) {
    mx_tensor *wt = mx_transpose(mx_to_dtype(w, MX_F32), 0, 1);
    y = mx_to_dtype(mx_add(mx_matmul(mx_to_dtype(x, MX_F32), wt), mx_to_dtype(bias, MX_F32)), x->dtype);
  } else {
    y = mx_matmul(x, mx_transpose(w, 0, 1));
    if (bias && y) y = mx_add(y, bias);
  }
  return OUT0(c, relu ? mx_relu(y) : y);
}

mx_status mx__fwd_linear_bias(mx__call *c) {
  mx_tensor *x = c->in[0], *w = c->in[1], *bias = c->in[2];
  if (check_linear_bias("mx_linear_bias", x, w, bias)) return mx_last_status();
  return linear_forward(c, x, w, bias, false);
}

/* The ReLU of the rounded sum is the rounding of its ReLU, so relu(linear)
 * bit for bit. */
mx_status mx__fwd_linear_relu(mx__call *c) {
  mx_tensor *x = c->in[0], *w = c->in[1], *bias = c->n_in > 2 ? c->in[2] : NULL;
  if (check_linear_bias("mx_linear_relu", x, w, bias)) return mx_last_status();
  return linear_forward(c, x, w, bias, true);
}

/* What linear's ops (add, matmul's mm on x's rows, the transpose) run
 * backward on g: the gradients of linear as its composite had them. */
static mx_status linear_backward(mx__bw *bw, mx_tensor *g) {
  mx_tensor *x = mx__saved_in(bw, 0), *w = mx__saved_in(bw, 1);
  if (!x || !w || !g) return mx_last_status();
  int64_t k = w->shape[1], n = w->shape[0];
  mx_tensor *wt = mx_transpose(w, 0, 1), *a, *g2;
  if (x->ndim == 2)
    a = x, g2 = g;
  else
    a = mx_reshape(x, MX_SHAPE(-1, k)), g2 = mx_reshape(g, MX_SHAPE(-1, n));
  if (!a || !g2) return mx_last_status();
  if (mx__needs_grad(bw, 0)) {
    mx_tensor *da = column_major(a) ? tr(mx_mm(wt, tr(g2))) : mx_mm(g2, tr(wt));
    GRAD(0, x->ndim == 2 || !da ? da : mx_reshape(da, mx__in_shape(bw, 0)));
  }
  GRAD(1, mx_transpose(column_major(wt) ? tr(mx_mm(tr(g2), a)) : mx_mm(tr(a), g2), 0, 1));
  GRAD(2, x->ndim == 1 ? g : mx__sum_to(g, mx__in_shape(bw, 2)));
  return MX_OK;
}

mx_status mx__bwd_linear_bias(mx__bw *bw) { return linear_backward(bw, G); }

/* ReLU's backward on the saved output first. */
mx_status mx__bwd_linear_relu(mx__bw *bw) { return linear_backward(bw, mx_relu_backward(G, mx__saved_out(bw, 0))); }

mx_status mx__fwd_mv(mx__call *c) {
  mx_tensor *m = c->in[0], *v = c->in[1];
  if (need_dims("mx_mv", m, 2, "the matrix") || need_dims("mx_mv", v, 1, "the vector")) return mx_last_status();
  if (m->shape[1] != v->shape[0]) return cannot_multiply("mx_mv", m, v, m->shape[1], v->shape[0]);
  return OUT0(c, mx_squeeze(mx_mm(m, mx_unsqueeze(v, 1)), 1));
}

mx_status mx__fwd_dot(mx__call *c) {
  mx_tensor *a = c->in[0], *b = c->in[1];
  if (need_dims("mx_dot", a, 1, "the first operand") || need_dims("mx_dot", b, 1, "the second operand"))
    return mx_last_status();
  if (a->shape[0] != b->shape[0]) return cannot_multiply("mx_dot", a, b, a->shape[0], b->shape[0]);
  return OUT0(c, mx_sum(mx_mul(a, b), MX_ALL_DIMS, false));
}

mx_status mx__fwd_outer(mx__call *c) {
  if (need_dims("mx_outer", c->in[0], 1, "the first operand") || need_dims("mx_outer", c->in[1], 1, "the second operand"))
    return mx_last_status();
  return OUT0(c, mx_mul(mx_unsqueeze(c->in[0], 1), mx_unsqueeze(c->in[1], 0)));
}

/* torch.matmul: vectors are promoted to matrices and back; batch dims
 * broadcast; a matrix on the right folds the batch into the rows. */
mx_status mx__fwd_matmul(mx__call *c) {
  mx_tensor *a = c->in[0], *b = c->in[1];
  if (a->ndim == 0 || b->ndim == 0)
    return mx__error(MX_SHAPE_ERROR, "mx_matmul: both operands need at least 1 dim, got %d-d and %d-d", a->ndim,
                     b->ndim);
  /* checked here, on the shapes as given, so errors name them */
  int64_t ka = a->shape[a->ndim - 1], kb = b->shape[b->ndim >= 2 ? b->ndim - 2 : 0];
  if (ka != kb) return cannot_multiply("mx_matmul", a, b, ka, kb);
  if (same_dtype("mx_matmul", a, b)) return mx_last_status();
  if (a->ndim == 1 && b->ndim == 1) return OUT0(c, mx_dot(a, b));
  if (a->ndim == 2 && b->ndim == 2) return OUT0(c, mx_mm(a, b));
  if (a->ndim == 1) return OUT0(c, mx_squeeze(mx_matmul(mx_unsqueeze(a, 0), b), -2));
  if (b->ndim == 1) return OUT0(c, mx_squeeze(mx_matmul(a, mx_unsqueeze(b, 1)), -1));
  int64_t m = a->shape[a->ndim - 2], k = ka, n = b->shape[b->ndim - 1];
  if (b->ndim == 2) { /* (..., m, k) @ (k, n): one mm over all rows */
    mx_shape out = mx_shape_get(a);
    out.d[out.ndim - 1] = n;
    return OUT0(c, mx_reshape(mx_mm(mx_reshape(a, MX_SHAPE(-1, k)), b), out));
  }
  /* broadcast the batch dims, then one bmm */
  mx_tensor *batch_a = mx__tensor_view(a, a->ndim - 2, a->shape, a->strides, a->offset);
  mx_tensor *batch_b = mx__tensor_view(b, b->ndim - 2, b->shape, b->strides, b->offset);
  mx_tensor *pair[2] = {batch_a, batch_b};
  mx_shape batch;
  mx_status status = batch_a && batch_b ? mx__broadcast_shape("mx_matmul", 2, pair, &batch) : mx_last_status();
  mx_release(batch_a);
  mx_release(batch_b);
  if (status != MX_OK) return status;
  mx_shape sa = batch, sb = batch, so = batch;
  sa.d[sa.ndim++] = m, sa.d[sa.ndim++] = k;
  sb.d[sb.ndim++] = k, sb.d[sb.ndim++] = n;
  so.d[so.ndim++] = m, so.d[so.ndim++] = n;
  int64_t count, out_count; /* the broadcast batch may hold more elements than either operand */
  if (mx__numel_overflows(so.ndim, so.d, &out_count) || mx__numel_overflows(batch.ndim, batch.d, &count))
    return mx__error_too_many_elements("mx_matmul", so.ndim, so.d);
  mx_tensor *a3 = mx_reshape(mx_expand(a, sa), MX_SHAPE(count, m, k));
  mx_tensor *b3 = mx_reshape(mx_expand(b, sb), MX_SHAPE(count, k, n));
  return OUT0(c, mx_reshape(mx_bmm(a3, b3), so));
}

/* beta * c + alpha * product; c is ignored when beta is 0 (NaNs too). */
static mx_tensor *scaled_sum(const mx_tensor *c, mx_tensor *product, double beta, double alpha) {
  mx_tensor *p = alpha == 1 ? product : mx_mul_scalar(product, alpha);
  if (beta == 0) return mx_add(mx_zeros_like(c), p); /* c's shape, not its NaNs */
  return mx_add(beta == 1 ? (mx_tensor *)c : mx_mul_scalar(c, beta), p);
}

/* c + a @ b with c a vector of b's columns is PyTorch's F.linear: linear_bias,
 * whose 16-bit result rounds once as PyTorch's addmm does (other c, beta and
 * alpha add after the product's rounding). */
mx_status mx__fwd_addmm(mx__call *c) {
  mx_tensor *bias = c->in[0], *a = c->in[1], *b = c->in[2];
  if (c->args->f[0] == 1 && c->args->f[1] == 1 && a->ndim == 2 && b->ndim == 2 && bias->ndim == 1 &&
      a->shape[1] == b->shape[0] && bias->shape[0] == b->shape[1] && a->dtype == b->dtype && bias->dtype == a->dtype)
    return OUT0(c, mx_linear_bias(a, mx_transpose(b, 0, 1), bias));
  return OUT0(c, scaled_sum(bias, mx_mm(a, b), c->args->f[0], c->args->f[1]));
}
mx_status mx__fwd_addbmm(mx__call *c) {
  mx_tensor *product = mx_sum(mx_bmm(c->in[1], c->in[2]), MX_DIMS(0), false);
  return OUT0(c, scaled_sum(c->in[0], product, c->args->f[0], c->args->f[1]));
}
mx_status mx__fwd_baddbmm(mx__call *c) {
  return OUT0(c, scaled_sum(c->in[0], mx_bmm(c->in[1], c->in[2]), c->args->f[0], c->args->f[1]));
}
mx_status mx__fwd_addmv(mx__call *c) {
  return OUT0(c, scaled_sum(c->in[0], mx_mv(c->in[1], c->in[2]), c->args->f[0], c->args->f[1]));
}
mx_status mx__fwd_addr(mx__call *c) {
  return OUT0(c, scaled_sum(c->in[0], mx_outer(c->in[1], c->in[2]), c->args->f[0], c->args->f[1]));
}

/* --- public functions ---------------------------------------------------------------------- */

mx_tensor *mx_mm(const mx_tensor *a, const mx_tensor *b) { return mx__call2(MX_OP_MM, a, b, NULL); }
mx_tensor *mx_bmm(const mx_tensor *a, const mx_tensor *b) { return mx__call2(MX_OP_BMM, a, b, NULL); }
mx_tensor *mx_matmul(const mx_tensor *a, const mx_tensor *b) { return mx__call2(MX_OP_MATMUL, a, b, NULL); }
mx_tensor *mx_linear_bias(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias) {
  return mx__call3(MX_OP_LINEAR_BIAS, x, weight, bias, NULL);
}
mx_tensor *mx_linear_relu(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias) {
  return bias ? mx__call3(MX_OP_LINEAR_RELU, x, weight, bias, NULL) : mx__call2(MX_OP_LINEAR_RELU, x, weight, NULL);
}
mx_tensor *mx_mv(const mx_tensor *m, const mx_tensor *v) { return mx__call2(MX_OP_MV, m, v, NULL); }
mx_tensor *mx_dot(const mx_tensor *a, const mx_tensor *b) { return mx__call2(MX_OP_DOT, a, b, NULL); }
mx_tensor *mx_outer(const mx_tensor *a, const mx_tensor *b) { return mx__call2(MX_OP_OUTER, a, b, NULL); }

#define ADD_API(E, name)                                                                                \
  mx_tensor *mx_##name(const mx_tensor *c, const mx_tensor *a, const mx_tensor *b, double beta, double alpha) { \
    return mx__call3(MX_OP_##E, c, a, b, &(mx__args){.f = {beta, alpha}});                              \
  }
ADD_API(ADDMM, addmm)
ADD_API(ADDBMM, addbmm)
ADD_API(BADDBMM, baddbmm)
ADD_API(ADDMV, addmv)
ADD_API(ADDR, addr)
#undef ADD_API
