/* The AMP statistics' histograms against hand-counted tensors: the bin
 * function of kernels/math.h (zero, subnormal, normal, inf, NaN; float32,
 * float16, bfloat16 and float64 values), mx_amp_histogram, the GradScaler's
 * fused unscale pass with histograms (scaled and true gradients, matching
 * the scaler's own underflow fraction), the module output hook and the
 * watcher's errors. */
#include <math.h>
#include <string.h>

#include "amp_suite.h"
#include "kernels/math.h"
#include "../common/expect_error.h"

TestSuite(amp_hist, .init = amp_suite_open, .fini = amp_suite_close);

#define BIN(e) ((e) - MX_AMP_HIST_EXP_MIN)

/* --- the bin function ---------------------------------------------------------------------- */

Test(amp_hist, bins_by_binary_exponent) {
  struct { float v; int bin; } cases[] = {
      {1.0f, BIN(0)},          {1.9999999f, BIN(0)},   {2.0f, BIN(1)},          {-0.75f, BIN(-1)},
      {0x1p-149f, BIN(-149)},  {0x3p-149f, BIN(-148)}, {0x1p-127f, BIN(-127)},  {0x1.fffffcp-127f, BIN(-127)},
      {0x1p-126f, BIN(-126)},  {3.4028235e38f, BIN(127)}, {0x1p-14f, BIN(-14)}, {0x1.ffep-15f, BIN(-15)},
      {0.0f, MX_AMP_HIST_ZERO}, {-0.0f, MX_AMP_HIST_ZERO}, {INFINITY, MX_AMP_HIST_INF}, {-INFINITY, MX_AMP_HIST_INF},
      {NAN, MX_AMP_HIST_NAN},  {-NAN, MX_AMP_HIST_NAN},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    cr_expect_eq(mx_amp_hist_bin_f32(mx_f32_bits(cases[i].v)), cases[i].bin, "bits of %a: bin %d, want %d",
                 (double)cases[i].v, mx_amp_hist_bin_f32(mx_f32_bits(cases[i].v)), cases[i].bin);
    cr_expect_eq(mx_amp_hist_bin(cases[i].v), cases[i].bin, "%a: bin %d, want %d", (double)cases[i].v,
                 mx_amp_hist_bin(cases[i].v), cases[i].bin);
  }
  /* float64 values beyond float32's range land in the end bins */
  cr_expect_eq(mx_amp_hist_bin(1e-300), BIN(MX_AMP_HIST_EXP_MIN));
  cr_expect_eq(mx_amp_hist_bin(-1e300), BIN(MX_AMP_HIST_EXP_MAX));
  cr_expect_eq(MX_AMP_HIST_BINS, 280);
}

Test(amp_hist, bit_and_double_bins_agree_on_random_floats) {
  uint64_t state = 0x9e3779b97f4a7c15u; /* xorshift64, seeded: the same floats every run */
  int n = getenv("MX_TEST_QUICK") ? 20000 : 200000;
  for (int i = 0; i < n; i++) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    uint32_t bits = (uint32_t)state;
    int a = mx_amp_hist_bin_f32(bits), b = mx_amp_hist_bin(mx_bits_f32(bits));
    if (a != b) cr_assert_fail("bits 0x%08x: %d by bits, %d by frexp", bits, a, b);
  }
}

Test(amp_hist, sixteen_bit_bins_agree_with_their_float_values) {
  for (uint32_t h = 0; h < 0x10000u; h++) {
    uint16_t bits = (uint16_t)h;
    int f16 = mx_amp_hist_bin_at(&bits, MX_F16), bf16 = mx_amp_hist_bin_at(&bits, MX_BF16);
    if (f16 != mx_amp_hist_bin(mx_f16_to_f32(bits)) || f16 != mx_amp_hist_bin_f16(bits))
      cr_assert_fail("float16 0x%04x: %d by bits, %d by value", h, f16, mx_amp_hist_bin(mx_f16_to_f32(bits)));
    if (bf16 != mx_amp_hist_bin(mx_bf16_to_f32(bits)))
      cr_assert_fail("bfloat16 0x%04x: %d by bits, %d by value", h, bf16, mx_amp_hist_bin(mx_bf16_to_f32(bits)));
  }
}

