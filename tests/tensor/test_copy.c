/* Copies: contiguous, clone, to_dtype (every pair, rounding and saturation),
 * copy_ with broadcasting and overlap, element access, and tensors large
 * enough for the OpenMP paths of kernels/cpu/strided.c.
 *
 * Conversion rules (kernels/cpu/convert.h): floats round to nearest even,
 * integers truncate toward zero and saturate (NaN becomes 0), bool is
 * value != 0. f16/bf16 bit patterns are hand-encoded. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof *(a))

static const mx_dtype all_dtypes[] = {MX_F32, MX_F64, MX_F16, MX_BF16, MX_I64, MX_I32, MX_U8, MX_BOOL};

static void expect_shape(const mx_tensor *t, mx_shape want) {
  cr_assert_not_null(t, "%s", mx_last_error());
  mx_shape got = mx_shape_get(t);
  cr_assert_eq(got.ndim, want.ndim);
  for (int i = 0; i < want.ndim; i++) cr_expect_eq(got.d[i], want.d[i]);
}

/* --- contiguous / clone ------------------------------------------------------------ */

Test(copy, contiguous_shares_when_already_contiguous) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_reshape(mx_arange(0, 12, 1, MX_F32, MX_CPU), MX_SHAPE(3, 4));
  mx_tensor *c = mx_contiguous(a);
  cr_assert_not_null(c);
  cr_expect_neq(c, a, "a new handle");
  cr_expect(mx_shares_storage(c, a));
  cr_expect_eq(mx_data_ptr(c), mx_data_ptr(a));
  /* whole rows at an offset are contiguous too: no copy, same offset */
  mx_tensor *rows = mx_narrow(a, 0, 1, 2);
  mx_tensor *rc = mx_contiguous(rows);
  cr_assert_not_null(rc);
  cr_expect(mx_shares_storage(rc, a));
  cr_expect_eq(mx_offset(rc), 4);
  cr_expect_eq(mx_at(rc, MX_SHAPE(0, 0)), 4);
  /* releasing the original leaves the contiguous handle valid */
  mx_tensor *b = mx_keep(mx_arange(0, 3, 1, MX_F32, MX_CPU));
  mx_scope *inner = mx_scope_begin();
  mx_tensor *bc = mx_keep(mx_contiguous(b));
  mx_scope_end(inner);
  mx_release(b);
  cr_expect_eq(mx_at(bc, MX_SHAPE(2)), 2);
  mx_scope_end(s);
}

Test(copy, contiguous_copies_when_strided) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_reshape(mx_arange(0, 6, 1, MX_I64, MX_CPU), MX_SHAPE(2, 3));
  mx_tensor *t = mx_transpose(a, 0, 1);
  mx_tensor *c = mx_contiguous(t);
  cr_assert_not_null(c, "%s", mx_last_error());
  cr_expect_not(mx_shares_storage(c, a));
  cr_expect(mx_is_contiguous(c));
  cr_expect_eq(mx_offset(c), 0);
  expect_shape(c, MX_SHAPE(3, 2));
  mx_shape st = mx_strides_get(c);
  cr_expect(st.d[0] == 2 && st.d[1] == 1);
  int64_t host[6];
  cr_assert_eq(mx_to_host(c, host, sizeof host), MX_OK);
  const int64_t want[6] = {0, 3, 1, 4, 2, 5};
  cr_expect_arr_eq(host, want, sizeof host);
  /* an expanded tensor is materialised */
  mx_tensor *e = mx_contiguous(mx_expand(mx_from_data((float[]){1, 2}, MX_SHAPE(2, 1), MX_F32, MX_CPU),
                                         MX_SHAPE(2, 3)));
  cr_assert_not_null(e);
  cr_expect(mx_is_contiguous(e));
  float eh[6];
  cr_assert_eq(mx_to_host(e, eh, sizeof eh), MX_OK);
  const float ew[6] = {1, 1, 1, 2, 2, 2};
  cr_expect_arr_eq(eh, ew, sizeof eh);
  /* a strided slice */
  mx_tensor *sl = mx_contiguous(mx_slice(mx_arange(0, 10, 1, MX_I32, MX_CPU), 0, 1, 10, 4));
  int32_t sh[3];
  cr_assert_eq(mx_to_host(sl, sh, sizeof sh), MX_OK);
  cr_expect(sh[0] == 1 && sh[1] == 5 && sh[2] == 9);
  mx_scope_end(s);
}

