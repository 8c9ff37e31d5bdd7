/* mx_conv2d_relu against mx_relu(mx_conv2d(...)): the same bits forward and in every gradient, in float32 and
 * bfloat16 (oneDNN's ReLU post-op on this CPU), float16 and float64 (the convolution, then the ReLU), and under
 * bfloat16 autocast; its errors name it. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "../common/expect_error.h"
#include "fused_case.h"
#include "kernels/backend.h"
#include "kernels/cpu/dnnl.h"
#include "mx_config.h"
#include "tensor/tensor_impl.h"

typedef struct {
  int64_t n, c_in, h, w, c_out, k, stride, padding, dilation, groups;
  bool bias;
} conv_case;

/* Small channel counts (the plain layouts), 16 and more (oneDNN's blocked ones, and bf16's channel blocks), an
 * image's 3 channels, groups, strides, dilation, padding, with and without a bias; float32 3x3 stride-1 ones from
 * 16 channels run as Winograd, bfloat16 ones from 64 without a bias too (the last; kernels/cpu/dnnl_conv.c). */
static const conv_case cases[] = {
    {2, 3, 9, 9, 8, 3, 1, 1, 1, 1, true},    {2, 16, 8, 8, 32, 3, 1, 1, 1, 1, true},
    {1, 32, 7, 6, 16, 3, 2, 1, 1, 1, false}, {2, 8, 9, 7, 12, 3, 1, 2, 2, 2, true},
    {3, 4, 5, 5, 6, 1, 1, 0, 1, 1, true},    {1, 16, 10, 10, 16, 5, 2, 2, 1, 4, false},
    {2, 64, 8, 8, 16, 3, 1, 1, 1, 1, false},
};


/* One case in one dtype: the output, then the gradients of sum(y * r) for x, weight and bias, fused and not. */
static void check_case(int k, mx_dtype dt, mx_dtype autocast) {
  const conv_case *c = &cases[k];
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(38 + (uint64_t)k);
  mx_tensor *x = fused_case_leaf(MX_SHAPE(c->n, c->c_in, c->h, c->w), dt, gen);
  mx_tensor *w = fused_case_leaf(MX_SHAPE(c->c_out, c->c_in / c->groups, c->k, c->k), dt, gen);
  mx_tensor *b = c->bias ? fused_case_leaf(MX_SHAPE(c->c_out), dt, gen) : NULL;
  mx_shape stride = MX_SHAPE(c->stride), padding = MX_SHAPE(c->padding), dilation = MX_SHAPE(c->dilation);
  mx_tensor *y[2];
  MX_AUTOCAST(MX_CPU, autocast, autocast != MX_DTYPE_COUNT, true) {
    y[0] = mx_relu(mx_conv2d(x, w, b, stride, padding, dilation, c->groups));
    y[1] = mx_conv2d_relu(x, w, b, stride, padding, dilation, c->groups);
  }
  fused_case_same_bits(y[0], y[1], "output", k, dt);
  cr_expect_str_eq(mx_grad_fn_name(y[1]), "CONV2D_RELUBackward");
  fused_case_same_gradients(y, x, w, b, gen, k, dt);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

Test(conv2d_relu, float32_is_relu_of_conv2d_bit_for_bit) {
  for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) check_case(k, MX_F32, MX_DTYPE_COUNT);
}

Test(conv2d_relu, bfloat16_is_relu_of_conv2d_bit_for_bit) {
  for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) check_case(k, MX_BF16, MX_DTYPE_COUNT);
}

/* float16 runs on float32 sums rounded once, then the ReLU; float64 the loops, then the ReLU */
Test(conv2d_relu, float16_and_float64_are_relu_of_conv2d_bit_for_bit) {
  check_case(0, MX_F16, MX_DTYPE_COUNT);
  check_case(3, MX_F64, MX_DTYPE_COUNT);
}

/* float32 leaves in a bfloat16 region: both lower x, weight and bias the same way */
Test(conv2d_relu, bfloat16_autocast_lowers_it_as_conv2d) {
  for (int k = 0; k < 2; k++) check_case(k, MX_F32, MX_BF16);
}

/* The fused kernel is oneDNN's post-op here (the comparisons above would pass trivially if it declined), and its
 * output matches oneDNN's plain convolution followed by the ReLU kernel, but where a NaN input makes the sum NaN:
 * the post-op writes 0 there (ops.h). float32 on 3 input channels runs direct (clip), on 16 as Winograd
 * (eltwise_relu); bfloat16 direct. */
