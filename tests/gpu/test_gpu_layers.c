/* The CUDA layers against the CPU's, forward and backward: convolutions
 * (cuDNN and direct), pooling, batch norm (and with relu fused, against
 * batch norm then relu on CUDA too), an MLP's training steps through
 * the ops, and a module moved to the GPU and back. Skips without a GPU. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"

/* The value and the gradients of sum(f(x, w, b) * seed) on both devices,
 * f a convolution or pooling; x, w, b and seed random normal values. */
typedef mx_tensor *(*layer_fn)(const mx_tensor *x, const mx_tensor *w, const mx_tensor *b, int config);

typedef struct {
  mx_tensor *y[2], *dx[2], *dw[2], *db[2];
} layer_results;

static layer_results run_layer(layer_fn f, int config, mx_shape xs, mx_shape ws, bool bias, mx_dtype dtype,
                               uint64_t seed) {
  layer_results r;
  memset(&r, 0, sizeof r);
  mx_generator *g = mx_generator_new(seed);
  mx_tensor *x = mx_to_dtype(mx_randn(xs, MX_F64, MX_CPU, g), dtype);
  mx_tensor *w = ws.ndim ? mx_to_dtype(mx_randn(ws, MX_F64, MX_CPU, g), dtype) : NULL;
  mx_tensor *b = bias ? mx_to_dtype(mx_randn(MX_SHAPE(ws.d[0]), MX_F64, MX_CPU, g), dtype) : NULL;
  mx_generator_free(g);
  for (int dev = 0; dev < 2; dev++) {
    mx_tensor *xd = dev ? to_cuda(x) : mx_clone(x), *wd = w ? (dev ? to_cuda(w) : mx_clone(w)) : NULL;
    mx_tensor *bd = b ? (dev ? to_cuda(b) : mx_clone(b)) : NULL;
    mx_set_requires_grad(xd, true);
    if (wd) mx_set_requires_grad(wd, true);
    if (bd) mx_set_requires_grad(bd, true);
    r.y[dev] = f(xd, wd, bd, config);
    cr_assert_not_null(r.y[dev], "%s: %s", dev ? "cuda" : "cpu", mx_last_error());
    mx_generator *sg = mx_generator_new(seed + 1);
    mx_tensor *seed_grad = mx_to_dtype(mx_randn(mx_shape_get(r.y[dev]), MX_F64, MX_CPU, sg), dtype);
    mx_generator_free(sg);
    if (dev) seed_grad = to_cuda(seed_grad);
    cr_assert_eq(mx_backward(r.y[dev], seed_grad, false), MX_OK, "%s: %s", dev ? "cuda" : "cpu", mx_last_error());
    r.dx[dev] = mx_grad_of(xd);
    r.dw[dev] = wd ? mx_grad_of(wd) : NULL;
    r.db[dev] = bd ? mx_grad_of(bd) : NULL;
  }
  return r;
}

/* rel and floor for the output and dx, dw; db_rel for the bias gradient,
 * a sum over the batch and positions that the devices order differently. */
static void expect_layer_results(const layer_results *r, double rel, double floor, double db_rel, const char *what) {
  const char *names[4] = {"output", "dx", "dw", "db"};
  mx_tensor *const *pairs[4] = {r->y, r->dx, r->dw, r->db};
  for (int i = 0; i < 4; i++) {
    if (!pairs[i][0]) continue;
    char why[256];
    size_t n = differences(pairs[i][0], pairs[i][1], i == 3 ? db_rel : rel, i == 3 ? 1.0 : floor, why, sizeof why);
    cr_expect_eq(n, 0, "%s, %s: %zu elements differ; the first, %s", what, names[i], n, why);
  }
}

static mx_tensor *conv_config(const mx_tensor *x, const mx_tensor *w, const mx_tensor *b, int config) {
  switch (config) {
  case 0: return mx_conv2d(x, w, b, MX_SHAPE(1), MX_SHAPE(1), MX_DEFAULT, 1);           /* 3x3, padding 1 */
  case 1: return mx_conv2d(x, w, b, MX_SHAPE(2, 1), MX_SHAPE(0, 2), MX_SHAPE(2, 1), 1); /* stride, dilation */
  default: return mx_conv2d(x, w, b, MX_SHAPE(1), MX_SHAPE(1), MX_DEFAULT, 2);          /* two groups */
  }
}