Test(copy, clone_never_shares) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_from_data((double[]){1.5, -2, 3}, MX_SHAPE(3), MX_F64, MX_CPU);
  mx_tensor *c = mx_clone(a);
  cr_assert_not_null(c);
  cr_expect_not(mx_shares_storage(c, a));
  cr_expect_neq(mx_data_ptr(c), mx_data_ptr(a));
  cr_expect_eq(mx_dtype_of(c), MX_F64);
  cr_expect_eq(mx_at(c, MX_SHAPE(0)), 1.5);
  cr_expect_eq(mx_at(c, MX_SHAPE(1)), -2);
  cr_assert_eq(mx_set(c, MX_SHAPE(0), 9), MX_OK);
  cr_expect_eq(mx_at(a, MX_SHAPE(0)), 1.5, "writing the clone leaves the original");
  cr_assert_eq(mx_set(a, MX_SHAPE(2), -7), MX_OK);
  cr_expect_eq(mx_at(c, MX_SHAPE(2)), 3, "writing the original leaves the clone");
  /* a clone of a strided view is contiguous with the view's values */
  mx_tensor *m = mx_reshape(mx_arange(0, 6, 1, MX_F32, MX_CPU), MX_SHAPE(2, 3));
  mx_tensor *tc = mx_clone(mx_transpose(m, 0, 1));
  cr_assert_not_null(tc);
  cr_expect(mx_is_contiguous(tc));
  expect_shape(tc, MX_SHAPE(3, 2));
  cr_expect_eq(mx_at(tc, MX_SHAPE(2, 0)), 2);
  cr_expect_eq(mx_at(tc, MX_SHAPE(0, 1)), 3);
  /* 0-d and empty */
  mx_tensor *z = mx_clone(mx_scalar(4, MX_U8, MX_CPU));
  cr_assert_not_null(z);
  cr_expect_eq(mx_ndim(z), 0);
  cr_expect_eq(mx_item(z), 4);
  mx_tensor *e = mx_clone(mx_empty(MX_SHAPE(0, 3), MX_BF16, MX_CPU));
  cr_assert_not_null(e, "%s", mx_last_error());
  expect_shape(e, MX_SHAPE(0, 3));
  /* int64 beyond 2^53 is copied exactly */
  const int64_t big[3] = {(1LL << 62) + 1, INT64_MIN + 3, INT64_MAX - 1};
  mx_tensor *bi = mx_from_data(big, MX_SHAPE(3), MX_I64, MX_CPU);
  int64_t back[3];
  cr_assert_eq(mx_to_host(mx_clone(mx_slice(bi, 0, 0, 3, 1)), back, sizeof back), MX_OK);
  cr_expect_arr_eq(back, big, sizeof big);
  /* also through a strided (non-contiguous) copy */
  int64_t back2[2];
  cr_assert_eq(mx_to_host(mx_slice(bi, 0, 0, 3, 2), back2, sizeof back2), MX_OK);
  cr_expect(back2[0] == big[0] && back2[1] == big[2]);
  mx_scope_end(s);
}

Test(copy, to_device_cpu_copies) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_arange(0, 4, 1, MX_F32, MX_CPU);
  mx_tensor *b = mx_to_device(a, MX_CPU);
  cr_assert_not_null(b);
  cr_expect_not(mx_shares_storage(a, b));
  cr_expect_eq(mx_at(b, MX_SHAPE(3)), 3);
  if (!mx_cuda_built()) {
    mx_clear_error();
    cr_expect_null(mx_to_device(a, MX_CUDA));
    cr_expect_eq(mx_last_status(), MX_NOT_BUILT);
    mx_clear_error();
  }
  mx_scope_end(s);
}

/* --- to_dtype: every pair ---------------------------------------------------------- */

/* The values {0, 1, 3, 100} in each dtype's encoding (bool: {0, 1, 1, 1}). */
static const float A_F32[4] = {0, 1, 3, 100};
static const double A_F64[4] = {0, 1, 3, 100};
static const uint16_t A_F16[4] = {0x0000, 0x3c00, 0x4200, 0x5640};
static const uint16_t A_BF16[4] = {0x0000, 0x3f80, 0x4040, 0x42c8};
static const int64_t A_I64[4] = {0, 1, 3, 100};
static const int32_t A_I32[4] = {0, 1, 3, 100};
static const uint8_t A_U8[4] = {0, 1, 3, 100};
static const bool A_BOOL[4] = {false, true, true, true};
/* {0, 1, 1, 1}: what bool converts to */
static const float B_F32[4] = {0, 1, 1, 1};
static const double B_F64[4] = {0, 1, 1, 1};
static const uint16_t B_F16[4] = {0, 0x3c00, 0x3c00, 0x3c00};
static const uint16_t B_BF16[4] = {0, 0x3f80, 0x3f80, 0x3f80};
static const int64_t B_I64[4] = {0, 1, 1, 1};
static const int32_t B_I32[4] = {0, 1, 1, 1};
static const uint8_t B_U8[4] = {0, 1, 1, 1};
static const void *const A_IMAGE[] = {A_F32, A_F64, A_F16, A_BF16, A_I64, A_I32, A_U8, A_BOOL};
static const void *const B_IMAGE[] = {B_F32, B_F64, B_F16, B_BF16, B_I64, B_I32, B_U8, A_BOOL};

Test(copy, to_dtype_every_pair) {
  mx_scope *s = mx_scope_begin();
  for (size_t i = 0; i < ARRAY_LEN(all_dtypes); i++) {
    mx_dtype from = all_dtypes[i];
    mx_tensor *src = mx_from_data(A_IMAGE[i], MX_SHAPE(4), from, MX_CPU);
    cr_assert_not_null(src);
    for (size_t j = 0; j < ARRAY_LEN(all_dtypes); j++) {
      mx_dtype to = all_dtypes[j];
      const void *want = from == MX_BOOL ? B_IMAGE[j] : A_IMAGE[j];
      size_t bytes = 4 * mx_dtype_size(to);
      /* contiguous and strided sources take different kernel paths */
      for (int strided = 0; strided < 2; strided++) {
        mx_tensor *in = src;
        if (strided) {
          mx_tensor *wide = mx_reshape(mx_expand(mx_unsqueeze(src, 1), MX_SHAPE(4, 2)), MX_SHAPE(8));
          in = mx_slice(wide, 0, 0, 8, 2);
          cr_assert_not_null(in, "%s", mx_last_error());
        }
        mx_tensor *out = mx_to_dtype(in, to);
        cr_assert_not_null(out, "%s -> %s: %s", mx_dtype_name(from), mx_dtype_name(to), mx_last_error());
        cr_expect_eq(mx_dtype_of(out), to);
        cr_expect_not(mx_shares_storage(out, src));
        char got[32];
        cr_assert_eq(mx_to_host(out, got, bytes), MX_OK);
        cr_expect_eq(memcmp(got, want, bytes), 0, "%s -> %s (%s source): wrong values", mx_dtype_name(from),
                     mx_dtype_name(to), strided ? "strided" : "contiguous");
      }
    }
  }
  mx_scope_end(s);
}

