/* Modes: BatchNorm's batch and running statistics in training and eval, Dropout's masks, Embedding's padding row,
 * autocast. */
#include <criterion/criterion.h>
#include <math.h>

#include <mixgrad.h>

/* x (4, 2): channel 0 holds 1, 2, 3, 6 (mean 3, biased variance 3.5, unbiased 14/3), channel 1 holds -1, 1, -1, 1
 * (mean 0, biased variance 1, unbiased 4/3). */
static mx_tensor *bn_input(void) {
  float v[] = {1, -1, 2, 1, 3, -1, 6, 1};
  return mx_from_data(v, MX_SHAPE(4, 2), MX_F32, MX_CPU);
}

Test(nn_modes, batch_norm_training_uses_and_tracks_batch_statistics) {
  mx_scope *s = mx_scope_begin();
  mx_module *bn = mx_batch_norm1d_new(2, 1e-5, 0.1, true, true);
  mx_tensor *y = mx_module_forward(bn, bn_input());
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_expect_float_eq(mx_at(y, MX_SHAPE(3, 0)), 3 / sqrt(3.5 + 1e-5), 1e-6);
  cr_expect_float_eq(mx_at(y, MX_SHAPE(0, 1)), -1 / sqrt(1 + 1e-5), 1e-6);
  mx_tensor *rm = mx_module_get_buffer(bn, "running_mean"), *rv = mx_module_get_buffer(bn, "running_var");
  cr_expect_float_eq(mx_at(rm, MX_SHAPE(0)), 0.1 * 3, 1e-7);
  cr_expect_float_eq(mx_at(rm, MX_SHAPE(1)), 0, 1e-7);
  cr_expect_float_eq(mx_at(rv, MX_SHAPE(0)), 0.9 + 0.1 * 14 / 3.0, 1e-6);
  cr_expect_float_eq(mx_at(rv, MX_SHAPE(1)), 0.9 + 0.1 * 4 / 3.0, 1e-6);
  mx_module_forward(bn, bn_input());
  cr_expect_eq(mx_item(mx_module_get_buffer(bn, "num_batches_tracked")), 2);
  cr_expect_float_eq(mx_at(rm, MX_SHAPE(0)), 0.9 * 0.3 + 0.1 * 3, 1e-6);

  /* eval: the running statistics, untouched */
  mx_module_train(bn, false);
  double mean = mx_at(rm, MX_SHAPE(0)), var = mx_at(rv, MX_SHAPE(0));
  y = mx_module_forward(bn, bn_input());
  cr_expect_float_eq(mx_at(y, MX_SHAPE(3, 0)), (6 - mean) / sqrt(var + 1e-5), 1e-5);
  cr_expect_eq(mx_at(rm, MX_SHAPE(0)), mean);
  cr_expect_eq(mx_at(rv, MX_SHAPE(0)), var);
  cr_expect_eq(mx_item(mx_module_get_buffer(bn, "num_batches_tracked")), 2);
  mx_module_free(bn);
  mx_scope_end(s);
}

Test(nn_modes, batch_norm_without_running_statistics) {
  mx_scope *s = mx_scope_begin();
  mx_module *bn = mx_batch_norm1d_new(2, 0, 0.1, false, false);
  cr_expect_eq(mx_module_num_buffers(bn), 0);
  cr_expect_eq(mx_module_num_parameters(bn), 0);
  mx_module_train(bn, false); /* eval still normalises with the batch's statistics */
  mx_tensor *y = mx_module_forward(bn, bn_input());
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_expect_float_eq(mx_at(y, MX_SHAPE(0, 0)), -2 / sqrt(3.5), 1e-6);
  cr_expect_float_eq(mx_at(y, MX_SHAPE(1, 1)), 1, 1e-6);
  mx_module_free(bn);
  mx_scope_end(s);
}

Test(nn_modes, batch_norm_cumulative_average) {
  mx_scope *s = mx_scope_begin();
  mx_module *bn = mx_batch_norm1d_new(2, 1e-5, NAN, true, true);
  mx_module_forward(bn, bn_input());
  mx_module_forward(bn, mx_mul_scalar(bn_input(), 3));
  /* the plain average of the two batches' means, 3 and 9 */
  cr_expect_float_eq(mx_at(mx_module_get_buffer(bn, "running_mean"), MX_SHAPE(0)), 6, 1e-6);
  cr_expect_float_eq(mx_at(mx_module_get_buffer(bn, "running_var"), MX_SHAPE(1)), (4 / 3.0 + 12) / 2, 1e-5);
  mx_module_free(bn);
  mx_scope_end(s);
}

/* Dropout in training: each element zeroed with probability p, independently (a 5-sigma band on the count), the
 * rest scaled by exactly 1/(1-p); in eval: the input. */
