/* Batch norm's fused kernels: batch_norm_relu gives the bits of batch_norm
 * then relu (output, gradients, running statistics) in every float dtype,
 * training and eval, through the kernels and through the ops, and keeps
 * no tensor of relu's own; under autocast both read 16-bit activations as
 * they are, with no float32 copy of them, forward or backward; training's
 * statistics, from one read of x, keep float32's precision under large
 * means. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

enum { CHANNELS = 5 };

static const mx_dtype float_dtypes[4] = {MX_F32, MX_F64, MX_BF16, MX_F16};

/* The (C) vectors' dtype for data of dtype: float32 weights under 16-bit
 * activations, as autocast leaves them. */
static mx_dtype vector_dtype(mx_dtype dtype) { return dtype == MX_F64 ? MX_F64 : MX_F32; }

/* A weight this small puts the channel's outputs where dtype rounds them
 * to +-0 or to its subnormals: relu must see the rounded value. */
static double tiny_weight(mx_dtype dtype) {
  switch (dtype) {
  case MX_F64: return 1e-300;
  case MX_F16: return 1e-9;
  default: return 1e-41; /* a float32 subnormal: float32 and bfloat16 subnormal outputs */
  }
}

/* x: normal values, channel 2's around 0.5 (a positive mean: its zero
 * weight then gives -0 for its negative values), with NaN and infinities in
 * the last channel of the first two batch items (that channel's statistics
 * are NaN in training). */
static mx_tensor *make_x(mx_shape shape, mx_dtype dtype, uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_shape per_channel = {shape.ndim, {1, CHANNELS, 1, 1, 1, 1, 1, 1}};
  mx_tensor *offset = mx_reshape(mx_from_data((double[]){0, 0, 0.5, 0, 0}, MX_SHAPE(CHANNELS), MX_F64, MX_CPU),
                                 per_channel);
  mx_tensor *x = mx_add(mx_randn(shape, MX_F64, MX_CPU, gen), offset);
  mx_generator_free(gen);
  cr_assert_not_null(x, "%s", mx_last_error());
  mx_shape at = {shape.ndim, {0}};
  at.d[1] = CHANNELS - 1;
  cr_assert_eq(mx_set(x, at, NAN), MX_OK);
  at.d[0] = 1;
  cr_assert_eq(mx_set(x, at, INFINITY), MX_OK);
  at.d[shape.ndim - 1] = 1;
  cr_assert_eq(mx_set(x, at, -INFINITY), MX_OK);
  return mx_to_dtype(x, dtype);
}

/* weight and bias per channel: ordinary; negative (mostly masked); zero
 * weight and -0 bias (outputs of +-0); tiny; ordinary. */
static mx_tensor *make_vector(bool weight, mx_dtype dtype) {
  double w[CHANNELS] = {1.5, -0.75, 0.0, tiny_weight(dtype), 1.0}, b[CHANNELS] = {0.25, -0.5, -0.0, 0.0, 0.1};
  return mx_to_dtype(mx_from_data(weight ? w : b, MX_SHAPE(CHANNELS), MX_F64, MX_CPU), vector_dtype(dtype));
}

typedef struct {
  mx_tensor *y, *grads[3], *running[2];
} bn_run;

/* relu(batch_norm(x)) or batch_norm_relu(x) and the gradients of x, weight
 * and bias for grad_y, all on copies of the inputs. */
