/* Layers as composites: linear, bilinear, prelu, the RNN, LSTM and GRU
 * cells (PyTorch's gate order and formulas) and scaled dot-product
 * attention. Optional tensors (biases, the attention mask) are passed only
 * when given; args.i[0] says which. */
#include <math.h>

#include "ops/op_table.h"

/* The optional input with flag `which` after the n_fixed required ones, or NULL. */
static mx_tensor *optional(mx__call *c, int n_fixed, int which) {
  int mask = (int)c->args->i[0], k = n_fixed;
  for (int bit = 1; bit < which; bit <<= 1) k += (mask & bit) != 0;
  return mask & which ? c->in[k] : NULL;
}

/* Dispatches fixed inputs plus the optional ones that are given. */
static mx_status call_optional(mx_op op, int n_fixed, const mx_tensor *const *fixed, int n_opt,
                               const mx_tensor *const *opt, mx__args *args, mx_tensor **out) {
  const mx_tensor *in[8];
  int n = 0, mask = 0;
  for (int k = 0; k < n_fixed; k++) in[n++] = fixed[k];
  for (int k = 0; k < n_opt; k++)
    if (opt[k]) in[n++] = opt[k], mask |= 1 << k;
  args->i[0] = mask;
  return mx__dispatch(op, n, in, args, out);
}

static mx_tensor *call_optional1(mx_op op, int n_fixed, const mx_tensor *const *fixed, int n_opt,
                                 const mx_tensor *const *opt, mx__args *args) {
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  return call_optional(op, n_fixed, fixed, n_opt, opt, args, out) == MX_OK ? out[0] : NULL;
}

enum { HAS_BIAS = 1, HAS_BIAS_HH = 2, HAS_MASK = 1 };

/* --- linear, bilinear, prelu ---------------------------------------------------------------- */

/* x @ weight^T + bias: x (..., in), weight (out, in) or (in), bias broadcasting to the result. */
static mx_status check_linear(const char *op, const mx_tensor *x, const mx_tensor *w) {
  char a[MX__DIMS_STR], b[MX__DIMS_STR];
  if (w->ndim < 1 || w->ndim > 2)
    return mx__error(MX_SHAPE_ERROR, "%s: weight must be 1-d or 2-d, got shape %s", op, mx__dims_str(a, w->ndim, w->shape));
  if (x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[w->ndim - 1])
    return mx__error(MX_SHAPE_ERROR, "%s: input %s and weight %s do not fit: %lld input features, weight expects %lld",
                     op, mx__dims_str(a, x->ndim, x->shape), mx__dims_str(b, w->ndim, w->shape),
                     (long long)(x->ndim ? x->shape[x->ndim - 1] : 0), (long long)w->shape[w->ndim - 1]);
  return MX_OK;
}

/* A 2-d weight with a bias of its rows runs as linear_bias, which adds the
 * bias before the one rounding of a 16-bit result, as PyTorch's linear (and
 * the linears inside its RNN cells) do; other shapes run matmul and add. */
static mx_tensor *affine(const mx_tensor *x, const mx_tensor *w, const mx_tensor *bias) {
  if (w->ndim == 2 && bias && bias->ndim == 1 && bias->shape[0] == w->shape[0] && bias->dtype == x->dtype &&
      w->dtype == x->dtype)
    return mx_linear_bias(x, w, bias);
  mx_tensor *y = mx_matmul(x, w->ndim == 2 ? mx_transpose(w, 0, 1) : w);
  return bias && y ? mx_add(y, bias) : y;
}

mx_status mx__fwd_linear(mx__call *c) {
  if (check_linear("mx_linear", c->in[0], c->in[1])) return mx_last_status();
  return OUT0(c, affine(c->in[0], c->in[1], optional(c, 2, HAS_BIAS)));
}

