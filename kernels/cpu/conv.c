/* Convolutions on the CPU: the checks, the plain loops, and the dispatch to
 * oneDNN (float32, bfloat16) or to the loops (float64, and the fallback). */
#include "kernels/cpu/conv.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/conv_geom.h"

#include "kernels/cpu/dnnl.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/via_f32.h"

#define MX__CAT_(a, b) a##b
#define MX__CAT(a, b) MX__CAT_(a, b)

/* The three operands in their forward roles: x (or dx), w (or dw), y (or dy). */
enum { ROLE_X, ROLE_W, ROLE_Y };

/* The output's role for each kind of convolution. */
static int output_role(mx_conv_kind kind) {
  return kind == MX_CONV_FORWARD ? ROLE_Y : kind == MX_CONV_BACKWARD_DATA ? ROLE_X : ROLE_W;
}

static const char *kind_name(mx_conv_kind kind) {
  return kind == MX_CONV_FORWARD ? "forward" : kind == MX_CONV_BACKWARD_DATA ? "backward data" : "backward weight";
}

/* --- checks ----------------------------------------------------------------------- */

mx_status mx__cpu_conv_check(mx_conv_kind kind, const mx_kview *x, const mx_kview *w, const mx_kview *y,
                             const mx_conv_params *p) {
  if (!p || !x || !w || !y) return mx__error(MX_NULL_INPUT, "mx_conv: NULL operand or params");
  int s = p->spatial;
  if (s < 1 || s > 3) return mx__error(MX_INVALID_ARGUMENT, "mx_conv: %d spatial dims (expected 1, 2 or 3)", s);
  const char *what = kind_name(kind);
  if (x->ndim != 2 + s || w->ndim != 2 + s || y->ndim != 2 + s)
    return mx__error(MX_SHAPE_ERROR, "mx_conv: %s with %d spatial dims needs %d-d operands, got %d-d, %d-d, %d-d", what,
                     s, 2 + s, x->ndim, w->ndim, y->ndim);
  mx_dtype dt = x->dtype;
  if (w->dtype != dt || y->dtype != dt)
    return mx__error(MX_DTYPE_ERROR, "mx_conv: operands of %s, %s and %s (expected one dtype)", mx_dtype_name(x->dtype),
                     mx_dtype_name(w->dtype), mx_dtype_name(y->dtype));
  if (dt != MX_F32 && dt != MX_F64 && dt != MX_F16 && dt != MX_BF16)
    return mx__error(MX_DTYPE_ERROR, "mx_conv: unsupported dtype %s", mx_dtype_name(dt));
  int64_t G = p->groups, C_in = x->shape[1], C_out = y->shape[1];
  if (G < 1) return mx__error(MX_INVALID_ARGUMENT, "mx_conv: groups %lld (expected >= 1)", (long long)G);
  if (C_in % G || C_out % G)
    return mx__error(MX_SHAPE_ERROR, "mx_conv: %lld input and %lld output channels do not split into %lld groups",
                     (long long)C_in, (long long)C_out, (long long)G);
  char b1[MX__DIMS_STR], b2[MX__DIMS_STR], b3[MX__DIMS_STR];
  if (x->shape[0] != y->shape[0] || w->shape[0] != C_out || w->shape[1] != C_in / G)
    return mx__error(MX_SHAPE_ERROR, "mx_conv: %s shapes x %s, w %s, y %s do not match (groups %lld)", what,
                     mx__dims_str(b1, x->ndim, x->shape), mx__dims_str(b2, w->ndim, w->shape),
                     mx__dims_str(b3, y->ndim, y->shape), (long long)G);
  for (int d = 0; d < s; d++) {
    int64_t st = p->stride[d], pad = p->padding[d], dil = p->dilation[d], K = w->shape[2 + d];
    if (st < 1 || dil < 1 || pad < 0)
      return mx__error(MX_INVALID_ARGUMENT, "mx_conv: stride %lld, padding %lld, dilation %lld in spatial dim %d",
                       (long long)st, (long long)pad, (long long)dil, d);
    if (K < 1) return mx__error(MX_SHAPE_ERROR, "mx_conv: kernel size %lld in spatial dim %d", (long long)K, d);
    int64_t in = x->shape[2 + d], out = y->shape[2 + d];
    int64_t expect = mx_floor_div(in + 2 * pad - dil * (K - 1) - 1, st) + 1;
    if (expect < 1)
      return mx__error(MX_SHAPE_ERROR, "mx_conv: kernel extent %lld exceeds padded input %lld in spatial dim %d",
                       (long long)(dil * (K - 1) + 1), (long long)(in + 2 * pad), d);
    /* backward data: dx may be larger than the smallest input that gives dy
     * (output_padding), never smaller */
    bool ok = kind == MX_CONV_BACKWARD_DATA ? out >= 1 && out <= expect : out == expect;
    if (!ok)
      return mx__error(MX_SHAPE_ERROR, "mx_conv: %s output size %lld in spatial dim %d (input %lld gives %lld)", what,
                       (long long)out, d, (long long)in, (long long)expect);
  }
  return MX_OK;
}

