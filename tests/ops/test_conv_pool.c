/* conv2d_max_pool_relu (ops/conv.c; the CPU's kernels/cpu/dnnl_conv_pool.c) against mx_conv2d then
 * mx_max_pool_relu: the same bits forward (values and indices) and backward (dx, dw, db) in float32 and under
 * bfloat16 and float16 autocast, row-major and channels-last, odd sizes whose pooling leaves an edge, batches of 1
 * and 3, with and without a bias, x requiring grad or not, on inputs holding NaN, -0 and ties; gradients of
 * gradients equal to the unfused ops'; the fused kernels, not the unfused ones, making the results where oneDNN
 * runs; and float64 finite differences (gradcheck, gradgradcheck: float64 runs the unfused kernels inside the op,
 * the op's formulas all the same), which the op suite's cases cannot run on an internal row
 * (tests/ops/test_every_row.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "fused_case.h"
#include "kernels/cpu/dnnl.h"
#include "kernels/cpu/dnnl_conv_pool.h"
#include "kernels/cpu/pool_avx512.h"
#include "mx_config.h"
#include "ops/conv_pool.h"

typedef struct {
  int64_t n, c_in, h, w, c_out, k, padding, pool;
  bool bias, x_grad;
} pool_case;

/* c_out 20 leaves 12 padding channels in the last block of 16; 7x9 and 9x7 leave an edge the windows miss; output
 * rows of 14, 7, 16, 17 and 33 windows (the AVX-512 loops' tiles are 16 wide: whole, short and several; one output
 * row only, where every row is a channel's last); the last three run a chunk of the batch at a time (chunks of about
 * 80 KiB from any size, set below, halved for the convolutions of under 32 products an element: from 1 and 2 input
 * channels): the first layer's forward on 9 images (18 KB of float32 output a sample: chunks of 2, 2, 2, 2, 1;
 * bfloat16 3, 3, 3, or as float32 where bfloat16 runs in float32), and the input's gradient of 7 images of 64
 * channels (37 KB of float32 gradient a sample), from 2 input channels in a buffer of their own (chunks of 1;
 * bfloat16 2, 2, 2, 1), from 16 in slices of the weight's gradient's buffer (chunks of 2, 2, 2, 1; bfloat16 4, 3;
 * none where bfloat16 runs in float32: x is converted, and not small beside y). From 1 and 2 input channels, which
 * oneDNN reads as they lie (AVX-512) or converts at little cost, the weight's gradient runs in the same chunks,
 * summed over them: other sums than the unfused op's, but the same bits here, where every sum is exact
 * (test_conv_pool_chunks.c compares random values within their rounding) */
static const pool_case cases[] = {
    {1, 3, 7, 9, 20, 3, 1, 2, true, false},   {3, 16, 8, 8, 32, 3, 1, 2, true, true},
    {3, 8, 7, 9, 16, 3, 0, 2, false, true},   {1, 32, 9, 7, 64, 3, 1, 3, true, true},
    {3, 1, 12, 12, 32, 3, 1, 2, false, false}, {3, 2, 6, 28, 32, 3, 1, 2, true, true},
    {1, 3, 14, 14, 64, 3, 1, 2, true, true},   {1, 2, 4, 32, 20, 3, 1, 2, false, true},
    {3, 2, 5, 34, 16, 3, 1, 2, true, false},   {1, 2, 5, 66, 32, 3, 1, 2, true, true},
    {3, 2, 2, 66, 20, 3, 1, 2, false, true},  {9, 1, 12, 12, 32, 3, 1, 2, true, false},
    {7, 2, 12, 12, 64, 3, 1, 2, true, true},  {7, 16, 12, 12, 64, 3, 1, 2, false, true},
    {2, 64, 8, 8, 16, 3, 1, 2, false, true},
};
enum { CASES = sizeof cases / sizeof cases[0] };

static uint64_t state = 38;
static double draw(void) { /* xorshift64: reproducible small integers */
  state ^= state << 13, state ^= state >> 7, state ^= state << 17;
  return (double)(state % 1000) / 1000.0;
}

/* A leaf of float32 values in {-1, -0.5, 0, 0.5, 1} (sums tie often), some -0, one NaN when nan; requiring grad
 * when grad. */