/* Convolutions forward and backward (data, weight, bias) in every float
 * dtype and three configurations. float64 runs the CPU's plain loops and
 * CUDA's direct kernels, which sum in the same order: the same bits (but
 * the bias gradient, CUDA's channel sums in another order: 216 values of
 * about 1, within 216 eps times the sum of their magnitudes, 1e-12 of a sum
 * of a few units). The others go through
 * oneDNN on the CPU and cuDNN on CUDA, other orders: within float32
 * rounding of sums of about 1, and one 16-bit rounding for float16 and
 * bfloat16 (cuDNN rounds its sum and the bias is added after: two).
 * A float32 3x3 convolution at stride 1 runs cuDNN's Winograd
 * (kernels/conv_cudnn_case.h), whose transforms round in proportion to the
 * terms' magnitudes rather than the result's: the H200 showed differences
 * of 1e-5 to 8e-5 on results of 1 to 2 (bench/NOTES.md round 29). Its
 * bound is 1e-5 of the larger of the result and the number of terms in
 * the longest sum (the weight's gradient): products of two standard normal
 * values average 0.64 in magnitude, so the count stands for the terms'
 * magnitudes' sum. TF32 rounds each term by up to 2^-11, far more. */
#define F64_BIAS_SUM_REL 1e-12

Test(gpu, conv2d_forward_and_backward_match_cpu) {
  require_gpu();
  for (int d = 0; d < COUNT(float_dtypes); d++) {
    mx_dtype dtype = float_dtypes[d];
    double rel = dtype == MX_F64 ? 0 : dtype == MX_F32 ? 1e-5 : dtype == MX_F16 ? 0x1p-9 : 0x1p-6;
    for (int config = 0; config < 3; config++) {
      mx_scope *scope = mx_scope_begin();
      layer_results r = run_layer(conv_config, config, MX_SHAPE(3, 4, 9, 8), MX_SHAPE(6, config == 2 ? 2 : 4, 3, 3),
                                  config != 1, dtype, 800 + (uint64_t)(10 * d + config));
      char what[64];
      snprintf(what, sizeof what, "conv2d config %d, %s", config, mx_dtype_name(dtype));
      double winograd_terms = 3 * 9 * 8; /* the weight's gradient sums over N x H x W */
      expect_layer_results(&r, rel, dtype == MX_F32 && config == 0 ? winograd_terms : rel ? 1.0 : 0,
                           rel ? rel : 1e-12, what);
      mx_scope_end(scope);
    }
  }
}

static mx_tensor *conv_other_config(const mx_tensor *x, const mx_tensor *w, const mx_tensor *b, int config) {
  switch (config) {
  case 0: return mx_conv1d(x, w, b, MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT, 1);  /* cuDNN: 2-d of height 1 */
  case 1: return mx_conv3d(x, w, b, MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 2);   /* 5-d operands, two groups */
  default: return mx_conv_transpose2d(x, w, b, MX_SHAPE(2), MX_SHAPE(1), MX_SHAPE(1), MX_DEFAULT, 1);
  }
}

/* 1-d, 3-d and transposed convolutions, bounded as the 2-d ones above. */
Test(gpu, conv1d_conv3d_and_transposed_match_cpu) {
  require_gpu();
  mx_shape xs[3] = {MX_SHAPE(3, 4, 11), MX_SHAPE(2, 4, 5, 6, 5), MX_SHAPE(2, 4, 5, 6)};
  mx_shape ws[3] = {MX_SHAPE(6, 4, 3), MX_SHAPE(6, 2, 3, 3, 3), MX_SHAPE(4, 4, 3, 3)};
  for (int d = 0; d < COUNT(float_dtypes); d++) {
    mx_dtype dtype = float_dtypes[d];
    double rel = dtype == MX_F64 ? 0 : dtype == MX_F32 ? 1e-5 : dtype == MX_F16 ? 0x1p-9 : 0x1p-6;
    for (int config = 0; config < 3; config++) {
      mx_scope *scope = mx_scope_begin();
      layer_results r = run_layer(conv_other_config, config, xs[config], ws[config], true, dtype,
                                  900 + (uint64_t)(10 * d + config));
      char what[64];
      snprintf(what, sizeof what, "conv config %d, %s", config, mx_dtype_name(dtype));
      expect_layer_results(&r, rel, rel ? 1.0 : 0, rel ? rel : 1e-12, what);
      mx_scope_end(scope);
    }
  }
}

