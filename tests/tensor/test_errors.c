/* Errors: every user mistake returns NULL (or a status), sets the right
 * status code and a message naming the op and the values, and never aborts.
 * Messages are compared exactly; each test starts from a cleared error. */
#include <criterion/criterion.h>
#include <math.h>
#include <mixgrad.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define MX_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MX_TEST_ASAN 1
#endif
#endif

/* The last error is `status` with exactly the message `msg`. */
#define ASSERT_ERROR(status, msg)                                                           \
  do {                                                                                      \
    cr_assert_eq(mx_last_status(), (status), "status is '%s', expected '%s' (message: %s)", \
                 mx_status_str(mx_last_status()), mx_status_str(status), mx_last_error());  \
    cr_assert_str_eq(mx_last_error(), (msg));                                               \
  } while (0)

/* The call returned NULL and set exactly this error; the error is then
 * cleared so the next check in the same test starts fresh. */
#define ASSERT_NULL_ERROR(expr, status, msg)                \
  do {                                                      \
    mx_clear_error();                                       \
    mx_tensor *bad_ = (expr);                               \
    cr_assert_null(bad_, "%s returned a tensor", #expr);    \
    ASSERT_ERROR(status, msg);                              \
    mx_clear_error();                                       \
  } while (0)

/* The status-returning call failed with exactly this error. */
#define ASSERT_STATUS_ERROR(expr, status, msg)                                               \
  do {                                                                                       \
    mx_clear_error();                                                                        \
    mx_status st_ = (expr);                                                                  \
    cr_assert_eq(st_, (status), "%s returned '%s'", #expr, mx_status_str(st_));              \
    ASSERT_ERROR(status, msg);                                                               \
    mx_clear_error();                                                                        \
  } while (0)

static bool starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* --- shapes -------------------------------------------------------------------- */

Test(errors, copy_broadcast_mismatch) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *dst = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  mx_tensor *src4 = mx_ones(MX_SHAPE(4), MX_F32, MX_CPU);
  mx_tensor *src23 = mx_ones(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  mx_tensor *dst3 = mx_zeros(MX_SHAPE(3), MX_F32, MX_CPU);
  cr_assert(dst && src4 && src23 && dst3);
  uint64_t version = mx_version(dst);
  ASSERT_STATUS_ERROR(mx_copy_(dst, src4), MX_SHAPE_ERROR,
                      "mx_copy_: source shape [4] cannot be broadcast to [2,3]");
  cr_expect_eq(mx_version(dst), version, "a failed copy must not count as a write");
  cr_expect_eq(mx_at(dst, MX_SHAPE(1, 2)), 0.0, "a failed copy must not write");
  /* more source dims than destination dims */
  ASSERT_STATUS_ERROR(mx_copy_(dst3, src23), MX_SHAPE_ERROR,
                      "mx_copy_: source shape [2,3] cannot be broadcast to [3]");
  mx_scope_end(s);
}

Test(errors, expand_incompatible) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t3 = mx_ones(MX_SHAPE(3), MX_F32, MX_CPU);
  mx_tensor *t23 = mx_ones(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  cr_assert(t3 && t23);
  ASSERT_NULL_ERROR(mx_expand(t3, MX_SHAPE(2, 4)), MX_SHAPE_ERROR,
                    "mx_expand: shape [3] cannot be broadcast to [2,4] (dim 1: 3 vs 4)");
  ASSERT_NULL_ERROR(mx_expand(t23, MX_SHAPE(3)), MX_SHAPE_ERROR,
                    "mx_expand: cannot expand shape [2,3] to 1 dims");
  ASSERT_NULL_ERROR(mx_broadcast_to(t23, MX_SHAPE(3, 3)), MX_SHAPE_ERROR,
                    "mx_broadcast_to: shape [2,3] cannot be broadcast to [3,3] (dim 0: 2 vs 3)");
  mx_scope_end(s);
}

Test(errors, view_incompatible_strides) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_arange(0, 6, 1, MX_F32, MX_CPU);
  mx_tensor *t = mx_transpose(mx_reshape(a, MX_SHAPE(2, 3)), 0, 1); /* (3,2), strides (1,3) */
  cr_assert_not_null(t);
  ASSERT_NULL_ERROR(mx_view(t, MX_SHAPE(6)), MX_SHAPE_ERROR,
                    "mx_view: shape [6] cannot view a tensor of shape [3,2] and strides [1,3] "
                    "without a copy; use mx_reshape");
  /* the advice is right: reshape copies */
  mx_tensor *r = mx_reshape(t, MX_SHAPE(6));
  cr_assert_not_null(r);
  cr_expect_eq(mx_at(r, MX_SHAPE(1)), 3.0);
  cr_expect_eq(mx_last_status(), MX_OK);
  mx_scope_end(s);
}

Test(errors, reshape_wrong_size) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_arange(0, 6, 1, MX_F32, MX_CPU);
  cr_assert_not_null(a);
  ASSERT_NULL_ERROR(mx_reshape(a, MX_SHAPE(4, 5)), MX_SHAPE_ERROR,
                    "mx_reshape: shape [4,5] is invalid for input of size 6");
  ASSERT_NULL_ERROR(mx_view(a, MX_SHAPE(4)), MX_SHAPE_ERROR,
                    "mx_view: shape [4] is invalid for input of size 6");
  /* -1 that cannot be inferred: 6 is not a multiple of 4, and 0 * x is never 6 */
  ASSERT_NULL_ERROR(mx_reshape(a, MX_SHAPE(-1, 4)), MX_SHAPE_ERROR,
                    "mx_reshape: shape [-1,4] is invalid for input of size 6");
  ASSERT_NULL_ERROR(mx_reshape(a, MX_SHAPE(0, -1)), MX_SHAPE_ERROR,
                    "mx_reshape: shape [0,-1] is invalid for input of size 6");
  mx_scope_end(s);
}

