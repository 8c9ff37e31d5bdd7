/* Bad inputs to the softmax, indexing and joining, pooling, normalisation and
 * convolution ops: each call fails (NULL, -1 or a status) with the status and
 * the exact message the library writes (ops/, kernels/cpu/). Errors
 * raised inside a composite name the op the user called (mx_embedding, not
 * mx_index_select). */
#include <criterion/criterion.h>
#include <string.h>

#include <mixgrad.h>

#include "op_checks.h"

#define IDX(shape, ...) mx_from_data((const int64_t[]){__VA_ARGS__}, shape, MX_I64, MX_CPU)
#define LIST(...) ((mx_tensor *[]){__VA_ARGS__})

static mx_tensor *zeros(mx_shape shape) { return mx_zeros(shape, MX_F64, MX_CPU); }

/* --- gather and scatter ---------------------------------------------------------------------- */

Test(nn_errors, gather) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = zeros(MX_SHAPE(3, 5));
  EXPECT_NULL(mx_gather(x, 1, IDX(MX_SHAPE(3, 2), 0, 1, 7, 2, 4, 0)), MX_INDEX_ERROR,
              "mx_gather: index 7 out of range for dim 1 of size 5");
  /* FAILS: -1 is also the kernels' "no bad index" mark (gather, index_select), so an index of -1
   * passes, leaving that output element uninitialised */
  EXPECT_NULL(mx_gather(x, 1, IDX(MX_SHAPE(1, 1), -1)), MX_INDEX_ERROR,
              "mx_gather: index -1 out of range for dim 1 of size 5");
  EXPECT_NULL(mx_gather(x, 0, IDX(MX_SHAPE(1, 2), 0, 3)), MX_INDEX_ERROR,
              "mx_gather: index 3 out of range for dim 0 of size 3");
  EXPECT_NULL(mx_gather(x, 1, mx_zeros(MX_SHAPE(3, 2), MX_I32, MX_CPU)), MX_DTYPE_ERROR,
              "mx_gather: indices must be int64, got int32");
  EXPECT_NULL(mx_gather(x, 1, zeros(MX_SHAPE(3, 2))), MX_DTYPE_ERROR, "mx_gather: indices must be int64, got float64");
  EXPECT_NULL(mx_gather(x, 1, mx_zeros(MX_SHAPE(4, 2), MX_I64, MX_CPU)), MX_SHAPE_ERROR,
              "mx_gather: index of shape [4,2] does not fit a tensor of shape [3,5] along dim 1");
  EXPECT_NULL(mx_gather(x, 1, mx_zeros(MX_SHAPE(3), MX_I64, MX_CPU)), MX_SHAPE_ERROR,
              "mx_gather: index of shape [3] does not fit a tensor of shape [3,5] along dim 1");
  EXPECT_NULL(mx_gather(x, 2, mx_zeros(MX_SHAPE(3, 2), MX_I64, MX_CPU)), MX_INDEX_ERROR,
              "mx_gather: dim 2 out of range for a 2-d tensor (expected -2 to 1)");
  mx_scope_end(s);
}

Test(nn_errors, scatter) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = zeros(MX_SHAPE(3, 5)), *src = zeros(MX_SHAPE(1, 2));
  EXPECT_NULL(mx_scatter(x, 1, IDX(MX_SHAPE(1, 2), 5, 0), src), MX_INDEX_ERROR,
              "mx_scatter: index 5 out of range for dim 1 of size 5");
  EXPECT_NULL(mx_scatter_add(x, 0, IDX(MX_SHAPE(1, 2), 0, -2), src), MX_INDEX_ERROR,
              "mx_scatter_add: index -2 out of range for dim 0 of size 3");
  EXPECT_NULL(mx_scatter(x, 1, mx_zeros(MX_SHAPE(1, 2), MX_I32, MX_CPU), src), MX_DTYPE_ERROR,
              "mx_scatter: indices must be int64, got int32");
  EXPECT_NULL(mx_scatter_add(x, 1, mx_zeros(MX_SHAPE(4, 1), MX_I64, MX_CPU), zeros(MX_SHAPE(4, 1))), MX_SHAPE_ERROR,
              "mx_scatter_add: index of shape [4,1] does not fit a tensor of shape [3,5] along dim 1");
  /* src smaller than the index */
  EXPECT_NULL(mx_scatter(x, 1, mx_zeros(MX_SHAPE(1, 2), MX_I64, MX_CPU), zeros(MX_SHAPE(1, 1))), MX_SHAPE_ERROR,
              "mx_scatter: index of shape [1,2] does not fit a tensor of shape [1,1] along dim -1");
  mx_scope_end(s);
}

