/* kernels/math.h and the bulk converters of kernels/cpu/convert.h, checked
 * bit for bit:
 *
 *   - float32 -> float16 for all 2^32 inputs against the CPU's own F16C
 *     instruction, and the bulk converter against the scalar one;
 *   - float32 -> bfloat16 for all 2^32 inputs against a reference written
 *     differently (the nearer of the two neighbouring bfloat16 values);
 *   - a third reference on a dense sample (rounding on the format's grid with
 *     frexp/ldexp in double), so float16 is checked independently of F16C;
 *   - float16/bfloat16 -> float32 for all 65536 patterns, and round trips;
 *   - named boundaries, whose failure messages say what was meant;
 *   - Philox4x32-10 against the Random123 known-answer vectors;
 *   - tests/fixtures/conversions.txt, PyTorch's conversions of ~8000 inputs.
 *
 * MX_TEST_QUICK (set, non-empty and not "0"; CI sets it for the sanitizer and
 * valgrind runs) replaces the 2^32 sweeps by a sample: every sign and
 * exponent, the low and high 64 mantissas, every QUICK_STRIDE-th mantissa,
 * and the patterns around every rounding tie of both formats.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h"
#include "kernels/cpu/convert.h"
#include "kernels/math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TEST_X86 1
#endif

/* --- helpers ----------------------------------------------------------------- */

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static bool quick_mode(void) {
  const char *q = getenv("MX_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0;
}

static bool f32_bits_nan(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }
static bool f16_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu); }
static bool f16_quiet_nan(uint16_t h) { return f16_nan(h) && (h & 0x0200u); }
static bool bf16_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu); }
static bool bf16_quiet_nan(uint16_t b) { return bf16_nan(b) && (b & 0x0040u); }

/* The value of a non-NaN float16, straight from the IEEE definition:
 * sign * 2^(e-15) * (1 + m/1024), subnormals m * 2^-24. */
static double f16_value(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 31 ? INFINITY : e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m, -24);
  return (h & 0x8000u) ? -v : v;
}

/* The same for bfloat16: sign * 2^(e-127) * (1 + m/128), subnormals
 * m * 2^-133. */
static double bf16_value(uint16_t b) {
  int e = (b >> 7) & 0xff, m = b & 0x7f;
  double v = e == 255 ? INFINITY : e ? ldexp(1.0 + m / 128.0, e - 127) : ldexp(m, -133);
  return (b & 0x8000u) ? -v : v;
}

/* --- F16C, the hardware reference -------------------------------------------- */

#ifdef TEST_X86
static bool have_f16c(void) { return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx"); }

/* vcvtps2ph with the rounding in the immediate (round to nearest even),
 * whatever MXCSR says; a tail shorter than 8 goes through a padded copy. */
__attribute__((target("f16c,avx"))) static void f16c_from_f32(const float *src, uint16_t *dst, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128((__m128i *)(dst + i), h);
  }
  if (i < n) {
    float in[8] = {0};
    uint16_t out[8];
    memcpy(in, src + i, (size_t)(n - i) * sizeof *src);
    _mm_storeu_si128((__m128i *)out, _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT));
    memcpy(dst + i, out, (size_t)(n - i) * sizeof *dst);
  }
}

/* vcvtph2ps; n is a multiple of 8. */
__attribute__((target("f16c,avx"))) static void f16c_to_f32(const uint16_t *src, float *dst, int n) {
  for (int i = 0; i < n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
}
#else
static bool have_f16c(void) { return false; }
static void f16c_from_f32(const float *src, uint16_t *dst, int n) {
  (void)src, (void)dst, (void)n;
  abort();
}
static void f16c_to_f32(const uint16_t *src, float *dst, int n) {
  (void)src, (void)dst, (void)n;
  abort();
}
#endif

static uint16_t f16c_one(float f) {
  uint16_t h;
  f16c_from_f32(&f, &h, 1);
  return h;
}

/* --- the bfloat16 reference ---------------------------------------------------- */

/* float32 -> bfloat16 written without math.h's add-and-truncate trick: take
 * the two bfloat16 values around |x|, the truncation toward zero (below) and
 * the next one away from zero (one bfloat16 spacing higher), and keep the
 * nearer, the one with the even mantissa on a tie. The spacing is the value
 * with mantissa 1 minus the value with mantissa 0 in x's binade (2^-133 for
 * subnormals); the distance up is the spacing minus the distance down, so
 * the largest finite bfloat16 (0x7f7f) needs no 2^128 and a result past it
 * is infinity. All three float subtractions are exact (Sterbenz: both
 * operands lie within a factor of two, or are multiples of 2^-149), so this
 * compares true distances. NaN is checked separately. Branch-free, so the
 * sweep's loop vectorises. */
static inline uint16_t ref_f32_to_bf16(uint32_t u) {
  uint32_t sign = u & 0x80000000u, a = u & 0x7fffffffu;
  uint32_t below = a & 0xffff0000u, binade = below & 0x7f800000u;
  float spacing = float_of(binade | 0x10000u) - float_of(binade);
  float down = float_of(a) - float_of(below), up = spacing - down;
  uint32_t round_up = down > up ? 1u : down < up ? 0u : (below >> 16) & 1u;
  uint32_t pick = a == 0x7f800000u ? a : below + (round_up << 16); /* inf stays inf */
  return (uint16_t)((sign | pick) >> 16);
}

/* 1 when got is not the right bfloat16 for the float32 pattern u, whose
 * reference result is want: want's bits, or for NaN input a quiet NaN of the
 * same sign. Written with masks on 32-bit values rather than && or ?: so the
 * sweep's loop vectorises. */
static uint32_t bf16_wrong(uint32_t u, uint32_t got, uint32_t want) {
  uint32_t is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  uint32_t nan_ok = ((got & 0x7fc0u) == 0x7fc0u) & ((got >> 15) == (u >> 31));
  uint32_t nan_mask = 0u - is_nan;
  return ((1u - nan_ok) & nan_mask) | ((uint32_t)(got != want) & ~nan_mask);
}

/* --- the grid reference (both formats, sample only) ---------------------------- */

/* |x| rounded to nearest even on the grid of a binary format with p stored
 * mantissa bits, smallest normal exponent emin and largest finite value max,
 * with frexp/ldexp and floor only: the grid spacing at x is
 * 2^(max(floor(log2 x), emin) - p); values rounding past max are infinity. */
static double grid_round(double x, int p, int emin, double max) {
  if (x == 0 || isinf(x)) return x;
  int e;
  frexp(x, &e); /* x = f * 2^e, f in [0.5, 1): floor(log2 x) = e - 1 */
  double q = ldexp(1.0, (e - 1 < emin ? emin : e - 1) - p);
  double k = floor(x / q);
  double lo = k * q, hi = lo + q;
  bool even = ((uint64_t)k & 1) == 0; /* k < 2^53 */
  double r = x - lo < hi - x ? lo : x - lo > hi - x ? hi : even ? lo : hi;
  return r > max ? INFINITY : r;
}

/* --- the inputs: all 2^32 patterns, or the quick sample ---------------------- */

/* The sample strides through each exponent's mantissas: 127 (34.7 million
 * inputs, about a second natively) for the grid reference in a full run;
 * 1021 (5 million with the tie neighbourhoods) in quick mode, where valgrind
 * must finish inside the suite's 300 s. */
enum { BLOCK = 4096, DENSE_STRIDE = 127, QUICK_STRIDE = 1021 };

typedef struct {
  uint32_t *list; /* NULL: every pattern, the index is the pattern */
  size_t n, cap;
  uint64_t count;
} pattern_set;

static void push(pattern_set *s, uint32_t u) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 1u << 20;
    s->list = realloc(s->list, s->cap * sizeof *s->list);
    cr_assert(s->list, "out of memory building the quick sample");
  }
  s->list[s->n++] = u;
}