/* One f32 value converted to dtype; the raw element is returned in *raw. */
static void convert_one(float value, mx_dtype to, void *raw) {
  mx_tensor *src = mx_from_data(&value, MX_SHAPE(1), MX_F32, MX_CPU);
  cr_assert_not_null(src);
  mx_tensor *out = mx_to_dtype(src, to);
  cr_assert_not_null(out, "%s", mx_last_error());
  cr_assert_eq(mx_to_host(out, raw, mx_dtype_size(to)), MX_OK);
  mx_release(out);
  mx_release(src);
}

static int32_t f32_to_i32(float v) {
  int32_t r;
  convert_one(v, MX_I32, &r);
  return r;
}
static uint8_t f32_to_u8(float v) {
  uint8_t r;
  convert_one(v, MX_U8, &r);
  return r;
}
static bool f32_to_bool(float v) {
  bool r;
  convert_one(v, MX_BOOL, &r);
  return r;
}
static uint16_t f32_to_f16(float v) {
  uint16_t r;
  convert_one(v, MX_F16, &r);
  return r;
}
static uint16_t f32_to_bf16(float v) {
  uint16_t r;
  convert_one(v, MX_BF16, &r);
  return r;
}
static int64_t f32_to_i64(float v) {
  int64_t r;
  convert_one(v, MX_I64, &r);
  return r;
}

Test(copy, to_dtype_float_to_integer) {
  mx_scope *s = mx_scope_begin();
  cr_expect_eq(f32_to_i32(2.5f), 2, "truncation toward zero");
  cr_expect_eq(f32_to_i32(-2.7f), -2);
  cr_expect_eq(f32_to_i32(-0.9f), 0);
  cr_expect_eq(f32_to_i32(2.9999f), 2);
  cr_expect_eq(f32_to_i32(NAN), 0, "NaN becomes 0");
  cr_expect_eq(f32_to_i32(3e9f), INT32_MAX, "saturates");
  cr_expect_eq(f32_to_i32(-3e9f), INT32_MIN);
  cr_expect_eq(f32_to_i32(INFINITY), INT32_MAX);
  cr_expect_eq(f32_to_i32(16777216.0f), 16777216);
  cr_expect_eq(f32_to_u8(300.0f), 255, "u8 saturates at 255");
  cr_expect_eq(f32_to_u8(255.9f), 255);
  cr_expect_eq(f32_to_u8(-5.0f), 0, "u8 saturates at 0");
  cr_expect_eq(f32_to_u8(7.99f), 7);
  cr_expect_eq(f32_to_u8(NAN), 0);
  cr_expect_eq(f32_to_i64(-1e20f), INT64_MIN);
  cr_expect_eq(f32_to_i64(1e20f), INT64_MAX);
  cr_expect_eq(f32_to_i64(-123456.75f), -123456);
  cr_expect_eq(f32_to_i64(NAN), 0);
  mx_scope_end(s);
}

Test(copy, to_dtype_to_bool) {
  mx_scope *s = mx_scope_begin();
  cr_expect(f32_to_bool(0.5f), "0.5 is true");
  cr_expect(f32_to_bool(-1e-30f));
  cr_expect(f32_to_bool(NAN), "NaN != 0 (torch: bool(nan) is True)");
  cr_expect(f32_to_bool(-INFINITY));
  cr_expect_not(f32_to_bool(0.0f));
  cr_expect_not(f32_to_bool(-0.0f), "-0 is false");
  mx_scope_end(s);
}

Test(copy, to_dtype_float16_rounding) {
  mx_scope *s = mx_scope_begin();
  cr_expect_eq(f32_to_f16(65520.0f), 0x7c00, "65520 rounds to +inf");
  cr_expect_eq(f32_to_f16(-65520.0f), 0xfc00);
  cr_expect_eq(f32_to_f16(65519.0f), 0x7bff, "65519 rounds down to 65504");
  cr_expect_eq(f32_to_f16(65504.0f), 0x7bff);
  cr_expect_eq(f32_to_f16(2049.0f), 0x6800, "2049: tie to even 2048");
  cr_expect_eq(f32_to_f16(2051.0f), 0x6802, "2051: tie to even 2052");
  cr_expect_eq(f32_to_f16(2049.5f), 0x6801, "above the tie: 2050");
  cr_expect_eq(f32_to_f16(0.1f), 0x2e66);
  cr_expect_eq(f32_to_f16(-0.0f), 0x8000);
  cr_expect_eq(f32_to_f16(INFINITY), 0x7c00);
  cr_expect_eq(f32_to_f16(0x1p-24f), 0x0001, "the smallest subnormal");
  cr_expect_eq(f32_to_f16(0x1p-25f), 0x0000, "half of it: tie to even 0");
  cr_expect_eq(f32_to_f16(0x1.8p-24f), 0x0002, "1.5 units: tie to even 2");
  cr_expect_eq(f32_to_f16(0x1.4p-24f), 0x0001);
  cr_expect_eq(f32_to_f16(1e-8f), 0x0000);
  cr_expect_eq(f32_to_f16(0x1p-14f), 0x0400, "the smallest normal");
  cr_expect_eq(f32_to_f16(0x1.ff8p-15f), 0x03ff, "the largest subnormal");
  cr_expect_eq(f32_to_f16(0x1.ffcp-15f), 0x0400, "half a unit above it: tie to even, the smallest normal");
  uint16_t n = f32_to_f16(NAN);
  cr_expect((n & 0x7c00) == 0x7c00 && (n & 0x03ff) != 0, "NaN stays NaN: 0x%04x", n);
  mx_scope_end(s);
}