static bn_run run(bool fused, const mx_tensor *x0, const mx_tensor *w0, const mx_tensor *b0, const mx_tensor *grad_y,
                  bool training, bool create_graph) {
  bn_run r;
  mx_tensor *inputs[3] = {mx_clone(x0), mx_clone(w0), mx_clone(b0)};
  for (int i = 0; i < 3; i++) cr_assert_eq(mx_set_requires_grad(inputs[i], true), MX_OK, "%s", mx_last_error());
  mx_dtype stats = vector_dtype(mx_dtype_of(x0));
  r.running[0] = mx_from_data((double[]){0.5, -0.25, 1.0, 0.0, 2.0}, MX_SHAPE(CHANNELS), MX_F64, MX_CPU);
  r.running[1] = mx_from_data((double[]){0.5, 2.0, 1.5, 1.0, 0.25}, MX_SHAPE(CHANNELS), MX_F64, MX_CPU);
  r.running[0] = mx_to_dtype(r.running[0], stats), r.running[1] = mx_to_dtype(r.running[1], stats);
  if (fused)
    r.y = mx_batch_norm_relu(inputs[0], r.running[0], r.running[1], inputs[1], inputs[2], training, 0.1, 1e-5);
  else
    r.y = mx_relu(mx_batch_norm(inputs[0], r.running[0], r.running[1], inputs[1], inputs[2], training, 0.1, 1e-5));
  cr_assert_not_null(r.y, "fused %d: %s", fused, mx_last_error());
  cr_assert_eq(mx_grad(1, &r.y, 3, inputs, (mx_tensor *const *)&grad_y, false, create_graph, false, r.grads), MX_OK,
               "fused %d: %s", fused, mx_last_error());
  return r;
}

/* a and b hold the same bits, element for element (what names them); a NaN
 * matches any NaN: which of two NaNs an addition keeps is the compiler's
 * choice of operand order, no part of the arithmetic. */
static void expect_same_bits(const mx_tensor *a, const mx_tensor *b, const char *what) {
  cr_assert(a && b, "%s: missing", what);
  cr_assert_eq(mx_dtype_of(a), mx_dtype_of(b), "%s: dtypes %s and %s", what, mx_dtype_name(mx_dtype_of(a)),
               mx_dtype_name(mx_dtype_of(b)));
  int64_t n = mx_numel(a);
  cr_assert_eq(n, mx_numel(b), "%s: %lld and %lld elements", what, (long long)n, (long long)mx_numel(b));
  size_t size = mx_dtype_size(mx_dtype_of(a)), bytes = (size_t)n * size;
  unsigned char *pa = malloc(bytes + 1), *pb = malloc(bytes + 1);
  double *va = malloc(sizeof(double) * (size_t)(n + 1)), *vb = malloc(sizeof(double) * (size_t)(n + 1));
  cr_assert(pa && pb && va && vb);
  cr_assert_eq(mx_to_host(a, pa, bytes), MX_OK);
  cr_assert_eq(mx_to_host(b, pb, bytes), MX_OK);
  cr_assert_eq(mx_to_host(mx_to_dtype(a, MX_F64), va, sizeof(double) * (size_t)n), MX_OK);
  cr_assert_eq(mx_to_host(mx_to_dtype(b, MX_F64), vb, sizeof(double) * (size_t)n), MX_OK);
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < n; i++)
    if (memcmp(pa + (size_t)i * size, pb + (size_t)i * size, size) && !(isnan(va[i]) && isnan(vb[i])) &&
        differ++ == 0)
      first = i;
  cr_expect_eq(differ, 0, "%s: %lld of %lld elements differ; the first, %lld: %a against %a", what, (long long)differ,
               (long long)n, (long long)first, first >= 0 ? va[first] : 0.0, first >= 0 ? vb[first] : 0.0);
  free(pa), free(pb), free(va), free(vb);
}

/* How many elements of t are -0. */
static int64_t negative_zeros(const mx_tensor *t) {
  int64_t n = mx_numel(t), count = 0;
  double *v = malloc(sizeof(double) * (size_t)(n + 1));
  cr_assert(v && mx_to_host(mx_to_dtype(t, MX_F64), v, sizeof(double) * (size_t)n) == MX_OK);
  for (int64_t i = 0; i < n; i++) count += v[i] == 0 && signbit(v[i]);
  free(v);
  return count;
}

/* Every float dtype, training and eval, on planes of 7 values (tails) and
 * of 1023 (several of the CPU's blocks of 512), the gradients through the
 * kernels and through the ops (create_graph): batch_norm_relu's output,
 * gradients and running statistics are batch_norm then relu's, bit for bit
 * (-0 kept, NaN passing its gradient). */
