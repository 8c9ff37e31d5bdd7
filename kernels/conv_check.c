/* The checks every convolution kernel runs first, on the CPU and on CUDA. */
#include "kernels/conv_check.h"

#include "kernels/conv_geom.h"

static const char *kind_name(mx_conv_kind kind) {
  return kind == MX_CONV_FORWARD ? "forward" : kind == MX_CONV_BACKWARD_DATA ? "backward data" : "backward weight";
}

static mx_status check_operands(mx_conv_kind kind, const mx_kview *x, const mx_kview *w, const mx_kview *y,
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

mx_status mx__conv_check(mx_conv_kind kind, const mx_kview *x, const mx_kview *w, const mx_kview *y,
                         const mx_kview *bias, const mx_conv_params *p) {
  mx_status status = check_operands(kind, x, w, y, p);
  return status == MX_OK ? check_bias(bias, y) : status;
}