Test(errors, two_inferred_dims) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  cr_assert_not_null(a);
  ASSERT_NULL_ERROR(mx_reshape(a, MX_SHAPE(-1, -1)), MX_SHAPE_ERROR,
                    "mx_reshape: only one dimension can be inferred (-1)");
  ASSERT_NULL_ERROR(mx_view(a, MX_SHAPE(3, -1, -1)), MX_SHAPE_ERROR,
                    "mx_view: only one dimension can be inferred (-1)");
  mx_scope_end(s);
}

Test(errors, negative_size) {
  mx_clear_error();
  ASSERT_NULL_ERROR(mx_zeros(MX_SHAPE(2, -3), MX_F32, MX_CPU), MX_SHAPE_ERROR,
                    "mx_zeros: negative size -3 in dim 1 of shape [2,-3]");
  ASSERT_NULL_ERROR(mx_empty(MX_SHAPE(-1), MX_F64, MX_CPU), MX_SHAPE_ERROR,
                    "mx_empty: negative size -1 in dim 0 of shape [-1]");
  ASSERT_NULL_ERROR(mx_eye(-1, 2, MX_F32, MX_CPU), MX_SHAPE_ERROR,
                    "mx_eye: negative size -1 in dim 0 of shape [-1,2]");
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_zeros(MX_SHAPE(6), MX_F32, MX_CPU);
  cr_assert_not_null(a);
  ASSERT_NULL_ERROR(mx_reshape(a, MX_SHAPE(-2, 3)), MX_SHAPE_ERROR,
                    "mx_reshape: invalid size -2 in dim 0 of shape [-2,3]");
  mx_scope_end(s);
  cr_expect_eq(mx_memory_stats_get(MX_CPU).live_tensors, 0, "a failed creation leaks no handle");
}

Test(errors, too_many_dims) {
  mx_clear_error();
  const int64_t dims[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  ASSERT_NULL_ERROR(mx_zeros(mx_shape_of(9, dims), MX_F32, MX_CPU), MX_SHAPE_ERROR,
                    "mx_zeros: 9 dims given, a tensor has 0 to 8");
  ASSERT_NULL_ERROR(mx_empty(mx_shape_of(-1, dims), MX_F32, MX_CPU), MX_SHAPE_ERROR,
                    "mx_empty: -1 dims given, a tensor has 0 to 8");
  mx_scope *s = mx_scope_begin();
  mx_tensor *one = mx_ones(MX_SHAPE(1), MX_F32, MX_CPU);
  cr_assert_not_null(one);
  ASSERT_NULL_ERROR(mx_reshape(one, mx_shape_of(9, dims)), MX_SHAPE_ERROR,
                    "mx_reshape: 9 dims given, a tensor has 0 to 8");
  /* an 8-d tensor cannot grow a ninth dim */
  mx_tensor *eight = mx_reshape(one, mx_shape_of(8, dims));
  cr_assert_not_null(eight);
  ASSERT_NULL_ERROR(mx_unsqueeze(eight, 0), MX_SHAPE_ERROR, "mx_unsqueeze: a tensor has at most 8 dims");
  mx_scope_end(s);
}

Test(errors, shape_too_many_elements) {
  mx_clear_error();
  const int64_t big = (int64_t)1 << 40;
  ASSERT_NULL_ERROR(mx_empty(MX_SHAPE(big, big), MX_F32, MX_CPU), MX_SHAPE_ERROR,
                    "mx_empty: shape [1099511627776,1099511627776] has too many elements");
}

/* --- dims ------------------------------------------------------------------------ */

Test(errors, transpose_bad_dim) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  cr_assert_not_null(t);
  ASSERT_NULL_ERROR(mx_transpose(t, 0, 2), MX_INDEX_ERROR,
                    "mx_transpose: dim 2 out of range for a 2-d tensor (expected -2 to 1)");
  ASSERT_NULL_ERROR(mx_transpose(t, -3, 0), MX_INDEX_ERROR,
                    "mx_transpose: dim -3 out of range for a 2-d tensor (expected -2 to 1)");
  mx_scope_end(s);
}

Test(errors, squeeze_bad_dim) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(2, 1), MX_F32, MX_CPU);
  cr_assert_not_null(t);
  ASSERT_NULL_ERROR(mx_squeeze(t, 2), MX_INDEX_ERROR,
                    "mx_squeeze: dim 2 out of range for a 2-d tensor (expected -2 to 1)");
  ASSERT_NULL_ERROR(mx_squeeze(t, -3), MX_INDEX_ERROR,
                    "mx_squeeze: dim -3 out of range for a 2-d tensor (expected -2 to 1)");
  mx_scope_end(s);
}

