/* The op cases: every differentiable op in ops/ops.def (and the
 * non-differentiable ones the PyTorch fixtures check), each as a function
 * of its inputs with the shapes and domains its inputs are drawn from. */
#include "op_cases.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A shape as a constant initializer: SH(2, 3); SH0 is the 0-d shape. */
#define SH_N(...) SH_N_(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define SH_N_(a1, a2, a3, a4, a5, a6, a7, a8, n, ...) n
#define SH(...) {SH_N(__VA_ARGS__), {__VA_ARGS__}}
#define SH0 {0, {0}}

/* f_<name>(n, in, ctx): the op on in[0] (a), in[1] (b), in[2] (c). */
#define FN(name, expr)                                                          \
  static mx_tensor *f_##name(int n, mx_tensor *const *in, void *ctx) {          \
    (void)ctx;                                                                  \
    mx_tensor *a = in[0], *b = n > 1 ? in[1] : NULL, *c = n > 2 ? in[2] : NULL; \
    (void)a, (void)b, (void)c;                                                  \
    return (expr);                                                              \
  }

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
/* Indices and other constants are written out in the functions; make_fixtures.py uses the
 * same numbers. */
#define IDX(shape, ...) mx_from_data((const int64_t[]){__VA_ARGS__}, shape, MX_I64, MX_CPU)
#define LIST(...) ((mx_tensor *[]){__VA_ARGS__})
#define NLIST(...) (int)(sizeof LIST(__VA_ARGS__) / sizeof(mx_tensor *)), LIST(__VA_ARGS__)

/* float64 constants in like's dtype */
static mx_tensor *constant_like(const mx_tensor *like, mx_shape shape, const double *v) {
  return mx_to_dtype(mx_from_data(v, shape, MX_F64, MX_CPU), mx_dtype_of(like));
}
#define CONST(like, shape, ...) constant_like(like, shape, (const double[]){__VA_ARGS__})

/* A zero leaf that requires grad, in like's dtype (the input a gradient is taken for). */
static mx_tensor *zero_leaf(mx_shape shape, const mx_tensor *like) {
  mx_tensor *x = mx_zeros(shape, mx_dtype_of(like), MX_CPU);
  if (x && mx_set_requires_grad(x, true) != MX_OK) return NULL;
  return x;
}

/* gy . d f(x) / d x, with a graph of its own when grad mode is on (as in gradgradcheck): the
 * backward ops (softmax_backward, max_pool_backward, conv_backward_data, ...) as functions of
 * their inputs, so gradcheck and the fixtures differentiate them. */
typedef mx_tensor *(*forward_of)(mx_tensor *x, mx_tensor *const *in);
static mx_tensor *vjp(forward_of f, mx_tensor *x, mx_tensor *const *in, mx_tensor *gy) {
  if (!x || !gy) return NULL;
  bool create = mx_is_grad_enabled();
  bool previous = mx_set_grad_enabled(true);
  mx_tensor *y = f(x, in), *g = NULL;
  if (y && mx_grad(1, &y, 1, &x, &gy, create, create, true, &g) == MX_OK && !g) g = mx_zeros_like(x);
  mx_set_grad_enabled(previous);
  return g;
}
#define VJP(name, forward, x_expr, gy_expr)                                 \
  static mx_tensor *fw_##name(mx_tensor *x, mx_tensor *const *in) {         \
    (void)in;                                                               \
    return (forward);                                                       \
  }                                                                         \
  static mx_tensor *f_##name(int n, mx_tensor *const *in, void *ctx) {      \
    (void)n, (void)ctx;                                                     \
    return vjp(fw_##name, (x_expr), in, (gy_expr));                         \
  }

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
    zero_leaf(MX_SHAPE(1, 2, 5, 5), in[0]), in[0])