Test(batch_norm_fused, batch_norm_relu_is_batch_norm_then_relu_bit_for_bit) {
  const mx_shape shapes[2] = {MX_SHAPE(4, CHANNELS, 7), MX_SHAPE(2, CHANNELS, 33, 31)};
  const char *names[3] = {"x", "weight", "bias"};
  for (int d = 0; d < 4; d++)
    for (int s = 0; s < 2; s++)
      for (int mode = 0; mode < 4; mode++) {
        bool training = mode & 1, create_graph = mode & 2;
        mx_dtype dtype = float_dtypes[d];
        mx_scope *scope = mx_scope_begin();
        mx_tensor *x = make_x(shapes[s], dtype, 40 + (uint64_t)s);
        mx_tensor *weight = make_vector(true, dtype), *bias = make_vector(false, dtype);
        mx_generator *gen = mx_generator_new(50 + (uint64_t)s);
        /* the gradient: normal values, a quarter of them zero */
        mx_tensor *grad_y = mx_randn(shapes[s], MX_F64, MX_CPU, gen);
        mx_tensor *kept = mx_gt(mx_rand(shapes[s], MX_F64, MX_CPU, gen), mx_scalar(0.25, MX_F64, MX_CPU));
        grad_y = mx_to_dtype(mx_mul(grad_y, kept), dtype);
        mx_generator_free(gen);
        cr_assert_not_null(grad_y, "%s", mx_last_error());
        bn_run want = run(false, x, weight, bias, grad_y, training, create_graph);
        bn_run got = run(true, x, weight, bias, grad_y, training, create_graph);
        char what[128];
        snprintf(what, sizeof what, "%s, shape %d, %s%s: y", mx_dtype_name(dtype), s, training ? "training" : "eval",
                 create_graph ? ", create_graph" : "");
        cr_expect_eq(mx_dtype_of(got.y), dtype, "%s: dtype %s", what, mx_dtype_name(mx_dtype_of(got.y)));
        expect_same_bits(got.y, want.y, what);
        cr_expect_gt(negative_zeros(got.y), 0, "%s: no -0 kept by relu: the case does not test it", what);
        for (int i = 0; i < 3; i++) {
          snprintf(what, sizeof what, "%s, shape %d, %s%s: the gradient of %s", mx_dtype_name(dtype), s,
                   training ? "training" : "eval", create_graph ? ", create_graph" : "", names[i]);
          expect_same_bits(got.grads[i], want.grads[i], what);
        }
        for (int k = 0; k < 2; k++) {
          snprintf(what, sizeof what, "%s, shape %d, %s: the running %s", mx_dtype_name(dtype), s,
                   training ? "training" : "eval", k ? "var" : "mean");
          expect_same_bits(got.running[k], want.running[k], what);
        }
        mx_scope_end(scope);
      }
}

/* The storage a forward leaves alive (the graph's and y) and the storages
 * a backward allocates, for a float32 (8, 4, 16, 16) input: the fused op
 * keeps one x-sized tensor less after the forward (batch norm's own
 * output, which relu would read) and its backward makes fewer (no relu's
 * gradient: its kernels read the mask instead). */