Test(errors, unsqueeze_bad_dim) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  cr_assert_not_null(t);
  /* unsqueeze of a 2-d tensor accepts -3..2; the message must describe the
   * tensor given (2-d), not the result */
  ASSERT_NULL_ERROR(mx_unsqueeze(t, 3), MX_INDEX_ERROR,
                    "mx_unsqueeze: dim 3 out of range for a 2-d tensor (expected -3 to 2)");
  ASSERT_NULL_ERROR(mx_unsqueeze(t, -4), MX_INDEX_ERROR,
                    "mx_unsqueeze: dim -4 out of range for a 2-d tensor (expected -3 to 2)");
  mx_scope_end(s);
}

Test(errors, select_bad_dim_and_index) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  mx_tensor *z = mx_scalar(1, MX_F32, MX_CPU);
  cr_assert(t && z);
  ASSERT_NULL_ERROR(mx_select(t, 2, 0), MX_INDEX_ERROR,
                    "mx_select: dim 2 out of range for a 2-d tensor (expected -2 to 1)");
  ASSERT_NULL_ERROR(mx_select(t, -3, 0), MX_INDEX_ERROR,
                    "mx_select: dim -3 out of range for a 2-d tensor (expected -2 to 1)");
  ASSERT_NULL_ERROR(mx_select(t, 1, 3), MX_INDEX_ERROR,
                    "mx_select: index 3 out of range for dim 1 of size 3");
  ASSERT_NULL_ERROR(mx_select(t, 0, -3), MX_INDEX_ERROR,
                    "mx_select: index -3 out of range for dim 0 of size 2");
  ASSERT_NULL_ERROR(mx_select(z, 0, 0), MX_INDEX_ERROR, "mx_select: cannot select from a 0-d tensor");
  mx_scope_end(s);
}

Test(errors, narrow_bad_dim_and_range) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  cr_assert_not_null(t);
  ASSERT_NULL_ERROR(mx_narrow(t, 2, 0, 1), MX_INDEX_ERROR,
                    "mx_narrow: dim 2 out of range for a 2-d tensor (expected -2 to 1)");
  ASSERT_NULL_ERROR(mx_narrow(t, -3, 0, 1), MX_INDEX_ERROR,
                    "mx_narrow: dim -3 out of range for a 2-d tensor (expected -2 to 1)");
  ASSERT_NULL_ERROR(mx_narrow(t, 1, 2, 2), MX_INDEX_ERROR,
                    "mx_narrow: start 2 and length 2 out of range for dim 1 of size 3");
  ASSERT_NULL_ERROR(mx_narrow(t, 1, 4, 0), MX_INDEX_ERROR,
                    "mx_narrow: start 4 and length 0 out of range for dim 1 of size 3");
  ASSERT_NULL_ERROR(mx_narrow(t, 0, 0, -1), MX_INDEX_ERROR,
                    "mx_narrow: start 0 and length -1 out of range for dim 0 of size 2");
  mx_scope_end(s);
}

/* The message should quote the start the caller gave (-5), not -5 + size. */
Test(errors, narrow_negative_start_message) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  cr_assert_not_null(t);
  ASSERT_NULL_ERROR(mx_narrow(t, 1, -5, 1), MX_INDEX_ERROR,
                    "mx_narrow: start -5 and length 1 out of range for dim 1 of size 3");
  mx_scope_end(s);
}

/* start + length must not overflow into a passing check. */
Test(errors, narrow_huge_length) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  cr_assert_not_null(t);
  ASSERT_NULL_ERROR(mx_narrow(t, 1, 1, INT64_MAX), MX_INDEX_ERROR,
                    "mx_narrow: start 1 and length 9223372036854775807 out of range for dim 1 of size 3");
  mx_scope_end(s);
}

Test(errors, flatten_bad_dim) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  cr_assert_not_null(t);
  ASSERT_NULL_ERROR(mx_flatten(t, 0, 2), MX_INDEX_ERROR,
                    "mx_flatten: dim 2 out of range for a 2-d tensor (expected -2 to 1)");
  ASSERT_NULL_ERROR(mx_flatten(t, -3, 1), MX_INDEX_ERROR,
                    "mx_flatten: dim -3 out of range for a 2-d tensor (expected -2 to 1)");
  ASSERT_NULL_ERROR(mx_flatten(t, 1, 0), MX_INVALID_ARGUMENT, "mx_flatten: start_dim 1 comes after end_dim 0");
  mx_scope_end(s);
}

Test(errors, size_bad_dim) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  cr_assert_not_null(t);
  cr_assert_eq(mx_size(t, 2), -1);
  ASSERT_ERROR(MX_INDEX_ERROR, "mx_size: dim 2 out of range for a 2-d tensor (expected -2 to 1)");
  mx_clear_error();
  cr_assert_eq(mx_size(t, -3), -1);
  ASSERT_ERROR(MX_INDEX_ERROR, "mx_size: dim -3 out of range for a 2-d tensor (expected -2 to 1)");
  mx_scope_end(s);
}