Test(copy, to_dtype_bfloat16_rounding) {
  mx_scope *s = mx_scope_begin();
  cr_expect_eq(f32_to_bf16(1.0f + 0x1p-9f), 0x3f80, "1+2^-9 rounds to 1.0");
  cr_expect_eq(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80, "1+2^-8: tie to even 1.0");
  cr_expect_eq(f32_to_bf16(1.0f + 0x3p-8f), 0x3f82, "1+3*2^-8: tie to even 1+2^-6");
  cr_expect_eq(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81, "just above the tie rounds up");
  cr_expect_eq(f32_to_bf16(70000.0f), 0x4789, "70000 -> 70144");
  cr_expect_eq(f32_to_bf16(0.1f), 0x3dcd);
  cr_expect_eq(f32_to_bf16(-2.5f), 0xc020);
  cr_expect_eq(f32_to_bf16(3.4e38f), 0x7f80, "beyond bf16's largest finite: inf");
  cr_expect_eq(f32_to_bf16(0x1p-130f), 0x0008, "subnormals are kept");
  uint16_t n = f32_to_bf16(NAN);
  cr_expect((n & 0x7f80) == 0x7f80 && (n & 0x007f) != 0, "NaN stays NaN: 0x%04x", n);
  mx_scope_end(s);
}

Test(copy, to_dtype_between_wide_types) {
  mx_scope *s = mx_scope_begin();
  /* float64 to narrower */
  mx_tensor *d = mx_from_data((double[]){1e300, -1e300, 0.1, 1e10, -1e10, 1e-320}, MX_SHAPE(6), MX_F64, MX_CPU);
  float f[6];
  cr_assert_eq(mx_to_host(mx_to_dtype(d, MX_F32), f, sizeof f), MX_OK);
  cr_expect(isinf(f[0]) && f[0] > 0);
  cr_expect(isinf(f[1]) && f[1] < 0);
  cr_expect_eq(f[2], 0.1f);
  cr_expect_eq(f[3], 1e10f);
  cr_expect_eq(f[5], 0.0f);
  int32_t i[6];
  cr_assert_eq(mx_to_host(mx_to_dtype(d, MX_I32), i, sizeof i), MX_OK);
  cr_expect(i[0] == INT32_MAX && i[1] == INT32_MIN && i[2] == 0 && i[3] == INT32_MAX && i[4] == INT32_MIN);
  int64_t l[6];
  cr_assert_eq(mx_to_host(mx_to_dtype(d, MX_I64), l, sizeof l), MX_OK);
  cr_expect(l[0] == INT64_MAX && l[1] == INT64_MIN && l[3] == 10000000000LL && l[4] == -10000000000LL);
  /* int64 to float64 rounds beyond 2^53; to int32 and u8 wraps like a C
   * cast, as in PyTorch (w.to(torch.int32) gives [1, 0, 0, -1]) */
  mx_tensor *w = mx_from_data((int64_t[]){(1LL << 53) + 1, 1LL << 40, -(1LL << 40), -1}, MX_SHAPE(4), MX_I64,
                              MX_CPU);
  double dd[4];
  cr_assert_eq(mx_to_host(mx_to_dtype(w, MX_F64), dd, sizeof dd), MX_OK);
  cr_expect_eq(dd[0], 0x1p53, "2^53 + 1 rounds to even 2^53");
  cr_expect_eq(dd[1], 0x1p40);
  int32_t ii[4];
  cr_assert_eq(mx_to_host(mx_to_dtype(w, MX_I32), ii, sizeof ii), MX_OK);
  cr_expect(ii[0] == 1 && ii[1] == 0 && ii[2] == 0 && ii[3] == -1);
  uint8_t uu[4];
  cr_assert_eq(mx_to_host(mx_to_dtype(w, MX_U8), uu, sizeof uu), MX_OK);
  cr_expect(uu[0] == 1 && uu[1] == 0 && uu[2] == 0 && uu[3] == 255);
  /* f16 <-> bf16 */
  mx_tensor *h = mx_from_data((uint16_t[]){0x7bff, 0x2e66, 0x0001, 0xc000}, MX_SHAPE(4), MX_F16, MX_CPU);
  uint16_t b[4];
  cr_assert_eq(mx_to_host(mx_to_dtype(h, MX_BF16), b, sizeof b), MX_OK);
  cr_expect_eq(b[0], 0x4780, "65504 -> 65536 in bf16");
  cr_expect_eq(b[1], 0x3dcd, "f16 0.0999755859375 -> bf16 0.10009765625");
  cr_expect_eq(b[2], 0x3380, "2^-24 is exact in bf16");
  cr_expect_eq(b[3], 0xc000);
  mx_tensor *bf = mx_from_data((uint16_t[]){0x7f7f, 0x3f81, 0x0080, 0xbf80}, MX_SHAPE(4), MX_BF16, MX_CPU);
  uint16_t hh[4];
  cr_assert_eq(mx_to_host(mx_to_dtype(bf, MX_F16), hh, sizeof hh), MX_OK);
  cr_expect_eq(hh[0], 0x7c00, "bf16 3.39e38 overflows f16");
  cr_expect_eq(hh[1], 0x3c08, "1.0078125 is exact in f16");
  cr_expect_eq(hh[2], 0x0000, "2^-126 underflows f16");
  cr_expect_eq(hh[3], 0xbc00);
  /* f16 subnormal read back exactly */
  cr_expect_eq(mx_at(h, MX_SHAPE(2)), 0x1p-24);
  mx_scope_end(s);
}

