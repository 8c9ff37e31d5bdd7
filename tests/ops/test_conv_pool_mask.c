/* relu's mask fused into conv2d_max_pool_relu's backward kernel (kernels/cpu/dnnl_conv_pool.c, conv_pool_avx512.c):
 * the CPU kernel given the unmasked pooled gradient and relu's output y against the two steps it replaced,
 * relu_backward(g, y) as an op and then the kernel given the masked gradient, bit for bit (dx, dw, db) in float32 and
 * bfloat16: the AVX-512 loop's 16-channel blocks (2x2 windows, g and y contiguous), a last block of 4 real channels,
 * odd widths leaving an edge, 3x3 windows and strided g or y (the generic gather), g and y holding NaN (quiet and
 * signalling), -0, +-0, +-inf; and float64 gradcheck and gradgradcheck of the op where a negative bias makes relu
 * zero whole windows, so the mask decides gradients of gradients too; the op's error without y. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "../common/expect_error.h"
#include "fused_case.h"
#include "plain_kview.h"
#include "kernels/cpu/dnnl.h"
#include "kernels/cpu/dnnl_conv_pool.h"
#include "mx_config.h"
#include "ops/conv_pool.h"
#include "ops/op_table.h"

typedef struct {
  int64_t n, c_in, h, w, c_out, pool;
} mask_case;

/* c_out 32: two whole blocks of 16; 20: a last block of 4 real channels; h, w odd: an edge the windows miss; 34
 * wide: 17 windows a row, past the AVX-512 loop's tile of 16; pool 3: the generic scatter */
static const mask_case cases[] = {
    {2, 3, 8, 10, 32, 2}, {1, 2, 9, 11, 20, 2}, {1, 2, 6, 34, 16, 2}, {2, 3, 9, 9, 20, 3}, {1, 1, 7, 13, 5, 2},
};
enum { CASES = sizeof cases / sizeof cases[0] };

/* How g and y lie: contiguous (the AVX-512 loop where the windows are 2x2), y alone transposed in its last two dims,
 * both transposed (gathered along the channels), both channels-last. */
enum layout { CONTIGUOUS, Y_TRANSPOSED, BOTH_TRANSPOSED, CHANNELS_LAST, LAYOUTS };

static uint64_t state = 0x38u;
static uint64_t next(void) { /* xorshift64: reproducible draws */
  state ^= state << 13, state ^= state >> 7, state ^= state << 17;
  return state;
}

/* float32 bits for g (special) or an ordinary value; y's specials are those relu's output can hold and more */
static const uint32_t specials[] = {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x80000000u, 0x00000000u, 0x7f800000u,
                                    0xff800000u, 0x00000001u, 0x80000001u};
enum { SPECIALS = sizeof specials / sizeof specials[0] };

static uint32_t draw_bits(void) {
  uint64_t r = next();
  if (r % 4 == 0) return specials[(r >> 8) % SPECIALS];
  float v = (float)((int64_t)(r >> 8) % 9 - 4) * 0.5f; /* -2 .. 2 by halves: zeros and negatives often */
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  return bits;
}

/* count values of dtype dt (float32, or bfloat16 as the top halves of the float32 bits) into a new buffer: g's and
 * y's with specials among them, else (x, w) quarters from -1 to 1 */
static void *draw_values(int64_t count, mx_dtype dt, bool special) {
  size_t size = dt == MX_BF16 ? 2 : 4;
  char *v = malloc(size * (size_t)count);
  cr_assert(v);
  for (int64_t i = 0; i < count; i++) {
    float f = (float)((int64_t)(next() % 9) - 4) * 0.25f;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if (special) bits = draw_bits();
    if (dt == MX_BF16) {
      uint16_t half = (uint16_t)(bits >> 16);
      memcpy(v + 2 * i, &half, 2);
    } else {
      memcpy(v + 4 * i, &bits, 4);
    }
  }
  return v;
}

/* A (N, C, H, W) tensor of values stored in the layout's order (a view of a copy of them), and the kernel's view of
 * the values themselves. */
static mx_tensor *laid_out(const void *values, const int64_t shape[4], mx_dtype dt, enum layout layout,
                           mx_kview *view) {
  /* the storage's dims as (N, C, H, W)'s: storage dim d holds order[d] */
  static const int64_t orders[LAYOUTS][4] = {{0, 1, 2, 3}, {0, 1, 3, 2}, {0, 1, 3, 2}, {0, 2, 3, 1}};
  const int64_t *order = orders[layout];
  int64_t stored[4], strides[4], back[4], step = 1;
  for (int d = 0; d < 4; d++) stored[d] = shape[order[d]], back[order[d]] = d;
  for (int d = 3; d >= 0; d--) strides[order[d]] = step, step *= stored[d];
  mx_tensor *storage = mx_from_data(values, MX_SHAPE(stored[0], stored[1], stored[2], stored[3]), dt, MX_CPU);
  mx_tensor *t = mx_permute(storage, MX_SHAPE(back[0], back[1], back[2], back[3]));
  cr_assert(t, "%s", mx_last_error());
  *view = (mx_kview){.data = (void *)values, .dtype = dt, .ndim = 4};
  for (int d = 0; d < 4; d++) view->shape[d] = shape[d], view->strides[d] = strides[d];
  return t;
}

