/* Batch norm's per-channel kernels over contiguous (N, C, *) tensors.
 * Planes of one value each ((R, C): a batch of vectors, or a channels-last
 * tensor as the op hands it, the (N H W, C) matrix of its pixels) go
 * through row kernels at the end of this file, channel innermost.
 *
 * channel_affine: y = (x - center[c]) * scale[c] + shift[c], one plane of
 * one channel at a time: what batch norm's sub, mul, add and cast did in
 * four passes, in one. The arithmetic is theirs, so the bits are too:
 * float32 (float64 for float64), the difference rounded, then the product,
 * then the sum, then the store into y's dtype; no FMA (C11 mode does not
 * contract). Without a center it subtracts 0, which changes no value
 * (-0 - 0 is -0). A fused ReLU is kernels/math.h's: on x before (the mask,
 * relu's backward) and on y as stored after (relu).
 *
 * The loops that measured faster wider are MX_WIDE_CLONES (a whole plane
 * or row a call): wider vectors change no bits, since nothing contracts
 * and no float sum is reassociated. bfloat16 planes are widened (a shift)
 * and rounded (mx__bf16_nearest) inside the affine and combine loops; the
 * plain sums and the moments stayed 4 lanes wide, which measured faster
 * than their wide clones (one accumulator register is one chain of adds),
 * but read large planes in memory order (LANES_MIN_PLANE). */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/batch_norm.h"

#include "kernels/cpu/convert.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/wide_clones.h"

enum { BLOCK = 512 };

/* The row kernels for planes of one value, an (R, C) matrix (the end of this file). */
static mx_status affine_rows(const mx_kview *y, const mx_kview *x, const mx_kview *center, const mx_kview *scale,
                             const mx_kview *shift, const mx_kview *mask, bool relu);
static mx_status sums_rows(const mx_kview *sum, const mx_kview *dot, const mx_kview *a, const mx_kview *b,
                           const mx_kview *a_center, const mx_kview *b_center, const mx_kview *a_mask);
static mx_status moments_rows(const mx_kview *mean, const mx_kview *var, const mx_kview *x);

/* A plane of y = (x - m) s + b in T, x zeroed where mask <= 0 when masked,
 * y through relu when relu: the flags are constants where it is inlined, so
 * each combination is a loop of its own. */
#define MX__AFFINE_PLANE(name, T, relu_fn, relu_grad_fn)                                                      \
  static inline __attribute__((always_inline)) void name##_body(T *y, const T *x, const T *mask, int64_t n, T m, \
                                                                T s, T b, bool masked, bool relu) {            \
    for (int64_t i = 0; i < n; i++) {                                                                          \
      T v = masked ? relu_grad_fn(x[i], mask[i]) : x[i];                                                       \
      T r = (v - m) * s + b;                                                                                   \
      y[i] = relu ? relu_fn(r) : r;                                                                            \
    }                                                                                                          \
  }                                                                                                            \
  MX_WIDE_CLONES static void name(T *y, const T *x, const T *mask, int64_t n, T m, T s, T b, bool relu) {      \
    if (mask && relu) name##_body(y, x, mask, n, m, s, b, true, true);                                         \
    else if (mask) name##_body(y, x, mask, n, m, s, b, true, false);                                           \
    else if (relu) name##_body(y, x, mask, n, m, s, b, false, true);                                           \
    else name##_body(y, x, mask, n, m, s, b, false, false);                                                    \
  }
MX__AFFINE_PLANE(plane_f32, float, mx_relu_f32, mx_relu_grad_f32)
MX__AFFINE_PLANE(plane_f64, double, mx_relu_f64, mx_relu_grad_f64)

/* A bfloat16 plane of the same y, widened and rounded in the loop (a shift
 * and mx__bf16_nearest, which vectorise): plane_16's blocks' bits with no
 * block buffers. */
static inline __attribute__((always_inline)) void plane_bf16_body(uint16_t *y, const uint16_t *x,
                                                                  const uint16_t *mask, int64_t n, float m, float s,
                                                                  float b, bool masked, bool relu) {
  for (int64_t i = 0; i < n; i++) {
    float v = masked ? mx_relu_grad_f32(mx_bf16_to_f32(x[i]), mx_bf16_to_f32(mask[i])) : mx_bf16_to_f32(x[i]);
    uint16_t r = mx__bf16_nearest((v - m) * s + b);
    y[i] = relu ? mx_relu_half_bits(r, true) : r;
  }
}

MX_WIDE_CLONES static void plane_bf16(uint16_t *y, const uint16_t *x, const uint16_t *mask, int64_t n, float m,
                                      float s, float b, bool relu) {
  if (mask && relu) plane_bf16_body(y, x, mask, n, m, s, b, true, true);
  else if (mask) plane_bf16_body(y, x, mask, n, m, s, b, true, false);
  else if (relu) plane_bf16_body(y, x, mask, n, m, s, b, false, true);
  else plane_bf16_body(y, x, mask, n, m, s, b, false, false);
}

static void widen(float *out, const uint16_t *in, int64_t n, bool bf16) {
  if (bf16) mx__bf16_to_f32_n(in, out, n);
  else mx__f16_to_f32_n(in, out, n);
}

/* 16-bit planes go through float32 blocks: widened, computed, rounded back,
 * and relu applied to the rounded bits (bfloat16 ones in plane_bf16). */
static void plane_16(uint16_t *y, const uint16_t *x, const uint16_t *mask, int64_t n, float m, float s, float b,
                     bool relu, bool bf16) {
  if (bf16) {
    plane_bf16(y, x, mask, n, m, s, b, relu);
    return;
  }
  float block[BLOCK], mask_block[BLOCK];
  for (int64_t i = 0; i < n; i += BLOCK) {
    int64_t k = n - i < BLOCK ? n - i : BLOCK;
    widen(block, x + i, k, bf16);
    if (mask) widen(mask_block, mask + i, k, bf16);
    plane_f32(block, block, mask ? mask_block : NULL, k, m, s, b, false);
    if (bf16) mx__f32_to_bf16_n(block, y + i, k);
    else mx__f32_to_f16_n(block, y + i, k);
    for (int64_t j = 0; relu && j < k; j++) y[i + j] = mx_relu_half_bits(y[i + j], bf16);
  }
}

