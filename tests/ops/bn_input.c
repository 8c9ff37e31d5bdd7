/* The batch-norm tests' input (bn_input.h). */
#include "bn_input.h"

#include <criterion/criterion.h>

mx_tensor *bn_input(mx_shape shape, mx_dtype dtype, bool channels_last, uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_shape per_channel = {shape.ndim, {1, 4, 1, 1}};
  mx_tensor *offset = mx_reshape(mx_from_data((double[]){0, 3, -1, 0.5}, MX_SHAPE(4), MX_F64, MX_CPU), per_channel);
  mx_tensor *x = mx_to_dtype(mx_add(mx_randn(shape, MX_F64, MX_CPU, gen), offset), dtype);
  mx_generator_free(gen);
  x = channels_last ? mx_to_channels_last(x) : x;
  cr_assert_not_null(x, "%s", mx_last_error());
  return x;
}
