/* A Conv2d + BatchNorm2d + ReLU + Linear net trained by SGD (its batch norm and ReLU run as batch_norm_relu, one
 * batch_norm_training node) follows the loss curve of the same net whose batch norm is written out in elementwise
 * ops (the composite, differentiated op by op), in float32 and under bfloat16 autocast. */
#include <criterion/criterion.h>
#include <math.h>

#include <mixgrad.h>

enum { STEPS = 6, CHANNELS = 6 };

static mx_module *make_net(uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_module *net = mx_sequential_new(
      5, (mx_module *[]){mx_conv2d_new(3, CHANNELS, MX_SHAPE(3), MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 1, false, gen),
                         mx_batch_norm2d_new(CHANNELS, 1e-5, 0.1, true, true), mx_relu_new(), mx_flatten_new(1, -1),
                         mx_linear_new(CHANNELS * 6 * 6, 4, true, gen)});
  mx_generator_free(gen);
  cr_assert_not_null(net, "%s", mx_last_error());
  return net;
}

/* The net's forward with its batch norm in elementwise ops: (h - mean) rsqrt(var + eps) weight + bias, the
 * biased variance, in float32 whatever h's dtype. */
static mx_tensor *composite_forward(mx_module *net, const mx_tensor *x) {
  mx_module *bn = mx_module_child(net, 1, NULL);
  mx_tensor *h = mx_to_dtype(mx_module_forward(mx_module_child(net, 0, NULL), x), MX_F32);
  mx_tensor *w = mx_reshape(mx_module_get_parameter(bn, "weight"), MX_SHAPE(1, -1, 1, 1));
  mx_tensor *b = mx_reshape(mx_module_get_parameter(bn, "bias"), MX_SHAPE(1, -1, 1, 1));
  mx_tensor *centered = mx_sub(h, mx_mean(h, MX_SHAPE(0, 2, 3), true));
  mx_tensor *var = mx_mean(mx_mul(centered, centered), MX_SHAPE(0, 2, 3), true);
  mx_tensor *y = mx_relu(mx_add(mx_mul(mx_mul(centered, mx_rsqrt(mx_add_scalar(var, 1e-5))), w), b));
  return mx_module_forward(mx_module_child(net, 4, NULL), mx_reshape(y, MX_SHAPE(mx_shape_get(x).d[0], -1)));
}

/* The mean squared error after each of STEPS SGD steps, the net's own forward or the composite's. */
static void train(bool composite, mx_dtype autocast, double *losses) {
  mx_scope *scope = mx_scope_begin();
  mx_module *net = make_net(17);
  mx_generator *gen = mx_generator_new(18);
  mx_tensor *x = mx_randn(MX_SHAPE(8, 3, 6, 6), MX_F32, MX_CPU, gen);
  mx_tensor *target = mx_randn(MX_SHAPE(8, 4), MX_F32, MX_CPU, gen);
  mx_generator_free(gen);
  mx_tensor *params[8];
  int n = mx_module_num_parameters(net);
  cr_assert(n <= 8);
  for (int i = 0; i < n; i++) params[i] = mx_module_parameter(net, i, NULL);
  mx_sgd_opts opts = mx_sgd_defaults();
  opts.lr = 0.1;
  opts.momentum = 0.9;
  mx_optimizer *opt = mx_sgd_new(n, params, &opts);
  cr_assert_not_null(opt, "%s", mx_last_error());
  for (int step = 0; step < STEPS; step++) {
    mx_scope *inner = mx_scope_begin();
    if (autocast != MX_DTYPE_COUNT)
      cr_assert_eq(mx_autocast_begin(MX_CPU, autocast, true, true), MX_OK, "%s", mx_last_error());
    mx_tensor *out = composite ? composite_forward(net, x) : mx_module_forward(net, x);
    if (autocast != MX_DTYPE_COUNT) cr_assert_eq(mx_autocast_end(), MX_OK, "%s", mx_last_error());
    cr_assert_not_null(out, "%s", mx_last_error());
    mx_tensor *diff = mx_sub(mx_to_dtype(out, MX_F32), target);
    mx_tensor *loss = mx_mean(mx_mul(diff, diff), MX_SHAPE(0, 1), false);
    cr_assert_not_null(loss, "%s", mx_last_error());
    losses[step] = mx_item(loss);
    cr_assert_eq(mx_optimizer_zero_grad(opt, true), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_optimizer_step(opt), MX_OK, "%s", mx_last_error());
    mx_scope_end(inner);
  }
  mx_optimizer_free(opt);
  mx_module_free(net);
  mx_scope_end(scope);
}

/* The curves agree within tolerance of the first loss: float32 2^-20 (the one node's gradients differ from the
 * composite's in rounding only), bfloat16 2^-8 (the composite's activations are float32, the net's bfloat16); the
 * loss falls, so the steps do train. */
static void expect_same_curve(mx_dtype autocast, double tolerance) {
  double fused[STEPS], plain[STEPS];
  train(false, autocast, fused);
  train(true, autocast, plain);
  const char *name = autocast == MX_DTYPE_COUNT ? "float32" : mx_dtype_name(autocast);
  for (int step = 0; step < STEPS; step++)
    cr_expect_leq(fabs(fused[step] - plain[step]), tolerance * plain[0], "%s, step %d: loss %.9g, the composite's %.9g",
                  name, step, fused[step], plain[step]);
  cr_expect_lt(fused[STEPS - 1], 0.8 * fused[0], "%s: the loss went from %.6g to %.6g", name, fused[0],
               fused[STEPS - 1]);
}

Test(batch_norm_training_curve, float32_follows_the_composite) { expect_same_curve(MX_DTYPE_COUNT, 0x1p-20); }

Test(batch_norm_training_curve, bfloat16_autocast_follows_the_composite) { expect_same_curve(MX_BF16, 0x1p-8); }