Test(batch_norm_fused, batch_norm_relu_keeps_and_makes_one_tensor_less) {
  const mx_shape shape = MX_SHAPE(8, 4, 16, 16);
  int64_t held[2], made[2], bytes = 8 * 4 * 16 * 16 * (int64_t)sizeof(float);
  for (int fused = 0; fused < 2; fused++) {
    mx_scope *scope = mx_scope_begin();
    mx_generator *gen = mx_generator_new(60);
    mx_tensor *inputs[3] = {mx_randn(shape, MX_F32, MX_CPU, gen), mx_randn(MX_SHAPE(4), MX_F32, MX_CPU, gen),
                            mx_randn(MX_SHAPE(4), MX_F32, MX_CPU, gen)};
    mx_tensor *grad_y = mx_randn(shape, MX_F32, MX_CPU, gen);
    mx_generator_free(gen);
    for (int i = 0; i < 3; i++) cr_assert_eq(mx_set_requires_grad(inputs[i], true), MX_OK, "%s", mx_last_error());
    int64_t before = mx_memory_stats_get(MX_CPU).bytes_in_use;
    mx_tensor *y = fused ? mx_batch_norm_relu(inputs[0], NULL, NULL, inputs[1], inputs[2], true, 0.1, 1e-5)
                         : mx_relu(mx_batch_norm(inputs[0], NULL, NULL, inputs[1], inputs[2], true, 0.1, 1e-5));
    cr_assert_not_null(y, "%s", mx_last_error());
    held[fused] = mx_memory_stats_get(MX_CPU).bytes_in_use - before;
    int64_t base = mx_memory_stats_get(MX_CPU).allocations;
    mx_tensor *grads[3] = {0};
    cr_assert_eq(mx_grad(1, &y, 3, inputs, &grad_y, false, false, false, grads), MX_OK, "%s", mx_last_error());
    made[fused] = mx_memory_stats_get(MX_CPU).allocations - base;
    mx_scope_end(scope);
  }
  cr_expect_eq(held[0] - held[1], bytes, "after the forward: %lld bytes unfused, %lld fused (x is %lld)",
               (long long)held[0], (long long)held[1], (long long)bytes);
  cr_expect_gt(made[0], made[1], "the backward allocates %lld storages unfused, %lld fused", (long long)made[0],
               (long long)made[1]);
}

/* Under autocast batch norm runs as PyTorch's CUDA autocast leaves it (in
 * no list: no cast) on the 16-bit activations a lowered convolution gives:
 * the kernels read them as they are, keep the statistics in float32 and
 * write y in x's dtype, so no float32 tensor of x's size is ever made. The
 * peak of the CPU's storage in use over each step says so: the forward
 * holds y (2 bytes a value) and per-channel vectors; the backward's sums
 * (weight and bias only) per-channel vectors; eval's gradient of x one
 * 16-bit tensor; training's three (each node's gradient of x and their
 * sum). A float32 copy of x (4 bytes a value) would show beside them. */
Test(batch_norm_fused, no_float32_copy_of_16_bit_activations_under_autocast) {
  const mx_dtype dtypes[2] = {MX_BF16, MX_F16};
  const int64_t n = 4 * 8 * 16 * 16, slack = 4096; /* per-channel vectors */
  for (int d = 0; d < 2; d++)
    for (int fused = 0; fused < 2; fused++)
      for (int mode = 0; mode < 3; mode++) { /* training for weight and bias; eval for x; training for x */
        bool training = mode != 1, want_x = mode != 0;
        mx_scope *scope = mx_scope_begin();
        mx_generator *gen = mx_generator_new(70 + (uint64_t)mode);
        mx_tensor *x = mx_to_dtype(mx_randn(MX_SHAPE(4, 8, 16, 16), MX_F32, MX_CPU, gen), dtypes[d]);
        mx_tensor *grad_y = mx_to_dtype(mx_randn(MX_SHAPE(4, 8, 16, 16), MX_F32, MX_CPU, gen), dtypes[d]);
        mx_tensor *inputs[3] = {x, mx_randn(MX_SHAPE(8), MX_F32, MX_CPU, gen),
                                mx_randn(MX_SHAPE(8), MX_F32, MX_CPU, gen)};
        mx_generator_free(gen);
        mx_tensor *mean = mx_zeros(MX_SHAPE(8), MX_F32, MX_CPU), *var = mx_ones(MX_SHAPE(8), MX_F32, MX_CPU);
        for (int i = want_x ? 0 : 1; i < 3; i++) cr_assert_eq(mx_set_requires_grad(inputs[i], true), MX_OK);
        mx_tensor *y = NULL, *grads[3] = {0};
        mx_memory_reset_peak(MX_CPU);
        int64_t base = mx_memory_stats_get(MX_CPU).bytes_in_use;
        MX_AUTOCAST(MX_CPU, dtypes[d], true, true) {
          y = fused ? mx_batch_norm_relu(x, mean, var, inputs[1], inputs[2], training, 0.1, 1e-5)
                    : mx_batch_norm(x, mean, var, inputs[1], inputs[2], training, 0.1, 1e-5);
        }
        int64_t forward = mx_memory_stats_get(MX_CPU).peak_bytes - base;
        cr_assert_not_null(y, "%s", mx_last_error());
        char what[96];
        snprintf(what, sizeof what, "%s, %s, %s", mx_dtype_name(dtypes[d]), fused ? "batch_norm_relu" : "batch_norm",
                 mode == 0 ? "training (weight and bias)" : mode == 1 ? "eval (x)" : "training (x)");
        cr_expect_eq(mx_dtype_of(y), dtypes[d], "%s: y is %s", what, mx_dtype_name(mx_dtype_of(y)));
        cr_expect_leq(forward, 2 * n + slack, "%s: the forward's peak grew by %lld bytes (y is %lld)", what,
                      (long long)forward, (long long)(2 * n));
        mx_memory_reset_peak(MX_CPU);
        base = mx_memory_stats_get(MX_CPU).bytes_in_use;
        cr_assert_eq(mx_grad(1, &y, want_x ? 1 : 2, want_x ? inputs : inputs + 1, &grad_y, false, false, false, grads),
                     MX_OK, "%s: %s", what, mx_last_error());
        int64_t backward = mx_memory_stats_get(MX_CPU).peak_bytes - base, tensors = mode == 0 ? 0 : mode == 1 ? 1 : 3;
        cr_expect_leq(backward, tensors * 2 * n + slack, "%s: the backward's peak grew by %lld bytes (x is %lld)",
                      what, (long long)backward, (long long)(2 * n));
        if (want_x) cr_expect_eq(mx_dtype_of(grads[0]), dtypes[d], "%s: x's gradient is %s", what,
                                 mx_dtype_name(mx_dtype_of(grads[0])));
        mx_scope_end(scope);
      }
}