FN(adaptive_avg_pool2d_div, mx_adaptive_avg_pool2d(a, 2, 3))
FN(adaptive_avg_pool2d_nondiv, mx_adaptive_avg_pool2d(a, 3, 4))
FN(adaptive_avg_pool2d_3d, mx_adaptive_avg_pool2d(a, 3, 2))
FN(adaptive_avg_pool2d_global, mx_adaptive_avg_pool2d(a, 1, 1))
FN(adaptive_avg_pool2d_up, mx_adaptive_avg_pool2d(a, 4, 5))

/* normalisation: running statistics start at fixed values in x's dtype */
#define RUNNING_MEAN(x) CONST(x, MX_SHAPE(3), 0.5, -0.25, 1.0)
#define RUNNING_VAR(x) CONST(x, MX_SHAPE(3), 0.5, 2.0, 1.5)
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
    zero_leaf(MX_SHAPE(1, 2, 5, 5), in[0]), in[0])
VJP(conv_backward_weight, mx_conv2d(in[0], x, NULL, MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT, 1),
    zero_leaf(MX_SHAPE(3, 2, 3, 3), in[0]), in[1])

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

/* --- appended later: the rows that had no case (losses, nn and linear-algebra composites, distances,
 * grid_sample, multinomial, to_device, slice_backward). Constants in a case are exact in float16 and bfloat16
 * (+-1, halves), so the autocast check sees the same bits on either side of a cast. -------------------- */
/* (0, 1) from DOM_UNIT: probabilities for binary_cross_entropy (banned under autocast, so never in a region) */
#define PROB(x) mx_add_scalar(mx_mul_scalar(x, 0.5), 0.5)

/* losses: class targets in the functions, floating targets as inputs where the loss is smooth in them */
FN(cross_entropy_weighted, mx_cross_entropy(a, IDX(MX_SHAPE(3), 1, 0, 3), b, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.25))
FN(cross_entropy_ignore_none,
   mx_cross_entropy(a, IDX(MX_SHAPE(3), 2, -100, 0), NULL, MX_IGNORE_INDEX, MX_REDUCTION_NONE, 0))
FN(nll_loss_sum, mx_nll_loss(a, IDX(MX_SHAPE(3), 3, 1, 1), NULL, MX_IGNORE_INDEX, MX_REDUCTION_SUM))
FN(binary_cross_entropy, mx_binary_cross_entropy(PROB(a), PROB(b), NULL, MX_REDUCTION_MEAN))
/* soft targets as constants: computed from an input they would round differently in a 16-bit region */
FN(binary_cross_entropy_with_logits,
   mx_binary_cross_entropy_with_logits(a, CONST(a, MX_SHAPE(3, 4), 0, 0.25, 1, 0.5, 1, 0.75, 0, 0.25, 0.5, 1, 0, 0.75),
                                       NULL, MX_REDUCTION_MEAN, b))
FN(multilabel_margin_loss,
   mx_multilabel_margin_loss(a, IDX(MX_SHAPE(2, 4), 3, 0, -1, 0, 1, -1, 0, 0), MX_REDUCTION_MEAN))
FN(multi_margin_loss, mx_multi_margin_loss(a, IDX(MX_SHAPE(3), 1, 3, 0), 1, 1, b, MX_REDUCTION_MEAN))
FN(mse_loss, mx_mse_loss(a, b, MX_REDUCTION_MEAN))
FN(l1_loss, mx_l1_loss(a, b, MX_REDUCTION_SUM))
FN(smooth_l1_loss, mx_smooth_l1_loss(a, b, MX_REDUCTION_NONE, 0.5))
FN(huber_loss, mx_huber_loss(a, b, MX_REDUCTION_MEAN, 1))
FN(kl_div, mx_kl_div(a, b, MX_REDUCTION_BATCHMEAN, false))
FN(poisson_nll_loss, mx_poisson_nll_loss(a, b, true, false, 1e-8, MX_REDUCTION_MEAN))
FN(hinge_embedding_loss,
   mx_hinge_embedding_loss(a, CONST(a, MX_SHAPE(2, 3), 1, -1, -1, 1, -1, 1), 1, MX_REDUCTION_MEAN))
