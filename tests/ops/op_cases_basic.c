/* The cases of the ops themselves, each row naming a function of its inputs: unary, binary and ternary
 * elementwise ops, views and casts, reductions and scans, linear algebra, strided inputs, softmax, indexing,
 * joining, pooling, normalisation, convolution and sorting. */
#include "op_case_table.h"


static mx_tensor *values_of(mx_status status, mx_tensor *values, mx_tensor *indices, bool want_indices) {
  if (status != MX_OK) return NULL;
  return want_indices ? indices : values;
}
#define MAXMIN(name, fn, dim, keep, want_indices)                            \
  static mx_tensor *f_##name(int n, mx_tensor *const *in, void *ctx) {      \
    (void)n, (void)ctx;                                                     \
    mx_tensor *v = NULL, *i = NULL;                                         \
    mx_status st = fn(in[0], dim, keep, &v, &i);                            \
    return values_of(st, v, i, want_indices);                              \
  }

/* --- unary ---------------------------------------------------------------------------- */
FN(neg, mx_neg(a))
FN(abs, mx_abs(a))
FN(sign, mx_sign(a))
FN(exp, mx_exp(a))
FN(expm1, mx_expm1(a))
FN(log, mx_log(a))
FN(log1p, mx_log1p(a))
FN(log2, mx_log2(a))
FN(log10, mx_log10(a))
FN(sqrt, mx_sqrt(a))
FN(rsqrt, mx_rsqrt(a))
FN(reciprocal, mx_reciprocal(a))
FN(sin, mx_sin(a))
FN(cos, mx_cos(a))
FN(tan, mx_tan(a))
FN(asin, mx_asin(a))
FN(acos, mx_acos(a))
FN(atan, mx_atan(a))
FN(sinh, mx_sinh(a))
FN(cosh, mx_cosh(a))
FN(tanh, mx_tanh(a))
FN(sigmoid, mx_sigmoid(a))
FN(relu, mx_relu(a))
FN(leaky_relu, mx_leaky_relu(a, 0.1))
FN(elu, mx_elu(a, 1.5))
FN(gelu, mx_gelu(a))
FN(gelu_tanh, mx_gelu_tanh(a))
FN(silu, mx_silu(a))
FN(softplus, mx_softplus(a, 1, 20))
FN(softplus_b2_t3, mx_softplus(a, 2, 3))
FN(erf, mx_erf(a))
FN(erfinv, mx_erfinv(a))
FN(floor, mx_floor(a))
FN(ceil, mx_ceil(a))
FN(round, mx_round(a))
FN(trunc, mx_trunc(a))
FN(clamp, mx_clamp(a, -0.5, 0.5))
FN(clamp_min, mx_clamp(a, -0.5, INFINITY))
FN(clamp_max, mx_clamp(a, -INFINITY, 0.5))

/* --- binary ---------------------------------------------------------------------------- */
FN(add, mx_add(a, b))
FN(add_scaled, mx_add_scaled(a, b, 2.5))
FN(sub, mx_sub(a, b))
FN(mul, mx_mul(a, b))
FN(div, mx_div(a, b))
FN(pow, mx_pow(a, b))
FN(remainder, mx_remainder(a, b))
FN(maximum, mx_maximum(a, b))
FN(minimum, mx_minimum(a, b))
FN(atan2, mx_atan2(a, b))
FN(relu_backward, mx_relu_backward(a, b))
FN(add_scalar, mx_add_scalar(a, 2.5))
FN(sub_scalar, mx_sub_scalar(a, 2.5))
FN(rsub_scalar, mx_rsub_scalar(2.5, a))
FN(mul_scalar, mx_mul_scalar(a, 2.5))
FN(div_scalar, mx_div_scalar(a, 2.5))
FN(rdiv_scalar, mx_rdiv_scalar(2.5, a))
FN(pow_scalar, mx_pow_scalar(a, 2.5))
FN(pow_scalar_int, mx_pow_scalar(a, 3))
FN(pow_scalar_neg, mx_pow_scalar(a, -1.5))
FN(rpow_scalar, mx_rpow_scalar(2.5, a))
FN(eq, mx_eq(a, b))
FN(ne, mx_ne(a, b))
FN(lt, mx_lt(a, b))
FN(le, mx_le(a, b))
FN(gt, mx_gt(a, b))
FN(ge, mx_ge(a, b))
FN(logical_and, mx_logical_and(a, b))
FN(logical_or, mx_logical_or(a, b))
FN(logical_xor, mx_logical_xor(a, b))
FN(logical_not, mx_logical_not(a))
FN(eq_scalar, mx_eq_scalar(a, 0.5))
FN(gt_scalar, mx_gt_scalar(a, 0.5))
FN(ge_scalar, mx_ge_scalar(a, 0.5))
FN(lt_scalar, mx_lt_scalar(a, 0.5))
FN(le_scalar, mx_le_scalar(a, 0.5))

/* --- ternary ------------------------------------------------------------------------------ */
FN(where, mx_where(a, b, c))
FN(addcmul, mx_addcmul(a, b, c, 0.5))
FN(addcdiv, mx_addcdiv(a, b, c, 0.5))
FN(lerp, mx_lerp(a, b, c))
FN(masked_fill, mx_masked_fill(a, b, -1.5))

/* --- views, copies, casts ------------------------------------------------------------------ */
FN(reshape, mx_reshape(a, MX_SHAPE(4, 6)))
FN(reshape_infer, mx_reshape(a, MX_SHAPE(-1, 4)))
FN(reshape_copy, mx_reshape(mx_transpose(a, 0, 1), MX_SHAPE(12)))
FN(view, mx_view(a, MX_SHAPE(6, 4)))
FN(transpose, mx_transpose(a, 0, 2))
FN(permute, mx_permute(a, MX_SHAPE(2, 0, 1)))
FN(squeeze, mx_squeeze(a, 1))
FN(squeeze_all, mx_squeeze_all(a))
FN(unsqueeze, mx_unsqueeze(a, 1))
FN(unsqueeze_neg, mx_unsqueeze(a, -1))
FN(slice, mx_slice(a, 1, 1, 6, 2))
FN(slice_neg, mx_slice(a, 1, -5, 100, 3))
FN(slice_dim0, mx_slice(a, 0, 0, 5, 2))
FN(narrow, mx_narrow(a, 2, 1, 2))
FN(narrow_neg, mx_narrow(a, 1, -2, 2))
FN(select, mx_select(a, 1, 2))
FN(select_neg, mx_select(a, 0, -1))
FN(expand, mx_expand(a, MX_SHAPE(2, 3, 4)))
FN(expand_keep, mx_expand(a, MX_SHAPE(-1, 4)))
FN(broadcast_to, mx_broadcast_to(a, MX_SHAPE(2, 3, 4)))
FN(flatten, mx_flatten(a, 1, 2))
FN(flatten_all, mx_flatten(a, 0, -1))
FN(contiguous, mx_contiguous(mx_transpose(a, 0, 1)))
FN(clone, mx_clone(a))
FN(to_f32, mx_to_dtype(a, MX_F32))
FN(to_f64, mx_to_dtype(a, MX_F64))
FN(to_f16, mx_to_dtype(a, MX_F16))
FN(to_bf16, mx_to_dtype(a, MX_BF16))
FN(to_i64, mx_to_dtype(a, MX_I64))
FN(to_i32, mx_to_dtype(a, MX_I32))
FN(to_bool, mx_to_dtype(a, MX_BOOL))