/* Element c of a (C) vector in its dtype, or 0 for a missing one. */
static double at(const mx_kview *v, int64_t c) {
  if (!v) return 0;
  return v->dtype == MX_F64 ? ((const double *)v->data)[c] : ((const float *)v->data)[c];
}

mx_status mx__cpu_channel_affine(const mx_kview *y, const mx_kview *x, const mx_kview *center, const mx_kview *scale,
                                 const mx_kview *shift, const mx_kview *mask, bool relu) {
  int64_t channels = x->shape[1], planes = x->shape[0] * channels;
  int64_t n = planes ? mx__kview_numel(x) / planes : 0;
  if (n == 1) return affine_rows(y, x, center, scale, shift, mask, relu);
  size_t size = mx_dtype_size(x->dtype);
  MX_PARALLEL_FOR(planes * n)
  for (int64_t p = 0; p < planes; p++) {
    int64_t c = p % channels, offset = p * n * (int64_t)size;
    const char *xp = (const char *)x->data + offset, *mp = mask ? (const char *)mask->data + offset : NULL;
    char *yp = (char *)y->data + offset;
    double m = at(center, c), s = at(scale, c), b = at(shift, c);
    if (x->dtype == MX_F64)
      plane_f64((double *)yp, (const double *)xp, (const double *)mp, n, m, s, b, relu);
    else if (x->dtype == MX_F32)
      plane_f32((float *)yp, (const float *)xp, (const float *)mp, n, (float)m, (float)s, (float)b, relu);
    else
      plane_16((uint16_t *)yp, (const uint16_t *)xp, (const uint16_t *)mp, n, (float)m, (float)s, (float)b, relu,
               x->dtype == MX_BF16);
  }
  return MX_OK;
}

/* --- sums ------------------------------------------------------------------------------------------ */

/* channel_sums: sum[c] = sum of a and dot[c] = sum of (a - a_center[c])
 * (b - b_center[c]) over every dim but the channels: what batch norm's
 * subtractions, product and sums did in several passes, with a float32 (or
 * float64) temporary for each, in one pass that reads a and b once. Each
 * difference and product is rounded in the sums' dtype as the elementwise
 * ops round it; only the order of the additions differs: 16 lanes in
 * float32 over blocks of 512 (bfloat16 widened in the loop, float16 a
 * block at a time), the blocks' sums added in double. */
enum { LANES = 16 };

/* A block's LANES partial sums, as the block leaves them. */
typedef struct {
  float sum[LANES], dot[LANES];
} lane_sums;

/* Where the blocks' lanes go: added into sum and dot in lane order, or,
 * given lanes, stored there block after block for that addition later. */
typedef struct {
  double sum, dot;
  lane_sums *lanes;
} sums;

static float f32_of_f32(float v) { return v; }
static float f32_of_bf16(uint16_t v) { return mx_bf16_to_f32(v); } /* exact: a shift */

/* A block of at most BLOCK values of type, loaded as float32 (bfloat16
 * widened in the loop), in LANES partial sums the vectoriser keeps in
 * registers (it does not reassociate a float sum); b NULL: only the sum;
 * masked: a zeroed where mask <= 0 (relu's backward), the bits the sums
 * give on the masked tensor. */
#define MX__SUMS_BLOCK(name, type, load)                                                                     \
  static inline __attribute__((always_inline)) void name(sums *s, const type *a, const type *b,             \
                                                         const type *mask, int64_t n, float ca, float cb,   \
                                                         bool masked) {                                     \
    float sum[LANES] = {0}, dot[LANES] = {0};                                                                \
    int64_t full = n - n % LANES;                                                                            \
    if (b) {                                                                                                 \
      for (int64_t i = 0; i < full; i += LANES)                                                              \
        for (int l = 0; l < LANES; l++) {                                                                    \
          float v = MX__SUMS_VALUE(i + l, load);                                                             \
          sum[l] += v;                                                                                       \
          dot[l] += (v - ca) * (load(b[i + l]) - cb);                                                        \
        }                                                                                                    \
      for (int64_t i = full; i < n; i++) dot[i - full] += (MX__SUMS_VALUE(i, load) - ca) * (load(b[i]) - cb); \
    } else {                                                                                                 \
      for (int64_t i = 0; i < full; i += LANES)                                                              \
        for (int l = 0; l < LANES; l++) sum[l] += MX__SUMS_VALUE(i + l, load);                              \
    }                                                                                                        \
    for (int64_t i = full; i < n; i++) sum[i - full] += MX__SUMS_VALUE(i, load);                             \
    if (s->lanes) {                                                                                          \
      memcpy(s->lanes->sum, sum, sizeof sum), memcpy(s->lanes->dot, dot, sizeof dot), s->lanes++;            \
      return;                                                                                                \
    }                                                                                                        \
    for (int l = 0; l < LANES; l++) s->sum += sum[l], s->dot += dot[l];                                      \
  }
#define MX__SUMS_VALUE(i, load) (masked ? mx_relu_grad_f32(load(a[i]), load(mask[i])) : load(a[i]))
MX__SUMS_BLOCK(sums_block_f32, float, f32_of_f32)
MX__SUMS_BLOCK(sums_block_bf16, uint16_t, f32_of_bf16)

