/* conv2d_max_pool_relu's CPU backward (kernels/cpu/dnnl_conv_pool.c) a chunk of the batch at a time against the
 * whole batch at once, on random values: the chunks add the same terms in another order, so dx, dw and db agree
 * within a bound derived from the sums of the terms' magnitudes (float32's rounding of any two orders, and one
 * rounding to bfloat16 apart). Float32 and bfloat16, the latter in oneDNN's bf16 kernels or, on a CPU without bf16
 * dot products, in its float32 ones (float32 blocks and sums: mx__dnnl_conv_plan.y_dtype); the first layer's case
 * (x needing no gradient, 1 channel) and one with dx (2 channels: the input's gradient in a layout of its own); with
 * and without a bias and relu's mask; 9 and 7 images in chunks of 2, 2, 2, 2, 1 and 2, 2, 2, 1 (a remainder chunk).
 * The bound catches a dropped chunk (the whole batch less its last sample falls outside it, checked below) and, in
 * bfloat16, sums rounded once a chunk (tried by hand: a hundred of the 1152 dw outside with bf16 kernels; on the
 * float32 ones, running sums rounded to bfloat16 each chunk put 8 of case 0's 288 outside). Skipped where the kernel
 * makes no chunks (dnnl_conv_pool.c, may_chunk). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/dnnl.h"
#include "kernels/cpu/dnnl_conv_pool.h"
#include "mx_config.h"
#include "plain_kview.h"

typedef struct {
  int64_t n, c_in, h, w, c_out; /* x is (n, c_in, h, w); 3x3 kernels, padding 1, 2x2 windows */
  bool bias, dx, mask;
} chunk_case;

static const chunk_case cases[] = {
    {9, 1, 12, 12, 32, true, false, false},
    {9, 1, 12, 12, 32, false, false, true},
    {7, 2, 12, 12, 64, true, true, true},
    {7, 2, 12, 12, 64, false, true, false},
};
enum { CASES = sizeof cases / sizeof cases[0] };

static uint64_t state = 0x38u;
static double uniform(void) { /* xorshift64: reproducible draws in [-1, 1) */
  state ^= state << 13, state ^= state >> 7, state ^= state << 17;
  return (double)(state >> 11) / (double)(UINT64_C(1) << 52) - 1;
}

/* count values of dt drawn from [-1, 1) (bfloat16: float32's top halves), and as floats in f. */
static void *draw(int64_t count, mx_dtype dt, float *f) {
  char *v = malloc((dt == MX_BF16 ? 2 : 4) * (size_t)count);
  cr_assert(v);
  for (int64_t i = 0; i < count; i++) {
    float x = (float)uniform();
    uint32_t bits;
    memcpy(&bits, &x, 4);
    if (dt == MX_BF16) {
      uint16_t half = (uint16_t)(bits >> 16);
      memcpy(v + 2 * i, &half, 2);
      bits = (uint32_t)half << 16;
      memcpy(&f[i], &bits, 4);
    } else {
      memcpy(v + 4 * i, &bits, 4);
      f[i] = x;
    }
  }
  return v;
}

