/* Random tensors: determinism, generator state, independence, and the
 * distributions. Statistical bounds are 6 standard errors (or a chi-square
 * bound with a tail below 1e-6), so a correct generator fails them with
 * negligible probability while a biased one does not pass. Every test seeds
 * its generators, so the outcome is deterministic anyway. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#define N 100000

/* The elements as doubles (any dtype), malloc'ed. */
static double *values_of(const mx_tensor *t) {
  cr_assert_not_null(t, "%s", mx_last_error());
  int64_t n = mx_numel(t);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  cr_assert_not_null(v);
  mx_tensor *d = mx_to_dtype(t, MX_F64);
  cr_assert_not_null(d);
  cr_assert_eq(mx_to_host(d, v, sizeof(double) * (size_t)n), MX_OK);
  mx_release(d);
  return v;
}

static bool same_bytes(const mx_tensor *a, const mx_tensor *b) {
  cr_assert(a && b, "%s", mx_last_error());
  cr_assert_eq(mx_numel(a), mx_numel(b));
  cr_assert_eq(mx_dtype_of(a), mx_dtype_of(b));
  size_t bytes = (size_t)mx_numel(a) * mx_dtype_size(mx_dtype_of(a));
  char *x = malloc(bytes ? bytes : 1), *y = malloc(bytes ? bytes : 1);
  cr_assert(x && y);
  cr_assert_eq(mx_to_host(a, x, bytes), MX_OK);
  cr_assert_eq(mx_to_host(b, y, bytes), MX_OK);
  bool same = memcmp(x, y, bytes) == 0;
  free(x);
  free(y);
  return same;
}

/* --- determinism and state ------------------------------------------------------- */

Test(random, same_seed_same_values) {
  mx_scope *s = mx_scope_begin();
  mx_generator *g1 = mx_generator_new(42), *g2 = mx_generator_new(42), *g3 = mx_generator_new(43);
  cr_assert(g1 && g2 && g3);
  mx_tensor *a = mx_rand(MX_SHAPE(64), MX_F32, MX_CPU, g1);
  mx_tensor *b = mx_rand(MX_SHAPE(64), MX_F32, MX_CPU, g2);
  mx_tensor *c = mx_rand(MX_SHAPE(64), MX_F32, MX_CPU, g3);
  cr_expect(same_bytes(a, b), "the same seed gives the same values");
  cr_expect_not(same_bytes(a, c), "another seed gives other values");
  /* the next draw continues the stream: different values */
  cr_expect_not(same_bytes(a, mx_rand(MX_SHAPE(64), MX_F32, MX_CPU, g1)));
  /* every kind is deterministic */
  cr_expect(same_bytes(mx_randn(MX_SHAPE(3, 5), MX_F64, MX_CPU, g1), mx_randn(MX_SHAPE(3, 5), MX_F64, MX_CPU, g2)) ==
            false, "g1 and g2 are at different offsets now");
  mx_generator_set_state(g2, 42, 128);
  mx_generator_set_state(g1, 42, 128);
  cr_expect(same_bytes(mx_randn(MX_SHAPE(3, 5), MX_F64, MX_CPU, g1), mx_randn(MX_SHAPE(3, 5), MX_F64, MX_CPU, g2)));
  cr_expect(same_bytes(mx_randint(-5, 9, MX_SHAPE(40), MX_I64, MX_CPU, g1),
                       mx_randint(-5, 9, MX_SHAPE(40), MX_I64, MX_CPU, g2)));
  cr_expect(same_bytes(mx_bernoulli_p(MX_SHAPE(40), 0.5, MX_U8, MX_CPU, g1),
                       mx_bernoulli_p(MX_SHAPE(40), 0.5, MX_U8, MX_CPU, g2)));
  mx_generator_free(g1);
  mx_generator_free(g2);
  mx_generator_free(g3);
  mx_scope_end(s);
}