Test(errors, slice_bad_arguments) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  mx_tensor *z = mx_scalar(1, MX_F32, MX_CPU);
  cr_assert(t && z);
  ASSERT_NULL_ERROR(mx_slice(t, 1, 0, 3, 0), MX_INVALID_ARGUMENT, "mx_slice: step must be positive, got 0");
  ASSERT_NULL_ERROR(mx_slice(t, 1, 0, 3, -1), MX_INVALID_ARGUMENT, "mx_slice: step must be positive, got -1");
  ASSERT_NULL_ERROR(mx_slice(t, 2, 0, 1, 1), MX_INDEX_ERROR,
                    "mx_slice: dim 2 out of range for a 2-d tensor (expected -2 to 1)");
  ASSERT_NULL_ERROR(mx_slice(t, -3, 0, 1, 1), MX_INDEX_ERROR,
                    "mx_slice: dim -3 out of range for a 2-d tensor (expected -2 to 1)");
  ASSERT_NULL_ERROR(mx_slice(z, 0, 0, 1, 1), MX_INDEX_ERROR, "mx_slice: cannot slice a 0-d tensor");
  /* out-of-range bounds clamp like Python's and give an empty slice, no error */
  mx_tensor *empty = mx_slice(t, 1, 5, 10, 1);
  cr_assert_not_null(empty, "%s", mx_last_error());
  cr_expect_eq(mx_size(empty, 1), 0);
  cr_expect_eq(mx_last_status(), MX_OK);
  mx_scope_end(s);
}

/* A huge step takes only the first element (Python: x[0:3:2**63-1] has 1);
 * the size computation must not overflow. */
Test(errors, slice_huge_step) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_arange(0, 6, 1, MX_F32, MX_CPU);
  cr_assert_not_null(t);
  mx_tensor *v = mx_slice(t, 0, 0, 6, INT64_MAX);
  cr_assert_not_null(v, "%s", mx_last_error());
  cr_expect_eq(mx_ndim(v), 1);
  cr_expect_eq(mx_size(v, 0), 1, "size %lld", (long long)mx_size(v, 0));
  mx_scope_end(s);
}

Test(errors, permute_not_a_permutation) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  cr_assert_not_null(t);
  ASSERT_NULL_ERROR(mx_permute(t, MX_SHAPE(0, 0)), MX_INVALID_ARGUMENT,
                    "mx_permute: dims [0,0] are not a permutation of 0..1");
  ASSERT_NULL_ERROR(mx_permute(t, MX_SHAPE(1, -1)), MX_INVALID_ARGUMENT,
                    "mx_permute: dims [1,-1] are not a permutation of 0..1");
  ASSERT_NULL_ERROR(mx_permute(t, MX_SHAPE(0, 2)), MX_INVALID_ARGUMENT,
                    "mx_permute: dims [0,2] are not a permutation of 0..1");
  ASSERT_NULL_ERROR(mx_permute(t, MX_SHAPE(0)), MX_SHAPE_ERROR, "mx_permute: 1 dims given for a 2-d tensor");
  mx_scope_end(s);
}

/* --- dtypes and devices ------------------------------------------------------------ */

Test(errors, invalid_dtype) {
  mx_clear_error();
  ASSERT_NULL_ERROR(mx_zeros(MX_SHAPE(2), (mx_dtype)42, MX_CPU), MX_DTYPE_ERROR, "mx_zeros: invalid dtype 42");
  ASSERT_NULL_ERROR(mx_arange(0, 3, 1, MX_DTYPE_COUNT, MX_CPU), MX_DTYPE_ERROR, "mx_arange: invalid dtype 8");
  ASSERT_NULL_ERROR(mx_randint(0, 3, MX_SHAPE(2), (mx_dtype)42, MX_CPU, NULL), MX_DTYPE_ERROR,
                    "mx_randint: invalid dtype 42");
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(2), MX_F32, MX_CPU);
  cr_assert_not_null(t);
  ASSERT_NULL_ERROR(mx_to_dtype(t, MX_DTYPE_COUNT), MX_DTYPE_ERROR, "mx_to_dtype: invalid dtype 8");
  mx_scope_end(s);
}

Test(errors, unsupported_dtype) {
  mx_clear_error();
  ASSERT_NULL_ERROR(mx_rand(MX_SHAPE(2), MX_I32, MX_CPU, NULL), MX_DTYPE_ERROR,
                    "mx_rand: dtype int32 is not a floating type");
  ASSERT_NULL_ERROR(mx_randn(MX_SHAPE(2), MX_BOOL, MX_CPU, NULL), MX_DTYPE_ERROR,
                    "mx_randn: dtype bool is not a floating type");
  ASSERT_NULL_ERROR(mx_randint(0, 2, MX_SHAPE(2), MX_BOOL, MX_CPU, NULL), MX_DTYPE_ERROR,
                    "mx_randint: dtype bool is not numeric");
}

