/* Batched matrix products on the CPU: oneDNN for float32 and bfloat16
 * (primitives cached by shape), plain loops for float64, float16 through
 * float32 with the result rounded (the tensor-core contract). */
#ifndef MX_KERNELS_CPU_MATMUL_H
#define MX_KERNELS_CPU_MATMUL_H

#include "kernels/base_internal.h"

/* out (B, M, N) = a (B, M, K) @ b (B, K, N); out is contiguous. */
mx_status mx__cpu_matmul(const mx_kview *out, const mx_kview *a, const mx_kview *b);

/* out = relu(a @ b + bias) through oneDNN (float32; mx__dnnl_linear_relu);
 * MX_NOT_SUPPORTED, no error set, where it declines: the op runs the
 * unfused ops. */
mx_status mx__cpu_linear_relu(const mx_kview *out, const mx_kview *a, const mx_kview *b, const mx_kview *bias);

/* The plain-loop product in double or float accumulation, used for f64,
 * as the fallback, and as the reference in tests. */
mx_status mx__cpu_matmul_reference(const mx_kview *out, const mx_kview *a, const mx_kview *b);

#endif