static float value(const void *v, mx_dtype dt, int64_t i) {
  uint32_t bits = 0;
  if (dt == MX_BF16) {
    uint16_t half;
    memcpy(&half, (const char *)v + 2 * i, 2);
    bits = (uint32_t)half << 16;
  } else {
    memcpy(&bits, (const char *)v + 4 * i, 4);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* A case's inputs: typed for the kernel, and as floats */
typedef struct {
  void *x, *w, *g, *mask;
  uint8_t *offsets;
  float *xf, *wf, *gf, *mf;
} inputs;

/* A case's gradients */
typedef struct {
  void *dx, *dw, *db;
} grads;

/* The kernel on the case's first n samples into new buffers; chunks: how many the weight's gradient ran in. */
static grads run(const chunk_case *c, mx_dtype dt, const inputs *in, int64_t n, uint64_t *chunks) {
  size_t size = dt == MX_BF16 ? 2 : 4;
  int64_t xs[4] = {n, c->c_in, c->h, c->w}, ws[4] = {c->c_out, c->c_in, 3, 3}, bs[1] = {c->c_out};
  int64_t ps[4] = {n, c->c_out, c->h / 2, c->w / 2};
  grads r = {calloc((size_t)(n * c->c_in * c->h * c->w), size), calloc((size_t)(c->c_out * c->c_in * 9), size),
             calloc((size_t)c->c_out, size)};
  cr_assert(r.dx && r.dw && r.db);
  mx_kview dx = plain(r.dx, dt, 4, xs), dw = plain(r.dw, dt, 4, ws), db = plain(r.db, dt, 1, bs);
  mx_kview x = plain(in->x, dt, 4, xs), w = plain(in->w, dt, 4, ws), g = plain(in->g, dt, 4, ps);
  mx_kview mask = plain(in->mask, dt, 4, ps), index = plain(in->offsets, MX_U8, 4, ps);
  mx_conv_params cp = {.spatial = 2, .stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1};
  mx_pool_params pp = {.spatial = 2, .kernel = {2, 2}, .stride = {2, 2}, .dilation = {1, 1}};
  uint64_t before = mx__cpu_conv_max_pool_relu_weight_chunks();
  mx_status status = mx__cpu_conv_max_pool_relu_backward(c->dx ? &dx : NULL, &dw, c->bias ? &db : NULL, &g,
                                                         c->mask ? &mask : NULL, &index, &x, &w, &cp, &pp, false);
  cr_assert_eq(status, MX_OK, "the kernel: %s", mx_last_error());
  *chunks = mx__cpu_conv_max_pool_relu_weight_chunks() - before;
  return r;
}

/* The elements of a and b (count of dt) further apart than float32's rounding of two orders of m terms whose
 * magnitudes sum to bound[i], and (bfloat16) one rounding apart. */
static int64_t outside(const void *a, const void *b, const double *bound, int64_t count, int64_t m, mx_dtype dt) {
  int64_t bad = 0;
  for (int64_t i = 0; i < count; i++) {
    double u = value(a, dt, i), v = value(b, dt, i), tol = 2.0 * (double)m * ldexp(1, -24) * bound[i];
    int e;
    frexp(fmax(fabs(u), fabs(v)), &e);
    if (dt == MX_BF16) tol += ldexp(1, e - 8); /* a unit in the last place of a bfloat16 as large */
    bad += !(fabs(u - v) <= tol);
  }
  return bad;
}

/* Whether the kernel ran case k in chunks. */
static bool check_case(int k, mx_dtype dt) {
  const chunk_case *c = &cases[k];
  int64_t N = c->n, H = c->h, W = c->w, OH = H / 2, OW = W / 2, C = c->c_out, I = c->c_in;
  int64_t n_x = N * I * H * W, n_w = C * I * 9, n_p = N * C * OH * OW;
  inputs in = {.xf = malloc(sizeof(float) * (size_t)n_x),
               .wf = malloc(sizeof(float) * (size_t)n_w),
               .gf = malloc(sizeof(float) * (size_t)n_p),
               .mf = malloc(sizeof(float) * (size_t)n_p),
               .offsets = malloc((size_t)n_p)};
  cr_assert(in.xf && in.wf && in.gf && in.mf && in.offsets);
  in.x = draw(n_x, dt, in.xf), in.w = draw(n_w, dt, in.wf), in.g = draw(n_p, dt, in.gf);
  in.mask = draw(n_p, dt, in.mf);
  for (int64_t i = 0; i < n_p; i++) in.offsets[i] = (uint8_t)(uniform() * 2 + 2) % 4;

  /* the full-resolution gradient, and the magnitudes of the terms of each sum */
  double *dy = calloc((size_t)(N * C * H * W), sizeof(double)), *bound_dw = calloc((size_t)n_w, sizeof(double));
  double *bound_db = calloc((size_t)C, sizeof(double)), *bound_dx = calloc((size_t)n_x, sizeof(double));
  cr_assert(dy && bound_dw && bound_db && bound_dx);
  for (int64_t p = 0; p < n_p; p++) {
    int64_t ow = p % OW, oh = p / OW % OH, nc = p / (OW * OH), r = in.offsets[p];
    if (!c->mask || in.mf[p] > 0) dy[(nc * H + oh * 2 + r / 2) * W + ow * 2 + r % 2] = in.gf[p];
  }
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < C; o++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t w = 0; w < W; w++) {
          double d = fabs(dy[((n * C + o) * H + h) * W + w]);
          bound_db[o] += d;
          for (int64_t i = 0; i < I; i++)
            for (int64_t kh = 0; kh < 3; kh++)
              for (int64_t kw = 0; kw < 3; kw++) {
                int64_t ih = h + kh - 1, iw = w + kw - 1;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                int64_t xi = ((n * I + i) * H + ih) * W + iw, wi = ((o * I + i) * 3 + kh) * 3 + kw;
                bound_dw[wi] += fabs(in.xf[xi]) * d;
                bound_dx[xi] += fabs(in.wf[wi]) * d;
              }
        }

  uint64_t chunks;
  mx__cpu_conv_max_pool_relu_chunking(INT64_MAX, 4 << 20);
  grads whole = run(c, dt, &in, N, &chunks);
  cr_expect_eq(chunks, 0, "case %d: the whole batch ran in %llu chunks", k, (unsigned long long)chunks);
  /* chunks of 2 samples: 2 a chunk fit (the batch plans' sizes a sample, 16 channels a block) in half the bytes
   * given, what a convolution of under 32 products an element takes (mx__cpu_conv_block_samples) */
  int64_t sample = C * H * W * (dt == MX_BF16 && mx__dnnl_native(dt) ? 2 : 4); /* else float32 blocks */
  mx__cpu_conv_max_pool_relu_chunking(0, 4 * sample + 2);
  grads chunked = run(c, dt, &in, N, &chunks);
  bool in_chunks = chunks > 0; /* none where the kernel may not chunk (dnnl_conv_pool.c, may_chunk) */
  if (in_chunks) cr_expect_eq(chunks, (uint64_t)(N + 1) / 2, "case %d: %llu chunks", k, (unsigned long long)chunks);
  const char *name = dt == MX_BF16 ? "bfloat16" : "float32";
  int64_t bad = outside(chunked.dw, whole.dw, bound_dw, n_w, N * H * W, dt);
  cr_expect_eq(bad, 0, "case %d, %s: %lld of dw's %lld sums apart", k, name, (long long)bad, (long long)n_w);
  if (c->bias) {
    bad = outside(chunked.db, whole.db, bound_db, C, N * H * W, dt);
    cr_expect_eq(bad, 0, "case %d, %s: %lld of db's %lld sums apart", k, name, (long long)bad, (long long)C);
  }
  if (c->dx) {
    bad = outside(chunked.dx, whole.dx, bound_dx, n_x, C * 9, dt);
    cr_expect_eq(bad, 0, "case %d, %s: %lld of dx's %lld sums apart", k, name, (long long)bad, (long long)n_x);
  }

  /* the last chunk (its last sample) dropped: outside the bound */
  mx__cpu_conv_max_pool_relu_chunking(INT64_MAX, 4 << 20);
  grads dropped = run(c, dt, &in, N - 1, &chunks);
  cr_expect_gt(outside(dropped.dw, whole.dw, bound_dw, n_w, N * H * W, dt), 0, "case %d, %s: dw", k, name);
  if (c->bias) cr_expect_gt(outside(dropped.db, whole.db, bound_db, C, N * H * W, dt), 0, "case %d, %s: db", k, name);

  void *buffers[] = {in.x,       in.w,       in.g,       in.mask,    in.offsets, in.xf,     in.wf,    in.gf,
                     in.mf,      dy,         bound_dw,   bound_db,   bound_dx,   whole.dx,  whole.dw, whole.db,
                     chunked.dx, chunked.dw, chunked.db, dropped.dx, dropped.dw, dropped.db};
  for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) free(buffers[i]);
  return in_chunks;
}

