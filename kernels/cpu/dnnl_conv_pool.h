/* max_pool_relu(conv2d(x, w) + bias) and its backward on the CPU, the convolution's full-resolution output and its
 * gradient kept in oneDNN's own layout (kernels/backend.h: conv_max_pool_relu, conv_max_pool_relu_backward). */
#ifndef MX_KERNELS_CPU_DNNL_CONV_POOL_H
#define MX_KERNELS_CPU_DNNL_CONV_POOL_H

#include "kernels/backend.h"

mx_status mx__cpu_conv_max_pool_relu(const mx_kview *y, const mx_kview *indices, const mx_kview *x, const mx_kview *w,
                                     const mx_kview *bias, const mx_conv_params *cp, const mx_pool_params *pp,
                                     bool channels_last);
mx_status mx__cpu_conv_max_pool_relu_backward(const mx_kview *dx, const mx_kview *dw, const mx_kview *db,
                                              const mx_kview *g, const mx_kview *mask, const mx_kview *indices,
                                              const mx_kview *x, const mx_kview *w, const mx_conv_params *cp,
                                              const mx_pool_params *pp, bool channels_last);

/* How many times the fused forward (backward false) or backward ran, declining none, since the process started:
 * for tests that the fused kernels, not the unfused ones, made a result. */
uint64_t mx__cpu_conv_max_pool_relu_runs(bool backward);
/* How many chunks of a batch the fused backward has run its weight's gradient in (the whole batch at once: none). */
uint64_t mx__cpu_conv_max_pool_relu_weight_chunks(void);

/* Where a batch's full-resolution output is made a chunk of the batch at a time: over from bytes, in chunks of
 * about bytes each (defaults 16 MiB and 4 MiB), as mx__cpu_conv_block_samples applies them (kernels/cpu/conv.h); for
 * tests that chunk small batches. */
void mx__cpu_conv_max_pool_relu_chunking(int64_t from, int64_t bytes);

#endif