Test(errors, invalid_device) {
  mx_clear_error();
  ASSERT_NULL_ERROR(mx_zeros(MX_SHAPE(2), MX_F32, (mx_device)5), MX_DEVICE_ERROR,
                    "mx_zeros: invalid device 5 (expected MX_CPU or MX_CUDA)");
  ASSERT_NULL_ERROR(mx_arange(0, 3, 1, MX_F32, MX_DEVICE_COUNT), MX_DEVICE_ERROR,
                    "mx_arange: invalid device 2 (expected MX_CPU or MX_CUDA)");
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_zeros(MX_SHAPE(2), MX_F32, MX_CPU);
  cr_assert_not_null(t);
  ASSERT_NULL_ERROR(mx_to_device(t, (mx_device)7), MX_DEVICE_ERROR,
                    "mx_to_device: invalid device 7 (expected MX_CPU or MX_CUDA)");
  mx_scope_end(s);
  cr_expect_eq(mx_memory_stats_get(MX_CPU).live_tensors, 0);
  cr_expect_eq(mx_memory_stats_get(MX_CPU).bytes_in_use, 0);
}

Test(errors, cuda_unavailable) {
  mx_clear_error();
  if (mx_cuda_built() && mx_cuda_device_count() > 0) cr_skip_test("a CUDA device is present");
  mx_tensor *t = mx_zeros(MX_SHAPE(2), MX_F32, MX_CUDA);
  cr_assert_null(t);
  if (!mx_cuda_built()) {
    ASSERT_ERROR(MX_NOT_BUILT, "mx_zeros: mixgrad was built without CUDA: cannot use device 'cuda' "
                               "(rebuild with -Dcuda=enabled)");
  } else {
    cr_assert_eq(mx_last_status(), MX_NO_CUDA_DEVICE, "status '%s': %s", mx_status_str(mx_last_status()),
                 mx_last_error());
    cr_assert(starts_with(mx_last_error(), "mx_zeros: "), "%s", mx_last_error());
    cr_assert_not_null(strstr(mx_last_error(), "no CUDA device"), "%s", mx_last_error());
  }
  /* moving a CPU tensor there fails the same way, naming mx_to_device */
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *c = mx_ones(MX_SHAPE(2), MX_F32, MX_CPU);
  cr_assert_not_null(c);
  cr_assert_null(mx_to_device(c, MX_CUDA));
  if (!mx_cuda_built()) {
    ASSERT_ERROR(MX_NOT_BUILT, "mx_to_device: mixgrad was built without CUDA: cannot use device 'cuda' "
                               "(rebuild with -Dcuda=enabled)");
  } else {
    cr_assert_eq(mx_last_status(), MX_NO_CUDA_DEVICE);
    cr_assert(starts_with(mx_last_error(), "mx_to_device: "), "%s", mx_last_error());
    cr_assert_not_null(strstr(mx_last_error(), "no CUDA device"), "%s", mx_last_error());
  }
  mx_scope_end(s);
}

/* An allocation the machine cannot satisfy is an error, not an abort. The
 * message names the op (DESIGN 6). ASan aborts on such a request by default
 * (allocator_may_return_null=0), so the test is skipped under it. */
Test(errors, out_of_memory) {
  mx_clear_error();
#ifdef MX_TEST_ASAN
  cr_skip_test("ASan aborts on impossible allocations");
#else
  /* 2^57 bytes: more than any address space */
  mx_tensor *t = mx_empty(MX_SHAPE((int64_t)1 << 54), MX_F64, MX_CPU);
  cr_assert_null(t);
  cr_assert_eq(mx_last_status(), MX_OUT_OF_MEMORY, "status '%s': %s", mx_status_str(mx_last_status()),
               mx_last_error());
  cr_assert(starts_with(mx_last_error(), "mx_empty: "), "the message should name the op: %s", mx_last_error());
  cr_assert_not_null(strstr(mx_last_error(), "out of memory allocating 144115188075855872 bytes"), "%s",
                     mx_last_error());
  cr_expect_eq(mx_memory_stats_get(MX_CPU).live_storages, 0);
#endif
}

/* --- creation arguments -------------------------------------------------------------- */

Test(errors, arange_bad_step) {
  mx_clear_error();
  ASSERT_NULL_ERROR(mx_arange(0, 5, 0, MX_F32, MX_CPU), MX_INVALID_ARGUMENT,
                    "mx_arange: start 0, end 5 and step 0 must be finite and step nonzero");
  ASSERT_NULL_ERROR(mx_arange(0, 5, -1, MX_F32, MX_CPU), MX_INVALID_ARGUMENT,
                    "mx_arange: step -1 goes the wrong way from start 0 to end 5");
  ASSERT_NULL_ERROR(mx_arange(5, 0, 0.5, MX_F32, MX_CPU), MX_INVALID_ARGUMENT,
                    "mx_arange: step 0.5 goes the wrong way from start 5 to end 0");
  ASSERT_NULL_ERROR(mx_arange(0, INFINITY, 1, MX_F32, MX_CPU), MX_INVALID_ARGUMENT,
                    "mx_arange: start 0, end inf and step 1 must be finite and step nonzero");
  ASSERT_NULL_ERROR(mx_arange(0, 1e13, 1, MX_F32, MX_CPU), MX_SHAPE_ERROR,
                    "mx_arange: 1e+13 elements is too many");
}

