/* Initialisation: torch.nn.init's gains, fans and distributions, and each layer's default initialisation. Bounds
 * are checked exactly; means and variances within 5 standard errors for the sample size. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include <mixgrad.h>

typedef struct {
  int64_t n;
  double min, max, mean, var; /* var: the population variance of the sample */
} sample_stats;

static sample_stats stats_of(const mx_tensor *t) {
  sample_stats s = {.n = mx_numel(t), .min = INFINITY, .max = -INFINITY};
  double *v = malloc(sizeof(double) * (size_t)s.n);
  mx_scope *scope = mx_scope_begin();
  cr_assert_eq(mx_to_host(mx_to_dtype(t, MX_F64), v, sizeof(double) * (size_t)s.n), MX_OK, "%s", mx_last_error());
  mx_scope_end(scope);
  for (int64_t k = 0; k < s.n; k++) s.min = fmin(s.min, v[k]), s.max = fmax(s.max, v[k]), s.mean += v[k];
  s.mean /= (double)s.n;
  for (int64_t k = 0; k < s.n; k++) s.var += (v[k] - s.mean) * (v[k] - s.mean);
  s.var /= (double)s.n;
  free(v);
  return s;
}

/* Values in [-bound, bound], mean 0 and variance bound^2 / 3 within 5 standard errors: the mean's is
 * sigma / sqrt(n); the variance's is sqrt((mu4 - sigma^4) / n) with mu4 = bound^4 / 5 for a uniform. */
static void expect_uniform(const char *what, const mx_tensor *t, double lo, double hi) {
  sample_stats s = stats_of(t);
  double width = hi - lo, var = width * width / 12, mu4 = pow(width, 4) / 80;
  cr_expect(s.min >= (float)lo && s.max <= (float)hi, "%s: values in [%.9g, %.9g] outside [%.9g, %.9g]", what, s.min,
            s.max, lo, hi);
  double se_mean = sqrt(var / (double)s.n), se_var = sqrt((mu4 - var * var) / (double)s.n);
  cr_expect_lt(fabs(s.mean - (lo + hi) / 2), 5 * se_mean, "%s: mean %g, expected %g +- %g", what, s.mean, (lo + hi) / 2,
               5 * se_mean);
  cr_expect_lt(fabs(s.var - var), 5 * se_var, "%s: variance %g, expected %g +- %g", what, s.var, var, 5 * se_var);
  /* and the bounds are used: the extremes lie within a fraction q of the width from them, q such that n draws all
   * miss it with probability (1 - q)^n < 1e-9 */
  double q = fmin(0.5, 21.0 / (double)s.n);
  cr_expect(s.min < lo + q * width && s.max > hi - q * width, "%s: [%g, %g] does not fill [%g, %g]", what, s.min,
            s.max, lo, hi);
}

/* Mean and variance of N(mean, std^2) within 5 standard errors (the variance's: std^2 sqrt(2 / n)). */
static void expect_normal(const char *what, const mx_tensor *t, double mean, double std) {
  sample_stats s = stats_of(t);
  double se_mean = std / sqrt((double)s.n), se_var = std * std * sqrt(2.0 / (double)s.n);
  cr_expect_lt(fabs(s.mean - mean), 5 * se_mean, "%s: mean %g, expected %g +- %g", what, s.mean, mean, 5 * se_mean);
  cr_expect_lt(fabs(s.var - std * std), 5 * se_var, "%s: variance %g, expected %g +- %g", what, s.var, std * std,
               5 * se_var);
}

static void expect_all(const char *what, const mx_tensor *t, double value) {
  sample_stats s = stats_of(t);
  cr_expect(s.min == value && s.max == value, "%s: values in [%g, %g], expected all %g", what, s.min, s.max, value);
}