/* --- mx_amp_histogram on hand-counted tensors ------------------------------------------------- */

/* counts holds exactly the listed (bin, count) pairs and zeros elsewhere */
static void expect_counts(const int64_t *counts, int n, const int (*want)[2]) {
  int64_t expected[MX_AMP_HIST_BINS] = {0};
  for (int i = 0; i < n; i++) expected[want[i][0]] += want[i][1];
  for (int b = 0; b < MX_AMP_HIST_BINS; b++)
    cr_expect_eq(counts[b], expected[b], "bin %d (exponent %d): %lld, want %lld", b, b + MX_AMP_HIST_EXP_MIN,
                 (long long)counts[b], (long long)expected[b]);
}

Test(amp_hist, float32_tensor) {
  float v[] = {0.0f, -0.0f, 1.0f, -1.5f, 0x1p-140f, 3.0f, INFINITY, -INFINITY, NAN, 1e-3f};
  mx_tensor *x = mx_from_data(v, MX_SHAPE(10), MX_F32, MX_CPU);
  NOT_NULL(x);
  int64_t counts[MX_AMP_HIST_BINS];
  OK(mx_amp_histogram(x, counts));
  expect_counts(counts, 7, (const int[][2]){{MX_AMP_HIST_ZERO, 2}, {BIN(0), 2}, {BIN(-140), 1}, {BIN(1), 1},
                                            {MX_AMP_HIST_INF, 2}, {MX_AMP_HIST_NAN, 1}, {BIN(-10), 1}});
}

Test(amp_hist, float16_tensor) {
  /* 1e-9 rounds to zero in float16, 2^-24 is its smallest subnormal, 2^-15 a subnormal, 2^-14 the smallest
   * normal, 65504 the largest */
  float v[] = {0.0f, 1e-9f, 0x1p-24f, 0x1p-15f, 0x1p-14f, 65504.0f, INFINITY, NAN};
  mx_tensor *x = mx_to_dtype(mx_from_data(v, MX_SHAPE(8), MX_F32, MX_CPU), MX_F16);
  NOT_NULL(x);
  int64_t counts[MX_AMP_HIST_BINS];
  OK(mx_amp_histogram(x, counts));
  expect_counts(counts, 7, (const int[][2]){{MX_AMP_HIST_ZERO, 2}, {BIN(-24), 1}, {BIN(-15), 1}, {BIN(-14), 1},
                                            {BIN(15), 1}, {MX_AMP_HIST_INF, 1}, {MX_AMP_HIST_NAN, 1}});
}

Test(amp_hist, bfloat16_tensor) {
  /* 2^-133 is bfloat16's smallest subnormal, 2^-126 its smallest normal; 1e38 stays below 2^127 */
  float v[] = {0x1p-133f, 0x1p-126f, 1e38f, 0.0f, NAN, 0x1p-140f};
  mx_tensor *x = mx_to_dtype(mx_from_data(v, MX_SHAPE(6), MX_F32, MX_CPU), MX_BF16);
  NOT_NULL(x);
  int64_t counts[MX_AMP_HIST_BINS];
  OK(mx_amp_histogram(x, counts));
  /* 2^-140 is below half of bfloat16's smallest subnormal: zero */
  expect_counts(counts, 5, (const int[][2]){{BIN(-133), 1}, {BIN(-126), 1}, {BIN(126), 1}, {MX_AMP_HIST_ZERO, 2},
                                            {MX_AMP_HIST_NAN, 1}});
}

Test(amp_hist, strided_and_broadcast_views_count_their_values) {
  float v[] = {1.0f, 2.0f, 4.0f, 0.5f, 0.0f, 8.0f};
  mx_tensor *x = mx_from_data(v, MX_SHAPE(2, 3), MX_F32, MX_CPU);
  int64_t counts[MX_AMP_HIST_BINS];
  OK(mx_amp_histogram(mx_transpose(x, 0, 1), counts));
  expect_counts(counts, 6, (const int[][2]){{BIN(0), 1}, {BIN(1), 1}, {BIN(2), 1}, {BIN(-1), 1},
                                            {MX_AMP_HIST_ZERO, 1}, {BIN(3), 1}});
  /* a slice, whose rows skip memory: [[2, 4], [0, 8]] */
  OK(mx_amp_histogram(mx_narrow(x, 1, 1, 2), counts));
  expect_counts(counts, 4, (const int[][2]){{BIN(1), 1}, {BIN(2), 1}, {MX_AMP_HIST_ZERO, 1}, {BIN(3), 1}});
  /* a (1, 3) row broadcast to (4, 3): each stored value counts four times */
  OK(mx_amp_histogram(mx_expand(mx_narrow(x, 0, 0, 1), MX_SHAPE(4, 3)), counts));
  expect_counts(counts, 3, (const int[][2]){{BIN(0), 4}, {BIN(1), 4}, {BIN(2), 4}});
}