Test(random, manual_seed_resets_default_generator) {
  mx_scope *s = mx_scope_begin();
  mx_manual_seed(7);
  mx_tensor *a = mx_rand(MX_SHAPE(100), MX_F32, MX_CPU, NULL);
  mx_tensor *a2 = mx_rand(MX_SHAPE(100), MX_F32, MX_CPU, NULL);
  mx_manual_seed(7);
  mx_tensor *b = mx_rand(MX_SHAPE(100), MX_F32, MX_CPU, mx_default_generator());
  mx_tensor *b2 = mx_rand(MX_SHAPE(100), MX_F32, MX_CPU, NULL);
  cr_expect(same_bytes(a, b));
  cr_expect(same_bytes(a2, b2));
  cr_expect_not(same_bytes(a, a2));
  uint64_t seed, offset;
  mx_generator_get_state(NULL, &seed, &offset);
  cr_expect_eq(seed, 7);
  cr_expect_eq(offset, 200, "one Philox counter per element drawn");
  mx_manual_seed(8);
  cr_expect_not(same_bytes(a, mx_rand(MX_SHAPE(100), MX_F32, MX_CPU, NULL)));
  mx_scope_end(s);
}

Test(random, state_save_restore_reproduces_continuation) {
  mx_scope *s = mx_scope_begin();
  mx_generator *g = mx_generator_new(1234);
  cr_assert_not_null(g);
  (void)mx_randn(MX_SHAPE(17), MX_F32, MX_CPU, g);
  uint64_t seed, offset;
  mx_generator_get_state(g, &seed, &offset);
  cr_expect_eq(seed, 1234);
  cr_expect_eq(offset, 17);
  mx_tensor *b = mx_rand(MX_SHAPE(5, 7), MX_F64, MX_CPU, g);
  mx_tensor *c = mx_randn(MX_SHAPE(33), MX_BF16, MX_CPU, g);
  mx_tensor *d = mx_randint(0, 1000, MX_SHAPE(9), MX_I32, MX_CPU, g);
  mx_generator_set_state(g, seed, offset);
  cr_expect(same_bytes(b, mx_rand(MX_SHAPE(5, 7), MX_F64, MX_CPU, g)));
  cr_expect(same_bytes(c, mx_randn(MX_SHAPE(33), MX_BF16, MX_CPU, g)));
  cr_expect(same_bytes(d, mx_randint(0, 1000, MX_SHAPE(9), MX_I32, MX_CPU, g)));
  /* the state moves to another generator */
  mx_generator *h = mx_generator_new(99);
  mx_generator_set_state(h, seed, offset);
  cr_expect(same_bytes(b, mx_rand(MX_SHAPE(5, 7), MX_F64, MX_CPU, h)));
  mx_generator_free(g);
  mx_generator_free(h);
  mx_scope_end(s);
}

Test(random, counter_based_stream_splits_anywhere) {
  mx_scope *s = mx_scope_begin();
  /* one draw of N equals a draw of 70000 followed by a draw of N - 70000:
   * element i takes counter offset + i, whichever thread computes it */
  mx_generator *g = mx_generator_new(5);
  mx_tensor *whole = mx_rand(MX_SHAPE(N), MX_F32, MX_CPU, g);
  mx_generator_set_state(g, 5, 0);
  mx_tensor *head = mx_rand(MX_SHAPE(70000), MX_F32, MX_CPU, g);
  mx_tensor *tail = mx_rand(MX_SHAPE(N - 70000), MX_F32, MX_CPU, g);
  cr_expect(same_bytes(mx_slice(whole, 0, 0, 70000, 1), head));
  cr_expect(same_bytes(mx_slice(whole, 0, 70000, N, 1), tail));
  /* the shape does not matter, only the element count */
  mx_generator_set_state(g, 5, 0);
  cr_expect(same_bytes(mx_reshape(whole, MX_SHAPE(400, 250)), mx_rand(MX_SHAPE(400, 250), MX_F32, MX_CPU, g)));
  mx_generator_free(g);
  mx_scope_end(s);
}

