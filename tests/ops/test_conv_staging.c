/* 16-bit convolutions on the CPU computed in float32 a block of samples at a time (kernels/cpu/conv.c: via_f32;
 * bfloat16 converted by the float32 primitives' reorders where oneDNN has no bf16 kernel, float16 on float32 copies)
 * against the whole batch at once, and the whole batch against the plain loops and db against the exact sums, on
 * random values. The forward and the input's gradient are each sample's own sums either way; the weight's gradient
 * (and the bias's, summed beside it) adds the blocks' float32 sums, so the same terms in another order. All agree
 * within a bound derived from the sums of the terms' magnitudes (float32's rounding of any two orders, and one
 * rounding to the 16-bit dtype apart). Float16 always; bfloat16 where oneDNN has no native kernel for it (else it is
 * not staged: skipped). 9 images in blocks of 2, 2, 2, 2, 1 (a remainder block), 2 input channels, 3x3 kernels,
 * padding 1. The bound catches a dropped block: the weight's gradient of the batch less its last sample falls outside
 * it, checked below. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/dnnl.h"
#include "kernels/math.h"
#include "plain_kview.h"

enum { N = 9, I = 2, O = 4, H = 10, W = 10, K = 3 }; /* x (N, I, H, W), w (O, I, K, K), y (N, O, H, W) */
enum { NX = N * I * H * W, NW = O * I * K * K, NY = N * O * H * W };

static uint64_t state = 0x5eedu;
static double uniform(void) { /* xorshift64: reproducible draws in [-1, 1) */
  state ^= state << 13, state ^= state >> 7, state ^= state << 17;
  return (double)(state >> 11) / (double)(UINT64_C(1) << 52) - 1;
}

static uint16_t narrow(float f, mx_dtype dt) { return dt == MX_F16 ? mx_f32_to_f16(f) : mx_f32_to_bf16(f); }
static float widen(uint16_t h, mx_dtype dt) { return dt == MX_F16 ? mx_f16_to_f32(h) : mx_bf16_to_f32(h); }

/* count 16-bit values drawn from [-1, 1) into v, and as floats into f. */
static void draw(uint16_t *v, float *f, int64_t count, mx_dtype dt) {
  for (int64_t i = 0; i < count; i++) v[i] = narrow((float)uniform(), dt), f[i] = widen(v[i], dt);
}

/* The operands, 16-bit and as floats, and the magnitudes of each output's terms. */
typedef struct {
  uint16_t x[NX], w[NW], dy[NY], bias[O];
  float xf[NX], wf[NW], dyf[NY], biasf[O];
  double bound_y[NY], bound_dx[NX], bound_dw[NW], bound_db[O];
  double sum_db[O]; /* dy summed per channel, exactly */
} operands;

static void bounds(operands *o) {
  memset(o->bound_y, 0, sizeof o->bound_y), memset(o->bound_dx, 0, sizeof o->bound_dx);
  memset(o->bound_dw, 0, sizeof o->bound_dw), memset(o->bound_db, 0, sizeof o->bound_db);
  memset(o->sum_db, 0, sizeof o->sum_db);
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < O; c++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t x = 0; x < W; x++) {
          int64_t yi = ((n * O + c) * H + h) * W + x;
          double d = fabs(o->dyf[yi]);
          o->bound_db[c] += d;
          o->sum_db[c] += o->dyf[yi];
          o->bound_y[yi] += fabs(o->biasf[c]);
          for (int64_t i = 0; i < I; i++)
            for (int64_t kh = 0; kh < K; kh++)
              for (int64_t kw = 0; kw < K; kw++) {
                int64_t ih = h + kh - 1, iw = x + kw - 1;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                int64_t xi = ((n * I + i) * H + ih) * W + iw, wi = ((c * I + i) * K + kh) * K + kw;
                o->bound_y[yi] += fabs(o->xf[xi] * o->wf[wi]);
                o->bound_dx[xi] += fabs(o->wf[wi]) * d;
                o->bound_dw[wi] += fabs(o->xf[xi]) * d;
              }
        }
}

/* The elements of a and b further apart than float32's rounding of two orders of m terms whose magnitudes sum to
 * bound[i], and one rounding to dt apart. */
static int64_t outside(const uint16_t *a, const uint16_t *b, const double *bound, int64_t count, int64_t m,
                       mx_dtype dt) {
  int64_t bad = 0;
  for (int64_t i = 0; i < count; i++) {
    double u = widen(a[i], dt), v = widen(b[i], dt), tol = 2.0 * (double)m * ldexp(1, -24) * bound[i];
    int e;
    frexp(fmax(fabs(u), fabs(v)), &e);
    tol += ldexp(1, e - (dt == MX_F16 ? 11 : 8)); /* a unit in the last place of a 16-bit value as large */
    bad += !(fabs(u - v) <= tol);
  }
  return bad;
}

/* The kernels' results on the first n samples. */
typedef struct {
  uint16_t y[NY], dx[NX], dw[NW], db[O];
} results;

/* The three kernels on o's first n samples into r (the plain loops' when reference; db then untouched); blocks: how
 * many blocks of samples they ran in. */
