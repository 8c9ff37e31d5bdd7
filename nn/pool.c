/* Pooling layers: MaxPool and AvgPool 1d/2d/3d, AdaptiveAvgPool2d. */
#include <stdlib.h>

#include "nn/nn_internal.h"

typedef struct {
  int spatial;
  mx_shape kernel, stride, padding, dilation; /* as given (one value or one per dim); stride empty: the kernel */
  bool max, count_include_pad;
} pool_self;

static mx_tensor *max_pool_forward(mx_module *m, const mx_tensor *x) {
  const pool_self *s = mx_module_self(m);
  mx_tensor *y = NULL;
  mx_max_pool_with_indices(x, s->spatial, s->kernel, s->stride, s->padding, s->dilation, &y, NULL);
  return y;
}

static mx_tensor *max_pool_relu_forward(mx_module *m, const mx_tensor *x) {
  const pool_self *s = mx_module_self(m);
  return mx_max_pool_relu(x, s->spatial, s->kernel, s->stride, s->padding, s->dilation);
}

mx__forward_relu_fn mx__max_pool_relu_forward(const mx_module *m) {
  return mx_module_type_of(m)->forward == max_pool_forward ? max_pool_relu_forward : NULL;
}

bool mx__max_pool_params(const mx_module *m, int *spatial, mx_shape *kernel, mx_shape *stride, mx_shape *padding,
                         mx_shape *dilation) {
  if (mx_module_type_of(m)->forward != max_pool_forward) return false;
  const pool_self *s = mx_module_self(m);
  *spatial = s->spatial, *kernel = s->kernel, *stride = s->stride, *padding = s->padding, *dilation = s->dilation;
  return true;
}

static mx_tensor *avg_pool_forward(mx_module *m, const mx_tensor *x) {
  const pool_self *s = mx_module_self(m);
  return mx_avg_pool(x, s->spatial, s->kernel, s->stride, s->padding, s->count_include_pad);
}

/* PyTorch's _MaxPoolNd / _AvgPoolNd extra_repr (without ceil_mode, which mixgrad's pooling does not have). */
static void pool_extra(const mx_module *m, char *buf, size_t size) {
  const pool_self *s = mx_module_self(m);
  char kernel[96], stride[96], padding[96], dilation[96];
  mx__list_repr(kernel, sizeof kernel, s->kernel, false);
  mx__list_repr(stride, sizeof stride, s->stride.ndim ? s->stride : s->kernel, false);
  mx__list_repr(padding, sizeof padding, s->padding.ndim ? s->padding : MX_DIMS(0), false);
  snprintf(buf, size, "kernel_size=%s, stride=%s, padding=%s", kernel, stride, padding);
  if (s->max) {
    mx__list_repr(dilation, sizeof dilation, s->dilation.ndim ? s->dilation : MX_DIMS(1), false);
    mx__append(buf, size, ", dilation=%s", dilation);
  }
}

#define POOL_TYPE(type_name, fwd) {.name = type_name, .forward = fwd, .free_self = free, .extra = pool_extra}
static const mx_module_type max_pool_types[3] = {POOL_TYPE("MaxPool1d", max_pool_forward),
                                                 POOL_TYPE("MaxPool2d", max_pool_forward),
                                                 POOL_TYPE("MaxPool3d", max_pool_forward)};
static const mx_module_type avg_pool_types[3] = {POOL_TYPE("AvgPool1d", avg_pool_forward),
                                                 POOL_TYPE("AvgPool2d", avg_pool_forward),
                                                 POOL_TYPE("AvgPool3d", avg_pool_forward)};