/* --- reductions and scans ---------------------------------------------------------------- */
FN(sum_all, mx_sum(a, MX_ALL_DIMS, false))
FN(sum_dim1, mx_sum(a, MX_DIMS(1), false))
FN(sum_dims02_keep, mx_sum(a, MX_DIMS(0, 2), true))
FN(sum_neg_dim, mx_sum(a, MX_DIMS(-1), false))
FN(mean_all, mx_mean(a, MX_ALL_DIMS, false))
FN(mean_dim0, mx_mean(a, MX_DIMS(0), false))
FN(mean_dims12_keep, mx_mean(a, MX_DIMS(1, 2), true))
FN(prod_all, mx_prod(a, MX_ALL_DIMS, false))
FN(prod_dim1, mx_prod(a, MX_DIMS(1), false))
FN(amax_all, mx_amax(a, MX_ALL_DIMS, false))
FN(amax_dim1, mx_amax(a, MX_DIMS(1), false))
FN(amax_dims01_keep, mx_amax(a, MX_DIMS(0, 1), true))
FN(amin_all, mx_amin(a, MX_ALL_DIMS, false))
FN(amin_dim0, mx_amin(a, MX_DIMS(0), false))
FN(max_all, mx_max(a))
FN(min_all, mx_min(a))
MAXMIN(max_dim1, mx_max_dim, 1, false, false)
MAXMIN(max_dim1_keep, mx_max_dim, 1, true, false)
MAXMIN(min_dim0, mx_min_dim, 0, false, false)
MAXMIN(max_dim1_indices, mx_max_dim, 1, false, true)
MAXMIN(min_dim0_indices, mx_min_dim, 0, false, true)
FN(argmax_dim1, mx_argmax(a, 1, false))
FN(argmax_keep, mx_argmax(a, 1, true))
FN(argmax_flat, mx_argmax(a, MX_FLAT, false))
FN(argmin_dim0, mx_argmin(a, 0, false))
FN(argmin_flat, mx_argmin(a, MX_FLAT, false))
FN(all_all, mx_all(a, MX_ALL_DIMS, false))
FN(all_dim1, mx_all(a, MX_DIMS(1), false))
FN(any_all, mx_any(a, MX_ALL_DIMS, false))
FN(any_dim0, mx_any(a, MX_DIMS(0), false))
FN(var_dim1_c1, mx_var(a, MX_DIMS(1), 1, false))
FN(var_dim1_c0, mx_var(a, MX_DIMS(1), 0, false))
FN(var_all_c1, mx_var(a, MX_ALL_DIMS, 1, false))
FN(var_dims01_keep, mx_var(a, MX_DIMS(0, 1), 1, true))
FN(std_dim1_c1, mx_std(a, MX_DIMS(1), 1, false))
FN(std_dim1_c0, mx_std(a, MX_DIMS(1), 0, false))
FN(std_all_c0, mx_std(a, MX_ALL_DIMS, 0, false))
FN(logsumexp_dim1, mx_logsumexp(a, MX_DIMS(1), false))
FN(logsumexp_all, mx_logsumexp(a, MX_ALL_DIMS, false))
FN(logsumexp_keep, mx_logsumexp(a, MX_DIMS(0), true))
FN(norm1_all, mx_norm(a, 1, MX_ALL_DIMS, false))
FN(norm2_all, mx_norm(a, 2, MX_ALL_DIMS, false))
FN(norminf_all, mx_norm(a, INFINITY, MX_ALL_DIMS, false))
FN(norm2_dim1, mx_norm(a, 2, MX_DIMS(1), false))
FN(norm1_dim0_keep, mx_norm(a, 1, MX_DIMS(0), true))
FN(norminf_dim1, mx_norm(a, INFINITY, MX_DIMS(1), false))
FN(cumsum_dim1, mx_cumsum(a, 1))
FN(cumsum_dim0, mx_cumsum(a, 0))
FN(cumsum_neg, mx_cumsum(a, -1))
FN(cumprod_dim1, mx_cumprod(a, 1))
FN(cumprod_dim0, mx_cumprod(a, 0))

/* --- linear algebra -------------------------------------------------------------------------- */
FN(mm, mx_mm(a, b))
FN(bmm, mx_bmm(a, b))
FN(matmul_1d1d, mx_matmul(a, b))
FN(matmul_2d1d, mx_matmul(a, b))
FN(matmul_1d2d, mx_matmul(a, b))
FN(matmul_2d2d, mx_matmul(a, b))
FN(matmul_3d2d, mx_matmul(a, b))
FN(matmul_2d3d, mx_matmul(a, b))
FN(matmul_bcast, mx_matmul(a, b))
FN(matmul_1d3d, mx_matmul(a, b))
FN(matmul_3d1d, mx_matmul(a, b))
FN(addmm, mx_addmm(a, b, c, 0.5, 2))
FN(addmm_bcast, mx_addmm(a, b, c, 1, 1))
FN(addmm_beta0, mx_addmm(a, b, c, 0, 1.5))
FN(addbmm, mx_addbmm(a, b, c, 0.5, 2))
FN(baddbmm, mx_baddbmm(a, b, c, 0.5, 2))
FN(baddbmm_bcast, mx_baddbmm(a, b, c, 1, 1))
FN(addmv, mx_addmv(a, b, c, 0.5, 2))
FN(addr, mx_addr(a, b, c, 0.5, 2))
FN(mv, mx_mv(a, b))
FN(dot, mx_dot(a, b))
FN(outer, mx_outer(a, b))

/* --- strided and broadcast (stride 0) inputs ------------------------------------------------- */
FN(exp_transposed, mx_exp(mx_transpose(a, 0, 1)))
FN(mul_transposed, mx_mul(mx_transpose(a, 0, 1), b))
FN(add_sliced, mx_add(mx_slice(a, 1, 0, 7, 3), b))
FN(sum_transposed, mx_sum(mx_transpose(a, 0, 2), MX_DIMS(1), false))
FN(amax_transposed, mx_amax(mx_transpose(a, 0, 1), MX_DIMS(0), false))
FN(cumsum_transposed, mx_cumsum(mx_transpose(a, 0, 1), 1))
FN(mm_transposed, mx_mm(mx_transpose(a, 0, 1), mx_transpose(b, 0, 1)))
FN(bmm_transposed, mx_bmm(a, mx_transpose(b, 1, 2)))
FN(mm_expanded, mx_mm(mx_expand(a, MX_SHAPE(2, 3)), b))
FN(mm_sliced, mx_mm(mx_slice(a, 1, 0, 6, 2), mx_slice(b, 0, 1, 4, 1)))
FN(where_transposed, mx_where(mx_transpose(a, 0, 1), b, c))

/* --- softmax, indexing and joining, pooling, normalisation, convolution ---------------------- */

/* softmax, log_softmax, softmin */
FN(softmax_dim0, mx_softmax(a, 0))
FN(softmax_dim1, mx_softmax(a, 1))
FN(softmax_neg, mx_softmax(a, -1))
FN(log_softmax_dim0, mx_log_softmax(a, 0))
FN(log_softmax_dim1, mx_log_softmax(a, 1))
FN(log_softmax_neg, mx_log_softmax(a, -1))
FN(softmin_dim0, mx_softmin(a, 0))
FN(softmin_dim1, mx_softmin(a, 1))
FN(softmin_neg, mx_softmin(a, -1))
FN(softmax_dtype_f64, mx_softmax_dtype(a, 1, MX_F64))
FN(log_softmax_dtype_f64, mx_log_softmax_dtype(a, -1, MX_F64))
FN(softmax_dtype_f32, mx_softmax_dtype(a, 0, MX_F32))
FN(log_softmax_dtype_f32, mx_log_softmax_dtype(a, 1, MX_F32))
VJP(softmax_backward, mx_softmax(x, 1), in[0], in[1])
VJP(log_softmax_backward, mx_log_softmax(x, 1), in[0], in[1])