/* --- index_select, index_add, index_copy, index_put, embedding, one_hot ------------------------------ */

Test(nn_errors, index_select_add_copy) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = zeros(MX_SHAPE(4, 3));
  EXPECT_NULL(mx_index_select(x, 0, IDX(MX_SHAPE(2), 0, 4)), MX_INDEX_ERROR,
              "mx_index_select: index 4 out of range for dim 0 of size 4");
  /* FAILS: as for gather; and with another bad index in the list, whichever the threads write
   * last decides, so [0, 5000, -1] can pass too */
  EXPECT_NULL(mx_index_select(x, 1, IDX(MX_SHAPE(1), -1)), MX_INDEX_ERROR,
              "mx_index_select: index -1 out of range for dim 1 of size 3");
  mx_clear_error();
  bool failed = mx_index_select(zeros(MX_SHAPE(1000, 8)), 0, IDX(MX_SHAPE(3), 0, 5000, -1)) == NULL;
  cr_expect(failed, "index_select of [0, 5000, -1] from 1000 rows succeeded");
  if (failed) cr_expect_eq(mx_last_status(), MX_INDEX_ERROR, "%s", mx_last_error());
  EXPECT_NULL(mx_index_select(x, 0, mx_zeros(MX_SHAPE(2, 1), MX_I64, MX_CPU)), MX_SHAPE_ERROR,
              "mx_index_select: index must be 1-d, got 2 dims");
  EXPECT_NULL(mx_index_select(x, 0, mx_zeros(MX_SHAPE(2), MX_I32, MX_CPU)), MX_DTYPE_ERROR,
              "mx_index_select: indices must be int64, got int32");
  EXPECT_NULL(mx_index_select(mx_scalar(1, MX_F64, MX_CPU), 0, IDX(MX_SHAPE(1), 0)), MX_SHAPE_ERROR,
              "mx_index_select: cannot index a 0-d tensor");
  /* index_add on a 0-d tensor read an index at an unset coordinate (found by the ops fuzz target) */
  EXPECT_NULL(mx_index_add(mx_scalar(1, MX_F64, MX_CPU), 0, IDX(MX_SHAPE(1), 0), mx_scalar(5, MX_F64, MX_CPU), 1),
              MX_SHAPE_ERROR, "mx_index_add: cannot index a 0-d tensor");
  EXPECT_NULL(mx_index_copy(mx_scalar(1, MX_F64, MX_CPU), -1, IDX(MX_SHAPE(1), 0), mx_scalar(5, MX_F64, MX_CPU)),
              MX_SHAPE_ERROR, "mx_index_copy: cannot index a 0-d tensor");
  EXPECT_NULL(mx_index_add(x, 0, IDX(MX_SHAPE(1), 4), zeros(MX_SHAPE(1, 3)), 1), MX_INDEX_ERROR,
              "mx_index_add: index 4 out of range for dim 0 of size 4");
  EXPECT_NULL(mx_index_add(x, 0, IDX(MX_SHAPE(2), 0, 1), zeros(MX_SHAPE(2, 2)), 1), MX_SHAPE_ERROR,
              "mx_index_add: source of shape [2,2], expected [2,3]");
  EXPECT_NULL(mx_index_copy(x, 1, IDX(MX_SHAPE(1), -1), zeros(MX_SHAPE(4, 1))), MX_INDEX_ERROR,
              "mx_index_copy: index -1 out of range for dim 1 of size 3");
  EXPECT_NULL(mx_index_copy(x, 1, IDX(MX_SHAPE(2), 0, 1), zeros(MX_SHAPE(4, 3))), MX_SHAPE_ERROR,
              "mx_index_copy: source of shape [4,3], expected [4,2]");
  mx_scope_end(s);
}