static mx_tensor *leaf(mx_shape shape, bool nan, bool grad) {
  int64_t n = 1;
  for (int d = 0; d < shape.ndim; d++) n *= shape.d[d];
  float *v = malloc(sizeof(float) * (size_t)n);
  cr_assert(v);
  for (int64_t i = 0; i < n; i++) {
    v[i] = (float)(floor(draw() * 5) * 0.5 - 1);
    if (v[i] == 0 && draw() < 0.5) v[i] = -0.0f;
  }
  if (nan) v[n / 3] = NAN;
  mx_tensor *t = mx_from_data(v, shape, MX_F32, MX_CPU);
  free(v);
  cr_assert(t && (!grad || mx_set_requires_grad(t, true) == MX_OK), "%s", mx_last_error());
  return t;
}

/* uint8 offsets in pool x pool windows (stride pool, no padding) as flat positions in planes W wide (int64). */
static mx_tensor *flat_positions(const mx_tensor *offsets, int64_t pool, int64_t W) {
  mx_tensor *o = mx_contiguous(offsets);
  mx_shape s = mx_shape_get(o);
  size_t n = (size_t)mx_numel(o);
  uint8_t *u = malloc(n + 1);
  int64_t *flat = malloc(sizeof(int64_t) * (n + 1));
  cr_assert(u && flat && mx_to_host(o, u, n) == MX_OK);
  for (size_t i = 0; i < n; i++) {
    int64_t ow = (int64_t)i % s.d[3], oh = (int64_t)i / s.d[3] % s.d[2];
    flat[i] = (oh * pool + u[i] / pool) * W + ow * pool + u[i] % pool;
  }
  mx_tensor *t = mx_from_data(flat, s, MX_I64, MX_CPU);
  free(u);
  free(flat);
  return t;
}

/* Whether float16 convolutions run on float32 plans here: where oneDNN's float32 blocks are 16 channels, those of
 * mixgrad's transposes (channel_blocks.h), as on AVX-512 CPUs (mx__pool_avx512 reads the same CPU flags); on AVX2
 * they are 8, and float16 runs the unfused kernels (so under valgrind, which hides AVX-512). */
static bool float16_blocks(void) {
#ifdef MX__POOL_AVX512
  return mx__pool_avx512();
#else
  return false;
#endif
}

/* One case, its inputs float32 leaves, in an autocast region of dt when dt is 16 bits, x channels-last when asked:
 * forward and backward bits against the unfused ops. */