/* --- copy_ -------------------------------------------------------------------------------- */

Test(copy, copy_broadcasts) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *dst = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  cr_assert_eq(mx_copy_(dst, mx_from_data((double[]){1.5, 2.5, 3.5}, MX_SHAPE(3), MX_F64, MX_CPU)), MX_OK);
  float h[6];
  cr_assert_eq(mx_to_host(dst, h, sizeof h), MX_OK);
  const float rows[6] = {1.5f, 2.5f, 3.5f, 1.5f, 2.5f, 3.5f};
  cr_expect_arr_eq(h, rows, sizeof h);
  cr_assert_eq(mx_copy_(dst, mx_from_data((int32_t[]){-1, 4}, MX_SHAPE(2, 1), MX_I32, MX_CPU)), MX_OK);
  cr_assert_eq(mx_to_host(dst, h, sizeof h), MX_OK);
  const float cols[6] = {-1, -1, -1, 4, 4, 4};
  cr_expect_arr_eq(h, cols, sizeof h);
  cr_assert_eq(mx_copy_(dst, mx_scalar(0.25, MX_F16, MX_CPU)), MX_OK);
  cr_assert_eq(mx_to_host(dst, h, sizeof h), MX_OK);
  for (int i = 0; i < 6; i++) cr_expect_eq(h[i], 0.25f);
  cr_assert_eq(mx_copy_(dst, mx_from_data((float[]){7, 8, 9}, MX_SHAPE(1, 3), MX_F32, MX_CPU)), MX_OK);
  cr_expect_eq(mx_at(dst, MX_SHAPE(1, 2)), 9);
  /* into a strided destination, converting */
  mx_tensor *ints = mx_zeros(MX_SHAPE(3, 2), MX_I32, MX_CPU);
  cr_assert_eq(mx_copy_(mx_transpose(ints, 0, 1),
                        mx_from_data((double[]){2.7, -2.7, 1e10}, MX_SHAPE(3), MX_F64, MX_CPU)),
               MX_OK);
  int32_t ih[6];
  cr_assert_eq(mx_to_host(ints, ih, sizeof ih), MX_OK);
  const int32_t iw[6] = {2, 2, -2, -2, INT32_MAX, INT32_MAX};
  cr_expect_arr_eq(ih, iw, sizeof ih);
  mx_scope_end(s);
}

Test(copy, copy_shape_mismatch_fails_and_leaves_dst) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *dst = mx_full(MX_SHAPE(2, 3), 5, MX_F32, MX_CPU);
  mx_clear_error();
  cr_expect_eq(mx_copy_(dst, mx_ones(MX_SHAPE(3, 1), MX_F32, MX_CPU)), MX_SHAPE_ERROR);
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  mx_clear_error();
  cr_expect_eq(mx_copy_(dst, mx_ones(MX_SHAPE(2), MX_F32, MX_CPU)), MX_SHAPE_ERROR);
  mx_clear_error();
  cr_expect_eq(mx_copy_(dst, mx_ones(MX_SHAPE(1, 2, 3), MX_F32, MX_CPU)), MX_SHAPE_ERROR,
               "the source cannot have more dims");
  mx_clear_error();
  cr_expect_eq(mx_copy_(dst, NULL), MX_NULL_INPUT);
  mx_clear_error();
  cr_expect_eq(mx_copy_(NULL, dst), MX_NULL_INPUT);
  mx_clear_error();
  for (int64_t i = 0; i < 2; i++)
    for (int64_t j = 0; j < 3; j++) cr_expect_eq(mx_at(dst, MX_SHAPE(i, j)), 5);
  mx_scope_end(s);
}