/* The patterns around every rounding tie when the low `drop` mantissa bits
 * are dropped: exactly on it, one either side, the truncation, one above it,
 * and the largest dropped part. */
static void push_ties(pattern_set *s, uint32_t base, int drop) {
  uint32_t half = 1u << (drop - 1), full = 1u << drop;
  const uint32_t offsets[] = {0, 1, half - 1, half, half + 1, full - 1};
  for (uint32_t k = 0; k < (1u << (23 - drop)); k++)
    for (size_t i = 0; i < sizeof offsets / sizeof *offsets; i++)
      push(s, base | ((k << drop) + offsets[i]));
}

static pattern_set sample_patterns(uint32_t stride) {
  pattern_set s = {0};
  for (uint32_t sign = 0; sign <= 1; sign++)
    for (uint32_t e = 0; e < 256; e++) {
      uint32_t base = sign << 31 | e << 23;
      for (uint32_t m = 0; m < 64; m++) {
        push(&s, base | m);
        push(&s, base | (0x7fffffu - m));
      }
      for (uint32_t m = 64; m < 0x800000u - 64; m += stride) push(&s, base | m);
      push_ties(&s, base, 16); /* bfloat16 keeps 7 of the 23 bits */
      if (e >= 112 && e <= 143) push_ties(&s, base, 13); /* float16 normals, overflow */
      if (e >= 103 && e <= 112) push_ties(&s, base, (int)(126 - e)); /* float16 subnormals */
    }
  s.count = s.n;
  return s;
}

static pattern_set test_patterns(void) {
  if (quick_mode()) return sample_patterns(QUICK_STRIDE);
  pattern_set s = {0};
  s.count = UINT64_C(1) << 32;
  return s;
}

static uint32_t pattern_at(const pattern_set *s, uint64_t i) {
  return s->list ? s->list[i] : (uint32_t)i;
}

/* Fills bits and src (the same patterns as floats) with block b of the set,
 * padded with zeros to BLOCK (zero converts the same everywhere, so the
 * padding never mismatches); returns how many are real. */
static int fill_block(const pattern_set *s, int64_t b, uint32_t *bits, float *src) {
  uint64_t start = (uint64_t)b * BLOCK;
  int n = s->count - start < BLOCK ? (int)(s->count - start) : BLOCK;
  if (s->list)
    memcpy(bits, s->list + start, (size_t)n * sizeof *bits);
  else
    for (uint32_t i = 0, first = (uint32_t)start; i < BLOCK; i++) bits[i] = first + i;
  memset(bits + n, 0, (size_t)(BLOCK - n) * sizeof *bits);
  memcpy(src, bits, BLOCK * sizeof *src);
  return n;
}

/* The index of the first i < n with a[i] != b[i]. */
static int first_diff(const uint16_t *a, const uint16_t *b, int n) {
  int i = 0;
  while (i < n && a[i] == b[i]) i++;
  return i;
}

static const char *mode_name(const pattern_set *s) {
  return s->list ? "quick sample (MX_TEST_QUICK)" : "every pattern";
}

/* The per-block loops of the sweeps. On x86 they are built twice, for AVX2
 * and for the baseline, and the loader picks the one the CPU runs (GCC's
 * target_clones): the sweeps are 2^32 elements, and the wider vectors take
 * a third off their time. Either build computes the same bits. */
#if defined(TEST_X86) && !defined(__clang__)
#define SWEEP_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SWEEP_CLONES
#endif

SWEEP_CLONES static void f16_block(const float *src, uint16_t *got) {
#ifdef _OPENMP
#pragma omp simd /* GCC vectorises mx_f32_to_f16's branches only when asked */
#endif
  for (int i = 0; i < BLOCK; i++) got[i] = mx_f32_to_f16(src[i]);
}

SWEEP_CLONES static uint32_t count_diff(const uint16_t *a, const uint16_t *b) {
  uint32_t n = 0;
  for (int i = 0; i < BLOCK; i++) n += a[i] != b[i];
  return n;
}

/* got = mx_f32_to_bf16 of the block; returns how many disagree with the
 * reference. */
SWEEP_CLONES static uint32_t bf16_block(const uint32_t *bits, const float *src, uint16_t *got) {
  uint16_t want[BLOCK];
  uint32_t miss = 0;
  for (int i = 0; i < BLOCK; i++) got[i] = mx_f32_to_bf16(src[i]);
  for (int i = 0; i < BLOCK; i++) want[i] = ref_f32_to_bf16(bits[i]);
  for (int i = 0; i < BLOCK; i++) miss += bf16_wrong(bits[i], got[i], want[i]);
  return miss;
}

/* --- 1. float32 -> float16, every pattern ------------------------------------ */

Test(math, f32_to_f16_every_pattern_matches_f16c_and_bulk) {
  pattern_set s = test_patterns();
  bool hw = have_f16c();
  if (!hw) cr_log_warn("no F16C on this CPU: float16 checked against the grid reference only");
  int64_t nblocks = (int64_t)((s.count + BLOCK - 1) / BLOCK);
  uint64_t hw_bad = 0, hw_first = UINT64_MAX, bulk_bad = 0, bulk_first = UINT64_MAX;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) reduction(+ : hw_bad, bulk_bad) \
    reduction(min : hw_first, bulk_first)
