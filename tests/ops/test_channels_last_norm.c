/* Batch norm on channels-last inputs: batch_norm and batch_norm_relu,
 * training and eval, give channels-last outputs and input gradients in
 * every float dtype, on odd sizes (19, 70 and 520 channels, odd planes,
 * more than one chunk of rows), whose values are the row-major path's: the same
 * bits where the arithmetic is the same (eval mode's output and input
 * gradient), within the dtype's rounding where the per-channel sums add in
 * another order (the statistics, training's output, the weight's and bias's
 * gradients); the sums do not depend on the number of threads; gradcheck
 * in float64 through the channels-last kernels. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <mixgrad.h>

#include "tests/ops/channels_last_case.h"

static const mx_dtype float_dtypes[4] = {MX_F32, MX_BF16, MX_F16, MX_F64};

/* The (C) vectors' dtype for data of dtype: float32 under 16-bit activations. */
static mx_dtype vector_dtype(mx_dtype dtype) { return dtype == MX_F64 ? MX_F64 : MX_F32; }

/* Two units in the last place of dtype: values computed from statistics
 * that differ in their last bits round to neighbours at most. */
static double tolerance(mx_dtype dtype) {
  switch (dtype) {
  case MX_F64: return 1e-12;
  case MX_F32: return 1e-5;
  case MX_F16: return 0x1p-9;
  default: return 0x1p-7;
  }
}

typedef struct {
  mx_tensor *y, *grads[3], *running[2];
} bn_run;

/* batch_norm (or batch_norm_relu) of a copy of x, the gradients of x,
 * weight and bias for grad_y, and the running statistics after it. */
static bn_run run(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, const mx_tensor *grad_y,
                  bool training, bool relu) {
  bn_run r;
  int64_t C = mx_shape_get(x).d[1];
  mx_tensor *inputs[3] = {mx_detach(x), mx_clone(weight), mx_clone(bias)};
  for (int i = 0; i < 3; i++) cr_assert_eq(mx_set_requires_grad(inputs[i], true), MX_OK, "%s", mx_last_error());
  mx_generator *gen = mx_generator_new(77);
  mx_dtype stats = vector_dtype(mx_dtype_of(x));
  r.running[0] = mx_to_dtype(mx_randn(MX_SHAPE(C), MX_F64, MX_CPU, gen), stats);
  r.running[1] = mx_to_dtype(mx_add_scalar(mx_rand(MX_SHAPE(C), MX_F64, MX_CPU, gen), 0.5), stats);
  mx_generator_free(gen);
  r.y = (relu ? mx_batch_norm_relu : mx_batch_norm)(inputs[0], r.running[0], r.running[1], inputs[1], inputs[2],
                                                    training, 0.1, 1e-5);
  cr_assert_not_null(r.y, "%s", mx_last_error());
  cr_assert_eq(mx_grad(1, &r.y, 3, inputs, (mx_tensor *const *)&grad_y, false, false, false, r.grads), MX_OK, "%s",
               mx_last_error());
  return r;
}

/* Whether mx_add of two channels-last tensors is channels-last: in training
 * the gradient of x is the sum of the statistics' and the normalisation's,
 * both channels-last, which autograd adds with the elementwise add; that
 * keeps the layout once the elementwise ops do (the core of #38). */
static bool add_keeps_channels_last(void) {
  mx_scope *scope = mx_scope_begin();
  mx_tensor *a = to_channels_last(mx_ones(MX_SHAPE(1, 2, 2, 2), MX_F32, MX_CPU));
  mx_tensor *sum = mx_add(a, a);
  bool kept = has_channels_last_strides(sum) && !mx_is_contiguous(sum);
  mx_scope_end(scope);
  return kept;
}

static void check_batch_norm(mx_shape shape, uint64_t seed) {
  const char *names[3] = {"x", "weight", "bias"};
  for (int d = 0; d < (test_quick() ? 2 : 4); d++) /* quick: float32 and bfloat16 */
    for (int mode = 0; mode < 8; mode++) {
      bool training = mode & 1, relu = mode & 2, row_major_grad = mode & 4;
      mx_dtype dtype = float_dtypes[d];
      mx_scope *scope = mx_scope_begin();
      mx_tensor *x = random_input(shape, dtype, seed, false, false);
      mx_tensor *weight = mx_to_dtype(random_input(MX_SHAPE(1, shape.d[1], 1, 1), MX_F64, seed + 1, false, false),
                                      vector_dtype(dtype));
      mx_tensor *bias = mx_to_dtype(random_input(MX_SHAPE(1, shape.d[1], 1, 1), MX_F64, seed + 2, false, false),
                                    vector_dtype(dtype));
      weight = mx_reshape(weight, MX_SHAPE(-1)), bias = mx_reshape(bias, MX_SHAPE(-1));
      mx_tensor *grad_y = random_input(shape, dtype, seed + 3, false, false);
      bn_run want = run(x, weight, bias, grad_y, training, relu);
      /* the output gradient channels-last, as a channels-last network's is, or row-major */
      bn_run got = run(to_channels_last(x), weight, bias, row_major_grad ? grad_y : to_channels_last(grad_y),
                       training, relu);
      char what[160];
      snprintf(what, sizeof what, "%s%s, %s, %s gradient: ", relu ? "batch_norm_relu" : "batch_norm",
               training ? " training" : " eval", mx_dtype_name(dtype), row_major_grad ? "row-major" : "channels-last");
      char *tail = what + strlen(what);
      size_t room = sizeof what - (size_t)(tail - what);
      double tol = tolerance(dtype);
      snprintf(tail, room, "the output");
      expect_channels_last(got.y, what);
      if (training) expect_close(got.y, want.y, tol, what);
      else expect_same_bits(got.y, want.y, what);
      for (int i = 0; i < 3; i++) {
        snprintf(tail, room, "the gradient of %s", names[i]);
        if (i == 0 && (!training || add_keeps_channels_last())) expect_channels_last(got.grads[0], what);
        if (i == 0 && !training) expect_same_bits(got.grads[0], want.grads[0], what);
        else expect_close(got.grads[i], want.grads[i], training && i == 0 ? 4 * tol : tol, what);
      }
      for (int k = 0; k < 2; k++) {
        snprintf(tail, room, "the running %s", k ? "var" : "mean");
        expect_close(got.running[k], want.running[k], tolerance(vector_dtype(dtype)), what);
      }
      mx_scope_end(scope);
    }
}

