/* Printing: mx_to_string must match PyTorch's repr exactly.
 *
 * Every expected string below was produced by PyTorch 1.13 (repr() of the
 * same tensor built with torch.tensor / torch.arange / ...), with the
 * "torch." prefix of dtype names dropped: mixgrad prints dtype=float16
 * where PyTorch prints dtype=torch.float16. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

static mx_tensor *f32s(mx_shape shape, const float *values) {
  return mx_from_data(values, shape, MX_F32, MX_CPU);
}

static mx_tensor *i64s(mx_shape shape, const int64_t *values) {
  return mx_from_data(values, shape, MX_I64, MX_CPU);
}

/* 1000 x 1.5, then 1e6, then 1000 x 2.5: the large value is hidden by the
 * summary, and PyTorch picks the format from the printed values only. */
static mx_tensor *mid_big(void) {
  mx_tensor *t = mx_full(MX_SHAPE(2001), 1.5, MX_F32, MX_CPU);
  cr_assert_not_null(t, "%s", mx_last_error());
  cr_assert_eq(mx_fill_(mx_slice(t, 0, 1001, 2001, 1), 2.5), MX_OK);
  cr_assert_eq(mx_set(t, MX_SHAPE(1000), 1e6), MX_OK);
  return t;
}

static void expect_repr(mx_tensor *t, const char *expected) {
  cr_assert_not_null(t, "building the tensor failed: %s", mx_last_error());
  char *text = mx_to_string(t);
  cr_assert_not_null(text, "mx_to_string failed: %s", mx_last_error());
  cr_expect_str_eq(text, expected, "\nexpected:\n%s\nactual:\n%s", expected, text);
  free(text);
}

/* --- behaviour beyond single strings ----------------------------------------- */

Test(print, exactly_1000_elements_is_not_summarized) {
  mx_scope *s = mx_scope_begin();
  char *full = mx_to_string(mx_arange(0, 1000, 1, MX_I64, MX_CPU));
  char *summary = mx_to_string(mx_arange(0, 1001, 1, MX_I64, MX_CPU));
  cr_assert_not_null(full);
  cr_assert_not_null(summary);
  cr_expect_null(strstr(full, "..."), "1000 elements must print in full");
  cr_expect_not_null(strstr(full, " 500,"));
  cr_expect_not_null(strstr(summary, "..."), "1001 elements must be summarized");
  cr_expect_null(strstr(summary, " 500,"));
  free(full);
  free(summary);
  mx_scope_end(s);
}

Test(print, lines_never_exceed_80_columns) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *ts[] = {
      mx_arange(0, 500, 1, MX_F32, MX_CPU),
      mx_reshape(mx_arange(0, 300, 0.5, MX_F64, MX_CPU), MX_SHAPE(20, 30)),
      mx_randn(MX_SHAPE(7, 33), MX_F32, MX_CPU, NULL),
  };
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) {
    char *text = mx_to_string(ts[i]);
    cr_assert_not_null(text);
    size_t col = 0;
    for (const char *c = text; *c; c++) {
      col = *c == '\n' ? 0 : col + 1;
      cr_expect_leq(col, 80, "case %zu: a line is longer than 80 columns:\n%s", i, text);
      if (col > 80) break;
    }
    free(text);
  }
  mx_scope_end(s);
}

Test(print, to_string_of_null_fails) {
  mx_clear_error();
  cr_expect_null(mx_to_string(NULL));
  cr_expect_eq(mx_last_status(), MX_NULL_INPUT);
  mx_clear_error();
}

Test(print, fprint_writes_repr_and_newline) {
  mx_scope *s = mx_scope_begin();
  FILE *f = tmpfile();
  cr_assert_not_null(f);
  mx_fprint(f, mx_from_data((int32_t[]){4, -5}, MX_SHAPE(2), MX_I32, MX_CPU));
  rewind(f);
  char line[128] = {0};
  size_t n = fread(line, 1, sizeof line - 1, f);
  fclose(f);
  line[n] = '\0';
  cr_expect_str_eq(line, "tensor([ 4, -5], dtype=int32)\n");
  mx_scope_end(s);
}

