/* kernels/cpu/batch_norm.c's four kernels (affine, sums, moments, combine) against a plain scalar reference, bit for
 * bit: float32, bfloat16 and float16, planes (N, C, n) and rows (R, C), every vector tail, NaN, inf, -0, subnormals
 * and values that round in 16 bits. The reference follows the order the kernels document for their sums. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/batch_norm.h"
#include "kernels/math.h"
#include "shape_view.h"

enum { BLOCK = 512, LANES = 16, DOUBLE_LANES = 8, ROW_RUN = 32, MAX_CHUNKS = 64, MIN_CHUNK_ROWS = 1024 };

static bool quick(void) {
  const char *q = getenv("MX_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0;
}

/* --- inputs ------------------------------------------------------------------------------------------ */

static uint64_t rng_state;

static uint32_t next_u32(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 32);
}

static const uint32_t specials[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u, 0xff800000u, 0x80000000u};

/* A float32 value: mostly in [-4, 4) with all 23 mantissa bits in use (they round in 16 bits), some subnormal, -0,
 * large, or (when special) NaN or inf. */
static float random_value(bool special) {
  uint32_t r = next_u32() % 64;
  if (special && r < 6) return mx_bits_f32(specials[r]);
  if (r < 9) return mx_bits_f32(0x80000000u);
  if (r < 11) return mx_bits_f32((next_u32() & 0x807fffffu) | 1u); /* float32 subnormal */
  if (r < 13) return mx_bits_f32((next_u32() & 0x80000000u) | 0x477fe000u | (next_u32() & 0x1fffu)); /* ~65504 */
  return ((float)(next_u32() & 0xffffff) / 16777216.0f - 0.5f) * 8.0f;
}

static double load(const void *base, int64_t i, mx_dtype dt) {
  return mx_element_load((const char *)base + i * (int64_t)mx_dtype_size(dt), dt);
}

/* count values of dt, specials only in channel 0 (at stride 1, channel (i / inner) % C). */
static void *fill(mx_dtype dt, int64_t count, int64_t inner, int64_t C) {
  void *p = malloc((size_t)(count ? count : 1) * mx_dtype_size(dt));
  cr_assert_not_null(p);
  for (int64_t i = 0; i < count; i++) {
    float v = random_value((i / inner) % C == 0);
    if (dt == MX_F32) ((float *)p)[i] = v;
    else if (dt == MX_BF16) ((uint16_t *)p)[i] = mx_f32_to_bf16(v);
    else ((uint16_t *)p)[i] = mx_f32_to_f16(v);
  }
  return p;
}

static float *vector(int64_t C) {
  float *v = malloc((size_t)C * sizeof *v);
  cr_assert_not_null(v);
  for (int64_t c = 0; c < C; c++) v[c] = random_value(false);
  return v;
}

/* The float32 result stored into dt, through relu (16-bit values: relu on the rounded bits). */
static uint32_t store_bits(float r, mx_dtype dt, bool relu) {
  if (dt == MX_F32) return mx_f32_bits(relu ? mx_relu_f32(r) : r);
  bool bf16 = dt == MX_BF16;
  uint16_t h = bf16 ? mx_f32_to_bf16(r) : mx_f32_to_f16(r);
  return relu ? mx_relu_half_bits(h, bf16) : h;
}

static uint32_t bits_at(const void *p, int64_t i, mx_dtype dt) {
  return dt == MX_F32 ? mx_f32_bits(((const float *)p)[i]) : ((const uint16_t *)p)[i];
}

/* Equal bits, or both NaN (a sum's NaN payload follows its operands' order, which no contract fixes). */
static bool same_double(double a, double b) {
  if (isnan(a) && isnan(b)) return true;
  uint64_t x, y;
  memcpy(&x, &a, 8), memcpy(&y, &b, 8);
  return x == y;
}

/* A shape: planes (N, C, n) or, with n == 1, rows (R = N, C). */
typedef struct {
  mx_dtype dt;
  int64_t N, C, n;
} shape;

static mx_kview data_view(const shape *s, void *data) {
  mx_kview v = shape_view(s->dt, 3, (int64_t[]){s->N, s->C, s->n});
  v.data = data;
  return v;
}

static mx_kview vec_view(mx_dtype dt, int64_t C, void *data) {
  mx_kview v = shape_view(dt, 1, (int64_t[]){C});
  v.data = data;
  return v;
}

static const char *dt_name(mx_dtype dt) { return dt == MX_F32 ? "f32" : dt == MX_BF16 ? "bf16" : "f16"; }

