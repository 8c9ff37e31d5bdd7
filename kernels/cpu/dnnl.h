/* oneDNN behind a few small functions, so its 2.x API (Debian 12) and 3.x
 * API (newer distributions) are served in one file. */
#ifndef MX_KERNELS_CPU_DNNL_H
#define MX_KERNELS_CPU_DNNL_H

#include "kernels/base_internal.h"

/* out (B, M, N) = a (B, M, K) @ b (B, K, N) in float32 or bfloat16 (f32
 * accumulation). MX_NOT_BUILT when oneDNN is absent or has no kernel for
 * these operands (the caller falls back). Primitives are cached by shape,
 * strides and dtype. */
mx_status mx__dnnl_matmul(const mx_kview *out, const mx_kview *a, const mx_kview *b);

#endif