#endif
  for (int64_t b = 0; b < nblocks; b++) {
    uint32_t bits[BLOCK];
    float src[BLOCK];
    uint16_t got[BLOCK], want[BLOCK], bulk[BLOCK];
    int n = fill_block(&s, b, bits, src);
    f16_block(src, got);
    mx__f32_to_f16_n(src, bulk, BLOCK);
    if (hw)
      f16c_from_f32(src, want, BLOCK);
    else
      memcpy(want, got, sizeof want);
    uint32_t hw_miss = count_diff(got, want), bulk_miss = count_diff(bulk, got);
    uint64_t at = (uint64_t)b * BLOCK;
    if (hw_miss) {
      hw_bad += hw_miss;
      uint64_t i = at + (uint64_t)first_diff(got, want, n);
      hw_first = i < hw_first ? i : hw_first;
    }
    if (bulk_miss) {
      bulk_bad += bulk_miss;
      uint64_t i = at + (uint64_t)first_diff(bulk, got, n);
      bulk_first = i < bulk_first ? i : bulk_first;
    }
  }
  cr_log_info("f32 -> f16: %" PRIu64 " inputs, %s%s", s.count, mode_name(&s),
              hw ? ", against F16C" : "");
  if (hw_bad) {
    uint32_t u = pattern_at(&s, hw_first);
    cr_expect_fail("mx_f32_to_f16 differs from F16C on %" PRIu64 " inputs; first 0x%08" PRIx32
                   ": got 0x%04x, F16C gives 0x%04x",
                   hw_bad, u, mx_f32_to_f16(float_of(u)), f16c_one(float_of(u)));
  }
  if (bulk_bad) {
    uint32_t u = pattern_at(&s, bulk_first);
    float f[8] = {float_of(u), float_of(u), float_of(u), float_of(u),
                  float_of(u), float_of(u), float_of(u), float_of(u)}; /* the vector path too */
    uint16_t h[8];
    mx__f32_to_f16_n(f, h, 8);
    cr_expect_fail("mx__f32_to_f16_n differs from mx_f32_to_f16 on %" PRIu64
                   " inputs; first 0x%08" PRIx32 ": bulk 0x%04x, scalar 0x%04x",
                   bulk_bad, u, h[0], mx_f32_to_f16(f[0]));
  }
  free(s.list);
}

/* --- 2. float32 -> bfloat16, every pattern ----------------------------------- */

Test(math, f32_to_bf16_every_pattern_matches_reference_and_bulk) {
  pattern_set s = test_patterns();
  int64_t nblocks = (int64_t)((s.count + BLOCK - 1) / BLOCK);
  uint64_t ref_bad = 0, ref_first = UINT64_MAX, bulk_bad = 0, bulk_first = UINT64_MAX;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) reduction(+ : ref_bad, bulk_bad) \
    reduction(min : ref_first, bulk_first)
#endif
  for (int64_t b = 0; b < nblocks; b++) {
    uint32_t bits[BLOCK];
    float src[BLOCK];
    uint16_t got[BLOCK], bulk[BLOCK];
    int n = fill_block(&s, b, bits, src);
    uint32_t ref_miss = bf16_block(bits, src, got);
    mx__f32_to_bf16_n(src, bulk, BLOCK);
    uint32_t bulk_miss = count_diff(bulk, got);
    uint64_t at = (uint64_t)b * BLOCK;
    if (ref_miss) {
      ref_bad += ref_miss;
      int i = 0;
      while (i < n && !bf16_wrong(bits[i], got[i], ref_f32_to_bf16(bits[i]))) i++;
      ref_first = at + (uint64_t)i < ref_first ? at + (uint64_t)i : ref_first;
    }
    if (bulk_miss) {
      bulk_bad += bulk_miss;
      uint64_t i = at + (uint64_t)first_diff(bulk, got, n);
      bulk_first = i < bulk_first ? i : bulk_first;
    }
  }
  cr_log_info("f32 -> bf16: %" PRIu64 " inputs, %s", s.count, mode_name(&s));
  if (ref_bad) {
    uint32_t u = pattern_at(&s, ref_first);
    cr_expect_fail("mx_f32_to_bf16 differs from the reference on %" PRIu64 " inputs; first 0x%08" PRIx32
                   ": got 0x%04x, expected %s0x%04x",
                   ref_bad, u, mx_f32_to_bf16(float_of(u)), f32_bits_nan(u) ? "a quiet NaN like " : "",
                   f32_bits_nan(u) ? (uint16_t)((u >> 16) | 0x40u) : ref_f32_to_bf16(u));
  }
  if (bulk_bad) {
    uint32_t u = pattern_at(&s, bulk_first);
    float f = float_of(u);
    uint16_t h;
    mx__f32_to_bf16_n(&f, &h, 1);
    cr_expect_fail("mx__f32_to_bf16_n differs from mx_f32_to_bf16 on %" PRIu64
                   " inputs; first 0x%08" PRIx32 ": bulk 0x%04x, scalar 0x%04x",
                   bulk_bad, u, h, mx_f32_to_bf16(f));
  }
  free(s.list);
}

/* --- the grid reference on the sample (always, F16C or not) ------------------ */

Test(math, f32_to_f16_and_bf16_match_grid_reference_on_sample) {
  pattern_set s = sample_patterns(quick_mode() ? QUICK_STRIDE : DENSE_STRIDE);
  uint64_t f16_bad = 0, f16_first = UINT64_MAX, bf16_bad = 0, bf16_first = UINT64_MAX;
  int64_t n = (int64_t)s.count;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) reduction(+ : f16_bad, bf16_bad) \
    reduction(min : f16_first, bf16_first)