/* --- affine and combine: element by element ---------------------------------------------------------- */

static void check_affine(const shape *s, bool masked, bool relu, bool centered) {
  int64_t count = s->N * s->C * s->n;
  void *x = fill(s->dt, count, s->n, s->C), *mask = masked ? fill(s->dt, count, s->n, s->C) : NULL;
  void *y = calloc((size_t)(count ? count : 1), mx_dtype_size(s->dt));
  float *m = vector(s->C), *sc = vector(s->C), *b = vector(s->C);
  mx_kview X = data_view(s, x), Y = data_view(s, y), M = data_view(s, mask);
  mx_kview Mv = vec_view(MX_F32, s->C, m), Sv = vec_view(MX_F32, s->C, sc), Bv = vec_view(MX_F32, s->C, b);
  cr_assert_eq(mx__cpu_channel_affine(&Y, &X, centered ? &Mv : NULL, &Sv, &Bv, masked ? &M : NULL, relu), MX_OK);
  for (int64_t i = 0; i < count; i++) {
    int64_t c = (i / s->n) % s->C;
    float v = (float)load(x, i, s->dt);
    if (masked) v = mx_relu_grad_f32(v, (float)load(mask, i, s->dt));
    float r = (v - (centered ? m[c] : 0.0f)) * sc[c] + b[c];
    uint32_t want = store_bits(r, s->dt, relu), got = bits_at(y, i, s->dt);
    cr_assert_eq(got, want, "affine %s (%lld, %lld, %lld) mask %d relu %d center %d: element %lld is %#x, expected %#x",
                 dt_name(s->dt), (long long)s->N, (long long)s->C, (long long)s->n, masked, relu, centered,
                 (long long)i, got, want);
  }
  free(x), free(mask), free(y), free(m), free(sc), free(b);
}

static void check_combine(const shape *s, bool masked) {
  int64_t count = s->N * s->C * s->n;
  void *a = fill(s->dt, count, s->n, s->C), *b = fill(s->dt, count, s->n, s->C);
  void *mask = masked ? fill(s->dt, count, s->n, s->C) : NULL;
  void *y = calloc((size_t)(count ? count : 1), mx_dtype_size(s->dt));
  float *sa = vector(s->C), *cb = vector(s->C), *sb = vector(s->C), *sh = vector(s->C);
  mx_kview A = data_view(s, a), B = data_view(s, b), Y = data_view(s, y), M = data_view(s, mask);
  mx_kview SA = vec_view(MX_F32, s->C, sa), CB = vec_view(MX_F32, s->C, cb), SB = vec_view(MX_F32, s->C, sb),
           SH = vec_view(MX_F32, s->C, sh);
  cr_assert_eq(mx__cpu_channel_combine(&Y, &A, &B, &SA, &CB, &SB, &SH, masked ? &M : NULL), MX_OK);
  for (int64_t i = 0; i < count; i++) {
    int64_t c = (i / s->n) % s->C;
    float g = (float)load(a, i, s->dt);
    if (masked) g = mx_relu_grad_f32(g, (float)load(mask, i, s->dt));
    float p = g * sa[c], q = ((float)load(b, i, s->dt) - cb[c]) * sb[c];
    uint32_t want = store_bits((p + q) + sh[c], s->dt, false), got = bits_at(y, i, s->dt);
    cr_assert_eq(got, want, "combine %s (%lld, %lld, %lld) mask %d: element %lld is %#x, expected %#x",
                 dt_name(s->dt), (long long)s->N, (long long)s->C, (long long)s->n, masked, (long long)i, got, want);
  }
  free(a), free(b), free(mask), free(y), free(sa), free(cb), free(sb), free(sh);
}

/* --- sums and moments: in the documented order ------------------------------------------------------- */

static float value_of(const void *a, const void *mask, int64_t i, mx_dtype dt) {
  float v = (float)load(a, i, dt);
  return mask ? mx_relu_grad_f32(v, (float)load(mask, i, dt)) : v;
}

/* The fixed cut of R rows into chunks (the rows' kernels'). */
static int64_t chunks_of(int64_t R) {
  int64_t n = (R + MIN_CHUNK_ROWS - 1) / MIN_CHUNK_ROWS;
  return n < 1 ? 1 : n > MAX_CHUNKS ? MAX_CHUNKS : n;
}

/* Channel c's sums: planes in batch order, each in blocks of BLOCK over LANES float lanes added into double lane by
 * lane; rows in float runs of ROW_RUN rows into each chunk's double, the chunks added in order. */