Test(random, known_answer) {
  mx_scope *s = mx_scope_begin();
  /* Philox4x32-10 with key 0 and counter 0 is (0x6627e8d5, 0xe169c58d, ...)
   * (Random123's known-answer vector); a float64 uniform takes the top 53
   * bits of (v0 << 32 | v1): 0.3990464708489645. Element 1 (counter 1) and
   * seed 42 element 5 were computed by an independent Python Philox. */
  mx_generator *g = mx_generator_new(0);
  mx_tensor *t = mx_rand(MX_SHAPE(2), MX_F64, MX_CPU, g);
  cr_expect_eq(mx_at(t, MX_SHAPE(0)), 0.3990464708489645, "got %.17g", mx_at(t, MX_SHAPE(0)));
  cr_expect_eq(mx_at(t, MX_SHAPE(1)), 0.9722412015223156, "got %.17g", mx_at(t, MX_SHAPE(1)));
  mx_generator_set_state(g, 42, 5);
  cr_expect_eq(mx_item(mx_rand(MX_SHAPE(1), MX_F64, MX_CPU, g)), 0.314847471493638);
  /* float32 keeps the top 24 bits of v0 */
  mx_generator_set_state(g, 0, 0);
  cr_expect_eq(mx_item(mx_rand(MX_SHAPE(1), MX_F32, MX_CPU, g)), 0.3990464210510254);
  mx_generator_free(g);
  mx_scope_end(s);
}

Test(random, generators_are_independent) {
  mx_scope *s = mx_scope_begin();
  mx_generator *g1 = mx_generator_new(11), *g2 = mx_generator_new(11), *other = mx_generator_new(11);
  mx_tensor *a1 = mx_rand(MX_SHAPE(50), MX_F32, MX_CPU, g1);
  mx_tensor *a2 = mx_rand(MX_SHAPE(50), MX_F32, MX_CPU, g1);
  /* draws from other generators and from the default one in between */
  mx_tensor *b1 = mx_rand(MX_SHAPE(50), MX_F32, MX_CPU, g2);
  (void)mx_rand(MX_SHAPE(1000), MX_F32, MX_CPU, other);
  (void)mx_randn(MX_SHAPE(1000), MX_F32, MX_CPU, NULL);
  mx_tensor *b2 = mx_rand(MX_SHAPE(50), MX_F32, MX_CPU, g2);
  cr_expect(same_bytes(a1, b1));
  cr_expect(same_bytes(a2, b2));
  /* explicit generators do not move the default one */
  mx_manual_seed(3);
  mx_tensor *d1 = mx_rand(MX_SHAPE(20), MX_F32, MX_CPU, NULL);
  mx_manual_seed(3);
  (void)mx_rand(MX_SHAPE(20), MX_F32, MX_CPU, g1);
  mx_tensor *d2 = mx_rand(MX_SHAPE(20), MX_F32, MX_CPU, NULL);
  cr_expect(same_bytes(d1, d2));
  uint64_t seed, offset;
  mx_generator_get_state(other, &seed, &offset);
  cr_expect(seed == 11 && offset == 1000);
  mx_generator_free(g1);
  mx_generator_free(g2);
  mx_generator_free(other);
  mx_generator_free(mx_default_generator()); /* must be a no-op */
  cr_expect_not_null(mx_rand(MX_SHAPE(2), MX_F32, MX_CPU, NULL));
  mx_scope_end(s);
}

/* --- distributions ------------------------------------------------------------------ */

static void check_uniform(mx_dtype dtype, uint64_t seed) {
  mx_generator *g = mx_generator_new(seed);
  mx_tensor *t = mx_rand(MX_SHAPE(N), dtype, MX_CPU, g);
  cr_assert_not_null(t, "%s", mx_last_error());
  cr_expect_eq(mx_dtype_of(t), dtype);
  double *v = values_of(t);
  double sum = 0, sq = 0, lo = 1, hi = 0;
  for (int i = 0; i < N; i++) {
    sum += v[i];
    lo = v[i] < lo ? v[i] : lo;
    hi = v[i] > hi ? v[i] : hi;
  }
  double mean = sum / N;
  for (int i = 0; i < N; i++) sq += (v[i] - mean) * (v[i] - mean);
  double var = sq / (N - 1);
  cr_expect_geq(lo, 0.0, "%s: a value below 0: %g", mx_dtype_name(dtype), lo);
  cr_expect_lt(hi, 1.0, "%s: a value of 1 or more: %.17g", mx_dtype_name(dtype), hi);
  cr_expect_lt(lo, 0.001, "%s: the minimum of 1e5 uniforms is near 0", mx_dtype_name(dtype));
  cr_expect_gt(hi, 0.99, "%s: the maximum is near 1", mx_dtype_name(dtype));
  /* mean: se = sqrt(1/12 / N) = 9.1e-4. variance: Var(s^2) = (mu4 - sigma^4) / N
   * with mu4 = 1/80, sigma^4 = 1/144: se = 2.4e-4. A float16 draw is k/2048
   * (bfloat16: k/256) with k uniform, a discrete uniform of mean
   * 0.5 - step/2 and variance (1 - step^2) / 12. */
  double step = dtype == MX_BF16 ? 1.0 / 256 : dtype == MX_F16 ? 1.0 / 2048 : 0;
  double mean_want = 0.5 - step / 2, var_want = (1 - step * step) / 12;
  cr_expect(fabs(mean - mean_want) < 6 * 9.13e-4, "%s: mean %g", mx_dtype_name(dtype), mean);
  cr_expect(fabs(var - var_want) < 6 * 2.36e-4, "%s: variance %g, expected %g", mx_dtype_name(dtype), var,
            var_want);
  free(v);
  mx_generator_free(g);
}

