/* mx_module_to_channels_last: a model's 4-d parameters laid out
 * channels-last in place, and a training step through it giving the
 * row-major model's loss and gradients, the weights' gradients coming in
 * the weights' layout (ops/conv.c). The cuDNN side is in tests/gpu. */
#include <criterion/criterion.h>
#include <string.h>

#include "mixgrad.h"

/* conv 3 -> 6 (bias) -> relu -> conv 6 -> 4 (no bias) -> batch norm, float32. oneDNN reorders either layout of
 * a weight into its own before it computes, so the layouts must give the same bits. */
static mx_module *small_cnn(uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_module *m = mx_sequential_new(
      4,
      (mx_module *[]){mx_conv2d_new(3, 6, MX_DIMS(3), MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1, true, gen), mx_relu_new(),
                      mx_conv2d_new(6, 4, MX_DIMS(3), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1, false, gen),
                      mx_batch_norm2d_new(4, 1e-5, 0.1, true, true)});
  mx_generator_free(gen);
  cr_assert_not_null(m, "%s", mx_last_error());
  return m;
}

/* sum(model(x) * s), backward; the loss returned. */
static double step(mx_module *m, const mx_tensor *x, const mx_tensor *s) {
  mx_scope *scope = mx_scope_begin();
  mx_tensor *loss = mx_sum(mx_mul(mx_module_forward(m, x), s), MX_ALL_DIMS, false);
  cr_assert_not_null(loss, "%s", mx_last_error());
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  double value = mx_item(loss);
  mx_scope_end(scope);
  return value;
}

static void expect_same_values(const mx_tensor *a, const mx_tensor *b, const char *what) {
  mx_tensor *ac = mx_contiguous(a), *bc = mx_contiguous(b);
  cr_assert_eq(mx_numel(ac), mx_numel(bc), "%s", what);
  cr_expect_eq(memcmp(mx_data_ptr(ac), mx_data_ptr(bc), (size_t)mx_numel(ac) * sizeof(float)), 0,
               "%s: the layouts give other values", what);
  mx_release(ac);
  mx_release(bc);
}

Test(nn_channels_last, a_step_gives_the_row_major_models_bits_and_weight_gradients_in_the_weights_layout) {
  mx_module *plain = small_cnn(11), *cl = small_cnn(11);
  mx_tensor *bias = mx_module_parameter(cl, 1, NULL);
  const void *bias_data = mx_data_ptr(bias);
  cr_assert_eq(mx_module_to_channels_last(cl), MX_OK, "%s", mx_last_error());
  int n = mx_module_num_parameters(cl);
  for (int i = 0; i < n; i++) {
    const char *name;
    mx_tensor *p = mx_module_parameter(cl, i, &name);
    cr_expect_eq(mx_is_channels_last(p), mx_ndim(p) == 4, "%s: %d dims", name, mx_ndim(p));
    expect_same_values(mx_module_parameter(plain, i, NULL), p, name);
  }
  cr_expect_eq(mx_data_ptr(bias), bias_data, "a vector keeps its data");

  mx_generator *gen = mx_generator_new(5);
  mx_tensor *rows = mx_randn(MX_SHAPE(2, 3, 7, 9), MX_F32, MX_CPU, gen), *x = mx_to_channels_last(rows);
  mx_release(rows);
  mx_tensor *s = mx_randn(MX_SHAPE(2, 4, 5, 7), MX_F32, MX_CPU, gen);
  mx_generator_free(gen);
  double loss_plain = step(plain, x, s), loss_cl = step(cl, x, s);
  cr_expect_eq(loss_cl, loss_plain, "loss: %.17g channels-last, %.17g row-major", loss_cl, loss_plain);
  for (int i = 0; i < n; i++) {
    const char *name;
    mx_tensor *p = mx_module_parameter(cl, i, &name), *g = mx_grad_of(p);
    cr_assert_not_null(g, "%s has no gradient", name);
    cr_expect_eq(mx_is_channels_last(g), mx_ndim(p) == 4, "%s's gradient: the weight's layout", name);
    expect_same_values(mx_grad_of(mx_module_parameter(plain, i, NULL)), g, name);
  }
  for (int i = 0; i < mx_module_num_buffers(cl); i++) { /* the running statistics */
    const char *name;
    mx_tensor *b = mx_module_buffer(cl, i, &name);
    expect_same_values(mx_module_buffer(plain, i, NULL), b, name);
  }
  mx_release(x);
  mx_release(s);
  mx_module_free(plain);
  mx_module_free(cl);
}

/* Laid out already, or without 4-d members: nothing is copied, and the
 * gradients stay; a NULL module is an error. */
Test(nn_channels_last, twice_changes_nothing) {
  mx_module *m = small_cnn(3);
  cr_assert_eq(mx_module_to_channels_last(m), MX_OK, "%s", mx_last_error());
  mx_tensor *w = mx_module_parameter(m, 0, NULL);
  const void *data = mx_data_ptr(w);
  mx_tensor *loss = mx_sum(w, MX_ALL_DIMS, false);
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  mx_release(loss);
  cr_assert_eq(mx_module_to_channels_last(m), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_data_ptr(w), data, "no copy of a channels-last weight");
  cr_expect_not_null(mx_grad_of(w), "and its gradient stays");
  cr_expect_eq(mx_module_to_channels_last(NULL), MX_NULL_INPUT);
  cr_expect_str_eq(mx_last_error(), "mx_module_to_channels_last: NULL module");
  mx_module_free(m);
}