FN(soft_margin_loss, mx_soft_margin_loss(a, CONST(a, MX_SHAPE(2, 3), -1, 1, 1, -1, 1, 1), MX_REDUCTION_MEAN))
FN(margin_ranking_loss, mx_margin_ranking_loss(a, b, CONST(a, MX_SHAPE(4), 1, -1, 1, -1), 0.5, MX_REDUCTION_SUM))
FN(cosine_embedding_loss,
   mx_cosine_embedding_loss(a, b, CONST(a, MX_SHAPE(3), 1, -1, 1), 0, MX_REDUCTION_MEAN))
FN(triplet_margin_loss, mx_triplet_margin_loss(a, b, c, 1, 2, 1e-6, false, MX_REDUCTION_MEAN))

/* nn composites: a cell's weights and biases packed in one input (OP_MAX_IN is 3), cut apart by views so that
 * gradcheck reaches every one of them */
static mx_tensor *part(mx_tensor *packed, int64_t at, mx_shape shape) {
  int64_t n = 1;
  for (int d = 0; d < shape.ndim; d++) n *= shape.d[d];
  return mx_reshape(mx_narrow(packed, 0, at, n), shape);
}
/* x (2, 3), h (2, 4); gates * 4 rows of w_ih (3 columns) and w_hh (4 columns), then the two biases */
#define CELL_ARGS(gates, p)                                                                        \
  part(p, 0, MX_SHAPE(4 * (gates), 3)), part(p, 12 * (gates), MX_SHAPE(4 * (gates), 4)),          \
      part(p, 28 * (gates), MX_SHAPE(4 * (gates))), part(p, 32 * (gates), MX_SHAPE(4 * (gates)))
static mx_tensor *lstm_cell_h_and_c(mx_tensor *x, mx_tensor *hc, mx_tensor *p) {
  mx_tensor *h = NULL, *c = NULL;
  if (mx_lstm_cell(x, mx_select(hc, 0, 0), mx_select(hc, 0, 1), CELL_ARGS(4, p), &h, &c) != MX_OK) return NULL;
  return mx_cat(NLIST(h, c), 1);
}
FN(linear, mx_linear(a, b, c))
FN(linear_nobias, mx_linear(a, b, NULL))
FN(prelu, mx_prelu(a, b))
FN(rnn_tanh_cell, mx_rnn_tanh_cell(a, b, CELL_ARGS(1, c)))
FN(rnn_relu_cell, mx_rnn_relu_cell(a, b, CELL_ARGS(1, c)))
FN(lstm_cell, lstm_cell_h_and_c(a, b, c))
FN(gru_cell, mx_gru_cell(a, b, CELL_ARGS(3, c)))
FN(scaled_dot_product_attention, mx_scaled_dot_product_attention(a, b, c, NULL, 0, false, 0, NULL))
FN(scaled_dot_product_attention_causal, mx_scaled_dot_product_attention(a, b, c, NULL, 0, true, 0.5, NULL))
FN(bilinear, mx_bilinear(a, b, c, NULL))

/* linear-algebra composites */
FN(chain_matmul, mx_chain_matmul(NLIST(a, b, c)))
FN(multi_dot, mx_multi_dot(NLIST(a, b, c)))
FN(einsum_batched, mx_einsum("bij,bkj->bik", NLIST(a, b)))
FN(einsum_trace_outer, mx_einsum("ii,j->j", NLIST(a, b)))
FN(cross, mx_cross(a, b, 1))
FN(tensordot, mx_tensordot(a, b, 2))

/* norms and distances */
FN(normalize, mx_normalize(a, 2, 1, 1e-12))
FN(dist, mx_dist(a, b, 2))
FN(dist_p1, mx_dist(a, b, 1))
FN(cdist, mx_cdist(a, b, 2))
FN(pdist, mx_pdist(a, 2))
FN(cosine_similarity, mx_cosine_similarity(a, b, 1, 1e-8))
FN(renorm, mx_renorm(a, 2, 0, 1.5))