/* x1^T A x2 + b: x1 (..., in1), x2 (..., in2), A (out, in1, in2), b (out). */
mx_status mx__fwd_bilinear(mx__call *c) {
  mx_tensor *x1 = c->in[0], *x2 = c->in[1], *w = c->in[2], *bias = optional(c, 3, HAS_BIAS);
  char a[MX__DIMS_STR], b[MX__DIMS_STR];
  if (w->ndim != 3)
    return mx__error(MX_SHAPE_ERROR, "mx_bilinear: weight must be 3-d (out, in1, in2), got shape %s",
                     mx__dims_str(a, w->ndim, w->shape));
  const mx_tensor *xs[2] = {x1, x2};
  for (int k = 0; k < 2; k++)
    if (xs[k]->ndim < 1 || xs[k]->shape[xs[k]->ndim - 1] != w->shape[1 + k])
      return mx__error(MX_SHAPE_ERROR, "mx_bilinear: input%d %s does not fit weight %s (expected %lld features)", k + 1,
                       mx__dims_str(a, xs[k]->ndim, xs[k]->shape), mx__dims_str(b, 3, w->shape),
                       (long long)w->shape[1 + k]);
  bool same_batch = x1->ndim == x2->ndim;
  for (int d = 0; same_batch && d < x1->ndim - 1; d++) same_batch = x1->shape[d] == x2->shape[d];
  if (!same_batch)
    return mx__error(MX_SHAPE_ERROR, "mx_bilinear: input1 %s and input2 %s have different batch dims",
                     mx__dims_str(a, x1->ndim, x1->shape), mx__dims_str(b, x2->ndim, x2->shape));
  if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0]))
    return mx__error(MX_SHAPE_ERROR, "mx_bilinear: bias %s does not fit weight %s (expected [%lld])",
                     mx__dims_str(a, bias->ndim, bias->shape), mx__dims_str(b, 3, w->shape), (long long)w->shape[0]);
  int64_t out = w->shape[0], in1 = w->shape[1], in2 = w->shape[2];
  /* rows (N, in1) @ A as (in1, out * in2) -> (N, out, in2), then one bmm with x2 as (N, in2, 1) */
  mx_tensor *rows1 = mx_reshape(x1, MX_SHAPE(-1, in1)), *rows2 = mx_reshape(x2, MX_SHAPE(-1, in2, 1));
  mx_tensor *a_flat = mx_reshape(mx_permute(w, MX_SHAPE(1, 0, 2)), MX_SHAPE(in1, out * in2));
  mx_tensor *t = mx_reshape(mx_mm(rows1, a_flat), MX_SHAPE(-1, out, in2));
  mx_shape shape = mx_shape_get(x1);
  shape.d[shape.ndim - 1] = out;
  mx_tensor *y = mx_reshape(mx_bmm(t, rows2), shape);
  return OUT0(c, bias && y ? mx_add(y, bias) : y);
}

/* x where x > 0, else weight * x; weight has 1 element or one per channel (dim 1). */
mx_status mx__fwd_prelu(mx__call *c) {
  mx_tensor *x = c->in[0], *w = c->in[1];
  int64_t channels = x->ndim >= 2 ? x->shape[1] : 1, count = mx_numel(w);
  if (w->ndim > 1 || (count != 1 && count != channels)) {
    char a[MX__DIMS_STR], b[MX__DIMS_STR];
    return mx__error(MX_SHAPE_ERROR, "mx_prelu: weight %s must have 1 element or one per channel of input %s (%lld)",
                     mx__dims_str(a, w->ndim, w->shape), mx__dims_str(b, x->ndim, x->shape), (long long)channels);
  }
  mx_tensor *slope;
  if (count == 1) {
    slope = mx_reshape(w, MX_SCALAR);
  } else {
    mx_shape shape = {x->ndim, {0}};
    for (int d = 0; d < x->ndim; d++) shape.d[d] = d == 1 ? -1 : 1;
    slope = mx_reshape(w, shape);
  }
  return OUT0(c, mx_where(mx_gt_scalar(x, 0), x, mx_mul(slope, x)));
}

/* --- recurrent cells ----------------------------------------------------------------------------- */

/* The shapes of a cell with `gates` gates: x (B, I) or (I), h and c (B, H)
 * or (H), w_ih (gates H, I), w_hh (gates H, H), biases (gates H). */