/* A plane of float32 or bfloat16, block by block (masked a constant where inlined). */
static inline __attribute__((always_inline)) void sums_plane_body(sums *s, const void *a, const void *b,
                                                                  const void *mask, int64_t n, float ca, float cb,
                                                                  bool bf16, bool masked) {
  for (int64_t i = 0; i < n; i += BLOCK) {
    int64_t m = n - i < BLOCK ? n - i : BLOCK;
    if (bf16)
      sums_block_bf16(s, (const uint16_t *)a + i, b ? (const uint16_t *)b + i : NULL,
                      masked ? (const uint16_t *)mask + i : NULL, m, ca, cb, masked);
    else
      sums_block_f32(s, (const float *)a + i, b ? (const float *)b + i : NULL, masked ? (const float *)mask + i : NULL,
                     m, ca, cb, masked);
  }
}

static void sums_plane(sums *s, const void *a, const void *b, int64_t n, float ca, float cb, bool bf16) {
  sums_plane_body(s, a, b, NULL, n, ca, cb, bf16, false);
}

/* A float32 or bfloat16 plane through relu's backward: the blocks and the
 * lanes are the unmasked planes', so the sums are the bits those give on
 * the masked tensor. */
MX_WIDE_CLONES static void sums_plane_masked(sums *s, const void *a, const void *b, const void *mask, int64_t n,
                                             float ca, float cb, bool bf16) {
  if (bf16) sums_plane_body(s, a, b, mask, n, ca, cb, true, true);
  else sums_plane_body(s, a, b, mask, n, ca, cb, false, true);
}

static void sums_plane_f64(sums *s, const double *a, const double *b, const double *mask, int64_t n, double ca,
                           double cb) {
  for (int64_t i = 0; i < n; i++) {
    double v = mask ? mx_relu_grad_f64(a[i], mask[i]) : a[i];
    s->sum += v;
    if (b) s->dot += (v - ca) * (b[i] - cb);
  }
}

/* float16 widened a block at a time (F16C), masked or not. */
static void sums_plane_f16(sums *s, const uint16_t *a, const uint16_t *b, const uint16_t *mask, int64_t n, float ca,
                           float cb) {
  float wa[BLOCK], wb[BLOCK], wm[BLOCK];
  for (int64_t i = 0; i < n; i += BLOCK) {
    int64_t m = n - i < BLOCK ? n - i : BLOCK;
    widen(wa, a + i, m, false);
    if (b) widen(wb, b + i, m, false);
    if (mask) widen(wm, mask + i, m, false);
    if (mask) sums_plane_masked(s, wa, b ? wb : NULL, wm, m, ca, cb, false);
    else sums_plane(s, wa, b ? wb : NULL, m, ca, cb, false);
  }
}

static void store(const mx_kview *v, int64_t c, double value) {
  if (!v) return;
  if (v->dtype == MX_F64) ((double *)v->data)[c] = value;
  else ((float *)v->data)[c] = (float)value;
}

/* Plane k of channel c into s. */
static void sums_of_plane(sums *s, const mx_kview *a, const mx_kview *b, const mx_kview *a_center,
                          const mx_kview *b_center, const mx_kview *a_mask, int64_t k, int64_t c, int64_t n) {
  int64_t offset = (k * a->shape[1] + c) * n * (int64_t)mx_dtype_size(a->dtype);
  const char *ap = (const char *)a->data + offset, *bp = b ? (const char *)b->data + offset : NULL;
  const char *mp = a_mask ? (const char *)a_mask->data + offset : NULL;
  double ca = at(a_center, c), cb = at(b_center, c);
  if (a->dtype == MX_F64) sums_plane_f64(s, (const double *)ap, (const double *)bp, (const double *)mp, n, ca, cb);
  else if (a->dtype == MX_F16)
    sums_plane_f16(s, (const uint16_t *)ap, (const uint16_t *)bp, (const uint16_t *)mp, n, (float)ca, (float)cb);
  else if (mp) sums_plane_masked(s, ap, bp, mp, n, (float)ca, (float)cb, a->dtype == MX_BF16);
  else sums_plane(s, ap, bp, n, (float)ca, (float)cb, a->dtype == MX_BF16);
}

/* Planes of at least this many values are read in memory order, their
 * blocks' lanes stored, then added per channel in the order a channel's
 * walk adds them (the same bits): a channel's planes lie a batch stride
 * apart, which the hardware prefetchers do not follow. Smaller planes
 * would store more lanes than they read. */
enum { LANES_MIN_PLANE = 256 };

mx_status mx__cpu_channel_sums(const mx_kview *sum, const mx_kview *dot, const mx_kview *a, const mx_kview *b,
                               const mx_kview *a_center, const mx_kview *b_center, const mx_kview *a_mask) {
  int64_t channels = a->shape[1], batch = a->shape[0];
  int64_t planes = batch * channels, n = planes ? mx__kview_numel(a) / planes : 0;
  if (n == 1) return sums_rows(sum, dot, a, b, a_center, b_center, a_mask);
  if (!dot) b = NULL;
  if (a->dtype == MX_F64 || n < LANES_MIN_PLANE) {
    MX_PARALLEL_FOR(planes * n)
    for (int64_t c = 0; c < channels; c++) {
      sums s = {0, 0, NULL};
      for (int64_t k = 0; k < batch; k++) sums_of_plane(&s, a, b, a_center, b_center, a_mask, k, c, n);
      store(sum, c, s.sum);
      store(dot, c, s.dot);
    }
    return MX_OK;
  }
  const int64_t blocks = (n + BLOCK - 1) / BLOCK; /* a plane's */
  lane_sums *lanes = malloc((size_t)(planes * blocks) * sizeof *lanes);
  if (!lanes)
    return mx__error(MX_OUT_OF_MEMORY, "channel_sums: out of memory for %lld blocks' partial sums",
                     (long long)(planes * blocks));
  MX_PARALLEL_FOR(planes * n)
  for (int64_t p = 0; p < planes; p++) {
    sums s = {0, 0, lanes + p * blocks};
    sums_of_plane(&s, a, b, a_center, b_center, a_mask, p / channels, p % channels, n);
  }
  MX_PARALLEL_FOR(planes * blocks * LANES)
  for (int64_t c = 0; c < channels; c++) {
    double total_sum = 0, total_dot = 0;
    for (int64_t k = 0; k < batch; k++)
      for (const lane_sums *l = lanes + (k * channels + c) * blocks, *end = l + blocks; l < end; l++)
        for (int j = 0; j < LANES; j++) total_sum += l->sum[j], total_dot += l->dot[j];
    store(sum, c, total_sum);
    store(dot, c, total_dot);
  }
  free(lanes);
  return MX_OK;
}