Test(channels_last_norm, batch_norm_keeps_the_layout_and_the_row_major_values) {
  check_batch_norm(MX_SHAPE(3, 19, 5, 7), 10);
}

/* 70 channels: a tile of 64 and a tail; 2 x 27 x 21 = 1134 pixels: two chunks of rows */
Test(channels_last_norm, batch_norm_keeps_the_layout_and_the_row_major_values_wide) {
  check_batch_norm(MX_SHAPE(2, 70, 27, 21), 20);
}

/* 520 channels: rows longer than the 16-bit kernels' float32 blocks */
Test(channels_last_norm, batch_norm_keeps_the_layout_and_the_row_major_values_long_rows) {
  check_batch_norm(MX_SHAPE(2, 520, 3, 2), 30);
}

/* The statistics and the gradient sums on one thread and on two: the same bits. */
Test(channels_last_norm, sums_do_not_depend_on_the_threads) {
  mx_dtype dtypes[2] = {MX_F32, MX_BF16};
  for (int d = 0; d < 2; d++) {
    mx_scope *scope = mx_scope_begin();
    mx_shape shape = MX_SHAPE(4, 24, 31, 33); /* 4092 pixels: four chunks of rows */
    mx_tensor *x = to_channels_last(random_input(shape, dtypes[d], 30, false, false));
    mx_tensor *grad_y = to_channels_last(random_input(shape, dtypes[d], 31, false, false));
    mx_tensor *weight = mx_ones(MX_SHAPE(24), MX_F32, MX_CPU), *bias = mx_zeros(MX_SHAPE(24), MX_F32, MX_CPU);
    bn_run runs[2];
    int threads = mx_num_threads();
    for (int t = 0; t < 2; t++) {
      cr_assert_eq(mx_set_num_threads(t + 1), MX_OK, "%s", mx_last_error());
      runs[t] = run(x, weight, bias, grad_y, true, true);
    }
    cr_assert_eq(mx_set_num_threads(threads), MX_OK, "%s", mx_last_error());
    expect_same_bits(runs[0].y, runs[1].y, "the output");
    for (int i = 0; i < 3; i++) expect_same_bits(runs[0].grads[i], runs[1].grads[i], "a gradient");
    for (int k = 0; k < 2; k++) expect_same_bits(runs[0].running[k], runs[1].running[k], "a running statistic");
    mx_scope_end(scope);
  }
}

/* batch_norm_relu(x) through a channels-last copy of x, in training: the
 * gradients flow through the channels-last kernels and the copy. */
static mx_tensor *batch_norm_of_channels_last(int n, mx_tensor *const *in, void *ctx) {
  (void)n, (void)ctx;
  return mx_batch_norm_relu(to_channels_last(in[0]), NULL, NULL, in[1], in[2], true, 0.1, 1e-5);
}

Test(channels_last_norm, gradcheck_in_float64) {
  mx_scope *scope = mx_scope_begin();
  mx_tensor *in[3] = {random_input(MX_SHAPE(2, 3, 3, 5), MX_F64, 40, false, false),
                      mx_reshape(random_input(MX_SHAPE(1, 3, 1, 1), MX_F64, 41, false, false), MX_SHAPE(-1)),
                      mx_reshape(random_input(MX_SHAPE(1, 3, 1, 1), MX_F64, 42, false, false), MX_SHAPE(-1))};
  for (int i = 0; i < 3; i++) cr_assert_eq(mx_set_requires_grad(in[i], true), MX_OK);
  cr_expect_eq(mx_gradcheck(batch_norm_of_channels_last, 3, in, NULL, 1e-6, 1e-5, 1e-4), MX_OK, "%s",
               mx_last_error());
  mx_scope_end(scope);
}