Test(copy, copy_overlapping_views_reads_first) {
  mx_scope *s = mx_scope_begin();
  /* t[1:4] = t[0:3] */
  mx_tensor *t = mx_arange(0, 5, 1, MX_F32, MX_CPU);
  cr_assert_eq(mx_copy_(mx_slice(t, 0, 1, 4, 1), mx_slice(t, 0, 0, 3, 1)), MX_OK);
  float h[5];
  cr_assert_eq(mx_to_host(t, h, sizeof h), MX_OK);
  const float w1[5] = {0, 0, 1, 2, 4};
  cr_expect_arr_eq(h, w1, sizeof h);
  /* t[0:3] = t[1:4] */
  mx_tensor *u = mx_arange(0, 5, 1, MX_F32, MX_CPU);
  cr_assert_eq(mx_copy_(mx_slice(u, 0, 0, 3, 1), mx_slice(u, 0, 1, 4, 1)), MX_OK);
  cr_assert_eq(mx_to_host(u, h, sizeof h), MX_OK);
  const float w2[5] = {1, 2, 3, 3, 4};
  cr_expect_arr_eq(h, w2, sizeof h);
  /* m = m^T in place */
  mx_tensor *m = mx_reshape(mx_arange(0, 9, 1, MX_I64, MX_CPU), MX_SHAPE(3, 3));
  cr_assert_eq(mx_copy_(m, mx_transpose(m, 0, 1)), MX_OK);
  int64_t mh[9];
  cr_assert_eq(mx_to_host(m, mh, sizeof mh), MX_OK);
  const int64_t mw[9] = {0, 3, 6, 1, 4, 7, 2, 5, 8};
  cr_expect_arr_eq(mh, mw, sizeof mh);
  /* t = t[0] broadcast, and a reversed-parity interleave t[0::2] = t[1::2] */
  mx_tensor *v = mx_from_data((double[]){5, 1, 2, 3}, MX_SHAPE(4), MX_F64, MX_CPU);
  cr_assert_eq(mx_copy_(mx_slice(v, 0, 0, 4, 2), mx_slice(v, 0, 1, 4, 2)), MX_OK);
  double vh[4];
  cr_assert_eq(mx_to_host(v, vh, sizeof vh), MX_OK);
  const double vw[4] = {1, 1, 3, 3};
  cr_expect_arr_eq(vh, vw, sizeof vh);
  cr_assert_eq(mx_copy_(v, mx_select(v, 0, 2)), MX_OK);
  cr_assert_eq(mx_to_host(v, vh, sizeof vh), MX_OK);
  for (int i = 0; i < 4; i++) cr_expect_eq(vh[i], 3);
  /* overlap with a dtype change: a float view of the same storage is not
   * possible, so check a reinterpreting copy between two views of one
   * int32 storage with different shapes */
  mx_tensor *q = mx_arange(0, 6, 1, MX_I32, MX_CPU);
  mx_tensor *q2 = mx_view(q, MX_SHAPE(2, 3));
  cr_assert_eq(mx_copy_(mx_select(q2, 0, 1), mx_select(q2, 0, 0)), MX_OK); /* row 1 = row 0 */
  int32_t qh[6];
  cr_assert_eq(mx_to_host(q, qh, sizeof qh), MX_OK);
  const int32_t qw[6] = {0, 1, 2, 0, 1, 2};
  cr_expect_arr_eq(qh, qw, sizeof qh);
  mx_scope_end(s);
}

/* --- element access ------------------------------------------------------------------------ */

Test(copy, at_set_item) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_reshape(mx_arange(0, 12, 1, MX_F32, MX_CPU), MX_SHAPE(3, 4));
  cr_expect_eq(mx_at(x, MX_SHAPE(2, 3)), 11);
  cr_expect_eq(mx_at(x, MX_SHAPE(-1, -1)), 11, "negative indices count from the end");
  cr_expect_eq(mx_at(x, MX_SHAPE(-3, 1)), 1);
  mx_clear_error();
  cr_expect(isnan(mx_at(x, MX_SHAPE(3, 0))));
  cr_expect_eq(mx_last_status(), MX_INDEX_ERROR);
  mx_clear_error();
  cr_expect(isnan(mx_at(x, MX_SHAPE(0, -5))));
  cr_expect_eq(mx_last_status(), MX_INDEX_ERROR);
  mx_clear_error();
  cr_expect(isnan(mx_at(x, MX_SHAPE(1))), "too few indices");
  cr_expect_eq(mx_last_status(), MX_INDEX_ERROR);
  mx_clear_error();
  cr_expect_eq(mx_set(x, MX_SHAPE(0, 4), 1), MX_INDEX_ERROR);
  mx_clear_error();
  /* mx_set stores in the tensor's dtype */
  mx_tensor *i = mx_zeros(MX_SHAPE(2), MX_I32, MX_CPU);
  cr_assert_eq(mx_set(i, MX_SHAPE(0), 2.7), MX_OK);
  cr_assert_eq(mx_set(i, MX_SHAPE(1), -2.7), MX_OK);
  cr_expect_eq(mx_at(i, MX_SHAPE(0)), 2);
  cr_expect_eq(mx_at(i, MX_SHAPE(1)), -2);
  mx_tensor *u = mx_zeros(MX_SHAPE(1), MX_U8, MX_CPU);
  cr_assert_eq(mx_set(u, MX_SHAPE(0), -3), MX_OK);
  cr_expect_eq(mx_item(u), 0);
  mx_tensor *h = mx_zeros(MX_SHAPE(1), MX_F16, MX_CPU);
  cr_assert_eq(mx_set(h, MX_SHAPE(0), 0.1), MX_OK);
  cr_expect_eq(mx_item(h), 0.0999755859375, "float16(0.1)");
  mx_tensor *b = mx_zeros(MX_SHAPE(1), MX_BF16, MX_CPU);
  cr_assert_eq(mx_set(b, MX_SHAPE(0), 0.1), MX_OK);
  cr_expect_eq(mx_item(b), 0.10009765625, "bfloat16(0.1)");
  mx_tensor *bo = mx_zeros(MX_SHAPE(2), MX_BOOL, MX_CPU);
  cr_assert_eq(mx_set(bo, MX_SHAPE(1), -0.5), MX_OK);
  cr_expect_eq(mx_at(bo, MX_SHAPE(0)), 0);
  cr_expect_eq(mx_at(bo, MX_SHAPE(1)), 1);
  mx_tensor *l = mx_zeros(MX_SHAPE(1), MX_I64, MX_CPU);
  cr_assert_eq(mx_set(l, MX_SHAPE(0), 0x1p52 + 1), MX_OK);
  cr_expect_eq(mx_item(l), 0x1p52 + 1);
  /* item */
  cr_expect_eq(mx_item(mx_full(MX_SHAPE(1, 1, 1), -4.5, MX_F64, MX_CPU)), -4.5);
  mx_scope_end(s);
}

