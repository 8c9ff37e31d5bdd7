/* Convolutions through cuDNN, for kernels/cuda/conv.cu. */
#ifndef MX_KERNELS_CUDA_CONV_CUDNN_H
#define MX_KERNELS_CUDA_CONV_CUDNN_H

#include <stdbool.h>

#include "kernels/conv_check.h"

/* One convolution of the given kind through cuDNN, the operands named as in
 * the forward: y = conv(x, w) without bias (MX_CONV_FORWARD), x's gradient
 * from y's and w (MX_CONV_BACKWARD_DATA), w's gradient from y's and x
 * (MX_CONV_BACKWARD_WEIGHT); the result is overwritten. Takes contiguous
 * float32 (without TF32), float16 and bfloat16 operands (float
 * accumulation) whose sizes fit cuDNN's ints. For anything else, or when
 * cuDNN has no algorithm for the case, it runs nothing and sets *declined
 * (the caller's direct kernels do it). Returns MX_OK or a failure. */
mx_status mx__cudnn_conv(mx_conv_kind kind, const mx_kview *x, const mx_kview *w, const mx_kview *y,
                         const mx_conv_params *p, bool *declined);

#endif