static void reference_sums(const shape *s, const void *a, const void *b, const void *mask, float ca, float cb,
                           int64_t c, double *sum, double *dot) {
  double S = 0, D = 0;
  if (s->n == 1) {
    int64_t R = s->N, chunks = chunks_of(R), per = (R + chunks - 1) / chunks;
    for (int64_t k = 0; k < chunks; k++) {
      double ps = 0, pd = 0;
      int64_t r0 = k * per, r1 = r0 + per < R ? r0 + per : R;
      for (int64_t r = r0; r < r1; r += ROW_RUN) {
        float rs = 0, rd = 0;
        for (int64_t i = r; i < r1 && i < r + ROW_RUN; i++) {
          float v = value_of(a, mask, i * s->C + c, s->dt);
          rs += v;
          if (b) rd += (v - ca) * ((float)load(b, i * s->C + c, s->dt) - cb);
        }
        ps += rs, pd += rd;
      }
      S += ps, D += pd;
    }
  } else {
    for (int64_t k = 0; k < s->N; k++) {
      int64_t base = (k * s->C + c) * s->n;
      for (int64_t i0 = 0; i0 < s->n; i0 += BLOCK) {
        int64_t m = s->n - i0 < BLOCK ? s->n - i0 : BLOCK;
        float ls[LANES] = {0}, ld[LANES] = {0};
        for (int64_t j = 0; j < m; j++) {
          int64_t lane = j < m - m % LANES ? j % LANES : j - (m - m % LANES);
          float v = value_of(a, mask, base + i0 + j, s->dt);
          ls[lane] += v;
          if (b) ld[lane] += (v - ca) * ((float)load(b, base + i0 + j, s->dt) - cb);
        }
        for (int l = 0; l < LANES; l++) S += ls[l], D += ld[l];
      }
    }
  }
  *sum = S, *dot = D;
}

static void check_sums(const shape *s, bool with_b, bool masked) {
  int64_t count = s->N * s->C * s->n;
  void *a = fill(s->dt, count, s->n, s->C), *b = with_b ? fill(s->dt, count, s->n, s->C) : NULL;
  void *mask = masked ? fill(s->dt, count, s->n, s->C) : NULL;
  float *ca = vector(s->C), *cb = vector(s->C);
  double *sum = calloc((size_t)s->C, sizeof(double)), *dot = calloc((size_t)s->C, sizeof(double));
  cr_assert(sum && dot);
  mx_kview A = data_view(s, a), B = data_view(s, b), M = data_view(s, mask);
  mx_kview CA = vec_view(MX_F32, s->C, ca), CB = vec_view(MX_F32, s->C, cb);
  mx_kview SUM = vec_view(MX_F64, s->C, sum), DOT = vec_view(MX_F64, s->C, dot);
  cr_assert_eq(mx__cpu_channel_sums(&SUM, with_b ? &DOT : NULL, &A, with_b ? &B : NULL, &CA, with_b ? &CB : NULL,
                                    masked ? &M : NULL),
               MX_OK);
  for (int64_t c = 0; c < s->C; c++) {
    double want_sum, want_dot;
    reference_sums(s, a, b, mask, ca[c], with_b ? cb[c] : 0.0f, c, &want_sum, &want_dot);
    cr_assert(same_double(sum[c], want_sum),
              "sums %s (%lld, %lld, %lld) b %d mask %d: channel %lld's sum is %a, expected %a", dt_name(s->dt),
              (long long)s->N, (long long)s->C, (long long)s->n, with_b, masked, (long long)c, sum[c], want_sum);
    if (with_b)
      cr_assert(same_double(dot[c], want_dot),
                "sums %s (%lld, %lld, %lld) b %d mask %d: channel %lld's dot is %a, expected %a", dt_name(s->dt),
                (long long)s->N, (long long)s->C, (long long)s->n, with_b, masked, (long long)c, dot[c], want_dot);
  }
  free(a), free(b), free(mask), free(ca), free(cb), free(sum), free(dot);
}

/* Channel c's shifted sums: planes in batch order, a float32 plane in one run of DOUBLE_LANES double lanes, a
 * 16-bit one in blocks of BLOCK; rows a chunk at a time, row by row. */
