/* Convolution layers: Conv1d/2d/3d and ConvTranspose1d/2d/3d. */
#include <stdlib.h>

#include "nn/nn_internal.h"
#include "ops/conv_pool.h"

typedef struct {
  int spatial;
  bool transposed;
  int64_t in, out, groups;
  mx_shape kernel, stride, padding, output_padding, dilation; /* one value per spatial dim */
  mx_tensor *weight, *bias;
} conv_self;

static mx_tensor *conv_forward(mx_module *m, const mx_tensor *x) {
  const conv_self *s = mx_module_self(m);
  if (s->transposed)
    return mx_conv_transpose(x, s->weight, s->bias, s->spatial, s->stride, s->padding, s->output_padding, s->dilation,
                             s->groups);
  return mx_conv(x, s->weight, s->bias, s->spatial, s->stride, s->padding, s->dilation, s->groups);
}

/* A Conv2d followed by a ReLU in a Sequential (nn_internal.h): its parameters passed to mx_conv2d_relu. */
static mx_tensor *conv2d_relu_forward(mx_module *m, const mx_tensor *x) {
  const conv_self *s = mx_module_self(m);
  return mx_conv2d_relu(x, s->weight, s->bias, s->stride, s->padding, s->dilation, s->groups);
}

static bool all_equal(mx_shape s, int64_t v) {
  for (int i = 0; i < s.ndim; i++)
    if (s.d[i] != v) return false;
  return true;
}

/* PyTorch's _ConvNd.extra_repr. */
static void conv_extra(const mx_module *m, char *buf, size_t size) {
  const conv_self *s = mx_module_self(m);
  char list[128];
  buf[0] = '\0';
  mx__append(buf, size, "%lld, %lld", (long long)s->in, (long long)s->out);
  mx__list_repr(list, sizeof list, s->kernel, true);
  mx__append(buf, size, ", kernel_size=%s", list);
  mx__list_repr(list, sizeof list, s->stride, true);
  mx__append(buf, size, ", stride=%s", list);
  mx__list_repr(list, sizeof list, s->padding, true);
  if (!all_equal(s->padding, 0)) mx__append(buf, size, ", padding=%s", list);
  mx__list_repr(list, sizeof list, s->dilation, true);
  if (!all_equal(s->dilation, 1)) mx__append(buf, size, ", dilation=%s", list);
  mx__list_repr(list, sizeof list, s->output_padding, true);
  if (!all_equal(s->output_padding, 0)) mx__append(buf, size, ", output_padding=%s", list);
  if (s->groups != 1) mx__append(buf, size, ", groups=%lld", (long long)s->groups);
  if (!s->bias) mx__append(buf, size, ", bias=False");
}

#define CONV_TYPE(type_name) {.name = type_name, .forward = conv_forward, .free_self = free, .extra = conv_extra}
static const mx_module_type conv_types[2][3] = {
    {CONV_TYPE("Conv1d"), CONV_TYPE("Conv2d"), CONV_TYPE("Conv3d")},
    {CONV_TYPE("ConvTranspose1d"), CONV_TYPE("ConvTranspose2d"), CONV_TYPE("ConvTranspose3d")},
};

mx__forward_relu_fn mx__conv_forward_relu(const mx_module *m) {
  return mx_module_type_of(m) == &conv_types[0][1] ? conv2d_relu_forward : NULL; /* Conv2d */
}

/* A Conv2d, a ReLU and a MaxPool2d in a Sequential (nn_internal.h): their parameters passed to
 * mx__conv2d_max_pool_relu. */
static mx_tensor *conv2d_max_pool_relu_forward(mx_module *conv, mx_module *pool, const mx_tensor *x) {
  const conv_self *s = mx_module_self(conv);
  int spatial;
  mx_shape kernel, stride, padding, dilation;
  mx_tensor *y = NULL;
  if (mx__max_pool_params(pool, &spatial, &kernel, &stride, &padding, &dilation))
    mx__conv2d_max_pool_relu(x, s->weight, s->bias, s->stride, s->padding, s->dilation, s->groups, kernel, stride,
                             padding, dilation, &y, NULL);
  return y;
}

mx__conv_pool_fn mx__conv_max_pool_relu_forward(const mx_module *conv, const mx_module *pool) {
  int spatial;
  mx_shape kernel, stride, padding, dilation;
  if (mx_module_type_of(conv) != &conv_types[0][1] ||
      !mx__max_pool_params(pool, &spatial, &kernel, &stride, &padding, &dilation) || spatial != 2)
    return NULL;
  return conv2d_max_pool_relu_forward;
}