/* grid_sample: sampling points inside the input, bilinear and nearest */
FN(grid_sample_bilinear, mx_grid_sample(a, b, MX_GRID_BILINEAR, MX_GRID_PAD_ZEROS, false))
FN(grid_sample_border_aligned, mx_grid_sample(a, b, MX_GRID_BILINEAR, MX_GRID_PAD_BORDER, true))
FN(grid_sample_nearest, mx_grid_sample(a, b, MX_GRID_NEAREST, MX_GRID_PAD_REFLECTION, false))

/* multinomial: int64 draws from a generator seeded in the case, so every run draws the same */
static mx_tensor *multinomial_seeded(mx_tensor *probs, bool replacement) {
  mx_generator *gen = mx_generator_new(20261126u);
  mx_tensor *out = gen ? mx_multinomial(probs, 3, replacement, gen) : NULL;
  mx_generator_free(gen);
  return out;
}
FN(multinomial, multinomial_seeded(a, true))
FN(multinomial_no_replacement, multinomial_seeded(a, false))

/* to_device (the CPU, the only device a test build has) and slice's gradient as a function of the grad */
FN(to_device, mx_to_device(a, MX_CPU))
VJP(slice_backward, mx_slice(x, 1, 1, 4, 2), zero_leaf(MX_SHAPE(2, 5), in[0]), in[0])

/* convolution + ReLU as one op (stride 2 and padding: a window reaching into the zeros) */
FN(conv2d_relu, mx_conv2d_relu(a, b, c, MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT, 1))
/* batch norm with relu fused, training and eval */
FN(batch_norm_relu_train, mx_batch_norm_relu(a, RUNNING_MEAN(a), RUNNING_VAR(a), b, c, true, 0.1, 1e-5))
FN(batch_norm_relu_eval, mx_batch_norm_relu(a, RUNNING_MEAN(a), RUNNING_VAR(a), b, c, false, 0.1, 1e-5))
/* the copy into channels-last strides */
FN(to_channels_last, mx_to_channels_last(a))
/* linear + ReLU as one op (x 3-d: its rows folded into one product) */
FN(linear_relu, mx_linear_relu(a, b, c))
/* linear with a bias as one op (x 3-d: its rows folded into one product) */
FN(linear_bias, mx_linear_bias(a, b, c))
/* max pooling of relu(x) as one op: overlapping windows reaching into the padding, and the CNNs' 2x2 tiles */
FN(max_pool_relu, mx_max_pool_relu(a, 2, MX_SHAPE(3, 2), MX_SHAPE(2, 1), MX_SHAPE(1, 0), MX_DEFAULT))
FN(max_pool_relu_2x2, mx_max_pool_relu(a, 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT))
/* the weight's and the bias's gradients of a convolution (one op, conv_backward_weight_bias) as functions of x and
 * of the output's gradient gy, dw flattened and db after it: gradcheck differentiates both outputs */
static mx_tensor *f_conv_backward_weight_bias(int n, mx_tensor *const *in, void *ctx) {
  (void)n, (void)ctx;
  mx_tensor *x = in[0], *gy = in[1], *w = zero_leaf(MX_SHAPE(3, 2, 3, 3), x), *b = zero_leaf(MX_SHAPE(3), x);
  if (!w || !b) return NULL;
  bool create = mx_is_grad_enabled(), previous = mx_set_grad_enabled(true);
  mx_tensor *y = mx_conv2d(x, w, b, MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT, 1), *leaves[2] = {w, b}, *g[2] = {0};
  mx_status status = y ? mx_grad(1, &y, 2, leaves, &gy, create, create, false, g) : mx_last_status();
  mx_set_grad_enabled(previous);
  mx_tensor *parts[2] = {status == MX_OK ? mx_flatten(g[0], 0, -1) : NULL, g[1]};
  return parts[0] && parts[1] ? mx_cat(2, parts, 0) : NULL;
}