static int64_t count_of(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

/* dx, dw and db of one run of the kernel, in host buffers */
typedef struct {
  void *dx, *dw, *db;
} grads;

static grads run_kernel(const mask_case *c, mx_dtype dt, const mx_kview *g, const mx_kview *mask,
                        const mx_kview *index, const mx_kview *x, const mx_kview *w) {
  size_t size = dt == MX_BF16 ? 2 : 4;
  int64_t xs[4] = {c->n, c->c_in, c->h, c->w}, ws[4] = {c->c_out, c->c_in, 3, 3}, bs[1] = {c->c_out};
  grads r = {calloc((size_t)count_of(4, xs), size), calloc((size_t)count_of(4, ws), size),
             calloc((size_t)c->c_out, size)};
  cr_assert(r.dx && r.dw && r.db);
  mx_kview dx = plain(r.dx, dt, 4, xs), dw = plain(r.dw, dt, 4, ws), db = plain(r.db, dt, 1, bs);
  mx_conv_params cp = {.spatial = 2, .stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1};
  mx_pool_params pp = {.spatial = 2, .kernel = {c->pool, c->pool}, .stride = {c->pool, c->pool}, .dilation = {1, 1}};
  uint64_t runs = mx__cpu_conv_max_pool_relu_runs(true);
  mx_status status = mx__cpu_conv_max_pool_relu_backward(&dx, &dw, &db, g, mask, index, x, w, &cp, &pp, false);
  cr_assert_eq(status, MX_OK, "the kernel: %s", mx_last_error());
  cr_assert_eq(mx__cpu_conv_max_pool_relu_runs(true), runs + 1, "the fused kernel declined");
  return r;
}

static void same_bits(const void *a, const void *b, int64_t count, mx_dtype dt, const char *what, int k,
                      enum layout layout) {
  size_t size = dt == MX_BF16 ? 2 : 4;
  for (int64_t i = 0; i < count; i++) {
    uint32_t u = 0, v = 0;
    memcpy(&u, (const char *)a + size * (size_t)i, size);
    memcpy(&v, (const char *)b + size * (size_t)i, size);
    cr_assert_eq(u, v, "case %d, layout %d, %s: %s element %lld is 0x%x fused, 0x%x in two steps", k, (int)layout,
                 dt == MX_BF16 ? "bfloat16" : "float32", what, (long long)i, u, v);
  }
}

/* One case in one layout: the kernel with g and relu's mask y against relu_backward(g, y), then the kernel. */
static void check_case(int k, mx_dtype dt, enum layout layout) {
  const mask_case *c = &cases[k];
  mx_scope *scope = mx_scope_begin();
  int64_t oh = c->h / c->pool, ow = c->w / c->pool, pooled[4] = {c->n, c->c_out, oh, ow};
  int64_t xs[4] = {c->n, c->c_in, c->h, c->w}, ws[4] = {c->c_out, c->c_in, 3, 3}, count = count_of(4, pooled);
  void *g_values = draw_values(count, dt, true), *y_values = draw_values(count, dt, true);
  void *x_values = draw_values(count_of(4, xs), dt, false), *w_values = draw_values(count_of(4, ws), dt, false);
  uint8_t *offsets = malloc((size_t)count);
  cr_assert(offsets);
  for (int64_t i = 0; i < count; i++) offsets[i] = (uint8_t)(next() % (uint64_t)(c->pool * c->pool));
  mx_kview g, y, masked_view;
  mx_tensor *g_t = laid_out(g_values, pooled, dt, layout == Y_TRANSPOSED ? CONTIGUOUS : layout, &g);
  mx_tensor *y_t = laid_out(y_values, pooled, dt, layout, &y);
  mx_kview index = plain(offsets, MX_U8, 4, pooled), x = plain(x_values, dt, 4, xs), w = plain(w_values, dt, 4, ws);

  /* the two steps: relu_backward as the op runs it, its result contiguous */
  mx_tensor *masked = mx_contiguous(mx_relu_backward(g_t, y_t));
  cr_assert(masked && mx_dtype_of(masked) == dt, "%s", mx_last_error());
  void *masked_values = malloc((dt == MX_BF16 ? 2 : 4) * (size_t)count);
  cr_assert(masked_values && mx_to_host(masked, masked_values, (dt == MX_BF16 ? 2 : 4) * (size_t)count) == MX_OK);
  masked_view = plain(masked_values, dt, 4, pooled);
  grads two_steps = run_kernel(c, dt, &masked_view, NULL, &index, &x, &w);
  grads fused = run_kernel(c, dt, &g, &y, &index, &x, &w);

  same_bits(fused.dx, two_steps.dx, count_of(4, xs), dt, "dx", k, layout);
  same_bits(fused.dw, two_steps.dw, count_of(4, ws), dt, "dw", k, layout);
  same_bits(fused.db, two_steps.db, c->c_out, dt, "db", k, layout);
  void *buffers[] = {g_values, y_values, x_values, w_values, offsets, masked_values, two_steps.dx, two_steps.dw,
                     two_steps.db, fused.dx, fused.dw, fused.db};
  for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) free(buffers[i]);
  mx_scope_end(scope);
}