Test(nn_errors, index_put) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = zeros(MX_SHAPE(3, 4)), *v = mx_ones(MX_SHAPE(1), MX_F64, MX_CPU);
  EXPECT_NULL(mx_index_put(x, 1, LIST(IDX(MX_SHAPE(1), 3)), v, false), MX_INDEX_ERROR,
              "mx_index_put: index 3 out of range for dim 0 of size 3");
  EXPECT_NULL(mx_index_put(x, 3, LIST(IDX(MX_SHAPE(1), 0), IDX(MX_SHAPE(1), 0), IDX(MX_SHAPE(1), 0)), v, false),
              MX_INVALID_ARGUMENT, "mx_index_put: 3 index tensors for a 2-d tensor");
  EXPECT_NULL(mx_index_put(x, 0, NULL, v, false), MX_INVALID_ARGUMENT,
              "mx_index_put: 0 index tensors for a 2-d tensor");
  EXPECT_NULL(mx_index_put(x, 1, LIST(mx_zeros(MX_SHAPE(1), MX_I32, MX_CPU)), v, false), MX_DTYPE_ERROR,
              "mx_index_put: indices must be int64, got int32");
  mx_scope_end(s);
}

/* Each index tensor is checked against its own dim (PyTorch: "index 5 is out of bounds for
 * dimension 1 with size 4"). FAILS: index_put flattens the indices into one (idx0 * 4 + idx1)
 * before checking, so (0, 5) silently writes x[1, 1] and (3, 0) is reported as "index 12 out of
 * range for dim 0 of size 12". */
Test(nn_errors, index_put_checks_each_index_tensor) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = zeros(MX_SHAPE(3, 4)), *v = mx_ones(MX_SHAPE(1), MX_F64, MX_CPU);
  EXPECT_NULL(mx_index_put(x, 2, LIST(IDX(MX_SHAPE(1), 0), IDX(MX_SHAPE(1), 5)), v, false), MX_INDEX_ERROR,
              "mx_index_put: index 5 out of range for dim 1 of size 4");
  EXPECT_NULL(mx_index_put(x, 2, LIST(IDX(MX_SHAPE(1), 3), IDX(MX_SHAPE(1), 0)), v, false), MX_INDEX_ERROR,
              "mx_index_put: index 3 out of range for dim 0 of size 3");
  mx_scope_end(s);
}

Test(nn_errors, embedding_and_one_hot) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *w = zeros(MX_SHAPE(5, 3));
  EXPECT_NULL(mx_embedding(w, IDX(MX_SHAPE(2), 1, 5)), MX_INDEX_ERROR,
              "mx_embedding: index 5 out of range for dim 0 of size 5");
  /* FAILS: through index_select (see above) */
  EXPECT_NULL(mx_embedding(w, IDX(MX_SHAPE(2), 1, -1)), MX_INDEX_ERROR,
              "mx_embedding: index -1 out of range for dim 0 of size 5");
  EXPECT_NULL(mx_embedding(w, mx_zeros(MX_SHAPE(2), MX_I32, MX_CPU)), MX_DTYPE_ERROR,
              "mx_embedding: indices must be int64, got int32");
  EXPECT_NULL(mx_embedding(zeros(MX_SHAPE(5)), IDX(MX_SHAPE(1), 0)), MX_SHAPE_ERROR,
              "mx_embedding: weight must be 2-d (num_embeddings, dim), got 1 dims");
  EXPECT_NULL(mx_one_hot(IDX(MX_SHAPE(2), 0, 3), 3), MX_INDEX_ERROR, "mx_one_hot: indices must lie in [0, 3)");
  EXPECT_NULL(mx_one_hot(IDX(MX_SHAPE(2), -1, 2), -1), MX_INDEX_ERROR, "mx_one_hot: indices must lie in [0, 3)");
  EXPECT_NULL(mx_one_hot(zeros(MX_SHAPE(2)), -1), MX_DTYPE_ERROR, "mx_one_hot: indices must be int64, got float64");
  mx_scope_end(s);
}