Test(random, rand_uniform_f32) {
  mx_scope *s = mx_scope_begin();
  check_uniform(MX_F32, 100);
  mx_scope_end(s);
}

Test(random, rand_uniform_f64) {
  mx_scope *s = mx_scope_begin();
  check_uniform(MX_F64, 101);
  mx_scope_end(s);
}

Test(random, rand_uniform_f16_bf16) {
  mx_scope *s = mx_scope_begin();
  check_uniform(MX_F16, 102);
  check_uniform(MX_BF16, 103);
  mx_scope_end(s);
}

Test(random, rand_f16_bf16_never_one) {
  mx_scope *s = mx_scope_begin();
  mx_generator *g = mx_generator_new(2024);
  /* 2^20 draws (2^16 under MX_TEST_QUICK): the largest value below 1 comes
   * up about 512 (quick: 32) times in float16, so one rounding up would too */
  const char *q = getenv("MX_TEST_QUICK");
  const int n = q && *q && strcmp(q, "0") != 0 ? 1 << 16 : 1 << 20;
  uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
  cr_assert_not_null(h);
  cr_assert_eq(mx_to_host(mx_rand(MX_SHAPE(n), MX_F16, MX_CPU, g), h, sizeof(uint16_t) * (size_t)n), MX_OK);
  int ones = 0, negative = 0, top = 0;
  for (int i = 0; i < n; i++) {
    ones += h[i] >= 0x3c00 && h[i] < 0x8000; /* >= 1.0 */
    negative += h[i] >= 0x8000 && h[i] != 0x8000;
    top += h[i] == 0x3bff; /* 1 - 2^-11, the largest float16 below 1 */
  }
  cr_expect_eq(ones, 0, "%d float16 values of 1 or more", ones);
  cr_expect_eq(negative, 0);
  cr_expect_gt(top, 0, "the largest float16 below 1 should be drawn");
  cr_assert_eq(mx_to_host(mx_rand(MX_SHAPE(n), MX_BF16, MX_CPU, g), h, sizeof(uint16_t) * (size_t)n), MX_OK);
  ones = negative = top = 0;
  for (int i = 0; i < n; i++) {
    ones += h[i] >= 0x3f80 && h[i] < 0x8000;
    negative += h[i] >= 0x8000 && h[i] != 0x8000;
    top += h[i] == 0x3f7f; /* 1 - 2^-8 */
  }
  cr_expect_eq(ones, 0, "%d bfloat16 values of 1 or more", ones);
  cr_expect_eq(negative, 0);
  cr_expect_gt(top, 0);
  free(h);
  mx_generator_free(g);
  mx_scope_end(s);
}