#define GC OP_GRADCHECK
#define GG (OP_GRADCHECK | OP_GRADGRAD)
#define ANY DOM_ANY
#define POS DOM_POS
#define UNIT DOM_UNIT
#define AWAY DOM_AWAY
#define NONINT DOM_NONINT
#define BOOL DOM_BOOL
#define NF OP_NO_FIXTURE

/* name, inputs, shapes, domains, flags[, eps, atol, rtol] */
#define UN(name, dom, flags) {#name, f_##name, 1, {SH(2, 3)}, {dom}, flags, 0, 0, 0}
#define BIN(name, da, db, flags) {#name, f_##name, 2, {SH(2, 3), SH(3)}, {da, db}, flags, 0, 0, 0}
#define CASE1(name, s0, d0, flags) {#name, f_##name, 1, {s0}, {d0}, flags, 0, 0, 0}
#define CASE2(name, s0, d0, s1, d1, flags) {#name, f_##name, 2, {s0, s1}, {d0, d1}, flags, 0, 0, 0}
#define CASE3(name, s0, d0, s1, d1, s2, d2, flags) {#name, f_##name, 3, {s0, s1, s2}, {d0, d1, d2}, flags, 0, 0, 0}

const op_case op_cases[] = {
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
    /* appended later (the fuzz corpus stores case indices: append only): the rows that had no case, each with
     * its forward against float64, its autocast policy and its gradients. The losses' class targets are in the
     * functions; the cells pack weights and biases into their third input. No PyTorch line in ops_fixtures.txt
     * (NF): the losses, composites, grid_sample and multinomial are compared with PyTorch in their own suites.
     * The variants of a row (linear_nobias, dist_p1, ...) stop at gradcheck (GC) to keep the suite short: each
     * row's first case runs gradgradcheck. multinomial: int64 draws, no gradient. */
    CASE2(cross_entropy_weighted, SH(3, 4), ANY, SH(4), POS, GG | NF),
    CASE1(cross_entropy_ignore_none, SH(3, 4), ANY, GG | NF),
    CASE1(nll_loss_sum, SH(3, 4), ANY, GG | NF),
    CASE2(binary_cross_entropy, SH(2, 3), UNIT, SH(2, 3), UNIT, GG | NF),
    CASE2(binary_cross_entropy_with_logits, SH(3, 4), ANY, SH(4), POS, GG | NF),
    CASE1(multilabel_margin_loss, SH(2, 4), ANY, GG | NF),
    CASE2(multi_margin_loss, SH(3, 4), ANY, SH(4), POS, GG | NF),
    CASE2(mse_loss, SH(2, 3), ANY, SH(2, 3), ANY, GG | NF),
    CASE2(l1_loss, SH(2, 3), ANY, SH(2, 3), ANY, GG | NF),
    CASE2(smooth_l1_loss, SH(2, 3), ANY, SH(2, 3), ANY, GG | NF),
    CASE2(huber_loss, SH(2, 3), ANY, SH(2, 3), ANY, GG | NF),
    CASE2(kl_div, SH(2, 3), ANY, SH(2, 3), POS, GG | NF),
    CASE2(poisson_nll_loss, SH(2, 3), ANY, SH(2, 3), POS, GG | NF),
    CASE1(hinge_embedding_loss, SH(2, 3), ANY, GG | NF),
    CASE1(soft_margin_loss, SH(2, 3), ANY, GG | NF),
    CASE2(margin_ranking_loss, SH(4), ANY, SH(4), ANY, GG | NF),
    CASE2(cosine_embedding_loss, SH(3, 4), ANY, SH(3, 4), ANY, GG | NF),
    CASE3(triplet_margin_loss, SH(3, 4), ANY, SH(3, 4), ANY, SH(3, 4), ANY, GG | NF),
    CASE3(linear, SH(2, 3), ANY, SH(4, 3), ANY, SH(4), ANY, GG | NF),
    CASE2(linear_nobias, SH(2, 3, 3), ANY, SH(2, 3), ANY, GC | NF),
    CASE2(prelu, SH(2, 3, 4), AWAY, SH(3), ANY, GG | NF),
    CASE3(rnn_tanh_cell, SH(2, 3), ANY, SH(2, 4), ANY, SH(36), ANY, GG | NF),
    CASE3(rnn_relu_cell, SH(2, 3), ANY, SH(2, 4), ANY, SH(36), ANY, GG | NF),
    CASE3(lstm_cell, SH(2, 3), ANY, SH(2, 2, 4), ANY, SH(144), ANY, GG | NF),
    CASE3(gru_cell, SH(2, 3), ANY, SH(2, 4), ANY, SH(108), ANY, GG | NF),
    CASE3(scaled_dot_product_attention, SH(2, 3, 4), ANY, SH(2, 5, 4), ANY, SH(2, 5, 2), ANY, GG | NF),
    CASE3(scaled_dot_product_attention_causal, SH(3, 4), ANY, SH(3, 4), ANY, SH(3, 2), ANY, GC | NF),
    CASE3(bilinear, SH(2, 3), ANY, SH(2, 4), ANY, SH(2, 3, 4), ANY, GG | NF),
    CASE3(chain_matmul, SH(2, 3), ANY, SH(3, 4), ANY, SH(4, 2), ANY, GG | NF),
    CASE3(multi_dot, SH(3), ANY, SH(3, 4), ANY, SH(4), ANY, GG | NF),
    CASE2(einsum_batched, SH(2, 3, 4), ANY, SH(2, 2, 4), ANY, GG | NF),
    CASE2(einsum_trace_outer, SH(3, 3), ANY, SH(2), ANY, GC | NF),
    CASE2(cross, SH(2, 3), ANY, SH(2, 3), ANY, GG | NF),
    CASE2(tensordot, SH(2, 3, 4), ANY, SH(3, 4, 2), ANY, GG | NF),
    CASE1(normalize, SH(3, 4), ANY, GG | NF),
    CASE2(dist, SH(2, 3), ANY, SH(2, 3), ANY, GG | NF),
    CASE2(dist_p1, SH(2, 3), ANY, SH(2, 3), ANY, GC | NF),
    CASE2(cdist, SH(3, 4), ANY, SH(2, 4), ANY, GG | NF),
    CASE1(pdist, SH(4, 3), ANY, GG | NF),
    CASE2(cosine_similarity, SH(3, 4), ANY, SH(3, 4), ANY, GG | NF),
    CASE1(renorm, SH(3, 4), ANY, GG | NF),
    CASE2(grid_sample_bilinear, SH(1, 2, 3, 4), ANY, SH(1, 2, 3, 2), UNIT, GG | NF),
    CASE2(grid_sample_border_aligned, SH(2, 1, 3, 3), ANY, SH(2, 2, 2, 2), UNIT, GC | NF),
    CASE2(grid_sample_nearest, SH(1, 2, 3, 4), ANY, SH(1, 2, 3, 2), UNIT, GC | NF),
    CASE1(multinomial, SH(2, 4), POS, NF),
    CASE1(multinomial_no_replacement, SH(2, 4), POS, NF),
    CASE1(to_device, SH(2, 3), ANY, GG | NF),
    CASE1(slice_backward, SH(2, 2), ANY, GG | NF),
    CASE3(conv2d_relu, SH(2, 2, 5, 5), ANY, SH(3, 2, 3, 3), ANY, SH(3), ANY, GG | NF),
    /* batch_norm_relu (tests/ops/test_batch_norm_fused.c: the bits of batch_norm then relu) */
    CASE3(batch_norm_relu_train, SH(4, 3, 2), ANY, SH(3), ANY, SH(3), ANY, GG | NF),
    CASE3(batch_norm_relu_eval, SH(2, 3, 2), ANY, SH(3), ANY, SH(3), ANY, GC | NF),
    CASE1(to_channels_last, SH(2, 3, 2, 2), ANY, GG | NF),
    /* linear_relu (tests/ops/test_linear_relu.c: the bits of linear then relu) */
    CASE3(linear_relu, SH(2, 3, 4), ANY, SH(5, 4), ANY, SH(5), ANY, GG | NF),
    /* linear_bias (tests/ops/test_linear_rounding.c: one rounding of a 16-bit product plus bias) */
    CASE3(linear_bias, SH(2, 3, 4), ANY, SH(5, 4), ANY, SH(5), ANY, GG | NF),
    /* max_pool_relu (tests/ops/test_max_pool_relu.c: the bits of relu then max_pool) */
    CASE1(max_pool_relu, SH(1, 2, 5, 5), AWAY, GG | NF),
    CASE1(max_pool_relu_2x2, SH(2, 3, 4, 6), AWAY, GC | NF),
    /* conv_backward_weight_bias: x, then the gradient of conv2d's output (stride 2, padding 1) */
    CASE2(conv_backward_weight_bias, SH(2, 2, 5, 5), ANY, SH(2, 3, 3, 3), ANY, GG | NF),
};