/* --- moments --------------------------------------------------------------------------------------- */

/* channel_moments: the sums of x - k and of its square in double, over
 * DOUBLE_LANES partial sums the vectoriser keeps in registers, x widened
 * exactly (16-bit values a block at a time through float32). */
enum { DOUBLE_LANES = 8 };

/* A block's lanes, as it leaves them. */
typedef struct {
  double s1[DOUBLE_LANES], s2[DOUBLE_LANES];
} lane_moments;

/* Where the blocks' lanes go, as with sums: added in lane order, or stored block after block. */
typedef struct {
  double s1, s2;
  lane_moments *lanes;
} moments;

#define MX__MOMENTS_PLANE(name, type)                                                                        \
  static void name(moments *s, const type *x, int64_t n, double k) {                                        \
    double a[DOUBLE_LANES] = {0}, b[DOUBLE_LANES] = {0};                                                     \
    int64_t full = n - n % DOUBLE_LANES;                                                                     \
    for (int64_t i = 0; i < full; i += DOUBLE_LANES)                                                         \
      for (int l = 0; l < DOUBLE_LANES; l++) {                                                               \
        double d = (double)x[i + l] - k;                                                                     \
        a[l] += d, b[l] += d * d;                                                                            \
      }                                                                                                      \
    for (int64_t i = full; i < n; i++) {                                                                     \
      double d = (double)x[i] - k;                                                                           \
      a[i - full] += d, b[i - full] += d * d;                                                                \
    }                                                                                                        \
    if (s->lanes) {                                                                                          \
      memcpy(s->lanes->s1, a, sizeof a), memcpy(s->lanes->s2, b, sizeof b), s->lanes++;                      \
      return;                                                                                                \
    }                                                                                                        \
    for (int l = 0; l < DOUBLE_LANES; l++) s->s1 += a[l], s->s2 += b[l];                                     \
  }
MX__MOMENTS_PLANE(moments_plane_f32, float)
MX__MOMENTS_PLANE(moments_plane_f64, double)

static void moments_plane_16(moments *s, const uint16_t *x, int64_t n, double k, bool bf16) {
  float block[BLOCK];
  for (int64_t i = 0; i < n; i += BLOCK) {
    int64_t m = n - i < BLOCK ? n - i : BLOCK;
    widen(block, x + i, m, bf16);
    moments_plane_f32(s, block, m, k);
  }
}

/* Plane b of channel c into s; k: the channel's first value. */
static void moments_of_plane(moments *s, const mx_kview *x, int64_t b, int64_t c, int64_t n, double k) {
  const char *xp = (const char *)x->data + (b * x->shape[1] + c) * n * (int64_t)mx_dtype_size(x->dtype);
  if (x->dtype == MX_F64) moments_plane_f64(s, (const double *)xp, n, k);
  else if (x->dtype == MX_F32) moments_plane_f32(s, (const float *)xp, n, k);
  else moments_plane_16(s, (const uint16_t *)xp, n, k, x->dtype == MX_BF16);
}

static double first_of_channel(const mx_kview *x, int64_t c, int64_t n) {
  return mx_element_load((const char *)x->data + c * n * (int64_t)mx_dtype_size(x->dtype), x->dtype);
}

static void store_moments(const mx_kview *mean, const mx_kview *var, int64_t c, double k, double s1, double s2,
                          double count) {
  double m, v;
  mx_moments_of(k, s1, s2, count, &m, &v);
  store(mean, c, m);
  store(var, c, v);
}

/* Planes of at least LANES_MIN_PLANE values are read in memory order, as channel_sums reads them. */
mx_status mx__cpu_channel_moments(const mx_kview *mean, const mx_kview *var, const mx_kview *x) {
  int64_t channels = x->shape[1], batch = x->shape[0];
  int64_t planes = batch * channels, n = planes ? mx__kview_numel(x) / planes : 0;
  if (n == 1) return moments_rows(mean, var, x);
  if (n < LANES_MIN_PLANE) {
    MX_PARALLEL_FOR(planes * n)
    for (int64_t c = 0; c < channels; c++) {
      moments s = {0, 0, NULL};
      double k = batch > 0 && n > 0 ? first_of_channel(x, c, n) : 0;
      for (int64_t b = 0; b < batch; b++) moments_of_plane(&s, x, b, c, n, k);
      store_moments(mean, var, c, k, s.s1, s.s2, (double)(batch * n));
    }
    return MX_OK;
  }
  /* a plane's blocks: one for float32 and float64, BLOCK values each for 16-bit ones */
  const int64_t blocks = x->dtype == MX_F32 || x->dtype == MX_F64 ? 1 : (n + BLOCK - 1) / BLOCK;
  lane_moments *lanes = malloc((size_t)(planes * blocks) * sizeof *lanes);
  if (!lanes)
    return mx__error(MX_OUT_OF_MEMORY, "channel_moments: out of memory for %lld blocks' partial sums",
                     (long long)(planes * blocks));
  MX_PARALLEL_FOR(planes * n)
  for (int64_t p = 0; p < planes; p++) {
    moments s = {0, 0, lanes + p * blocks};
    moments_of_plane(&s, x, p / channels, p % channels, n, first_of_channel(x, p % channels, n));
  }
  MX_PARALLEL_FOR(planes * blocks * DOUBLE_LANES)
  for (int64_t c = 0; c < channels; c++) {
    double s1 = 0, s2 = 0;
    for (int64_t b = 0; b < batch; b++)
      for (const lane_moments *l = lanes + (b * channels + c) * blocks, *end = l + blocks; l < end; l++)
        for (int j = 0; j < DOUBLE_LANES; j++) s1 += l->s1[j], s2 += l->s2[j];
    store_moments(mean, var, c, first_of_channel(x, c, n), s1, s2, (double)(batch * n));
  }
  free(lanes);
  return MX_OK;
}

