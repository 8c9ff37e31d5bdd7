/* Linear and Bilinear layers. */
#include <math.h>
#include <stdlib.h>

#include "nn/nn_internal.h"

typedef struct {
  int64_t in, in2, out;
  mx_tensor *weight, *bias;
} linear_self;

static mx_tensor *linear_forward(mx_module *m, const mx_tensor *x) {
  linear_self *s = mx_module_self(m);
  return mx_linear(x, s->weight, s->bias);
}

/* A Linear followed by a ReLU in a Sequential (nn_internal.h): its parameters passed to mx_linear_relu. */
static mx_tensor *linear_relu_forward(mx_module *m, const mx_tensor *x) {
  linear_self *s = mx_module_self(m);
  return mx_linear_relu(x, s->weight, s->bias);
}

static void linear_extra(const mx_module *m, char *buf, size_t size) {
  const linear_self *s = mx_module_self(m);
  snprintf(buf, size, "in_features=%lld, out_features=%lld, bias=%s", (long long)s->in, (long long)s->out,
           mx__bool_repr(s->bias));
}

static const mx_module_type linear_type = {.name = "Linear", .forward = linear_forward, .free_self = free,
                                           .extra = linear_extra};

mx__forward_relu_fn mx__linear_forward_relu(const mx_module *m) {
  return mx_module_type_of(m) == &linear_type ? linear_relu_forward : NULL;
}

mx_module *mx_linear_new(int64_t in_features, int64_t out_features, bool bias, mx_generator *gen) {
  if (in_features < 0 || out_features < 0) {
    mx__error(MX_INVALID_ARGUMENT, "mx_linear_new: in_features (%lld) and out_features (%lld) must be >= 0",
              (long long)in_features, (long long)out_features);
    return NULL;
  }
  mx_module *m = mx__module_alloc(&linear_type, sizeof(linear_self));
  if (!m) return NULL;
  linear_self *s = mx_module_self(m);
  s->in = in_features, s->out = out_features;
  s->weight = mx__add_parameter(m, "weight", MX_SHAPE(out_features, in_features));
  if (s->weight && bias) s->bias = mx__add_parameter(m, "bias", MX_SHAPE(out_features));
  if (!s->weight || (bias && !s->bias) || mx__init_fan_in_uniform(s->weight, s->bias, gen) != MX_OK) {
    mx_module_free(m);
    return NULL;
  }
  return m;
}

/* --- Bilinear ---------------------------------------------------------------------------------------------------- */

static const mx_module_type bilinear_type;

static mx_tensor *bilinear_forward(mx_module *m, const mx_tensor *x) {
  linear_self *s = mx_module_self(m);
  if (mx_ndim(x) < 1 || mx_size(x, -1) != s->in + s->in2) {
    mx__error(MX_SHAPE_ERROR,
              "expected the two inputs concatenated along the last dim (%lld + %lld features), got %lld",
              (long long)s->in, (long long)s->in2, mx_ndim(x) ? (long long)mx_size(x, -1) : 0LL);
    return NULL;
  }
  return mx_bilinear(mx_narrow(x, -1, 0, s->in), mx_narrow(x, -1, s->in, s->in2), s->weight, s->bias);
}

mx_tensor *mx_bilinear_forward(mx_module *bilinear, const mx_tensor *x1, const mx_tensor *x2) {
  if (!bilinear || !x1 || !x2) {
    mx__null_input("mx_bilinear_forward", !bilinear ? "bilinear" : !x1 ? "x1" : "x2");
    return NULL;
  }
  if (mx_module_type_of(bilinear) != &bilinear_type) {
    mx__error(MX_INVALID_ARGUMENT, "mx_bilinear_forward: the module is a %s, not a Bilinear",
              mx_module_type_of(bilinear)->name);
    return NULL;
  }
  linear_self *s = mx_module_self(bilinear);
  mx_tensor *y = mx_bilinear(x1, x2, s->weight, s->bias);
  if (!y) mx__error_prefix("mx_bilinear_forward");
  return y;
}

static void bilinear_extra(const mx_module *m, char *buf, size_t size) {
  const linear_self *s = mx_module_self(m);
  snprintf(buf, size, "in1_features=%lld, in2_features=%lld, out_features=%lld, bias=%s", (long long)s->in,
           (long long)s->in2, (long long)s->out, mx__bool_repr(s->bias));
}

static const mx_module_type bilinear_type = {.name = "Bilinear", .forward = bilinear_forward, .free_self = free,
                                             .extra = bilinear_extra};

mx_module *mx_bilinear_new(int64_t in1_features, int64_t in2_features, int64_t out_features, bool bias,
                           mx_generator *gen) {
  if (in1_features < 0 || in2_features < 0 || out_features < 0) {
    mx__error(MX_INVALID_ARGUMENT, "mx_bilinear_new: the feature counts (%lld, %lld, %lld) must be >= 0",
              (long long)in1_features, (long long)in2_features, (long long)out_features);
    return NULL;
  }
  mx_module *m = mx__module_alloc(&bilinear_type, sizeof(linear_self));
  if (!m) return NULL;
  linear_self *s = mx_module_self(m);
  s->in = in1_features, s->in2 = in2_features, s->out = out_features;
  s->weight = mx__add_parameter(m, "weight", MX_SHAPE(out_features, in1_features, in2_features));
  if (s->weight && bias) s->bias = mx__add_parameter(m, "bias", MX_SHAPE(out_features));
  double bound = in1_features > 0 ? 1 / sqrt((double)in1_features) : 0; /* PyTorch: 1 / sqrt(weight.size(1)) */
  if (!s->weight || (bias && !s->bias) || mx_init_uniform_(s->weight, -bound, bound, gen) != MX_OK ||
      (bias && mx_init_uniform_(s->bias, -bound, bound, gen) != MX_OK)) {
    mx_module_free(m);
    return NULL;
  }
  return m;
}
