/* Creation functions and tensor properties.
 *
 * Expected values are hand-computed or taken from PyTorch 1.13 (noted where
 * they are); f16/bf16 bit patterns are from the IEEE binary16 / bfloat16
 * encodings (1.0 = 0x3c00 / 0x3f80, 2.5 = 0x4100 / 0x4020). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <mixgrad.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof *(a))

static const mx_dtype all_dtypes[] = {MX_F32, MX_F64, MX_F16, MX_BF16, MX_I64, MX_I32, MX_U8, MX_BOOL};

static void expect_shape(const mx_tensor *t, mx_shape want) {
  mx_shape got = mx_shape_get(t);
  cr_assert_eq(got.ndim, want.ndim, "ndim %d, expected %d", got.ndim, want.ndim);
  for (int i = 0; i < want.ndim; i++)
    cr_expect_eq(got.d[i], want.d[i], "size of dim %d is %lld, expected %lld", i, (long long)got.d[i],
                 (long long)want.d[i]);
}

static void expect_strides(const mx_tensor *t, mx_shape want) {
  mx_shape got = mx_strides_get(t);
  cr_assert_eq(got.ndim, want.ndim);
  for (int i = 0; i < want.ndim; i++)
    cr_expect_eq(got.d[i], want.d[i], "stride of dim %d is %lld, expected %lld", i, (long long)got.d[i],
                 (long long)want.d[i]);
}

/* Reads a 1-D tensor into doubles (n must match) through mx_at. */
static void expect_values(const mx_tensor *t, const double *want, int64_t n) {
  cr_assert_not_null(t, "%s", mx_last_error());
  cr_assert_eq(mx_ndim(t), 1);
  cr_assert_eq(mx_numel(t), n, "numel %lld, expected %lld", (long long)mx_numel(t), (long long)n);
  for (int64_t i = 0; i < n; i++) {
    double v = mx_at(t, MX_SHAPE(i));
    cr_expect(v == want[i], "element %lld is %.17g, expected %.17g", (long long)i, v, want[i]);
  }
}

/* --- empty / zeros / ones / full / scalar for every dtype ------------------ */

Test(create, empty_every_dtype) {
  mx_scope *s = mx_scope_begin();
  for (size_t k = 0; k < ARRAY_LEN(all_dtypes); k++) {
    mx_tensor *t = mx_empty(MX_SHAPE(2, 3, 4), all_dtypes[k], MX_CPU);
    cr_assert_not_null(t, "%s: %s", mx_dtype_name(all_dtypes[k]), mx_last_error());
    cr_expect_eq(mx_dtype_of(t), all_dtypes[k]);
    cr_expect_eq(mx_device_of(t), MX_CPU);
    cr_expect_eq(mx_ndim(t), 3);
    cr_expect_eq(mx_numel(t), 24);
    cr_expect_eq(mx_offset(t), 0);
    cr_expect(mx_is_contiguous(t));
    expect_shape(t, MX_SHAPE(2, 3, 4));
    expect_strides(t, MX_SHAPE(12, 4, 1));
    cr_expect_eq(mx_version(t), 0);
    cr_expect_not_null(mx_data_ptr(t));
    cr_expect_eq((uintptr_t)mx_data_ptr(t) % 64, 0, "CPU storage is 64-byte aligned");
  }
  mx_scope_end(s);
}