/* --- PyTorch repr, one case each --------------------------------------------- */

Test(print, scalar_float) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_scalar(3.5, MX_F32, MX_CPU),
      "tensor(3.5000)");
  mx_scope_end(s);
}

Test(print, scalar_whole) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_scalar(2.0, MX_F32, MX_CPU),
      "tensor(2.)");
  mx_scope_end(s);
}

Test(print, scalar_int) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_scalar(7, MX_I64, MX_CPU),
      "tensor(7)");
  mx_scope_end(s);
}

Test(print, scalar_neg_int32) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_scalar(-42, MX_I32, MX_CPU),
      "tensor(-42, dtype=int32)");
  mx_scope_end(s);
}

Test(print, scalar_nan) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_scalar(NAN, MX_F32, MX_CPU),
      "tensor(nan)");
  mx_scope_end(s);
}

Test(print, scalar_bool) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_scalar(1, MX_BOOL, MX_CPU),
      "tensor(True)");
  mx_scope_end(s);
}

Test(print, scalar_f64_sci) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_scalar(1e-5, MX_F64, MX_CPU),
      "tensor(1.0000e-05, dtype=float64)");
  mx_scope_end(s);
}

Test(print, ints_1d) {
  mx_scope *s = mx_scope_begin();
  expect_repr(i64s(MX_SHAPE(3), (int64_t[]){1, -20, 300}),
      "tensor([  1, -20, 300])");
  mx_scope_end(s);
}

Test(print, floats_2d) {
  mx_scope *s = mx_scope_begin();
  expect_repr(f32s(MX_SHAPE(2, 3), (float[]){0.5f, 1.25f, -3.0f, 10.125f, 2.0f, 0.0f}),
      "tensor([[ 0.5000,  1.2500, -3.0000],\n"
      "        [10.1250,  2.0000,  0.0000]])");
  mx_scope_end(s);
}

Test(print, transposed) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_transpose(f32s(MX_SHAPE(2, 3), (float[]){0.5f, 1.25f, -3.0f, 10.125f, 2.0f, 0.0f}), 0, 1),
      "tensor([[ 0.5000, 10.1250],\n"
      "        [ 1.2500,  2.0000],\n"
      "        [-3.0000,  0.0000]])");
  mx_scope_end(s);
}

Test(print, whole_floats) {
  mx_scope *s = mx_scope_begin();
  expect_repr(f32s(MX_SHAPE(3), (float[]){1, 2, -3}),
      "tensor([ 1.,  2., -3.])");
  mx_scope_end(s);
}

Test(print, whole_floats_2d) {
  mx_scope *s = mx_scope_begin();
  expect_repr(f32s(MX_SHAPE(2, 2), (float[]){1, 20, 300, 0}),
      "tensor([[  1.,  20.],\n"
      "        [300.,   0.]])");
  mx_scope_end(s);
}

Test(print, negative) {
  mx_scope *s = mx_scope_begin();
  expect_repr(f32s(MX_SHAPE(3), (float[]){-1.5f, 2.25f, -0.125f}),
      "tensor([-1.5000,  2.2500, -0.1250])");
  mx_scope_end(s);
}

Test(print, neg_zero) {
  mx_scope *s = mx_scope_begin();
  expect_repr(f32s(MX_SHAPE(2), (float[]){-0.0f, 0.5f}),
      "tensor([-0.0000, 0.5000])");
  mx_scope_end(s);
}

Test(print, sci_small) {
  mx_scope *s = mx_scope_begin();
  expect_repr(f32s(MX_SHAPE(2), (float[]){1e-5f, 1.0f}),
      "tensor([1.0000e-05, 1.0000e+00])");
  mx_scope_end(s);
}

Test(print, sci_ratio) {
  mx_scope *s = mx_scope_begin();
  expect_repr(f32s(MX_SHAPE(2), (float[]){1.0f, 2000.5f}),
      "tensor([1.0000e+00, 2.0005e+03])");
  mx_scope_end(s);
}