/* gather, scatter, index_* */
FN(gather_dim1, mx_gather(a, 1, IDX(MX_SHAPE(3, 2), 0, 3, 2, 2, 1, 0)))
FN(gather_dim0, mx_gather(a, 0, IDX(MX_SHAPE(2, 4), 2, 0, 1, 2, 0, 0, 2, 1)))
FN(gather_neg, mx_gather(a, -1, IDX(MX_SHAPE(2, 2, 1), 3, 0, 1, 1)))
FN(scatter_dim1, mx_scatter(a, 1, IDX(MX_SHAPE(3, 2), 0, 4, 2, 1, 3, 0), b))
FN(scatter_dim0, mx_scatter(a, 0, IDX(MX_SHAPE(2, 3), 0, 1, 3, 2, 3, 0), b))
FN(scatter_small_index, mx_scatter(a, 1, IDX(MX_SHAPE(2, 2), 1, 3, 4, 0), b))
FN(scatter_add_dim1, mx_scatter_add(a, 1, IDX(MX_SHAPE(3, 2), 0, 0, 2, 4, 1, 1), b))
FN(scatter_add_dim0, mx_scatter_add(a, 0, IDX(MX_SHAPE(3, 3), 1, 0, 1, 1, 2, 1, 3, 0, 1), b))
FN(index_select_dim0, mx_index_select(a, 0, IDX(MX_SHAPE(3), 3, 0, 3)))
FN(index_select_dim1, mx_index_select(a, 1, IDX(MX_SHAPE(2), 4, 1)))
FN(index_select_neg, mx_index_select(a, -1, IDX(MX_SHAPE(4), 0, 3, 3, 1)))
FN(index_add_dim0, mx_index_add(a, 0, IDX(MX_SHAPE(3), 1, 3, 1), b, 2.5))
FN(index_add_dim1, mx_index_add(a, 1, IDX(MX_SHAPE(2), 4, 0), b, 1))
FN(index_add_neg_alpha, mx_index_add(a, -1, IDX(MX_SHAPE(2), 2, 2), b, -0.5))
FN(index_copy_dim0, mx_index_copy(a, 0, IDX(MX_SHAPE(2), 3, 1), b))
FN(index_copy_dim1, mx_index_copy(a, 1, IDX(MX_SHAPE(3), 0, 4, 2), b))
FN(index_put_1, mx_index_put(a, NLIST(IDX(MX_SHAPE(2), 2, 0)), b, false))
FN(index_put_1_acc, mx_index_put(a, NLIST(IDX(MX_SHAPE(3), 1, 3, 1)), b, true))
FN(index_put_1_bcast, mx_index_put(a, NLIST(IDX(MX_SHAPE(2), 0, 2)), b, false))
FN(index_put_2, mx_index_put(a, NLIST(IDX(MX_SHAPE(3), 0, 2, 1), IDX(MX_SHAPE(3), 3, 0, 1)), b, false))
FN(index_put_2_acc, mx_index_put(a, NLIST(IDX(MX_SHAPE(3), 0, 2, 0), IDX(MX_SHAPE(3), 1, 3, 1)), b, true))
FN(index_put_2_bcast, mx_index_put(a, NLIST(IDX(MX_SHAPE(2, 1), 0, 2), IDX(MX_SHAPE(3), 1, 3, 0)), b, false))
FN(index_put_2_rest, mx_index_put(a, NLIST(IDX(MX_SHAPE(2), 0, 2), IDX(MX_SHAPE(2), 1, 0)), b, true))
FN(index_put_negative, mx_index_put(a, NLIST(IDX(MX_SHAPE(2), 1, -1), IDX(MX_SHAPE(2), -1, 0)), b, false))
FN(embedding, mx_embedding(a, IDX(MX_SHAPE(2, 2), 0, 4, 4, 2)))
FN(embedding_1d, mx_embedding(a, IDX(MX_SHAPE(4), 1, 1, 0, 3)))

/* cat, stack, split, chunk */
FN(cat_dim0, mx_cat(NLIST(a, b, c), 0))
FN(cat_dim1, mx_cat(NLIST(a, b, c), 1))
FN(cat_neg, mx_cat(NLIST(a, b), -1))
FN(cat_one, mx_cat(NLIST(a), 0))
FN(cat_empty, mx_cat(NLIST(a, b), 0))
FN(stack_dim0, mx_stack(NLIST(a, b, c), 0))
FN(stack_dim1, mx_stack(NLIST(a, b), 1))
FN(stack_neg, mx_stack(NLIST(a, b), -1))

/* piece k of split/chunk, or -1: the pieces joined back in another order, scaled apart */
static mx_tensor *piece(mx_tensor *a, bool chunk, int64_t size, int dim, int k) {
  mx_tensor *p[8] = {0};
  int n = chunk ? mx_chunk(a, (int)size, dim, p, 8) : mx_split(a, size, dim, p, 8);
  if (n < 1) return NULL;
  if (k >= n) k = n - 1; /* fewer pieces than the case's own shape gives (the fuzz target's shapes): the last */
  if (k >= 0) return p[k];
  mx_tensor *parts[8];
  for (int i = 0; i < n; i++) parts[i] = mx_mul_scalar(p[n - 1 - i], i + 1);
  return mx_cat(n, parts, dim);
}
FN(split_first, piece(a, false, 2, 0, 0))
FN(split_last, piece(a, false, 2, 0, 2))
FN(split_all, piece(a, false, 2, 0, -1))
FN(split_dim1, piece(a, false, 3, 1, 1))
FN(chunk_mid, piece(a, true, 3, -1, 1))
FN(chunk_all, piece(a, true, 4, 0, -1))

/* pad, flip, roll, repeat, tril, triu, one_hot, dropout */
FN(pad_const, mx_pad(a, MX_SHAPE(1, 2), MX_PAD_CONSTANT, 0.5))
FN(pad_const_2d, mx_pad(a, MX_SHAPE(1, 0, 2, 1), MX_PAD_CONSTANT, -1.5))
FN(pad_neg, mx_pad(a, MX_SHAPE(-1, 2, 1, -2), MX_PAD_CONSTANT, 0))
FN(pad_reflect, mx_pad(a, MX_SHAPE(2, 3), MX_PAD_REFLECT, 0))
FN(pad_reflect_2d, mx_pad(a, MX_SHAPE(1, 2, 3, 1), MX_PAD_REFLECT, 0))
FN(pad_replicate, mx_pad(a, MX_SHAPE(3, 1), MX_PAD_REPLICATE, 0))
FN(pad_replicate_2d, mx_pad(a, MX_SHAPE(2, 0, 1, 3), MX_PAD_REPLICATE, 0))
FN(flip_dim0, mx_flip(a, MX_DIMS(0)))
FN(flip_dims02, mx_flip(a, MX_DIMS(0, 2)))
FN(flip_neg, mx_flip(a, MX_DIMS(-1)))
FN(roll_pos, mx_roll(a, 2, 1))
FN(roll_neg, mx_roll(a, -7, 1))
FN(roll_dim0, mx_roll(a, 1, 0))
FN(roll_neg_dim, mx_roll(a, 3, -1))
FN(repeat, mx_repeat(a, MX_SHAPE(2, 1)))
FN(repeat_lead, mx_repeat(a, MX_SHAPE(2, 1, 3)))
FN(repeat_1d, mx_repeat(a, MX_SHAPE(2, 2)))
FN(tril_0, mx_tril(a, 0))
FN(tril_m1, mx_tril(a, -1))
FN(tril_p1, mx_tril(a, 1))
FN(tril_batched, mx_tril(a, 0))
FN(triu_0, mx_triu(a, 0))
FN(triu_m1, mx_triu(a, -1))
FN(triu_p1, mx_triu(a, 1))
FN(triu_batched, mx_triu(a, 1))
static mx_tensor *f_one_hot_neg1(int n, mx_tensor *const *in, void *ctx) {
  (void)n, (void)in, (void)ctx;
  return mx_one_hot(IDX(MX_SHAPE(2, 2), 0, 3, 2, 0), -1);
}
static mx_tensor *f_one_hot_5(int n, mx_tensor *const *in, void *ctx) {
  (void)n, (void)in, (void)ctx;
  return mx_one_hot(IDX(MX_SHAPE(3), 1, 0, 4), 5);
}
FN(dropout_eval, mx_dropout(a, 0.5, false, NULL))
FN(dropout_p0, mx_dropout(a, 0, true, NULL))
FN(dropout_p1, mx_dropout(a, 1, true, NULL))

/* pooling */
#define MAXPOOL(name, spatial, k, s, p, d, want_indices)                                        \
  static mx_tensor *f_##name(int n, mx_tensor *const *in, void *ctx) {                         \
    (void)n, (void)ctx;                                                                        \
    mx_tensor *v = NULL, *i = NULL;                                                            \
    mx_status st = mx_max_pool_with_indices(in[0], spatial, MX_SHAPE k, MX_SHAPE s, MX_SHAPE p, \
                                            MX_SHAPE d, &v, &i);                               \
    return values_of(st, v, i, want_indices);                                                  \
  }