Test(create, zeros_ones_full_every_dtype) {
  mx_scope *s = mx_scope_begin();
  /* full(-3.75): floats keep it, integers truncate toward zero, u8 saturates
   * at 0, bool is value != 0 */
  const double full_expected[] = {-3.75, -3.75, -3.75, -3.75, -3, -3, 0, 1};
  for (size_t k = 0; k < ARRAY_LEN(all_dtypes); k++) {
    mx_dtype dt = all_dtypes[k];
    mx_tensor *z = mx_zeros(MX_SHAPE(3, 2), dt, MX_CPU);
    mx_tensor *o = mx_ones(MX_SHAPE(3, 2), dt, MX_CPU);
    mx_tensor *f = mx_full(MX_SHAPE(3, 2), -3.75, dt, MX_CPU);
    cr_assert(z && o && f, "%s: %s", mx_dtype_name(dt), mx_last_error());
    for (int64_t i = 0; i < 3; i++)
      for (int64_t j = 0; j < 2; j++) {
        cr_expect_eq(mx_at(z, MX_SHAPE(i, j)), 0.0, "%s zeros", mx_dtype_name(dt));
        cr_expect_eq(mx_at(o, MX_SHAPE(i, j)), 1.0, "%s ones", mx_dtype_name(dt));
        cr_expect_eq(mx_at(f, MX_SHAPE(i, j)), full_expected[k], "%s full(-3.75) gave %g",
                     mx_dtype_name(dt), mx_at(f, MX_SHAPE(i, j)));
      }
    cr_expect(mx_is_contiguous(f));
    expect_strides(f, MX_SHAPE(2, 1));
  }
  mx_scope_end(s);
}

Test(create, ones_and_full_bit_patterns) {
  mx_scope *s = mx_scope_begin();
  uint16_t h[4], b[4];
  cr_assert_eq(mx_to_host(mx_ones(MX_SHAPE(4), MX_F16, MX_CPU), h, sizeof h), MX_OK);
  for (int i = 0; i < 4; i++) cr_expect_eq(h[i], 0x3c00, "f16 one is 0x%04x", h[i]);
  cr_assert_eq(mx_to_host(mx_ones(MX_SHAPE(4), MX_BF16, MX_CPU), b, sizeof b), MX_OK);
  for (int i = 0; i < 4; i++) cr_expect_eq(b[i], 0x3f80, "bf16 one is 0x%04x", b[i]);
  cr_assert_eq(mx_to_host(mx_full(MX_SHAPE(4), 2.5, MX_F16, MX_CPU), h, sizeof h), MX_OK);
  cr_expect_eq(h[3], 0x4100);
  cr_assert_eq(mx_to_host(mx_full(MX_SHAPE(4), -2.5, MX_BF16, MX_CPU), b, sizeof b), MX_OK);
  cr_expect_eq(b[0], 0xc020);
  /* 70000 is beyond float16's 65504: +inf */
  cr_assert_eq(mx_to_host(mx_full(MX_SHAPE(4), 70000, MX_F16, MX_CPU), h, sizeof h), MX_OK);
  cr_expect_eq(h[1], 0x7c00);
  bool bools[4];
  cr_assert_eq(mx_to_host(mx_full(MX_SHAPE(4), 0.25, MX_BOOL, MX_CPU), bools, sizeof bools), MX_OK);
  cr_expect(bools[0] && bools[3]);
  uint8_t u[4];
  cr_assert_eq(mx_to_host(mx_full(MX_SHAPE(4), 1000, MX_U8, MX_CPU), u, sizeof u), MX_OK);
  cr_expect_eq(u[2], 255);
  int32_t i32[4];
  cr_assert_eq(mx_to_host(mx_full(MX_SHAPE(4), NAN, MX_I32, MX_CPU), i32, sizeof i32), MX_OK);
  cr_expect_eq(i32[0], 0, "NaN stored in an integer is 0");
  int64_t i64[4];
  cr_assert_eq(mx_to_host(mx_full(MX_SHAPE(4), -1e15, MX_I64, MX_CPU), i64, sizeof i64), MX_OK);
  cr_expect_eq(i64[3], -1000000000000000LL);
  mx_scope_end(s);
}