#endif
  for (int64_t i = 0; i < n; i++) {
    uint32_t u = s.list[i];
    float f = float_of(u);
    uint16_t h = mx_f32_to_f16(f), b = mx_f32_to_bf16(f);
    bool h_ok, b_ok;
    if (isnan(f)) {
      h_ok = f16_quiet_nan(h) && (h >> 15) == (u >> 31);
      b_ok = bf16_quiet_nan(b) && (b >> 15) == (u >> 31);
    } else {
      double x = fabs((double)f);
      double want_h = grid_round(x, 10, -14, 65504.0), want_b = grid_round(x, 7, -126, 0x1.fep127);
      h_ok = !f16_nan(h) && fabs(f16_value(h)) == want_h && (h >> 15) == (u >> 31);
      b_ok = !bf16_nan(b) && fabs(bf16_value(b)) == want_b && (b >> 15) == (u >> 31);
    }
    if (!h_ok) {
      f16_bad++;
      f16_first = (uint64_t)i < f16_first ? (uint64_t)i : f16_first;
    }
    if (!b_ok) {
      bf16_bad++;
      bf16_first = (uint64_t)i < bf16_first ? (uint64_t)i : bf16_first;
    }
  }
  cr_log_info("grid reference: %" PRIu64 " sampled inputs", s.count);
  if (f16_bad) {
    uint32_t u = s.list[f16_first];
    cr_expect_fail("mx_f32_to_f16 differs from the grid reference on %" PRIu64 " of %" PRIu64
                   " sampled inputs; first 0x%08" PRIx32 " (%a): got 0x%04x (%a), want value %a",
                   f16_bad, s.count, u, (double)float_of(u), mx_f32_to_f16(float_of(u)),
                   f16_value(mx_f32_to_f16(float_of(u))),
                   grid_round(fabs((double)float_of(u)), 10, -14, 65504.0));
  }
  if (bf16_bad) {
    uint32_t u = s.list[bf16_first];
    cr_expect_fail("mx_f32_to_bf16 differs from the grid reference on %" PRIu64 " of %" PRIu64
                   " sampled inputs; first 0x%08" PRIx32 " (%a): got 0x%04x (%a), want value %a",
                   bf16_bad, s.count, u, (double)float_of(u), mx_f32_to_bf16(float_of(u)),
                   bf16_value(mx_f32_to_bf16(float_of(u))),
                   grid_round(fabs((double)float_of(u)), 7, -126, 0x1.fep127));
  }
  free(s.list);
}

/* --- 3. float16 / bfloat16 -> float32, all 65536 patterns -------------------- */

/* How many patterns failed one check, and the first of them. */
typedef struct {
  int count;
  uint32_t first;
} tally;

static void tally_if(tally *t, bool failed, uint32_t pattern) {
  if (failed && t->count++ == 0) t->first = pattern;
}

Test(math, f16_to_f32_every_pattern) {
  static uint16_t h[65536];
  static float bulk[65536], hw[65536];
  for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  mx__f16_to_f32_n(h, bulk, 65536);
  bool have_hw = have_f16c();
  if (have_hw)
    f16c_to_f32(h, hw, 65536);
  else
    cr_log_warn("no F16C on this CPU: float16 -> float32 checked against the formula only");
  tally value = {0}, nan = {0}, quiet = {0}, trip = {0}, vs_hw = {0}, vs_bulk = {0};
  for (uint32_t i = 0; i < 65536; i++) {
    float f = mx_f16_to_f32(h[i]);
    uint32_t got = bits_of(f);
    bool same_sign = (got >> 31) == (i >> 15);
    if (f16_nan(h[i])) {
      tally_if(&nan, !(isnan(f) && same_sign), i);
      tally_if(&quiet, !(got & 0x00400000u), i);
    } else {
      tally_if(&value, !((double)f == f16_value(h[i]) && same_sign), i);
      tally_if(&trip, mx_f32_to_f16(f) != h[i], i);
    }
    tally_if(&vs_hw, have_hw && got != bits_of(hw[i]), i);
    tally_if(&vs_bulk, bits_of(bulk[i]) != got, i);
  }
  float f;
  f = mx_f16_to_f32((uint16_t)value.first);
  cr_expect(
      value.count == 0,
      "mx_f16_to_f32 disagrees with sign * 2^(e-15) * (1 + m/1024) on %d patterns; first 0x%04" PRIx32
      ": %a, the formula gives %a",
      value.count, value.first, (double)f, f16_value((uint16_t)value.first));
  f = mx_f16_to_f32((uint16_t)nan.first);
  cr_expect(nan.count == 0,
            "%d float16 NaNs do not convert to a NaN of their sign; first 0x%04" PRIx32
            " -> 0x%08" PRIx32,
            nan.count, nan.first, bits_of(f));
  f = mx_f16_to_f32((uint16_t)quiet.first);
  cr_expect(quiet.count == 0,
            "%d float16 NaNs convert to a signalling float32 NaN (IEEE 754 6.2 wants it quiet, as F16C "
            "gives); first 0x%04" PRIx32 " -> 0x%08" PRIx32 ", want 0x%08" PRIx32,
            quiet.count, quiet.first, bits_of(f), bits_of(f) | 0x00400000u);
  cr_expect(trip.count == 0,
            "f16 -> f32 -> f16 is not the identity on %d patterns; first 0x%04" PRIx32 " -> 0x%04x",
            trip.count, trip.first, mx_f32_to_f16(mx_f16_to_f32((uint16_t)trip.first)));
  cr_expect(vs_hw.count == 0,
            "mx_f16_to_f32 differs from F16C on %d patterns; first 0x%04" PRIx32 ": 0x%08" PRIx32
            ", F16C 0x%08" PRIx32,
            vs_hw.count, vs_hw.first, bits_of(mx_f16_to_f32((uint16_t)vs_hw.first)),
            have_hw ? bits_of(hw[vs_hw.first]) : 0u);
  cr_expect(vs_bulk.count == 0,
            "mx__f16_to_f32_n differs from mx_f16_to_f32 on %d patterns; first 0x%04" PRIx32
            ": bulk 0x%08" PRIx32 ", scalar 0x%08" PRIx32,
            vs_bulk.count, vs_bulk.first, bits_of(bulk[vs_bulk.first]),
            bits_of(mx_f16_to_f32((uint16_t)vs_bulk.first)));
}