/* --- the plain loops ------------------------------------------------------------- */

#define REF_CHUNK 256

#define REF_T float
#define REF_A float
#define REF_NAME f32
#include "kernels/cpu/conv_reference.inc"

#define REF_T double
#define REF_A double
#define REF_NAME f64
#include "kernels/cpu/conv_reference.inc"

/* views[ROLE_*] (and the forward's bias): the loops for float32 or float64 views. */
static void reference_typed(mx_conv_kind kind, const mx_kview *const *v, const mx_kview *bias,
                            const mx_conv_params *p) {
  mx_conv_geom g = mx_conv_geom_of(v[ROLE_X], v[ROLE_W], v[ROLE_Y], p);
  g.bias = bias ? bias->data : NULL;
  bool f64 = v[ROLE_X]->dtype == MX_F64;
  switch (kind) {
  case MX_CONV_FORWARD: f64 ? ref_forward_f64(&g) : ref_forward_f32(&g); break;
  case MX_CONV_BACKWARD_DATA: f64 ? ref_backward_data_f64(&g) : ref_backward_data_f32(&g); break;
  case MX_CONV_BACKWARD_WEIGHT: f64 ? ref_backward_weight_f64(&g) : ref_backward_weight_f32(&g); break;
  }
}

/* oneDNN on float32 or bfloat16 views, by kind. */
static mx_status dnnl_run(mx_conv_kind kind, const mx_kview *const *v, const mx_kview *bias, const mx_conv_params *p) {
  switch (kind) {
  case MX_CONV_FORWARD: return mx__dnnl_conv_forward(v[ROLE_Y], v[ROLE_X], v[ROLE_W], bias, p);
  case MX_CONV_BACKWARD_DATA: return mx__dnnl_conv_backward_data(v[ROLE_X], v[ROLE_Y], v[ROLE_W], p);
  default: return mx__dnnl_conv_backward_weight(v[ROLE_W], v[ROLE_Y], v[ROLE_X], p);
  }
}

/* float16 and bfloat16 as the GPU does them: dense float32 copies of the
 * inputs (the bias too), float32 products and sums (oneDNN, or the loops
 * when reference), one rounding of the result. */
static mx_status via_f32(mx_conv_kind kind, const mx_kview *const *v, const mx_kview *bias, const mx_conv_params *p,
                         bool reference) {
  int out = output_role(kind);
  float *buf[3] = {NULL, NULL, NULL}, *bias_buf = bias ? mx__cpu_dense_f32(bias) : NULL;
  mx_kview dense[3], dense_bias;
  const mx_kview *dv[3] = {&dense[0], &dense[1], &dense[2]};
  mx_status status = MX_OK;
  if (bias && !bias_buf) status = mx__error(MX_OUT_OF_MEMORY, "mx_conv: out of memory converting the bias to float32");
  if (bias_buf) dense_bias = mx__cpu_dense_f32_view(bias_buf, bias);
  for (int r = 0; r < 3 && status == MX_OK; r++) {
    if (r == out) {
      buf[r] = mx__cpu_f32_alloc(mx__kview_numel(v[r]));
    } else {
      buf[r] = mx__cpu_dense_f32(v[r]);
    }
    if (!buf[r])
      status = mx__error(MX_OUT_OF_MEMORY, "mx_conv: out of memory converting %s operands to float32",
                         mx_dtype_name(v[r]->dtype));
    else
      dense[r] = mx__cpu_dense_f32_view(buf[r], v[r]);
  }
  const mx_kview *db = bias ? &dense_bias : NULL;
  if (status == MX_OK) {
    status = reference ? MX_NOT_BUILT : dnnl_run(kind, dv, db, p);
    if (status == MX_NOT_BUILT) {
      reference_typed(kind, dv, db, p);
      status = MX_OK;
    }
    if (status == MX_OK) mx__cpu_store_f32(v[out], buf[out]);
  }
  for (int r = 0; r < 3; r++) mx__cpu_f32_free(buf[r], mx__kview_numel(v[r]));
  if (bias) mx__cpu_f32_free(bias_buf, mx__kview_numel(bias));
  return status;
}

