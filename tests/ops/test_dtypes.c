/* Dtype promotion (PyTorch's rules, checked with torch 1.13), broadcasting,
 * the shape errors of the binary ops and matrix products, and the 16-bit
 * matrix product contract: float16 computed in float32 and rounded once
 * (bit-exact against rounding the float32 product), bfloat16 within one
 * ulp of it, both accumulating in float32. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "op_checks.h"

static mx_tensor *vec(mx_dtype dtype, int n, const double *v) {
  mx_tensor *t = mx_from_data(v, MX_SHAPE(n), MX_F64, MX_CPU);
  mx_tensor *out = t ? mx_to_dtype(t, dtype) : NULL;
  cr_assert_not_null(out, "%s", mx_last_error());
  return out;
}

#define VEC(dtype, ...) vec(dtype, (int)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)), (double[]){__VA_ARGS__})

/* t has dtype and the values want (compared exactly). */
static void expect_result(const char *what, const mx_tensor *t, mx_dtype dtype, int n, const double *want) {
  cr_assert_not_null(t, "%s: %s", what, mx_last_error());
  cr_expect_eq(mx_dtype_of(t), dtype, "%s: dtype %s, expected %s", what, mx_dtype_name(mx_dtype_of(t)),
               mx_dtype_name(dtype));
  cr_assert_eq(mx_numel(t), n, "%s: %lld elements, expected %d", what, (long long)mx_numel(t), n);
  mx_tensor *flat = mx_reshape(t, MX_SHAPE(-1));
  for (int k = 0; k < n; k++) {
    double got = mx_at(flat, MX_SHAPE(k));
    cr_expect(got == want[k], "%s: element %d is %.17g, expected %.17g", what, k, got, want[k]);
  }
}

#define EXPECT(what, t, dtype, ...)                                                                     \
  expect_result(what, t, dtype, (int)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)), (double[]){__VA_ARGS__})

static void expect_error(const char *what, const mx_tensor *t, mx_status status, const char *message) {
  cr_expect_null(t, "%s: expected an error", what);
  cr_expect_eq(mx_last_status(), status, "%s: status %s, expected %s", what, mx_status_str(mx_last_status()),
               mx_status_str(status));
  cr_expect_str_eq(mx_last_error(), message, "%s: message \"%s\"", what, mx_last_error());
}

/* --- promotion -------------------------------------------------------------------------------- */

Test(ops_dtypes, float_widths) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *h = VEC(MX_F16, 1.5, -2.25), *f = VEC(MX_F32, 0.25, 4), *b = VEC(MX_BF16, 1, 2);
  mx_tensor *d = VEC(MX_F64, 0.5, 0.5);
  EXPECT("f16 + f32", mx_add(h, f), MX_F32, 1.75, 1.75);
  EXPECT("f32 + f16", mx_add(f, h), MX_F32, 1.75, 1.75);
  EXPECT("f16 + bf16", mx_add(h, b), MX_F32, 2.5, -0.25);
  EXPECT("f16 + f16", mx_add(h, h), MX_F16, 3, -4.5);
  EXPECT("bf16 * bf16", mx_mul(b, b), MX_BF16, 1, 4);
  EXPECT("f32 + f64", mx_add(f, d), MX_F64, 0.75, 4.5);
  EXPECT("f16 - f64", mx_sub(h, d), MX_F64, 1, -2.75);
  mx_scope_end(s);
}

Test(ops_dtypes, ints_and_floats) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *i32 = VEC(MX_I32, 3, -4), *i64 = VEC(MX_I64, 7, -7), *u8 = VEC(MX_U8, 200, 1);
  mx_tensor *bl = VEC(MX_BOOL, 1, 0), *f32 = VEC(MX_F32, 0.5, 0.25), *h = VEC(MX_F16, 0.5, 0.25);
  EXPECT("i32 + f32", mx_add(i32, f32), MX_F32, 3.5, -3.75);
  EXPECT("i64 * f16", mx_mul(i64, h), MX_F16, 3.5, -1.75);
  EXPECT("i32 + i64", mx_add(i32, i64), MX_I64, 10, -11);
  EXPECT("u8 + i32", mx_add(u8, i32), MX_I32, 203, -3);
  EXPECT("bool + i32", mx_add(bl, i32), MX_I32, 4, -4);
  EXPECT("u8 + u8 wraps", mx_add(u8, u8), MX_U8, 144, 2);
  EXPECT("bool * f32", mx_mul(bl, f32), MX_F32, 0.5, 0);
  mx_scope_end(s);
}

Test(ops_dtypes, bool_plus_bool_is_bool) {
  mx_scope *s = mx_scope_begin();
  /* torch.tensor([True]) + torch.tensor([True]) == tensor([True]) */
  mx_tensor *t = VEC(MX_BOOL, 1, 1, 0, 0), *u = VEC(MX_BOOL, 1, 0, 1, 0);
  EXPECT("bool + bool", mx_add(t, u), MX_BOOL, 1, 1, 1, 0);
  EXPECT("bool * bool", mx_mul(t, u), MX_BOOL, 1, 0, 0, 0);
  mx_scope_end(s);
}