static void check_all(mx_dtype dt) {
  if (!MX_HAVE_DNNL) cr_skip_test("oneDNN is not built in");
  int chunked = 0;
  for (int k = 0; k < CASES; k++) chunked += check_case(k, dt);
  if (!chunked) cr_skip_test("the weight's gradient runs in no chunks here (dnnl_conv_pool.c, may_chunk)");
}

Test(conv_pool_chunks, float32_weight_gradient_in_chunks_is_the_whole_batchs_within_its_rounding) { check_all(MX_F32); }
Test(conv_pool_chunks, bfloat16_weight_gradient_in_chunks_is_the_whole_batchs_within_its_rounding) {
  check_all(MX_BF16);
}

/* The kernel stores its float32 sums into dw and db in one pass, so it declines (the op then runs the unfused
 * kernels) a dw or db with strides of its own, which the op never makes. */
Test(conv_pool_chunks, a_weight_gradient_with_strides_of_its_own_is_declined) {
  if (!MX_HAVE_DNNL) cr_skip_test("oneDNN is not built in");
  float x[1 * 1 * 4 * 4] = {0}, w[2 * 9] = {0}, g[2 * 2 * 2] = {0}, dw[2 * 9 * 2], db[4];
  uint8_t offsets[2 * 2 * 2] = {0};
  int64_t xs[4] = {1, 1, 4, 4}, ws[4] = {2, 1, 3, 3}, ps[4] = {1, 2, 2, 2}, bs[1] = {2};
  mx_kview xv = plain(x, MX_F32, 4, xs), wv = plain(w, MX_F32, 4, ws), gv = plain(g, MX_F32, 4, ps);
  mx_kview iv = plain(offsets, MX_U8, 4, ps), dwv = plain(dw, MX_F32, 4, ws), dbv = plain(db, MX_F32, 1, bs);
  mx_conv_params cp = {.spatial = 2, .stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1};
  mx_pool_params pp = {.spatial = 2, .kernel = {2, 2}, .stride = {2, 2}, .dilation = {1, 1}};
  mx_kview every_other = dwv, spread_bias = dbv;
  for (int d = 0; d < 4; d++) every_other.strides[d] *= 2;
  spread_bias.strides[0] = 2;
  cr_expect_eq(mx__cpu_conv_max_pool_relu_backward(NULL, &every_other, &dbv, &gv, NULL, &iv, &xv, &wv, &cp, &pp, false),
               MX_NOT_SUPPORTED);
  cr_expect_eq(mx__cpu_conv_max_pool_relu_backward(NULL, &dwv, &spread_bias, &gv, NULL, &iv, &xv, &wv, &cp, &pp, false),
               MX_NOT_SUPPORTED);
  cr_expect_eq(mx__cpu_conv_max_pool_relu_backward(NULL, &dwv, &dbv, &gv, NULL, &iv, &xv, &wv, &cp, &pp, false), MX_OK,
               "the same call with contiguous gradients: %s", mx_last_error());
}