Test(create, scalar_every_dtype) {
  mx_scope *s = mx_scope_begin();
  const double expected[] = {7.5, 7.5, 7.5, 7.5, 7, 7, 7, 1};
  for (size_t k = 0; k < ARRAY_LEN(all_dtypes); k++) {
    mx_tensor *t = mx_scalar(7.5, all_dtypes[k], MX_CPU);
    cr_assert_not_null(t, "%s", mx_last_error());
    cr_expect_eq(mx_ndim(t), 0);
    cr_expect_eq(mx_numel(t), 1);
    cr_expect_eq(mx_shape_get(t).ndim, 0);
    cr_expect_eq(mx_strides_get(t).ndim, 0);
    cr_expect(mx_is_contiguous(t));
    cr_expect_eq(mx_dtype_of(t), all_dtypes[k]);
    cr_expect_eq(mx_item(t), expected[k], "%s scalar(7.5) is %g", mx_dtype_name(all_dtypes[k]), mx_item(t));
    cr_expect_eq(mx_at(t, MX_SCALAR), expected[k]);
    cr_expect_eq(mx_size(t, 0), 1, "a 0-d tensor has size 1 in dim 0 and -1");
    cr_expect_eq(mx_size(t, -1), 1);
  }
  mx_scope_end(s);
}

Test(create, zero_size_dims) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(2, 0, 3), MX_F32, MX_CPU);
  cr_assert_not_null(t, "%s", mx_last_error());
  cr_expect_eq(mx_numel(t), 0);
  expect_shape(t, MX_SHAPE(2, 0, 3));
  expect_strides(t, MX_SHAPE(3, 3, 1)); /* torch.zeros(2, 0, 3).stride() */
  mx_tensor *e = mx_empty(MX_SHAPE(0), MX_I64, MX_CPU);
  cr_assert_not_null(e);
  cr_expect_eq(mx_numel(e), 0);
  cr_expect_eq(mx_to_host(e, (int64_t[1]){0}, 0), MX_OK);
  mx_scope_end(s);
}

/* --- arange -------------------------------------------------------------- */

Test(create, arange_integers) {
  mx_scope *s = mx_scope_begin();
  expect_values(mx_arange(0, 5, 1, MX_F32, MX_CPU), (double[]){0, 1, 2, 3, 4}, 5);
  expect_values(mx_arange(0, 10, 3, MX_I64, MX_CPU), (double[]){0, 3, 6, 9}, 4); /* ceil(10/3) */
  expect_values(mx_arange(-2, 2, 1, MX_I32, MX_CPU), (double[]){-2, -1, 0, 1}, 4);
  expect_values(mx_arange(5, -1, -2, MX_I64, MX_CPU), (double[]){5, 3, 1}, 3);
  mx_tensor *t = mx_arange(0, 5, 1, MX_I64, MX_CPU);
  cr_assert_not_null(t);
  cr_expect_eq(mx_dtype_of(t), MX_I64);
  int64_t host[5];
  cr_assert_eq(mx_to_host(t, host, sizeof host), MX_OK);
  for (int i = 0; i < 5; i++) cr_expect_eq(host[i], i);
  mx_scope_end(s);
}

Test(create, arange_fractional_step) {
  mx_scope *s = mx_scope_begin();
  /* ceil((1 - 0) / 0.3) = ceil(3.33) = 4 elements: 0, 0.3, 0.6, 0.9 */
  mx_tensor *t = mx_arange(0, 1, 0.3, MX_F64, MX_CPU);
  cr_assert_not_null(t, "%s", mx_last_error());
  cr_assert_eq(mx_numel(t), 4);
  const double want[] = {0, 0.3, 0.6, 0.9};
  for (int i = 0; i < 4; i++)
    cr_expect(fabs(mx_at(t, MX_SHAPE(i)) - want[i]) < 1e-15, "element %d is %.17g", i, mx_at(t, MX_SHAPE(i)));
  /* 0.5 steps are exact */
  expect_values(mx_arange(1, 3, 0.5, MX_F32, MX_CPU), (double[]){1, 1.5, 2, 2.5}, 4);
  /* ceil(2.1 / 0.5) = 5 */
  expect_values(mx_arange(0, 2.1, 0.5, MX_F32, MX_CPU), (double[]){0, 0.5, 1, 1.5, 2}, 5);
  mx_scope_end(s);
}

Test(create, arange_negative_step) {
  mx_scope *s = mx_scope_begin();
  expect_values(mx_arange(1, 0, -0.25, MX_F32, MX_CPU), (double[]){1, 0.75, 0.5, 0.25}, 4);
  expect_values(mx_arange(3, -3, -1.5, MX_F64, MX_CPU), (double[]){3, 1.5, 0, -1.5}, 4);
  mx_scope_end(s);
}