Test(ops_dtypes, c_scalars_never_widen) {
  mx_scope *s = mx_scope_begin();
  /* a C double is a Python float: it makes an integer tensor float32, and
   * leaves a floating tensor's dtype alone */
  EXPECT("i64 + 2.5", mx_add_scalar(VEC(MX_I64, 1, -2), 2.5), MX_F32, 3.5, 0.5);
  EXPECT("i32 * 3.0", mx_mul_scalar(VEC(MX_I32, 1, -2), 3), MX_F32, 3, -6);
  EXPECT("bool + 2.5", mx_add_scalar(VEC(MX_BOOL, 1, 0), 2.5), MX_F32, 3.5, 2.5);
  EXPECT("f16 + 2.5", mx_add_scalar(VEC(MX_F16, 1, -2), 2.5), MX_F16, 3.5, 0.5);
  EXPECT("bf16 * 2.5", mx_mul_scalar(VEC(MX_BF16, 1, -2), 2.5), MX_BF16, 2.5, -5);
  EXPECT("f32 - 0.1", mx_sub_scalar(VEC(MX_F32, 1), 0.1), MX_F32, (double)(1.0f - 0.1f));
  EXPECT("f64 - 0.1", mx_sub_scalar(VEC(MX_F64, 1), 0.1), MX_F64, 1 - 0.1);
  mx_scope_end(s);
}

Test(ops_dtypes, zero_dim_tensors_count_less) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *f64_0d = mx_scalar(2.5, MX_F64, MX_CPU), *i64_0d = mx_scalar(300, MX_I64, MX_CPU);
  /* a 0-d tensor of a higher category sets the dtype; of the same category it does not */
  EXPECT("i64 + 0-d f64", mx_add(VEC(MX_I64, 1), f64_0d), MX_F64, 3.5);
  EXPECT("f32 + 0-d f64", mx_add(VEC(MX_F32, 1), f64_0d), MX_F32, 3.5);
  EXPECT("f16 + 0-d i64", mx_add(VEC(MX_F16, 1), i64_0d), MX_F16, 301);
  EXPECT("u8 + 0-d i64 300 wraps", mx_add(VEC(MX_U8, 1, 2), i64_0d), MX_U8, 45, 46);
  EXPECT("i32 + 0-d i64", mx_add(VEC(MX_I32, 1), mx_scalar(2, MX_I64, MX_CPU)), MX_I32, 3);
  EXPECT("0-d f64 + 0-d i64", mx_add(f64_0d, i64_0d), MX_F64, 302.5);
  mx_scope_end(s);
}

Test(ops_dtypes, integer_division_is_float) {
  mx_scope *s = mx_scope_begin();
  EXPECT("i64 / i64", mx_div(VEC(MX_I64, 7, -7, 1), VEC(MX_I64, 2, 2, 4)), MX_F32, 3.5, -3.5, 0.25);
  EXPECT("i32 / 2.0", mx_div_scalar(VEC(MX_I32, 7, -3), 2), MX_F32, 3.5, -1.5);
  EXPECT("5 / i64", mx_rdiv_scalar(5, VEC(MX_I64, 2, -4)), MX_F32, 2.5, -1.25);
  EXPECT("u8 / u8", mx_div(VEC(MX_U8, 1), VEC(MX_U8, 8)), MX_F32, 0.125);
  mx_tensor *by_zero = mx_div(VEC(MX_I64, 1, -1, 0), VEC(MX_I64, 0, 0, 0));
  cr_assert_not_null(by_zero, "%s", mx_last_error());
  cr_expect(isinf(mx_at(by_zero, MX_SHAPE(0))) && mx_at(by_zero, MX_SHAPE(0)) > 0);
  cr_expect(isinf(mx_at(by_zero, MX_SHAPE(1))) && mx_at(by_zero, MX_SHAPE(1)) < 0);
  cr_expect(isnan(mx_at(by_zero, MX_SHAPE(2))));
  EXPECT("atan2 of ints", mx_atan2(VEC(MX_I32, 0), VEC(MX_I32, 1)), MX_F32, 0);
  mx_scope_end(s);
}

Test(ops_dtypes, unary_dtypes) {
  mx_scope *s = mx_scope_begin();
  EXPECT("exp(i64)", mx_exp(VEC(MX_I64, 0)), MX_F32, 1);
  EXPECT("sqrt(i32)", mx_sqrt(VEC(MX_I32, 4)), MX_F32, 2);
  EXPECT("neg(i32)", mx_neg(VEC(MX_I32, 4, -5)), MX_I32, -4, 5);
  EXPECT("abs(i64)", mx_abs(VEC(MX_I64, 4, -5)), MX_I64, 4, 5);
  EXPECT("floor(i64)", mx_floor(VEC(MX_I64, 4, -5)), MX_I64, 4, -5);
  EXPECT("relu(i32)", mx_relu(VEC(MX_I32, 4, -5)), MX_I32, 4, 0);
  EXPECT("sign(f16)", mx_sign(VEC(MX_F16, 4, -5, 0)), MX_F16, 1, -1, 0);
  mx_scope_end(s);
}