Test(amp_hist, histogram_errors) {
  int64_t counts[MX_AMP_HIST_BINS];
  mx_tensor *i = mx_zeros(MX_SHAPE(3), MX_I64, MX_CPU);
  EXPECT_STATUS_ERROR(mx_amp_histogram(i, counts),
               "mx_amp_histogram: x is int64; histograms are of floating tensors");
  cr_expect_null(mx_amp_stats_new(NULL, 0));
  cr_expect_str_eq(mx_last_error(), "mx_amp_stats_new: every must be >= 1, got 0");
}

/* --- the unscale pass and the output hook ------------------------------------------------------ */

/* One step of loss = sum(w * c) * S under the watcher: w's gradient is S c. */
static void one_step(mx_amp_stats *st, mx_scaler *s, mx_optimizer *opt, mx_tensor *w, const float *c, int n) {
  mx_scope *scope = mx_scope_begin();
  mx_amp_stats_step_begin(st);
  OK(mx_optimizer_zero_grad(opt, true));
  mx_tensor *factors = mx_to_device(mx_from_data(c, MX_SHAPE(n), MX_F32, MX_CPU), mx_device_of(w));
  mx_tensor *loss = mx_sum(mx_mul(w, factors), MX_ALL_DIMS, false);
  OK(mx_backward(mx_scaler_scale(s, loss), NULL, false));
  OK(mx_scaler_step(s, opt, NULL));
  OK(mx_scaler_update(s));
  OK(mx_amp_stats_step_end(st, loss));
  mx_scope_end(scope);
}

Test(amp_hist, unscale_pass_bins_scaled_and_true_gradients) {
  mx_scaler_opts so = mx_scaler_defaults();
  so.init_scale = 0x1p10;
  mx_scaler *s = mx_scaler_new(&so);
  mx_tensor *w = mx_zeros(MX_SHAPE(5), MX_F32, MX_CPU);
  OK(mx_set_requires_grad(w, true));
  mx_sgd_opts o = mx_sgd_defaults();
  o.lr = 0.0;
  mx_optimizer *opt = mx_sgd_new(1, &w, &o);
  mx_amp_stats *st = mx_amp_stats_new(s, 2);
  OK(mx_amp_stats_name_params(st, 1, &w, (const char *[]){"w"}));
  /* scaled: 2^10, 2^-10, 0, 2^-20, 3 * 2^9; true: 1, 2^-20, 0, 2^-30, 1.5 */
  const float c[] = {1.0f, 0x1p-20f, 0.0f, 0x1p-30f, 1.5f};
  for (int step = 0; step < 3; step++) one_step(st, s, opt, w, c, 5);
  cr_assert_eq(mx_amp_stats_num_samples(st), 2, "steps 0 and 2 of 3 are sampled every 2");
  cr_assert_eq(mx_amp_stats_sample_step(st, 1), 2);
  cr_assert_eq(mx_amp_stats_sample_step(st, 2), -1);
  int64_t counts[MX_AMP_HIST_BINS];
  OK(mx_amp_stats_histogram(st, 1, "w", MX_AMP_HIST_GRAD_SCALED, counts));
  expect_counts(counts, 5, (const int[][2]){{BIN(10), 1}, {BIN(-10), 1}, {MX_AMP_HIST_ZERO, 1}, {BIN(-20), 1},
                                            {BIN(10), 1}});
  OK(mx_amp_stats_histogram(st, 1, "w", MX_AMP_HIST_GRAD, counts));
  expect_counts(counts, 4, (const int[][2]){{BIN(0), 2}, {BIN(-20), 1}, {MX_AMP_HIST_ZERO, 1}, {BIN(-30), 1}});
  /* the scaler counts the scaled values below 2^-14 (zero, 2^-20): the histogram's share below 2^-14 too */
  OK(mx_amp_stats_histogram(st, 1, "w", MX_AMP_HIST_GRAD_SCALED, counts));
  int64_t below = counts[MX_AMP_HIST_ZERO];
  for (int e = MX_AMP_HIST_EXP_MIN; e < -14; e++) below += counts[BIN(e)];
  cr_expect_eq(mx_scaler_underflow_fraction(s, opt), (double)below / 5.0);
  cr_expect_eq(below, 2);
  EXPECT_STATUS_ERROR(mx_amp_stats_histogram(st, 1, "v", MX_AMP_HIST_GRAD, counts),
               "mx_amp_stats_histogram: sample 1 (step 2) has no parameter gradient histogram named 'v'");
  EXPECT_STATUS_ERROR(mx_amp_stats_histogram(st, 2, "w", MX_AMP_HIST_GRAD, counts),
               "mx_amp_stats_histogram: sample 2 is out of range (2 samples)");
  EXPECT_STATUS_ERROR(mx_amp_stats_step_end(st, w),
               "mx_amp_stats_step_end: no step is open (call mx_amp_stats_step_begin before the step's forward)");
  mx_scaler_free(s); /* first: the watcher is told */
  mx_amp_stats_free(st);
  mx_optimizer_free(opt);
  mx_release(w);
}