static mx_tensor *pool_config(const mx_tensor *x, const mx_tensor *w, const mx_tensor *b, int config) {
  (void)w, (void)b;
  switch (config) {
  case 0: return mx_max_pool(x, 2, MX_SHAPE(2), MX_DEFAULT, MX_SHAPE(0));         /* the CNNs' 2x2 */
  case 1: return mx_max_pool(x, 2, MX_SHAPE(3), MX_SHAPE(2), MX_SHAPE(1));        /* overlapping, padded */
  case 2: return mx_avg_pool(x, 2, MX_SHAPE(3), MX_SHAPE(2), MX_SHAPE(1), false); /* padding not counted */
  default: return mx_avg_pool(x, 2, MX_SHAPE(2, 3), MX_SHAPE(1), MX_SHAPE(1), true);
  }
}

/* Max and average pooling forward and backward, every float dtype: the
 * CUDA kernels follow the CPU's rules (NaN-free random values here; the
 * planes' gradients added in the CPU's order), so the same bits. */
Test(gpu, pooling_forward_and_backward_match_cpu) {
  require_gpu();
  for (int d = 0; d < COUNT(float_dtypes); d++)
    for (int config = 0; config < 4; config++) {
      mx_scope *scope = mx_scope_begin();
      layer_results r = run_layer(pool_config, config, MX_SHAPE(2, 3, 10, 9), MX_DEFAULT, false, float_dtypes[d],
                                  900 + (uint64_t)(10 * d + config));
      char what[64];
      snprintf(what, sizeof what, "pooling config %d, %s", config, mx_dtype_name(float_dtypes[d]));
      expect_layer_results(&r, 0, 0, 0, what);
      mx_scope_end(scope);
    }
}

/* The running mean and variance of the last bn_config call on each device
 * (0: the CPU, 1: CUDA). */
static mx_tensor *bn_running[2][2];

/* Fresh running statistics for x's device, 0.5 and 2 (what eval
 * normalises with), in bn_running. */
static mx_tensor **fresh_running(const mx_tensor *x) {
  mx_device device = mx_device_of(x);
  int64_t channels = mx_shape_get(x).d[1];
  mx_dtype stats = mx_dtype_of(x) == MX_F64 ? MX_F64 : MX_F32;
  mx_tensor **running = bn_running[device == MX_CUDA];
  running[0] = mx_full(MX_SHAPE(channels), 0.5, stats, device);
  running[1] = mx_full(MX_SHAPE(channels), 2.0, stats, device);
  return running;
}

/* Batch norm with weight w and bias b, training but in config 2. */
static mx_tensor *bn_config(const mx_tensor *x, const mx_tensor *w, const mx_tensor *b, int config) {
  mx_tensor **running = fresh_running(x);
  return mx_batch_norm(x, running[0], running[1], w, b, config != 2, 0.1, 1e-5);
}

/* Batch norm forward and backward in every float dtype: training on a 4-d
 * input, on a 2-d one (planes of one value), and on channels of 8184
 * values (CUDA's sums cut them into several runs); and eval on a 3-d
 * input. Training's running statistics are compared too. The devices add
 * the per-channel sums in different orders (the backward's: the CPU in
 * float lanes, CUDA in double; the statistics' in double on both), so
 * float32 agrees within 1e-5 and float64 within 1e-12.
 * float16 and bfloat16 results may round the other way where the
 * statistics differ in their last bits, and the input's gradient adds two
 * such rounded terms: within 2^-7 and 2^-4 of the larger magnitude (8
 * units in the last place or more). The statistics themselves are float32
 * for every 16-bit input. */