Test(ops_dtypes, comparisons_are_bool) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *f = VEC(MX_F32, 1, 2, 3), *i = VEC(MX_I64, 1, 3, 2);
  EXPECT("f32 == i64", mx_eq(f, i), MX_BOOL, 1, 0, 0);
  EXPECT("f32 != i64", mx_ne(f, i), MX_BOOL, 0, 1, 1);
  EXPECT("f32 < i64", mx_lt(f, i), MX_BOOL, 0, 1, 0);
  EXPECT("f32 <= i64", mx_le(f, i), MX_BOOL, 1, 1, 0);
  EXPECT("f32 > i64", mx_gt(f, i), MX_BOOL, 0, 0, 1);
  EXPECT("f32 >= i64", mx_ge(f, i), MX_BOOL, 1, 0, 1);
  EXPECT("i64 > 1.5", mx_gt_scalar(i, 1.5), MX_BOOL, 0, 1, 1);
  /* compared in the promoted dtype: 0.1 as float32 is not 0.1 as float64 */
  EXPECT("f32 0.1 == 0.1", mx_eq_scalar(VEC(MX_F32, 0.1), 0.1), MX_BOOL, 1);
  EXPECT("f64 0.1f == 0.1", mx_eq(VEC(MX_F64, (double)0.1f), mx_scalar(0.1, MX_F64, MX_CPU)), MX_BOOL, 0);
  EXPECT("logical_and", mx_logical_and(f, VEC(MX_U8, 0, 1, 2)), MX_BOOL, 0, 1, 1);
  EXPECT("logical_not", mx_logical_not(VEC(MX_F16, 0, 1)), MX_BOOL, 1, 0);
  mx_scope_end(s);
}

Test(ops_dtypes, ternary_and_reductions) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *cond = VEC(MX_BOOL, 1, 0);
  EXPECT("where(f16, f32)", mx_where(cond, VEC(MX_F16, 1.5, 2), VEC(MX_F32, 3, 4)), MX_F32, 1.5, 4);
  EXPECT("where(i32, i64)", mx_where(cond, VEC(MX_I32, 1, 2), VEC(MX_I64, 3, 4)), MX_I64, 1, 4);
  EXPECT("masked_fill(i64, 2.7)", mx_masked_fill(VEC(MX_I64, 1, 2), cond, 2.7), MX_I64, 2, 2);
  EXPECT("sum(i32)", mx_sum(VEC(MX_I32, 1, 2, 3), MX_ALL_DIMS, false), MX_I64, 6);
  EXPECT("sum(bool)", mx_sum(VEC(MX_BOOL, 1, 1, 0), MX_ALL_DIMS, false), MX_I64, 2);
  EXPECT("sum(u8) does not wrap", mx_sum(VEC(MX_U8, 200, 200), MX_ALL_DIMS, false), MX_I64, 400);
  EXPECT("sum(f16)", mx_sum(VEC(MX_F16, 1, 2), MX_ALL_DIMS, false), MX_F16, 3);
  EXPECT("sum_dtype(f16 -> f32)", mx_sum_dtype(VEC(MX_F16, 1, 2), MX_ALL_DIMS, false, MX_F32), MX_F32, 3);
  EXPECT("prod(i32)", mx_prod(VEC(MX_I32, 2, 3, 4), MX_ALL_DIMS, false), MX_I64, 24);
  EXPECT("amax(u8)", mx_amax(VEC(MX_U8, 2, 30, 4), MX_ALL_DIMS, false), MX_U8, 30);
  EXPECT("argmax(f32)", mx_argmax(VEC(MX_F32, 2, 30, 4), 0, false), MX_I64, 1);
  EXPECT("cumsum(i32)", mx_cumsum(VEC(MX_I32, 1, 2, 3), 0), MX_I64, 1, 3, 6);
  EXPECT("all(f32)", mx_all(VEC(MX_F32, 1, 0.5), MX_ALL_DIMS, false), MX_BOOL, 1);
  /* mean of integers is an error in PyTorch too */
  expect_error("mean(i64)", mx_mean(VEC(MX_I64, 1, 2), MX_ALL_DIMS, false), MX_DTYPE_ERROR,
               "mx_mean: input dtype int64 is not floating; convert it first");
  mx_scope_end(s);
}