/* The forward's bias: NULL, or a contiguous (C_out) vector of y's dtype. */
static mx_status check_bias(const mx_kview *bias, const mx_kview *y) {
  if (!bias) return MX_OK;
  if (bias->ndim != 1 || bias->shape[0] != y->shape[1] || (bias->shape[0] > 1 && bias->strides[0] != 1))
    return mx__error(MX_SHAPE_ERROR, "mx_conv: a bias of %d dims, %lld elements, stride %lld for %lld output "
                     "channels (expected a contiguous vector of one per channel)", bias->ndim,
                     (long long)(bias->ndim ? bias->shape[0] : 0), (long long)(bias->ndim ? bias->strides[0] : 0),
                     (long long)y->shape[1]);
  if (bias->dtype != y->dtype)
    return mx__error(MX_DTYPE_ERROR, "mx_conv: a %s bias for %s operands", mx_dtype_name(bias->dtype),
                     mx_dtype_name(y->dtype));
  return MX_OK;
}

static mx_status run(mx_conv_kind kind, const mx_kview *x, const mx_kview *w, const mx_kview *y, const mx_kview *bias,
                     const mx_conv_params *p, bool reference) {
  mx_status status = mx__cpu_conv_check(kind, x, w, y, p);
  if (status == MX_OK) status = check_bias(bias, y);
  if (status != MX_OK) return status;
  const mx_kview *v[3] = {x, w, y};
  if (mx__kview_numel(v[output_role(kind)]) == 0) return MX_OK;
  /* an empty operand (no batch, no channels in a group): the sums are empty
   * and the loops write the zeros */
  bool empty = false;
  for (int r = 0; r < 3; r++) empty |= mx__kview_numel(v[r]) == 0;
  mx_dtype dt = x->dtype;
  if (dt == MX_F64 || (dt == MX_F32 && (reference || empty))) {
    reference_typed(kind, v, bias, p);
    return MX_OK;
  }
  if (dt == MX_F32 || (dt == MX_BF16 && !reference && !empty)) {
    status = dnnl_run(kind, v, bias, p);
    if (status != MX_NOT_BUILT) return status;
    if (dt == MX_F32) {
      reference_typed(kind, v, bias, p);
      return MX_OK;
    }
  }
  /* float16 always, bfloat16 where oneDNN has no kernel */
  return via_f32(kind, v, bias, p, reference || empty);
}

mx_status mx__cpu_conv_forward(const mx_kview *y, const mx_kview *x, const mx_kview *w, const mx_kview *bias,
                               const mx_conv_params *p) {
  return run(MX_CONV_FORWARD, x, w, y, bias, p, false);
}

mx_status mx__cpu_conv_backward_data(const mx_kview *dx, const mx_kview *dy, const mx_kview *w,
                                     const mx_conv_params *p) {
  return run(MX_CONV_BACKWARD_DATA, dx, w, dy, NULL, p, false);
}

mx_status mx__cpu_conv_backward_weight(const mx_kview *dw, const mx_kview *dy, const mx_kview *x,
                                       const mx_conv_params *p) {
  return run(MX_CONV_BACKWARD_WEIGHT, x, dw, dy, NULL, p, false);
}

mx_status mx__cpu_conv_forward_reference(const mx_kview *y, const mx_kview *x, const mx_kview *w,
                                         const mx_kview *bias, const mx_conv_params *p) {
  return run(MX_CONV_FORWARD, x, w, y, bias, p, true);
}

mx_status mx__cpu_conv_backward_data_reference(const mx_kview *dx, const mx_kview *dy, const mx_kview *w,
                                               const mx_conv_params *p) {
  return run(MX_CONV_BACKWARD_DATA, dx, w, dy, NULL, p, true);
}

mx_status mx__cpu_conv_backward_weight_reference(const mx_kview *dw, const mx_kview *dy, const mx_kview *x,
                                                 const mx_conv_params *p) {
  return run(MX_CONV_BACKWARD_WEIGHT, x, dw, dy, NULL, p, true);
}