Test(gpu, batch_norm_forward_and_backward_match_cpu) {
  require_gpu();
  mx_shape xs[4] = {MX_SHAPE(4, 3, 5, 6), MX_SHAPE(16, 5), MX_SHAPE(3, 4, 7), MX_SHAPE(8, 2, 33, 31)};
  for (int d = 0; d < COUNT(float_dtypes); d++) {
    mx_dtype dtype = float_dtypes[d];
    double rel = dtype == MX_F64 ? 1e-12 : dtype == MX_F32 ? 1e-5 : dtype == MX_F16 ? 0x1p-7 : 0x1p-4;
    double stats_rel = dtype == MX_F64 ? 1e-12 : 1e-5;
    for (int config = 0; config < COUNT(xs); config++) {
      mx_scope *scope = mx_scope_begin();
      layer_results r = run_layer(bn_config, config, xs[config], MX_SHAPE(xs[config].d[1]), true, dtype,
                                  1000 + (uint64_t)(10 * d + config));
      char what[64], why[256];
      snprintf(what, sizeof what, "batch norm config %d, %s", config, mx_dtype_name(dtype));
      expect_layer_results(&r, rel, 1.0, rel, what);
      for (int k = 0; config != 2 && k < 2; k++) {
        size_t n = differences(bn_running[0][k], bn_running[1][k], stats_rel, 1.0, why, sizeof why);
        cr_expect_eq(n, 0, "%s, running %s: %s", what, k ? "var" : "mean", why);
      }
      mx_scope_end(scope);
    }
  }
}

/* bn_config's batch norm with relu: fused (config + 0..3) or batch_norm then relu (config + 4). */
static mx_tensor *bn_relu_config(const mx_tensor *x, const mx_tensor *w, const mx_tensor *b, int config) {
  mx_tensor **running = fresh_running(x);
  bool training = config % 4 != 2;
  if (config >= 4) return mx_relu(mx_batch_norm(x, running[0], running[1], w, b, training, 0.1, 1e-5));
  return mx_batch_norm_relu(x, running[0], running[1], w, b, training, 0.1, 1e-5);
}

/* batch_norm_relu on CUDA, in the shapes and modes of the batch norm test
 * above: bit for bit what batch_norm then relu give on CUDA (the same
 * kernels with relu and its backward's mask fused in), output and
 * gradients; and within that test's bounds of the CPU's batch_norm_relu
 * (an output within rounding of 0 could differ in sign between the
 * devices, and with it the mask: not in these seeded inputs). */
Test(gpu, batch_norm_relu_is_batch_norm_then_relu) {
  require_gpu();
  mx_shape xs[4] = {MX_SHAPE(4, 3, 5, 6), MX_SHAPE(16, 5), MX_SHAPE(3, 4, 7), MX_SHAPE(8, 2, 33, 31)};
  const char *names[4] = {"output", "dx", "dw", "db"};
  for (int d = 0; d < COUNT(float_dtypes); d++) {
    mx_dtype dtype = float_dtypes[d];
    double rel = dtype == MX_F64 ? 1e-12 : dtype == MX_F32 ? 1e-5 : dtype == MX_F16 ? 0x1p-7 : 0x1p-4;
    for (int config = 0; config < COUNT(xs); config++) {
      mx_scope *scope = mx_scope_begin();
      uint64_t seed = 1100 + (uint64_t)(10 * d + config);
      mx_shape ws = MX_SHAPE(xs[config].d[1]);
      layer_results fused = run_layer(bn_relu_config, config, xs[config], ws, true, dtype, seed);
      layer_results unfused = run_layer(bn_relu_config, config + 4, xs[config], ws, true, dtype, seed);
      char what[64], why[256];
      snprintf(what, sizeof what, "batch norm relu config %d, %s", config, mx_dtype_name(dtype));
      mx_tensor *const *got[4] = {fused.y, fused.dx, fused.dw, fused.db};
      mx_tensor *const *want[4] = {unfused.y, unfused.dx, unfused.dw, unfused.db};
      for (int i = 0; i < 4; i++) {
        size_t n = differences(mx_to_device(got[i][1], MX_CPU), want[i][1], 0, 0, why, sizeof why);
        cr_expect_eq(n, 0, "%s, %s on CUDA, fused (\"CPU\") against unfused: %s", what, names[i], why);
      }
      expect_layer_results(&fused, rel, 1.0, rel, what);
      mx_scope_end(scope);
    }
  }
}

