#include "examples/train/models.h"

#include <stdio.h>

#include "mixgrad.h"

static mx_module *max_pool(int64_t k) { return mx_max_pool2d_new(MX_DIMS(k), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT); }

static mx_module *conv3x3(int64_t in, int64_t out, bool bias) {
  return mx_conv2d_new(in, out, MX_DIMS(3), MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1, bias, NULL);
}

mx_module *mx_demo_mlp(void) {
  return mx_sequential_new(6, (mx_module *[]){mx_flatten_new(1, -1), mx_linear_new(784, 512, true, NULL),
                                              mx_relu_new(), mx_linear_new(512, 512, true, NULL), mx_relu_new(),
                                              mx_linear_new(512, 10, true, NULL)});
}

mx_module *mx_demo_cnn(void) {
  return mx_sequential_new(10, (mx_module *[]){conv3x3(1, 32, true), mx_relu_new(), max_pool(2),
                                               conv3x3(32, 64, true), mx_relu_new(), max_pool(2),
                                               mx_flatten_new(1, -1), mx_linear_new(64 * 7 * 7, 128, true, NULL),
                                               mx_relu_new(), mx_linear_new(128, 10, true, NULL)});
}

/* conv3x3 (no bias: the batch norm has one) - batch norm - ReLU */
static mx_module *conv_bn(int64_t in, int64_t out) {
  return mx_sequential_new(
      3, (mx_module *[]){conv3x3(in, out, false), mx_batch_norm2d_new(out, 1e-5, 0.1, true, true), mx_relu_new()});
}

/* x + (conv_bn, conv_bn)(x) */
static mx_module *residual(int64_t c) {
  return mx_residual_new(mx_sequential_new(2, (mx_module *[]){conv_bn(c, c), conv_bn(c, c)}), NULL);
}

/* DAWNBench multiplies the logits by 0.125: the 512 pooled features are all
 * positive (ReLU, then max), so without it one SGD step moves every logit
 * together and the one-cycle recipe diverges. */
#define LOGIT_SCALE 0.125

static mx_tensor *scale_forward(mx_module *m, const mx_tensor *x) { return mx_mul_scalar(x, LOGIT_SCALE); }

static void scale_extra(const mx_module *m, char *buf, size_t size) { snprintf(buf, size, "%g", LOGIT_SCALE); }

static const mx_module_type scale_type = {.name = "Mul", .forward = scale_forward, .extra = scale_extra};

mx_module *mx_demo_resnet9(void) {
  mx_module *head = mx_sequential_new(3, (mx_module *[]){mx_flatten_new(1, -1), mx_linear_new(512, 10, false, NULL),
                                                         mx_module_new(&scale_type, NULL)});
  return mx_sequential_new(11, (mx_module *[]){conv_bn(3, 64), conv_bn(64, 128), max_pool(2), residual(128),
                                               conv_bn(128, 256), max_pool(2), conv_bn(256, 512), max_pool(2),
                                               residual(512), max_pool(4), head});
}