/* int64 arithmetic is exact beyond 2^53 (no trip through double). */
Test(ops_dtypes, int64_arithmetic_is_exact) {
  mx_scope *s = mx_scope_begin();
  int64_t big[3] = {(INT64_C(1) << 62) + 1, (INT64_C(1) << 53) + 1, -(INT64_C(1) << 60) - 3};
  int64_t one[3] = {1, 1, -1};
  mx_tensor *a = mx_from_data(big, MX_SHAPE(3), MX_I64, MX_CPU), *b = mx_from_data(one, MX_SHAPE(3), MX_I64, MX_CPU);
  int64_t got[3];
  struct {
    const char *what;
    mx_tensor *t;
    int64_t want[3];
  } cases[] = {
      {"add", mx_add(a, b), {big[0] + 1, big[1] + 1, big[2] - 1}},
      {"mul", mx_mul(a, b), {big[0], big[1], -big[2]}},
      {"sub", mx_sub(a, b), {big[0] - 1, big[1] - 1, big[2] + 1}},
      {"neg", mx_neg(a), {-big[0], -big[1], -big[2]}},
      {"cumsum", mx_cumsum(b, 0), {1, 2, 1}},
      {"maximum", mx_maximum(a, b), {big[0], big[1], -1}},
      {"clone", mx_clone(a), {big[0], big[1], big[2]}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    cr_assert_not_null(cases[k].t, "%s: %s", cases[k].what, mx_last_error());
    cr_assert_eq(mx_to_host(cases[k].t, got, sizeof got), MX_OK, "%s", mx_last_error());
    for (int i = 0; i < 3; i++)
      cr_expect_eq(got[i], cases[k].want[i], "%s: element %d is %lld, expected %lld", cases[k].what, i,
                   (long long)got[i], (long long)cases[k].want[i]);
  }
  int64_t sum = 0;
  mx_tensor *total = mx_sum(a, MX_ALL_DIMS, false);
  cr_assert_eq(mx_to_host(total, &sum, sizeof sum), MX_OK, "%s", mx_last_error());
  cr_expect_eq(sum, big[0] + big[1] + big[2], "sum is %lld", (long long)sum);
  mx_scope_end(s);
}

/* torch.add(int_tensor, int_tensor, alpha=2.5) raises "For integral input
 * tensors, argument alpha must not be a floating point number." */
Test(ops_dtypes, integer_add_rejects_a_fractional_alpha) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *r = mx_add_scaled(VEC(MX_I64, 1, 2), VEC(MX_I64, 2, 4), 2.5);
  cr_expect_null(r, "i64 + 2.5 * i64 gave a tensor of %s (%g, %g) where PyTorch refuses",
                 r ? mx_dtype_name(mx_dtype_of(r)) : "",
                 r ? mx_at(r, MX_SHAPE(0)) : 0, r ? mx_at(r, MX_SHAPE(1)) : 0);
  EXPECT("i64 + 2 * i64", mx_add_scaled(VEC(MX_I64, 1, 2), VEC(MX_I64, 2, 4), 2), MX_I64, 5, 10);
  mx_scope_end(s);
}

/* --- broadcasting ------------------------------------------------------------------------------ */

Test(ops_dtypes, broadcast_shapes) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_zeros(MX_SHAPE(2, 1, 3), MX_F32, MX_CPU);
  op_expect_shape("(2,1,3) + (4,1)", mx_add(a, mx_ones(MX_SHAPE(4, 1), MX_F32, MX_CPU)), MX_SHAPE(2, 4, 3));
  op_expect_shape("(3) * (2,3)", mx_mul(mx_ones(MX_SHAPE(3), MX_F32, MX_CPU), mx_ones(MX_SHAPE(2, 3), MX_F32, MX_CPU)),
                  MX_SHAPE(2, 3));
  op_expect_shape("0-d + (2,3)", mx_add(mx_scalar(1, MX_F32, MX_CPU), mx_ones(MX_SHAPE(2, 3), MX_F32, MX_CPU)),
                  MX_SHAPE(2, 3));
  op_expect_shape("(2,0) + (1)", mx_add(mx_ones(MX_SHAPE(2, 0), MX_F32, MX_CPU), mx_ones(MX_SHAPE(1), MX_F32, MX_CPU)),
                  MX_SHAPE(2, 0));
  op_expect_shape("(1,1) - (1)", mx_sub(mx_ones(MX_SHAPE(1, 1), MX_F32, MX_CPU), mx_ones(MX_SHAPE(1), MX_F32, MX_CPU)),
                  MX_SHAPE(1, 1));
  op_expect_shape("where (3) (2,1) (1,1,3)",
                  mx_where(mx_ones(MX_SHAPE(3), MX_BOOL, MX_CPU), mx_ones(MX_SHAPE(2, 1), MX_F32, MX_CPU),
                           mx_ones(MX_SHAPE(1, 1, 3), MX_F32, MX_CPU)),
                  MX_SHAPE(1, 2, 3));
  /* values: the row broadcast down the columns */
  mx_tensor *col = mx_reshape(mx_arange(0, 2, 1, MX_F64, MX_CPU), MX_SHAPE(2, 1));
  mx_tensor *row = mx_arange(0, 3, 1, MX_F64, MX_CPU);
  EXPECT("10 * col + row", mx_add(mx_mul_scalar(col, 10), row), MX_F64, 0, 1, 2, 10, 11, 12);
  mx_scope_end(s);
}