Test(print, sci_whole_ratio) {
  mx_scope *s = mx_scope_begin();
  expect_repr(f32s(MX_SHAPE(2), (float[]){1, 10000}),
      "tensor([1.0000e+00, 1.0000e+04])");
  mx_scope_end(s);
}

Test(print, sci_big) {
  mx_scope *s = mx_scope_begin();
  expect_repr(f32s(MX_SHAPE(2), (float[]){1e9f, 2.5e9f}),
      "tensor([1.0000e+09, 2.5000e+09])");
  mx_scope_end(s);
}

Test(print, fixed_ratio_1000) {
  mx_scope *s = mx_scope_begin();
  expect_repr(f32s(MX_SHAPE(2), (float[]){1.5f, 1500.0f}),
      "tensor([   1.5000, 1500.0000])");
  mx_scope_end(s);
}

Test(print, whole_ratio_1000) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_arange(0, 1001, 1, MX_F32, MX_CPU),
      "tensor([   0.,    1.,    2.,  ...,  998.,  999., 1000.])");
  mx_scope_end(s);
}

Test(print, nan_inf) {
  mx_scope *s = mx_scope_begin();
  expect_repr(f32s(MX_SHAPE(4), (float[]){NAN, INFINITY, -INFINITY, 1.5f}),
      "tensor([   nan,    inf,   -inf, 1.5000])");
  mx_scope_end(s);
}

Test(print, nan_whole) {
  mx_scope *s = mx_scope_begin();
  expect_repr(f32s(MX_SHAPE(2), (float[]){NAN, 1}),
      "tensor([nan, 1.])");
  mx_scope_end(s);
}

Test(print, all_nan_inf) {
  mx_scope *s = mx_scope_begin();
  expect_repr(f32s(MX_SHAPE(2), (float[]){NAN, -INFINITY}),
      "tensor([nan, -inf])");
  mx_scope_end(s);
}

Test(print, bool_1d) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_from_data((bool[]){true, false, true}, MX_SHAPE(3), MX_BOOL, MX_CPU),
      "tensor([ True, False,  True])");
  mx_scope_end(s);
}

Test(print, bool_2d) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_eye(2, 2, MX_BOOL, MX_CPU),
      "tensor([[ True, False],\n"
      "        [False,  True]])");
  mx_scope_end(s);
}

Test(print, int32) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_from_data((int32_t[]){1, 2, 3}, MX_SHAPE(3), MX_I32, MX_CPU),
      "tensor([1, 2, 3], dtype=int32)");
  mx_scope_end(s);
}

Test(print, uint8) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_from_data((uint8_t[]){0, 7, 255}, MX_SHAPE(3), MX_U8, MX_CPU),
      "tensor([  0,   7, 255], dtype=uint8)");
  mx_scope_end(s);
}

Test(print, f16) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_to_dtype(f32s(MX_SHAPE(3), (float[]){0.1f, 1.5f, -2.0f}), MX_F16),
      "tensor([ 0.1000,  1.5000, -2.0000], dtype=float16)");
  mx_scope_end(s);
}

Test(print, bf16) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_to_dtype(f32s(MX_SHAPE(2), (float[]){0.1f, 1.5f}), MX_BF16),
      "tensor([0.1001, 1.5000], dtype=bfloat16)");
  mx_scope_end(s);
}

Test(print, f64) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_from_data((double[]){0.25, 1.0}, MX_SHAPE(2), MX_F64, MX_CPU),
      "tensor([0.2500, 1.0000], dtype=float64)");
  mx_scope_end(s);
}

Test(print, empty_1d) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_empty(MX_SHAPE(0), MX_F32, MX_CPU),
      "tensor([])");
  mx_scope_end(s);
}

Test(print, empty_0x3) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_empty(MX_SHAPE(0, 3), MX_F32, MX_CPU),
      "tensor([], size=(0, 3))");
  mx_scope_end(s);
}