Test(create, arange_empty_and_errors) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *e = mx_arange(2, 2, 1, MX_F32, MX_CPU);
  cr_assert_not_null(e, "%s", mx_last_error());
  cr_expect_eq(mx_numel(e), 0);
  cr_expect_eq(mx_ndim(e), 1);
  mx_clear_error();
  cr_expect_null(mx_arange(0, 5, 0, MX_F32, MX_CPU), "step 0 is an error");
  cr_expect_eq(mx_last_status(), MX_INVALID_ARGUMENT);
  mx_clear_error();
  cr_expect_null(mx_arange(0, 5, -1, MX_F32, MX_CPU), "a step going the wrong way is an error");
  cr_expect_eq(mx_last_status(), MX_INVALID_ARGUMENT);
  mx_clear_error();
  cr_expect_null(mx_arange(0, INFINITY, 1, MX_F32, MX_CPU));
  cr_expect_neq(mx_last_status(), MX_OK);
  mx_clear_error();
  mx_scope_end(s);
}

/* --- linspace ----------------------------------------------------------- */

Test(create, linspace_values) {
  mx_scope *s = mx_scope_begin();
  expect_values(mx_linspace(0, 1, 5, MX_F32, MX_CPU), (double[]){0, 0.25, 0.5, 0.75, 1}, 5);
  expect_values(mx_linspace(2, -2, 3, MX_F64, MX_CPU), (double[]){2, 0, -2}, 3);
  /* torch.linspace(0, 1, 7, dtype=torch.float64).tolist() */
  expect_values(mx_linspace(0, 1, 7, MX_F64, MX_CPU),
                (double[]){0.0, 0.16666666666666666, 0.3333333333333333, 0.5, 0.6666666666666667,
                           0.8333333333333334, 1.0},
                7);
  /* torch.linspace(0.1, 0.7, 5, dtype=torch.float64).tolist(): the second
   * half counts back from the end, so the last value is exactly 0.7 */
  expect_values(mx_linspace(0.1, 0.7, 5, MX_F64, MX_CPU),
                (double[]){0.1, 0.25, 0.39999999999999997, 0.5499999999999999, 0.7}, 5);
  /* integer dtypes truncate: torch.linspace(0, 10, 4, dtype=torch.int64) */
  expect_values(mx_linspace(0, 10, 4, MX_I64, MX_CPU), (double[]){0, 3, 6, 10}, 4);
  mx_scope_end(s);
}

Test(create, linspace_endpoints_exact) {
  mx_scope *s = mx_scope_begin();
  const double ends[][2] = {{0.1, 0.3}, {-1.7, 3.3}, {1e-3, 7.77}, {5.5, -0.1}};
  for (size_t k = 0; k < ARRAY_LEN(ends); k++) {
    for (int64_t steps = 2; steps <= 50; steps += 7) {
      mx_tensor *t = mx_linspace(ends[k][0], ends[k][1], steps, MX_F64, MX_CPU);
      cr_assert_not_null(t);
      cr_expect_eq(mx_at(t, MX_SHAPE(0)), ends[k][0]);
      cr_expect_eq(mx_at(t, MX_SHAPE(steps - 1)), ends[k][1], "steps %lld: last %.17g, expected %.17g",
                   (long long)steps, mx_at(t, MX_SHAPE(steps - 1)), ends[k][1]);
    }
  }
  mx_scope_end(s);
}

Test(create, linspace_steps_0_1_2) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *t0 = mx_linspace(3, 7, 0, MX_F32, MX_CPU);
  cr_assert_not_null(t0, "%s", mx_last_error());
  cr_expect_eq(mx_ndim(t0), 1);
  cr_expect_eq(mx_numel(t0), 0);
  /* torch.linspace(3, 7, 1) is tensor([3.]): the start */
  expect_values(mx_linspace(3, 7, 1, MX_F32, MX_CPU), (double[]){3}, 1);
  expect_values(mx_linspace(3, 7, 2, MX_F32, MX_CPU), (double[]){3, 7}, 2);
  mx_clear_error();
  cr_expect_null(mx_linspace(0, 1, -1, MX_F32, MX_CPU));
  cr_expect_eq(mx_last_status(), MX_INVALID_ARGUMENT);
  mx_clear_error();
  mx_scope_end(s);
}