Test(conv2d_relu, the_cpu_runs_the_relu_as_a_onednn_post_op) {
  if (!MX_HAVE_DNNL) cr_skip_test("built without oneDNN");
  static const struct {
    mx_dtype dtype;
    int k;
  } runs[] = {{MX_F32, 0}, {MX_F32, 1}, {MX_BF16, 1}};
  for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
    mx_dtype dt = runs[i].dtype;
    if (!mx__dnnl_native(dt)) continue;
    const conv_case *c = &cases[runs[i].k];
    mx_scope *scope = mx_scope_begin();
    mx_generator *gen = mx_generator_new(7);
    mx_tensor *x = fused_case_leaf(MX_SHAPE(c->n, c->c_in, c->h, c->w), dt, gen);
    mx_tensor *w = fused_case_leaf(MX_SHAPE(c->c_out, c->c_in, c->k, c->k), dt, gen);
    mx_tensor *b = fused_case_leaf(MX_SHAPE(c->c_out), dt, gen);
    cr_assert_eq(mx_fill_(mx_select(mx_select(mx_select(mx_select(x, 0, 0), 0, 0), 0, 4), 0, 4), NAN), MX_OK, "%s",
                 mx_last_error());
    mx_tensor *fused = mx_empty(MX_SHAPE(c->n, c->c_out, c->h, c->w), dt, MX_CPU);
    mx_tensor *plain = mx_empty(MX_SHAPE(c->n, c->c_out, c->h, c->w), dt, MX_CPU);
    mx_conv_params p = {.spatial = 2, .stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1};
    mx_kview xv = mx__kview_of(x), wv = mx__kview_of(w), bv = mx__kview_of(b);
    mx_kview fv = mx__kview_of(fused), pv = mx__kview_of(plain);
    uint64_t winograd = mx__dnnl_conv_winograd_runs();
    cr_expect_eq(mx__dnnl_conv_forward_relu(&fv, &xv, &wv, &bv, &p), MX_OK, "%s", mx_last_error());
    cr_expect_eq(mx__dnnl_conv_forward(&pv, &xv, &wv, &bv, &p), MX_OK, "%s", mx_last_error());
    bool wants_winograd = dt == MX_F32 && c->c_in >= 16 && __builtin_cpu_supports("avx512f");
    cr_expect_eq(mx__dnnl_conv_winograd_runs() - winograd, wants_winograd ? 2 : 0, "case %d (%s)", runs[i].k,
                 mx_dtype_name(dt));
    /* the NaN pixel's 3x3 neighbours in every output channel; with Winograd, the whole of each 4x4 output tile
     * that reads it (its transforms mix a tile's inputs) */
    mx_tensor *nan = mx_ne(plain, plain);
    double nans = mx_item(mx_sum(nan, MX_ALL_DIMS, false));
    if (wants_winograd) cr_expect(nans >= 9 * c->c_out && nans <= 64 * c->c_out, "%g NaN", nans);
    else cr_expect_eq(nans, 9 * c->c_out, "case %d (%s): %g NaN", runs[i].k, mx_dtype_name(dt), nans);
    fused_case_same_bits(fused, mx_masked_fill(mx_relu(plain), nan, 0), "kernel output", runs[i].k, dt);
    mx_tensor *negative = mx_lt_scalar(plain, 0);
    cr_expect_gt(mx_item(mx_sum(negative, MX_ALL_DIMS, false)), 0, "no negative sum: the ReLU did nothing");
    mx_generator_free(gen);
    mx_scope_end(scope);
  }
}

Test(conv2d_relu, its_errors_name_it) {
  mx_scope *scope = mx_scope_begin();
  mx_tensor *x = mx_zeros(MX_SHAPE(1, 2, 5, 5), MX_F32, MX_CPU), *w = mx_zeros(MX_SHAPE(3, 2, 3, 3), MX_F32, MX_CPU);
  EXPECT_ERROR(mx_conv2d_relu(x, mx_zeros(MX_SHAPE(3, 4, 3, 3), MX_F32, MX_CPU), NULL, MX_DEFAULT, MX_DEFAULT,
                              MX_DEFAULT, 1),
               "mx_conv2d_relu: input [1,2,5,5] has 2 channels, weight [3,4,3,3] expects 4 (groups 1)");
  EXPECT_ERROR(mx_conv2d_relu(x, w, mx_zeros(MX_SHAPE(4), MX_F32, MX_CPU), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1),
               "mx_conv2d_relu: bias of shape [4] for 3 output channels (expected (3))");
  EXPECT_ERROR(mx_conv2d_relu(x, mx_zeros(MX_SHAPE(3, 2, 3, 3), MX_F64, MX_CPU), NULL, MX_DEFAULT, MX_DEFAULT,
                              MX_DEFAULT, 1),
               "mx_conv2d_relu: expected one dtype for input and weight, got float32 and float64");
  EXPECT_ERROR(mx_conv2d_relu(x, w, NULL, MX_DEFAULT, MX_DEFAULT, MX_SHAPE(3), 1),
               "mx_conv2d_relu: kernel 3 (dilation 3) does not fit input size 5 + padding 0 in spatial dim 0");
  mx_scope_end(scope);
}

/* The fused slot answers supports() as the convolution's does, dtype by dtype (bfloat16 natively or via float32
 * as the CPU allows, float16 via float32). */
Test(conv2d_relu, the_cpu_supports_it_as_it_supports_conv) {
  for (int dt = 0; dt < MX_DTYPE_COUNT; dt++)
    cr_expect_eq(mx__backend_supports(&mx__cpu_backend, MX_KERNEL_CONV_FORWARD_RELU, (mx_dtype)dt),
                 mx__backend_supports(&mx__cpu_backend, MX_KERNEL_CONV_FORWARD, (mx_dtype)dt), "%s",
                 mx_dtype_name((mx_dtype)dt));
}