static mx_status check_args(const char *fn, int spatial, bool transposed, int64_t in, int64_t out, mx_shape kernel,
                            mx_shape stride, mx_shape padding, mx_shape output_padding, mx_shape dilation,
                            int64_t groups) {
  if (in <= 0 || out <= 0)
    return mx__error(MX_INVALID_ARGUMENT, "%s: in_channels (%lld) and out_channels (%lld) must be positive", fn,
                     (long long)in, (long long)out);
  if (groups <= 0)
    return mx__error(MX_INVALID_ARGUMENT, "%s: groups must be positive, got %lld", fn, (long long)groups);
  if (in % groups || out % groups)
    return mx__error(MX_INVALID_ARGUMENT,
                     "%s: in_channels (%lld) and out_channels (%lld) must be divisible by groups (%lld)", fn,
                     (long long)in, (long long)out, (long long)groups);
  mx_status status = mx__check_list(fn, "kernel", kernel, spatial, 1, false);
  if (!status) status = mx__check_list(fn, "stride", stride, spatial, 1, true);
  if (!status) status = mx__check_list(fn, "padding", padding, spatial, 0, true);
  if (!status) status = mx__check_list(fn, "dilation", dilation, spatial, 1, true);
  if (!status && transposed) status = mx__check_list(fn, "output_padding", output_padding, spatial, 0, true);
  if (status) return status;
  for (int i = 0; transposed && i < spatial; i++) {
    int64_t op = mx__expand_list(output_padding, spatial, 0).d[i], st = mx__expand_list(stride, spatial, 1).d[i];
    int64_t di = mx__expand_list(dilation, spatial, 1).d[i];
    if (op >= st && op >= di)
      return mx__error(MX_INVALID_ARGUMENT,
                       "%s: output_padding %lld must be smaller than the stride (%lld) or the dilation (%lld) in "
                       "dim %d", fn, (long long)op, (long long)st, (long long)di, i);
  }
  return MX_OK;
}

static mx_module *conv_new(const char *fn, int spatial, bool transposed, int64_t in, int64_t out, mx_shape kernel,
                           mx_shape stride, mx_shape padding, mx_shape output_padding, mx_shape dilation,
                           int64_t groups, bool bias, mx_generator *gen) {
  if (check_args(fn, spatial, transposed, in, out, kernel, stride, padding, output_padding, dilation, groups))
    return NULL;
  mx_module *m = mx__module_alloc(&conv_types[transposed][spatial - 1], sizeof(conv_self));
  if (!m) return NULL;
  conv_self *s = mx_module_self(m);
  *s = (conv_self){.spatial = spatial, .transposed = transposed, .in = in, .out = out, .groups = groups,
                   .kernel = mx__expand_list(kernel, spatial, 1), .stride = mx__expand_list(stride, spatial, 1),
                   .padding = mx__expand_list(padding, spatial, 0), .dilation = mx__expand_list(dilation, spatial, 1),
                   .output_padding = mx__expand_list(output_padding, spatial, 0)};
  /* (C_out, C_in / groups, *kernel), or (C_in, C_out / groups, *kernel) transposed */
  mx_shape w = {spatial + 2, {transposed ? in : out, (transposed ? out : in) / groups}};
  for (int i = 0; i < spatial; i++) w.d[2 + i] = s->kernel.d[i];
  s->weight = mx__add_parameter(m, "weight", w);
  if (s->weight && bias) s->bias = mx__add_parameter(m, "bias", MX_SHAPE(out));
  if (!s->weight || (bias && !s->bias) || mx__init_fan_in_uniform(s->weight, s->bias, gen) != MX_OK) {
    mx_module_free(m);
    return NULL;
  }
  return m;
}

mx_module *mx_conv1d_new(int64_t in_channels, int64_t out_channels, mx_shape kernel, mx_shape stride, mx_shape padding,
                         mx_shape dilation, int64_t groups, bool bias, mx_generator *gen) {
  return conv_new("mx_conv1d_new", 1, false, in_channels, out_channels, kernel, stride, padding, MX_DEFAULT, dilation,
                  groups, bias, gen);
}
mx_module *mx_conv2d_new(int64_t in_channels, int64_t out_channels, mx_shape kernel, mx_shape stride, mx_shape padding,
                         mx_shape dilation, int64_t groups, bool bias, mx_generator *gen) {
  return conv_new("mx_conv2d_new", 2, false, in_channels, out_channels, kernel, stride, padding, MX_DEFAULT, dilation,
                  groups, bias, gen);
}
mx_module *mx_conv3d_new(int64_t in_channels, int64_t out_channels, mx_shape kernel, mx_shape stride, mx_shape padding,
                         mx_shape dilation, int64_t groups, bool bias, mx_generator *gen) {
  return conv_new("mx_conv3d_new", 3, false, in_channels, out_channels, kernel, stride, padding, MX_DEFAULT, dilation,
                  groups, bias, gen);
}
mx_module *mx_conv_transpose1d_new(int64_t in_channels, int64_t out_channels, mx_shape kernel, mx_shape stride,
                                   mx_shape padding, mx_shape output_padding, mx_shape dilation, int64_t groups,
                                   bool bias, mx_generator *gen) {
  return conv_new("mx_conv_transpose1d_new", 1, true, in_channels, out_channels, kernel, stride, padding,
                  output_padding, dilation, groups, bias, gen);
}
mx_module *mx_conv_transpose2d_new(int64_t in_channels, int64_t out_channels, mx_shape kernel, mx_shape stride,
                                   mx_shape padding, mx_shape output_padding, mx_shape dilation, int64_t groups,
                                   bool bias, mx_generator *gen) {
  return conv_new("mx_conv_transpose2d_new", 2, true, in_channels, out_channels, kernel, stride, padding,
                  output_padding, dilation, groups, bias, gen);
}
mx_module *mx_conv_transpose3d_new(int64_t in_channels, int64_t out_channels, mx_shape kernel, mx_shape stride,
                                   mx_shape padding, mx_shape output_padding, mx_shape dilation, int64_t groups,
                                   bool bias, mx_generator *gen) {
  return conv_new("mx_conv_transpose3d_new", 3, true, in_channels, out_channels, kernel, stride, padding,
                  output_padding, dilation, groups, bias, gen);
}