FN(max_pool1d, mx_max_pool(a, 1, MX_SHAPE(3), MX_SHAPE(2), MX_SHAPE(1)))
FN(max_pool2d, mx_max_pool(a, 2, MX_SHAPE(3, 2), MX_SHAPE(2, 1), MX_SHAPE(1, 0)))
FN(max_pool2d_default_stride, mx_max_pool(a, 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT))
MAXPOOL(max_pool2d_dilation, 2, (2), (1), (1), (2), false)
MAXPOOL(max_pool3d, 3, (2), (2, 1, 1), (1, 0, 1), (1), false)
MAXPOOL(max_pool3d_stride, 3, (3), (2), (1), (1), false)
MAXPOOL(max_pool1d_indices, 1, (3), (2), (1), (1), true)
MAXPOOL(max_pool2d_indices, 2, (3, 2), (2, 1), (1, 0), (1), true)
MAXPOOL(max_pool2d_dilation_indices, 2, (2), (1), (1), (2), true)
MAXPOOL(max_pool3d_indices, 3, (2), (2, 1, 1), (1, 0, 1), (1), true)
VJP(max_pool_backward, mx_max_pool(x, 2, MX_SHAPE(3, 2), MX_SHAPE(2, 1), MX_SHAPE(1, 0)), in[0], in[1])
FN(avg_pool1d, mx_avg_pool(a, 1, MX_SHAPE(3), MX_SHAPE(2), MX_SHAPE(1), true))
FN(avg_pool1d_exclude_pad, mx_avg_pool(a, 1, MX_SHAPE(3), MX_SHAPE(2), MX_SHAPE(1), false))
FN(avg_pool2d, mx_avg_pool(a, 2, MX_SHAPE(3, 2), MX_SHAPE(2, 1), MX_SHAPE(1, 1), true))
FN(avg_pool2d_exclude_pad, mx_avg_pool(a, 2, MX_SHAPE(3, 2), MX_SHAPE(2, 1), MX_SHAPE(1, 1), false))
FN(avg_pool2d_default_stride, mx_avg_pool(a, 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, true))
FN(avg_pool3d, mx_avg_pool(a, 3, MX_SHAPE(2), MX_SHAPE(2, 1, 1), MX_SHAPE(1, 0, 1), true))
FN(avg_pool3d_exclude_pad, mx_avg_pool(a, 3, MX_SHAPE(3), MX_SHAPE(2), MX_SHAPE(1), false))
VJP(avg_pool_backward, mx_avg_pool(x, 2, MX_SHAPE(3, 2), MX_SHAPE(2, 1), MX_SHAPE(1, 1), false),
    op_case_zero_leaf(MX_SHAPE(1, 2, 5, 5), in[0]), in[0])
FN(adaptive_avg_pool2d_div, mx_adaptive_avg_pool2d(a, 2, 3))
FN(adaptive_avg_pool2d_nondiv, mx_adaptive_avg_pool2d(a, 3, 4))
FN(adaptive_avg_pool2d_3d, mx_adaptive_avg_pool2d(a, 3, 2))
FN(adaptive_avg_pool2d_global, mx_adaptive_avg_pool2d(a, 1, 1))
FN(adaptive_avg_pool2d_up, mx_adaptive_avg_pool2d(a, 4, 5))

/* normalisation (RUNNING_MEAN and RUNNING_VAR: op_case_table.h) */
FN(batch_norm_train, mx_batch_norm(a, RUNNING_MEAN(a), RUNNING_VAR(a), b, c, true, 0.1, 1e-5))
FN(batch_norm_train_4d, mx_batch_norm(a, NULL, NULL, b, c, true, 0.1, 1e-5))
FN(batch_norm_train_noaffine, mx_batch_norm(a, NULL, NULL, NULL, NULL, true, 0.1, 1e-5))
FN(batch_norm_eval, mx_batch_norm(a, RUNNING_MEAN(a), RUNNING_VAR(a), b, c, false, 0.1, 1e-5))
FN(batch_norm_eval_noaffine, mx_batch_norm(a, RUNNING_MEAN(a), RUNNING_VAR(a), NULL, NULL, false, 0.1, 1e-3))
/* the running statistics after two training steps (on x, then x * x), momentum 0.3 */
static mx_tensor *running_after_two_steps(mx_tensor *x, bool want_var) {
  mx_tensor *mean = RUNNING_MEAN(x), *var = RUNNING_VAR(x);
  if (!mx_batch_norm(x, mean, var, NULL, NULL, true, 0.3, 1e-5)) return NULL;
  if (!mx_batch_norm(mx_mul(x, x), mean, var, NULL, NULL, true, 0.3, 1e-5)) return NULL;
  return want_var ? var : mean;
}
FN(batch_norm_running_mean, running_after_two_steps(a, false))
FN(batch_norm_running_var, running_after_two_steps(a, true))
FN(layer_norm_1, mx_layer_norm(a, MX_SHAPE(4), b, c, 1e-5))
FN(layer_norm_2, mx_layer_norm(a, MX_SHAPE(3, 4), b, c, 1e-5))
FN(layer_norm_noaffine, mx_layer_norm(a, MX_SHAPE(4), NULL, NULL, 1e-5))
FN(layer_norm_weight_only, mx_layer_norm(a, MX_SHAPE(4), b, NULL, 1e-5))
FN(layer_norm_bias_only, mx_layer_norm(a, MX_SHAPE(4), NULL, b, 1e-5))
FN(group_norm, mx_group_norm(a, 2, b, c, 1e-5))
FN(group_norm_noaffine, mx_group_norm(a, 3, NULL, NULL, 1e-5))
FN(group_norm_per_channel, mx_group_norm(a, 3, b, c, 1e-5))
FN(group_norm_one_group, mx_group_norm(a, 1, NULL, NULL, 1e-5))

/* convolution: x, weight[, bias] */
FN(conv1d, mx_conv1d(a, b, c, MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT, 1))
FN(conv1d_dilation, mx_conv1d(a, b, NULL, MX_DEFAULT, MX_SHAPE(2), MX_SHAPE(2), 1))
FN(conv1d_groups, mx_conv1d(a, b, c, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 2))
FN(conv2d, mx_conv2d(a, b, c, MX_SHAPE(1), MX_SHAPE(1), MX_DEFAULT, 1))
FN(conv2d_gg, mx_conv2d(a, b, c, MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT, 1))
FN(conv2d_stride_dilation, mx_conv2d(a, b, NULL, MX_SHAPE(2, 1), MX_SHAPE(0, 1), MX_SHAPE(2, 1), 1))
FN(conv2d_groups, mx_conv2d(a, b, c, MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 2))
FN(conv2d_depthwise, mx_conv2d(a, b, NULL, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, 3))
FN(conv3d, mx_conv3d(a, b, c, MX_DEFAULT, MX_SHAPE(1, 0, 1), MX_DEFAULT, 1))
FN(conv3d_stride, mx_conv3d(a, b, NULL, MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT, 1))
FN(conv3d_groups_dilation, mx_conv3d(a, b, c, MX_DEFAULT, MX_SHAPE(1), MX_SHAPE(2), 2))
FN(conv_transpose1d, mx_conv_transpose1d(a, b, c, MX_SHAPE(2), MX_SHAPE(1), MX_SHAPE(1), MX_DEFAULT, 1))
FN(conv_transpose1d_groups, mx_conv_transpose1d(a, b, NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 2))
FN(conv_transpose2d, mx_conv_transpose2d(a, b, c, MX_SHAPE(2), MX_SHAPE(1), MX_SHAPE(1), MX_DEFAULT, 1))
FN(conv_transpose2d_groups_dilation,
   mx_conv_transpose2d(a, b, NULL, MX_SHAPE(2), MX_DEFAULT, MX_SHAPE(1), MX_SHAPE(2), 2))
FN(conv_transpose3d, mx_conv_transpose3d(a, b, c, MX_SHAPE(2), MX_DEFAULT, MX_SHAPE(1, 0, 1), MX_DEFAULT, 1))
VJP(conv_backward_data, mx_conv2d(x, in[1], NULL, MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT, 1),
    op_case_zero_leaf(MX_SHAPE(1, 2, 5, 5), in[0]), in[0])
VJP(conv_backward_weight, mx_conv2d(in[0], x, NULL, MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT, 1),
    op_case_zero_leaf(MX_SHAPE(3, 2, 3, 3), in[0]), in[1])

/* sort, argsort, topk: values or indices (sort is stable; argsort passes stable = true) */
#define SORTED(name, dim, desc, want_indices)                                \
  static mx_tensor *f_##name(int n, mx_tensor *const *in, void *ctx) {      \
    (void)n, (void)ctx;                                                     \
    mx_tensor *v = NULL, *i = NULL;                                         \
    mx_status st = mx_sort(in[0], dim, desc, true, &v, &i);                 \
    return values_of(st, v, i, want_indices);                               \
  }