Test(copy, item_errors) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_reshape(mx_arange(0, 12, 1, MX_F32, MX_CPU), MX_SHAPE(3, 4));
  cr_expect_eq(mx_item(mx_select(mx_select(x, 1, 2), 0, 1)), 6);
  cr_expect_eq(mx_item(mx_narrow(mx_slice(x, 0, 2, 3, 1), 1, 3, 1)), 11, "a (1, 1) view");
  mx_clear_error();
  cr_expect(isnan(mx_item(x)), "12 elements have no single value");
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  mx_clear_error();
  cr_expect(isnan(mx_item(mx_empty(MX_SHAPE(0), MX_F32, MX_CPU))));
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  mx_clear_error();
  mx_scope_end(s);
}

Test(copy, to_host_is_row_major) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_reshape(mx_arange(0, 24, 1, MX_I32, MX_CPU), MX_SHAPE(2, 3, 4));
  mx_tensor *p = mx_permute(x, MX_DIMS(2, 0, 1)); /* (4, 2, 3) */
  int32_t h[24];
  cr_assert_eq(mx_to_host(p, h, sizeof h), MX_OK);
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++)
        cr_expect_eq(h[(k * 2 + i) * 3 + j], i * 12 + j * 4 + k);
  /* an expanded view is written out in full */
  float e[6];
  cr_assert_eq(mx_to_host(mx_expand(mx_scalar(1.25, MX_F32, MX_CPU), MX_SHAPE(2, 3)), e, sizeof e), MX_OK);
  for (int i = 0; i < 6; i++) cr_expect_eq(e[i], 1.25f);
  mx_clear_error();
  cr_expect_eq(mx_to_host(x, NULL, 0), MX_NULL_INPUT);
  mx_clear_error();
  cr_expect_eq(mx_to_host(x, h, sizeof h - 1), MX_INVALID_ARGUMENT);
  mx_clear_error();
  mx_scope_end(s);
}

/* --- large tensors: the OpenMP paths ------------------------------------------------------- */

/* 1024 x 1024 elements; 256 x 256 under MX_TEST_QUICK (set, non-empty and
 * not "0": the sanitizer and valgrind runs), still above the 32768 elements
 * where loops go parallel and the 65536 where a single row is split into
 * chunks (kernels/cpu/parallel.h, strided.c). */
static bool quick_mode(void) {
  const char *q = getenv("MX_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0;
}
static int64_t big_side(void) {
  static int64_t side;
  if (!side) side = quick_mode() ? 256 : 1024;
  return side;
}
#define BIG big_side()
#define BIG_N (BIG * BIG)

Test(copy, large_transposed_contiguous) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_reshape(mx_arange(0, BIG_N, 1, MX_F32, MX_CPU), MX_SHAPE(BIG, BIG));
  cr_assert_not_null(a, "%s", mx_last_error());
  mx_tensor *c = mx_contiguous(mx_transpose(a, 0, 1));
  cr_assert_not_null(c);
  float *h = malloc(sizeof(float) * (size_t)BIG_N);
  cr_assert_not_null(h);
  cr_assert_eq(mx_to_host(c, h, sizeof(float) * (size_t)BIG_N), MX_OK);
  int64_t wrong = 0;
  for (int64_t i = 0; i < BIG; i++)
    for (int64_t j = 0; j < BIG; j++)
      if (h[i * BIG + j] != (float)(j * BIG + i)) wrong++;
  cr_expect_eq(wrong, 0, "%lld elements of the transposed copy are wrong", (long long)wrong);
  free(h);
  mx_scope_end(s);
}