static void check_case(int k, mx_dtype dt, bool channels_last) {
  const pool_case *c = &cases[k];
  mx__cpu_conv_max_pool_relu_chunking(0, 80 << 10);
  mx_scope *scope = mx_scope_begin();
  mx_tensor *x = leaf(MX_SHAPE(c->n, c->c_in, c->h, c->w), true, c->x_grad);
  mx_tensor *w = leaf(MX_SHAPE(c->c_out, c->c_in, c->k, c->k), false, true);
  mx_tensor *b = c->bias ? leaf(MX_SHAPE(c->c_out), false, true) : NULL;
  mx_tensor *in = channels_last ? mx_to_channels_last(x) : x;
  mx_shape padding = MX_SHAPE(c->padding), pool = MX_SHAPE(c->pool);
  mx_tensor *y[2] = {NULL, NULL}, *indices[2] = {NULL, NULL}, *full = NULL;
  bool bf16 = dt == MX_BF16, half = dt != MX_F32;
  uint64_t runs = mx__cpu_conv_max_pool_relu_runs(false);
  MX_AUTOCAST(MX_CPU, half ? dt : MX_BF16, half, true) {
    full = mx_conv2d(in, w, b, MX_DEFAULT, padding, MX_DEFAULT, 1);
    y[0] = mx_max_pool_relu(full, 2, pool, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT);
    cr_assert_eq(mx_max_pool_with_indices(mx_relu(full), 2, pool, MX_DEFAULT, MX_DEFAULT, MX_DIMS(1), NULL,
                                          &indices[0]), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx__conv2d_max_pool_relu(in, w, b, MX_DEFAULT, padding, MX_DEFAULT, 1, pool, MX_DEFAULT, MX_DEFAULT,
                                          MX_DEFAULT, &y[1], &indices[1]), MX_OK, "%s", mx_last_error());
  }
  /* channels-last activations take the unfused kernels inside the op (kernels/cpu/dnnl_conv_pool.c says why), and
   * so do bfloat16 ones from 64 input channels and 8x8 outputs without a bias, which run as float32 Winograd (the
   * last case; kernels/cpu/dnnl_conv.c, winograd_fits), where oneDNN has native bfloat16 kernels; without them
   * every bfloat16 convolution runs in float32, and the fused kernels round its output as the unfused op does. So
   * does every float16 one, where mixgrad's channel-block transposes convert x and y (16, 32 and 64 channels):
   * dnnl_conv.c declines oneDNN's float16 reorders */
  bool winograd_bf16 = bf16 && c->c_in >= 64 && c->h * c->w >= 64 && !c->bias && mx__dnnl_native(dt);
  bool f16_blocks = float16_blocks() && c->c_in % 16 == 0 && c->c_out % 16 == 0;
  bool fused = MX_HAVE_DNNL && !channels_last && !winograd_bf16 && (dt != MX_F16 || f16_blocks);
  cr_expect_eq(mx__cpu_conv_max_pool_relu_runs(false), runs + fused, "case %d: the fused kernel ran %s", k,
               fused ? "not" : "");
  cr_assert_eq(mx_dtype_of(y[1]), dt);
  cr_expect_eq(mx_is_contiguous(y[1]), mx_is_contiguous(y[0]), "case %d: the output's layout", k);
  fused_case_same_bits(y[0], y[1], "output", k, dt);
  fused_case_same_bits(indices[0], flat_positions(indices[1], c->pool, mx_shape_get(full).d[3]), "indices", k, dt);
  cr_expect_str_eq(mx_grad_fn_name(y[1]), "CONV2D_MAX_POOL_RELUBackward");

  /* the gradients of sum(y * r), r holding ties and a -0 too */
  mx_tensor *r = mx_to_dtype(leaf(mx_shape_get(y[0]), false, false), dt);
  mx_tensor *inputs[3], *grads[2][3] = {{NULL}};
  int n_in = 0;
  if (c->x_grad) inputs[n_in++] = x;
  inputs[n_in++] = w;
  if (b) inputs[n_in++] = b;
  runs = mx__cpu_conv_max_pool_relu_runs(true);
  for (int f = 0; f < 2; f++) {
    mx_tensor *loss = mx_sum(mx_mul(y[f], r), MX_ALL_DIMS, false);
    cr_assert_eq(mx_grad(1, &loss, n_in, inputs, NULL, false, false, false, grads[f]), MX_OK, "%s", mx_last_error());
  }
  cr_expect_eq(mx__cpu_conv_max_pool_relu_runs(true), runs + fused, "case %d: the fused backward ran %s", k,
               fused ? "not" : "");
  for (int i = 0; i < n_in; i++) fused_case_same_bits(grads[0][i], grads[1][i], "a gradient", k, MX_F32);
  mx_scope_end(scope);
}

Test(conv2d_max_pool_relu, float32_row_major_is_conv2d_then_max_pool_relu_bit_for_bit) {
  for (int k = 0; k < CASES; k++) check_case(k, MX_F32, false);
}

Test(conv2d_max_pool_relu, float32_channels_last_is_conv2d_then_max_pool_relu_bit_for_bit) {
  for (int k = 0; k < CASES; k++) check_case(k, MX_F32, true);
}

Test(conv2d_max_pool_relu, bfloat16_autocast_row_major_is_conv2d_then_max_pool_relu_bit_for_bit) {
  for (int k = 0; k < CASES; k++) check_case(k, MX_BF16, false);
}

Test(conv2d_max_pool_relu, bfloat16_autocast_channels_last_is_conv2d_then_max_pool_relu_bit_for_bit) {
  for (int k = 0; k < CASES; k++) check_case(k, MX_BF16, true);
}

Test(conv2d_max_pool_relu, float16_autocast_row_major_is_conv2d_then_max_pool_relu_bit_for_bit) {
  for (int k = 0; k < CASES; k++) check_case(k, MX_F16, false);
}

/* Under 16-bit autocast a window's maximum and its offset are those of the rounded convolution output, as the
 * unfused op sees it: y = a + b e from two of 16 input channels (1x1 weights 1 and e, float32 sums; e = 2^-9 in
 * bfloat16, 2^-12 in float16, a quarter of the format's unit at 1) is 1 for a = 1, b = 0 and 1 + e for a = b = 1,
 * both 1 once rounded (half the unit is 2e), so a window holding 1 then 1 + e ties and keeps the first; a fused
 * kernel searching float32 sums (where 16-bit convolutions run in float32) would take the second. And 1 + 3e
 * rounds up to 1 + 4e, one unit. */