#define TOPK(name, k, dim, largest, want_indices)                           \
  static mx_tensor *f_##name(int n, mx_tensor *const *in, void *ctx) {      \
    (void)n, (void)ctx;                                                     \
    mx_tensor *v = NULL, *i = NULL;                                         \
    mx_status st = mx_topk(in[0], k, dim, largest, true, &v, &i);           \
    return values_of(st, v, i, want_indices);                               \
  }
SORTED(sort_dim1, 1, false, false)
SORTED(sort_dim1_indices, 1, false, true)
SORTED(sort_desc_dim0, 0, true, false)
SORTED(sort_desc_dim0_indices, 0, true, true)
SORTED(sort_last, -1, false, false)
SORTED(sort_last_indices, -1, false, true)
SORTED(sort_desc_last_indices, -1, true, true)
/* a strided input: the transpose of a, sorted along its dim 1 */
static mx_tensor *sort_of_transpose(mx_tensor *a, bool want_indices) {
  mx_tensor *v = NULL, *i = NULL;
  mx_status st = mx_sort(mx_transpose(a, 0, 1), 1, false, true, &v, &i);
  return values_of(st, v, i, want_indices);
}
FN(sort_transposed, sort_of_transpose(a, false))
FN(sort_transposed_indices, sort_of_transpose(a, true))
FN(argsort_dim1, mx_argsort(a, 1, false, true))
FN(argsort_desc_dim0, mx_argsort(a, 0, true, true))
TOPK(topk_k2_dim1, 2, 1, true, false)
TOPK(topk_k2_dim1_indices, 2, 1, true, true)
TOPK(topk_smallest_k3_dim0, 3, 0, false, false)
TOPK(topk_smallest_k3_dim0_indices, 3, 0, false, true)
TOPK(topk_k0, 0, -1, true, false)