/* One training step of a small MLP through the ops on both devices:
 * log_softmax(relu(x w1 + b1) w2 + b2), the mean of the one-hot picked
 * log-probabilities as the loss, and backward. The loss and every gradient
 * agree within float32's rounding of the different summation orders: 1e-5
 * of the larger of the value and 0.01, the size of a gradient's terms (the
 * H100 run saw 1.5e-8 differences on gradients of 7.6e-4). */
Test(gpu, mlp_step_through_the_ops_matches_cpu) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  mx_generator *g = mx_generator_new(7);
  mx_tensor *cpu[6] = {mx_randn(MX_SHAPE(32, 20), MX_F32, MX_CPU, g),  mx_randn(MX_SHAPE(20, 16), MX_F32, MX_CPU, g),
                       mx_randn(MX_SHAPE(16), MX_F32, MX_CPU, g),      mx_randn(MX_SHAPE(16, 5), MX_F32, MX_CPU, g),
                       mx_randn(MX_SHAPE(5), MX_F32, MX_CPU, g),       mx_rand(MX_SHAPE(32, 5), MX_F32, MX_CPU, g)};
  mx_generator_free(g);
  cpu[5] = mx_to_dtype(mx_eq(cpu[5], mx_amax(cpu[5], MX_DIMS(1), true)), MX_F32); /* a one-hot target per row */
  mx_tensor *gpu[6];
  for (int i = 0; i < 6; i++) gpu[i] = to_cuda(cpu[i]);
  mx_tensor *loss[2], *grads[2][4];
  for (int dev = 0; dev < 2; dev++) {
    mx_tensor **t = dev ? gpu : cpu;
    for (int i = 1; i < 5; i++) cr_assert_eq(mx_set_requires_grad(t[i], true), MX_OK);
    mx_tensor *h = mx_relu(mx_add(mx_mm(t[0], t[1]), t[2]));
    mx_tensor *logp = mx_log_softmax(mx_add(mx_mm(h, t[3]), t[4]), 1);
    loss[dev] = mx_neg(mx_mean(mx_sum(mx_mul(logp, t[5]), MX_DIMS(1), false), MX_ALL_DIMS, false));
    cr_assert_not_null(loss[dev], "%s: %s", dev ? "cuda" : "cpu", mx_last_error());
    cr_assert_eq(mx_backward(loss[dev], NULL, false), MX_OK, "%s: %s", dev ? "cuda" : "cpu", mx_last_error());
    for (int i = 0; i < 4; i++) grads[dev][i] = mx_grad_of(t[i + 1]);
  }
  char why[256];
  size_t n = differences(loss[0], loss[1], 1e-6, 1.0, why, sizeof why);
  cr_expect_eq(n, 0, "the loss: %s", why);
  for (int i = 0; i < 4; i++) {
    n = differences(grads[0][i], grads[1][i], 1e-5, 1e-2, why, sizeof why);
    cr_expect_eq(n, 0, "the gradient of parameter %d: %zu elements differ; the first, %s", i, n, why);
  }
  mx_scope_end(scope);
}

/* mx_module_to(cuda): the same handles, now on CUDA with the same values,
 * gradients dropped; the forward there matches the CPU's; and back. */