Test(random, randn_normal) {
  mx_scope *s = mx_scope_begin();
  const mx_dtype dtypes[] = {MX_F32, MX_F64, MX_BF16};
  for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++) {
    mx_generator *g = mx_generator_new(300 + k);
    double *v = values_of(mx_randn(MX_SHAPE(N), dtypes[k], MX_CPU, g));
    double sum = 0, sq = 0;
    int within1 = 0, within2 = 0, nonfinite = 0;
    for (int i = 0; i < N; i++) sum += v[i];
    double mean = sum / N;
    for (int i = 0; i < N; i++) {
      sq += (v[i] - mean) * (v[i] - mean);
      within1 += fabs(v[i]) < 1;
      within2 += fabs(v[i]) < 2;
      nonfinite += !isfinite(v[i]);
    }
    double var = sq / (N - 1);
    const char *name = mx_dtype_name(dtypes[k]);
    cr_expect_eq(nonfinite, 0);
    /* se(mean) = 1/sqrt(N) = 3.2e-3; se(var) = sqrt(2/N) = 4.5e-3 (bf16
     * rounding adds a relative error of at most 2^-9 per value) */
    cr_expect(fabs(mean) < 6 * 3.17e-3, "%s: mean %g", name, mean);
    cr_expect(fabs(var - 1) < 6 * 4.48e-3 + (dtypes[k] == MX_BF16 ? 0.004 : 0), "%s: variance %g", name, var);
    /* P(|z| < 1) = 0.682689, P(|z| < 2) = 0.954500; se = sqrt(p(1-p)/N) */
    cr_expect(fabs(within1 / (double)N - 0.682689) < 6 * 1.47e-3 + (dtypes[k] == MX_BF16 ? 0.005 : 0),
              "%s: P(|z|<1) = %g", name, within1 / (double)N);
    cr_expect(fabs(within2 / (double)N - 0.954500) < 6 * 6.6e-4 + (dtypes[k] == MX_BF16 ? 0.002 : 0),
              "%s: P(|z|<2) = %g", name, within2 / (double)N);
    free(v);
    mx_generator_free(g);
  }
  mx_scope_end(s);
}

Test(random, randint_range_and_uniformity) {
  mx_scope *s = mx_scope_begin();
  const mx_dtype dtypes[] = {MX_I64, MX_I32, MX_F32, MX_I32};
  const int64_t lows[] = {-3, 0, 10, -1000};
  const int64_t highs[] = {5, 13, 17, -990};
  for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++) {
    mx_generator *g = mx_generator_new(500 + k);
    mx_tensor *t = mx_randint(lows[k], highs[k], MX_SHAPE(N), dtypes[k], MX_CPU, g);
    cr_assert_not_null(t, "%s", mx_last_error());
    cr_expect_eq(mx_dtype_of(t), dtypes[k]);
    double *v = values_of(t);
    int64_t bins = highs[k] - lows[k], count[64] = {0}, outside = 0, fractional = 0;
    for (int i = 0; i < N; i++) {
      if (v[i] < lows[k] || v[i] >= highs[k]) {
        outside++;
        continue;
      }
      fractional += v[i] != floor(v[i]);
      count[(int64_t)v[i] - lows[k]]++;
    }
    cr_expect_eq(outside, 0, "randint(%lld, %lld): %lld values outside", (long long)lows[k], (long long)highs[k],
                 (long long)outside);
    cr_expect_eq(fractional, 0);
    double expected = (double)N / (double)bins, chi2 = 0;
    for (int64_t b = 0; b < bins; b++) {
      cr_expect_gt(count[b], 0, "value %lld never drawn", (long long)(lows[k] + b));
      chi2 += (count[b] - expected) * (count[b] - expected) / expected;
    }
    /* chi-square with df = bins - 1 <= 12: P(chi2 > df + 12 sqrt(2 df) + 10) < 1e-6 */
    double df = (double)(bins - 1), bound = df + 12 * sqrt(2 * df) + 10;
    cr_expect_lt(chi2, bound, "randint(%lld, %lld): chi-square %g over %g bins", (long long)lows[k],
                 (long long)highs[k], chi2, (double)bins);
    free(v);
    mx_generator_free(g);
  }
  mx_scope_end(s);
}