Test(nn_init, gains_and_fans) {
  cr_expect_eq(mx_init_calculate_gain(MX_GAIN_LINEAR, NAN), 1);
  cr_expect_eq(mx_init_calculate_gain(MX_GAIN_CONV2D, NAN), 1);
  cr_expect_eq(mx_init_calculate_gain(MX_GAIN_CONV_TRANSPOSE3D, NAN), 1);
  cr_expect_eq(mx_init_calculate_gain(MX_GAIN_SIGMOID, NAN), 1);
  cr_expect_eq(mx_init_calculate_gain(MX_GAIN_TANH, NAN), 5.0 / 3);
  cr_expect_eq(mx_init_calculate_gain(MX_GAIN_RELU, NAN), sqrt(2.0));
  cr_expect_eq(mx_init_calculate_gain(MX_GAIN_LEAKY_RELU, NAN), sqrt(2.0 / (1 + 0.01 * 0.01)));
  cr_expect_eq(mx_init_calculate_gain(MX_GAIN_LEAKY_RELU, sqrt(5.0)), sqrt(2.0 / 6));
  cr_expect_eq(mx_init_calculate_gain(MX_GAIN_SELU, NAN), 0.75);
  mx_tensor *w = mx_empty(MX_SHAPE(8, 4, 3, 5), MX_F32, MX_CPU);
  int64_t fan_in, fan_out;
  cr_assert_eq(mx_init_fans(w, &fan_in, &fan_out), MX_OK);
  cr_expect_eq(fan_in, 4 * 15);
  cr_expect_eq(fan_out, 8 * 15);
  mx_release(w);
  w = mx_empty(MX_SHAPE(7, 3), MX_F32, MX_CPU);
  cr_assert_eq(mx_init_fans(w, &fan_in, &fan_out), MX_OK);
  cr_expect(fan_in == 3 && fan_out == 7);
  mx_release(w);
}

Test(nn_init, distributions) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(1);
  mx_tensor *t = mx_empty(MX_SHAPE(300, 400), MX_F32, MX_CPU);
  cr_assert_eq(mx_init_uniform_(t, -0.5, 2, gen), MX_OK);
  expect_uniform("uniform_(-0.5, 2)", t, -0.5, 2);
  cr_assert_eq(mx_init_normal_(t, 1, 3, gen), MX_OK);
  expect_normal("normal_(1, 3)", t, 1, 3);
  double b = sqrt(6.0 / 700);
  cr_assert_eq(mx_init_xavier_uniform_(t, 1, gen), MX_OK);
  expect_uniform("xavier_uniform_", t, -b, b);
  cr_assert_eq(mx_init_xavier_normal_(t, 2, gen), MX_OK);
  expect_normal("xavier_normal_(gain 2)", t, 0, 2 * sqrt(2.0 / 700));
  cr_assert_eq(mx_init_kaiming_uniform_(t, 0, MX_FAN_IN, MX_GAIN_LEAKY_RELU, gen), MX_OK);
  expect_uniform("kaiming_uniform_ (defaults)", t, -sqrt(6.0 / 400), sqrt(6.0 / 400));
  cr_assert_eq(mx_init_kaiming_uniform_(t, 0.2, MX_FAN_OUT, MX_GAIN_LEAKY_RELU, gen), MX_OK);
  double bo = sqrt(3.0) * sqrt(2 / 1.04) / sqrt(300.0);
  expect_uniform("kaiming_uniform_ (a 0.2, fan_out)", t, -bo, bo);
  mx_tensor *conv = mx_empty(MX_SHAPE(64, 32, 3, 3), MX_F64, MX_CPU);
  cr_assert_eq(mx_init_kaiming_normal_(conv, 0, MX_FAN_OUT, MX_GAIN_RELU, gen), MX_OK);
  expect_normal("kaiming_normal_ (fan_out, relu, float64)", conv, 0, sqrt(2.0) / sqrt(64 * 9.0));
  cr_assert_eq(mx_init_constant_(t, 0.25), MX_OK);
  expect_all("constant_", t, 0.25);
  cr_assert_eq(mx_init_ones_(t), MX_OK);
  expect_all("ones_", t, 1);
  cr_assert_eq(mx_init_zeros_(t), MX_OK);
  expect_all("zeros_", t, 0);
  mx_tensor *half = mx_empty(MX_SHAPE(200, 300), MX_BF16, MX_CPU);
  cr_assert_eq(mx_init_uniform_(half, -1, 1, gen), MX_OK);
  expect_uniform("uniform_ into bfloat16", half, -1, 1);
  mx_tensor *none = mx_empty(MX_SHAPE(0, 5), MX_F32, MX_CPU);
  cr_expect_eq(mx_init_kaiming_uniform_(none, 0, MX_FAN_IN, MX_GAIN_RELU, gen), MX_OK); /* nothing to fill */
  mx_generator_free(gen);
  mx_scope_end(s);
}