/* --- cat, stack, split, chunk ----------------------------------------------------------------------------- */

Test(nn_errors, cat_and_stack) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = zeros(MX_SHAPE(2, 3));
  EXPECT_NULL(mx_cat(2, LIST(a, zeros(MX_SHAPE(2, 4))), 0), MX_SHAPE_ERROR,
              "mx_cat: tensor 1 has shape [2,4], which does not match [2,3] outside dim 0");
  EXPECT_NULL(mx_cat(3, LIST(a, zeros(MX_SHAPE(5, 3)), zeros(MX_SHAPE(1, 2))), 0), MX_SHAPE_ERROR,
              "mx_cat: tensor 2 has shape [1,2], which does not match [2,3] outside dim 0");
  EXPECT_NULL(mx_cat(2, LIST(a, zeros(MX_SHAPE(3))), -1), MX_SHAPE_ERROR,
              "mx_cat: tensor 1 has shape [3], which does not match [2,3] outside dim 1");
  EXPECT_NULL(mx_cat(0, NULL, 0), MX_INVALID_ARGUMENT, "mx_cat: no tensors given");
  EXPECT_NULL(mx_cat(2, LIST(mx_scalar(1, MX_F64, MX_CPU), mx_scalar(2, MX_F64, MX_CPU)), 0), MX_SHAPE_ERROR,
              "mx_cat: cannot join 0-d tensors; use mx_stack");
  EXPECT_NULL(mx_cat(2, LIST(a, a), 2), MX_INDEX_ERROR, "mx_cat: dim 2 out of range for a 2-d tensor (expected -2 to 1)");
  EXPECT_NULL(mx_stack(2, LIST(a, zeros(MX_SHAPE(2, 4))), 0), MX_SHAPE_ERROR,
              "mx_stack: tensor 1 has shape [1,2,4], which does not match [1,2,3] outside dim 0");
  EXPECT_NULL(mx_stack(0, NULL, 0), MX_INVALID_ARGUMENT, "mx_stack: no tensors given");
  mx_scope_end(s);
}

Test(nn_errors, split_and_chunk) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = zeros(MX_SHAPE(5, 3)), *out[2];
  mx_clear_error();
  op_expect_error("mx_split size 0", mx_split(x, 0, 0, out, 2) == -1, MX_INVALID_ARGUMENT,
                  "mx_split: split_size must be positive, got 0");
  mx_clear_error();
  op_expect_error("mx_split into too few slots", mx_split(x, 2, 0, out, 2) == -1, MX_INVALID_ARGUMENT,
                  "mx_split: 3 pieces do not fit in 2 slots");
  mx_clear_error();
  op_expect_error("mx_split dim 2", mx_split(x, 2, 2, out, 2) == -1, MX_INDEX_ERROR,
                  "mx_split: dim 2 out of range for a 2-d tensor (expected -2 to 1)");
  mx_clear_error();
  op_expect_error("mx_chunk 0", mx_chunk(x, 0, 0, out, 2) == -1, MX_INVALID_ARGUMENT,
                  "mx_chunk: chunks must be positive, got 0");
  mx_scope_end(s);
}

/* --- pad, flip, roll, repeat, tril/triu, dropout, softmax ------------------------------------------------- */