/* --- eye -------------------------------------------------------------------- */

static void expect_eye(mx_tensor *t, int64_t n, int64_t m) {
  cr_assert_not_null(t, "%s", mx_last_error());
  expect_shape(t, MX_SHAPE(n, m));
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < m; j++)
      cr_expect_eq(mx_at(t, MX_SHAPE(i, j)), i == j ? 1.0 : 0.0, "eye(%lld, %lld)[%lld, %lld]", (long long)n,
                   (long long)m, (long long)i, (long long)j);
}

Test(create, eye_square_and_rectangular) {
  mx_scope *s = mx_scope_begin();
  expect_eye(mx_eye(3, 3, MX_F32, MX_CPU), 3, 3);
  expect_eye(mx_eye(2, 4, MX_F64, MX_CPU), 2, 4);
  expect_eye(mx_eye(4, 2, MX_I32, MX_CPU), 4, 2);
  expect_eye(mx_eye(1, 1, MX_BF16, MX_CPU), 1, 1);
  expect_eye(mx_eye(3, 0, MX_F32, MX_CPU), 3, 0);
  /* the raw buffer of eye(2, 3) */
  float host[6];
  cr_assert_eq(mx_to_host(mx_eye(2, 3, MX_F32, MX_CPU), host, sizeof host), MX_OK);
  const float want[6] = {1, 0, 0, 0, 1, 0};
  cr_expect_arr_eq(host, want, sizeof host);
  uint16_t h[4];
  cr_assert_eq(mx_to_host(mx_eye(2, 2, MX_F16, MX_CPU), h, sizeof h), MX_OK);
  cr_expect(h[0] == 0x3c00 && h[1] == 0 && h[2] == 0 && h[3] == 0x3c00);
  mx_scope_end(s);
}

/* --- from_data / to_host -------------------------------------------------- */

Test(create, from_data_round_trip_every_dtype) {
  mx_scope *s = mx_scope_begin();
  const float f32[6] = {1.5f, -2.25f, 0.0f, 3e38f, -1e-40f /* subnormal */, INFINITY};
  const double f64[6] = {1e-300, -2.5, 0.1, 1e300, -0.0, 123456789.123};
  const uint16_t f16[6] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000, 0x7c00};
  const uint16_t bf16[6] = {0x3f80, 0xc020, 0x7f7f, 0x0001, 0x3dcd, 0xff80};
  const int64_t i64[6] = {INT64_MIN, INT64_MAX, (1LL << 53) + 1, -1, 0, 42};
  const int32_t i32[6] = {INT32_MIN, INT32_MAX, -7, 0, 65536, 3};
  const uint8_t u8[6] = {0, 255, 128, 1, 7, 200};
  const bool b[6] = {true, false, false, true, true, false};
  const void *data[] = {f32, f64, f16, bf16, i64, i32, u8, b};
  for (size_t k = 0; k < ARRAY_LEN(all_dtypes); k++) {
    mx_dtype dt = all_dtypes[k];
    mx_tensor *t = mx_from_data(data[k], MX_SHAPE(2, 3), dt, MX_CPU);
    cr_assert_not_null(t, "%s: %s", mx_dtype_name(dt), mx_last_error());
    cr_expect_eq(mx_dtype_of(t), dt);
    expect_shape(t, MX_SHAPE(2, 3));
    char back[48];
    size_t bytes = 6 * mx_dtype_size(dt);
    memset(back, 0x5a, sizeof back);
    cr_assert_eq(mx_to_host(t, back, bytes), MX_OK, "%s", mx_last_error());
    cr_expect_eq(memcmp(back, data[k], bytes), 0, "%s round trip changed the bytes", mx_dtype_name(dt));
  }
  mx_scope_end(s);
}