const op_case op_cases_basic[] = {
    /* unary, on (2, 3), each in its domain */
    UN(neg, ANY, GG),
    UN(abs, AWAY, GG),
    UN(sign, AWAY, GG),
    UN(exp, ANY, GG),
    UN(expm1, ANY, GG),
    UN(log, POS, GG),
    UN(log1p, POS, GG),
    UN(log2, POS, GG),
    UN(log10, POS, GG),
    UN(sqrt, POS, GG),
    UN(rsqrt, POS, GG),
    UN(reciprocal, AWAY, GG),
    UN(sin, ANY, GG),
    UN(cos, ANY, GG),
    UN(tan, UNIT, GG),
    UN(asin, UNIT, GG),
    UN(acos, UNIT, GG),
    UN(atan, ANY, GG),
    UN(sinh, ANY, GG),
    UN(cosh, ANY, GG),
    UN(tanh, ANY, GG),
    UN(sigmoid, ANY, GG),
    UN(relu, AWAY, GG),
    UN(leaky_relu, AWAY, GG),
    UN(elu, AWAY, GG),
    UN(gelu, ANY, GG),
    UN(gelu_tanh, ANY, GG),
    UN(silu, ANY, GG),
    UN(softplus, ANY, GG),
    UN(softplus_b2_t3, ANY, GG),
    UN(erf, ANY, GG),
    UN(erfinv, UNIT, GG),
    UN(floor, NONINT, GG),
    UN(ceil, NONINT, GG),
    UN(round, NONINT, GG),
    UN(trunc, NONINT, GG),
    UN(clamp, ANY, GG),
    UN(clamp_min, ANY, GG),
    UN(clamp_max, ANY, GG),

    /* binary: (2, 3) with (3) broadcast */
    BIN(add, ANY, ANY, GG),
    BIN(add_scaled, ANY, ANY, GG),
    BIN(sub, ANY, ANY, GG),
    BIN(mul, ANY, ANY, GG),
    BIN(div, ANY, AWAY, GG),
    BIN(pow, POS, ANY, GG),
    BIN(remainder, ANY, AWAY, GG),
    BIN(maximum, ANY, ANY, GG),
    BIN(minimum, ANY, ANY, GG),
    BIN(atan2, AWAY, AWAY, GG),
    BIN(relu_backward, ANY, AWAY, GG), /* b: a relu output, away from its kink */
    {"add_bcast", f_add, 2, {SH(2, 1, 3), SH(4, 1)}, {ANY, ANY}, GG, 0, 0, 0},
    {"mul_bcast", f_mul, 2, {SH(2, 1, 3), SH(4, 1)}, {ANY, ANY}, GG, 0, 0, 0},
    {"sub_bcast_left", f_sub, 2, {SH(3), SH(2, 3)}, {ANY, ANY}, GG, 0, 0, 0},
    {"mul_0d", f_mul, 2, {SH(2, 3), SH0}, {ANY, ANY}, GG, 0, 0, 0},
    {"div_0d", f_div, 2, {SH(2, 3), SH0}, {ANY, AWAY}, GG, 0, 0, 0},
    {"pow_0d", f_pow, 2, {SH(2, 3), SH0}, {POS, ANY}, GG, 0, 0, 0},
    UN(add_scalar, ANY, GG),
    UN(sub_scalar, ANY, GG),
    UN(rsub_scalar, ANY, GG),
    UN(mul_scalar, ANY, GG),
    UN(div_scalar, ANY, GG),
    UN(rdiv_scalar, AWAY, GG),
    UN(pow_scalar, POS, GG),
    UN(pow_scalar_int, ANY, GG),
    UN(pow_scalar_neg, POS, GG),
    UN(rpow_scalar, ANY, GG),

    /* comparisons and logic: no gradient (PyTorch fixtures only) */
    BIN(eq, ANY, ANY, 0),
    BIN(ne, ANY, ANY, 0),
    BIN(lt, ANY, ANY, 0),
    BIN(le, ANY, ANY, 0),
    BIN(gt, ANY, ANY, 0),
    BIN(ge, ANY, ANY, 0),
    BIN(logical_and, ANY, ANY, 0),
    BIN(logical_or, ANY, ANY, 0),
    BIN(logical_xor, ANY, ANY, 0),
    UN(logical_not, ANY, 0),
    UN(eq_scalar, ANY, 0),
    UN(gt_scalar, ANY, 0),
    UN(ge_scalar, ANY, 0),
    UN(lt_scalar, ANY, 0),
    UN(le_scalar, ANY, 0),

    /* ternary */
    CASE3(where, SH(2, 3), BOOL, SH(2, 3), ANY, SH(3), ANY, GG),
    {"where_bcast", f_where, 3, {SH(3), SH(2, 1), SH(2, 3)}, {BOOL, ANY, ANY}, GG, 0, 0, 0},
    CASE3(addcmul, SH(2, 3), ANY, SH(3), ANY, SH(2, 3), ANY, GG),
    CASE3(addcdiv, SH(2, 3), ANY, SH(3), ANY, SH(2, 3), AWAY, GG),
    CASE3(lerp, SH(2, 3), ANY, SH(2, 3), ANY, SH(3), ANY, GG),
    CASE2(masked_fill, SH(2, 3), ANY, SH(3), BOOL, GG),

    /* views, copies and casts */
    CASE1(reshape, SH(2, 3, 4), ANY, GG),
    CASE1(reshape_infer, SH(2, 3, 4), ANY, GG),
    CASE1(reshape_copy, SH(3, 4), ANY, GG),
    CASE1(view, SH(2, 3, 4), ANY, GG),
    CASE1(transpose, SH(2, 3, 4), ANY, GG),
    CASE1(permute, SH(2, 3, 4), ANY, GG),
    CASE1(squeeze, SH(2, 1, 3), ANY, GG),
    CASE1(squeeze_all, SH(2, 1, 3, 1), ANY, GG),
    CASE1(unsqueeze, SH(2, 3), ANY, GG),
    CASE1(unsqueeze_neg, SH(2, 3), ANY, GG),
    CASE1(slice, SH(3, 7), ANY, GG),
    CASE1(slice_neg, SH(3, 7), ANY, GG),
    CASE1(slice_dim0, SH(5, 2), ANY, GG),
    CASE1(narrow, SH(2, 3, 4), ANY, GG),
    CASE1(narrow_neg, SH(2, 3, 4), ANY, GG),
    CASE1(select, SH(2, 3, 4), ANY, GG),
    CASE1(select_neg, SH(2, 3, 4), ANY, GG),
    CASE1(expand, SH(3, 1), ANY, GG),
    CASE1(expand_keep, SH(3, 1), ANY, GG),
    CASE1(broadcast_to, SH(3, 1), ANY, GG),
    CASE1(flatten, SH(2, 3, 4), ANY, GG),
    CASE1(flatten_all, SH(2, 3, 4), ANY, GG),
    CASE1(contiguous, SH(2, 3), ANY, GG),
    CASE1(clone, SH(2, 3), ANY, GG),
    /* through float32: finite differences need a wide step */
    {"to_f32", f_to_f32, 1, {SH(2, 3)}, {ANY}, GC, 1e-3, 1e-3, 1e-3},
    CASE1(to_f64, SH(2, 3), ANY, GG),
    CASE1(to_f16, SH(2, 3), ANY, 0),
    CASE1(to_bf16, SH(2, 3), ANY, 0),
    CASE1(to_i64, SH(2, 3), ANY, 0),
    CASE1(to_i32, SH(2, 3), ANY, 0),
    CASE1(to_bool, SH(2, 3), ANY, 0),

    /* reductions and scans */
    CASE1(sum_all, SH(2, 3, 4), ANY, GG),
    CASE1(sum_dim1, SH(2, 3, 4), ANY, GG),
    CASE1(sum_dims02_keep, SH(2, 3, 4), ANY, GG),
    CASE1(sum_neg_dim, SH(2, 3), ANY, GG),
    CASE1(mean_all, SH(2, 3, 4), ANY, GG),
    CASE1(mean_dim0, SH(2, 3, 4), ANY, GG),
    CASE1(mean_dims12_keep, SH(2, 3, 4), ANY, GG),
    CASE1(prod_all, SH(2, 3), AWAY, GG),
    CASE1(prod_dim1, SH(3, 4), AWAY, GG),
    CASE1(amax_all, SH(3, 4), ANY, GG),
    CASE1(amax_dim1, SH(3, 4), ANY, GG),
    CASE1(amax_dims01_keep, SH(2, 3, 4), ANY, GG),
    CASE1(amin_all, SH(3, 4), ANY, GG),
    CASE1(amin_dim0, SH(3, 4), ANY, GG),
    CASE1(max_all, SH(3, 4), ANY, GG),
    CASE1(min_all, SH(3, 4), ANY, GG),
    CASE1(max_dim1, SH(3, 4), ANY, GG),
    CASE1(max_dim1_keep, SH(3, 4), ANY, GG),
    CASE1(min_dim0, SH(3, 4), ANY, GG),
    CASE1(max_dim1_indices, SH(3, 4), ANY, 0),
    CASE1(min_dim0_indices, SH(3, 4), ANY, 0),
    CASE1(argmax_dim1, SH(3, 4), ANY, 0),
    CASE1(argmax_keep, SH(3, 4), ANY, 0),
    CASE1(argmax_flat, SH(3, 4), ANY, 0),
    CASE1(argmin_dim0, SH(3, 4), ANY, 0),
    CASE1(argmin_flat, SH(3, 4), ANY, 0),
    CASE1(all_all, SH(3, 4), BOOL, 0),
    CASE1(all_dim1, SH(3, 4), BOOL, 0),
    CASE1(any_all, SH(3, 4), BOOL, 0),
    CASE1(any_dim0, SH(3, 4), BOOL, 0),
    CASE1(var_dim1_c1, SH(3, 4), ANY, GG),
    CASE1(var_dim1_c0, SH(3, 4), ANY, GG),
    CASE1(var_all_c1, SH(3, 4), ANY, GG),
    CASE1(var_dims01_keep, SH(2, 3, 4), ANY, GG),
    CASE1(std_dim1_c1, SH(3, 4), ANY, GG),
    CASE1(std_dim1_c0, SH(3, 4), ANY, GG),
    CASE1(std_all_c0, SH(3, 4), ANY, GG),
    CASE1(logsumexp_dim1, SH(3, 4), ANY, GG),
    CASE1(logsumexp_all, SH(3, 4), ANY, GG),
    CASE1(logsumexp_keep, SH(3, 4), ANY, GG),
    CASE1(norm1_all, SH(3, 4), AWAY, GG),
    CASE1(norm2_all, SH(3, 4), ANY, GG),
    CASE1(norminf_all, SH(3, 4), AWAY, GG),
    CASE1(norm2_dim1, SH(3, 4), ANY, GG),
    CASE1(norm1_dim0_keep, SH(3, 4), AWAY, GG),
    CASE1(norminf_dim1, SH(3, 4), AWAY, GG),
    CASE1(cumsum_dim1, SH(3, 4), ANY, GG),
    CASE1(cumsum_dim0, SH(3, 4), ANY, GG),
    CASE1(cumsum_neg, SH(3, 4), ANY, GG),
    CASE1(cumprod_dim1, SH(3, 4), AWAY, GG),
    CASE1(cumprod_dim0, SH(3, 4), AWAY, GG),

    /* linear algebra */
    CASE2(mm, SH(2, 3), ANY, SH(3, 4), ANY, GG),
    CASE2(bmm, SH(2, 2, 3), ANY, SH(2, 3, 4), ANY, GG),
    CASE2(matmul_1d1d, SH(3), ANY, SH(3), ANY, GG),
    CASE2(matmul_2d1d, SH(2, 3), ANY, SH(3), ANY, GG),
    CASE2(matmul_1d2d, SH(3), ANY, SH(3, 4), ANY, GG),
    CASE2(matmul_2d2d, SH(2, 3), ANY, SH(3, 4), ANY, GG),
    CASE2(matmul_3d2d, SH(2, 2, 3), ANY, SH(3, 4), ANY, GG),
    CASE2(matmul_2d3d, SH(2, 3), ANY, SH(2, 3, 4), ANY, GG),
    CASE2(matmul_bcast, SH(2, 1, 2, 3), ANY, SH(3, 3, 4), ANY, GG),
    CASE2(matmul_1d3d, SH(3), ANY, SH(2, 3, 4), ANY, GG),
    CASE2(matmul_3d1d, SH(2, 2, 3), ANY, SH(3), ANY, GG),
    CASE3(addmm, SH(2, 4), ANY, SH(2, 3), ANY, SH(3, 4), ANY, GG),
    CASE3(addmm_bcast, SH(4), ANY, SH(2, 3), ANY, SH(3, 4), ANY, GG),
    CASE3(addmm_beta0, SH(2, 4), ANY, SH(2, 3), ANY, SH(3, 4), ANY, GG),
    CASE3(addbmm, SH(2, 4), ANY, SH(3, 2, 3), ANY, SH(3, 3, 4), ANY, GG),
    CASE3(baddbmm, SH(3, 2, 4), ANY, SH(3, 2, 3), ANY, SH(3, 3, 4), ANY, GG),
    CASE3(baddbmm_bcast, SH(2, 4), ANY, SH(3, 2, 3), ANY, SH(3, 3, 4), ANY, GG),
    CASE3(addmv, SH(2), ANY, SH(2, 3), ANY, SH(3), ANY, GG),
    CASE3(addr, SH(2, 3), ANY, SH(2), ANY, SH(3), ANY, GG),
    CASE2(mv, SH(2, 3), ANY, SH(3), ANY, GG),
    CASE2(dot, SH(3), ANY, SH(3), ANY, GG),
    CASE2(outer, SH(2), ANY, SH(3), ANY, GG),

    /* ops on strided views and stride-0 (expanded) inputs */
    CASE1(exp_transposed, SH(3, 2), ANY, GG),
    CASE2(mul_transposed, SH(3, 2), ANY, SH(3), ANY, GG),
    CASE2(add_sliced, SH(2, 7), ANY, SH(3), ANY, GG),
    CASE1(sum_transposed, SH(2, 3, 4), ANY, GG),
    CASE1(amax_transposed, SH(3, 4), ANY, GG),
    CASE1(cumsum_transposed, SH(3, 4), ANY, GG),
    CASE2(mm_transposed, SH(3, 2), ANY, SH(4, 3), ANY, GG),
    CASE2(bmm_transposed, SH(2, 2, 3), ANY, SH(2, 4, 3), ANY, GG),
    CASE2(mm_expanded, SH(1, 3), ANY, SH(3, 4), ANY, GG),
    CASE2(mm_sliced, SH(2, 6), ANY, SH(4, 4), ANY, GG),
    CASE3(where_transposed, SH(3, 2), BOOL, SH(2, 3), ANY, SH(3), ANY, GG),

    /* softmax, log_softmax, softmin (the _dtype variants compute in the dtype given), and the
     * gradients of softmax and log_softmax as functions of (x, grad) */
    CASE1(softmax_dim0, SH(3, 4), ANY, GG),
    CASE1(softmax_dim1, SH(3, 4), ANY, GG),
    CASE1(softmax_neg, SH(2, 3, 4), ANY, GG),
    CASE1(log_softmax_dim0, SH(3, 4), ANY, GG),
    CASE1(log_softmax_dim1, SH(3, 4), ANY, GG),
    CASE1(log_softmax_neg, SH(2, 3, 4), ANY, GG),
    CASE1(softmin_dim0, SH(3, 4), ANY, GG),
    CASE1(softmin_dim1, SH(3, 4), ANY, GG),
    CASE1(softmin_neg, SH(2, 3, 4), ANY, GG),
    CASE1(softmax_dtype_f64, SH(3, 4), ANY, GG),
    CASE1(log_softmax_dtype_f64, SH(3, 4), ANY, GG),
    CASE1(softmax_dtype_f32, SH(3, 4), ANY, 0),
    CASE1(log_softmax_dtype_f32, SH(3, 4), ANY, 0),
    CASE2(softmax_backward, SH(2, 3), ANY, SH(2, 3), ANY, GG),
    CASE2(log_softmax_backward, SH(2, 3), ANY, SH(2, 3), ANY, GG),

    /* gather, scatter and index_*: the indices are in the functions (duplicates where the op
     * accumulates) */
    CASE1(gather_dim1, SH(3, 4), ANY, GG),
    CASE1(gather_dim0, SH(3, 4), ANY, GG),
    CASE1(gather_neg, SH(2, 3, 4), ANY, GC),
    CASE2(scatter_dim1, SH(3, 5), ANY, SH(3, 2), ANY, GG),
    CASE2(scatter_dim0, SH(4, 3), ANY, SH(2, 3), ANY, GC),
    /* src larger than the index: forward only (its gradient is gather(grad), of the index's
     * shape; PyTorch 1.13 rejects it too) */
    CASE2(scatter_small_index, SH(3, 5), ANY, SH(3, 3), ANY, 0),
    CASE2(scatter_add_dim1, SH(3, 5), ANY, SH(3, 2), ANY, GG),
    CASE2(scatter_add_dim0, SH(4, 3), ANY, SH(3, 3), ANY, GC),
    CASE1(index_select_dim0, SH(4, 3), ANY, GG),
    CASE1(index_select_dim1, SH(2, 5), ANY, GC),
    CASE1(index_select_neg, SH(2, 3, 4), ANY, GC),
    CASE2(index_add_dim0, SH(4, 3), ANY, SH(3, 3), ANY, GG),
    CASE2(index_add_dim1, SH(2, 5), ANY, SH(2, 2), ANY, GC),
    CASE2(index_add_neg_alpha, SH(3, 4), ANY, SH(3, 2), ANY, GC),
    CASE2(index_copy_dim0, SH(4, 3), ANY, SH(2, 3), ANY, GG),
    CASE2(index_copy_dim1, SH(2, 5), ANY, SH(2, 3), ANY, GC),
    CASE2(index_put_1, SH(4, 3), ANY, SH(2, 3), ANY, GG),
    CASE2(index_put_1_acc, SH(4, 3), ANY, SH(3, 3), ANY, GG),
    CASE2(index_put_1_bcast, SH(4, 3), ANY, SH(3), ANY, GC),
    CASE2(index_put_2, SH(3, 4), ANY, SH(3), ANY, GC),
    CASE2(index_put_2_acc, SH(3, 4), ANY, SH(3), ANY, GC),
    CASE2(index_put_2_bcast, SH(3, 4), ANY, SH(2, 3), ANY, GC),
    CASE2(index_put_2_rest, SH(3, 2, 4), ANY, SH(2, 4), ANY, GC),
    CASE2(index_put_negative, SH(3, 4), ANY, SH(2), ANY, 0),
    CASE1(embedding, SH(5, 3), ANY, GG),
    CASE1(embedding_1d, SH(4, 2), ANY, GC),

    /* cat (mixed sizes along the dim), stack, split and chunk (pieces and their gradients) */
    CASE3(cat_dim0, SH(2, 3), ANY, SH(1, 3), ANY, SH(3, 3), ANY, GG),
    CASE3(cat_dim1, SH(2, 1), ANY, SH(2, 3), ANY, SH(2, 2), ANY, GC),
    CASE2(cat_neg, SH(2, 2, 1), ANY, SH(2, 2, 3), ANY, GC),
    CASE1(cat_one, SH(2, 3), ANY, GC),
    CASE2(cat_empty, SH(2, 3), ANY, SH(0, 3), ANY, GC),
    CASE3(stack_dim0, SH(2, 3), ANY, SH(2, 3), ANY, SH(2, 3), ANY, GG),
    CASE2(stack_dim1, SH(2, 3), ANY, SH(2, 3), ANY, GC),
    CASE2(stack_neg, SH(2, 3), ANY, SH(2, 3), ANY, GC),
    CASE1(split_first, SH(5, 3), ANY, GC),
    CASE1(split_last, SH(5, 3), ANY, GC),
    CASE1(split_all, SH(5, 3), ANY, GG),
    CASE1(split_dim1, SH(2, 5), ANY, GC),
    CASE1(chunk_mid, SH(2, 7), ANY, GC),
    CASE1(chunk_all, SH(6, 2), ANY, GC),

    /* pad, flip, roll, repeat, tril, triu, one_hot, dropout (deterministic settings; the
     * random masks are in test_nn_ops.c) */
    CASE1(pad_const, SH(2, 3), ANY, GG),
    CASE1(pad_const_2d, SH(2, 3, 4), ANY, GC),
    CASE1(pad_neg, SH(4, 5), ANY, GC),
    CASE1(pad_reflect, SH(1, 2, 5), ANY, GG),
    CASE1(pad_reflect_2d, SH(1, 2, 4, 5), ANY, GC),
    CASE1(pad_replicate, SH(1, 2, 4), ANY, GC),
    CASE1(pad_replicate_2d, SH(1, 1, 3, 4), ANY, GC),
    CASE1(flip_dim0, SH(3, 4), ANY, GG),
    CASE1(flip_dims02, SH(2, 3, 4), ANY, GC),
    CASE1(flip_neg, SH(2, 3, 4), ANY, GC),
    CASE1(roll_pos, SH(3, 5), ANY, GG),
    CASE1(roll_neg, SH(3, 5), ANY, GC),
    CASE1(roll_dim0, SH(4, 2), ANY, GC),
    CASE1(roll_neg_dim, SH(2, 3, 4), ANY, GC),
    CASE1(repeat, SH(2, 3), ANY, GG),
    CASE1(repeat_lead, SH(2, 3), ANY, GC),
    CASE1(repeat_1d, SH(3), ANY, GC),
    CASE1(tril_0, SH(3, 4), ANY, GG),
    CASE1(tril_m1, SH(3, 4), ANY, GC),
    CASE1(tril_p1, SH(4, 3), ANY, GC),
    CASE1(tril_batched, SH(2, 3, 3), ANY, GC),
    CASE1(triu_0, SH(3, 4), ANY, GG),
    CASE1(triu_m1, SH(4, 3), ANY, GC),
    CASE1(triu_p1, SH(3, 4), ANY, GC),
    CASE1(triu_batched, SH(2, 3, 3), ANY, GC),
    {"one_hot_neg1", f_one_hot_neg1, 0, {SH0}, {ANY}, 0, 0, 0, 0},
    {"one_hot_5", f_one_hot_5, 0, {SH0}, {ANY}, 0, 0, 0, 0},
    CASE1(dropout_eval, SH(2, 3), ANY, GG),
    CASE1(dropout_p0, SH(2, 3), ANY, GG),
    CASE1(dropout_p1, SH(2, 3), ANY, GC),

    /* pooling: max (values and PyTorch's return_indices), average (count_include_pad both
     * ways), adaptive average (divisible, non-divisible, upsampling sizes), and the backward
     * ops as functions of (x, grad) */
    CASE1(max_pool1d, SH(2, 2, 7), ANY, GG),
    CASE1(max_pool2d, SH(1, 2, 5, 5), ANY, GG),
    CASE1(max_pool2d_default_stride, SH(1, 1, 5, 4), ANY, GC),
    CASE1(max_pool2d_dilation, SH(1, 1, 6, 6), ANY, GC),
    CASE1(max_pool3d, SH(1, 1, 4, 4, 3), ANY, GC),
    CASE1(max_pool3d_stride, SH(1, 1, 5, 5, 5), ANY, GC),
    CASE1(max_pool1d_indices, SH(2, 2, 7), ANY, 0),
    CASE1(max_pool2d_indices, SH(1, 2, 5, 5), ANY, 0),
    CASE1(max_pool2d_dilation_indices, SH(1, 1, 6, 6), ANY, 0),
    CASE1(max_pool3d_indices, SH(1, 1, 4, 4, 3), ANY, 0),
    CASE2(max_pool_backward, SH(1, 2, 5, 5), ANY, SH(1, 2, 3, 4), ANY, GG),
    CASE1(avg_pool1d, SH(2, 2, 7), ANY, GG),
    CASE1(avg_pool1d_exclude_pad, SH(2, 2, 7), ANY, GC),
    CASE1(avg_pool2d, SH(1, 2, 5, 5), ANY, GG),
    CASE1(avg_pool2d_exclude_pad, SH(1, 2, 5, 5), ANY, GC),
    CASE1(avg_pool2d_default_stride, SH(1, 1, 5, 4), ANY, GC),
    CASE1(avg_pool3d, SH(1, 1, 4, 4, 3), ANY, GC),
    CASE1(avg_pool3d_exclude_pad, SH(1, 1, 5, 5, 5), ANY, GC),
    CASE1(avg_pool_backward, SH(1, 2, 3, 6), ANY, GG),
    CASE1(adaptive_avg_pool2d_div, SH(1, 2, 4, 6), ANY, GG),
    CASE1(adaptive_avg_pool2d_nondiv, SH(1, 2, 5, 7), ANY, GC),
    CASE1(adaptive_avg_pool2d_3d, SH(2, 5, 5), ANY, GC),
    CASE1(adaptive_avg_pool2d_global, SH(2, 3, 3, 4), ANY, GC),
    CASE1(adaptive_avg_pool2d_up, SH(1, 1, 3, 3), ANY, GC),

    /* normalisation: batch_norm training (batch statistics; the running ones after two steps)
     * and eval, layer_norm over 1 and 2 dims, group_norm; with and without weight and bias */
    CASE3(batch_norm_train, SH(4, 3, 2), ANY, SH(3), ANY, SH(3), ANY, GG),
    CASE3(batch_norm_train_4d, SH(2, 3, 2, 2), ANY, SH(3), ANY, SH(3), ANY, GG),
    CASE1(batch_norm_train_noaffine, SH(4, 3), ANY, GG),
    CASE3(batch_norm_eval, SH(2, 3, 2), ANY, SH(3), ANY, SH(3), ANY, GG),
    CASE1(batch_norm_eval_noaffine, SH(2, 3), ANY, GC),
    CASE1(batch_norm_running_mean, SH(4, 3, 2), ANY, 0),
    CASE1(batch_norm_running_var, SH(4, 3, 2), ANY, 0),
    CASE3(layer_norm_1, SH(3, 4), ANY, SH(4), ANY, SH(4), ANY, GG),
    CASE3(layer_norm_2, SH(2, 3, 4), ANY, SH(3, 4), ANY, SH(3, 4), ANY, GC),
    CASE1(layer_norm_noaffine, SH(2, 3, 4), ANY, GG),
    CASE2(layer_norm_weight_only, SH(3, 4), ANY, SH(4), ANY, GC),
    CASE2(layer_norm_bias_only, SH(3, 4), ANY, SH(4), ANY, GC),
    CASE3(group_norm, SH(2, 4, 3), ANY, SH(4), ANY, SH(4), ANY, GG),
    CASE1(group_norm_noaffine, SH(2, 6, 2, 2), ANY, GC),
    CASE3(group_norm_per_channel, SH(2, 3, 4), ANY, SH(3), ANY, SH(3), ANY, GC),
    CASE1(group_norm_one_group, SH(2, 4, 3), ANY, GC),

    /* convolution: stride, padding, dilation, groups, with and without bias; transposed with
     * output_padding and groups; the two gradients as functions of their inputs */
    CASE3(conv1d, SH(2, 2, 7), ANY, SH(3, 2, 3), ANY, SH(3), ANY, GC),
    CASE2(conv1d_dilation, SH(1, 2, 8), ANY, SH(2, 2, 3), ANY, GC),
    CASE3(conv1d_groups, SH(1, 4, 5), ANY, SH(4, 2, 2), ANY, SH(4), ANY, GC),
    CASE3(conv2d, SH(1, 2, 5, 5), ANY, SH(3, 2, 3, 3), ANY, SH(3), ANY, GC),
    CASE3(conv2d_gg, SH(1, 2, 3, 3), ANY, SH(2, 2, 2, 2), ANY, SH(2), ANY, GG),
    CASE2(conv2d_stride_dilation, SH(1, 2, 6, 7), ANY, SH(2, 2, 2, 3), ANY, GC),
    CASE3(conv2d_groups, SH(1, 4, 4, 4), ANY, SH(6, 2, 3, 3), ANY, SH(6), ANY, GC),
    CASE2(conv2d_depthwise, SH(2, 3, 4, 4), ANY, SH(3, 1, 2, 2), ANY, GC),
    CASE3(conv3d, SH(1, 2, 4, 4, 3), ANY, SH(2, 2, 2, 2, 2), ANY, SH(2), ANY, GC),
    CASE2(conv3d_stride, SH(1, 1, 5, 5, 5), ANY, SH(2, 1, 3, 3, 3), ANY, GC),
    CASE3(conv3d_groups_dilation, SH(1, 2, 5, 5, 5), ANY, SH(2, 1, 2, 2, 2), ANY, SH(2), ANY, GC),
    CASE3(conv_transpose1d, SH(1, 2, 4), ANY, SH(2, 3, 3), ANY, SH(3), ANY, GC),
    CASE2(conv_transpose1d_groups, SH(1, 4, 3), ANY, SH(4, 1, 2), ANY, GC),
    CASE3(conv_transpose2d, SH(1, 2, 3, 3), ANY, SH(2, 3, 3, 3), ANY, SH(3), ANY, GC),
    CASE2(conv_transpose2d_groups_dilation, SH(1, 4, 3, 3), ANY, SH(4, 2, 2, 2), ANY, GC),
    CASE3(conv_transpose3d, SH(1, 2, 2, 3, 2), ANY, SH(2, 2, 2, 2, 2), ANY, SH(2), ANY, GC),
    CASE2(conv_backward_data, SH(1, 3, 3, 3), ANY, SH(3, 2, 3, 3), ANY, GC),
    CASE2(conv_backward_weight, SH(1, 2, 5, 5), ANY, SH(1, 3, 3, 3), ANY, GC),
    /* sorting: values (with their gradient, scattered back through the indices) and indices */
    CASE1(sort_dim1, SH(3, 5), ANY, GG),
    CASE1(sort_dim1_indices, SH(3, 5), ANY, 0),
    CASE1(sort_desc_dim0, SH(4, 3), ANY, GG),
    CASE1(sort_desc_dim0_indices, SH(4, 3), ANY, 0),
    CASE1(sort_last, SH(2, 3, 4), ANY, GG),
    CASE1(sort_last_indices, SH(2, 3, 4), ANY, 0),
    CASE1(sort_desc_last_indices, SH(2, 3, 4), ANY, 0),
    CASE1(sort_transposed, SH(4, 3), ANY, GC),
    CASE1(sort_transposed_indices, SH(4, 3), ANY, 0),
    CASE1(argsort_dim1, SH(3, 5), ANY, 0),
    CASE1(argsort_desc_dim0, SH(4, 3), ANY, 0),
    CASE1(topk_k2_dim1, SH(3, 5), ANY, GG),
    CASE1(topk_k2_dim1_indices, SH(3, 5), ANY, 0),
    CASE1(topk_smallest_k3_dim0, SH(4, 3), ANY, GG),
    CASE1(topk_smallest_k3_dim0_indices, SH(4, 3), ANY, 0),
    CASE1(topk_k0, SH(2, 3), ANY, 0),
};

const int op_cases_basic_count = (int)(sizeof op_cases_basic / sizeof op_cases_basic[0]);