Test(nn_errors, shape_games) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = zeros(MX_SHAPE(1, 2, 5)), *m = zeros(MX_SHAPE(3, 4));
  EXPECT_NULL(mx_pad(x, MX_SHAPE(1, 1, 1), MX_PAD_CONSTANT, 0), MX_INVALID_ARGUMENT,
              "mx_pad: 3 pad values for a 3-d tensor (two per dim, from the last)");
  EXPECT_NULL(mx_pad(x, MX_SHAPE(5, 0), MX_PAD_REFLECT, 0), MX_INVALID_ARGUMENT,
              "mx_pad: padding (5, 0) is invalid for reflect mode and size 5");
  /* cropping past the size then padding the other side dereferenced the failed crop (found by the ops
   * fuzz target) */
  EXPECT_NULL(mx_pad(x, MX_SHAPE(-9, 2), MX_PAD_CONSTANT, 0), MX_INVALID_ARGUMENT,
              "mx_pad: padding (-9, 2) crops more than dim 2's size 5");
  EXPECT_NULL(mx_pad(x, MX_SHAPE(0, 0, -2, -1), MX_PAD_CONSTANT, 0), MX_INVALID_ARGUMENT,
              "mx_pad: padding (-2, -1) crops more than dim 1's size 2");
  EXPECT_NULL(mx_pad(x, MX_SHAPE(-1, 0), MX_PAD_REPLICATE, 0), MX_INVALID_ARGUMENT,
              "mx_pad: padding (-1, 0) is invalid for replicate mode and size 5");
  EXPECT_NULL(mx_pad(zeros(MX_SHAPE(2, 5)), MX_SHAPE(-3, -3), MX_PAD_CONSTANT, 0), MX_INVALID_ARGUMENT,
              "mx_pad: padding (-3, -3) crops more than dim 1's size 5");
  EXPECT_NULL(mx_flip(m, MX_DIMS(2)), MX_INDEX_ERROR, "mx_flip: dim 2 out of range for a 2-d tensor (expected -2 to 1)");
  EXPECT_NULL(mx_roll(m, 1, -3), MX_INDEX_ERROR, "mx_roll: dim -3 out of range for a 2-d tensor (expected -2 to 1)");
  EXPECT_NULL(mx_repeat(m, MX_SHAPE(2)), MX_INVALID_ARGUMENT,
              "mx_repeat: 1 repeats for a 2-d tensor (need at least one per dim)");
  EXPECT_NULL(mx_tril(zeros(MX_SHAPE(4)), 0), MX_SHAPE_ERROR, "mx_tril: needs at least 2 dims, got 1");
  EXPECT_NULL(mx_triu(mx_scalar(1, MX_F64, MX_CPU), 0), MX_SHAPE_ERROR, "mx_triu: needs at least 2 dims, got 0");
  EXPECT_NULL(mx_dropout(m, 1.5, true, NULL), MX_INVALID_ARGUMENT, "mx_dropout: probability 1.5 is not in [0, 1]");
  EXPECT_NULL(mx_dropout(m, -0.25, false, NULL), MX_INVALID_ARGUMENT,
              "mx_dropout: probability -0.25 is not in [0, 1]");
  mx_scope_end(s);
}

Test(nn_errors, softmax) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = zeros(MX_SHAPE(3, 4));
  EXPECT_NULL(mx_softmax(x, 2), MX_INDEX_ERROR, "mx_softmax: dim 2 out of range for a 2-d tensor (expected -2 to 1)");
  EXPECT_NULL(mx_log_softmax(x, -3), MX_INDEX_ERROR,
              "mx_log_softmax: dim -3 out of range for a 2-d tensor (expected -2 to 1)");
  EXPECT_NULL(mx_softmin(x, 5), MX_INDEX_ERROR, "mx_softmin: dim 5 out of range for a 2-d tensor (expected -2 to 1)");
  EXPECT_NULL(mx_softmax(mx_zeros(MX_SHAPE(3), MX_I64, MX_CPU), 0), MX_DTYPE_ERROR,
              "mx_softmax: dtype int64 is not floating");
  EXPECT_NULL(mx_log_softmax_dtype(x, 1, MX_I32), MX_DTYPE_ERROR, "mx_log_softmax: dtype int32 is not floating");
  mx_scope_end(s);
}

/* --- pooling ------------------------------------------------------------------------------------------------- */