Test(create, from_data_values_via_at) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *h = mx_from_data((uint16_t[]){0x3c00, 0xc000, 0x7bff, 0x0001}, MX_SHAPE(4), MX_F16, MX_CPU);
  expect_values(h, (double[]){1.0, -2.0, 65504.0, 0x1p-24}, 4);
  mx_tensor *b = mx_from_data((uint16_t[]){0x3f80, 0xc020, 0x4049, 0x0080}, MX_SHAPE(4), MX_BF16, MX_CPU);
  expect_values(b, (double[]){1.0, -2.5, 3.140625, 0x1p-126}, 4);
  mx_tensor *i = mx_from_data((int64_t[]){-5, 1LL << 40}, MX_SHAPE(2), MX_I64, MX_CPU);
  expect_values(i, (double[]){-5, 1099511627776.0}, 2);
  /* the data was copied: changing the source later does not matter */
  float src[3] = {1, 2, 3};
  mx_tensor *f = mx_from_data(src, MX_SHAPE(3), MX_F32, MX_CPU);
  src[1] = 99;
  expect_values(f, (double[]){1, 2, 3}, 3);
  mx_scope_end(s);
}

Test(create, to_host_checks_size) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(4), MX_F32, MX_CPU);
  float buf[8];
  mx_clear_error();
  cr_expect_eq(mx_to_host(t, buf, 3 * sizeof(float)), MX_INVALID_ARGUMENT);
  cr_expect_eq(mx_to_host(t, buf, sizeof buf), MX_INVALID_ARGUMENT);
  mx_clear_error();
  cr_expect_eq(mx_to_host(t, buf, 4 * sizeof(float)), MX_OK);
  mx_scope_end(s);
}

/* --- *_like ----------------------------------------------------------------- */

Test(create, like_functions) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *base = mx_reshape(mx_arange(0, 6, 1, MX_I32, MX_CPU), MX_SHAPE(2, 3));
  mx_tensor *src = mx_transpose(base, 0, 1); /* (3, 2), not contiguous */
  cr_assert_not_null(src);
  mx_tensor *e = mx_empty_like(src), *z = mx_zeros_like(src), *o = mx_ones_like(src),
            *f = mx_full_like(src, 7.9);
  mx_tensor *all[] = {e, z, o, f};
  for (size_t k = 0; k < ARRAY_LEN(all); k++) {
    cr_assert_not_null(all[k], "%s", mx_last_error());
    cr_expect_eq(mx_dtype_of(all[k]), MX_I32);
    cr_expect_eq(mx_device_of(all[k]), MX_CPU);
    expect_shape(all[k], MX_SHAPE(3, 2));
    expect_strides(all[k], MX_SHAPE(2, 1));
    cr_expect(mx_is_contiguous(all[k]));
    cr_expect_not(mx_shares_storage(all[k], src));
  }
  for (int64_t i = 0; i < 3; i++)
    for (int64_t j = 0; j < 2; j++) {
      cr_expect_eq(mx_at(z, MX_SHAPE(i, j)), 0);
      cr_expect_eq(mx_at(o, MX_SHAPE(i, j)), 1);
      cr_expect_eq(mx_at(f, MX_SHAPE(i, j)), 7, "full_like(7.9) on int32 truncates to 7");
    }
  /* the source is untouched */
  cr_expect_eq(mx_at(src, MX_SHAPE(2, 1)), 5);
  mx_tensor *hf = mx_full_like(mx_scalar(0, MX_F16, MX_CPU), 0.1);
  cr_assert_not_null(hf);
  cr_expect_eq(mx_ndim(hf), 0);
  uint16_t bits;
  cr_assert_eq(mx_to_host(hf, &bits, sizeof bits), MX_OK);
  cr_expect_eq(bits, 0x2e66, "float16(0.1) is 0x2e66, got 0x%04x", bits);
  mx_scope_end(s);
}

/* --- properties -------------------------------------------------------------- */