Test(random, randint_u8_and_wide_ranges) {
  mx_scope *s = mx_scope_begin();
  mx_generator *g = mx_generator_new(77);
  uint8_t *u = malloc(N);
  cr_assert_eq(mx_to_host(mx_randint(0, 256, MX_SHAPE(N), MX_U8, MX_CPU, g), u, N), MX_OK);
  int count[256] = {0};
  for (int i = 0; i < N; i++) count[u[i]]++;
  int zero_bins = 0;
  for (int b = 0; b < 256; b++) zero_bins += count[b] == 0;
  cr_expect_eq(zero_bins, 0, "all 256 byte values appear in 1e5 draws");
  free(u);
  /* int64 beyond 2^53 stays exact: [2^62, 2^62 + 4) */
  int64_t w[1000];
  cr_assert_eq(mx_to_host(mx_randint(1LL << 62, (1LL << 62) + 4, MX_SHAPE(1000), MX_I64, MX_CPU, g), w, sizeof w),
               MX_OK);
  int seen[4] = {0};
  for (int i = 0; i < 1000; i++) {
    int64_t d = w[i] - (1LL << 62);
    cr_assert(d >= 0 && d < 4, "%lld outside [2^62, 2^62 + 4)", (long long)w[i]);
    seen[d]++;
  }
  cr_expect(seen[0] && seen[1] && seen[2] && seen[3]);
  /* a range of one value */
  mx_tensor *one = mx_randint(9, 10, MX_SHAPE(5), MX_I32, MX_CPU, g);
  for (int64_t i = 0; i < 5; i++) cr_expect_eq(mx_at(one, MX_SHAPE(i)), 9);
  mx_generator_free(g);
  mx_scope_end(s);
}

Test(random, bernoulli_p_frequency) {
  mx_scope *s = mx_scope_begin();
  mx_generator *g = mx_generator_new(9);
  const double ps[] = {0.3, 0.5, 0.01};
  for (size_t k = 0; k < 3; k++) {
    double *v = values_of(mx_bernoulli_p(MX_SHAPE(N), ps[k], MX_F32, MX_CPU, g));
    int ones = 0, other = 0;
    for (int i = 0; i < N; i++) {
      ones += v[i] == 1;
      other += v[i] != 0 && v[i] != 1;
    }
    cr_expect_eq(other, 0);
    double se = sqrt(ps[k] * (1 - ps[k]) / N);
    cr_expect(fabs(ones / (double)N - ps[k]) < 6 * se, "p = %g: frequency %g", ps[k], ones / (double)N);
    free(v);
  }
  /* p = 0 and p = 1 are exact, in any dtype */
  bool b[1000];
  cr_assert_eq(mx_to_host(mx_bernoulli_p(MX_SHAPE(1000), 0.0, MX_BOOL, MX_CPU, g), b, sizeof b), MX_OK);
  int n1 = 0;
  for (int i = 0; i < 1000; i++) n1 += b[i];
  cr_expect_eq(n1, 0);
  int64_t l[1000];
  cr_assert_eq(mx_to_host(mx_bernoulli_p(MX_SHAPE(1000), 1.0, MX_I64, MX_CPU, g), l, sizeof l), MX_OK);
  int64_t total = 0;
  for (int i = 0; i < 1000; i++) total += l[i];
  cr_expect_eq(total, 1000);
  mx_clear_error();
  cr_expect_null(mx_bernoulli_p(MX_SHAPE(3), 1.5, MX_F32, MX_CPU, g));
  cr_expect_eq(mx_last_status(), MX_INVALID_ARGUMENT);
  mx_clear_error();
  cr_expect_null(mx_bernoulli_p(MX_SHAPE(3), -0.1, MX_F32, MX_CPU, g));
  mx_clear_error();
  cr_expect_null(mx_bernoulli_p(MX_SHAPE(3), NAN, MX_F32, MX_CPU, g));
  mx_clear_error();
  mx_generator_free(g);
  mx_scope_end(s);
}