Test(errors, linspace_negative_steps) {
  mx_clear_error();
  ASSERT_NULL_ERROR(mx_linspace(0, 1, -1, MX_F32, MX_CPU), MX_INVALID_ARGUMENT,
                    "mx_linspace: number of steps must be non-negative, got -1");
  ASSERT_NULL_ERROR(mx_linspace(0, 1, INT64_MIN, MX_F32, MX_CPU), MX_INVALID_ARGUMENT,
                    "mx_linspace: number of steps must be non-negative, got -9223372036854775808");
}

/* 2^61 steps: 8 * 2^61 bytes of doubles wraps to 0 in size_t. It must fail
 * cleanly (too many elements / out of memory), not write past a tiny buffer. */
Test(errors, linspace_huge_steps) {
  mx_clear_error();
  mx_tensor *t = mx_linspace(0, 1, (int64_t)1 << 61, MX_F32, MX_CPU);
  cr_assert_null(t);
  cr_assert_neq(mx_last_status(), MX_OK);
  cr_assert(starts_with(mx_last_error(), "mx_linspace: "), "%s", mx_last_error());
}

Test(errors, randint_empty_range) {
  mx_clear_error();
  ASSERT_NULL_ERROR(mx_randint(5, 5, MX_SHAPE(3), MX_I64, MX_CPU, NULL), MX_INVALID_ARGUMENT,
                    "mx_randint: low 5 must be below high 5");
  ASSERT_NULL_ERROR(mx_randint(5, -2, MX_SHAPE(3), MX_I32, MX_CPU, NULL), MX_INVALID_ARGUMENT,
                    "mx_randint: low 5 must be below high -2");
}

Test(errors, bernoulli_p_out_of_range) {
  mx_clear_error();
  ASSERT_NULL_ERROR(mx_bernoulli_p(MX_SHAPE(3), 1.5, MX_F32, MX_CPU, NULL), MX_INVALID_ARGUMENT,
                    "mx_bernoulli_p: probability 1.5 is not in [0, 1]");
  ASSERT_NULL_ERROR(mx_bernoulli_p(MX_SHAPE(3), -0.25, MX_F32, MX_CPU, NULL), MX_INVALID_ARGUMENT,
                    "mx_bernoulli_p: probability -0.25 is not in [0, 1]");
  ASSERT_NULL_ERROR(mx_bernoulli_p(MX_SHAPE(3), NAN, MX_F32, MX_CPU, NULL), MX_INVALID_ARGUMENT,
                    "mx_bernoulli_p: probability nan is not in [0, 1]");
}

/* --- element access -------------------------------------------------------------- */

Test(errors, at_wrong_index) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_arange(0, 6, 1, MX_F32, MX_CPU);
  mx_tensor *m = mx_reshape(t, MX_SHAPE(2, 3));
  cr_assert_not_null(m);
  cr_assert(isnan(mx_at(m, MX_SHAPE(1))));
  ASSERT_ERROR(MX_INDEX_ERROR, "mx_at: index [1] has 1 dims but the tensor has 2 (shape [2,3])");
  mx_clear_error();
  cr_assert(isnan(mx_at(m, MX_SHAPE(1, 3))));
  ASSERT_ERROR(MX_INDEX_ERROR, "mx_at: index 3 out of range for dim 1 of size 3 (shape [2,3])");
  mx_clear_error();
  cr_assert(isnan(mx_at(m, MX_SHAPE(-3, 0))));
  ASSERT_ERROR(MX_INDEX_ERROR, "mx_at: index -3 out of range for dim 0 of size 2 (shape [2,3])");
  mx_clear_error();
  /* negative indices in range are fine */
  cr_expect_eq(mx_at(m, MX_SHAPE(-1, -1)), 5.0);
  cr_expect_eq(mx_last_status(), MX_OK);
  ASSERT_STATUS_ERROR(mx_set(m, MX_SHAPE(2, 0), 1.0), MX_INDEX_ERROR,
                      "mx_set: index 2 out of range for dim 0 of size 2 (shape [2,3])");
  mx_scope_end(s);
}

Test(errors, item_not_single) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_ones(MX_SHAPE(3), MX_F32, MX_CPU);
  mx_tensor *e = mx_ones(MX_SHAPE(0, 2), MX_F32, MX_CPU);
  cr_assert(t && e);
  cr_assert(isnan(mx_item(t)));
  ASSERT_ERROR(MX_SHAPE_ERROR, "mx_item: a tensor with 3 elements (shape [3]) has no single value");
  mx_clear_error();
  cr_assert(isnan(mx_item(e)));
  ASSERT_ERROR(MX_SHAPE_ERROR, "mx_item: a tensor with 0 elements (shape [0,2]) has no single value");
  mx_scope_end(s);
}