const int op_case_count = (int)(sizeof op_cases / sizeof op_cases[0]);

const op_case *op_case_find(const char *name) {
  for (int k = 0; k < op_case_count; k++)
    if (!strcmp(op_cases[k].name, name)) return &op_cases[k];
  return NULL;
}

static double from_domain(op_domain domain, double u) {
  switch (domain) {
  case DOM_POS: return 0.5 + 2 * u;
  case DOM_UNIT: return -0.9 + 1.8 * u;
  case DOM_AWAY: { /* the low half of u picks the sign */
    double v = u < 0.5 ? 2 * u : 2 * u - 1;
    return (u < 0.5 ? -1 : 1) * (0.3 + 1.5 * v);
  }
  case DOM_NONINT: {
    double scaled = 4 * u;
    double k = floor(scaled);
    return k - 2 + 0.1 + 0.3 * (scaled - k);
  }
  case DOM_ANY:
  case DOM_BOOL:
  default: return -2 + 4 * u;
  }
}

mx_tensor *op_case_input(mx_shape shape, op_domain domain, mx_generator *gen) {
  if (domain == DOM_BOOL) return mx_bernoulli_p(shape, 0.5, MX_BOOL, MX_CPU, gen);
  mx_tensor *u = mx_rand(shape, MX_F64, MX_CPU, gen);
  if (!u) return NULL;
  int64_t n = mx_numel(u);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  mx_tensor *out = NULL;
  if (v && mx_to_host(u, v, sizeof(double) * (size_t)n) == MX_OK) {
    for (int64_t i = 0; i < n; i++) v[i] = from_domain(domain, v[i]);
    out = mx_from_data(v, shape, MX_F64, MX_CPU);
  }
  free(v);
  return out;
}

int op_case_stride(void) {
  const char *stride = getenv("MX_TEST_OP_STRIDE");
  int n = stride ? atoi(stride) : 1;
  return n > 0 ? n : 1;
}

int op_sample(int *ids, int n) {
  int stride = op_case_stride(), m = 0;
  for (int k = 0; k < n; k += stride) ids[m++] = ids[k];
  return m;
}

int op_case_row(const char *case_name) {
  int best = -1;
  size_t best_len = 0;
  for (int op = 0; op < mx_op_count(); op++) {
    size_t len = strlen(mx_op_name(op));
    if (len > best_len && !strncmp(case_name, mx_op_name(op), len) && (case_name[len] == '\0' || case_name[len] == '_'))
      best = op, best_len = len;
  }
  return best;
}