Test(ops_dtypes, broadcast_errors) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU), *b = mx_zeros(MX_SHAPE(4), MX_F32, MX_CPU);
  expect_error("add", mx_add(a, b), MX_SHAPE_ERROR,
               "mx_add: shapes [2,3] and [4] cannot be broadcast together (dim 1: 3 vs 4)");
  expect_error("mul", mx_mul(mx_zeros(MX_SHAPE(2, 1, 3), MX_F32, MX_CPU), mx_zeros(MX_SHAPE(4, 2), MX_F32, MX_CPU)),
               MX_SHAPE_ERROR, "mx_mul: shapes [2,1,3] and [4,2] cannot be broadcast together (dim 2: 3 vs 2)");
  expect_error("sub, first bigger", mx_sub(b, a), MX_SHAPE_ERROR,
               "mx_sub: shapes [4] and [2,3] cannot be broadcast together (dim 1: 4 vs 3)");
  expect_error("eq", mx_eq(a, b), MX_SHAPE_ERROR,
               "mx_eq: shapes [2,3] and [4] cannot be broadcast together (dim 1: 3 vs 4)");
  /* a NULL input keeps the first message */
  mx_tensor *bad = mx_add(a, b);
  mx_tensor *chained = mx_exp(mx_mul(bad, a));
  expect_error("chained", chained, MX_SHAPE_ERROR,
               "mx_add: shapes [2,3] and [4] cannot be broadcast together (dim 1: 3 vs 4)");
  mx_scope_end(s);
}

/* --- matrix product shapes --------------------------------------------------------------------- */

Test(ops_dtypes, matmul_shapes) {
  mx_scope *s = mx_scope_begin();
#define Z(...) mx_zeros(MX_SHAPE(__VA_ARGS__), MX_F32, MX_CPU)
  op_expect_shape("(3) @ (3)", mx_matmul(Z(3), Z(3)), MX_SCALAR);
  op_expect_shape("(2,3) @ (3)", mx_matmul(Z(2, 3), Z(3)), MX_SHAPE(2));
  op_expect_shape("(3) @ (3,4)", mx_matmul(Z(3), Z(3, 4)), MX_SHAPE(4));
  op_expect_shape("(5,2,3) @ (3,4)", mx_matmul(Z(5, 2, 3), Z(3, 4)), MX_SHAPE(5, 2, 4));
  op_expect_shape("(2,3) @ (5,3,4)", mx_matmul(Z(2, 3), Z(5, 3, 4)), MX_SHAPE(5, 2, 4));
  op_expect_shape("(2,1,2,3) @ (3,3,4)", mx_matmul(Z(2, 1, 2, 3), Z(3, 3, 4)), MX_SHAPE(2, 3, 2, 4));
  op_expect_shape("(3) @ (2,3,4)", mx_matmul(Z(3), Z(2, 3, 4)), MX_SHAPE(2, 4));
  op_expect_shape("(2,2,3) @ (3)", mx_matmul(Z(2, 2, 3), Z(3)), MX_SHAPE(2, 2));
  op_expect_shape("outer", mx_outer(Z(2), Z(3)), MX_SHAPE(2, 3));
  op_expect_shape("(2,0) @ (0,3)", mx_mm(Z(2, 0), Z(0, 3)), MX_SHAPE(2, 3));
  EXPECT("(2,0) @ (0,3) is zeros", mx_mm(Z(2, 0), Z(0, 3)), MX_F32, 0, 0, 0, 0, 0, 0);
  mx_scope_end(s);
}

Test(ops_dtypes, matmul_errors) {
  mx_scope *s = mx_scope_begin();
  expect_error("mm", mx_mm(Z(2, 3), Z(4, 5)), MX_SHAPE_ERROR,
               "mx_mm: shapes [2,3] and [4,5] cannot be multiplied (3 != 4)");
  expect_error("bmm", mx_bmm(Z(2, 2, 3), Z(2, 4, 5)), MX_SHAPE_ERROR,
               "mx_bmm: shapes [2,2,3] and [2,4,5] cannot be multiplied (3 != 4)");
  expect_error("mv", mx_mv(Z(2, 3), Z(4)), MX_SHAPE_ERROR, "mx_mv: shapes [2,3] and [4] cannot be multiplied (3 != 4)");
  expect_error("dot", mx_dot(Z(3), Z(4)), MX_SHAPE_ERROR, "mx_dot: shapes [3] and [4] cannot be multiplied (3 != 4)");
  expect_error("batched matmul", mx_matmul(Z(2, 2, 3), Z(2, 4, 5)), MX_SHAPE_ERROR,
               "mx_matmul: shapes [2,2,3] and [2,4,5] cannot be multiplied (3 != 4)");
  cr_expect_null(mx_matmul(mx_scalar(1, MX_F32, MX_CPU), Z(3)), "matmul of a 0-d tensor");
  cr_expect_null(mx_mm(Z(2, 3, 1), Z(3, 4)), "mm of a 3-d tensor");
  cr_expect_null(mx_matmul(mx_zeros(MX_SHAPE(2, 3), MX_F16, MX_CPU), Z(3, 4)), "matmul of f16 and f32");
  mx_scope_end(s);
}