Test(errors, to_host_wrong_size) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_ones(MX_SHAPE(3), MX_F32, MX_CPU);
  cr_assert_not_null(t);
  float buf[4] = {-1, -1, -1, -1};
  ASSERT_STATUS_ERROR(mx_to_host(t, buf, 2 * sizeof(float)), MX_INVALID_ARGUMENT,
                      "mx_to_host: buffer of 8 bytes given, 3 float32 elements need 12");
  ASSERT_STATUS_ERROR(mx_to_host(t, buf, sizeof buf), MX_INVALID_ARGUMENT,
                      "mx_to_host: buffer of 16 bytes given, 3 float32 elements need 12");
  cr_expect_eq(buf[0], -1.0f, "a failed copy must not write");
  mx_scope_end(s);
}

/* --- NULL inputs ------------------------------------------------------------------- */

Test(errors, null_inputs) {
  mx_clear_error();
  ASSERT_NULL_ERROR(mx_reshape(NULL, MX_SHAPE(2)), MX_NULL_INPUT, "mx_reshape: argument 't' is NULL");
  ASSERT_NULL_ERROR(mx_transpose(NULL, 0, 1), MX_NULL_INPUT, "mx_transpose: argument 't' is NULL");
  ASSERT_NULL_ERROR(mx_clone(NULL), MX_NULL_INPUT, "mx_clone: argument 't' is NULL");
  ASSERT_NULL_ERROR(mx_bernoulli(NULL, NULL), MX_NULL_INPUT, "mx_bernoulli: argument 'p' is NULL");
  ASSERT_NULL_ERROR(mx_from_data(NULL, MX_SHAPE(2), MX_F32, MX_CPU), MX_NULL_INPUT,
                    "mx_from_data: argument 'data' is NULL");
  ASSERT_STATUS_ERROR(mx_fill_(NULL, 1.0), MX_NULL_INPUT, "mx_fill_: argument 't' is NULL");

  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_ones(MX_SHAPE(2), MX_F32, MX_CPU);
  cr_assert_not_null(t);
  ASSERT_STATUS_ERROR(mx_copy_(NULL, t), MX_NULL_INPUT, "mx_copy_: argument 'dst' is NULL");
  ASSERT_STATUS_ERROR(mx_copy_(t, NULL), MX_NULL_INPUT, "mx_copy_: argument 'src' is NULL");
  ASSERT_STATUS_ERROR(mx_to_host(t, NULL, 8), MX_NULL_INPUT, "mx_to_host: argument 'dst' is NULL");
  mx_clear_error();
  cr_assert(isnan(mx_item(NULL)));
  ASSERT_ERROR(MX_NULL_INPUT, "mx_item: argument 't' is NULL");
  mx_clear_error();
  cr_assert_eq(mx_size(NULL, 0), -1);
  ASSERT_ERROR(MX_NULL_INPUT, "mx_size: argument 't' is NULL");
  mx_scope_end(s);
}

/* The *_like functions name themselves, not their C signature. */
Test(errors, null_input_like_functions) {
  mx_clear_error();
  ASSERT_NULL_ERROR(mx_empty_like(NULL), MX_NULL_INPUT, "mx_empty_like: argument 't' is NULL");
  ASSERT_NULL_ERROR(mx_zeros_like(NULL), MX_NULL_INPUT, "mx_zeros_like: argument 't' is NULL");
  ASSERT_NULL_ERROR(mx_ones_like(NULL), MX_NULL_INPUT, "mx_ones_like: argument 't' is NULL");
  ASSERT_NULL_ERROR(mx_full_like(NULL, 2.0), MX_NULL_INPUT, "mx_full_like: argument 't' is NULL");
}

Test(errors, null_propagation_keeps_first_message) {
  mx_clear_error();
  mx_tensor *r = mx_transpose(mx_unsqueeze(mx_reshape(NULL, MX_SHAPE(2, 3)), 0), 0, 1);
  cr_assert_null(r);
  ASSERT_ERROR(MX_NULL_INPUT, "mx_reshape: argument 't' is NULL");
  mx_status st = mx_copy_(mx_clone(NULL), NULL);
  cr_assert_eq(st, MX_NULL_INPUT);
  ASSERT_ERROR(MX_NULL_INPUT, "mx_reshape: argument 't' is NULL");
}

/* A real failure in the middle of a chain is the one reported at the end. */
Test(errors, chain_reports_first_failure) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_arange(0, 6, 1, MX_F32, MX_CPU);
  cr_assert_not_null(a);
  mx_tensor *r = mx_flatten(mx_transpose(mx_reshape(a, MX_SHAPE(4, 5)), 0, 1), 0, -1);
  cr_assert_null(r);
  ASSERT_ERROR(MX_SHAPE_ERROR, "mx_reshape: shape [4,5] is invalid for input of size 6");
  cr_assert(isnan(mx_item(mx_clone(NULL))));
  ASSERT_ERROR(MX_SHAPE_ERROR, "mx_reshape: shape [4,5] is invalid for input of size 6");
  mx_scope_end(s);
}

/* --- the error state ------------------------------------------------------------- */