Test(amp_hist, output_hook_bins_layer_outputs_and_their_gradients) {
  mx_module *net = mx_sequential_new(2, (mx_module *[]){mx_linear_new(3, 4, true, NULL), mx_relu_new()});
  NOT_NULL(net);
  mx_scaler_opts so = mx_scaler_defaults();
  so.init_scale = 0x1p12;
  mx_scaler *s = mx_scaler_new(&so);
  mx_tensor *params[2] = {mx_module_parameter(net, 0, NULL), mx_module_parameter(net, 1, NULL)};
  mx_optimizer *opt = mx_sgd_new(2, params, NULL);
  mx_amp_stats *st = mx_amp_stats_new(s, 1);
  mx_module_set_output_hook(net, mx_amp_stats_output_hook, st);
  mx_scope *scope = mx_scope_begin();
  cr_assert(mx_amp_stats_step_begin(st));
  mx_tensor *y = mx_module_forward(net, mx_ones(MX_SHAPE(2, 3), MX_F32, MX_CPU));
  mx_tensor *loss = mx_sum(y, MX_ALL_DIMS, false);
  OK(mx_backward(mx_scaler_scale(s, loss), NULL, false));
  OK(mx_scaler_step(s, opt, NULL));
  OK(mx_scaler_update(s));
  OK(mx_amp_stats_step_end(st, loss));
  int64_t counts[MX_AMP_HIST_BINS], direct[MX_AMP_HIST_BINS];
  OK(mx_amp_stats_histogram(st, 0, "1", MX_AMP_HIST_ACTIVATION, counts));
  OK(mx_amp_histogram(y, direct));
  cr_expect_arr_eq(counts, direct, sizeof counts);
  /* d(S sum y)/dy = S = 2^12 for each of the 8 outputs of the ReLU */
  OK(mx_amp_stats_histogram(st, 0, "1", MX_AMP_HIST_ACTIVATION_GRAD, counts));
  expect_counts(counts, 1, (const int[][2]){{BIN(12), 8}});
  OK(mx_amp_stats_histogram(st, 0, "0", MX_AMP_HIST_ACTIVATION_GRAD, counts));
  int64_t total = 0;
  for (int b = 0; b < MX_AMP_HIST_BINS; b++) total += counts[b];
  cr_expect_eq(total, 8, "the Linear's output got a gradient for each of its 8 values");
  EXPECT_STATUS_ERROR(mx_amp_stats_histogram(st, 0, "", MX_AMP_HIST_ACTIVATION, counts),
               "mx_amp_stats_histogram: sample 0 (step 0) has no layer histogram named ''");
  /* a forward outside a step is not watched */
  mx_module_forward(net, mx_ones(MX_SHAPE(1, 3), MX_F32, MX_CPU));
  cr_expect_eq(mx_amp_stats_num_samples(st), 1);
  mx_scope_end(scope);
  mx_module_set_output_hook(net, NULL, NULL);
  mx_amp_stats_free(st);
  mx_scaler_free(s);
  mx_optimizer_free(opt);
  mx_module_free(net);
}