Test(nn_modes, dropout_masks_in_training_only) {
  const int64_t n = 100000;
  const double p = 0.3;
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(11);
  mx_module *net = mx_sequential_new(2, (mx_module *[]){mx_identity_new(), mx_dropout_new(p, gen)});
  mx_tensor *x = mx_full(MX_SHAPE(n), 2.0, MX_F32, MX_CPU);
  mx_tensor *y = mx_module_forward(net, x);
  cr_assert_not_null(y, "%s", mx_last_error());
  double zeros = mx_item(mx_sum(mx_eq_scalar(y, 0), MX_ALL_DIMS, false));
  double scaled = mx_item(mx_sum(mx_eq_scalar(y, (float)(2 / (1 - p))), MX_ALL_DIMS, false));
  double sigma = sqrt(n * p * (1 - p));
  cr_expect_lt(fabs(zeros - n * p), 5 * sigma, "%g zeros of %lld, expected %g +- %g", zeros, (long long)n, n * p,
               5 * sigma);
  cr_expect_eq(zeros + scaled, n, "every element is 0 or 2/(1-p)");
  /* a second forward draws a new mask */
  mx_tensor *y2 = mx_module_forward(net, x);
  cr_expect_gt(mx_item(mx_sum(mx_ne(y, y2), MX_ALL_DIMS, false)), 0);

  mx_module_train(net, false);
  mx_tensor *e = mx_module_forward(net, x);
  cr_expect_eq(mx_item(mx_sum(mx_ne(e, x), MX_ALL_DIMS, false)), 0);
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(s);
}

Test(nn_modes, dropout_generator_and_extremes) {
  mx_scope *s = mx_scope_begin();
  mx_generator *g1 = mx_generator_new(5), *g2 = mx_generator_new(5);
  mx_module *a = mx_dropout_new(0.5, g1), *b = mx_dropout_new(0.5, g2);
  mx_tensor *x = mx_randn(MX_SHAPE(64), MX_F32, MX_CPU, NULL);
  cr_expect_eq(mx_item(mx_sum(mx_ne(mx_module_forward(a, x), mx_module_forward(b, x)), MX_ALL_DIMS, false)), 0,
               "the same seed gives the same mask");
  mx_module *none = mx_dropout_new(0, NULL), *all = mx_dropout_new(1, NULL);
  cr_expect_eq(mx_item(mx_sum(mx_ne(mx_module_forward(none, x), x), MX_ALL_DIMS, false)), 0);
  cr_expect_eq(mx_item(mx_sum(mx_abs(mx_module_forward(all, x)), MX_ALL_DIMS, false)), 0);
  mx_module_free(a), mx_module_free(b), mx_module_free(none), mx_module_free(all);
  mx_generator_free(g1), mx_generator_free(g2);
  mx_scope_end(s);
}

Test(nn_modes, embedding_padding_row_gets_no_gradient) {
  mx_scope *s = mx_scope_begin();
  mx_module *emb = mx_embedding_new(4, 2, 2, NULL);
  mx_tensor *w = mx_module_get_parameter(emb, "weight");
  cr_expect_eq(mx_at(w, MX_SHAPE(2, 0)), 0);
  cr_expect_eq(mx_at(w, MX_SHAPE(2, 1)), 0);
  int64_t idx[] = {2, 1, 2, 3};
  mx_tensor *y = mx_module_forward(emb, mx_from_data(idx, MX_SHAPE(4), MX_I64, MX_CPU));
  cr_assert_eq(mx_backward(mx_sum(y, MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
  mx_tensor *g = mx_grad_of(w);
  cr_expect_eq(mx_at(g, MX_SHAPE(0, 0)), 0);
  cr_expect_eq(mx_at(g, MX_SHAPE(1, 1)), 1);
  cr_expect_eq(mx_at(g, MX_SHAPE(2, 0)), 0);
  cr_expect_eq(mx_at(g, MX_SHAPE(3, 1)), 1);
  mx_module_free(emb);
  mx_scope_end(s);
}

/* Modules run their ops through the dispatcher, so autocast applies: a Linear computes in bfloat16 and its
 * float32 parameters get float32 gradients. */
Test(nn_modes, autocast_reaches_layers) {
  mx_scope *s = mx_scope_begin();
  mx_module *net = mx_sequential_new(3, (mx_module *[]){mx_linear_new(8, 4, true, NULL),
                                                       mx_layer_norm_new(MX_SHAPE(4), 1e-5, true),
                                                       mx_linear_new(4, 2, true, NULL)});
  mx_tensor *x = mx_randn(MX_SHAPE(3, 8), MX_F32, MX_CPU, NULL);
  mx_tensor *y = NULL;
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) { y = mx_module_forward(net, x); }
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_expect_eq(mx_dtype_of(y), MX_BF16);
  cr_assert_eq(mx_backward(mx_sum(mx_to_dtype(y, MX_F32), MX_ALL_DIMS, false), NULL, false), MX_OK, "%s",
               mx_last_error());
  for (int i = 0; i < mx_module_num_parameters(net); i++) {
    const char *name;
    mx_tensor *g = mx_grad_of(mx_module_parameter(net, i, &name));
    cr_assert_not_null(g, "%s has no gradient", name);
    cr_expect_eq(mx_dtype_of(g), MX_F32, "%s's gradient is %s", name, mx_dtype_name(mx_dtype_of(g)));
  }
  mx_module_free(net);
  mx_scope_end(s);
}