Test(nn_init, reproducible_with_a_generator) {
  mx_generator *g1 = mx_generator_new(42), *g2 = mx_generator_new(42);
  mx_module *a = mx_conv2d_new(3, 8, MX_DIMS(3), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1, true, g1);
  mx_module *b = mx_conv2d_new(3, 8, MX_DIMS(3), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1, true, g2);
  mx_module *c = mx_conv2d_new(3, 8, MX_DIMS(3), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1, true, g2);
  mx_scope *s = mx_scope_begin();
  for (int i = 0; i < 2; i++) {
    mx_tensor *pa = mx_module_parameter(a, i, NULL), *pb = mx_module_parameter(b, i, NULL);
    cr_expect_eq(mx_item(mx_sum(mx_ne(pa, pb), MX_ALL_DIMS, false)), 0, "the same seed gives the same weights");
  }
  cr_expect_gt(mx_item(mx_sum(mx_ne(mx_module_parameter(b, 0, NULL), mx_module_parameter(c, 0, NULL)), MX_ALL_DIMS,
                              false)),
               0, "the stream moves on");
  mx_scope_end(s);
  mx_module_free(a), mx_module_free(b), mx_module_free(c);
  mx_generator_free(g1), mx_generator_free(g2);
}

/* PyTorch 1.13's reset_parameters, layer by layer. */
Test(nn_init, layer_defaults) {
  mx_generator *gen = mx_generator_new(3);
  mx_module *linear = mx_linear_new(400, 300, true, gen);
  expect_uniform("Linear weight", mx_module_get_parameter(linear, "weight"), -0.05, 0.05);
  expect_uniform("Linear bias", mx_module_get_parameter(linear, "bias"), -0.05, 0.05);
  mx_module *conv = mx_conv2d_new(16, 64, MX_DIMS(3), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 2, true, gen);
  /* weight (64, 8, 3, 3): fan_in 72 */
  expect_uniform("Conv2d weight", mx_module_get_parameter(conv, "weight"), -1 / sqrt(72.0), 1 / sqrt(72.0));
  /* 64 biases: only the bounds say much */
  sample_stats bs = stats_of(mx_module_get_parameter(conv, "bias"));
  cr_expect(bs.min >= (float)(-1 / sqrt(72.0)) && bs.max <= (float)(1 / sqrt(72.0)));
  mx_module *convt = mx_conv_transpose3d_new(8, 32, MX_DIMS(3), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 4,
                                             true, gen);
  mx_shape wt = mx_shape_get(mx_module_get_parameter(convt, "weight"));
  cr_expect(wt.ndim == 5 && wt.d[0] == 8 && wt.d[1] == 8 && wt.d[2] == 3, "ConvTranspose3d weight (in, out/groups, k)");
  /* PyTorch's fan_in of that weight: size(1) * 27 = 216 */
  expect_uniform("ConvTranspose3d weight", mx_module_get_parameter(convt, "weight"), -1 / sqrt(216.0), 1 / sqrt(216.0));
  mx_module *bil = mx_bilinear_new(50, 20, 100, true, gen);
  expect_uniform("Bilinear weight", mx_module_get_parameter(bil, "weight"), -1 / sqrt(50.0), 1 / sqrt(50.0));
  mx_module *emb = mx_embedding_new(1000, 64, MX_NO_PADDING_IDX, gen);
  expect_normal("Embedding weight", mx_module_get_parameter(emb, "weight"), 0, 1);
  mx_module *bn = mx_batch_norm3d_new(5, 1e-5, 0.1, true, true);
  expect_all("BatchNorm weight", mx_module_get_parameter(bn, "weight"), 1);
  expect_all("BatchNorm bias", mx_module_get_parameter(bn, "bias"), 0);
  expect_all("BatchNorm running_mean", mx_module_get_buffer(bn, "running_mean"), 0);
  expect_all("BatchNorm running_var", mx_module_get_buffer(bn, "running_var"), 1);
  expect_all("BatchNorm num_batches_tracked", mx_module_get_buffer(bn, "num_batches_tracked"), 0);
  cr_expect_eq(mx_dtype_of(mx_module_get_buffer(bn, "num_batches_tracked")), MX_I64);
  cr_expect_eq(mx_ndim(mx_module_get_buffer(bn, "num_batches_tracked")), 0);
  mx_module *ln = mx_layer_norm_new(MX_SHAPE(3, 4), 1e-5, true);
  expect_all("LayerNorm weight", mx_module_get_parameter(ln, "weight"), 1);
  cr_expect_eq(mx_ndim(mx_module_get_parameter(ln, "bias")), 2);
  mx_module *gn = mx_group_norm_new(2, 6, 1e-5, true);
  expect_all("GroupNorm bias", mx_module_get_parameter(gn, "bias"), 0);
  mx_module *prelu = mx_prelu_new(4, 0.25);
  expect_all("PReLU weight", mx_module_get_parameter(prelu, "weight"), 0.25);
  mx_module *all[] = {linear, conv, convt, bil, emb, bn, ln, gn, prelu};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) mx_module_free(all[i]);
  mx_generator_free(gen);
}