Test(math, bf16_to_f32_every_pattern) {
  static uint16_t b[65536];
  static float bulk[65536];
  for (uint32_t i = 0; i < 65536; i++) b[i] = (uint16_t)i;
  mx__bf16_to_f32_n(b, bulk, 65536);
  tally value = {0}, nan = {0}, trip = {0}, nan_trip = {0}, vs_bulk = {0};
  for (uint32_t i = 0; i < 65536; i++) {
    float f = mx_bf16_to_f32(b[i]);
    uint32_t got = bits_of(f);
    uint16_t back = mx_f32_to_bf16(f);
    if (bf16_nan(b[i])) {
      tally_if(&nan, !(isnan(f) && (got >> 16) == i), i); /* the same NaN, widened */
      tally_if(&nan_trip, !(bf16_quiet_nan(back) && (back >> 15) == (i >> 15)), i);
    } else {
      tally_if(&value, !((double)f == bf16_value(b[i]) && (got >> 31) == (i >> 15)), i);
      tally_if(&trip, back != b[i], i);
    }
    tally_if(&vs_bulk, bits_of(bulk[i]) != got, i);
  }
  cr_expect(
      value.count == 0,
      "mx_bf16_to_f32 disagrees with sign * 2^(e-127) * (1 + m/128) on %d patterns; first 0x%04" PRIx32
      ": %a, the formula gives %a",
      value.count, value.first, (double)mx_bf16_to_f32((uint16_t)value.first),
      bf16_value((uint16_t)value.first));
  cr_expect(nan.count == 0, "%d bfloat16 NaNs do not widen to the same NaN; first 0x%04" PRIx32,
            nan.count, nan.first);
  cr_expect(trip.count == 0,
            "bf16 -> f32 -> bf16 is not the identity on %d patterns; first 0x%04" PRIx32 " -> 0x%04x",
            trip.count, trip.first, mx_f32_to_bf16(mx_bf16_to_f32((uint16_t)trip.first)));
  cr_expect(nan_trip.count == 0,
            "%d bfloat16 NaNs come back from float32 as something other than a quiet "
            "NaN of their sign; first 0x%04" PRIx32 " -> 0x%04x",
            nan_trip.count, nan_trip.first, mx_f32_to_bf16(mx_bf16_to_f32((uint16_t)nan_trip.first)));
  cr_expect(vs_bulk.count == 0,
            "mx__bf16_to_f32_n differs from mx_bf16_to_f32 on %d patterns; first 0x%04" PRIx32,
            vs_bulk.count, vs_bulk.first);
}

/* The bulk converters' F16C check reads CPUID once and keeps the answer:
 * the kept answer is the CPU's, on the first call and on later ones. */
Test(math, f16c_check_answers_as_the_cpu_on_every_call) {
  bool hw = have_f16c();
  for (int call = 0; call < 3; call++)
    cr_expect_eq(mx__cpu_has_f16c(), hw, "call %d: mx__cpu_has_f16c says %d, GCC's cpuid reading says %d", call,
                 mx__cpu_has_f16c(), hw);
}

/* The bulk converters on short and unaligned spans: the vector loop, the
 * scalar tail, and nothing written past n. */
Test(math, bulk_converters_tails_and_offsets) {
  float src[40];
  uint16_t half[40];
  for (int i = 0; i < 40; i++) src[i] = float_of(0x387fc000u + (uint32_t)i * 0x1fffu); /* near 2^-14 */
  for (int off = 0; off < 3; off++)
    for (int n = 0; n <= 37; n++) {
      uint16_t h[40], b[40];
      float back[40];
      for (int i = 0; i < 40; i++) h[i] = b[i] = 0xdead;
      mx__f32_to_f16_n(src + off, h + off, n);
      mx__f32_to_bf16_n(src + off, b + off, n);
      for (int i = 0; i < 40; i++) {
        bool inside = i >= off && i < off + n;
        cr_expect_eq(h[i], inside ? mx_f32_to_f16(src[i]) : 0xdead, "f32->f16 n=%d off=%d at %d", n, off,
                     i);
        cr_expect_eq(b[i], inside ? mx_f32_to_bf16(src[i]) : 0xdead, "f32->bf16 n=%d off=%d at %d", n,
                     off, i);
      }
      for (int i = 0; i < 40; i++) half[i] = (uint16_t)(0x0001u + (uint32_t)i * 0x0777u);
      for (int i = 0; i < 40; i++) back[i] = -1.0f;
      mx__f16_to_f32_n(half + off, back + off, n);
      for (int i = 0; i < 40; i++) {
        bool inside = i >= off && i < off + n;
        uint32_t want = inside ? bits_of(mx_f16_to_f32(half[i])) : bits_of(-1.0f);
        cr_expect_eq(bits_of(back[i]), want, "f16->f32 n=%d off=%d at %d", n, off, i);
      }
      for (int i = 0; i < 40; i++) back[i] = -1.0f;
      mx__bf16_to_f32_n(half + off, back + off, n);
      for (int i = 0; i < 40; i++) {
        bool inside = i >= off && i < off + n;
        uint32_t want = inside ? bits_of(mx_bf16_to_f32(half[i])) : bits_of(-1.0f);
        cr_expect_eq(bits_of(back[i]), want, "bf16->f32 n=%d off=%d at %d", n, off, i);
      }
    }
}

/* --- 4. named boundaries -------------------------------------------------------- */

typedef struct {
  float in;
  uint16_t want;
  const char *why;
} named_case;