/* --- rows: planes of one value --------------------------------------------------------------------- */

/* An (R, C) matrix holds each row's C channels side by side, so these
 * kernels run along rows, channel innermost, with per-channel vectors:
 * loops that vectorise across the channels. channel_affine's arithmetic
 * per element is the planes' (the same bits); the sums add the same
 * values in another order: float32 runs of ROW_RUN rows per channel (the
 * planes' lanes add runs of 32 too) into double partials over fixed
 * chunks of rows, added in chunk order, so no result depends on the
 * number of threads. */
enum { ROW_TILE = 64, ROW_RUN = 32, MAX_CHUNKS = 64, MIN_CHUNK_ROWS = 1024 };

/* Elements c0 .. c0 + m of row r of a float32 or 16-bit matrix as float32:
 * in place, or widened (exactly) into buf. */
static const float *row_f32(const void *base, int64_t r, int64_t C, int64_t c0, int64_t m, mx_dtype dt, float *buf) {
  if (dt == MX_F32) return (const float *)base + r * C + c0;
  widen(buf, (const uint16_t *)base + r * C + c0, m, dt == MX_BF16);
  return buf;
}

/* A row of y = (x - m[c]) s[c] + b[c] in T, with plane_f32's mask and relu. */
#define MX__AFFINE_ROW(name, T, relu_fn, relu_grad_fn)                                                         \
  static inline __attribute__((always_inline)) void name##_body(T *y, const T *x, const T *mask, int64_t n,     \
                                                                const T *m, const T *s, const T *b, bool masked, \
                                                                bool relu) {                                   \
    for (int64_t i = 0; i < n; i++) {                                                                          \
      T v = masked ? relu_grad_fn(x[i], mask[i]) : x[i];                                                       \
      T r = (v - m[i]) * s[i] + b[i];                                                                          \
      y[i] = relu ? relu_fn(r) : r;                                                                            \
    }                                                                                                          \
  }                                                                                                            \
  MX_WIDE_CLONES static void name(T *y, const T *x, const T *mask, int64_t n, const T *m, const T *s, const T *b, \
                                  bool relu) {                                                                 \
    if (mask && relu) name##_body(y, x, mask, n, m, s, b, true, true);                                         \
    else if (mask) name##_body(y, x, mask, n, m, s, b, true, false);                                           \
    else if (relu) name##_body(y, x, mask, n, m, s, b, false, true);                                           \
    else name##_body(y, x, mask, n, m, s, b, false, false);                                                    \
  }
MX__AFFINE_ROW(row_affine_f32, float, mx_relu_f32, mx_relu_grad_f32)
MX__AFFINE_ROW(row_affine_f64, double, mx_relu_f64, mx_relu_grad_f64)

/* k 16-bit rows through float32 blocks, as plane_16: whole rows at a time
 * where they fit a block (one widening and one rounding pass for many short
 * rows), else a row's BLOCK values at a time. */
static void rows_affine_16(uint16_t *y, const uint16_t *x, const uint16_t *mask, int64_t k, int64_t C,
                           const float *m, const float *s, const float *b, bool relu, bool bf16) {
  float block[BLOCK], mask_block[BLOCK];
  int64_t rows = C <= BLOCK ? BLOCK / C : 1, width = C <= BLOCK ? C : BLOCK;
  for (int64_t r = 0; r < k; r += rows)
    for (int64_t c0 = 0; c0 < C; c0 += width) {
      int64_t n_rows = k - r < rows ? k - r : rows, n = C - c0 < width ? C - c0 : width;
      int64_t count = C <= BLOCK ? n_rows * C : n; /* whole rows, or part of one */
      const int64_t at = r * C + c0;
      widen(block, x + at, count, bf16);
      if (mask) widen(mask_block, mask + at, count, bf16);
      for (int64_t j = 0; j < count; j += n)
        row_affine_f32(block + j, block + j, mask ? mask_block + j : NULL, n, m + c0, s + c0, b + c0, false);
      if (bf16) mx__f32_to_bf16_n(block, y + at, count);
      else mx__f32_to_f16_n(block, y + at, count);
      for (int64_t j = 0; relu && j < count; j++) y[at + j] = mx_relu_half_bits(y[at + j], bf16);
    }
}

static mx_status affine_rows(const mx_kview *y, const mx_kview *x, const mx_kview *center, const mx_kview *scale,
                             const mx_kview *shift, const mx_kview *mask, bool relu) {
  const int64_t R = x->shape[0], C = x->shape[1];
  const int64_t size = (int64_t)mx_dtype_size(x->dtype);
  void *zeros = center ? NULL : calloc((size_t)C, sizeof(double)); /* a missing center; 0.0f's bits too */
  if (!center && !zeros)
    return mx__error(MX_OUT_OF_MEMORY, "channel_affine: out of memory for %lld zeros", (long long)C);
  const void *m = center ? center->data : zeros;
  /* groups of rows that fill a block (16-bit rows are widened a group at a time) */
  const int64_t group = C < BLOCK ? BLOCK / C : 1, groups = (R + group - 1) / group;
  MX_PARALLEL_FOR(R * C)
  for (int64_t gi = 0; gi < groups; gi++) {
    int64_t r0 = gi * group, k = R - r0 < group ? R - r0 : group, offset = r0 * C * size;
    const char *xr = (const char *)x->data + offset, *mr = mask ? (const char *)mask->data + offset : NULL;
    char *yr = (char *)y->data + offset;
    if (x->dtype != MX_F64 && x->dtype != MX_F32) {
      rows_affine_16((uint16_t *)yr, (const uint16_t *)xr, (const uint16_t *)mr, k, C, m, scale->data, shift->data,
                     relu, x->dtype == MX_BF16);
      continue;
    }
    for (int64_t j = 0; j < k; j++) {
      int64_t at = j * C * size;
      if (x->dtype == MX_F64)
        row_affine_f64((double *)(yr + at), (const double *)(xr + at), mr ? (const double *)(mr + at) : NULL, C, m,
                       scale->data, shift->data, relu);
      else
        row_affine_f32((float *)(yr + at), (const float *)(xr + at), mr ? (const float *)(mr + at) : NULL, C, m,
                       scale->data, shift->data, relu);
    }
  }
  free(zeros);
  return MX_OK;
}