Test(copy, large_conversions_round_trip) {
  mx_scope *s = mx_scope_begin();
  /* integers in [-125, 125]: exact in every dtype but u8 and bool */
  float *src = malloc(sizeof(float) * (size_t)BIG_N);
  float *back = malloc(sizeof(float) * (size_t)BIG_N);
  cr_assert(src && back);
  for (int64_t i = 0; i < BIG_N; i++) src[i] = (float)(i % 251 - 125);
  mx_tensor *a = mx_from_data(src, MX_SHAPE(BIG, BIG), MX_F32, MX_CPU);
  mx_tensor *at = mx_transpose(a, 0, 1);
  const mx_dtype through[] = {MX_F16, MX_BF16, MX_F64, MX_I32, MX_I64};
  for (size_t k = 0; k < ARRAY_LEN(through); k++) {
    /* contiguous f32 -> dtype -> f32 (the bulk f16/bf16 paths) */
    mx_tensor *x = mx_to_dtype(mx_to_dtype(a, through[k]), MX_F32);
    cr_assert_not_null(x, "%s", mx_last_error());
    cr_assert_eq(mx_to_host(x, back, sizeof(float) * (size_t)BIG_N), MX_OK);
    cr_expect_eq(memcmp(back, src, sizeof(float) * (size_t)BIG_N), 0, "via %s", mx_dtype_name(through[k]));
    /* strided: transposed -> dtype -> f32 */
    mx_tensor *y = mx_to_dtype(mx_to_dtype(at, through[k]), MX_F32);
    cr_assert_not_null(y);
    cr_assert_eq(mx_to_host(y, back, sizeof(float) * (size_t)BIG_N), MX_OK);
    int64_t wrong = 0;
    for (int64_t i = 0; i < BIG; i++)
      for (int64_t j = 0; j < BIG; j++)
        if (back[i * BIG + j] != src[j * BIG + i]) wrong++;
    cr_expect_eq(wrong, 0, "transposed via %s: %lld wrong", mx_dtype_name(through[k]), (long long)wrong);
    mx_release(x);
    mx_release(y);
  }
  /* u8 saturates the negatives */
  mx_tensor *u = mx_to_dtype(at, MX_U8);
  uint8_t *uh = malloc((size_t)BIG_N);
  cr_assert_not_null(uh);
  cr_assert_eq(mx_to_host(u, uh, (size_t)BIG_N), MX_OK);
  int64_t wrong = 0;
  for (int64_t i = 0; i < BIG; i++)
    for (int64_t j = 0; j < BIG; j++) {
      float v = src[j * BIG + i];
      if (uh[i * BIG + j] != (v < 0 ? 0 : (uint8_t)v)) wrong++;
    }
  cr_expect_eq(wrong, 0);
  free(uh);
  free(src);
  free(back);
  mx_scope_end(s);
}

Test(copy, large_strided_fill_and_broadcast) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *z = mx_zeros(MX_SHAPE(BIG_N), MX_F32, MX_CPU);
  cr_assert_eq(mx_fill_(mx_slice(z, 0, 1, BIG_N, 2), 1.0), MX_OK);
  float *h = malloc(sizeof(float) * (size_t)BIG_N);
  cr_assert_not_null(h);
  cr_assert_eq(mx_to_host(z, h, sizeof(float) * (size_t)BIG_N), MX_OK);
  int64_t wrong = 0;
  for (int64_t i = 0; i < BIG_N; i++)
    if (h[i] != (float)(i % 2)) wrong++;
  cr_expect_eq(wrong, 0, "strided fill: %lld wrong", (long long)wrong);
  /* a row broadcast down a (1024, 1024) matrix, into a transposed view */
  mx_tensor *m = mx_zeros(MX_SHAPE(BIG, BIG), MX_F32, MX_CPU);
  mx_tensor *row = mx_arange(0, BIG, 1, MX_F32, MX_CPU);
  cr_assert_eq(mx_copy_(mx_transpose(m, 0, 1), row), MX_OK); /* m[j, i] = j */
  cr_assert_eq(mx_to_host(m, h, sizeof(float) * (size_t)BIG_N), MX_OK);
  wrong = 0;
  for (int64_t i = 0; i < BIG; i++)
    for (int64_t j = 0; j < BIG; j++)
      if (h[i * BIG + j] != (float)i) wrong++;
  cr_expect_eq(wrong, 0, "broadcast copy: %lld wrong", (long long)wrong);
  /* large overlapping copy: t[1:] = t[:-1] */
  mx_tensor *t = mx_arange(0, BIG_N, 1, MX_F32, MX_CPU);
  cr_assert_eq(mx_copy_(mx_slice(t, 0, 1, BIG_N, 1), mx_slice(t, 0, 0, BIG_N - 1, 1)), MX_OK);
  cr_assert_eq(mx_to_host(t, h, sizeof(float) * (size_t)BIG_N), MX_OK);
  wrong = h[0] != 0;
  for (int64_t i = 1; i < BIG_N; i++)
    if (h[i] != (float)(i - 1)) wrong++;
  cr_expect_eq(wrong, 0, "overlapping copy: %lld wrong", (long long)wrong);
  free(h);
  mx_scope_end(s);
}

Test(copy, large_int64_exact_strided) {
  mx_scope *s = mx_scope_begin();
  int64_t *src = malloc(sizeof(int64_t) * (size_t)BIG_N);
  int64_t *back = malloc(sizeof(int64_t) * (size_t)BIG_N);
  cr_assert(src && back);
  for (int64_t i = 0; i < BIG_N; i++) src[i] = (1LL << 60) + i * 3;
  mx_tensor *a = mx_from_data(src, MX_SHAPE(BIG, BIG), MX_I64, MX_CPU);
  cr_assert_eq(mx_to_host(mx_clone(mx_transpose(a, 0, 1)), back, sizeof(int64_t) * (size_t)BIG_N), MX_OK);
  int64_t wrong = 0;
  for (int64_t i = 0; i < BIG; i++)
    for (int64_t j = 0; j < BIG; j++)
      if (back[i * BIG + j] != src[j * BIG + i]) wrong++;
  cr_expect_eq(wrong, 0, "int64 values beyond 2^53 must copy exactly: %lld wrong", (long long)wrong);
  free(src);
  free(back);
  mx_scope_end(s);
}
