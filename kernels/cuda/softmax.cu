/* Softmax and log_softmax along a dim on CUDA, one thread per line, with the
 * arithmetic of the CPU's general line (kernels/cpu/indexing.c): the max
 * (NaN wins), then exp and the sum in double, then the normalisation or the
 * log. The CPU's float32 lines use a vectorised float exp instead, within 2
 * ulp of this. */
#include "kernels/cuda/common.cuh"

struct softmax_op {
  mx_kview out, x;
  int dim;
  bool log_softmax;
  int64_t line_shape[MX_MAX_DIMS]; /* x's shape with 1 along dim */
  MX_HD void operator()(int64_t line) const {
    int64_t xo = mx_strided_offset(line, x.ndim, line_shape, x.strides);
    int64_t oo = mx_strided_offset(line, out.ndim, line_shape, out.strides);
    int64_t len = x.shape[dim], xs = x.strides[dim], os = out.strides[dim];
    int64_t xb = dtype_bytes(x.dtype), ob = dtype_bytes(out.dtype);
    const char *xp = (const char *)x.data;
    char *op = (char *)out.data;
    double m = -INFINITY, sum = 0;
    for (int64_t k = 0; k < len; k++) {
      double v = mx_element_load(xp + (xo + k * xs) * xb, x.dtype);
      m = v > m || isnan(v) ? v : m;
    }
    if (isinf(m) && m < 0) m = 0; /* a line of -inf: no shift */
    for (int64_t k = 0; k < len; k++) sum += exp(mx_element_load(xp + (xo + k * xs) * xb, x.dtype) - m);
    double log_sum = log(sum);
    for (int64_t k = 0; k < len; k++) {
      double shifted = mx_element_load(xp + (xo + k * xs) * xb, x.dtype) - m;
      mx_element_store(op + (oo + k * os) * ob, out.dtype, log_softmax ? shifted - log_sum : exp(shifted) / sum);
    }
  }
};

mx_status mx__cuda_softmax(const mx_kview *out, const mx_kview *x, int dim, bool log_softmax) {
  int64_t len = x->shape[dim];
  softmax_op op;
  op.out = *out;
  op.x = *x;
  op.dim = dim;
  op.log_softmax = log_softmax;
  for (int d = 0; d < MX_MAX_DIMS; d++) op.line_shape[d] = d < x->ndim ? x->shape[d] : 1;
  op.line_shape[dim] = 1;
  return launch_elementwise("launch of kernel softmax", len ? mx__kview_numel(x) / len : 0, op);
}