static const named_case f16_cases[] = {
    {65504.0f, 0x7bff, "65504 is the largest finite float16"},
    {65519.99f, 0x7bff, "65519.99 is below the midpoint 65520: rounds down to 65504"},
    {0x1.ffdffep15f, 0x7bff, "the float just below 65520 rounds down to 65504"},
    {65520.0f, 0x7c00,
     "65520, the midpoint above 65504, is the first value rounding to inf (tie to even)"},
    {65536.0f, 0x7c00, "65536 overflows to inf"},
    {-65520.0f, 0xfc00, "-65520 rounds to -inf"},
    {FLT_MAX, 0x7c00, "FLT_MAX overflows to inf"},
    {0x1p-24f, 0x0001, "2^-24 is the smallest float16 subnormal"},
    {0x1p-25f, 0x0000, "2^-25 is a tie between 0 and 2^-24: to even, 0"},
    {-0x1p-25f, 0x8000, "-2^-25 is a tie: to even, -0"},
    {0x1.000002p-25f, 0x0001, "just above 2^-25 rounds up to 2^-24"},
    {0x1.fffffep-26f, 0x0000, "just below 2^-25 rounds to 0"},
    {0x3p-26f, 0x0001, "3*2^-26 = 0.75 * 2^-24 is nearer 2^-24 than 0"},
    {0x3p-25f, 0x0002, "3*2^-25 = 1.5 * 2^-24 is a tie between 1 and 2 units: to even, 2"},
    {0x5p-25f, 0x0002, "5*2^-25 = 2.5 * 2^-24 is a tie between 2 and 3 units: to even, 2"},
    {0x3ffp-24f, 0x03ff, "1023 * 2^-24 is the largest subnormal"},
    {0x7fdp-25f, 0x03fe, "1022.5 * 2^-24 is a tie: to even, 0x3fe"},
    {0x7ffp-25f, 0x0400,
     "1023.5 * 2^-24, between the largest subnormal and 2^-14, is a tie: to even, 0x400"},
    {0x1p-14f, 0x0400, "2^-14 is the smallest normal float16"},
    {1.0f, 0x3c00, "1.0"},
    {-1.0f, 0xbc00, "-1.0"},
    {0x1.002p0f, 0x3c00, "1 + 2^-11 is a tie between 1 and 1 + 2^-10: rounds down to even"},
    {0x1.006p0f, 0x3c02, "1 + 3*2^-11 is a tie between 0x3c01 and 0x3c02: rounds up to even"},
    {0x1.002002p0f, 0x3c01, "just above the tie at 1 + 2^-11 rounds up"},
    {0x1.001ffep0f, 0x3c00, "just below the tie at 1 + 2^-11 rounds down"},
    {2049.0f, 0x6800, "2049 is a tie between 2048 and 2050: rounds down to even"},
    {2051.0f, 0x6802, "2051 is a tie between 2050 and 2052: rounds up to even"},
    {0.1f, 0x2e66, "0.1"},
    {0.0f, 0x0000, "+0"},
    {-0.0f, 0x8000, "-0 keeps its sign"},
    {0x1p-149f, 0x0000, "the smallest float32 subnormal underflows to +0"},
    {-0x1p-149f, 0x8000, "a tiny negative underflows to -0"},
    {INFINITY, 0x7c00, "+inf"},
    {-INFINITY, 0xfc00, "-inf"},
};

static const named_case bf16_cases[] = {
    {0x1.fep127f, 0x7f7f, "3.3895314e38 is the largest finite bfloat16"},
    {0x1.fefffep127f, 0x7f7f, "just below the midpoint above 0x7f7f rounds down"},
    {0x1.ffp127f, 0x7f80, "the midpoint above 0x7f7f is a tie: 0x7f7f is odd, so inf"},
    {-0x1.ffp127f, 0xff80, "the negative midpoint goes to -inf"},
    {FLT_MAX, 0x7f80, "FLT_MAX rounds to inf"},
    {1.0f, 0x3f80, "1.0"},
    {0x1.01p0f, 0x3f80, "1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds down to even"},
    {0x1.03p0f, 0x3f82, "1 + 3*2^-8 is a tie between 0x3f81 and 0x3f82: rounds up to even"},
    {0x1.010002p0f, 0x3f81, "just above the tie at 1 + 2^-8 rounds up"},
    {0x1.00fffep0f, 0x3f80, "just below the tie at 1 + 2^-8 rounds down"},
    {0x1p-133f, 0x0001, "2^-133, the smallest bfloat16 subnormal, is kept (not flushed)"},
    {-0x1p-133f, 0x8001, "-2^-133 is kept"},
    {0x7fp-133f, 0x007f, "the largest bfloat16 subnormal is kept"},
    {0x1p-134f, 0x0000, "2^-134 is a tie between 0 and 2^-133: to even, 0"},
    {0x1.0002p-134f, 0x0001, "just above 2^-134 rounds up to 2^-133"},
    {0x3p-134f, 0x0002, "1.5 * 2^-133 is a tie: to even, 2 units"},
    {0x1.fffffcp-127f, 0x0080, "the largest float32 subnormal rounds up to the smallest normal 2^-126"},
    {0x1p-126f, 0x0080, "FLT_MIN, 2^-126"},
    {0x1p-149f, 0x0000, "the smallest float32 subnormal rounds to 0"},
    {0.0f, 0x0000, "+0"},
    {-0.0f, 0x8000, "-0 keeps its sign"},
    {INFINITY, 0x7f80, "+inf"},
    {-INFINITY, 0xff80, "-inf"},
};

Test(math, f32_to_f16_named_boundaries) {
  for (size_t i = 0; i < sizeof f16_cases / sizeof *f16_cases; i++) {
    const named_case *c = &f16_cases[i];
    uint16_t got = mx_f32_to_f16(c->in);
    cr_expect_eq(got, c->want, "%s: mx_f32_to_f16(%a, bits 0x%08" PRIx32 ") = 0x%04x, want 0x%04x",
                 c->why, (double)c->in, bits_of(c->in), got, c->want);
    uint16_t bulk;
    mx__f32_to_f16_n(&c->in, &bulk, 1);
    cr_expect_eq(bulk, c->want, "%s: mx__f32_to_f16_n gives 0x%04x", c->why, bulk);
  }
}

Test(math, f32_to_bf16_named_boundaries) {
  for (size_t i = 0; i < sizeof bf16_cases / sizeof *bf16_cases; i++) {
    const named_case *c = &bf16_cases[i];
    uint16_t got = mx_f32_to_bf16(c->in);
    cr_expect_eq(got, c->want, "%s: mx_f32_to_bf16(%a, bits 0x%08" PRIx32 ") = 0x%04x, want 0x%04x",
                 c->why, (double)c->in, bits_of(c->in), got, c->want);
  }
  cr_expect_eq(bits_of(3.3895314e38f), 0x7f7f0000u, "3.3895314e38f is the bfloat16 maximum 0x7f7f0000");
}

Test(math, nan_stays_quiet_nan) {
  const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7f802000u,
                           0x7fa00000u, 0x7fffffffu, 0xffffffffu, 0x7f810000u, 0x7f800100u};
  for (size_t i = 0; i < sizeof nans / sizeof *nans; i++) {
    uint32_t u = nans[i];
    uint16_t h = mx_f32_to_f16(float_of(u)), b = mx_f32_to_bf16(float_of(u));
    cr_expect(f16_quiet_nan(h) && (h >> 15) == (u >> 31),
              "mx_f32_to_f16(0x%08" PRIx32 ") = 0x%04x: want a quiet NaN of the same sign", u, h);
    cr_expect(bf16_quiet_nan(b) && (b >> 15) == (u >> 31),
              "mx_f32_to_bf16(0x%08" PRIx32 ") = 0x%04x: want a quiet NaN of the same sign", u, b);
  }
  /* payloads too short for the narrow format must not turn the NaN into inf */
  cr_expect_eq(mx_f32_to_f16(float_of(0x7f800001u)), 0x7e00, "sNaN 0x7f800001 -> f16 0x7e00");
  cr_expect_eq(mx_f32_to_bf16(float_of(0x7f800001u)), 0x7fc0, "sNaN 0x7f800001 -> bf16 0x7fc0");
  cr_expect(isnan(mx_f16_to_f32(0x7e00)), "f16 0x7e00 -> NaN");
  cr_expect(isnan(mx_bf16_to_f32(0x7fc0)), "bf16 0x7fc0 -> NaN");
}

