/* Convolutions on the CPU: oneDNN for float32 and bfloat16 (primitives
 * cached by shape), plain loops for float64 and as the fallback, float16
 * through float32 with the result rounded (the tensor-core contract).
 *
 * Layouts are PyTorch's: x (N, C_in, *S_in), w (C_out, C_in/groups, *K),
 * y (N, C_out, *S_out), with 1, 2 or 3 spatial dims, any strides, one dtype
 * (f32, f64, f16, bf16) for all three. Per spatial dim
 *
 *     S_out = (S_in + 2*padding - dilation*(K-1) - 1) / stride + 1
 *
 * and y[n, o, s] = sum over the group's input channels c and taps k of
 * x[n, c, s*stride - padding + k*dilation] * w[o, c, k] (zero outside x). */
#ifndef MX_KERNELS_CPU_CONV_H
#define MX_KERNELS_CPU_CONV_H

#include "kernels/base_internal.h"
#include "kernels/conv_check.h" /* mx_conv_kind; every entry point here runs mx__conv_check */

#ifdef __cplusplus
extern "C" {
#endif

#ifndef MX_CONV_PARAMS_DEFINED
#define MX_CONV_PARAMS_DEFINED
typedef struct {
  int spatial;                              /* 1, 2 or 3 spatial dims */
  int64_t stride[3], padding[3], dilation[3];
  int64_t groups;
} mx_conv_params;
#endif

/* y = conv(x, w) + bias: bias is NULL or a contiguous (C_out) vector of the
 * operands' dtype, added to each sum before its one rounding to y's dtype
 * (oneDNN's fused bias, cuDNN's too). */
mx_status mx__cpu_conv_forward(const mx_kview *y, const mx_kview *x, const mx_kview *w, const mx_kview *bias,
                               const mx_conv_params *p);
/* y = relu(conv(x, w) + bias): in float32, and bfloat16 where the CPU has
 * bf16 dot products, the ReLU runs inside oneDNN's convolution as a post-op
 * on the float32 sums before their one rounding (max(s, 0): the bits of the
 * ReLU kernel on y for every sum but a NaN and one that is or rounds to -0,
 * which come out +0); elsewhere (float64, float16, the loops) the
 * convolution, then the ReLU kernel on y. */
mx_status mx__cpu_conv_forward_relu(const mx_kview *y, const mx_kview *x, const mx_kview *w, const mx_kview *bias,
                                    const mx_conv_params *p);
/* dx = the gradient of x given dy (also the transposed convolution). dx's
 * spatial shape is its view's: it may exceed the smallest input that gives
 * dy's shape (output_padding); every element of dx is written. */
mx_status mx__cpu_conv_backward_data(const mx_kview *dx, const mx_kview *dy, const mx_kview *w,
                                     const mx_conv_params *p);
/* dw = the gradient of w given dy and x; every element of dw is written. */
mx_status mx__cpu_conv_backward_weight(const mx_kview *dw, const mx_kview *dy, const mx_kview *x,
                                       const mx_conv_params *p);
/* dw as mx__cpu_conv_backward_weight's and db (a contiguous (C_out) vector of
 * dy's dtype) = dy summed per output channel: in float32 and bfloat16,
 * oneDNN's backward weights writes db in the same pass over dy (diff_bias,
 * its float32 sums, a block of samples' added in float32, rounded once);
 * elsewhere dw as above, then db summed in double and rounded once. */
mx_status mx__cpu_conv_backward_weight_bias(const mx_kview *dw, const mx_kview *db, const mx_kview *dy,
                                            const mx_kview *x, const mx_conv_params *p);

/* float16, and bfloat16 where oneDNN has no native kernel, are convolved in
 * float32 (bfloat16 by float32 primitives whose reorders convert it,
 * float16 on float32 copies): the whole batch at once where its float32 x
 * and y take at most `from` bytes (or the products dominate: 256 or more
 * per element of x and y), else blocks of samples of about `bytes` each, so
 * the float32 data stays in cache (a weight gradient's blocks summed in
 * float32); a quarter and a half of those for convolutions of under 32
 * products per element. For tests and benchmarks; the defaults are 16 MiB
 * and 4 MiB. */
void mx__cpu_conv_staging(int64_t from, int64_t bytes);
/* How many blocks of samples (not whole batches) have been convolved so far. */
uint64_t mx__cpu_conv_staged_blocks(void);
/* Samples a block, where a convolution of x, w and y runs a block of samples at a time so that what it writes is
 * still in cache when it is read back (the staging above, and dnnl_conv_pool.c's chunks): the whole batch where its
 * buffers take at most from bytes (batch_bytes) or the convolution does 256 or more products per element of x and
 * y, else blocks of about `bytes` each, the batch split evenly; a quarter of from and half of bytes for
 * convolutions of under 32 products per element. conv.c says where these were measured. */
int64_t mx__cpu_conv_block_samples(const mx_kview *x, const mx_kview *w, const mx_kview *y, int64_t batch_bytes,
                                   int64_t from, int64_t bytes);

/* The plain loops (direct convolution), accumulating in double for f64 and in
 * float otherwise: used for f64, as the fallback, and as the reference in
 * tests. float16/bfloat16 operands are converted to float32 first. */
mx_status mx__cpu_conv_forward_reference(const mx_kview *y, const mx_kview *x, const mx_kview *w,
                                         const mx_kview *bias, const mx_conv_params *p);
mx_status mx__cpu_conv_backward_data_reference(const mx_kview *dx, const mx_kview *dy, const mx_kview *w,
                                               const mx_conv_params *p);
mx_status mx__cpu_conv_backward_weight_reference(const mx_kview *dw, const mx_kview *dy, const mx_kview *x,
                                                 const mx_conv_params *p);

#ifdef __cplusplus
}
#endif

#endif