/* DESIGN.md section 6 gives this very message for mx_matmul: the error
 * names the op the user called, not mx_mm inside it. */
Test(ops_dtypes, matmul_error_names_matmul) {
  mx_scope *s = mx_scope_begin();
  expect_error("matmul", mx_matmul(Z(2, 3), Z(4, 5)), MX_SHAPE_ERROR,
               "mx_matmul: shapes [2,3] and [4,5] cannot be multiplied (3 != 4)");
  mx_scope_end(s);
#undef Z
}

/* A composite op's shape and dtype errors name the op the user called
 * (DESIGN.md section 6), not the op inside it that tripped, and the shapes
 * the user passed. */
static void expect_message_starts(const char *what, const mx_tensor *t, const char *prefix) {
  cr_expect_null(t, "%s: expected an error", what);
  cr_expect(!strncmp(mx_last_error(), prefix, strlen(prefix)), "%s: message \"%s\" does not start with \"%s\"", what,
            mx_last_error(), prefix);
}

Test(ops_dtypes, composite_errors_name_the_called_op) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *v3 = mx_ones(MX_SHAPE(3), MX_F32, MX_CPU), *m23 = mx_ones(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  mx_tensor *m53 = mx_ones(MX_SHAPE(5, 3), MX_F32, MX_CPU), *m45 = mx_ones(MX_SHAPE(4, 5), MX_F32, MX_CPU);
  expect_message_starts("addcmul", mx_addcmul(v3, m23, m53, 1), "mx_addcmul: ");
  expect_message_starts("addcdiv", mx_addcdiv(v3, m23, m53, 1), "mx_addcdiv: ");
  expect_message_starts("lerp", mx_lerp(v3, m23, m53), "mx_lerp: ");
  expect_message_starts("addmm", mx_addmm(v3, m23, mx_ones(MX_SHAPE(3, 4), MX_F32, MX_CPU), 1, 1), "mx_addmm: ");
  expect_message_starts("addmv", mx_addmv(v3, m23, mx_ones(MX_SHAPE(4), MX_F32, MX_CPU), 1, 1), "mx_addmv: ");
  expect_message_starts("matmul of f16 and f32",
                        mx_matmul(mx_ones(MX_SHAPE(2, 3), MX_F16, MX_CPU), mx_ones(MX_SHAPE(3, 4), MX_F32, MX_CPU)),
                        "mx_matmul: ");
  /* the shapes as given, not as matmul reshaped them */
  expect_error("matmul (3) @ (4,5)", mx_matmul(v3, m45), MX_SHAPE_ERROR,
               "mx_matmul: shapes [3] and [4,5] cannot be multiplied (3 != 4)");
  /* where: the two shapes that conflict ([3] broadcasts with both) */
  cr_expect_null(mx_where(mx_ones(MX_SHAPE(3), MX_BOOL, MX_CPU), m23, m53));
  cr_expect(strstr(mx_last_error(), "[2,3]") && strstr(mx_last_error(), "[5,3]"),
            "where: \"%s\" does not name [2,3] and [5,3]", mx_last_error());
  mx_scope_end(s);
}

/* --- 16-bit matrix products ----------------------------------------------------------------------- */

/* A (shape) tensor of dtype: seeded normal values rounded to dtype. */
static mx_tensor *rounded_randn(mx_shape shape, mx_dtype dtype, uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_tensor *t = mx_to_dtype(mx_randn(shape, MX_F32, MX_CPU, gen), dtype);
  mx_generator_free(gen);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

static uint16_t *bits_of(const mx_tensor *t) {
  int64_t n = mx_numel(t);
  uint16_t *b = malloc(sizeof(uint16_t) * (size_t)n);
  cr_assert_eq(mx_to_host(t, b, sizeof(uint16_t) * (size_t)n), MX_OK, "%s", mx_last_error());
  return b;
}

/* a @ b in dtype against: convert to f32, multiply in f32, round to dtype. */
static void check_16bit_matmul(mx_dtype dtype, mx_shape sa, mx_shape sb, uint64_t seed, bool exact) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = rounded_randn(sa, dtype, seed), *b = rounded_randn(sb, dtype, seed + 1);
  mx_tensor *got = mx_matmul(a, b);
  cr_assert_not_null(got, "%s", mx_last_error());
  cr_assert_eq(mx_dtype_of(got), dtype, "result dtype %s", mx_dtype_name(mx_dtype_of(got)));
  mx_tensor *ref32 = mx_matmul(mx_to_dtype(a, MX_F32), mx_to_dtype(b, MX_F32));
  mx_tensor *ref = mx_to_dtype(ref32, dtype);
  cr_assert_not_null(ref, "%s", mx_last_error());
  int64_t n = mx_numel(got);
  cr_assert_eq(n, mx_numel(ref));
  uint16_t *g = bits_of(got), *r = bits_of(ref);
  int mantissa = dtype == MX_F16 ? 10 : 7;
  int bad = 0;
  for (int64_t k = 0; k < n; k++) {
    double gv = dtype == MX_F16 ? mx_f16_to_f32(g[k]) : mx_bf16_to_f32(g[k]);
    double rv = dtype == MX_F16 ? mx_f16_to_f32(r[k]) : mx_bf16_to_f32(r[k]);
    double ulp = rv == 0 ? ldexp(1, -24) : ldexp(1, ilogb(rv) - mantissa);
    bool ok = exact ? g[k] == r[k] : fabs(gv - rv) <= ulp;
    if (!ok && bad++ < 4)
      cr_expect(ok, "%s matmul element %lld: %.9g (0x%04x), f32 product rounded %.9g (0x%04x)", mx_dtype_name(dtype),
                (long long)k, gv, g[k], rv, r[k]);
  }
  cr_expect_eq(bad, 0, "%s: %d of %lld elements off", mx_dtype_name(dtype), bad, (long long)n);
  free(g);
  free(r);
  mx_scope_end(s);
}

