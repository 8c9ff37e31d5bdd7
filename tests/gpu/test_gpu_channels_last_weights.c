/* A convolution on CUDA with its weight laid out channels-last (KRSC, as
 * mx_module_to_channels_last leaves it): cuDNN reads it as it lies beside a
 * channels-last input, and is given a row-major copy beside a row-major
 * one; either way the same filter bytes reach the same algorithm, so the
 * results are a row-major weight's bit for bit, and the weight's gradient
 * comes in the weight's layout. Skips without a GPU. */
#include <criterion/criterion.h>

#include "compare.h"

/* y = conv2d(x, w, b) (3x3, padding 1) and the gradients of sum(y * s), on CUDA: y, dx, dw, db. */
static void conv_step(const mx_tensor *x, const mx_tensor *w, const mx_tensor *b, const mx_tensor *s,
                      mx_tensor *out[4]) {
  mx_tensor *xg = to_cuda(x), *wg = to_cuda(w), *bg = to_cuda(b), *sg = to_cuda(s);
  if (mx_is_channels_last(x)) xg = mx_to_channels_last(xg);
  if (mx_is_channels_last(w)) wg = mx_to_channels_last(wg);
  if (mx_is_channels_last(s)) sg = mx_to_channels_last(sg);
  const mx_tensor *leaves[3] = {xg, wg, bg};
  for (int i = 0; i < 3; i++)
    cr_assert_eq(mx_set_requires_grad((mx_tensor *)leaves[i], true), MX_OK, "%s", mx_last_error());
  out[0] = mx_conv2d(xg, wg, bg, MX_SHAPE(1), MX_SHAPE(1), MX_DEFAULT, 1);
  cr_assert_not_null(out[0], "%s", mx_last_error());
  cr_assert_eq(mx_backward(out[0], sg, false), MX_OK, "%s", mx_last_error());
  for (int i = 0; i < 3; i++) out[i + 1] = mx_grad_of(leaves[i]);
}

static void same_results_either_weight_layout(mx_dtype dtype, bool channels_last_x) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  mx_generator *g = mx_generator_new(77);
  mx_tensor *x = mx_to_dtype(mx_randn(MX_SHAPE(4, 16, 10, 10), MX_F32, MX_CPU, g), dtype);
  mx_tensor *w = mx_to_dtype(mx_randn(MX_SHAPE(32, 16, 3, 3), MX_F32, MX_CPU, g), dtype);
  mx_tensor *b = mx_to_dtype(mx_randn(MX_SHAPE(32), MX_F32, MX_CPU, g), dtype);
  mx_tensor *s = mx_to_dtype(mx_randn(MX_SHAPE(4, 32, 10, 10), MX_F32, MX_CPU, g), dtype);
  mx_generator_free(g);
  if (channels_last_x) x = mx_to_channels_last(x);
  mx_tensor *row_major[4], *krsc[4];
  conv_step(x, w, b, s, row_major);
  conv_step(x, mx_to_channels_last(w), b, s, krsc);
  static const char *const names[4] = {"y", "dx", "dw", "db"};
  for (int i = 0; i < 4; i++) assert_identical(mx_to_device(row_major[i], MX_CPU), krsc[i], names[i]);
  cr_expect(mx_is_channels_last(krsc[2]), "dw in the weight's layout");
  cr_expect(!mx_is_channels_last(row_major[2]), "dw of a row-major weight: row-major");
  cr_expect_eq(mx_is_channels_last(krsc[0]), channels_last_x, "y in x's layout");
  mx_scope_end(scope);
}

Test(gpu_channels_last_weights, bf16_beside_channels_last_activations) {
  same_results_either_weight_layout(MX_BF16, true);
}
Test(gpu_channels_last_weights, f32_beside_channels_last_activations) {
  same_results_either_weight_layout(MX_F32, true);
}
Test(gpu_channels_last_weights, f16_beside_row_major_activations) { same_results_either_weight_layout(MX_F16, false); }

/* A float32 3x3 convolution with channels-last activations and gradient runs
 * on row-major copies of them (kernels/conv_cudnn_case.h:
 * mx_cudnn_runs_in_nchw, for cuDNN's NCHW-only Winograd), so the same
 * bytes reach the same algorithm as for row-major ones: the same bits, with
 * y and dx back in channels-last. */
Test(gpu_channels_last_weights, f32_channels_last_activations_run_as_row_major_bit_for_bit) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  mx_generator *g = mx_generator_new(78);
  mx_tensor *x = mx_randn(MX_SHAPE(4, 16, 10, 10), MX_F32, MX_CPU, g);
  mx_tensor *w = mx_randn(MX_SHAPE(32, 16, 3, 3), MX_F32, MX_CPU, g);
  mx_tensor *b = mx_randn(MX_SHAPE(32), MX_F32, MX_CPU, g);
  mx_tensor *s = mx_randn(MX_SHAPE(4, 32, 10, 10), MX_F32, MX_CPU, g);
  mx_generator_free(g);
  mx_tensor *row_major[4], *channels_last[4];
  conv_step(x, w, b, s, row_major);
  conv_step(mx_to_channels_last(x), w, b, mx_to_channels_last(s), channels_last);
  static const char *const names[4] = {"y", "dx", "dw", "db"};
  for (int i = 0; i < 4; i++) assert_identical(mx_to_device(row_major[i], MX_CPU), channels_last[i], names[i]);
  cr_expect(mx_is_channels_last(channels_last[0]), "y in x's layout");
  cr_expect(mx_is_channels_last(channels_last[1]), "dx in x's layout");
  mx_scope_end(scope);
}
