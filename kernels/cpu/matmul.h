/* Batched matrix products on the CPU: oneDNN for float32 and bfloat16
 * (primitives cached by shape), plain loops for float64, float16 through
 * float32 with the result rounded (the tensor-core contract). */
#ifndef MX_KERNELS_CPU_MATMUL_H
#define MX_KERNELS_CPU_MATMUL_H

#include "kernels/base_internal.h"

/* out (B, M, N) = a (B, M, K) @ b (B, K, N); out is contiguous. */
mx_status mx__cpu_matmul(const mx_kview *out, const mx_kview *a, const mx_kview *b);

/* out = a @ b + bias, relu'd when relu, the bias added before the one
 * rounding: oneDNN (float32 and bfloat16; mx__dnnl_linear), else for 16
 * bits the float32-copy product of mx__cpu_matmul with the bias. Float32
 * and float64 where oneDNN declines: MX_NOT_SUPPORTED, no error set (the
 * op runs matmul and add, which round once too). */
mx_status mx__cpu_linear(const mx_kview *out, const mx_kview *a, const mx_kview *b, const mx_kview *bias, bool relu);

/* The plain-loop product in double or float accumulation, used for f64,
 * as the fallback, and as the reference in tests. */
mx_status mx__cpu_matmul_reference(const mx_kview *out, const mx_kview *a, const mx_kview *b);

#endif