/* --- the CUDA twin (skips without a device) --------------------------------------------------------- */

Test(amp_hist, cuda_counts_as_the_cpu_does) {
  if (mx_cuda_device_count() <= 0) cr_skip_test("no CUDA device here: the CUDA histograms are not compared");
  mx_generator *gen = mx_generator_new(3);
  /* normals spread over many binades, with zeros, infs and NaNs among them; every floating dtype */
  mx_tensor *x = mx_mul(mx_randn(MX_SHAPE(257, 33), MX_F32, MX_CPU, gen),
                        mx_exp(mx_mul_scalar(mx_randn(MX_SHAPE(257, 33), MX_F32, MX_CPU, gen), 14.0)));
  NOT_NULL(x);
  const mx_dtype dtypes[] = {MX_F32, MX_F16, MX_BF16, MX_F64};
  for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
    mx_tensor *cpu = mx_to_dtype(x, dtypes[d]), *cuda = mx_to_device(cpu, MX_CUDA);
    NOT_NULL(cuda);
    int64_t want[MX_AMP_HIST_BINS], got[MX_AMP_HIST_BINS];
    OK(mx_amp_histogram(cpu, want));
    OK(mx_amp_histogram(cuda, got));
    cr_expect_arr_eq(got, want, sizeof got, "%s", mx_dtype_name(dtypes[d]));
    OK(mx_amp_histogram(mx_transpose(cuda, 0, 1), got)); /* strided */
    cr_expect_arr_eq(got, want, sizeof got, "%s transposed", mx_dtype_name(dtypes[d]));
  }
  mx_generator_free(gen);
}

/* The fused unscale pass on device: w's gradient S c binned before and after, as counted on the CPU. */
static void unscale_histograms(mx_device device, const float *c, int n, int64_t out[2][MX_AMP_HIST_BINS]) {
  mx_scaler_opts so = mx_scaler_defaults();
  so.init_scale = 0x1p12;
  mx_scaler *s = mx_scaler_new(&so);
  mx_tensor *w = mx_to_device(mx_zeros(MX_SHAPE(n), MX_F32, MX_CPU), device);
  OK(mx_set_requires_grad(w, true));
  mx_sgd_opts o = mx_sgd_defaults();
  o.lr = 0.0;
  mx_optimizer *opt = mx_sgd_new(1, &w, &o);
  mx_amp_stats *st = mx_amp_stats_new(s, 1);
  OK(mx_amp_stats_name_params(st, 1, &w, (const char *[]){"w"}));
  one_step(st, s, opt, w, c, n);
  OK(mx_amp_stats_histogram(st, 0, "w", MX_AMP_HIST_GRAD_SCALED, out[0]));
  OK(mx_amp_stats_histogram(st, 0, "w", MX_AMP_HIST_GRAD, out[1]));
  mx_amp_stats_free(st);
  mx_scaler_free(s);
  mx_optimizer_free(opt);
  mx_release(w);
}

Test(amp_hist, cuda_unscale_pass_counts_as_the_cpu_does) {
  if (mx_cuda_device_count() <= 0) cr_skip_test("no CUDA device here: the CUDA unscale pass is not compared");
  float c[1000];
  for (int i = 0; i < 1000; i++) c[i] = (i % 7 == 0) ? 0.0f : ldexpf(1.0f + (float)(i % 13) / 13.0f, -(i % 40));
  int64_t cpu[2][MX_AMP_HIST_BINS], cuda[2][MX_AMP_HIST_BINS];
  unscale_histograms(MX_CPU, c, 1000, cpu);
  unscale_histograms(MX_CUDA, c, 1000, cuda);
  cr_expect_arr_eq(cuda[0], cpu[0], sizeof cpu[0], "scaled");
  cr_expect_arr_eq(cuda[1], cpu[1], sizeof cpu[1], "true");
}
