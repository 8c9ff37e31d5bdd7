/* The CPU's 16-bit float rows (kernels/cpu/elementwise.c): every bf16 and
 * every f16 bit pattern through add, mul, relu and a comparison, against
 * kernels/math.h's scalar conversions element by element. The rows are
 * compiled for AVX-512, AVX2 and plain x86-64 and picked at load time (bf16
 * with a branch-free rounding of its own, f16 through F16C blocks); this pins
 * their bits to the scalar definition, NaNs (quieted, payload kept),
 * infinities, subnormals and ties included. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "kernels/cpu/elementwise.h"
#include "kernels/elementwise.h"
#include "kernels/math.h"

#define N 65536 /* every 16-bit pattern */

/* One 16-bit float format: its scalar conversions, its NaN bits, and y
 * values that meet every x: zeros, one, a subnormal, the largest finite,
 * inf, a NaN with a payload. */
typedef struct {
  mx_dtype dtype;
  float (*to_f32)(uint16_t);
  uint16_t (*from_f32)(float);
  uint16_t inf, quiet; /* the exponent bits of inf and NaN; the quiet bit */
  uint16_t partners[7];
} format;

static const format bf16 = {MX_BF16, mx_bf16_to_f32, mx_f32_to_bf16, 0x7f80, 0x0040,
                            {0x0000, 0x8000, 0x3f80, 0x0001, 0x7f7f, 0x7f80, 0xff81}};
static const format f16 = {MX_F16, mx_f16_to_f32, mx_f32_to_f16, 0x7c00, 0x0200,
                           {0x0000, 0x8000, 0x3c00, 0x0001, 0x7bff, 0x7c00, 0xfc01}};

static mx_kview dense(void *data, mx_dtype dt, int n) {
  return (mx_kview){.data = data, .dtype = dt, .ndim = 1, .shape = {n}, .strides = {1}};
}

static uint16_t *all_patterns(void) {
  uint16_t *x = malloc(N * sizeof *x);
  cr_assert(x);
  for (int i = 0; i < N; i++) x[i] = (uint16_t)i;
  return x;
}

static bool is_nan(const format *f, uint16_t b) { return (b & 0x7fff) > f->inf; }

/* With two NaN operands IEEE 754 leaves open whose payload the result
 * keeps (x86 keeps the first source's, and a vectorised loop may swap the
 * operands of a commutative op): either quieted NaN is right. */
static void expect_same(const format *f, const uint16_t *got, const uint16_t *want, int n, const char *what,
                        uint16_t y) {
  int bad = 0;
  for (int i = 0; i < n; i++) {
    bool either_nan =
        is_nan(f, (uint16_t)i) && is_nan(f, y) && (got[i] == (i | f->quiet) || got[i] == (y | f->quiet));
    if (got[i] != want[i] && !either_nan && ++bad <= 5)
      cr_log_error("%s %s: x=0x%04x y=0x%04x: got 0x%04x, want 0x%04x", mx_dtype_name(f->dtype), what, i, y,
                   got[i], want[i]);
  }
  cr_expect_eq(bad, 0, "%s %s with y=0x%04x: %d of %d patterns differ", mx_dtype_name(f->dtype), what, y, bad, n);
}

/* Over the first n patterns: an n that is no multiple of the f16 rows'
 * block (kernels/cpu/elementwise_rows.inc) ends in a partial block. */
static void add_and_mul(const format *f, int n) {
  uint16_t *x = all_patterns(), *y = malloc(N * 2), *out = malloc(N * 2), *want = malloc(N * 2);
  cr_assert(y && out && want);
  mx_kview vx = dense(x, f->dtype, n), vy = dense(y, f->dtype, n), vo = dense(out, f->dtype, n);
  for (size_t p = 0; p < sizeof f->partners / sizeof f->partners[0]; p++) {
    for (int i = 0; i < N; i++) y[i] = f->partners[p];
    float yf = f->to_f32(f->partners[p]);
    cr_assert_eq(mx__cpu_binary(MX_BIN_ADD, &vo, &vx, &vy, 0.5), MX_OK);
    for (int i = 0; i < n; i++) want[i] = f->from_f32(f->to_f32(x[i]) + 0.5f * yf);
    expect_same(f, out, want, n, "add (alpha 0.5)", f->partners[p]);
    cr_assert_eq(mx__cpu_binary(MX_BIN_MUL, &vo, &vx, &vy, 1), MX_OK);
    for (int i = 0; i < n; i++) want[i] = f->from_f32(f->to_f32(x[i]) * yf);
    expect_same(f, out, want, n, "mul", f->partners[p]);
  }
  free(x), free(y), free(out), free(want);
}

static void relu_and_less_than(const format *f) {
  uint16_t *x = all_patterns(), *out = malloc(N * 2), *want = malloc(N * 2);
  bool *lt = malloc(N);
  cr_assert(out && want && lt);
  mx_kview vx = dense(x, f->dtype, N), vo = dense(out, f->dtype, N), vlt = dense(lt, MX_BOOL, N);
  cr_assert_eq(mx__cpu_unary(MX_UN_RELU, &vo, &vx, 0, 0), MX_OK);
  for (int i = 0; i < N; i++) {
    float v = f->to_f32(x[i]);
    want[i] = f->from_f32(v < 0 ? 0.0f : v);
  }
  expect_same(f, out, want, N, "relu", 0);
  uint16_t *y = malloc(N * 2);
  cr_assert(y);
  for (int i = 0; i < N; i++) y[i] = f->partners[2]; /* one */
  mx_kview vy = dense(y, f->dtype, N);
  cr_assert_eq(mx__cpu_binary(MX_BIN_LT, &vlt, &vx, &vy, 1), MX_OK);
  int bad = 0;
  for (int i = 0; i < N; i++) bad += lt[i] != (f->to_f32(x[i]) < 1.0f);
  cr_expect_eq(bad, 0, "%s x < 1: %d of %d patterns wrong", mx_dtype_name(f->dtype), bad, N);
  free(x), free(y), free(out), free(want), free(lt);
}

Test(elementwise_bf16, add_and_mul_round_as_the_scalar_code) { add_and_mul(&bf16, N); }
Test(elementwise_bf16, relu_and_less_than_follow_the_scalar_code) { relu_and_less_than(&bf16); }
Test(elementwise_f16, add_and_mul_round_as_the_scalar_code) { add_and_mul(&f16, N); }
Test(elementwise_f16, a_row_ending_inside_a_block_rounds_as_the_scalar_code) { add_and_mul(&f16, 3 * 128 + 5); }
Test(elementwise_f16, relu_and_less_than_follow_the_scalar_code) { relu_and_less_than(&f16); }
