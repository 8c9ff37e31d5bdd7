/* cross_entropy over class indices one row at a time, shared by the CPU
 * (kernels/cpu/cross_entropy.c: its general path, a loop over the rows) and
 * CUDA (kernels/cuda/cross_entropy.cu: a thread per row), so the two give
 * the same bits. x is (N, C), floating, any strides; target (N) int64, any
 * stride. Everything is computed in double, whatever x's dtype. */
#ifndef MX_KERNELS_CROSS_ENTROPY_ROW_H
#define MX_KERNELS_CROSS_ENTROPY_ROW_H

#include "kernels/backend.h"
#include "kernels/math.h"

/* Bytes of a floating dtype. */
MX_HD static inline int64_t mx_xent_size(mx_dtype dtype) { return dtype == MX_F64 ? 8 : dtype == MX_F32 ? 4 : 2; }

/* x[row, k] */
MX_HD static inline double mx_xent_x(const mx_kview *x, int64_t row, int64_t k) {
  return mx_element_load((const char *)x->data + (row * x->strides[0] + k * x->strides[1]) * mx_xent_size(x->dtype),
                         x->dtype);
}

MX_HD static inline int64_t mx_xent_target(const mx_kview *target, int64_t row) {
  return ((const int64_t *)target->data)[row * target->strides[0]];
}

/* log(sum(exp(x[row]))), shifted by the row's max (NaN wins; a row of -inf is not shifted). */
MX_HD static inline double mx_xent_lse(const mx_kview *x, int64_t row) {
  int64_t len = x->shape[1];
  double m = -INFINITY, sum = 0;
  for (int64_t k = 0; k < len; k++) {
    double v = mx_xent_x(x, row, k);
    m = v > m || isnan(v) ? v : m;
  }
  if (isinf(m) && m < 0) m = 0;
  for (int64_t k = 0; k < len; k++) sum += exp(mx_xent_x(x, row, k) - m);
  return m + log(sum);
}

/* The row's loss lse - x[t]: 0 where t is ignore_index, NaN where t is out of range (the op checked the targets
 * before; this only keeps a bad one from reading outside the row). */
MX_HD static inline double mx_xent_loss(const mx_kview *x, const mx_kview *target, int64_t row, int64_t ignore_index) {
  int64_t t = mx_xent_target(target, row);
  if (t == ignore_index) return 0;
  if (t < 0 || t >= x->shape[1]) return NAN;
  return mx_xent_lse(x, row) - mx_xent_x(x, row, t);
}

/* How many of the targets are not ignore_index: the mean's divisor. */
MX_HD static inline int64_t mx_xent_count(const mx_kview *target, int64_t ignore_index) {
  int64_t count = 0;
  for (int64_t i = 0; i < target->shape[0]; i++) count += mx_xent_target(target, i) != ignore_index;
  return count;
}

/* The gradient's factor for a row: g (0-d: the sum's or the mean's gradient, the mean's divided by count; (N):
 * the row's), 0 where the row is ignored. */
MX_HD static inline double mx_xent_scale(const mx_kview *grad, const mx_kview *target, int64_t row,
                                         int64_t ignore_index, bool mean, int64_t count) {
  if (mx_xent_target(target, row) == ignore_index) return 0;
  const char *g = (const char *)grad->data + (grad->ndim ? row * grad->strides[0] : 0) * mx_xent_size(grad->dtype);
  double scale = mx_element_load(g, grad->dtype);
  return mean ? scale / (double)count : scale;
}

/* dx[row] = (softmax(x[row]) - onehot(t)) scale, stored in dx's dtype (x's shape, any strides); zeros where t is
 * ignore_index. */
MX_HD static inline void mx_xent_grad_row(const mx_kview *dx, const mx_kview *x, const mx_kview *target, int64_t row,
                                          int64_t ignore_index, double scale) {
  int64_t t = mx_xent_target(target, row), size = mx_xent_size(dx->dtype);
  bool ignored = t == ignore_index;
  double lse = ignored ? 0 : mx_xent_lse(x, row);
  for (int64_t k = 0; k < x->shape[1]; k++) {
    double v = ignored ? 0 : (exp(mx_xent_x(x, row, k) - lse) - (k == t)) * scale;
    mx_element_store((char *)dx->data + (row * dx->strides[0] + k * dx->strides[1]) * size, dx->dtype, v);
  }
}

#endif