/* The fixed cut of R rows into chunks: a function of R alone. */
static int64_t row_chunks(int64_t R) {
  int64_t n = (R + MIN_CHUNK_ROWS - 1) / MIN_CHUNK_ROWS;
  return n < 1 ? 1 : n > MAX_CHUNKS ? MAX_CHUNKS : n;
}

/* Rows r0 .. r1 of float32 or 16-bit a (and b, mask: NULL for none),
 * added per channel into sum and dot, channel tile by channel tile. */
MX_WIDE_CLONES static void sums_rows_f32(double *sum, double *dot, const void *a, const void *b, const void *mask,
                                         int64_t r0, int64_t r1, int64_t C, const float *ca, const float *cb,
                                         mx_dtype dt) {
  float wa[ROW_TILE], wb[ROW_TILE], wm[ROW_TILE];
  for (int64_t c0 = 0; c0 < C; c0 += ROW_TILE) {
    int64_t m = C - c0 < ROW_TILE ? C - c0 : ROW_TILE;
    for (int64_t r = r0; r < r1; r += ROW_RUN) {
      int64_t end = r1 - r < ROW_RUN ? r1 : r + ROW_RUN;
      float run_sum[ROW_TILE] = {0}, run_dot[ROW_TILE] = {0};
      for (int64_t i = r; i < end; i++) {
        const float *va = row_f32(a, i, C, c0, m, dt, wa);
        if (mask) {
          const float *vm = row_f32(mask, i, C, c0, m, dt, wm);
          for (int64_t c = 0; c < m; c++) wa[c] = mx_relu_grad_f32(va[c], vm[c]);
          va = wa;
        }
        for (int64_t c = 0; c < m; c++) run_sum[c] += va[c];
        if (!b) continue;
        const float *vb = row_f32(b, i, C, c0, m, dt, wb);
        for (int64_t c = 0; c < m; c++) run_dot[c] += (va[c] - ca[c0 + c]) * (vb[c] - cb[c0 + c]);
      }
      for (int64_t c = 0; c < m; c++) sum[c0 + c] += run_sum[c], dot[c0 + c] += run_dot[c];
    }
  }
}

static void sums_rows_f64(double *sum, double *dot, const double *a, const double *b, const double *mask, int64_t r0,
                          int64_t r1, int64_t C, const double *ca, const double *cb) {
  for (int64_t r = r0; r < r1; r++) {
    const double *ar = a + r * C, *br = b ? b + r * C : NULL, *mr = mask ? mask + r * C : NULL;
    for (int64_t c = 0; c < C; c++) {
      double v = mr ? mx_relu_grad_f64(ar[c], mr[c]) : ar[c];
      sum[c] += v;
      if (br) dot[c] += (v - ca[c]) * (br[c] - cb[c]);
    }
  }
}

static mx_status sums_rows(const mx_kview *sum, const mx_kview *dot, const mx_kview *a, const mx_kview *b,
                           const mx_kview *a_center, const mx_kview *b_center, const mx_kview *a_mask) {
  const int64_t R = a->shape[0], C = a->shape[1], chunks = row_chunks(R), per = (R + chunks - 1) / chunks;
  bool f64 = a->dtype == MX_F64;
  /* each chunk's sums and dots, then the two centers (float32 ones in the first half of theirs) */
  double *partials = calloc((size_t)((2 * chunks + 2) * C), sizeof(double));
  if (!partials)
    return mx__error(MX_OUT_OF_MEMORY, "channel_sums: out of memory for %lld partial sums",
                     (long long)(2 * chunks * C));
  double *centers = partials + 2 * chunks * C;
  for (int64_t c = 0; c < C; c++) {
    if (f64) centers[c] = at(a_center, c), centers[C + c] = at(b_center, c);
    else ((float *)centers)[c] = (float)at(a_center, c), ((float *)centers)[C + c] = (float)at(b_center, c);
  }
  const void *bd = dot ? b->data : NULL, *md = a_mask ? a_mask->data : NULL;
  MX_PARALLEL_FOR(R * C)
  for (int64_t k = 0; k < chunks; k++) {
    int64_t r0 = k * per, r1 = r0 + per < R ? r0 + per : R;
    double *s = partials + 2 * k * C, *d = s + C;
    if (f64) sums_rows_f64(s, d, a->data, bd, md, r0, r1, C, centers, centers + C);
    else sums_rows_f32(s, d, a->data, bd, md, r0, r1, C, (const float *)centers, (const float *)centers + C, a->dtype);
  }
  for (int64_t c = 0; c < C; c++) {
    double s = 0, d = 0;
    for (int64_t k = 0; k < chunks; k++) s += partials[2 * k * C + c], d += partials[(2 * k + 1) * C + c];
    store(sum, c, s);
    store(dot, c, d);
  }
  free(partials);
  return MX_OK;
}

