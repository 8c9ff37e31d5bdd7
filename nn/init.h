/* Parameter initialisation, as torch.nn.init: the same distributions, fan
 * computation and gain table. Each function fills t in place (outside the
 * graph, like PyTorch's no_grad) and returns a status.
 *
 *     mx_tensor *w = mx_module_get_parameter(layer, "weight");
 *     mx_init_kaiming_normal_(w, 0, MX_FAN_OUT, MX_GAIN_RELU, gen);
 *     mx_init_zeros_(mx_module_get_parameter(layer, "bias"));
 *
 * gen may be NULL (the default generator). The random fills draw in
 * float32 (float64 for a float64 t) and round into t's dtype. Fans follow
 * PyTorch's _calculate_fan_in_and_fan_out: for a weight of at least 2 dims
 * (out, in, *kernel), fan_in = in * prod(kernel), fan_out = out *
 * prod(kernel).
 */
#ifndef MX_NN_INIT_H
#define MX_NN_INIT_H

#include "tensor/tensor.h"

MX_API_BEGIN

typedef enum { MX_FAN_IN, MX_FAN_OUT } mx_fan_mode;

/* torch.nn.init.calculate_gain's nonlinearities */
typedef enum {
  MX_GAIN_LINEAR, /* 1, as are the convolutions and sigmoid */
  MX_GAIN_CONV1D,
  MX_GAIN_CONV2D,
  MX_GAIN_CONV3D,
  MX_GAIN_CONV_TRANSPOSE1D,
  MX_GAIN_CONV_TRANSPOSE2D,
  MX_GAIN_CONV_TRANSPOSE3D,
  MX_GAIN_SIGMOID,
  MX_GAIN_TANH,       /* 5/3 */
  MX_GAIN_RELU,       /* sqrt(2) */
  MX_GAIN_LEAKY_RELU, /* sqrt(2 / (1 + slope^2)) */
  MX_GAIN_SELU        /* 3/4 */
} mx_nonlinearity;

/* The recommended gain; param is leaky_relu's negative slope (NAN: PyTorch's default 0.01), ignored by the
 * others. NAN with the error set for an unknown nonlinearity. */
double mx_init_calculate_gain(mx_nonlinearity nonlinearity, double param);
/* The fans of a tensor of at least 2 dims (either pointer may be NULL). */
mx_status mx_init_fans(const mx_tensor *t, int64_t *fan_in, int64_t *fan_out);

/* U(a, b), a <= b */
mx_status mx_init_uniform_(mx_tensor *t, double a, double b, mx_generator *gen);
/* N(mean, std^2), std >= 0 */
mx_status mx_init_normal_(mx_tensor *t, double mean, double std, mx_generator *gen);
/* Any dtype. */
mx_status mx_init_constant_(mx_tensor *t, double value);
mx_status mx_init_zeros_(mx_tensor *t);
mx_status mx_init_ones_(mx_tensor *t);
/* U(-b, b) with b = gain sqrt(6 / (fan_in + fan_out)); N(0, gain^2 2 / (fan_in + fan_out)). PyTorch: gain 1. */
mx_status mx_init_xavier_uniform_(mx_tensor *t, double gain, mx_generator *gen);
mx_status mx_init_xavier_normal_(mx_tensor *t, double gain, mx_generator *gen);
/* U(-b, b) with b = gain sqrt(3 / fan); N(0, gain^2 / fan); gain = calculate_gain(nonlinearity, a), fan by
 * mode. PyTorch: a 0, MX_FAN_IN, MX_GAIN_LEAKY_RELU. Linear and Conv layers use a = sqrt(5): b = 1/sqrt(fan_in). */
mx_status mx_init_kaiming_uniform_(mx_tensor *t, double a, mx_fan_mode mode, mx_nonlinearity nonlinearity,
                                   mx_generator *gen);
mx_status mx_init_kaiming_normal_(mx_tensor *t, double a, mx_fan_mode mode, mx_nonlinearity nonlinearity,
                                  mx_generator *gen);

MX_API_END

#endif