Test(errors, clear_error) {
  mx_clear_error();
  cr_assert_str_eq(mx_last_error(), "");
  cr_assert_eq(mx_last_status(), MX_OK);
  cr_assert_null(mx_reshape(NULL, MX_SHAPE(1)));
  cr_assert_eq(mx_last_status(), MX_NULL_INPUT);
  mx_clear_error();
  cr_assert_str_eq(mx_last_error(), "");
  cr_assert_eq(mx_last_status(), MX_OK);
  /* after a clear, a NULL input reports its own op again */
  cr_assert_null(mx_clone(NULL));
  ASSERT_ERROR(MX_NULL_INPUT, "mx_clone: argument 't' is NULL");
  /* success does not clear a pending error */
  mx_tensor *t = mx_ones(MX_SHAPE(1), MX_F32, MX_CPU);
  cr_assert_not_null(t);
  ASSERT_ERROR(MX_NULL_INPUT, "mx_clone: argument 't' is NULL");
  mx_release(t);
  mx_clear_error();
  cr_assert_str_eq(mx_last_error(), "");
  cr_assert_eq(mx_last_status(), MX_OK);
  cr_assert_str_eq(mx_status_str(MX_OK), "success");
  cr_assert_str_eq(mx_status_str(MX_NULL_INPUT), "NULL input");
  cr_assert_str_eq(mx_status_str(MX_STATUS_COUNT), "unknown status");
}

typedef struct {
  mx_status status_at_start;
  char message_at_start[64];
  mx_status status_after;
  char message_after[256];
  mx_scope *scope;      /* a scope opened on the main thread */
} thread_report;

static void *set_error_in_thread(void *arg) {
  thread_report *r = arg;
  r->status_at_start = mx_last_status();
  snprintf(r->message_at_start, sizeof r->message_at_start, "%s", mx_last_error());
  mx_tensor *t = mx_transpose(NULL, 0, 1);
  (void)t;
  r->status_after = mx_last_status();
  snprintf(r->message_after, sizeof r->message_after, "%s", mx_last_error());
  return NULL;
}

Test(errors, error_is_thread_local) {
  mx_clear_error();
  cr_assert_null(mx_reshape(NULL, MX_SHAPE(1)));
  ASSERT_ERROR(MX_NULL_INPUT, "mx_reshape: argument 't' is NULL");
  thread_report r = {0};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, set_error_in_thread, &r), 0);
  cr_assert_eq(pthread_join(th, NULL), 0);
  /* the other thread started clean, although this one had an error ... */
  cr_expect_eq(r.status_at_start, MX_OK);
  cr_expect_str_eq(r.message_at_start, "");
  /* ... and its own NULL input was reported there, not masked by ours */
  cr_expect_eq(r.status_after, MX_NULL_INPUT);
  cr_expect_str_eq(r.message_after, "mx_transpose: argument 't' is NULL");
  /* and its error did not reach this thread */
  ASSERT_ERROR(MX_NULL_INPUT, "mx_reshape: argument 't' is NULL");
  mx_clear_error();
  cr_assert_null(mx_clone(NULL));
  ASSERT_ERROR(MX_NULL_INPUT, "mx_clone: argument 't' is NULL");
}

static void *end_foreign_scope(void *arg) {
  thread_report *r = arg;
  mx_clear_error();
  mx_scope *own = mx_scope_begin(); /* an open scope here does not help */
  mx_scope_end(r->scope);
  r->status_after = mx_last_status();
  snprintf(r->message_after, sizeof r->message_after, "%s", mx_last_error());
  mx_scope_end(own);
  return NULL;
}

Test(errors, scope_end_on_wrong_thread) {
  mx_clear_error();
  mx_memory_stats base = mx_memory_stats_get(MX_CPU);
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_full(MX_SHAPE(4), 7.0, MX_F32, MX_CPU);
  cr_assert_not_null(t);
  thread_report r = {.scope = s};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, end_foreign_scope, &r), 0);
  cr_assert_eq(pthread_join(th, NULL), 0);
  cr_expect_eq(r.status_after, MX_STATE_ERROR, "status '%s'", mx_status_str(r.status_after));
  cr_expect_str_eq(r.message_after, "mx_scope_end: the scope is not open on this thread");
  /* the error stayed in that thread, and the scope is still open and intact here */
  cr_expect_eq(mx_last_status(), MX_OK);
  cr_expect_eq(mx_at(t, MX_SHAPE(3)), 7.0);
  cr_expect_eq(mx_memory_stats_get(MX_CPU).live_tensors, base.live_tensors + 1);
  mx_tensor *u = mx_ones(MX_SHAPE(2), MX_F32, MX_CPU); /* still adopted by s */
  cr_assert_not_null(u);
  mx_scope_end(s);
  cr_expect_eq(mx_memory_stats_get(MX_CPU).live_tensors, base.live_tensors);
  cr_expect_eq(mx_memory_stats_get(MX_CPU).bytes_in_use, base.bytes_in_use);
  cr_expect_eq(mx_last_status(), MX_OK);
}

Test(errors, scope_end_null_is_ignored) {
  mx_clear_error();
  mx_scope_end(NULL);
  cr_expect_eq(mx_last_status(), MX_OK);
  cr_expect_str_eq(mx_last_error(), "");
  mx_release(NULL);
  cr_expect_eq(mx_last_status(), MX_OK);
  cr_expect_null(mx_keep(NULL));
  cr_expect_eq(mx_last_status(), MX_OK);
}