static void run(const operands *o, mx_dtype dt, int64_t n, results *r, uint64_t *blocks, bool reference) {
  int64_t xs[4] = {n, I, H, W}, ws[4] = {O, I, K, K}, ys[4] = {n, O, H, W}, bs[1] = {O};
  mx_kview x = plain((void *)o->x, dt, 4, xs), w = plain((void *)o->w, dt, 4, ws), dy = plain((void *)o->dy, dt, 4, ys);
  mx_kview bias = plain((void *)o->bias, dt, 1, bs), y = plain(r->y, dt, 4, ys), dx = plain(r->dx, dt, 4, xs);
  mx_kview dw = plain(r->dw, dt, 4, ws), db = plain(r->db, dt, 1, bs);
  mx_conv_params p = {.spatial = 2, .stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1};
  uint64_t before = mx__cpu_conv_staged_blocks();
  if (reference) {
    cr_assert_eq(mx__cpu_conv_forward_reference(&y, &x, &w, &bias, &p), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx__cpu_conv_backward_data_reference(&dx, &dy, &w, &p), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx__cpu_conv_backward_weight_reference(&dw, &dy, &x, &p), MX_OK, "%s", mx_last_error());
    *blocks = mx__cpu_conv_staged_blocks() - before;
    return;
  }
  cr_assert_eq(mx__cpu_conv_forward(&y, &x, &w, &bias, &p), MX_OK, "forward: %s", mx_last_error());
  cr_assert_eq(mx__cpu_conv_backward_data(&dx, &dy, &w, &p), MX_OK, "backward data: %s", mx_last_error());
  cr_assert_eq(mx__cpu_conv_backward_weight_bias(&dw, &db, &dy, &x, &p), MX_OK, "backward weight: %s",
               mx_last_error());
  *blocks = mx__cpu_conv_staged_blocks() - before;
}

static void check(mx_dtype dt) {
  const char *name = mx_dtype_name(dt);
  operands *o = malloc(sizeof *o);
  results *whole = calloc(1, sizeof *whole), *blocked = calloc(1, sizeof *blocked);
  results *dropped = calloc(1, sizeof *dropped), *loops = calloc(1, sizeof *loops);
  cr_assert(o && whole && blocked && dropped && loops);
  draw(o->x, o->xf, NX, dt), draw(o->w, o->wf, NW, dt), draw(o->dy, o->dyf, NY, dt), draw(o->bias, o->biasf, O, dt);
  bounds(o);

  uint64_t blocks;
  mx__cpu_conv_staging(INT64_MAX, 4 << 20);
  run(o, dt, N, whole, &blocks, false);
  cr_expect_eq(blocks, 0, "%s: the whole batch ran in %llu blocks", name, (unsigned long long)blocks);
  /* the whole batch against the plain loops on float32 copies (bfloat16's kernels convert in oneDNN's reorders) */
  run(o, dt, N, loops, &blocks, true);
  int64_t apart = outside(loops->y, whole->y, o->bound_y, NY, I * K * K + 1, dt) +
                  outside(loops->dx, whole->dx, o->bound_dx, NX, O * K * K, dt) +
                  outside(loops->dw, whole->dw, o->bound_dw, NW, N * H * W, dt);
  cr_expect_eq(apart, 0, "%s: %lld of the loops' sums apart from the kernels'", name, (long long)apart);
  uint16_t db[O]; /* the loops write none: the exact sums, rounded */
  for (int c = 0; c < O; c++) db[c] = narrow((float)o->sum_db[c], dt);
  apart = outside(db, whole->db, o->bound_db, O, N * H * W, dt);
  cr_expect_eq(apart, 0, "%s: %lld of db's %d sums apart from the exact ones", name, (long long)apart, O);
  /* blocks of 2 samples: a sample's float32 x and y take 4 (I + O) H W bytes, and with 12 products an element
   * (I K K of them for each of y's O H W) the blocks take half the bytes given */
  mx__cpu_conv_staging(0, 2 * (2 * 4 * (I + O) * H * W + 1));
  run(o, dt, N, blocked, &blocks, false);
  cr_expect_eq(blocks, 3 * 5, "%s: %llu blocks for three kernels in five", name, (unsigned long long)blocks);
  int64_t bad = outside(blocked->y, whole->y, o->bound_y, NY, I * K * K + 1, dt);
  cr_expect_eq(bad, 0, "%s: %lld of y's %d sums apart", name, (long long)bad, NY);
  bad = outside(blocked->dx, whole->dx, o->bound_dx, NX, O * K * K, dt);
  cr_expect_eq(bad, 0, "%s: %lld of dx's %d sums apart", name, (long long)bad, NX);
  bad = outside(blocked->dw, whole->dw, o->bound_dw, NW, N * H * W, dt);
  cr_expect_eq(bad, 0, "%s: %lld of dw's %d sums apart", name, (long long)bad, NW);
  bad = outside(blocked->db, whole->db, o->bound_db, O, N * H * W, dt);
  cr_expect_eq(bad, 0, "%s: %lld of db's %d sums apart", name, (long long)bad, O);

  /* the last block's last sample dropped: the weight's gradient falls outside the bound */
  run(o, dt, N - 1, dropped, &blocks, false);
  cr_expect_gt(outside(dropped->dw, whole->dw, o->bound_dw, NW, N * H * W, dt), 0, "%s: dw", name);
  mx__cpu_conv_staging(16 << 20, 4 << 20);
  free(o), free(whole), free(blocked), free(dropped), free(loops);
}

Test(conv_staging, float16_blocks_agree_with_the_whole_batch) { check(MX_F16); }

Test(conv_staging, bfloat16_blocks_agree_with_the_whole_batch) {
  if (mx__dnnl_native(MX_BF16)) cr_skip_test("oneDNN runs bfloat16 natively here: nothing is staged");
  check(MX_BF16);
}