static void reference_moments(const shape *s, const void *x, int64_t c, double k, double *s1, double *s2) {
  double A = 0, B = 0;
  if (s->n == 1) {
    int64_t R = s->N, chunks = chunks_of(R), per = (R + chunks - 1) / chunks;
    for (int64_t j = 0; j < chunks; j++) {
      double pa = 0, pb = 0;
      int64_t r0 = j * per, r1 = r0 + per < R ? r0 + per : R;
      for (int64_t r = r0; r < r1; r++) {
        double d = (double)(float)load(x, r * s->C + c, s->dt) - k;
        pa += d, pb += d * d;
      }
      A += pa, B += pb;
    }
  } else {
    int64_t block = s->dt == MX_F32 ? s->n : BLOCK;
    for (int64_t b = 0; b < s->N; b++) {
      int64_t base = (b * s->C + c) * s->n;
      for (int64_t i0 = 0; i0 < s->n; i0 += block) {
        int64_t m = s->n - i0 < block ? s->n - i0 : block;
        double la[DOUBLE_LANES] = {0}, lb[DOUBLE_LANES] = {0};
        for (int64_t j = 0; j < m; j++) {
          int64_t lane = j < m - m % DOUBLE_LANES ? j % DOUBLE_LANES : j - (m - m % DOUBLE_LANES);
          double d = (double)(float)load(x, base + i0 + j, s->dt) - k;
          la[lane] += d, lb[lane] += d * d;
        }
        for (int l = 0; l < DOUBLE_LANES; l++) A += la[l], B += lb[l];
      }
    }
  }
  *s1 = A, *s2 = B;
}

static void check_moments(const shape *s) {
  int64_t count = s->N * s->C * s->n;
  void *x = fill(s->dt, count, s->n, s->C);
  double *mean = calloc((size_t)s->C, sizeof(double)), *var = calloc((size_t)s->C, sizeof(double));
  cr_assert(mean && var);
  mx_kview X = data_view(s, x), MEAN = vec_view(MX_F64, s->C, mean), VAR = vec_view(MX_F64, s->C, var);
  cr_assert_eq(mx__cpu_channel_moments(&MEAN, &VAR, &X), MX_OK);
  for (int64_t c = 0; c < s->C; c++) {
    double k = load(x, s->n == 1 ? c : c * s->n, s->dt), s1, s2, want_mean, want_var;
    reference_moments(s, x, c, k, &s1, &s2);
    mx_moments_of(k, s1, s2, (double)(s->N * s->n), &want_mean, &want_var);
    cr_assert(same_double(mean[c], want_mean) && same_double(var[c], want_var),
              "moments %s (%lld, %lld, %lld): channel %lld is (%a, %a), expected (%a, %a)", dt_name(s->dt),
              (long long)s->N, (long long)s->C, (long long)s->n, (long long)c, mean[c], var[c], want_mean, want_var);
  }
  free(x), free(mean), free(var);
}

/* --- the shapes -------------------------------------------------------------------------------------- */

static const mx_dtype dtypes[] = {MX_F32, MX_BF16, MX_F16};
static const int64_t large_planes[] = {127, 511, 512, 513, 1000, 1537};

/* Every kernel and flag combination on shape s. */
static void check_all(const shape *s) {
  for (int f = 0; f < 8; f++) check_affine(s, f & 1, f & 2, f & 4);
  check_combine(s, false), check_combine(s, true);
  for (int f = 0; f < 4; f++) check_sums(s, f & 1, f & 2);
  check_moments(s);
}

Test(batch_norm_wide, planes_every_tail) {
  rng_state = 38;
  int64_t top = quick() ? 34 : 70;
  for (int d = 0; d < 3; d++)
    for (int64_t n = 2; n <= top; n++) check_all(&(shape){dtypes[d], 2, 3, n});
}

Test(batch_norm_wide, planes_large) {
  rng_state = 39;
  for (int d = 0; d < 3; d++)
    for (size_t i = 0; i < sizeof large_planes / sizeof *large_planes; i++)
      check_all(&(shape){dtypes[d], 3, 2, large_planes[i]});
}

Test(batch_norm_wide, rows_every_tail) {
  rng_state = 40;
  int64_t top = quick() ? 34 : 70;
  for (int d = 0; d < 3; d++)
    for (int64_t C = 1; C <= top; C++) check_all(&(shape){dtypes[d], 37, C, 1});
}

Test(batch_norm_wide, rows_large) {
  rng_state = 41;
  static const int64_t rows[] = {1, 33, 70, 1025}, channels[] = {3, 64, 65, 600};
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 4; r++)
      for (int c = 0; c < 4; c++) {
        if (quick() && rows[r] * channels[c] > 20000) continue;
        check_all(&(shape){dtypes[d], rows[r], channels[c], 1});
      }
}