Test(nn_errors, pooling) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *img = zeros(MX_SHAPE(1, 1, 2, 2)), *v = NULL, *i = NULL;
  EXPECT_NULL(mx_max_pool(img, 2, MX_SHAPE(3), MX_DEFAULT, MX_DEFAULT), MX_SHAPE_ERROR,
              "mx_max_pool: input size 2 is smaller than the kernel 3 in spatial dim 0");
  EXPECT_NULL(mx_avg_pool(img, 2, MX_SHAPE(2, 3), MX_DEFAULT, MX_DEFAULT, true), MX_SHAPE_ERROR,
              "mx_avg_pool: input size 2 is smaller than the kernel 3 in spatial dim 1");
  EXPECT_NULL(mx_avg_pool(zeros(MX_SHAPE(1, 1, 4, 4, 2)), 3, MX_SHAPE(2, 2, 3), MX_DEFAULT, MX_DEFAULT, false),
              MX_SHAPE_ERROR, "mx_avg_pool: input size 2 is smaller than the kernel 3 in spatial dim 2");
  EXPECT_NULL(mx_max_pool(zeros(MX_SHAPE(1, 1, 6)), 1, MX_SHAPE(2), MX_DEFAULT, MX_SHAPE(2)), MX_INVALID_ARGUMENT,
              "mx_max_pool: kernel 2, stride 2 and padding 2: kernel and stride must be positive and padding at most "
              "half the kernel");
  EXPECT_NULL(mx_avg_pool(zeros(MX_SHAPE(1, 1, 6)), 1, MX_SHAPE(2), MX_SHAPE(0), MX_DEFAULT, true),
              MX_INVALID_ARGUMENT,
              "mx_avg_pool: kernel 2, stride 0 and padding 0: kernel and stride must be positive and padding at most "
              "half the kernel");
  EXPECT_NULL(mx_max_pool(zeros(MX_SHAPE(1, 4, 4)), 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT), MX_SHAPE_ERROR,
              "mx_max_pool: expected a 4-d input (N, C, 2 spatial dims), got 3 dims");
  EXPECT_NULL(mx_max_pool(img, 4, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT), MX_INVALID_ARGUMENT,
              "mx_max_pool: 4 spatial dims (1 to 3) and a kernel size are needed");
  EXPECT_NULL(mx_avg_pool(img, 0, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, true), MX_INVALID_ARGUMENT,
              "mx_avg_pool: 0 spatial dims (1 to 3) and a kernel size are needed");
  mx_clear_error();
  mx_status st = mx_max_pool_with_indices(zeros(MX_SHAPE(1, 1, 3)), 1, MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT,
                                          MX_SHAPE(3), &v, &i);
  op_expect_error("max_pool with a dilated kernel (span 4) on 3 elements", st != MX_OK, MX_SHAPE_ERROR,
                  "mx_max_pool: input size 3 is smaller than the kernel 2 in spatial dim 0");
  cr_expect(v == NULL && i == NULL, "a failed max_pool_with_indices returns no tensors");
  EXPECT_NULL(mx_adaptive_avg_pool2d(zeros(MX_SHAPE(4, 4)), 2, 2), MX_SHAPE_ERROR,
              "mx_adaptive_avg_pool2d: needs (..., H, W) input and a positive (h, w) size");
  EXPECT_NULL(mx_adaptive_avg_pool2d(img, 0, 2), MX_SHAPE_ERROR,
              "mx_adaptive_avg_pool2d: needs (..., H, W) input and a positive (h, w) size");
  mx_scope_end(s);
}

/* --- normalisation ------------------------------------------------------------------------------------------- */