/* Rows r0 .. r1 of x: the sums of x - k[c] and of its square per channel, in double. */
MX_WIDE_CLONES static void moments_rows_chunk(double *s1, double *s2, const void *x, int64_t r0, int64_t r1,
                                              int64_t C, const double *k, mx_dtype dt) {
  float buf[ROW_TILE];
  for (int64_t r = r0; r < r1; r++) {
    if (dt == MX_F64) {
      const double *xr = (const double *)x + r * C;
      for (int64_t c = 0; c < C; c++) {
        double d = xr[c] - k[c];
        s1[c] += d, s2[c] += d * d;
      }
      continue;
    }
    for (int64_t c0 = 0; c0 < C; c0 += ROW_TILE) {
      int64_t m = C - c0 < ROW_TILE ? C - c0 : ROW_TILE;
      const float *v = row_f32(x, r, C, c0, m, dt, buf);
      for (int64_t c = 0; c < m; c++) {
        double d = (double)v[c] - k[c0 + c];
        s1[c0 + c] += d, s2[c0 + c] += d * d;
      }
    }
  }
}

static mx_status moments_rows(const mx_kview *mean, const mx_kview *var, const mx_kview *x) {
  const int64_t R = x->shape[0], C = x->shape[1], chunks = row_chunks(R), per = (R + chunks - 1) / chunks;
  const int64_t size = (int64_t)mx_dtype_size(x->dtype);
  /* each chunk's two sums, then each channel's first value, k */
  double *partials = calloc((size_t)((2 * chunks + 1) * C), sizeof(double));
  if (!partials)
    return mx__error(MX_OUT_OF_MEMORY, "channel_moments: out of memory for %lld partial sums",
                     (long long)(2 * chunks * C));
  double *k = partials + 2 * chunks * C;
  for (int64_t c = 0; c < C; c++) k[c] = mx_element_load((const char *)x->data + c * size, x->dtype);
  MX_PARALLEL_FOR(R * C)
  for (int64_t j = 0; j < chunks; j++) {
    int64_t r0 = j * per, r1 = r0 + per < R ? r0 + per : R;
    moments_rows_chunk(partials + 2 * j * C, partials + (2 * j + 1) * C, x->data, r0, r1, C, k, x->dtype);
  }
  for (int64_t c = 0; c < C; c++) {
    double s1 = 0, s2 = 0, m, v;
    for (int64_t j = 0; j < chunks; j++) s1 += partials[2 * j * C + c], s2 += partials[(2 * j + 1) * C + c];
    mx_moments_of(k[c], s1, s2, (double)R, &m, &v);
    store(mean, c, m);
    store(var, c, v);
  }
  free(partials);
  return MX_OK;
}

/* --- combine: batch norm's input gradient in one pass ---------------------------------------------- */

/* channel_combine: y = a sa[c] + (b - cb[c]) sb[c] + shift[c], what two
 * channel_affine passes and an add did in three, in one that reads a and
 * b once. The arithmetic is channel_affine's: float32 (float64 for float64
 * data), each difference, product and sum rounded in turn, no FMA; a read
 * through relu's backward given a mask. P is a per-plane scalar or a
 * per-channel row vector (AT picks its element), the mask flag a constant
 * where the body is inlined. */
#define MX__SCALAR(v, i) (v)
#define MX__ELEMENT(v, i) ((v)[i])
#define MX__COMBINE(name, T, P, AT, relu_grad_fn)                                                             \
  static inline __attribute__((always_inline)) void name##_body(T *y, const T *a, const T *b, const T *mask,    \
                                                                int64_t n, P sa, P cb, P sb, P sh, bool masked) { \
    for (int64_t i = 0; i < n; i++) {                                                                          \
      T g = masked ? relu_grad_fn(a[i], mask[i]) : a[i];                                                       \
      T p = g * AT(sa, i), q = (b[i] - AT(cb, i)) * AT(sb, i);                                                 \
      y[i] = (p + q) + AT(sh, i);                                                                              \
    }                                                                                                          \
  }                                                                                                            \
  MX_WIDE_CLONES static void name(T *y, const T *a, const T *b, const T *mask, int64_t n, P sa, P cb, P sb,     \
                                  P sh) {                                                                      \
    if (mask) name##_body(y, a, b, mask, n, sa, cb, sb, sh, true);                                             \
    else name##_body(y, a, b, mask, n, sa, cb, sb, sh, false);                                                 \
  }
MX__COMBINE(combine_plane_f32, float, float, MX__SCALAR, mx_relu_grad_f32)
MX__COMBINE(combine_plane_f64, double, double, MX__SCALAR, mx_relu_grad_f64)
MX__COMBINE(combine_row_f32, float, const float *, MX__ELEMENT, mx_relu_grad_f32)
MX__COMBINE(combine_row_f64, double, const double *, MX__ELEMENT, mx_relu_grad_f64)

/* A bfloat16 plane of the same y, widened and rounded in the loop, as plane_bf16. */
static inline __attribute__((always_inline)) void combine_plane_bf16_body(uint16_t *y, const uint16_t *a,
                                                                          const uint16_t *b, const uint16_t *mask,
                                                                          int64_t n, float sa, float cb, float sb,
                                                                          float sh, bool masked) {
  for (int64_t i = 0; i < n; i++) {
    float g = masked ? mx_relu_grad_f32(mx_bf16_to_f32(a[i]), mx_bf16_to_f32(mask[i])) : mx_bf16_to_f32(a[i]);
    float p = g * sa, q = (mx_bf16_to_f32(b[i]) - cb) * sb;
    y[i] = mx__bf16_nearest((p + q) + sh);
  }
}

MX_WIDE_CLONES static void combine_plane_bf16(uint16_t *y, const uint16_t *a, const uint16_t *b, const uint16_t *mask,
                                              int64_t n, float sa, float cb, float sb, float sh) {
  if (mask) combine_plane_bf16_body(y, a, b, mask, n, sa, cb, sb, sh, true);
  else combine_plane_bf16_body(y, a, b, mask, n, sa, cb, sb, sh, false);
}

/* The four vectors as one argument list, at channel (or first channel) c. */
typedef struct {
  const mx_kview *sa, *cb, *sb, *sh;
} combine_vectors;

