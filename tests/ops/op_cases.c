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

#define GC OP_GRADCHECK
#define GG (OP_GRADCHECK | OP_GRADGRAD)
#define ANY DOM_ANY
#define POS DOM_POS
#define UNIT DOM_UNIT
#define AWAY DOM_AWAY
#define NONINT DOM_NONINT
#define BOOL DOM_BOOL

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
