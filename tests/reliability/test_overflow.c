/* Shapes whose element or byte count overflows int64: every entry point
 * refuses them with the op and the shape named, never a wrapped count (the
 * suite runs clean under UBSan); empty shapes and huge-but-valid views keep
 * working. */
#include <criterion/criterion.h>
#include <math.h>
#include <mixgrad.h>
#include <stdio.h>
#include <string.h>

#include "../common/expect_error.h"
#include "../common/tmp_files.h"

#define P40 ((int64_t)1 << 40) /* [P40, P40] is 2^80 elements */
#define P31 ((int64_t)1 << 31) /* [P31, P31] is 2^62: fits int64, not as float32 bytes */
#define P62 ((int64_t)1 << 62)
#define TOO_MANY(op) op ": shape [1099511627776,1099511627776] has too many elements"
#define TOO_MANY_BYTES(op)                                                                        \
  op ": shape [2147483648,2147483648] of float32 is too large: 4611686018427387904 elements of 4 " \
     "bytes are more than 2^63-1 bytes"

static mx_scope *scope;
static void begin(void) {
  mx_clear_error();
  scope = mx_scope_begin();
}
static void end(void) { mx_scope_end(scope); }
TestSuite(overflow, .init = begin, .fini = end);

/* A view of one element, value 3, with the given shape (stride 0 everywhere). */
static mx_tensor *spread(mx_shape shape, mx_dtype dtype) {
  mx_shape ones = shape;
  for (int i = 0; i < ones.ndim; i++) ones.d[i] = 1;
  mx_tensor *t = mx_expand(mx_full(ones, 3, dtype, MX_CPU), shape);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

Test(overflow, constructors) {
  mx_shape big = MX_SHAPE(P40, P40);
  float data[1] = {0};
  EXPECT_ERROR(mx_empty(big, MX_F32, MX_CPU), TOO_MANY("mx_empty"));
  EXPECT_ERROR(mx_zeros(big, MX_F32, MX_CPU), TOO_MANY("mx_zeros"));
  EXPECT_ERROR(mx_ones(big, MX_U8, MX_CPU), TOO_MANY("mx_ones"));
  EXPECT_ERROR(mx_full(big, 2, MX_F64, MX_CPU), TOO_MANY("mx_full"));
  EXPECT_ERROR(mx_rand(big, MX_F32, MX_CPU, NULL), TOO_MANY("mx_rand"));
  EXPECT_ERROR(mx_randn(big, MX_F32, MX_CPU, NULL), TOO_MANY("mx_randn"));
  EXPECT_ERROR(mx_randint(0, 5, big, MX_I64, MX_CPU, NULL), TOO_MANY("mx_randint"));
  EXPECT_ERROR(mx_bernoulli_p(big, 0.5, MX_F32, MX_CPU, NULL), TOO_MANY("mx_bernoulli_p"));
  EXPECT_ERROR(mx_from_data(data, big, MX_F32, MX_CPU), TOO_MANY("mx_from_data"));
  EXPECT_ERROR(mx_eye(P40, P40, MX_F32, MX_CPU), TOO_MANY("mx_eye"));
  EXPECT_ERROR(mx_empty(MX_SHAPE(INT64_MAX, 2), MX_U8, MX_CPU),
               "mx_empty: shape [9223372036854775807,2] has too many elements");
  /* the count fits, the bytes do not */
  EXPECT_ERROR(mx_zeros(MX_SHAPE(P31, P31), MX_F32, MX_CPU), TOO_MANY_BYTES("mx_zeros"));
  EXPECT_ERROR(mx_empty(MX_SHAPE(INT64_MAX), MX_F64, MX_CPU),
               "mx_empty: shape [9223372036854775807] of float64 is too large: 9223372036854775807 elements of 8 "
               "bytes are more than 2^63-1 bytes");
  EXPECT_ERROR(mx_randn(MX_SHAPE(P62 / 2, 2), MX_F16, MX_CPU, NULL),
               "mx_randn: shape [2305843009213693952,2] of float16 is too large: 4611686018427387904 elements of 2 "
               "bytes are more than 2^63-1 bytes");
  EXPECT_ERROR(mx_randn(MX_SHAPE(P62, 2), MX_F16, MX_CPU, NULL),
               "mx_randn: shape [4611686018427387904,2] has too many elements");
}

Test(overflow, negative_sizes_still_refused) {
  EXPECT_ERROR(mx_empty(MX_SHAPE(2, -3), MX_F32, MX_CPU), "mx_empty: negative size -3 in dim 1 of shape [2,-3]");
  EXPECT_ERROR(mx_zeros(MX_SHAPE(P40, P40, -1), MX_F32, MX_CPU),
               "mx_zeros: negative size -1 in dim 2 of shape [1099511627776,1099511627776,-1]");
  mx_tensor *one = mx_ones(MX_SHAPE(1), MX_F32, MX_CPU);
  EXPECT_ERROR(mx_expand(one, MX_SHAPE(P40, -2)),
               "mx_expand: shape [1] cannot be broadcast to [1099511627776,-2] (dim 1: 1 vs -2)");
  EXPECT_ERROR(mx_reshape(one, MX_SHAPE(-2, P40)),
               "mx_reshape: invalid size -2 in dim 0 of shape [-2,1099511627776]");
}

/* 0-sized dims: still fine, unless the other sizes alone pass 2^63-1 (the
 * strides of such a shape would overflow). */
Test(overflow, empty_shapes) {
  mx_tensor *e = mx_zeros(MX_SHAPE(3, 0, P40), MX_F32, MX_CPU);
  cr_assert_not_null(e, "%s", mx_last_error());
  cr_expect_eq(mx_numel(e), 0);
  mx_tensor *flat = mx_flatten(e, 0, 2);
  cr_assert_not_null(flat, "%s", mx_last_error());
  cr_expect_eq(mx_size(flat, 0), 0);
  mx_tensor *back = mx_reshape(flat, MX_SHAPE(P40, 0, 3));
  cr_assert_not_null(back, "%s", mx_last_error());
  cr_expect_eq(mx_size(back, 0), P40);
  cr_expect_eq(mx_item(mx_sum(e, MX_ALL_DIMS, false)), 0);
  mx_tensor *eye = mx_eye(0, INT64_MAX, MX_F32, MX_CPU);
  cr_assert_not_null(eye, "%s", mx_last_error());
  cr_expect_eq(mx_size(eye, 1), INT64_MAX);
  EXPECT_ERROR(mx_zeros(MX_SHAPE(0, P40, P40), MX_F32, MX_CPU),
               "mx_zeros: shape [0,1099511627776,1099511627776] is too large: its nonzero sizes multiply past 2^63-1");
  EXPECT_ERROR(mx_reshape(flat, MX_SHAPE(P40, P40, 0)),
               "mx_reshape: shape [1099511627776,1099511627776,0] is too large: its nonzero sizes multiply past "
               "2^63-1");
  EXPECT_ERROR(mx_expand(mx_zeros(MX_SHAPE(0, 1), MX_F32, MX_CPU), MX_SHAPE(P40, 0, P40)),
               "mx_expand: shape [1099511627776,0,1099511627776] is too large: its nonzero sizes multiply past "
               "2^63-1");
}

/* The case the issue found: 2^80 elements wrapped to 0, so the sum was 0
 * and the mean NaN. */
Test(overflow, expand_and_broadcast_to) {
  mx_tensor *one = mx_ones(MX_SHAPE(1, 1), MX_F32, MX_CPU);
  EXPECT_ERROR(mx_expand(one, MX_SHAPE(P40, P40)), TOO_MANY("mx_expand"));
  EXPECT_ERROR(mx_broadcast_to(one, MX_SHAPE(P40, P40)), TOO_MANY("mx_broadcast_to"));
  EXPECT_ERROR(mx_expand(one, MX_SHAPE(P40, P40, 1, 1)),
               "mx_expand: shape [1099511627776,1099511627776,1,1] has too many elements");
  EXPECT_ERROR(mx_sum(mx_expand(one, MX_SHAPE(P40, P40)), MX_ALL_DIMS, false), TOO_MANY("mx_expand"));
  EXPECT_ERROR(mx_mean(mx_broadcast_to(one, MX_SHAPE(P40, P40)), MX_ALL_DIMS, false), TOO_MANY("mx_broadcast_to"));
}

/* A view of 2^62 elements of one value fits int64, so it is allowed, as
 * PyTorch allows it; it works as far as its memory does, and whatever would
 * need its 2^64 bytes is refused. */
Test(overflow, huge_valid_view) {
  mx_tensor *v = spread(MX_SHAPE(P31, P31), MX_F32);
  cr_expect_eq(mx_numel(v), P62);
  cr_expect_eq(mx_size(v, 0), P31);
  cr_expect_eq(mx_strides_get(v).d[0], 0);
  cr_expect_eq(mx_strides_get(v).d[1], 0);
  cr_expect_eq(mx_at(v, MX_SHAPE(P31 - 1, P31 - 1)), 3);
  mx_tensor *corner = mx_narrow(mx_narrow(v, 0, P31 - 2, 2), 1, 7, 5);
  cr_assert_not_null(corner, "%s", mx_last_error());
  cr_expect_eq(mx_item(mx_sum(corner, MX_ALL_DIMS, false)), 30);
  mx_tensor *flat = mx_flatten(v, 0, 1);
  cr_assert_not_null(flat, "%s", mx_last_error());
  cr_expect_eq(mx_size(flat, 0), P62);
  mx_tensor *again = mx_reshape(flat, MX_SHAPE(4, -1));
  cr_assert_not_null(again, "%s", mx_last_error());
  cr_expect_eq(mx_size(again, 1), P62 / 4);
  cr_expect_not_null(mx_unsqueeze(v, 0));
  EXPECT_ERROR(mx_contiguous(v), TOO_MANY_BYTES("mx_contiguous"));
  EXPECT_ERROR(mx_clone(v), TOO_MANY_BYTES("mx_clone"));
  EXPECT_ERROR(mx_add_scalar(v, 1), TOO_MANY_BYTES("mx_add"));
  EXPECT_ERROR(mx_mul(v, mx_ones(MX_SHAPE(1), MX_F32, MX_CPU)), TOO_MANY_BYTES("mx_mul"));
  char byte;
  EXPECT_STATUS_ERROR(mx_to_host(v, &byte, 0), "mx_to_host: 4611686018427387904 float32 elements are more than "
                                                   "2^63-1 bytes");
  /* one more element in either dim no longer fits */
  EXPECT_ERROR(mx_expand(v, MX_SHAPE(2, P31, P31)),
               "mx_expand: shape [2,2147483648,2147483648] has too many elements");
}

Test(overflow, reshape_and_view) {
  mx_tensor *six = mx_ones(MX_SHAPE(6), MX_F32, MX_CPU);
  EXPECT_ERROR(mx_reshape(six, MX_SHAPE(P40, P40)), TOO_MANY("mx_reshape"));
  EXPECT_ERROR(mx_view(six, MX_SHAPE(P40, P40)), TOO_MANY("mx_view"));
  EXPECT_ERROR(mx_reshape(six, MX_SHAPE(P40, P40, -1)),
               "mx_reshape: shape [1099511627776,1099511627776,-1] has too many elements");
  EXPECT_ERROR(mx_view(six, MX_SHAPE(-1, P40, P40)),
               "mx_view: shape [-1,1099511627776,1099511627776] has too many elements");
  /* a product that wraps to exactly 6 (2^64 + 6 is not 6) */
  EXPECT_ERROR(mx_reshape(six, MX_SHAPE(P62 + 3, 2, 2, 2)),
               "mx_reshape: shape [4611686018427387907,2,2,2] has too many elements");
}

Test(overflow, broadcasting_ops) {
  mx_tensor *col = spread(MX_SHAPE(P40, 1), MX_F32), *row = spread(MX_SHAPE(1, P40), MX_F32);
  EXPECT_ERROR(mx_add(col, row), TOO_MANY("mx_add"));
  EXPECT_ERROR(mx_mul(col, row), TOO_MANY("mx_mul"));
  EXPECT_ERROR(mx_maximum(col, row), TOO_MANY("mx_maximum"));
  EXPECT_ERROR(mx_where(spread(MX_SHAPE(P40, 1), MX_BOOL), row, col), TOO_MANY("mx_where"));
  EXPECT_ERROR(mx_lerp(col, row, mx_scalar(0.5, MX_F32, MX_CPU)), TOO_MANY("mx_lerp"));
}

Test(overflow, matmul) {
  mx_tensor *col = spread(MX_SHAPE(P40, 1), MX_F32), *row = spread(MX_SHAPE(1, P40), MX_F32);
  EXPECT_ERROR(mx_matmul(col, row), TOO_MANY("mx_matmul"));
  EXPECT_ERROR(mx_mm(col, row), TOO_MANY("mx_mm"));
  EXPECT_ERROR(mx_outer(mx_flatten(col, 0, 1), mx_flatten(row, 0, 1)), TOO_MANY("mx_outer"));
  EXPECT_ERROR(mx_pdist(spread(MX_SHAPE(P40, 2), MX_F32), 2), "mx_pdist: 1099511627776 rows make too many pairs");
  /* batch dims that broadcast past 2^63-1 */
  mx_tensor *a = spread(MX_SHAPE(P40, 1, 1, 1), MX_F32), *b = spread(MX_SHAPE(1, P40, 1, 1), MX_F32);
  EXPECT_ERROR(mx_matmul(a, b), "mx_matmul: shape [1099511627776,1099511627776,1,1] has too many elements");
}

Test(overflow, cat_stack_repeat) {
  mx_tensor *half = spread(MX_SHAPE(P62), MX_F32);
  mx_tensor *pair[2] = {half, half};
  EXPECT_ERROR(mx_cat(2, pair, 0),
               "mx_cat: sizes along dim 0 add up past 2^63-1 at tensor 1 of shape [4611686018427387904]");
  EXPECT_ERROR(mx_stack(2, pair, 0), "mx_stack: shape [2,4611686018427387904] has too many elements");
  mx_tensor *max = spread(MX_SHAPE(INT64_MAX), MX_F32), *one = mx_ones(MX_SHAPE(1), MX_F32, MX_CPU);
  mx_tensor *wide[2] = {max, one};
  EXPECT_ERROR(mx_cat(2, wide, -1),
               "mx_cat: sizes along dim 0 add up past 2^63-1 at tensor 1 of shape [1]");
  mx_tensor *small = mx_ones(MX_SHAPE(1, 1), MX_F32, MX_CPU);
  EXPECT_ERROR(mx_repeat(small, MX_SHAPE(P40, P40)),
               "mx_repeat: shape [1,1] repeated [1099511627776,1099511627776] has too many elements");
  EXPECT_ERROR(mx_repeat(spread(MX_SHAPE(P62, 1), MX_F32), MX_SHAPE(4, 1)),
               "mx_repeat: shape [4611686018427387904,1] repeated [4,1] has too many elements");
  mx_tensor *r = mx_repeat(small, MX_SHAPE(0, P40));
  cr_assert_not_null(r, "%s", mx_last_error());
  cr_expect_eq(mx_numel(r), 0);
}

Test(overflow, pad_split_chunk) {
  mx_tensor *six = mx_ones(MX_SHAPE(6), MX_F32, MX_CPU);
  EXPECT_ERROR(mx_pad(six, MX_SHAPE(INT64_MAX, 1), MX_PAD_CONSTANT, 0),
               "mx_pad: padding (9223372036854775807, 1) takes dim 0 of size 6 past 2^63-1");
  EXPECT_ERROR(mx_pad(six, MX_SHAPE(INT64_MAX - 6, 1), MX_PAD_REPLICATE, 0),
               "mx_pad: padding (9223372036854775801, 1) takes dim 0 of size 6 past 2^63-1");
  /* split_size INT64_MAX: one piece, not a count that wrapped to none */
  mx_tensor *pieces[4];
  cr_expect_eq(mx_split(six, INT64_MAX, 0, pieces, 4), 1, "%s", mx_last_error());
  mx_tensor *huge = spread(MX_SHAPE(INT64_MAX), MX_F32);
  cr_expect_eq(mx_chunk(huge, 3, 0, pieces, 4), 3, "%s", mx_last_error());
  cr_expect_eq(mx_size(pieces[0], 0), INT64_MAX / 3 + 1);
  cr_expect_eq(mx_size(pieces[2], 0), INT64_MAX - 2 * (INT64_MAX / 3 + 1));
  mx_clear_error();
  cr_expect_eq(mx_split(huge, 1, 0, pieces, 4), -1);
  cr_expect_str_eq(mx_last_error(), "mx_split: 9223372036854775807 pieces do not fit in 4 slots");
}

Test(overflow, conv_output_sizes) {
  mx_tensor *img = mx_ones(MX_SHAPE(1, 1, 4, 4), MX_F32, MX_CPU), *w = mx_ones(MX_SHAPE(1, 1, 3, 3), MX_F32, MX_CPU);
  EXPECT_ERROR(mx_conv2d(img, w, NULL, MX_DEFAULT, MX_SHAPE(INT64_MAX / 2), MX_DEFAULT, 1),
               "mx_conv2d: the output size of spatial dim 0 passes 2^63-1 (input 4, kernel 3, stride 1, padding "
               "4611686018427387903, dilation 1)");
  EXPECT_ERROR(mx_conv2d(img, w, NULL, MX_DEFAULT, MX_SHAPE(INT64_MIN / 2 - 1), MX_DEFAULT, 1),
               "mx_conv2d: the output size of spatial dim 0 passes 2^63-1 (input 4, kernel 3, stride 1, padding "
               "-4611686018427387905, dilation 1)");
  EXPECT_ERROR(mx_conv2d(img, w, NULL, MX_DEFAULT, MX_SHAPE(INT64_MIN / 2), MX_DEFAULT, 1),
               "mx_conv2d: kernel 3 (dilation 1) does not fit input size 4 + padding -4611686018427387904 in spatial "
               "dim 0");
  EXPECT_ERROR(mx_conv2d(img, w, NULL, MX_DEFAULT, MX_DEFAULT, MX_SHAPE(INT64_MAX), 1),
               "mx_conv2d: the output size of spatial dim 0 passes 2^63-1 (input 4, kernel 3, stride 1, padding 0, "
               "dilation 9223372036854775807)");
  mx_tensor *w2 = mx_ones(MX_SHAPE(1, 2, 3, 3), MX_F32, MX_CPU);
  EXPECT_ERROR(mx_conv2d(img, w2, NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, P62),
               "mx_conv2d: weight [1,2,3,3] times 4611686018427387904 groups expects more than 2^63-1 input channels");
  EXPECT_ERROR(mx_conv_transpose2d(img, w, NULL, MX_SHAPE(INT64_MAX / 2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1),
               "mx_conv_transpose2d: the output size of spatial dim 0 passes 2^63-1 (input 4, kernel 3, stride "
               "4611686018427387903, padding 0, dilation 1)");
  EXPECT_ERROR(mx_conv_transpose2d(img, w, NULL, MX_DEFAULT, MX_SHAPE(INT64_MIN / 2), MX_DEFAULT, MX_DEFAULT, 1),
               "mx_conv_transpose2d: the output size of spatial dim 0 passes 2^63-1 (input 4, kernel 3, stride 1, "
               "padding -4611686018427387904, dilation 1)");
  EXPECT_ERROR(mx_conv_transpose2d(img, w, NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, MX_SHAPE(INT64_MAX / 2), 1),
               "mx_conv_transpose2d: the output size of spatial dim 0 passes 2^63-1 (input 4, kernel 3, stride 1, "
               "padding 0, dilation 4611686018427387903)");
  EXPECT_ERROR(mx_conv_transpose2d(img, w, NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, P62),
               "mx_conv_transpose2d: shape [1,4611686018427387904,6,6] has too many elements");
  EXPECT_ERROR(mx_conv_transpose2d(img, w2, NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, P62),
               "mx_conv_transpose2d: 2 output channels per group times 4611686018427387904 groups pass 2^63-1");
  /* the same convolutions with sane numbers still run */
  mx_tensor *y = mx_conv2d(img, w, NULL, MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 1);
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_expect_eq(mx_at(y, MX_SHAPE(0, 0, 1, 1)), 9);
}

Test(overflow, pool_output_sizes) {
  mx_tensor *img = mx_ones(MX_SHAPE(1, 1, 4, 4), MX_F32, MX_CPU);
  mx_shape k = MX_SHAPE(INT64_MAX), pad = MX_SHAPE(INT64_MAX / 2);
  EXPECT_ERROR(mx_avg_pool(img, 2, k, MX_DEFAULT, pad, true),
               "mx_avg_pool: kernel [9223372036854775807,9223372036854775807] over output [1,1,1,1] makes more than "
               "2^63-1 window reads");
  EXPECT_ERROR(mx_max_pool(img, 2, MX_SHAPE(P40), MX_DEFAULT, MX_SHAPE(P40 / 2)),
               "mx_max_pool: kernel [1099511627776,1099511627776] over output [1,1,1,1] makes more than 2^63-1 "
               "window reads");
  mx_tensor *values = NULL, *indices = NULL;
  /* dilation * (kernel - 1) = (2^62 - 1) * 3 overflows */
  EXPECT_STATUS_ERROR(mx_max_pool_with_indices(img, 2, MX_SHAPE(4), MX_DEFAULT, MX_DEFAULT, MX_SHAPE(INT64_MAX / 2),
                                               &values, &indices),
                      "mx_max_pool: input size 4 is smaller than the kernel 4 in spatial dim 0");
  EXPECT_STATUS_ERROR(mx_max_pool_with_indices(img, 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_SHAPE(-3), &values,
                                               &indices),
                      "mx_max_pool: dilation -3 in spatial dim 0 must be positive");
  /* a huge stride is fine: one window */
  mx_tensor *one = mx_max_pool(img, 2, MX_SHAPE(2), MX_SHAPE(INT64_MAX), MX_DEFAULT);
  cr_assert_not_null(one, "%s", mx_last_error());
  cr_expect_eq(mx_numel(one), 1);
}

/* The loader reads sizes from an untrusted header. */
static const char *header_file(const char *name, const char *shape) {
  char json[256];
  int n = snprintf(json, sizeof json, "{\"t\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[0,0]}}", shape);
  while (n % 8) json[n++] = ' ';
  const char *path = tmp_path(name);
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  uint64_t len = (uint64_t)n; /* little-endian on the machines mixgrad runs on */
  cr_assert_eq(fwrite(&len, 8, 1, f), 1);
  cr_assert_eq(fwrite(json, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  return path;
}

Test(overflow, safetensors_shapes) {
  make_tmp_dir();
  const char *big = header_file("big.safetensors", "[1099511627776,1099511627776]");
  EXPECT_ERROR(mx_safetensors_load(big),
               fmt("mx_safetensors_load: %s: tensor 't': shape has too many elements: [1099511627776,1099511627776]",
                   big));
  const char *empty = header_file("empty.safetensors", "[0,1099511627776,1099511627776]");
  EXPECT_ERROR(mx_safetensors_load(empty),
               fmt("mx_safetensors_load: %s: tensor 't': shape has too many elements: "
                   "[0,1099511627776,1099511627776]", empty));
  /* 2^59 float32 elements are 2^61 bytes: a size the header may name, and the data offsets must match */
  const char *bytes = header_file("bytes.safetensors", "[536870912,1073741824]");
  EXPECT_ERROR(mx_safetensors_load(bytes),
               fmt("mx_safetensors_load: %s: tensor 't': data_offsets [0, 0] hold 0 bytes but shape "
                   "[536870912,1073741824] float32 needs 2305843009213693952", bytes));
  remove_tmp_dir();
}