Test(gpu, module_to_cuda_and_back) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(5);
  mx_module *m = mx_sequential_new(2, (mx_module *[]){mx_linear_new(6, 4, true, gen), mx_relu_new()});
  mx_tensor *x = mx_randn(MX_SHAPE(3, 6), MX_F32, MX_CPU, gen);
  mx_generator_free(gen);
  cr_assert(m && x, "%s", mx_last_error());
  mx_tensor *w = mx_module_parameter(m, 0, NULL), *w_before = mx_clone(w);
  mx_tensor *y_cpu = mx_module_forward(m, x);
  cr_assert_eq(mx_backward(mx_sum(y_cpu, MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
  cr_assert_not_null(mx_grad_of(w));
  cr_assert_eq(mx_module_to(m, MX_CUDA), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_module_parameter(m, 0, NULL), w, "the module keeps its handles");
  cr_assert_eq(mx_device_of(w), MX_CUDA);
  cr_assert(mx_requires_grad(w));
  cr_assert_null(mx_grad_of(w), "the CPU gradient is dropped");
  assert_identical(w_before, w, "the weight on CUDA");
  mx_tensor *y_gpu = mx_module_forward(m, to_cuda(x));
  cr_assert_not_null(y_gpu, "%s", mx_last_error());
  char why[256]; /* within float32 rounding of sums of six terms of about 1 */
  cr_assert_eq(differences(y_cpu, y_gpu, 1e-6, 1.0, why, sizeof why), 0, "the forward on CUDA: %s", why);
  cr_assert_eq(mx_module_to(m, MX_CPU), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_device_of(w), MX_CPU);
  assert_identical(w_before, to_cuda(w), "the weight back on the CPU");
  mx_module_free(m);
  mx_scope_end(scope);
}

/* The layers of a channels-last CNN step, on a batch made channels-last
 * first: conv2d (cuDNN with NHWC descriptors and a KRSC filter copy),
 * conv2d + ReLU, max pooling and batch norm. */
static mx_tensor *channels_last_config(const mx_tensor *x, const mx_tensor *w, const mx_tensor *b, int config) {
  mx_tensor *xl = mx_to_channels_last(x);
  switch (config) {
  case 0: return mx_conv2d(xl, w, b, MX_SHAPE(1), MX_SHAPE(1), MX_DEFAULT, 1);
  case 1: return mx_conv2d_relu(xl, w, b, MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT, 1);
  case 2: return mx_max_pool(xl, 2, MX_SHAPE(2), MX_DEFAULT, MX_SHAPE(0));
  default: return bn_config(xl, w, b, 0);
  }
}

/* Each layer's output stays channels-last on CUDA as on the CPU, and its
 * values and gradients agree with the CPU's within the bounds of the
 * row-major tests above (convolutions and batch norm: their sums' order;
 * pooling: the same bits). The input's gradient comes back channels-last. */
Test(gpu, channels_last_layers_match_cpu) {
  require_gpu();
  mx_dtype dtypes[3] = {MX_F32, MX_F16, MX_BF16};
  for (int d = 0; d < 3; d++) {
    mx_dtype dtype = dtypes[d];
    for (int config = 0; config < 4; config++) {
      double rel = config == 2 ? 0 : dtype == MX_F32 ? 1e-5 : config == 3 ? (dtype == MX_F16 ? 0x1p-7 : 0x1p-4)
                                                                           : dtype == MX_F16 ? 0x1p-9 : 0x1p-6;
      mx_scope *scope = mx_scope_begin();
      mx_shape ws = config == 3 ? MX_SHAPE(16) : config == 2 ? MX_DEFAULT : MX_SHAPE(24, 16, 3, 3);
      layer_results r = run_layer(channels_last_config, config, MX_SHAPE(4, 16, 10, 9), ws, config != 2, dtype,
                                  1300 + (uint64_t)(10 * d + config));
      char what[64];
      snprintf(what, sizeof what, "channels-last config %d, %s", config, mx_dtype_name(dtype));
      for (int dev = 0; dev < 2; dev++) {
        cr_expect(mx_is_channels_last(r.y[dev]), "%s: the %s output is channels-last", what, dev ? "cuda" : "cpu");
        cr_expect(mx_is_channels_last(r.dx[dev]), "%s: the %s input gradient is channels-last", what,
                  dev ? "cuda" : "cpu");
      }
      double winograd_terms = 4 * 10 * 9; /* the float32 3x3 convolution's, as conv2d's above */
      expect_layer_results(&r, rel, dtype == MX_F32 && config == 0 ? winograd_terms : rel ? 1.0 : 0, rel ? rel : 0,
                           what);
      mx_scope_end(scope);
    }
  }
}