Test(print, empty_2x0x3) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_empty(MX_SHAPE(2, 0, 3), MX_F32, MX_CPU),
      "tensor([], size=(2, 0, 3))");
  mx_scope_end(s);
}

Test(print, empty_i64) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_empty(MX_SHAPE(0), MX_I64, MX_CPU),
      "tensor([], dtype=int64)");
  mx_scope_end(s);
}

Test(print, empty_u8) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_empty(MX_SHAPE(0), MX_U8, MX_CPU),
      "tensor([], dtype=uint8)");
  mx_scope_end(s);
}

Test(print, empty_i32_0x3) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_empty(MX_SHAPE(0, 3), MX_I32, MX_CPU),
      "tensor([], size=(0, 3), dtype=int32)");
  mx_scope_end(s);
}

Test(print, empty_bool_2x0) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_empty(MX_SHAPE(2, 0), MX_BOOL, MX_CPU),
      "tensor([], size=(2, 0), dtype=bool)");
  mx_scope_end(s);
}

Test(print, three_d) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_reshape(mx_arange(0, 12, 1, MX_F32, MX_CPU), MX_SHAPE(2, 2, 3)),
      "tensor([[[ 0.,  1.,  2.],\n"
      "         [ 3.,  4.,  5.]],\n"
      "\n"
      "        [[ 6.,  7.,  8.],\n"
      "         [ 9., 10., 11.]]])");
  mx_scope_end(s);
}

Test(print, three_d_int) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_reshape(mx_arange(0, 12, 1, MX_I64, MX_CPU), MX_SHAPE(2, 3, 2)),
      "tensor([[[ 0,  1],\n"
      "         [ 2,  3],\n"
      "         [ 4,  5]],\n"
      "\n"
      "        [[ 6,  7],\n"
      "         [ 8,  9],\n"
      "         [10, 11]]])");
  mx_scope_end(s);
}

Test(print, long_1d) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_arange(0, 30, 1, MX_F32, MX_CPU),
      "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
      "        14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25., 26., 27.,\n"
      "        28., 29.])");
  mx_scope_end(s);
}

Test(print, long_1d_int) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_arange(0, 40, 1, MX_I64, MX_CPU),
      "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,\n"
      "        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35,\n"
      "        36, 37, 38, 39])");
  mx_scope_end(s);
}

Test(print, long_2d_wrap) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_reshape(mx_arange(0, 10, 0.25, MX_F32, MX_CPU), MX_SHAPE(2, 20)),
      "tensor([[0.0000, 0.2500, 0.5000, 0.7500, 1.0000, 1.2500, 1.5000, 1.7500, 2.0000,\n"
      "         2.2500, 2.5000, 2.7500, 3.0000, 3.2500, 3.5000, 3.7500, 4.0000, 4.2500,\n"
      "         4.5000, 4.7500],\n"
      "        [5.0000, 5.2500, 5.5000, 5.7500, 6.0000, 6.2500, 6.5000, 6.7500, 7.0000,\n"
      "         7.2500, 7.5000, 7.7500, 8.0000, 8.2500, 8.5000, 8.7500, 9.0000, 9.2500,\n"
      "         9.5000, 9.7500]])");
  mx_scope_end(s);
}

Test(print, summarized_1d) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_arange(0, 2000, 1, MX_F32, MX_CPU),
      "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
      "        1.9990e+03])");
  mx_scope_end(s);
}

Test(print, summarized_2d) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_reshape(mx_arange(0, 2000, 1, MX_I64, MX_CPU), MX_SHAPE(40, 50)),
      "tensor([[   0,    1,    2,  ...,   47,   48,   49],\n"
      "        [  50,   51,   52,  ...,   97,   98,   99],\n"
      "        [ 100,  101,  102,  ...,  147,  148,  149],\n"
      "        ...,\n"
      "        [1850, 1851, 1852,  ..., 1897, 1898, 1899],\n"
      "        [1900, 1901, 1902,  ..., 1947, 1948, 1949],\n"
      "        [1950, 1951, 1952,  ..., 1997, 1998, 1999]])");
  mx_scope_end(s);
}