static void check_rounded_search(mx_dtype dt) {
  mx_scope *scope = mx_scope_begin();
  enum { N = 2, I = 16, C = 16, H = 4, W = 4 };
  float e = dt == MX_BF16 ? 1.0f / 512 : 1.0f / 4096;
  float x[N * I * H * W] = {0}, w[C * I] = {0};
  for (int64_t n = 0; n < N; n++)
    for (int64_t p = 0; p < H * W; p++) {
      x[(n * I + 0) * H * W + p] = 1.0f;
      x[(n * I + 1) * H * W + p] = (float)(p % 2) * (p % 3 == 0 ? 3.0f : 1.0f); /* odd columns: 1 or 3 e */
    }
  for (int64_t c = 0; c < C; c++) w[c * I] = 1.0f, w[c * I + 1] = e;
  mx_tensor *xt = mx_from_data(x, MX_SHAPE(N, I, H, W), MX_F32, MX_CPU);
  mx_tensor *wt = mx_from_data(w, MX_SHAPE(C, I, 1, 1), MX_F32, MX_CPU);
  cr_assert(xt && wt && mx_set_requires_grad(wt, true) == MX_OK, "%s", mx_last_error());
  mx_tensor *y[2] = {NULL, NULL}, *indices[2] = {NULL, NULL}, *full = NULL;
  uint64_t runs[2] = {mx__cpu_conv_max_pool_relu_runs(false), mx__cpu_conv_max_pool_relu_runs(true)};
  MX_AUTOCAST(MX_CPU, dt, true, true) {
    full = mx_conv2d(xt, wt, NULL, MX_DEFAULT, MX_SHAPE(0), MX_DEFAULT, 1);
    cr_assert_eq(mx_max_pool_with_indices(mx_relu(full), 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DIMS(1), &y[0],
                                          &indices[0]), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx__conv2d_max_pool_relu(xt, wt, NULL, MX_DEFAULT, MX_SHAPE(0), MX_DEFAULT, 1, MX_SHAPE(2), MX_DEFAULT,
                                          MX_DEFAULT, MX_DEFAULT, &y[1], &indices[1]), MX_OK, "%s", mx_last_error());
  }
  /* hand-computed: every window's top row is 1, then 1 + e or 1 + 3 e */
  float expected[2] = {1.0f, 1.0f + 4 * e};
  uint16_t got[N * C * 2 * 2];
  cr_assert_eq(mx_to_host(mx_contiguous(y[1]), got, sizeof got), MX_OK, "%s", mx_last_error());
  int64_t ties = 0, rounded_up = 0;
  for (int64_t i = 0; i < N * C * 4; i++) {
    float v = dt == MX_BF16 ? mx_bf16_to_f32(got[i]) : mx_f16_to_f32(got[i]);
    ties += v == expected[0], rounded_up += v == expected[1];
  }
  cr_expect_eq(ties + rounded_up, N * C * 4, "every window's maximum is 1 or 1 + 4 e");
  cr_expect_gt(ties, 0);
  cr_expect_gt(rounded_up, 0);
  fused_case_same_bits(y[0], y[1], "output", 0, dt);
  fused_case_same_bits(indices[0], flat_positions(indices[1], 2, W), "indices", 0, dt);
  /* and the weight's gradient, which the indices route */
  mx_tensor *grads[2] = {NULL, NULL};
  for (int f = 0; f < 2; f++) {
    mx_tensor *loss = mx_sum(mx_to_dtype(y[f], MX_F32), MX_ALL_DIMS, false);
    cr_assert_eq(mx_grad(1, &loss, 1, &wt, NULL, false, false, false, &grads[f]), MX_OK, "%s", mx_last_error());
  }
  fused_case_same_bits(grads[0], grads[1], "the weight's gradient", 0, MX_F32);
  /* the fused kernels made them where oneDNN runs (float16: in blocks of 16 channels) */
  bool fused = MX_HAVE_DNNL && (dt != MX_F16 || float16_blocks());
  cr_expect_eq(mx__cpu_conv_max_pool_relu_runs(false), runs[0] + fused);
  cr_expect_eq(mx__cpu_conv_max_pool_relu_runs(true), runs[1] + fused);
  mx_scope_end(scope);
}

