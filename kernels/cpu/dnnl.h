/* oneDNN behind a few small functions, so its 2.x API (Debian 12) and 3.x
 * API (newer distributions) are served in one file. */
#ifndef MX_KERNELS_CPU_DNNL_H
#define MX_KERNELS_CPU_DNNL_H

#include "kernels/base_internal.h"
#include "kernels/cpu/conv.h"

/* out (B, M, N) = a (B, M, K) @ b (B, K, N) in float32 or bfloat16 (f32
 * accumulation), all three in one dtype; a and b may be transposed or strided
 * and broadcast over the batch (stride 0). MX_NOT_BUILT when oneDNN is absent
 * or unusable, MX_NOT_SUPPORTED when it has no native kernel for these
 * operands on this CPU (bfloat16 without bf16 dot products: mx__dnnl_runs in
 * dnnl_common.h); the caller falls back on both (mx__dnnl_declined);
 * MX_BACKEND_ERROR when a oneDNN call fails. Primitives are cached by shape,
 * strides and dtype, and may run on several threads at once. */
mx_status mx__dnnl_matmul(const mx_kview *out, const mx_kview *a, const mx_kview *b);

/* out = a @ b + bias, relu'd when relu, bias a contiguous vector of N
 * (out's last dim) in out's dtype: oneDNN's matmul with the bias (added to
 * the float32 sums before the one rounding into out) and, with relu, a
 * clip-to-[0, inf] post-op, one pass over out. MX_NOT_SUPPORTED where
 * matmul declines (float16 here, a bfloat16 product without bf16 dot
 * products, strides it cannot take). */
mx_status mx__dnnl_linear(const mx_kview *out, const mx_kview *a, const mx_kview *b, const mx_kview *bias, bool relu);

/* Whether oneDNN declined (absent, or no kernel here): the caller falls back. */
static inline bool mx__dnnl_declined(mx_status status) {
  return status == MX_NOT_BUILT || status == MX_NOT_SUPPORTED;
}

/* Whether oneDNN runs matrix products and convolutions of dtype natively on
 * this CPU (float32; bfloat16 where the CPU has bf16 dot products). */
bool mx__dnnl_native(mx_dtype dtype);

/* Convolutions (kernels/cpu/conv.h has the layouts) in float32 or bfloat16
 * (f32 accumulation), with the views' shapes already checked. MX_NOT_BUILT
 * or MX_NOT_SUPPORTED as for matmul (the caller falls back); MX_BACKEND_ERROR when a oneDNN call
 * fails. Primitives are cached by shape, strides, dtype and params, and may
 * run on several threads at once. */
mx_status mx__dnnl_conv_forward(const mx_kview *y, const mx_kview *x, const mx_kview *w, const mx_kview *bias,
                                const mx_conv_params *p);
/* y = relu(conv(x, w) + bias): the forward with a ReLU post-op (oneDNN's
 * clip to [0, inf]: max(s, 0) on the float32 sums, before y's rounding). */
mx_status mx__dnnl_conv_forward_relu(const mx_kview *y, const mx_kview *x, const mx_kview *w, const mx_kview *bias,
                                     const mx_conv_params *p);
mx_status mx__dnnl_conv_backward_data(const mx_kview *dx, const mx_kview *dy, const mx_kview *w,
                                      const mx_conv_params *p);
mx_status mx__dnnl_conv_backward_weight(const mx_kview *dw, const mx_kview *dy, const mx_kview *x,
                                        const mx_conv_params *p);
/* dw and db (C_out, contiguous) = dy summed per channel: the backward
 * weights with oneDNN's diff_bias, in the same pass over dy. */
mx_status mx__dnnl_conv_backward_weight_bias(const mx_kview *dw, const mx_kview *db, const mx_kview *dy,
                                             const mx_kview *x, const mx_conv_params *p);

/* A convolution of bfloat16 or float16 operands on a float32 primitive,
 * for a CPU without bf16 dot products (where the calls above decline
 * bfloat16) and for float16 everywhere (oneDNN 2.6 has no float16
 * convolutions): the reorders into its layouts convert the inputs to
 * float32 (exact), and the one out of it rounds the float32 sums once, so
 * no float32 copy of an operand is made beside them; a weight reordered so
 * is kept per version as the others are. float16 only where mixgrad's
 * channel-block transposes convert it (oneDNN's own float16 reorders are
 * its slow reference code): declined otherwise; its weights may come in
 * float32 (the caller converts them). kind's roles as conv.h's: x (or dx),
 * w (or dw), y (or dy); a weight's gradient is float32 (the caller rounds
 * it). bias: NULL or a float32 (C_out) vector, the forward's bias or, for a
 * weight's gradient, the bias's gradient written beside it (diff_bias). */
mx_status mx__dnnl_conv_in_f32(mx_conv_kind kind, const mx_kview *x, const mx_kview *w, const mx_kview *y,
                               const mx_kview *bias, const mx_conv_params *p);

/* How many operand reorders the convolutions have run since the process
 * started (oneDNN's, and the bfloat16 channel-block transposes; an input
 * found already reordered does not count), for tests that bound them. */
uint64_t mx__dnnl_conv_reorders(void);
/* Those of them that reordered a weight or its gradient. */
uint64_t mx__dnnl_conv_weight_reorders(void);
/* How many convolutions have run as oneDNN's Winograd (dnnl_conv.c,
 * winograd_fits) since the process started, for tests that check where. */
uint64_t mx__dnnl_conv_winograd_runs(void);
/* The bytes of reordered activations kept now (dnnl_conv.c, "kept"). */
size_t mx__dnnl_conv_kept_activation_bytes(void);

#endif