Test(math, f16_to_f32_named_values) {
  cr_expect_eq(mx_f16_to_f32(0x0001), 0x1p-24f, "0x0001 is 2^-24");
  cr_expect_eq(mx_f16_to_f32(0x03ff), 0x3ffp-24f, "0x03ff is 1023 * 2^-24");
  cr_expect_eq(mx_f16_to_f32(0x0400), 0x1p-14f, "0x0400 is 2^-14");
  cr_expect_eq(mx_f16_to_f32(0x7bff), 65504.0f, "0x7bff is 65504");
  cr_expect_eq(mx_f16_to_f32(0x3c00), 1.0f, "0x3c00 is 1");
  cr_expect_eq(mx_f16_to_f32(0xc000), -2.0f, "0xc000 is -2");
  cr_expect_eq(mx_f16_to_f32(0x7c00), INFINITY, "0x7c00 is inf");
  cr_expect_eq(mx_f16_to_f32(0xfc00), -INFINITY, "0xfc00 is -inf");
  cr_expect_eq(bits_of(mx_f16_to_f32(0x8000)), 0x80000000u, "0x8000 is -0");
  cr_expect_eq(mx_bf16_to_f32(0x0001), 0x1p-133f, "bf16 0x0001 is 2^-133");
  cr_expect_eq(mx_bf16_to_f32(0x7f7f), 0x1.fep127f, "bf16 0x7f7f is the largest finite");
}

/* --- 6. Philox4x32-10 --------------------------------------------------------------- */

/* Known answers from Random123's tests/kat_vectors (D. E. Shaw Research,
 * github.com/DEShawResearch/random123), lines
 *
 *   philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000   6627e8d5 e169c58d bc57ac4c
 * 9b00dbd8 philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   408f276d 41c83b0e
 * a20bc7c6 6d5451fd philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   d16cfe09
 * 94fdcceb 5001e420 24126ea1
 *
 * (columns: counter[4], key[2], output[4]). Found with the code search, in
 * tensorflow/tensorflow tensorflow/compiler/tests/stateful_random_ops_test.py
 * (which cites Random123-Boost libs/random/test/test_philox.cpp#L50-L52) and
 * in a Python port that embeds the whole kat_vectors file; every copy agrees. */
typedef struct {
  uint32_t ctr[4], key[2], want[4];
} philox_kat;

static const philox_kat philox_kats[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
     {0xffffffffu, 0xffffffffu},
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
     {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

Test(math, philox4x32_10_known_answers) {
  for (size_t i = 0; i < sizeof philox_kats / sizeof *philox_kats; i++) {
    const philox_kat *k = &philox_kats[i];
    mx_philox_block ctr = {{k->ctr[0], k->ctr[1], k->ctr[2], k->ctr[3]}};
    uint64_t key = (uint64_t)k->key[1] << 32 | k->key[0]; /* low word = key[0] */
    mx_philox_block r = mx_philox4x32_10(ctr, key);
    for (int w = 0; w < 4; w++)
      cr_expect_eq(
          r.v[w], k->want[w],
          "philox4x32-10 ctr {%08" PRIx32 " %08" PRIx32 " %08" PRIx32 " %08" PRIx32 "} key {%08" PRIx32
          " %08" PRIx32 "}: word %d is %08" PRIx32 ", Random123 says %08" PRIx32,
          k->ctr[0], k->ctr[1], k->ctr[2], k->ctr[3], k->key[0], k->key[1], w, r.v[w], k->want[w]);
  }
}

Test(math, philox_draw_counter_layout) {
  /* counter = offset + index, low word first, the upper two words zero */
  uint64_t seed = 0x299f31d0a4093822u;
  mx_philox_block a = mx_philox_draw(seed, 0xfffffffeu, 3); /* 2^32 + 1 */
  mx_philox_block b = mx_philox4x32_10((mx_philox_block){{1u, 1u, 0u, 0u}}, seed);
  for (int w = 0; w < 4; w++) cr_expect_eq(a.v[w], b.v[w], "word %d of the draw at counter 2^32 + 1", w);
}

/* --- 7. uniforms, normals, integers -------------------------------------------- */

Test(math, uniform_bits_stays_below_one) {
  mx_philox_block ones = {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}};
  mx_philox_block zeros = {{0, 0, 0, 0}};
  for (int bits = 1; bits <= 53; bits++) {
    double u = mx_uniform_bits(ones, bits);
    cr_expect(u < 1.0 && u >= 0.0, "mx_uniform_bits(all ones, %d) = %a, not in [0, 1)", bits, u);
    cr_expect_eq(mx_uniform_bits(zeros, bits), 0.0, "mx_uniform_bits(zeros, %d)", bits);
  }
  /* and below one once stored in the format the width is meant for */
  const mx_dtype dtypes[] = {MX_F32, MX_F64, MX_F16, MX_BF16};
  for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++) {
    double u = mx_uniform_bits(ones, mx_mantissa_bits(dtypes[i]));
    unsigned char buf[8];
    mx_element_store(buf, dtypes[i], u);
    double stored = mx_element_load(buf, dtypes[i]);
    cr_expect(stored < 1.0, "the largest %s uniform (%a) stores as %a", mx_dtype_name(dtypes[i]), u,
              stored);
  }
  cr_expect_eq(mx_uniform53(0xffffffffu, 0xffffffffu), 1.0 - 0x1p-53);
  cr_expect_eq(mx_uniform53(0, 0), 0.0);
}