/* Training's statistics come from one read of x (the backend's
 * channel_moments: sums in double of x - k and its square, k one of the
 * channel's values), and lose nothing to a large mean: for means of 0,
 * 1e4 and 1e6 times the spread, float32 batch norm's batch mean and
 * variance (the running ones, momentum 1) stay within a few float32 ulps
 * of float64's on the same values. Unshifted sums of x and x^2 would
 * cancel the variance's digits at 1e6, and two float32 passes lose them
 * to the mean's rounding there. */
Test(batch_norm_fused, one_pass_statistics_keep_float32_precision_under_large_means) {
  const double means[3] = {0, 1e4, 1e6};
  for (int k = 0; k < 3; k++) {
    mx_scope *scope = mx_scope_begin();
    mx_generator *gen = mx_generator_new(80 + (uint64_t)k);
    mx_tensor *x = mx_add_scalar(mx_randn(MX_SHAPE(8, 3, 16, 16), MX_F64, MX_CPU, gen), means[k]);
    mx_tensor *x32 = mx_to_dtype(x, MX_F32);
    mx_generator_free(gen);
    mx_tensor *running[2][2];
    for (int wide = 0; wide < 2; wide++) {
      mx_dtype dtype = wide ? MX_F64 : MX_F32;
      running[wide][0] = mx_zeros(MX_SHAPE(3), dtype, MX_CPU), running[wide][1] = mx_ones(MX_SHAPE(3), dtype, MX_CPU);
      cr_assert_not_null(mx_batch_norm(mx_to_dtype(x32, dtype), running[wide][0], running[wide][1], NULL, NULL, true,
                                       1.0, 1e-5),
                         "%s", mx_last_error());
    }
    for (int s = 0; s < 2; s++)
      for (int c = 0; c < 3; c++) {
        double got = mx_at(running[0][s], MX_SHAPE(c)), want = mx_at(running[1][s], MX_SHAPE(c));
        cr_expect_leq(fabs(got - want), 4 * 0x1p-23 * fabs(want), "mean %g, channel %d: float32 %s %.9g, float64 %.17g",
                      means[k], c, s ? "variance" : "mean", got, want);
      }
    mx_scope_end(scope);
  }
}