Test(conv2d_max_pool_relu, bfloat16_windows_search_the_rounded_output) { check_rounded_search(MX_BF16); }
Test(conv2d_max_pool_relu, float16_windows_search_the_rounded_output) { check_rounded_search(MX_F16); }

/* Gradients of the gradients (create_graph): the backward op's own backward against the unfused ops'. */
Test(conv2d_max_pool_relu, gradients_of_gradients_are_the_unfused_case_conv_pools) {
  for (int layout = 0; layout < 2; layout++) {
    const pool_case *c = &cases[1];
    mx_scope *scope = mx_scope_begin();
    mx_tensor *x = leaf(MX_SHAPE(c->n, c->c_in, c->h, c->w), false, true);
    mx_tensor *w = leaf(MX_SHAPE(c->c_out, c->c_in, c->k, c->k), false, true);
    mx_tensor *b = leaf(MX_SHAPE(c->c_out), false, true);
    mx_tensor *in = layout ? mx_to_channels_last(x) : x, *y[2];
    y[0] = mx_max_pool_relu(mx_conv2d(in, w, b, MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 1), 2, MX_SHAPE(2), MX_DEFAULT,
                            MX_DEFAULT, MX_DEFAULT);
    cr_assert_eq(mx__conv2d_max_pool_relu(in, w, b, MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 1, MX_SHAPE(2), MX_DEFAULT,
                                          MX_DEFAULT, MX_DEFAULT, &y[1], NULL), MX_OK, "%s", mx_last_error());
    mx_tensor *r = leaf(mx_shape_get(y[0]), false, true), *inputs[4] = {x, w, b, r};
    mx_tensor *second[2][4] = {{NULL}};
    for (int f = 0; f < 2; f++) {
      mx_tensor *loss = mx_sum(mx_mul(y[f], r), MX_ALL_DIMS, false), *g[3] = {NULL};
      cr_assert_eq(mx_grad(1, &loss, 3, inputs, NULL, true, true, false, g), MX_OK, "%s", mx_last_error());
      /* a scalar of all three gradients, differentiated again with respect to x, w, b and r */
      mx_tensor *mix = mx_add(mx_add(mx_sum(mx_mul(g[0], g[0]), MX_ALL_DIMS, false),
                                     mx_sum(mx_mul(g[1], g[1]), MX_ALL_DIMS, false)),
                              mx_sum(mx_mul(g[2], g[2]), MX_ALL_DIMS, false));
      cr_assert_eq(mx_grad(1, &mix, 4, inputs, NULL, false, false, true, second[f]), MX_OK, "%s", mx_last_error());
    }
    for (int i = 0; i < 4; i++) {
      if (!second[0][i]) { /* x and b reach the first gradients through no differentiable path but the masks */
        cr_expect_null(second[1][i], "input %d", i);
        continue;
      }
      fused_case_same_bits(second[0][i], second[1][i], "a gradient of a gradient", i, MX_F32);
    }
    mx_scope_end(scope);
  }
}

/* --- float64 finite differences ----------------------------------------------------------------------------- */


Test(conv2d_max_pool_relu, float64_gradients_match_finite_differences) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(5);
  mx_shape shapes[3] = {MX_SHAPE(2, 2, 5, 7), MX_SHAPE(3, 2, 3, 3), MX_SHAPE(3)};
  mx_tensor *in[3];
  for (int i = 0; i < 3; i++) {
    in[i] = mx_detach(mx_to_dtype(mx_randn(shapes[i], MX_F32, MX_CPU, gen), MX_F64));
    cr_assert(in[i] && mx_set_requires_grad(in[i], true) == MX_OK, "%s", mx_last_error());
  }
  cr_expect_eq(mx_gradcheck(fused_case_conv_pool, 3, in, NULL, 1e-6, 1e-5, 1e-4), MX_OK, "%s", mx_last_error());
  /* through the backward op's own backward */
  cr_expect_eq(mx_gradgradcheck(fused_case_conv_pool, 3, in, NULL, 1e-6, 1e-5, 1e-4), MX_OK, "%s", mx_last_error());
  mx_generator_free(gen);
  mx_scope_end(scope);
}