Test(math, normal_from_block_is_finite_for_extreme_words) {
  const uint32_t words[] = {0u, 1u, 0x7ffu, 0x800u, 0x7fffffffu, 0x80000000u, 0xfffff800u, 0xffffffffu};
  size_t n = sizeof words / sizeof *words;
  for (size_t a = 0; a < n; a++)
    for (size_t b = 0; b < n; b++)
      for (size_t c = 0; c < n; c++)
        for (size_t d = 0; d < n; d++) {
          mx_philox_block r = {{words[a], words[b], words[c], words[d]}};
          double z = mx_normal_from_block(r);
          cr_expect(isfinite(z),
                    "mx_normal_from_block({%08" PRIx32 " %08" PRIx32 " %08" PRIx32 " %08" PRIx32
                    "}) = %g",
                    words[a], words[b], words[c], words[d], z);
        }
  /* u1 = 1 - (1 - 2^-53) = 2^-53 is the largest |z| possible: sqrt(106 ln 2) */
  mx_philox_block r = {{0xffffffffu, 0xffffffffu, 0, 0}};
  cr_expect_float_eq(mx_normal_from_block(r), sqrt(106.0 * log(2.0)), 1e-12);
}

Test(math, rand_int_stays_in_range) {
  const int64_t ranges[][2] = {{0, 1},
                               {-3, 4},
                               {10, 11},
                               {-1000000007, 1000000007},
                               {0, 7},
                               {-5, -2},
                               {0, INT64_C(1) << 40},
                               {INT64_MIN / 2, INT64_MAX / 2},
                               {INT64_MAX - 3, INT64_MAX}};
  for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++) {
    mx_rand_params p = {.kind = MX_RAND_INT,
                        .low = ranges[r][0],
                        .high = ranges[r][1],
                        .seed = 42 + r,
                        .offset = 1000 * r};
    uint64_t span = (uint64_t)p.high - (uint64_t)p.low;
    bool seen[7] = {false};
    for (uint64_t i = 0; i < 20000; i++) {
      int64_t v = mx_rand_int(&p, i);
      if (v < p.low || v >= p.high) {
        cr_expect_fail("mx_rand_int [%" PRId64 ", %" PRId64 ") index %" PRIu64 " gave %" PRId64, p.low,
                       p.high, i, v);
        break;
      }
      if (span <= 7) seen[v - p.low] = true;
      cr_expect_eq(mx_rand_sample(&p, i, 24), (double)v, "mx_rand_sample agrees with mx_rand_int");
    }
    for (uint64_t k = 0; span <= 7 && k < span; k++)
      cr_expect(seen[k], "mx_rand_int [%" PRId64 ", %" PRId64 ") never gave %" PRId64, p.low, p.high,
                p.low + (int64_t)k);
  }
}

/* --- 8. PyTorch fixtures ------------------------------------------------------------ */

#ifndef MX_FIXTURES_DIR
#define MX_FIXTURES_DIR "tests/fixtures"
#endif

/* tests/fixtures/conversions.txt, written by make_conversion_fixtures.py:
 * "f32bits f16bits bf16bits" in hex per line, from torch's .to(float16) and
 * .to(bfloat16). For NaN inputs only NaN-ness is compared (torch
 * canonicalises NaNs). */
Test(math, conversions_match_pytorch_fixtures) {
  const char *dir = getenv("MX_FIXTURES_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/conversions.txt", dir && *dir ? dir : MX_FIXTURES_DIR);
  FILE *f = fopen(path, "r");
  cr_assert(f, "cannot open %s (regenerate it with tests/fixtures/make_conversion_fixtures.py)", path);
  char line[256];
  int rows = 0, bad = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '\n') continue;
    unsigned long u, h, b;
    if (sscanf(line, "%lx %lx %lx", &u, &h, &b) != 3) {
      cr_expect_fail("%s: unreadable line: %s", path, line);
      break;
    }
    rows++;
    float x = float_of((uint32_t)u);
    uint16_t got_h = mx_f32_to_f16(x), got_b = mx_f32_to_bf16(x);
    bool ok_h, ok_b;
    if (isnan(x)) {
      ok_h = f16_nan(got_h) && f16_nan((uint16_t)h);
      ok_b = bf16_nan(got_b) && bf16_nan((uint16_t)b);
    } else {
      ok_h = got_h == h;
      ok_b = got_b == b;
    }
    if ((!ok_h || !ok_b) && ++bad <= 10) {
      cr_expect(ok_h, "f32 0x%08lx -> f16: mx 0x%04x, torch 0x%04lx", u, got_h, h);
      cr_expect(ok_b, "f32 0x%08lx -> bf16: mx 0x%04x, torch 0x%04lx", u, got_b, b);
    }
  }
  fclose(f);
  cr_expect(bad == 0, "%d of %d fixture rows differ from torch", bad, rows);
  cr_expect(rows >= 1000, "%s has only %d rows", path, rows);
  cr_log_info("torch fixtures: %d rows from %s", rows, path);
}

/* --- strided indexing ------------------------------------------------------ */

/* The offset from coordinates found by hand: linear = ((a * B) + b) * C + c. */
static int64_t offset_by_hand(int64_t linear, const int64_t shape[3], const int64_t strides[3]) {
  int64_t c = linear % shape[2], b = linear / shape[2] % shape[1], a = linear / shape[2] / shape[1];
  return a * strides[0] + b * strides[1] + c * strides[2];
}

/* Every index of a permuted view, and indices and dims past 32 bits. */
Test(math, strided_offset_of_permuted_and_huge_views) {
  const int64_t small[3] = {2, 3, 4}, small_strides[3] = {1, 8, 2}; /* a permuted view */
  for (int64_t i = 0; i < 24; i++)
    cr_assert_eq(mx_strided_offset(i, 3, small, small_strides), offset_by_hand(i, small, small_strides),
                 "i %" PRId64, i);
  cr_assert_eq(mx_strided_offset(23, 3, small, small_strides), 1 * 1 + 2 * 8 + 3 * 2);
  const int64_t big[3] = {3, ((int64_t)1 << 32) + 5, 7}, big_strides[3] = {-1, 7, 1}; /* a dim past 2^32 */
  const int64_t indices[] = {0, 6, 7, ((int64_t)1 << 32) - 1, (int64_t)1 << 32, ((int64_t)1 << 32) * 7 + 12,
                             ((int64_t)1 << 35) + 3, 3 * big[1] * big[2] - 1};
  for (size_t k = 0; k < sizeof indices / sizeof *indices; k++)
    cr_assert_eq(mx_strided_offset(indices[k], 3, big, big_strides), offset_by_hand(indices[k], big, big_strides),
                 "i %" PRId64, indices[k]);
  /* the last element: (2, 2^32 + 4, 6) */
  cr_assert_eq(mx_strided_offset(3 * big[1] * big[2] - 1, 3, big, big_strides), -2 + (((int64_t)1 << 32) + 4) * 7 + 6);
}
