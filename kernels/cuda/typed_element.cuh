/* Typed element access for the elementwise kernels' fast paths (fill.cu's
 * convert, elementwise.cu's unary and binary): operands that
 * flatten_operands left 1-d and contiguous (or a single broadcast element),
 * of float32, bfloat16 or float16, chosen on the host. The generic bodies
 * switch on every operand's dtype and go through double for each element,
 * which makes them instruction-bound; here the dtype is a template
 * argument and a value is decoded and encoded by kernels/math.h's own
 * conversions (common.cuh's float_value<D>), as the CPU backend's dense
 * loops do. */
#ifndef MX_KERNELS_CUDA_TYPED_ELEMENT_CUH
#define MX_KERNELS_CUDA_TYPED_ELEMENT_CUH

#include <type_traits>

#include "kernels/cuda/common.cuh"

/* Whether the fast paths take the dtype (float64 and the integers stay on
 * the generic bodies). */
static inline bool is_typed_float(mx_dtype dtype) { return dtype == MX_F32 || dtype == MX_BF16 || dtype == MX_F16; }

/* f(std::integral_constant<mx_dtype, dtype>()) for a dtype is_typed_float takes. */
template <class F>
static inline mx_status with_typed_float(mx_dtype dtype, F f) {
  switch (dtype) {
  case MX_F32: return f(std::integral_constant<mx_dtype, MX_F32>());
  case MX_BF16: return f(std::integral_constant<mx_dtype, MX_BF16>());
  default: return f(std::integral_constant<mx_dtype, MX_F16>());
  }
}

/* How a flattened operand is read at element i as p[i * step]: 1 where it
 * is contiguous, 0 where it is one element (0-d, or broadcast with stride
 * 0); -1 where neither, which the fast paths leave to the generic bodies. */
static inline int64_t dense_step(const mx_kview &v) {
  if (v.ndim == 0) return 0;
  if (v.ndim == 1 && (v.strides[0] == 0 || v.strides[0] == 1)) return v.strides[0];
  return -1;
}

/* Whether a flattened output is written at element i as p[i]. */
static inline bool dense_output(const mx_kview &v) {
  return dense_step(v) == 1 || mx__kview_numel(&v) <= 1;
}

#endif
