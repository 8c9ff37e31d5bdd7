/* conv2d_max_pool_relu (ops/ops.def) for the rooms above ops that run it without a public function: nn's
 * Sequential, for a Conv2d, a ReLU and a MaxPool2d in turn. */
#ifndef MX_OPS_CONV_POOL_H
#define MX_OPS_CONV_POOL_H

#include "tensor/tensor.h"

/* *y = mx_max_pool_relu(mx_conv2d(x, weight, bias, stride, padding, dilation, groups), 2, kernel, pool_stride,
 * pool_padding, pool_dilation) as one op, bit for bit, forward and backward (an empty pool_stride is the kernel);
 * *indices (may be NULL: not wanted) the indices the graph saves for backward: uint8 offsets in the window (int64
 * flat positions in each plane where a window holds more than 256 elements or is dilated). On the CPU with oneDNN
 * the convolution's full-resolution output and its gradient stay in oneDNN's layout inside the op; other devices
 * and cases run the convolution and the pooling in turn inside it. */
mx_status mx__conv2d_max_pool_relu(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, mx_shape stride,
                                   mx_shape padding, mx_shape dilation, int64_t groups, mx_shape kernel,
                                   mx_shape pool_stride, mx_shape pool_padding, mx_shape pool_dilation, mx_tensor **y,
                                   mx_tensor **indices);

#endif