static mx_status check_cell(const char *op, int gates, const mx_tensor *x, const mx_tensor *h, const mx_tensor *cell,
                            const mx_tensor *w_ih, const mx_tensor *w_hh, const mx_tensor *b_ih, const mx_tensor *b_hh) {
  char a[MX__DIMS_STR], b[MX__DIMS_STR];
  if (x->ndim < 1 || x->ndim > 2)
    return mx__error(MX_SHAPE_ERROR, "%s: input must be 1-d (input_size) or 2-d (batch, input_size), got shape %s", op,
                     mx__dims_str(a, x->ndim, x->shape));
  if (w_hh->ndim != 2 || w_hh->shape[0] != gates * w_hh->shape[1])
    return mx__error(MX_SHAPE_ERROR, "%s: w_hh must be (%d * hidden_size, hidden_size), got shape %s", op, gates,
                     mx__dims_str(a, w_hh->ndim, w_hh->shape));
  int64_t hidden = w_hh->shape[1], features = x->shape[x->ndim - 1];
  if (w_ih->ndim != 2 || w_ih->shape[0] != gates * hidden || w_ih->shape[1] != features)
    return mx__error(MX_SHAPE_ERROR, "%s: w_ih %s does not fit input %s and hidden size %lld (expected [%lld,%lld])", op,
                     mx__dims_str(a, w_ih->ndim, w_ih->shape), mx__dims_str(b, x->ndim, x->shape), (long long)hidden,
                     (long long)(gates * hidden), (long long)features);
  int64_t want[2] = {x->shape[0], hidden};
  int want_ndim = x->ndim;
  if (want_ndim == 1) want[0] = hidden;
  const mx_tensor *states[2] = {h, cell};
  const char *names[2] = {"hidden state h", "cell state c"};
  for (int k = 0; k < 2; k++) {
    const mx_tensor *s = states[k];
    if (!s) continue;
    bool fits = s->ndim == want_ndim;
    for (int d = 0; fits && d < want_ndim; d++) fits = s->shape[d] == want[d];
    if (!fits)
      return mx__error(MX_SHAPE_ERROR, "%s: %s of shape %s does not fit input %s and hidden size %lld (expected %s)", op,
                       names[k], mx__dims_str(a, s->ndim, s->shape), mx__dims_str(b, x->ndim, x->shape),
                       (long long)hidden, mx__dims_str((char[MX__DIMS_STR]){0}, want_ndim, want));
  }
  const mx_tensor *biases[2] = {b_ih, b_hh};
  for (int k = 0; k < 2; k++)
    if (biases[k] && (biases[k]->ndim != 1 || biases[k]->shape[0] != gates * hidden))
      return mx__error(MX_SHAPE_ERROR, "%s: %s of shape %s does not fit hidden size %lld (expected [%lld])", op,
                       k ? "b_hh" : "b_ih", mx__dims_str(a, biases[k]->ndim, biases[k]->shape), (long long)hidden,
                       (long long)(gates * hidden));
  return MX_OK;
}

/* Gate k of gates laid out along the last dim. */
static mx_tensor *gate(const mx_tensor *gates, int k, int64_t hidden) { return mx_narrow(gates, -1, k * hidden, hidden); }

static mx_status simple_cell(mx__call *c, const char *op, bool relu) {
  mx_tensor *x = c->in[0], *h = c->in[1], *w_ih = c->in[2], *w_hh = c->in[3];
  mx_tensor *b_ih = optional(c, 4, HAS_BIAS), *b_hh = optional(c, 4, HAS_BIAS_HH);
  if (check_cell(op, 1, x, h, NULL, w_ih, w_hh, b_ih, b_hh)) return mx_last_status();
  mx_tensor *pre = mx_add(affine(x, w_ih, b_ih), affine(h, w_hh, b_hh));
  return OUT0(c, relu ? mx_relu(pre) : mx_tanh(pre));
}

mx_status mx__fwd_rnn_tanh_cell(mx__call *c) { return simple_cell(c, "mx_rnn_tanh_cell", false); }
mx_status mx__fwd_rnn_relu_cell(mx__call *c) { return simple_cell(c, "mx_rnn_relu_cell", true); }

/* gates i, f, g, o; c' = f c + i g, h' = o tanh(c') */
mx_status mx__fwd_lstm_cell(mx__call *c) {
  mx_tensor *x = c->in[0], *h = c->in[1], *cell = c->in[2], *w_ih = c->in[3], *w_hh = c->in[4];
  mx_tensor *b_ih = optional(c, 5, HAS_BIAS), *b_hh = optional(c, 5, HAS_BIAS_HH);
  if (check_cell("mx_lstm_cell", 4, x, h, cell, w_ih, w_hh, b_ih, b_hh)) return mx_last_status();
  int64_t hidden = w_hh->shape[1];
  mx_tensor *gates = mx_add(affine(x, w_ih, b_ih), affine(h, w_hh, b_hh));
  mx_tensor *i = mx_sigmoid(gate(gates, 0, hidden)), *f = mx_sigmoid(gate(gates, 1, hidden));
  mx_tensor *g = mx_tanh(gate(gates, 2, hidden)), *o = mx_sigmoid(gate(gates, 3, hidden));
  mx_tensor *c_next = mx_add(mx_mul(f, cell), mx_mul(i, g));
  mx_tensor *h_next = mx_mul(o, mx_tanh(c_next));
  if (!h_next) return mx_last_status();
  c->out[0] = h_next;
  c->out[1] = c_next;
  return MX_OK;
}

