/* Parameter initialisation (torch.nn.init): uniform, normal, constants, Xavier and Kaiming with PyTorch's gains. */
#include <math.h>

#include "nn/nn_internal.h"

double mx_init_calculate_gain(mx_nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
  case MX_GAIN_LINEAR:
  case MX_GAIN_CONV1D:
  case MX_GAIN_CONV2D:
  case MX_GAIN_CONV3D:
  case MX_GAIN_CONV_TRANSPOSE1D:
  case MX_GAIN_CONV_TRANSPOSE2D:
  case MX_GAIN_CONV_TRANSPOSE3D:
  case MX_GAIN_SIGMOID: return 1;
  case MX_GAIN_TANH: return 5.0 / 3;
  case MX_GAIN_RELU: return sqrt(2.0);
  case MX_GAIN_LEAKY_RELU: {
    double slope = isnan(param) ? 0.01 : param;
    return sqrt(2.0 / (1 + slope * slope));
  }
  case MX_GAIN_SELU: return 3.0 / 4;
  }
  mx__error(MX_INVALID_ARGUMENT, "mx_init_calculate_gain: unknown nonlinearity %d", (int)nonlinearity);
  return NAN;
}

mx_status mx_init_fans(const mx_tensor *t, int64_t *fan_in, int64_t *fan_out) {
  if (!t) return mx__null_input("mx_init_fans", "t");
  int ndim = mx_ndim(t);
  if (ndim < 2)
    return mx__error(MX_SHAPE_ERROR,
                     "mx_init_fans: fan in and fan out cannot be computed for a tensor of fewer than 2 dims (got %d)",
                     ndim);
  int64_t receptive = 1;
  for (int d = 2; d < ndim; d++) receptive *= mx_size(t, d);
  if (fan_in) *fan_in = mx_size(t, 1) * receptive;
  if (fan_out) *fan_out = mx_size(t, 0) * receptive;
  return MX_OK;
}

/* t = a + b u for u ~ U(0, 1) (uniform) or N(0, 1) (normal). */
static mx_status fill_random(const char *fn, mx_tensor *t, bool normal, double a, double b, mx_generator *gen) {
  if (!t) return mx__null_input(fn, "t");
  if (!mx_dtype_is_floating(mx_dtype_of(t)))
    return mx__error(MX_DTYPE_ERROR, "%s: needs a floating tensor, got %s", fn, mx_dtype_name(mx_dtype_of(t)));
  if (mx_numel(t) == 0) return MX_OK;
  mx_scope *s = mx_scope_begin();
  if (!s) return mx_last_status();
  mx_status status = MX_OK;
  MX_NO_GRAD {
    mx_dtype wide = mx_dtype_of(t) == MX_F64 ? MX_F64 : MX_F32;
    mx_shape shape = mx_shape_get(t);
    mx_tensor *u = normal ? mx_randn(shape, wide, mx_device_of(t), gen) : mx_rand(shape, wide, mx_device_of(t), gen);
    mx_tensor *v = mx_add_scalar(mx_mul_scalar(u, b), a);
    status = v ? mx_copy_(t, v) : mx_last_status();
  }
  mx_scope_end(s);
  if (status != MX_OK) mx__error_prefix(fn);
  return status;
}

mx_status mx_init_uniform_(mx_tensor *t, double a, double b, mx_generator *gen) {
  if (!(a <= b))
    return mx__error(MX_INVALID_ARGUMENT, "mx_init_uniform_: the bounds need a <= b, got a = %g and b = %g", a, b);
  return fill_random("mx_init_uniform_", t, false, a, b - a, gen);
}

mx_status mx_init_normal_(mx_tensor *t, double mean, double std, mx_generator *gen) {
  if (!(std >= 0)) return mx__error(MX_INVALID_ARGUMENT, "mx_init_normal_: std must be >= 0, got %g", std);
  return fill_random("mx_init_normal_", t, true, mean, std, gen);
}

mx_status mx_init_constant_(mx_tensor *t, double value) {
  if (!t) return mx__null_input("mx_init_constant_", "t");
  return mx_fill_(t, value);
}
mx_status mx_init_zeros_(mx_tensor *t) { return mx_init_constant_(t, 0); }
mx_status mx_init_ones_(mx_tensor *t) { return mx_init_constant_(t, 1); }

/* The standard deviation of Xavier's scheme for t, or NAN with the error set naming fn. */
static double xavier_std(const char *fn, const mx_tensor *t, double gain) {
  int64_t fan_in, fan_out;
  if (!t) return mx__null_input(fn, "t"), NAN;
  if (mx_init_fans(t, &fan_in, &fan_out) != MX_OK) return mx__error_prefix(fn), NAN;
  if (fan_in + fan_out == 0) return 0;
  return gain * sqrt(2.0 / (double)(fan_in + fan_out));
}

mx_status mx_init_xavier_uniform_(mx_tensor *t, double gain, mx_generator *gen) {
  double std = xavier_std("mx_init_xavier_uniform_", t, gain);
  if (isnan(std)) return mx_last_status();
  double bound = sqrt(3.0) * std;
  return fill_random("mx_init_xavier_uniform_", t, false, -bound, 2 * bound, gen);
}

mx_status mx_init_xavier_normal_(mx_tensor *t, double gain, mx_generator *gen) {
  double std = xavier_std("mx_init_xavier_normal_", t, gain);
  if (isnan(std)) return mx_last_status();
  return fill_random("mx_init_xavier_normal_", t, true, 0, std, gen);
}

/* The standard deviation of Kaiming's scheme for t, or NAN with the error set naming fn. */
static double kaiming_std(const char *fn, const mx_tensor *t, double a, mx_fan_mode mode,
                          mx_nonlinearity nonlinearity) {
  int64_t fan_in, fan_out;
  if (!t) return mx__null_input(fn, "t"), NAN;
  if (mode != MX_FAN_IN && mode != MX_FAN_OUT)
    return mx__error(MX_INVALID_ARGUMENT, "%s: mode %d is neither MX_FAN_IN nor MX_FAN_OUT", fn, (int)mode), NAN;
  if (mx_init_fans(t, &fan_in, &fan_out) != MX_OK) return mx__error_prefix(fn), NAN;
  double gain = mx_init_calculate_gain(nonlinearity, a);
  if (isnan(gain)) return mx__error_prefix(fn), NAN;
  int64_t fan = mode == MX_FAN_IN ? fan_in : fan_out;
  return fan ? gain / sqrt((double)fan) : 0;
}

mx_status mx_init_kaiming_uniform_(mx_tensor *t, double a, mx_fan_mode mode, mx_nonlinearity nonlinearity,
                                   mx_generator *gen) {
  double std = kaiming_std("mx_init_kaiming_uniform_", t, a, mode, nonlinearity);
  if (isnan(std)) return mx_last_status();
  double bound = sqrt(3.0) * std;
  return fill_random("mx_init_kaiming_uniform_", t, false, -bound, 2 * bound, gen);
}

mx_status mx_init_kaiming_normal_(mx_tensor *t, double a, mx_fan_mode mode, mx_nonlinearity nonlinearity,
                                  mx_generator *gen) {
  double std = kaiming_std("mx_init_kaiming_normal_", t, a, mode, nonlinearity);
  if (isnan(std)) return mx_last_status();
  return fill_random("mx_init_kaiming_normal_", t, true, 0, std, gen);
}