Test(ops_matmul16, f16_is_the_rounded_f32_product) {
  mx_scope *s = mx_scope_begin();
  check_16bit_matmul(MX_F16, MX_SHAPE(5, 7), MX_SHAPE(7, 3), 11, true);
  check_16bit_matmul(MX_F16, MX_SHAPE(33, 64), MX_SHAPE(64, 17), 12, true);
  check_16bit_matmul(MX_F16, MX_SHAPE(2, 4, 16), MX_SHAPE(2, 16, 8), 13, true);
  check_16bit_matmul(MX_F16, MX_SHAPE(3, 40), MX_SHAPE(40), 14, true);
  mx_scope_end(s);
}

Test(ops_matmul16, bf16_within_one_ulp_of_the_rounded_f32_product) {
  mx_scope *s = mx_scope_begin();
  check_16bit_matmul(MX_BF16, MX_SHAPE(5, 7), MX_SHAPE(7, 3), 21, false);
  check_16bit_matmul(MX_BF16, MX_SHAPE(33, 64), MX_SHAPE(64, 17), 22, false);
  check_16bit_matmul(MX_BF16, MX_SHAPE(2, 4, 16), MX_SHAPE(2, 16, 8), 23, false);
  check_16bit_matmul(MX_BF16, MX_SHAPE(3, 40), MX_SHAPE(40), 24, false);
  mx_scope_end(s);
}

/* Ones summed 4096 times: 4096 in float32 accumulation; a float16
 * accumulator would stall at 2048 (2048 + 1 rounds back to 2048), a
 * bfloat16 one at 256. */
Test(ops_matmul16, accumulates_in_f32) {
  mx_scope *s = mx_scope_begin();
  mx_dtype dtypes[] = {MX_F16, MX_BF16};
  for (int k = 0; k < 2; k++) {
    mx_tensor *a = mx_ones(MX_SHAPE(2, 4096), dtypes[k], MX_CPU), *b = mx_ones(MX_SHAPE(4096, 3), dtypes[k], MX_CPU);
    mx_tensor *c = mx_mm(a, b);
    cr_assert_not_null(c, "%s", mx_last_error());
    cr_expect_eq(mx_dtype_of(c), dtypes[k]);
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++)
        cr_expect_eq(mx_at(c, MX_SHAPE(i, j)), 4096.0, "%s: element (%d, %d) is %g", mx_dtype_name(dtypes[k]), i, j,
                     mx_at(c, MX_SHAPE(i, j)));
  }
  /* and the float16 result overflows only at the end: 300 * 300 * 1 > 65504 */
  mx_tensor *big = mx_mm(mx_full(MX_SHAPE(1, 2), 300, MX_F16, MX_CPU), mx_full(MX_SHAPE(2, 1), 300, MX_F16, MX_CPU));
  cr_assert_not_null(big);
  cr_expect(isinf(mx_item(big)), "300*300*2 in f16 is %g, expected inf", mx_item(big));
  mx_tensor *fits = mx_mm(mx_full(MX_SHAPE(1, 2), 300, MX_F16, MX_CPU), mx_full(MX_SHAPE(2, 1), -100, MX_F16, MX_CPU));
  cr_expect_eq(mx_item(fits), -60000.0, "300*-100*2 in f16 is %g", mx_item(fits));
  mx_scope_end(s);
}

/* float32 products against a float64 reference: the error bound grows
 * with the reduction length K (gamma_K = K u / (1 - K u) times sum |a||b|). */