Test(random, bernoulli_with_probability_tensor) {
  mx_scope *s = mx_scope_begin();
  mx_generator *g = mx_generator_new(10);
  /* rows of 0s and 1s: exact results */
  mx_tensor *p = mx_zeros(MX_SHAPE(4, 500), MX_F32, MX_CPU);
  cr_assert_eq(mx_fill_(mx_slice(p, 0, 1, 4, 2), 1.0), MX_OK); /* rows 1 and 3 */
  mx_tensor *r = mx_bernoulli(p, g);
  cr_assert_not_null(r, "%s", mx_last_error());
  cr_expect_eq(mx_dtype_of(r), MX_F32);
  cr_expect_eq(mx_ndim(r), 2);
  cr_expect_eq(mx_size(r, 1), 500);
  double *v = values_of(r);
  int wrong = 0;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 500; j++) wrong += v[i * 500 + j] != (double)(i % 2);
  cr_expect_eq(wrong, 0);
  free(v);
  /* a strided (transposed) probability tensor: result has its shape */
  mx_tensor *pt = mx_transpose(p, 0, 1); /* (500, 4): columns 1, 3 are ones */
  mx_tensor *rt = mx_bernoulli(pt, g);
  cr_assert_not_null(rt);
  cr_expect(mx_size(rt, 0) == 500 && mx_size(rt, 1) == 4);
  v = values_of(rt);
  wrong = 0;
  for (int i = 0; i < 500; i++)
    for (int j = 0; j < 4; j++) wrong += v[i * 4 + j] != (double)(j % 2);
  cr_expect_eq(wrong, 0);
  free(v);
  /* mixed probabilities: p = 0.25 for the first half, 0.75 for the second */
  mx_tensor *q = mx_full(MX_SHAPE(N), 0.25, MX_F64, MX_CPU);
  cr_assert_eq(mx_fill_(mx_slice(q, 0, N / 2, N, 1), 0.75), MX_OK);
  v = values_of(mx_bernoulli(q, g));
  int lo = 0, hi = 0;
  for (int i = 0; i < N / 2; i++) lo += v[i] == 1;
  for (int i = N / 2; i < N; i++) hi += v[i] == 1;
  double se = sqrt(0.25 * 0.75 / (N / 2));
  cr_expect(fabs(lo / (N / 2.0) - 0.25) < 6 * se, "frequency %g for p = 0.25", lo / (N / 2.0));
  cr_expect(fabs(hi / (N / 2.0) - 0.75) < 6 * se, "frequency %g for p = 0.75", hi / (N / 2.0));
  free(v);
  /* a float16 probability tensor gives a float16 result */
  mx_tensor *h = mx_bernoulli(mx_ones(MX_SHAPE(8), MX_F16, MX_CPU), g);
  cr_assert_not_null(h);
  cr_expect_eq(mx_dtype_of(h), MX_F16);
  uint16_t hb[8];
  cr_assert_eq(mx_to_host(h, hb, sizeof hb), MX_OK);
  for (int i = 0; i < 8; i++) cr_expect_eq(hb[i], 0x3c00);
  /* the generator advanced by one counter per element */
  uint64_t seed, offset;
  mx_generator_get_state(g, &seed, &offset);
  cr_expect_eq(offset, 2000 + 2000 + N + 8);
  mx_generator_free(g);
  mx_scope_end(s);
}

Test(random, dtype_errors) {
  mx_scope *s = mx_scope_begin();
  const mx_dtype non_float[] = {MX_I64, MX_I32, MX_U8, MX_BOOL};
  for (size_t k = 0; k < 4; k++) {
    mx_clear_error();
    cr_expect_null(mx_rand(MX_SHAPE(3), non_float[k], MX_CPU, NULL), "rand %s", mx_dtype_name(non_float[k]));
    cr_expect_eq(mx_last_status(), MX_DTYPE_ERROR);
    mx_clear_error();
    cr_expect_null(mx_randn(MX_SHAPE(3), non_float[k], MX_CPU, NULL));
    cr_expect_eq(mx_last_status(), MX_DTYPE_ERROR);
  }
  mx_clear_error();
  cr_expect_null(mx_randint(0, 2, MX_SHAPE(3), MX_BOOL, MX_CPU, NULL));
  cr_expect_eq(mx_last_status(), MX_DTYPE_ERROR);
  mx_clear_error();
  cr_expect_null(mx_randint(5, 5, MX_SHAPE(3), MX_I64, MX_CPU, NULL), "empty range");
  cr_expect_eq(mx_last_status(), MX_INVALID_ARGUMENT);
  mx_clear_error();
  /* a failed draw does not advance the generator */
  mx_manual_seed(1);
  (void)mx_rand(MX_SHAPE(3), MX_I32, MX_CPU, NULL);
  uint64_t seed, offset;
  mx_generator_get_state(NULL, &seed, &offset);
  cr_expect_eq(offset, 0);
  mx_clear_error();
  mx_scope_end(s);
}