/* gates r, z, n; n = tanh(W_in x + b_in + r (W_hn h + b_hn)), h' = (1 - z) n + z h */
mx_status mx__fwd_gru_cell(mx__call *c) {
  mx_tensor *x = c->in[0], *h = c->in[1], *w_ih = c->in[2], *w_hh = c->in[3];
  mx_tensor *b_ih = optional(c, 4, HAS_BIAS), *b_hh = optional(c, 4, HAS_BIAS_HH);
  if (check_cell("mx_gru_cell", 3, x, h, NULL, w_ih, w_hh, b_ih, b_hh)) return mx_last_status();
  int64_t hidden = w_hh->shape[1];
  mx_tensor *gi = affine(x, w_ih, b_ih), *gh = affine(h, w_hh, b_hh);
  mx_tensor *r = mx_sigmoid(mx_add(gate(gi, 0, hidden), gate(gh, 0, hidden)));
  mx_tensor *z = mx_sigmoid(mx_add(gate(gi, 1, hidden), gate(gh, 1, hidden)));
  mx_tensor *n = mx_tanh(mx_add(gate(gi, 2, hidden), mx_mul(r, gate(gh, 2, hidden))));
  return OUT0(c, mx_add(n, mx_mul(z, mx_sub(h, n))));
}

/* --- scaled dot-product attention ------------------------------------------------------------------ */

/* softmax(q k^T scale + mask) v with q (..., L, E), k (..., S, E), v (..., S, Ev); a bool mask
 * says where to attend, a floating one is added; is_causal attends to j <= i. Rows with nothing
 * to attend to give zeros (PyTorch's math backend since 2.5). */
mx_status mx__fwd_scaled_dot_product_attention(mx__call *c) {
  const char *op = "mx_scaled_dot_product_attention";
  mx_tensor *q = c->in[0], *k = c->in[1], *v = c->in[2], *mask = optional(c, 3, HAS_MASK);
  double dropout_p = c->args->f[0], scale = c->args->f[1];
  bool causal = c->args->keepdim;
  char a[MX__DIMS_STR], b[MX__DIMS_STR];
  if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2)
    return mx__error(MX_SHAPE_ERROR, "%s: query, key and value need at least 2 dims (..., L, E), got %d, %d and %d", op,
                     q->ndim, k->ndim, v->ndim);
  if (q->shape[q->ndim - 1] != k->shape[k->ndim - 1])
    return mx__error(MX_SHAPE_ERROR, "%s: query %s and key %s have different embedding sizes (%lld != %lld)", op,
                     mx__dims_str(a, q->ndim, q->shape), mx__dims_str(b, k->ndim, k->shape),
                     (long long)q->shape[q->ndim - 1], (long long)k->shape[k->ndim - 1]);
  if (k->shape[k->ndim - 2] != v->shape[v->ndim - 2])
    return mx__error(MX_SHAPE_ERROR, "%s: key %s and value %s have different sequence lengths (%lld != %lld)", op,
                     mx__dims_str(a, k->ndim, k->shape), mx__dims_str(b, v->ndim, v->shape),
                     (long long)k->shape[k->ndim - 2], (long long)v->shape[v->ndim - 2]);
  if (mask && causal) return mx__error(MX_INVALID_ARGUMENT, "%s: attn_mask and is_causal cannot both be set", op);
  if (mask && mask->dtype != MX_BOOL && !mx_dtype_is_floating(mask->dtype))
    return mx__error(MX_DTYPE_ERROR, "%s: attn_mask must be bool or floating, got %s", op, mx_dtype_name(mask->dtype));
  if (!(dropout_p >= 0 && dropout_p <= 1))
    return mx__error(MX_INVALID_ARGUMENT, "%s: dropout_p %g is not in [0, 1]", op, dropout_p);
  int64_t L = q->shape[q->ndim - 2], S = k->shape[k->ndim - 2], E = q->shape[q->ndim - 1];
  if (scale == 0) scale = 1 / sqrt((double)E);
  mx_tensor *scores = mx_mul_scalar(mx_matmul(q, mx_transpose(k, -2, -1)), scale);
  if (causal) { /* row i attends to columns j <= i */
    mx_tensor *rows = mx_reshape(mx_arange(0, (double)L, 1, MX_I64, q->device), MX_SHAPE(L, 1));
    mx_tensor *cols = mx_reshape(mx_arange(0, (double)S, 1, MX_I64, q->device), MX_SHAPE(1, S));
    mask = mx_ge(rows, cols);
  }
  mx_tensor *attn;
  if (mask) {
    scores = mask->dtype == MX_BOOL ? mx_masked_fill(scores, mx_logical_not(mask), -INFINITY) : mx_add(scores, mask);
    /* a row of -inf would give NaN (and NaN gradients): softmax a row of zeros instead, then zero it */
    mx_tensor *empty = scores ? mx_eq_scalar(mx_amax(mx_detach(scores), MX_DIMS(-1), true), -INFINITY) : NULL;
    attn = mx_masked_fill(mx_softmax(mx_masked_fill(scores, empty, 0), -1), empty, 0);
  } else {
    attn = mx_softmax(scores, -1);
  }
  if (dropout_p > 0) attn = mx_dropout(attn, dropout_p, true, c->args->ptr);
  return OUT0(c, mx_matmul(attn, v));
}