static void check_all(mx_dtype dt) {
  if (!MX_HAVE_DNNL || !mx__dnnl_native(dt)) cr_skip_test("oneDNN runs no native kernels of this dtype here");
  for (int k = 0; k < CASES; k++)
    for (int layout = 0; layout < LAYOUTS; layout++) check_case(k, dt, (enum layout)layout);
}

Test(conv_pool_mask, float32_fused_mask_is_relu_backward_then_the_kernel_bit_for_bit) { check_all(MX_F32); }
Test(conv_pool_mask, bfloat16_fused_mask_is_relu_backward_then_the_kernel_bit_for_bit) { check_all(MX_BF16); }

/* --- float64 finite differences where relu zeroes whole windows ------------------------------------------------ */


/* The squared norms of the gradients of sum(y r) in x, weight and bias, y the op's output on in[0 .. 2], r = in[3]:
 * differentiated in r, through the backward op's adjoint in its gradient (which gradgradcheck's random cotangents,
 * constants, do not reach). */
static mx_tensor *gradient_norms(int n, mx_tensor *const *in, void *ctx) {
  (void)n;
  mx_tensor *loss = mx_sum(mx_mul(fused_case_conv_pool(3, in, ctx), in[3]), MX_ALL_DIMS, false);
  mx_tensor *g[3] = {NULL}, *sum = NULL;
  if (mx_grad(1, &loss, 3, in, NULL, true, true, false, g) != MX_OK) return NULL;
  for (int i = 0; i < 3; i++) {
    mx_tensor *norm = mx_sum(mx_mul(g[i], g[i]), MX_ALL_DIMS, false);
    sum = sum ? mx_add(sum, norm) : norm;
  }
  return sum;
}

Test(conv_pool_mask, float64_gradients_of_gradients_where_relu_masks_windows) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(38);
  mx_shape shapes[4] = {MX_SHAPE(2, 2, 5, 7), MX_SHAPE(3, 2, 3, 3), MX_SHAPE(3), MX_SHAPE(2, 3, 2, 3)};
  mx_tensor *in[4];
  for (int i = 0; i < 4; i++) {
    mx_tensor *r = mx_to_dtype(mx_randn(shapes[i], MX_F32, MX_CPU, gen), MX_F64);
    in[i] = mx_detach(i == 2 ? mx_sub_scalar(r, 1.5) : r); /* a bias near -1.5 */
    cr_assert(in[i] && mx_set_requires_grad(in[i], true) == MX_OK, "%s", mx_last_error());
  }
  /* relu zeroes a good share of the windows (whose gradients the mask stops), not all */
  mx_tensor *y = fused_case_conv_pool(3, in, NULL);
  double zeros = mx_item(mx_sum(mx_to_dtype(mx_eq_scalar(y, 0), MX_F64), MX_ALL_DIMS, false));
  cr_assert(zeros >= 0.2 * (double)mx_numel(y) && zeros <= 0.8 * (double)mx_numel(y), "%g of %lld windows zero",
            zeros, (long long)mx_numel(y));
  cr_expect_eq(mx_gradcheck(fused_case_conv_pool, 3, in, NULL, 1e-6, 1e-5, 1e-4), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_gradgradcheck(fused_case_conv_pool, 3, in, NULL, 1e-6, 1e-5, 1e-4), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_gradcheck(gradient_norms, 4, in, NULL, 1e-6, 1e-5, 1e-4), MX_OK, "%s", mx_last_error());
  mx_generator_free(gen);
  mx_scope_end(scope);
}

/* The backward op needs relu's output y, its mask: called without it, it says so (it never reads past its inputs). */
Test(conv_pool_mask, the_backward_op_without_y_is_an_error) {
  mx_scope *scope = mx_scope_begin();
  mx_tensor *g = mx_zeros(MX_SHAPE(1, 2, 2, 2), MX_F32, MX_CPU);
  mx_tensor *indices = mx_zeros(MX_SHAPE(1, 2, 2, 2), MX_U8, MX_CPU);
  mx_tensor *x = mx_zeros(MX_SHAPE(1, 1, 4, 4), MX_F32, MX_CPU), *w = mx_zeros(MX_SHAPE(2, 1, 3, 3), MX_F32, MX_CPU);
  mx__args args = {.conv = {.spatial = 2, .stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1},
                   .pool = {.spatial = 2, .kernel = {2, 2}, .stride = {2, 2}, .dilation = {1, 1}}};
  const mx_tensor *in[4] = {g, indices, x, w};
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  EXPECT_STATUS_ERROR(mx__dispatch(MX_OP_CONV2D_MAX_POOL_RELU_BACKWARD, 4, in, &args, out),
                      "mx_conv2d_max_pool_relu: its backward takes 5 inputs (grad, indices, x, weight, y), got 4");
  mx_scope_end(scope);
}