/* 16-bit values through float32 blocks, as plane_16: count values from at, widened (a, b, mask), computed by
 * combine_row_f32 in runs of `run` (per-channel vectors from channel c0, restarting each run) or by
 * combine_plane_f32 with scalars (run 0), rounded back once. */
static void combine_16(uint16_t *y, const uint16_t *a, const uint16_t *b, const uint16_t *mask, int64_t count,
                       int64_t run, const combine_vectors *v, int64_t c0, const float s[4], bool bf16) {
  float wa[BLOCK], wb[BLOCK], wm[BLOCK];
  for (int64_t i = 0; i < count; i += BLOCK) {
    int64_t k = count - i < BLOCK ? count - i : BLOCK;
    widen(wa, a + i, k, bf16);
    widen(wb, b + i, k, bf16);
    if (mask) widen(wm, mask + i, k, bf16);
    if (!run) {
      combine_plane_f32(wa, wa, wb, mask ? wm : NULL, k, s[0], s[1], s[2], s[3]);
    } else { /* whole runs: the caller's blocks hold whole rows, or one part of a row */
      const float *sa = (const float *)v->sa->data + c0, *cb = (const float *)v->cb->data + c0;
      const float *sb = (const float *)v->sb->data + c0, *sh = (const float *)v->sh->data + c0;
      for (int64_t j = 0; j < k; j += run)
        combine_row_f32(wa + j, wa + j, wb + j, mask ? wm + j : NULL, run, sa, cb, sb, sh);
    }
    if (bf16) mx__f32_to_bf16_n(wa, y + i, k);
    else mx__f32_to_f16_n(wa, y + i, k);
  }
}

/* An (R, C) matrix, channel innermost: rows of per-channel vectors, 16-bit ones a group of whole rows per block
 * (or a block's part of a long row). */
static mx_status combine_rows(const mx_kview *y, const mx_kview *a, const mx_kview *b, const combine_vectors *v,
                              const mx_kview *mask) {
  const int64_t R = a->shape[0], C = a->shape[1], size = (int64_t)mx_dtype_size(a->dtype);
  const int64_t group = C < BLOCK ? BLOCK / C : 1, groups = (R + group - 1) / group;
  const int64_t width = C <= BLOCK ? C : BLOCK;
  MX_PARALLEL_FOR(R * C)
  for (int64_t gi = 0; gi < groups; gi++) {
    int64_t r0 = gi * group, k = R - r0 < group ? R - r0 : group;
    for (int64_t j = 0; j < k; j++)
      for (int64_t c0 = 0; c0 < C; c0 += width) {
        int64_t n = C - c0 < width ? C - c0 : width, at = ((r0 + j) * C + c0) * size;
        char *yr = (char *)y->data + at;
        const char *ar = (const char *)a->data + at, *br = (const char *)b->data + at;
        const char *mr = mask ? (const char *)mask->data + at : NULL;
        if (a->dtype == MX_F64) {
          combine_row_f64((double *)yr, (const double *)ar, (const double *)br, (const double *)mr, n,
                          (const double *)v->sa->data + c0, (const double *)v->cb->data + c0,
                          (const double *)v->sb->data + c0, (const double *)v->sh->data + c0);
        } else if (a->dtype == MX_F32) {
          combine_row_f32((float *)yr, (const float *)ar, (const float *)br, (const float *)mr, n,
                          (const float *)v->sa->data + c0, (const float *)v->cb->data + c0,
                          (const float *)v->sb->data + c0, (const float *)v->sh->data + c0);
        } else { /* the whole group at once where its rows fit a block, else this part of the row */
          bool whole = C <= BLOCK;
          combine_16((uint16_t *)yr, (const uint16_t *)ar, (const uint16_t *)br, (const uint16_t *)mr,
                     whole ? k * C : n, n, v, c0, NULL, a->dtype == MX_BF16);
          if (whole) j = k;
        }
      }
  }
  return MX_OK;
}

mx_status mx__cpu_channel_combine(const mx_kview *y, const mx_kview *a, const mx_kview *b, const mx_kview *scale_a,
                                  const mx_kview *center_b, const mx_kview *scale_b, const mx_kview *shift,
                                  const mx_kview *a_mask) {
  const combine_vectors v = {scale_a, center_b, scale_b, shift};
  int64_t channels = a->shape[1], planes = a->shape[0] * channels;
  int64_t n = planes ? mx__kview_numel(a) / planes : 0;
  if (n == 1) return combine_rows(y, a, b, &v, a_mask);
  size_t size = mx_dtype_size(a->dtype);
  MX_PARALLEL_FOR(planes * n)
  for (int64_t p = 0; p < planes; p++) {
    int64_t c = p % channels, offset = p * n * (int64_t)size;
    const char *ap = (const char *)a->data + offset, *bp = (const char *)b->data + offset;
    const char *mp = a_mask ? (const char *)a_mask->data + offset : NULL;
    char *yp = (char *)y->data + offset;
    double sa = at(scale_a, c), cb = at(center_b, c), sb = at(scale_b, c), sh = at(shift, c);
    if (a->dtype == MX_F64)
      combine_plane_f64((double *)yp, (const double *)ap, (const double *)bp, (const double *)mp, n, sa, cb, sb, sh);
    else if (a->dtype == MX_F32)
      combine_plane_f32((float *)yp, (const float *)ap, (const float *)bp, (const float *)mp, n, (float)sa, (float)cb,
                        (float)sb, (float)sh);
    else if (a->dtype == MX_BF16)
      combine_plane_bf16((uint16_t *)yp, (const uint16_t *)ap, (const uint16_t *)bp, (const uint16_t *)mp, n,
                         (float)sa, (float)cb, (float)sb, (float)sh);
    else
      combine_16((uint16_t *)yp, (const uint16_t *)ap, (const uint16_t *)bp, (const uint16_t *)mp, n, 0, &v, c,
                 (const float[4]){(float)sa, (float)cb, (float)sb, (float)sh}, a->dtype == MX_BF16);
  }
  return MX_OK;
}