/* --- public functions --------------------------------------------------------------------------------- */

mx_tensor *mx_linear(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias) {
  const mx_tensor *fixed[2] = {x, weight}, *opt[1] = {bias};
  return call_optional1(MX_OP_LINEAR, 2, fixed, 1, opt, &(mx__args){0});
}

mx_tensor *mx_bilinear(const mx_tensor *x1, const mx_tensor *x2, const mx_tensor *weight, const mx_tensor *bias) {
  const mx_tensor *fixed[3] = {x1, x2, weight}, *opt[1] = {bias};
  return call_optional1(MX_OP_BILINEAR, 3, fixed, 1, opt, &(mx__args){0});
}

mx_tensor *mx_prelu(const mx_tensor *x, const mx_tensor *weight) { return mx__call2(MX_OP_PRELU, x, weight, NULL); }

mx_tensor *mx_rnn_tanh_cell(const mx_tensor *x, const mx_tensor *h, const mx_tensor *w_ih, const mx_tensor *w_hh,
                            const mx_tensor *b_ih, const mx_tensor *b_hh) {
  const mx_tensor *fixed[4] = {x, h, w_ih, w_hh}, *opt[2] = {b_ih, b_hh};
  return call_optional1(MX_OP_RNN_TANH_CELL, 4, fixed, 2, opt, &(mx__args){0});
}

mx_tensor *mx_rnn_relu_cell(const mx_tensor *x, const mx_tensor *h, const mx_tensor *w_ih, const mx_tensor *w_hh,
                            const mx_tensor *b_ih, const mx_tensor *b_hh) {
  const mx_tensor *fixed[4] = {x, h, w_ih, w_hh}, *opt[2] = {b_ih, b_hh};
  return call_optional1(MX_OP_RNN_RELU_CELL, 4, fixed, 2, opt, &(mx__args){0});
}

mx_status mx_lstm_cell(const mx_tensor *x, const mx_tensor *h, const mx_tensor *c, const mx_tensor *w_ih,
                       const mx_tensor *w_hh, const mx_tensor *b_ih, const mx_tensor *b_hh, mx_tensor **h_out,
                       mx_tensor **c_out) {
  const mx_tensor *fixed[5] = {x, h, c, w_ih, w_hh}, *opt[2] = {b_ih, b_hh};
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  mx_status status = call_optional(MX_OP_LSTM_CELL, 5, fixed, 2, opt, &(mx__args){0}, out);
  if (h_out) *h_out = out[0];
  else mx_release(out[0]);
  if (c_out) *c_out = out[1];
  else mx_release(out[1]);
  return status;
}

mx_tensor *mx_gru_cell(const mx_tensor *x, const mx_tensor *h, const mx_tensor *w_ih, const mx_tensor *w_hh,
                       const mx_tensor *b_ih, const mx_tensor *b_hh) {
  const mx_tensor *fixed[4] = {x, h, w_ih, w_hh}, *opt[2] = {b_ih, b_hh};
  return call_optional1(MX_OP_GRU_CELL, 4, fixed, 2, opt, &(mx__args){0});
}

mx_tensor *mx_scaled_dot_product_attention(const mx_tensor *q, const mx_tensor *k, const mx_tensor *v,
                                           const mx_tensor *attn_mask, double dropout_p, bool is_causal, double scale,
                                           mx_generator *gen) {
  const mx_tensor *fixed[3] = {q, k, v}, *opt[1] = {attn_mask};
  mx__args args = {.f = {dropout_p, scale}, .keepdim = is_causal, .ptr = gen};
  return call_optional1(MX_OP_SCALED_DOT_PRODUCT_ATTENTION, 3, fixed, 1, opt, &args);
}