Test(nn_errors, normalisation) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = zeros(MX_SHAPE(2, 4, 3));
  EXPECT_NULL(mx_group_norm(x, 3, NULL, NULL, 1e-5), MX_SHAPE_ERROR, "mx_group_norm: 3 groups do not divide 4 channels");
  EXPECT_NULL(mx_group_norm(x, 0, NULL, NULL, 1e-5), MX_SHAPE_ERROR, "mx_group_norm: 0 groups do not divide 4 channels");
  EXPECT_NULL(mx_group_norm(zeros(MX_SHAPE(4)), 2, NULL, NULL, 1e-5), MX_SHAPE_ERROR,
              "mx_group_norm: 2 groups do not divide 0 channels");
  EXPECT_NULL(mx_group_norm(x, 2, mx_ones(MX_SHAPE(3), MX_F64, MX_CPU), NULL, 1e-5), MX_SHAPE_ERROR,
              "mx_group_norm: shapes [2,4,3] and [1,3,1] cannot be broadcast together (dim 1: 4 vs 3)");
  EXPECT_NULL(mx_layer_norm(x, MX_SHAPE(4), NULL, NULL, 1e-5), MX_SHAPE_ERROR,
              "mx_layer_norm: normalized shape [4] does not end the input shape [2,4,3]");
  EXPECT_NULL(mx_layer_norm(x, MX_SHAPE(2, 2, 4, 3), NULL, NULL, 1e-5), MX_SHAPE_ERROR,
              "mx_layer_norm: normalized shape [2,2,4,3] does not end the input shape [2,4,3]");
  EXPECT_NULL(mx_batch_norm(zeros(MX_SHAPE(4)), NULL, NULL, NULL, NULL, true, 0.1, 1e-5), MX_SHAPE_ERROR,
              "mx_batch_norm: expected (N, C, ...) input, got 1 dims");
  EXPECT_NULL(mx_batch_norm(zeros(MX_SHAPE(1, 3)), NULL, NULL, NULL, NULL, true, 0.1, 1e-5), MX_SHAPE_ERROR,
              "mx_batch_norm: training needs more than one value per channel");
  /* integer inputs: PyTorch's kernels refuse them; the batch norm kernel read them as 16-bit floats (past
   * the end of the data; found by the ops fuzz target) */
  mx_tensor *bytes = mx_zeros(MX_SHAPE(4, 3), MX_U8, MX_CPU);
  EXPECT_NULL(mx_batch_norm(bytes, NULL, NULL, NULL, NULL, true, 0.1, 1e-5), MX_DTYPE_ERROR,
              "mx_batch_norm: input dtype uint8 is not floating; convert it first");
  EXPECT_NULL(mx_layer_norm(mx_zeros(MX_SHAPE(4, 3), MX_I64, MX_CPU), MX_SHAPE(3), NULL, NULL, 1e-5), MX_DTYPE_ERROR,
              "mx_layer_norm: input dtype int64 is not floating; convert it first");
  EXPECT_NULL(mx_group_norm(bytes, 3, NULL, NULL, 1e-5), MX_DTYPE_ERROR,
              "mx_group_norm: input dtype uint8 is not floating; convert it first");
  mx_scope_end(s);
}

/* --- convolution ----------------------------------------------------------------------------------------------- */