Test(print, summarized_3d) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_reshape(mx_arange(0, 1200, 1, MX_I64, MX_CPU), MX_SHAPE(8, 3, 50)),
      "tensor([[[   0,    1,    2,  ...,   47,   48,   49],\n"
      "         [  50,   51,   52,  ...,   97,   98,   99],\n"
      "         [ 100,  101,  102,  ...,  147,  148,  149]],\n"
      "\n"
      "        [[ 150,  151,  152,  ...,  197,  198,  199],\n"
      "         [ 200,  201,  202,  ...,  247,  248,  249],\n"
      "         [ 250,  251,  252,  ...,  297,  298,  299]],\n"
      "\n"
      "        [[ 300,  301,  302,  ...,  347,  348,  349],\n"
      "         [ 350,  351,  352,  ...,  397,  398,  399],\n"
      "         [ 400,  401,  402,  ...,  447,  448,  449]],\n"
      "\n"
      "        ...,\n"
      "\n"
      "        [[ 750,  751,  752,  ...,  797,  798,  799],\n"
      "         [ 800,  801,  802,  ...,  847,  848,  849],\n"
      "         [ 850,  851,  852,  ...,  897,  898,  899]],\n"
      "\n"
      "        [[ 900,  901,  902,  ...,  947,  948,  949],\n"
      "         [ 950,  951,  952,  ...,  997,  998,  999],\n"
      "         [1000, 1001, 1002,  ..., 1047, 1048, 1049]],\n"
      "\n"
      "        [[1050, 1051, 1052,  ..., 1097, 1098, 1099],\n"
      "         [1100, 1101, 1102,  ..., 1147, 1148, 1149],\n"
      "         [1150, 1151, 1152,  ..., 1197, 1198, 1199]]])");
  mx_scope_end(s);
}

Test(print, summarized_mid_big) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mid_big(),
      "tensor([1.5000, 1.5000, 1.5000,  ..., 2.5000, 2.5000, 2.5000])");
  mx_scope_end(s);
}

Test(print, summarized_wide_int) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_full(MX_SHAPE(2000), 1e17, MX_I64, MX_CPU),
      "tensor([100000000000000000, 100000000000000000, 100000000000000000,\n"
      "         ..., 100000000000000000, 100000000000000000,\n"
      "        100000000000000000])");
  mx_scope_end(s);
}

Test(print, f16_2d_suffix) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_reshape(mx_arange(0, 2.5, 0.125, MX_F16, MX_CPU), MX_SHAPE(2, 10)),
      "tensor([[0.0000, 0.1250, 0.2500, 0.3750, 0.5000, 0.6250, 0.7500, 0.8750, 1.0000,\n"
      "         1.1250],\n"
      "        [1.2500, 1.3750, 1.5000, 1.6250, 1.7500, 1.8750, 2.0000, 2.1250, 2.2500,\n"
      "         2.3750]], dtype=float16)");
  mx_scope_end(s);
}

Test(print, int32_suffix_wrap) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_arange(1000, 1010, 1, MX_I32, MX_CPU),
      "tensor([1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009],\n"
      "       dtype=int32)");
  mx_scope_end(s);
}

Test(print, f16_suffix_wrap) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_full(MX_SHAPE(1, 11), 10, MX_F16, MX_CPU),
      "tensor([[10., 10., 10., 10., 10., 10., 10., 10., 10., 10., 10.]],\n"
      "       dtype=float16)");
  mx_scope_end(s);
}

Test(print, f64_suffix_wrap_long) {
  mx_scope *s = mx_scope_begin();
  expect_repr(mx_arange(1, 3, 0.25, MX_F64, MX_CPU),
      "tensor([1.0000, 1.2500, 1.5000, 1.7500, 2.0000, 2.2500, 2.5000, 2.7500],\n"
      "       dtype=float64)");
  mx_scope_end(s);
}