Test(ops_matmul16, f32_matmul_within_the_reduction_bound) {
  mx_scope *s = mx_scope_begin();
  const int M = 9, K = 300, N = 7;
  mx_tensor *a = rounded_randn(MX_SHAPE(M, K), MX_F32, 31), *b = rounded_randn(MX_SHAPE(K, N), MX_F32, 32);
  mx_tensor *c = mx_matmul(a, b);
  mx_tensor *a64 = mx_to_dtype(a, MX_F64), *b64 = mx_to_dtype(b, MX_F64);
  cr_assert_not_null(c, "%s", mx_last_error());
  double u = ldexp(1, -24), gamma = K * u / (1 - K * u);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double exact = 0, magnitude = 0;
      for (int k = 0; k < K; k++) {
        double p = mx_at(a64, MX_SHAPE(i, k)) * mx_at(b64, MX_SHAPE(k, j));
        exact += p;
        magnitude += fabs(p);
      }
      double got = mx_at(c, MX_SHAPE(i, j));
      cr_expect(fabs(got - exact) <= gamma * magnitude, "(%d, %d): %.9g, exact %.17g, bound %.3g", i, j, got, exact,
                gamma * magnitude);
    }
  mx_scope_end(s);
}

/* The sums the CPU takes dense fast paths for (per channel of NCHW, column
 * sums, last-dim sums, a full sum long enough to be split into chunks),
 * in every float dtype, against a double reference rounded once: the
 * values are multiples of 2^-7 in [0.5, 1.5), so any double accumulation
 * is exact (the small tensor's values are the big one's first ones). */
static mx_tensor *multiples_of_2_7(int64_t n, mx_dtype dtype) {
  mx_tensor *i = mx_remainder(mx_arange(0, (double)n, 1, MX_F64, MX_CPU), mx_scalar(128, MX_F64, MX_CPU));
  return mx_to_dtype(mx_div_scalar(mx_add_scalar(i, 64), 128), dtype);
}

Test(ops_dtypes, dense_sums_round_the_exact_sum_once) {
  const mx_dtype dtypes[] = {MX_F32, MX_F64, MX_BF16, MX_F16};
  const int64_t N = 3, C = 5, H = 7, W = 9, big = 70000 * 3;
  for (int k = 0; k < 4; k++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *x = multiples_of_2_7(big, dtypes[k]), *small = multiples_of_2_7(N * C * H * W, dtypes[k]);
    cr_assert_not_null(x, "%s", mx_last_error());
    cr_assert_not_null(small, "%s", mx_last_error());
    double *v = malloc(sizeof(double) * (size_t)big);
    cr_assert_eq(mx_to_host(mx_to_dtype(x, MX_F64), v, sizeof(double) * (size_t)big), MX_OK, "%s", mx_last_error());
    struct {
      const char *what;
      mx_tensor *got;
      int64_t n_out, n_in, out_step, in_step, run, run_step; /* output o sums v[o * out_step + r * run_step + i * in_step] */
    } cases[] = {
        {"NCHW over (0, 2, 3)", mx_sum(mx_reshape(small, MX_SHAPE(N, C, H, W)), MX_DIMS(0, 2, 3), false), C, H * W, H * W, 1, N, C * H * W},
        {"(N, C) over dim 0", mx_sum(mx_reshape(small, MX_SHAPE(N * H, C * W)), MX_DIMS(0), false), C * W, 1, 1, 0, N * H, C * W},
        {"last dim", mx_sum(mx_reshape(small, MX_SHAPE(N * C, H * W)), MX_DIMS(-1), false), N * C, H * W, H * W, 1, 1, 0},
        {"all of it", mx_sum(x, MX_ALL_DIMS, false), 1, big, 0, 1, 1, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
      cr_assert_not_null(cases[c].got, "%s: %s", cases[c].what, mx_last_error());
      cr_expect_eq(mx_dtype_of(cases[c].got), dtypes[k]);
      double *want = malloc(sizeof(double) * (size_t)cases[c].n_out), *got = malloc(sizeof(double) * (size_t)cases[c].n_out);
      for (int64_t o = 0; o < cases[c].n_out; o++) {
        want[o] = 0;
        for (int64_t r = 0; r < cases[c].run; r++)
          for (int64_t i = 0; i < cases[c].n_in; i++) want[o] += v[o * cases[c].out_step + r * cases[c].run_step + i * cases[c].in_step];
      }
      mx_tensor *rounded = mx_to_dtype(mx_from_data(want, MX_SHAPE(cases[c].n_out), MX_F64, MX_CPU), dtypes[k]);
      cr_assert_eq(mx_to_host(mx_to_dtype(rounded, MX_F64), want, sizeof(double) * (size_t)cases[c].n_out), MX_OK);
      cr_assert_eq(mx_to_host(mx_to_dtype(mx_reshape(cases[c].got, MX_SHAPE(-1)), MX_F64), got,
                              sizeof(double) * (size_t)cases[c].n_out), MX_OK, "%s", mx_last_error());
      for (int64_t o = 0; o < cases[c].n_out; o++)
        cr_expect_eq(got[o], want[o], "%s %s: output %lld is %.17g, want %.17g", mx_dtype_name(dtypes[k]), cases[c].what,
                     (long long)o, got[o], want[o]);
      free(want), free(got);
    }
    free(v);
    mx_scope_end(s);
  }
}