Test(nn_errors, convolution) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *img = zeros(MX_SHAPE(1, 3, 5, 5)), *w = zeros(MX_SHAPE(2, 2, 3, 3));
  EXPECT_NULL(mx_conv2d(img, w, NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1), MX_SHAPE_ERROR,
              "mx_conv2d: input [1,3,5,5] has 3 channels, weight [2,2,3,3] expects 2 (groups 1)");
  EXPECT_NULL(mx_conv2d(zeros(MX_SHAPE(1, 4, 5, 5)), zeros(MX_SHAPE(4, 2, 3, 3)), NULL, MX_DEFAULT, MX_DEFAULT,
                        MX_DEFAULT, 3),
              MX_SHAPE_ERROR, "mx_conv2d: input [1,4,5,5] has 4 channels, weight [4,2,3,3] expects 6 (groups 3)");
  EXPECT_NULL(mx_conv1d(zeros(MX_SHAPE(1, 2, 5)), zeros(MX_SHAPE(2, 2, 3)), NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT,
                        0),
              MX_SHAPE_ERROR, "mx_conv1d: input [1,2,5] has 2 channels, weight [2,2,3] expects 0 (groups 0)");
  EXPECT_NULL(mx_conv2d(zeros(MX_SHAPE(1, 2, 2, 2)), w, NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1), MX_SHAPE_ERROR,
              "mx_conv2d: kernel 3 (dilation 1) does not fit input size 2 + padding 0 in spatial dim 0");
  EXPECT_NULL(mx_conv3d(zeros(MX_SHAPE(1, 2, 5, 5, 4)), zeros(MX_SHAPE(1, 2, 3, 3, 3)), NULL, MX_DEFAULT, MX_DEFAULT,
                        MX_SHAPE(1, 1, 2), 1),
              MX_SHAPE_ERROR, "mx_conv3d: kernel 3 (dilation 2) does not fit input size 4 + padding 0 in spatial dim 2");
  EXPECT_NULL(mx_conv2d(mx_zeros(MX_SHAPE(1, 2, 5, 5), MX_F32, MX_CPU), w, NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1),
              MX_DTYPE_ERROR, "mx_conv2d: expected one dtype for input and weight, got float32 and float64");
  EXPECT_NULL(mx_conv2d(zeros(MX_SHAPE(1, 2, 5)), w, NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1), MX_SHAPE_ERROR,
              "mx_conv2d: input [1,2,5] and weight [2,2,3,3] must both be 4-d for 2 spatial dims");
  EXPECT_NULL(mx_conv2d(zeros(MX_SHAPE(1, 2, 5, 5)), w, zeros(MX_SHAPE(3)), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1),
              MX_SHAPE_ERROR, "mx_conv2d: bias of shape [3] for 2 output channels (expected (2))");
  EXPECT_NULL(mx_conv2d(zeros(MX_SHAPE(1, 2, 5, 5)), w, zeros(MX_SHAPE(1, 2, 1, 1)), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT,
                        1),
              MX_SHAPE_ERROR, "mx_conv2d: bias of shape [1,2,1,1] for 2 output channels (expected (2))");
  EXPECT_NULL(mx_conv2d(zeros(MX_SHAPE(1, 2, 5, 5)), w, mx_zeros(MX_SHAPE(2), MX_F32, MX_CPU), MX_DEFAULT, MX_DEFAULT,
                        MX_DEFAULT, 1),
              MX_DTYPE_ERROR, "mx_conv2d: bias of float32 for an input of float64 (expected one dtype)");
  EXPECT_NULL(mx_conv(img, w, NULL, 4, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1), MX_INVALID_ARGUMENT,
              "mx_conv: 4 spatial dims (1 to 3 are supported)");
  /* transposed: weight (C_in, C_out / groups, *K) */
  EXPECT_NULL(mx_conv_transpose2d(img, w, NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1), MX_SHAPE_ERROR,
              "mx_conv_transpose2d: input with 3 channels and weight with 2 input channels (both 4-d) do not fit");
  EXPECT_NULL(mx_conv_transpose2d(zeros(MX_SHAPE(1, 2, 3, 3)), w, NULL, MX_DEFAULT, MX_DEFAULT, MX_SHAPE(1),
                                  MX_DEFAULT, 1),
              MX_INVALID_ARGUMENT, "mx_conv_transpose2d: output_padding 1 must be smaller than the stride or the dilation");
  EXPECT_NULL(mx_conv_transpose(img, w, NULL, 0, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1),
              MX_INVALID_ARGUMENT, "mx_conv_transpose: 0 spatial dims (1 to 3 are supported)");
  mx_scope_end(s);
}

/* FAILS (messages that mislead; the calls do fail): a stride of 0 is reported as the kernel
 * not fitting ("kernel 3 (dilation 1) does not fit input size 5 + padding 0"), and output
 * channels that groups do not divide as "has 4 channels, weight [3,2,3,3] expects 4". */
Test(nn_errors, convolution_messages_name_the_problem) {
  mx_scope *s = mx_scope_begin();
  mx_clear_error();
  mx_tensor *y = mx_conv2d(zeros(MX_SHAPE(1, 2, 5, 5)), zeros(MX_SHAPE(2, 2, 3, 3)), NULL, MX_SHAPE(0), MX_DEFAULT,
                           MX_DEFAULT, 1);
  cr_expect_null(y);
  cr_expect(strstr(mx_last_error(), "stride") != NULL, "stride 0: \"%s\" does not mention the stride", mx_last_error());
  mx_clear_error();
  y = mx_conv2d(zeros(MX_SHAPE(1, 4, 5, 5)), zeros(MX_SHAPE(3, 2, 3, 3)), NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 2);
  cr_expect_null(y);
  cr_expect(strstr(mx_last_error(), "output channels") != NULL,
            "3 output channels in 2 groups: \"%s\" does not mention the output channels", mx_last_error());
  mx_scope_end(s);
}
