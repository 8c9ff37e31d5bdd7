/* The CPU's dense bfloat16 rows (kernels/cpu/elementwise.c): every bf16 bit
 * pattern through add, mul, relu and a comparison, against kernels/math.h's
 * scalar conversions element by element. The rows are compiled for AVX-512,
 * AVX2 and plain x86-64 and picked at load time, with a branch-free rounding
 * of their own; this pins their bits to the scalar definition, NaNs (quieted,
 * payload kept), infinities, subnormals and ties included. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "kernels/cpu/elementwise.h"
#include "kernels/elementwise.h"
#include "kernels/math.h"

#define N 65536 /* every bf16 bit pattern */

static mx_kview dense(void *data, mx_dtype dt) {
  return (mx_kview){.data = data, .dtype = dt, .ndim = 1, .shape = {N}, .strides = {1}};
}

/* y values that meet every x: zeros, one, a subnormal, the largest finite, inf, a NaN with a payload. */
static const uint16_t partners[] = {0x0000, 0x8000, 0x3f80, 0x0001, 0x7f7f, 0x7f80, 0xff81};

static uint16_t *all_patterns(void) {
  uint16_t *x = malloc(N * sizeof *x);
  cr_assert(x);
  for (int i = 0; i < N; i++) x[i] = (uint16_t)i;
  return x;
}

static bool is_nan(uint16_t b) { return (b & 0x7fff) > 0x7f80; }

/* With two NaN operands IEEE 754 leaves open whose payload the result
 * keeps (x86 keeps the first source's, and a vectorised loop may swap the
 * operands of a commutative op): either quieted NaN is right. */
static void expect_same(const uint16_t *got, const uint16_t *want, const char *what, uint16_t y) {
  int bad = 0;
  for (int i = 0; i < N; i++) {
    bool either_nan = is_nan((uint16_t)i) && is_nan(y) && (got[i] == (i | 0x40) || got[i] == (y | 0x40));
    if (got[i] != want[i] && !either_nan && ++bad <= 5)
      cr_log_error("%s: x=0x%04x y=0x%04x: got 0x%04x, want 0x%04x", what, i, y, got[i], want[i]);
  }
  cr_expect_eq(bad, 0, "%s with y=0x%04x: %d of %d patterns differ", what, y, bad, N);
}

Test(elementwise_bf16, add_and_mul_round_as_the_scalar_code) {
  uint16_t *x = all_patterns(), *y = malloc(N * 2), *out = malloc(N * 2), *want = malloc(N * 2);
  cr_assert(y && out && want);
  mx_kview vx = dense(x, MX_BF16), vy = dense(y, MX_BF16), vo = dense(out, MX_BF16);
  for (size_t p = 0; p < sizeof partners / sizeof partners[0]; p++) {
    for (int i = 0; i < N; i++) y[i] = partners[p];
    float yf = mx_bf16_to_f32(partners[p]);
    cr_assert_eq(mx__cpu_binary(MX_BIN_ADD, &vo, &vx, &vy, 0.5), MX_OK);
    for (int i = 0; i < N; i++) want[i] = mx_f32_to_bf16(mx_bf16_to_f32(x[i]) + 0.5f * yf);
    expect_same(out, want, "add (alpha 0.5)", partners[p]);
    cr_assert_eq(mx__cpu_binary(MX_BIN_MUL, &vo, &vx, &vy, 1), MX_OK);
    for (int i = 0; i < N; i++) want[i] = mx_f32_to_bf16(mx_bf16_to_f32(x[i]) * yf);
    expect_same(out, want, "mul", partners[p]);
  }
  free(x), free(y), free(out), free(want);
}

Test(elementwise_bf16, relu_and_less_than_follow_the_scalar_code) {
  uint16_t *x = all_patterns(), *out = malloc(N * 2), *want = malloc(N * 2);
  bool *lt = malloc(N);
  cr_assert(out && want && lt);
  mx_kview vx = dense(x, MX_BF16), vo = dense(out, MX_BF16), vlt = dense(lt, MX_BOOL);
  cr_assert_eq(mx__cpu_unary(MX_UN_RELU, &vo, &vx, 0, 0), MX_OK);
  for (int i = 0; i < N; i++) {
    float v = mx_bf16_to_f32(x[i]);
    want[i] = mx_f32_to_bf16(v < 0 ? 0.0f : v);
  }
  expect_same(out, want, "relu", 0);
  uint16_t one = 0x3f80, *y = malloc(N * 2);
  cr_assert(y);
  for (int i = 0; i < N; i++) y[i] = one;
  mx_kview vy = dense(y, MX_BF16);
  cr_assert_eq(mx__cpu_binary(MX_BIN_LT, &vlt, &vx, &vy, 1), MX_OK);
  int bad = 0;
  for (int i = 0; i < N; i++) bad += lt[i] != (mx_bf16_to_f32(x[i]) < 1.0f);
  cr_expect_eq(bad, 0, "x < 1: %d of %d patterns wrong", bad, N);
  free(x), free(y), free(out), free(want), free(lt);
}