static mx_module *pool_new(const char *fn, const mx_module_type *type, int spatial, mx_shape kernel, mx_shape stride,
                           mx_shape padding, mx_shape dilation, bool count_include_pad) {
  mx_status status = mx__check_list(fn, "kernel", kernel, spatial, 1, false);
  if (!status) status = mx__check_list(fn, "stride", stride, spatial, 1, true);
  if (!status) status = mx__check_list(fn, "padding", padding, spatial, 0, true);
  if (!status) status = mx__check_list(fn, "dilation", dilation, spatial, 1, true);
  for (int i = 0; !status && i < spatial; i++) {
    int64_t k = mx__expand_list(kernel, spatial, 1).d[i], p = mx__expand_list(padding, spatial, 0).d[i];
    if (p > k / 2)
      status = mx__error(MX_INVALID_ARGUMENT, "%s: padding %lld must be at most half the kernel %lld (dim %d)", fn,
                         (long long)p, (long long)k, i);
  }
  if (status) return NULL;
  mx_module *m = mx__module_alloc(type, sizeof(pool_self));
  if (!m) return NULL;
  *(pool_self *)mx_module_self(m) = (pool_self){.spatial = spatial, .kernel = kernel, .stride = stride,
                                                .padding = padding, .dilation = dilation,
                                                .max = type->forward == max_pool_forward,
                                                .count_include_pad = count_include_pad};
  return m;
}

mx_module *mx_max_pool1d_new(mx_shape kernel, mx_shape stride, mx_shape padding, mx_shape dilation) {
  return pool_new("mx_max_pool1d_new", &max_pool_types[0], 1, kernel, stride, padding, dilation, true);
}
mx_module *mx_max_pool2d_new(mx_shape kernel, mx_shape stride, mx_shape padding, mx_shape dilation) {
  return pool_new("mx_max_pool2d_new", &max_pool_types[1], 2, kernel, stride, padding, dilation, true);
}
mx_module *mx_max_pool3d_new(mx_shape kernel, mx_shape stride, mx_shape padding, mx_shape dilation) {
  return pool_new("mx_max_pool3d_new", &max_pool_types[2], 3, kernel, stride, padding, dilation, true);
}
mx_module *mx_avg_pool1d_new(mx_shape kernel, mx_shape stride, mx_shape padding, bool count_include_pad) {
  return pool_new("mx_avg_pool1d_new", &avg_pool_types[0], 1, kernel, stride, padding, MX_DEFAULT, count_include_pad);
}
mx_module *mx_avg_pool2d_new(mx_shape kernel, mx_shape stride, mx_shape padding, bool count_include_pad) {
  return pool_new("mx_avg_pool2d_new", &avg_pool_types[1], 2, kernel, stride, padding, MX_DEFAULT, count_include_pad);
}
mx_module *mx_avg_pool3d_new(mx_shape kernel, mx_shape stride, mx_shape padding, bool count_include_pad) {
  return pool_new("mx_avg_pool3d_new", &avg_pool_types[2], 3, kernel, stride, padding, MX_DEFAULT, count_include_pad);
}

/* --- AdaptiveAvgPool2d ------------------------------------------------------------------------------------------- */

static mx_tensor *adaptive_forward(mx_module *m, const mx_tensor *x) {
  const pool_self *s = mx_module_self(m);
  return mx_adaptive_avg_pool2d(x, s->kernel.d[0], s->kernel.d[1]);
}

static void adaptive_extra(const mx_module *m, char *buf, size_t size) {
  char out[96];
  mx__list_repr(out, sizeof out, ((const pool_self *)mx_module_self(m))->kernel, false);
  snprintf(buf, size, "output_size=%s", out);
}

static const mx_module_type adaptive_type = {.name = "AdaptiveAvgPool2d", .forward = adaptive_forward,
                                             .free_self = free, .extra = adaptive_extra};

mx_module *mx_adaptive_avg_pool2d_new(int64_t out_h, int64_t out_w) {
  if (out_h <= 0 || out_w <= 0) {
    mx__error(MX_INVALID_ARGUMENT, "mx_adaptive_avg_pool2d_new: the output size (%lld, %lld) must be positive",
              (long long)out_h, (long long)out_w);
    return NULL;
  }
  mx_module *m = mx__module_alloc(&adaptive_type, sizeof(pool_self));
  if (m) *(pool_self *)mx_module_self(m) = (pool_self){.spatial = 2, .kernel = MX_SHAPE(out_h, out_w)};
  return m;
}