Test(create, shape_strides_size_properties) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(2, 1, 3), MX_F64, MX_CPU);
  cr_assert_not_null(t);
  expect_shape(t, MX_SHAPE(2, 1, 3));
  expect_strides(t, MX_SHAPE(3, 3, 1)); /* torch.zeros(2, 1, 3).stride() */
  cr_expect_eq(mx_size(t, 0), 2);
  cr_expect_eq(mx_size(t, 2), 3);
  cr_expect_eq(mx_size(t, -1), 3);
  cr_expect_eq(mx_size(t, -3), 2);
  mx_clear_error();
  cr_expect_eq(mx_size(t, 3), -1);
  cr_expect_eq(mx_last_status(), MX_INDEX_ERROR);
  mx_clear_error();
  cr_expect_eq(mx_size(t, -4), -1);
  mx_clear_error();
  cr_expect_eq(mx_numel(t), 6);
  cr_expect_eq(mx_ndim(t), 3);

  mx_tensor *big = mx_empty(MX_SHAPE(2, 3, 4, 5, 1, 2, 1, 3), MX_U8, MX_CPU);
  cr_assert_not_null(big, "8 dims are allowed: %s", mx_last_error());
  expect_strides(big, MX_SHAPE(360, 120, 30, 6, 6, 3, 3, 1));
  cr_expect_eq(mx_numel(big), 720);
  mx_clear_error();
  mx_shape nine = {9, {1, 1, 1, 1, 1, 1, 1, 1}};
  cr_expect_null(mx_empty(nine, MX_F32, MX_CPU), "9 dims are too many");
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  mx_clear_error();
  cr_expect_null(mx_zeros(MX_SHAPE(2, -1), MX_F32, MX_CPU), "negative size");
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  mx_clear_error();
  cr_expect_null(mx_zeros(MX_SHAPE(2), MX_DTYPE_COUNT, MX_CPU), "invalid dtype");
  cr_expect_eq(mx_last_status(), MX_DTYPE_ERROR);
  mx_clear_error();
  mx_scope_end(s);
}

Test(create, contiguity_of_views) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(3, 4), MX_F32, MX_CPU);
  cr_expect(mx_is_contiguous(t));
  cr_expect_not(mx_is_contiguous(mx_transpose(t, 0, 1)));
  cr_expect_not(mx_is_contiguous(mx_slice(t, 1, 0, 4, 2)));
  cr_expect_not(mx_is_contiguous(mx_narrow(t, 1, 1, 2)));
  /* whole rows at an offset are contiguous */
  mx_tensor *rows = mx_narrow(t, 0, 1, 2);
  cr_expect(mx_is_contiguous(rows));
  cr_expect_eq(mx_offset(rows), 4);
  /* size-1 dims do not matter, whatever their stride */
  cr_expect(mx_is_contiguous(mx_narrow(t, 0, 2, 1)));
  cr_expect(mx_is_contiguous(mx_transpose(mx_zeros(MX_SHAPE(1, 5), MX_F32, MX_CPU), 0, 1)));
  cr_expect_not(mx_is_contiguous(mx_expand(mx_zeros(MX_SHAPE(1, 5), MX_F32, MX_CPU), MX_SHAPE(3, 5))));
  mx_scope_end(s);
}

Test(create, dtype_tables) {
  const size_t sizes[] = {4, 8, 2, 2, 8, 4, 1, 1};
  const char *names[] = {"float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "bool"};
  const bool floating[] = {true, true, true, true, false, false, false, false};
  for (size_t k = 0; k < ARRAY_LEN(all_dtypes); k++) {
    cr_expect_eq(mx_dtype_size(all_dtypes[k]), sizes[k]);
    cr_expect_str_eq(mx_dtype_name(all_dtypes[k]), names[k]);
    cr_expect_eq(mx_dtype_is_floating(all_dtypes[k]), floating[k]);
    cr_expect(mx_dtype_valid(all_dtypes[k]));
  }
  cr_expect_not(mx_dtype_valid(MX_DTYPE_COUNT));
  cr_expect_eq(mx_dtype_size(MX_DTYPE_COUNT), 0);
}
