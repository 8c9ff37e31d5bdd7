/* PyTorch's own AMP test cases, translated to mixgrad: an acceptance suite
 * written from PyTorch's tests, not from mixgrad's code. This file has
 * section 1, the op lists; test_pytorch_autocast.c has sections 2-5 and
 * test_pytorch_scaling.c section 6, the GradScaler.
 *
 * Sources (pytorch/pytorch):
 *   torch/testing/_internal/autocast_test_lists.py  AutocastTestLists (the CUDA lists)
 *                                                   and TestAutocast._run_autocast_outofplace
 *   test/test_cuda.py                               TestCuda.test_autocast_*, test_grad_scaling_*
 *   test/test_autocast.py                           TestAutocastCPU, TestAutocastGPU, TestTorchAutocast
 *   test/test_torch.py                              test_grad_scaling_unscale, _scale, _state_dict
 *   torch/testing/_internal/common_cuda.py          _create_scaling_case, _create_scaling_models_optimizers
 *
 * Adaptation common to every case: PyTorch's CUDA tests run on the CPU here
 * (mixgrad applies one policy table on every device, and emulates float16
 * on the CPU bit for bit), so torch.autocast("cuda") becomes
 * MX_AUTOCAST(MX_CPU, MX_F16, ...). A Python tuple of tensors becomes an
 * array; pickling a GradScaler becomes state_dict / load_state_dict; nested
 * containers, CUDA streams, sparse gradients, JIT and multiple GPUs have no
 * counterpart and are noted where a test used them.
 *
 * Every case asserts values, PyTorch's. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <mixgrad.h>
#include <stdlib.h>
#include <string.h>

#include "pytorch_cases.h"

TestSuite(pytorch_cases, .init = amp_suite_open, .fini = amp_suite_close);

/* ===================================================================================
 * helpers
 * =================================================================================== */

/* Index of the op named name in the op table, or -1. */
static int op_index(const char *name) {
  for (int op = 0; op < mx_op_count(); op++)
    if (strcmp(mx_op_name(op), name) == 0) return op;
  return -1;
}

/* MX_TEST_OP_STRIDE (valgrind in CI sets 12): run every n-th parameterized case. */
static int case_stride(void) {
  const char *s = getenv("MX_TEST_OP_STRIDE");
  int n = s ? atoi(s) : 1;
  return n > 0 ? n : 1;
}

/* ===================================================================================
 * 1. autocast_test_lists.py: every op of the CUDA lists that mixgrad has
 *
 * test_cuda.py test_autocast_torch_fp16 / _torch_bf16 / _torch_fp32 /
 * _torch_need_autocast_promote / _torch_expect_builtin_promote / _nn_fp16 /
 * _nn_bf16 / _nn_fp32 / _linalg_fp16 / _methods_fp16 / _methods_fp32 /
 * _methods_expect_builtin_promote, each a loop of
 * TestAutocast._run_autocast_outofplace(op, args, run_as_type, out_type):
 *   - inside an autocast region the op's output dtype is out_type
 *     (run_as_type unless given);
 *   - inside a nested enabled=False region the op run on the inputs cast to
 *     run_as_type (floating tensors only) gives the same result, bitwise
 *     (torch.equal);
 *   - autocast is on inside the region and off after it.
 * Here: one row per (op, argument shapes), run under a float16 region and,
 * as test_autocast_torch_bf16 / test_autocast.py's CPU tests do, under a
 * bfloat16 region too (the lists' float16 inputs become bfloat16 there, as
 * AutocastCPUTestLists has them). Tensor-method variants (Tensor.mm,
 * __matmul__, __pow__) are the same C functions and are folded into the
 * torch.* rows. Arguments are PyTorch's (n = 8) unless a row says otherwise.
 * =================================================================================== */

#define LP MX_F16 /* an input of the region's lower dtype (float16 in the CUDA lists) */

typedef enum { IN_RANDN, IN_RAND, IN_CLAMP, IN_POW_BASE, IN_FULL, IN_RANDINT, IN_VALUES } in_kind;
typedef struct {
  in_kind kind;
  mx_dtype dtype;
  mx_shape shape;
  double a, b;
  const double *values;
} in_spec;

#define SH(...) {MX__NARGS(__VA_ARGS__), {__VA_ARGS__}}
#define RANDN(dt, ...) {IN_RANDN, dt, SH(__VA_ARGS__), 0, 0, NULL}
#define RAND(dt, ...) {IN_RAND, dt, SH(__VA_ARGS__), 0, 0, NULL}
#define CLAMPED(dt, lo, hi, ...) {IN_CLAMP, dt, SH(__VA_ARGS__), lo, hi, NULL}
#define POW_BASE(dt, ...) {IN_POW_BASE, dt, SH(__VA_ARGS__), 0, 0, NULL} /* (randn + 1).clamp(0, 100) */
#define FULL(dt, v, ...) {IN_FULL, dt, SH(__VA_ARGS__), v, 0, NULL}
#define RANDINT(dt, lo, hi, ...) {IN_RANDINT, dt, SH(__VA_ARGS__), lo, hi, NULL}
#define VALUES(dt, vals, ...) {IN_VALUES, dt, SH(__VA_ARGS__), 0, 0, vals}

typedef enum { RUN_LOWER, RUN_FP32, RUN_PROMOTE, RUN_BUILTIN } run_kind;
typedef mx_status (*op_run)(mx_tensor *const *in, mx_tensor **out);

typedef struct {
  const char *torch_op; /* the name in PyTorch's list */
  const char *list;     /* which list */
  const char *mx_op;    /* the op table row that carries the policy */
  run_kind kind;
  mx_dtype out_type; /* RUN_BUILTIN only */
  op_run run;
  int n_in;
  in_spec in[7];
} list_case;

#define RET1(expr)                                                                                            \
  do {                                                                                                        \
    out[0] = (expr);                                                                                          \
    return out[0] ? MX_OK : mx_last_status();                                                                \
  } while (0)
#define OP1(name, expr)                                                                                       \
  static mx_status name(mx_tensor *const *in, mx_tensor **out) { RET1(expr); }

static const mx_shape S11 = {2, {1, 1}}, S00 = {2, {0, 0}};

/* torch_fp16 (lower precision) */
OP1(run_convolution, mx_conv(in[0], in[1], in[2], 2, S11, S00, S11, 1))
OP1(run_conv1d, mx_conv1d(in[0], in[1], NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1))
OP1(run_conv2d, mx_conv2d(in[0], in[1], NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1))
OP1(run_conv3d, mx_conv3d(in[0], in[1], NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1))
OP1(run_conv_transpose1d, mx_conv_transpose1d(in[0], in[1], NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1))
OP1(run_conv_transpose2d, mx_conv_transpose2d(in[0], in[1], NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1))
OP1(run_conv_transpose3d, mx_conv_transpose3d(in[0], in[1], NULL, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1))
OP1(run_prelu, mx_prelu(in[0], in[1]))
OP1(run_addmm, mx_addmm(in[0], in[1], in[2], 1, 1))
OP1(run_addmv, mx_addmv(in[0], in[1], in[2], 1, 1))
OP1(run_addr, mx_addr(in[0], in[1], in[2], 1, 1))
OP1(run_matmul, mx_matmul(in[0], in[1]))
OP1(run_einsum, mx_einsum("bkhd,bqhd->bqkh", 2, in))
OP1(run_mm, mx_mm(in[0], in[1]))
OP1(run_mv, mx_mv(in[0], in[1]))
OP1(run_chain_matmul, mx_chain_matmul(3, in))
OP1(run_addbmm, mx_addbmm(in[0], in[1], in[2], 1, 1))
OP1(run_baddbmm, mx_baddbmm(in[0], in[1], in[2], 1, 1))
OP1(run_bmm, mx_bmm(in[0], in[1]))
static mx_status run_lstm_cell(mx_tensor *const *in, mx_tensor **out) {
  return mx_lstm_cell(in[0], in[1], in[2], in[3], in[4], in[5], in[6], &out[0], &out[1]);
}
OP1(run_gru_cell, mx_gru_cell(in[0], in[1], in[2], in[3], in[4], in[5]))
OP1(run_rnn_tanh_cell, mx_rnn_tanh_cell(in[0], in[1], in[2], in[3], in[4], in[5]))
OP1(run_rnn_relu_cell, mx_rnn_relu_cell(in[0], in[1], in[2], in[3], in[4], in[5]))
/* nn_fp16, linalg_fp16 */
OP1(run_linear, mx_linear(in[0], in[1], in[2]))
OP1(run_multi_dot, mx_multi_dot(3, in))
OP1(run_sdpa, mx_scaled_dot_product_attention(in[0], in[1], in[2], NULL, 0.0, false, 0.0, NULL))

/* torch_fp32 */
OP1(run_acos, mx_acos(in[0]))
OP1(run_asin, mx_asin(in[0]))
OP1(run_cosh, mx_cosh(in[0]))
OP1(run_erfinv, mx_erfinv(in[0]))
OP1(run_exp, mx_exp(in[0]))
OP1(run_expm1, mx_expm1(in[0]))
OP1(run_log, mx_log(in[0]))
OP1(run_log10, mx_log10(in[0]))
OP1(run_log2, mx_log2(in[0]))
OP1(run_log1p, mx_log1p(in[0]))
OP1(run_reciprocal, mx_reciprocal(in[0]))
OP1(run_rsqrt, mx_rsqrt(in[0]))
OP1(run_sinh, mx_sinh(in[0]))
OP1(run_tan, mx_tan(in[0]))
OP1(run_pow, mx_pow(in[0], in[1]))
OP1(run_pow_1_7, mx_pow_scalar(in[0], 1.7))
OP1(run_pow_1_5, mx_pow_scalar(in[0], 1.5))
OP1(run_softmax, mx_softmax(in[0], 0))
OP1(run_log_softmax, mx_log_softmax(in[0], 0))
OP1(run_layer_norm, mx_layer_norm(in[0], MX_SHAPE(8), NULL, NULL, 1e-5))
OP1(run_group_norm, mx_group_norm(in[0], 1, NULL, NULL, 1e-5))
OP1(run_norm, mx_norm(in[0], 2, MX_ALL_DIMS, false))
OP1(run_norm_dim0, mx_norm(in[0], 2, MX_DIMS(0), false))
OP1(run_norm_p1, mx_norm(in[0], 1, MX_ALL_DIMS, false))
OP1(run_norm_p1_dim0, mx_norm(in[0], 1, MX_DIMS(0), false))
OP1(run_cosine_similarity, mx_cosine_similarity(in[0], in[1], 1, 1e-8))
OP1(run_poisson_nll_loss, mx_poisson_nll_loss(in[0], in[1], true, false, 1e-8, MX_REDUCTION_MEAN))
OP1(run_cosine_embedding_loss, mx_cosine_embedding_loss(in[0], in[1], in[2], 0.0, MX_REDUCTION_MEAN))
OP1(run_hinge_embedding_loss, mx_hinge_embedding_loss(in[0], in[1], 1.0, MX_REDUCTION_MEAN))
OP1(run_kl_div, mx_kl_div(in[0], in[1], MX_REDUCTION_MEAN, false))
OP1(run_margin_ranking_loss, mx_margin_ranking_loss(in[0], in[1], in[2], 0.0, MX_REDUCTION_MEAN))
OP1(run_triplet_margin_loss, mx_triplet_margin_loss(in[0], in[1], in[2], 1.0, 2.0, 1e-6, false, MX_REDUCTION_MEAN))
OP1(run_bce_with_logits, mx_binary_cross_entropy_with_logits(in[0], in[1], NULL, MX_REDUCTION_MEAN, NULL))
OP1(run_cumprod, mx_cumprod(in[0], 0))
OP1(run_cumsum, mx_cumsum(in[0], 0))
OP1(run_dist, mx_dist(in[0], in[1], 2.0))
OP1(run_pdist, mx_pdist(in[0], 2.0))
OP1(run_cdist, mx_cdist(in[0], in[1], 2.0))
OP1(run_prod, mx_prod(in[0], MX_ALL_DIMS, false))
OP1(run_prod_dim0, mx_prod(in[0], MX_DIMS(0), false))
OP1(run_renorm, mx_renorm(in[0], 2.0, 0, 1.0))
OP1(run_sum, mx_sum(in[0], MX_ALL_DIMS, false))
OP1(run_sum_dim1, mx_sum(in[0], MX_DIMS(1), false))
OP1(run_logsumexp, mx_logsumexp(in[0], MX_DIMS(1), false))
/* nn_fp32 */
OP1(run_softplus, mx_softplus(in[0], 1.0, 20.0))
OP1(run_nll_loss, mx_nll_loss(in[0], in[1], NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN))
OP1(run_l1_loss, mx_l1_loss(in[0], in[1], MX_REDUCTION_MEAN))
OP1(run_smooth_l1_loss, mx_smooth_l1_loss(in[0], in[1], MX_REDUCTION_MEAN, 1.0))
OP1(run_mse_loss, mx_mse_loss(in[0], in[1], MX_REDUCTION_MEAN))
OP1(run_multilabel_margin_loss, mx_multilabel_margin_loss(in[0], in[1], MX_REDUCTION_MEAN))
OP1(run_soft_margin_loss, mx_soft_margin_loss(in[0], in[1], MX_REDUCTION_MEAN))
OP1(run_multi_margin_loss, mx_multi_margin_loss(in[0], in[1], 1, 1.0, NULL, MX_REDUCTION_MEAN))
OP1(run_huber_loss, mx_huber_loss(in[0], in[1], MX_REDUCTION_MEAN, 1.0))

/* torch_need_autocast_promote */
OP1(run_addcdiv, mx_addcdiv(in[0], in[1], in[2], 1.0))
OP1(run_addcmul, mx_addcmul(in[0], in[1], in[2], 1.0))
OP1(run_atan2, mx_atan2(in[0], in[1]))
OP1(run_bilinear, mx_bilinear(in[0], in[1], in[2], in[3]))
OP1(run_cross, mx_cross(in[0], in[1], 0))
OP1(run_dot, mx_dot(in[0], in[1]))
OP1(run_grid_sampler, mx_grid_sample(in[0], in[1], MX_GRID_BILINEAR, MX_GRID_PAD_ZEROS, false))
OP1(run_index_put, mx_index_put(in[0], 1, &in[1], in[2], false))
OP1(run_tensordot, mx_tensordot(in[0], in[1], 2))
OP1(run_scatter_add, mx_scatter_add(in[0], 0, in[1], in[2]))

/* torch_expect_builtin_promote */
OP1(run_eq, mx_eq(in[0], in[1]))
OP1(run_ge, mx_ge(in[0], in[1]))
OP1(run_gt, mx_gt(in[0], in[1]))
OP1(run_le, mx_le(in[0], in[1]))
OP1(run_lt, mx_lt(in[0], in[1]))
OP1(run_ne, mx_ne(in[0], in[1]))
OP1(run_add, mx_add(in[0], in[1]))
OP1(run_div, mx_div(in[0], in[1]))
OP1(run_mul, mx_mul(in[0], in[1]))
OP1(run_cat, mx_cat(2, in, 0))
OP1(run_stack, mx_stack(2, in, 0))

static const double emb_a[] = {1, 2, 3}, emb_b[] = {1, 3, 4}, emb_t[] = {1};

#define F16L(op, mxop, fn, n, ...) {op, "torch_fp16", mxop, RUN_LOWER, 0, fn, n, {__VA_ARGS__}}
#define F32L(op, mxop, fn, n, ...) {op, "torch_fp32", mxop, RUN_FP32, 0, fn, n, {__VA_ARGS__}}
#define NN32(op, mxop, fn, n, ...) {op, "nn_fp32", mxop, RUN_FP32, 0, fn, n, {__VA_ARGS__}}
#define PROM(op, mxop, fn, n, ...) {op, "torch_need_autocast_promote", mxop, RUN_PROMOTE, 0, fn, n, {__VA_ARGS__}}
#define BUILTIN(op, out, fn, ...) {op, "torch_expect_builtin_promote", op, RUN_BUILTIN, out, fn, 2, {__VA_ARGS__}}

static const list_case list_cases[] = {
    /* --- torch_fp16 ----------------------------------------------------------------------
     * _convolution (both overloads) and convolution: conv_args_fp32[1] + bias_fp32 with
     * stride (1, 1), padding (0, 0), dilation (1, 1), not transposed, groups 1; mixgrad's
     * public form is mx_conv (the conv row). Skipped: conv_tbc, cudnn_convolution,
     * cudnn_convolution_transpose (no such ops). */
    F16L("_convolution", "conv", run_convolution, 3, RANDN(MX_F32, 8, 8, 8, 8), RANDN(MX_F32, 8, 8, 8, 8),
         RANDN(MX_F32, 8)),
    F16L("convolution", "conv", run_convolution, 3, RANDN(MX_F32, 8, 8, 8, 8), RANDN(MX_F32, 8, 8, 8, 8),
         RANDN(MX_F32, 8)),
    F16L("conv1d", "conv1d", run_conv1d, 2, RANDN(MX_F32, 8, 8, 8), RANDN(MX_F32, 8, 8, 8)),
    F16L("conv2d", "conv2d", run_conv2d, 2, RANDN(MX_F32, 8, 8, 8, 8), RANDN(MX_F32, 8, 8, 8, 8)),
    F16L("conv3d", "conv3d", run_conv3d, 2, RANDN(MX_F32, 8, 8, 8, 8, 8), RANDN(MX_F32, 8, 8, 8, 8, 8)),
    F16L("conv_transpose1d", "conv_transpose1d", run_conv_transpose1d, 2, RANDN(MX_F32, 8, 8, 8),
         RANDN(MX_F32, 8, 8, 8)),
    F16L("conv_transpose2d", "conv_transpose2d", run_conv_transpose2d, 2, RANDN(MX_F32, 8, 8, 8, 8),
         RANDN(MX_F32, 8, 8, 8, 8)),
    /* adapted: (4, 4, 4, 4, 4) instead of n = 8 in every dim, which is 2^27 multiply-adds
     * per run on the CPU (four runs per case); the op and its rank are PyTorch's */
    F16L("conv_transpose3d", "conv_transpose3d", run_conv_transpose3d, 2, RANDN(MX_F32, 4, 4, 4, 4, 4),
         RANDN(MX_F32, 4, 4, 4, 4, 4)),
    F16L("prelu", "prelu", run_prelu, 2, RANDN(MX_F32, 8), RANDN(MX_F32, 1)),
    F16L("addmm", "addmm", run_addmm, 3, RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8)),
    F16L("addmv", "addmv", run_addmv, 3, RANDN(MX_F32, 8), RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8)),
    F16L("addr", "addr", run_addr, 3, RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8), RANDN(MX_F32, 8)),
    F16L("matmul", "matmul", run_matmul, 2, RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8)),
    /* adapted: the list gives einsum the 2-d mat0/mat1 for "bkhd,bqhd->bqkh" (and, having
     * three fields, the CUDA test skips it); here 4-d operands that fit the equation */
    F16L("einsum", "einsum", run_einsum, 2, RANDN(MX_F32, 2, 3, 2, 4), RANDN(MX_F32, 2, 5, 2, 4)),
    F16L("mm", "mm", run_mm, 2, RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8)),
    F16L("mv", "mv", run_mv, 2, RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8)),
    F16L("chain_matmul", "chain_matmul", run_chain_matmul, 3, RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8),
         RANDN(MX_F32, 8, 8)),
    F16L("addbmm", "addbmm", run_addbmm, 3, RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8, 8), RANDN(MX_F32, 8, 8, 8)),
    F16L("baddbmm", "baddbmm", run_baddbmm, 3, RANDN(MX_F32, 8, 8, 8), RANDN(MX_F32, 8, 8, 8),
         RANDN(MX_F32, 8, 8, 8)),
    F16L("bmm", "bmm", run_bmm, 2, RANDN(MX_F32, 8, 8, 8), RANDN(MX_F32, 8, 8, 8)),
    /* _rnn_cell_args(n, num_chunks, is_lstm): input, hx (and cx), w_ih, w_hh, b_ih, b_hh */
    F16L("lstm_cell", "lstm_cell", run_lstm_cell, 7, RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8),
         RANDN(MX_F32, 32, 8), RANDN(MX_F32, 32, 8), RANDN(MX_F32, 32), RANDN(MX_F32, 32)),
    F16L("gru_cell", "gru_cell", run_gru_cell, 6, RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8), RANDN(MX_F32, 24, 8),
         RANDN(MX_F32, 24, 8), RANDN(MX_F32, 24), RANDN(MX_F32, 24)),
    F16L("rnn_tanh_cell", "rnn_tanh_cell", run_rnn_tanh_cell, 6, RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8),
         RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8), RANDN(MX_F32, 8)),
    F16L("rnn_relu_cell", "rnn_relu_cell", run_rnn_relu_cell, 6, RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8),
         RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8), RANDN(MX_F32, 8)),
    /* --- nn_fp16 (torch._C._nn.linear(mat0, mat1, mat2): a (8, 8) bias, broadcast) -------- */
    {"linear", "nn_fp16", "linear", RUN_LOWER, 0, run_linear, 3,
     {RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8)}},
    /* --- linalg_fp16 (linalg_vecdot: no such op) ------------------------------------------ */
    {"linalg_multi_dot", "linalg_fp16", "multi_dot", RUN_LOWER, 0, run_multi_dot, 3,
     {RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8), RANDN(MX_F32, 8, 8)}},
    /* --- methods_fp16: __matmul__ is mx_matmul (the matmul row) ---------------------------- */
    /* --- not in the test lists, in autocast_mode.cpp's lower_precision_fp list ------------- */
    {"scaled_dot_product_attention", "autocast_mode.cpp", "scaled_dot_product_attention", RUN_LOWER, 0, run_sdpa, 3,
     {RANDN(MX_F32, 2, 8, 8), RANDN(MX_F32, 2, 8, 8), RANDN(MX_F32, 2, 8, 8)}},

    /* --- torch_fp32 ------------------------------------------------------------------------ */
    F32L("acos", "acos", run_acos, 1, CLAMPED(LP, -.9, .9, 8)),
    F32L("asin", "asin", run_asin, 1, CLAMPED(LP, -.9, .9, 8)),
    F32L("cosh", "cosh", run_cosh, 1, RANDN(LP, 8)),
    F32L("erfinv", "erfinv", run_erfinv, 1, CLAMPED(LP, -.9, .9, 8)),
    F32L("exp", "exp", run_exp, 1, RANDN(LP, 8)),
    F32L("expm1", "expm1", run_expm1, 1, RANDN(LP, 8)),
    F32L("log", "log", run_log, 1, CLAMPED(LP, 0.1, 100.0, 8)),
    F32L("log10", "log10", run_log10, 1, CLAMPED(LP, 0.1, 100.0, 8)),
    F32L("log2", "log2", run_log2, 1, CLAMPED(LP, 0.1, 100.0, 8)),
    F32L("log1p", "log1p", run_log1p, 1, CLAMPED(LP, -0.9, 100.0, 8)),
    F32L("reciprocal", "reciprocal", run_reciprocal, 1, RANDN(LP, 8)),
    F32L("rsqrt", "rsqrt", run_rsqrt, 1, CLAMPED(LP, 0.0, 100.0, 8)),
    F32L("sinh", "sinh", run_sinh, 1, RANDN(LP, 8)),
    F32L("tan", "tan", run_tan, 1, CLAMPED(LP, -3.1 / 2, 3.1 / 2, 8)),
    F32L("pow", "pow", run_pow, 2, POW_BASE(LP, 8), RANDN(LP, 8)),
    F32L("pow (Tensor, 1.7)", "pow", run_pow_1_7, 1, POW_BASE(LP, 8)),
    {"__pow__ (rand, 1.5)", "methods_fp32", "pow", RUN_FP32, 0, run_pow_1_5, 1, {RAND(LP, 8)}},
    F32L("softmax", "softmax", run_softmax, 1, RANDN(LP, 8)),
    F32L("log_softmax", "log_softmax", run_log_softmax, 1, RANDN(LP, 8)),
    F32L("layer_norm", "layer_norm", run_layer_norm, 1, RANDN(LP, 8)),
    F32L("group_norm", "group_norm", run_group_norm, 1, RANDN(LP, 8, 8)),
    F32L("norm", "norm", run_norm, 1, RANDN(LP, 8)),
    F32L("norm (dim=0)", "norm", run_norm_dim0, 1, RANDN(LP, 8)),
    F32L("norm (p=1)", "norm", run_norm_p1, 1, RANDN(LP, 8)),
    F32L("norm (p=1, dim=0)", "norm", run_norm_p1_dim0, 1, RANDN(LP, 8)),
    F32L("cosine_similarity", "cosine_similarity", run_cosine_similarity, 2, RANDN(LP, 8, 8), RANDN(LP, 8, 8)),
    F32L("poisson_nll_loss", "poisson_nll_loss", run_poisson_nll_loss, 2, RANDN(LP, 8, 8), RANDN(LP, 8, 8)),
    F32L("cosine_embedding_loss", "cosine_embedding_loss", run_cosine_embedding_loss, 3, VALUES(LP, emb_a, 1, 3),
         VALUES(LP, emb_b, 1, 3), VALUES(MX_I32, emb_t, 1)),
    F32L("hinge_embedding_loss", "hinge_embedding_loss", run_hinge_embedding_loss, 2, RANDN(LP, 8, 8),
         FULL(MX_I32, 1, 8)),
    F32L("kl_div", "kl_div", run_kl_div, 2, RANDN(LP, 8, 8), RAND(LP, 8, 8)),
    /* adapted: the list's target is ones((n,)) for torch.margin_ranking_loss, which
     * broadcasts; mixgrad's loss is F.margin_ranking_loss's, which requires inputs and
     * target of one rank, so the target is ones((1, n)) (the same broadcast values) */
    F32L("margin_ranking_loss", "margin_ranking_loss", run_margin_ranking_loss, 3, RANDN(LP, 8, 8), RANDN(LP, 8, 8),
         FULL(LP, 1, 1, 8)),
    F32L("triplet_margin_loss", "triplet_margin_loss", run_triplet_margin_loss, 3, RANDN(LP, 8, 8), RANDN(LP, 8, 8),
         RANDN(LP, 8, 8)),
    F32L("binary_cross_entropy_with_logits", "binary_cross_entropy_with_logits", run_bce_with_logits, 2,
         RANDN(LP, 8, 8), RAND(LP, 8, 8)),
    F32L("cumprod", "cumprod", run_cumprod, 1, RANDN(LP, 8)),
    F32L("cumsum", "cumsum", run_cumsum, 1, RANDN(LP, 8)),
    F32L("dist", "dist", run_dist, 2, RANDN(LP, 8), RANDN(LP, 8)),
    F32L("pdist", "pdist", run_pdist, 1, RANDN(LP, 8, 8)),
    F32L("cdist", "cdist", run_cdist, 2, RANDN(LP, 8, 8), RANDN(LP, 8, 8)),
    F32L("prod", "prod", run_prod, 1, RANDN(LP, 8)),
    F32L("prod (dim=0)", "prod", run_prod_dim0, 1, RANDN(LP, 8)),
    F32L("renorm", "renorm", run_renorm, 1, RANDN(LP, 8, 8)),
    F32L("sum", "sum", run_sum, 1, RANDN(LP, 8)),
    F32L("sum (dim=1)", "sum", run_sum_dim1, 1, RANDN(LP, 8, 8)),
    F32L("logsumexp", "logsumexp", run_logsumexp, 1, RANDN(LP, 8, 8)),

    /* --- nn_fp32 ------------------------------------------------------------------------- */
    NN32("softplus", "softplus", run_softplus, 1, RANDN(LP, 8)),
    NN32("nll_loss", "nll_loss", run_nll_loss, 2, RAND(MX_F32, 8, 8), FULL(MX_I64, 0, 8)),
    NN32("nll_loss2d", "nll_loss", run_nll_loss, 2, RAND(LP, 8, 8, 8, 8), FULL(MX_I64, 0, 8, 8, 8)),
    NN32("l1_loss", "l1_loss", run_l1_loss, 2, RANDN(LP, 8, 8), RANDN(LP, 8, 8)),
    NN32("smooth_l1_loss", "smooth_l1_loss", run_smooth_l1_loss, 2, RANDN(LP, 8, 8), RANDN(LP, 8, 8)),
    NN32("mse_loss", "mse_loss", run_mse_loss, 2, RANDN(LP, 8, 8), RANDN(LP, 8, 8)),
    NN32("multilabel_margin_loss", "multilabel_margin_loss", run_multilabel_margin_loss, 2, RANDN(LP, 8, 8),
         FULL(MX_I64, 1, 8, 8)),
    NN32("soft_margin_loss", "soft_margin_loss", run_soft_margin_loss, 2, RANDN(LP, 8, 8), FULL(MX_I64, 1, 8, 8)),
    NN32("multi_margin_loss", "multi_margin_loss", run_multi_margin_loss, 2, RANDN(LP, 8, 8), FULL(MX_I64, 1, 8)),
    /* huber_loss: AutocastCPUTestLists.nn_fp32 (fp32 in autocast_mode.cpp's CUDA list too) */
    NN32("huber_loss", "huber_loss", run_huber_loss, 2, RANDN(LP, 8, 8), RANDN(LP, 8, 8)),

    /* --- torch_need_autocast_promote (vdot: no such op) -------------------------------------- */
    PROM("addcdiv", "addcdiv", run_addcdiv, 3, RANDN(MX_F32, 8), RANDN(LP, 8), CLAMPED(LP, 0.1, 100, 8)),
    PROM("addcmul", "addcmul", run_addcmul, 3, RANDN(MX_F32, 8), RANDN(LP, 8), RANDN(LP, 8)),
    PROM("atan2", "atan2", run_atan2, 2, RANDN(MX_F32, 8), CLAMPED(LP, 0.1, 100, 8)),
    PROM("bilinear", "bilinear", run_bilinear, 4, RANDN(LP, 1, 2), RANDN(MX_F32, 1, 2), RANDN(LP, 1, 2, 2),
         RANDN(MX_F32, 1)),
    PROM("cross", "cross", run_cross, 2, RANDN(MX_F32, 3), RANDN(LP, 3)),
    PROM("dot", "dot", run_dot, 2, RANDN(LP, 8), RANDN(MX_F32, 8)),
    PROM("grid_sampler", "grid_sample", run_grid_sampler, 2, RANDN(LP, 2, 3, 33, 22), RANDN(MX_F32, 2, 22, 11, 2)),
    PROM("index_put", "index_put", run_index_put, 3, RANDN(MX_F32, 8), FULL(MX_I64, 1, 1), RANDN(LP, 1)),
    PROM("index_put (f16 self)", "index_put", run_index_put, 3, RANDN(LP, 8), FULL(MX_I64, 1, 1), RANDN(MX_F32, 1)),
    PROM("tensordot", "tensordot", run_tensordot, 2, RANDN(MX_F32, 2, 2, 2), RANDN(LP, 2, 2, 2)),
    PROM("scatter_add", "scatter_add", run_scatter_add, 3, FULL(MX_F32, 0, 2, 2, 2), RANDINT(MX_I64, 0, 2, 2, 2, 2),
         RANDN(LP, 2, 2, 2)),
    PROM("scatter_add (f16 self)", "scatter_add", run_scatter_add, 3, FULL(LP, 0, 2, 2, 2),
         RANDINT(MX_I64, 0, 2, 2, 2, 2), RANDN(MX_F32, 2, 2, 2)),

    /* --- torch_expect_builtin_promote / methods_expect_builtin_promote (equal: no such op) -- */
    BUILTIN("eq", MX_BOOL, run_eq, RANDN(MX_F32, 8), RANDN(LP, 8)),
    BUILTIN("ge", MX_BOOL, run_ge, RANDN(MX_F32, 8), RANDN(LP, 8)),
    BUILTIN("gt", MX_BOOL, run_gt, RANDN(MX_F32, 8), RANDN(LP, 8)),
    BUILTIN("le", MX_BOOL, run_le, RANDN(MX_F32, 8), RANDN(LP, 8)),
    BUILTIN("lt", MX_BOOL, run_lt, RANDN(MX_F32, 8), RANDN(LP, 8)),
    BUILTIN("ne", MX_BOOL, run_ne, RANDN(MX_F32, 8), RANDN(LP, 8)),
    BUILTIN("add", MX_F32, run_add, RANDN(MX_F32, 8), RANDN(LP, 8)),
    BUILTIN("div", MX_F32, run_div, RANDN(MX_F32, 8), RANDN(LP, 8)),
    BUILTIN("mul", MX_F32, run_mul, RANDN(MX_F32, 8), RANDN(LP, 8)),
    BUILTIN("cat", MX_F32, run_cat, RANDN(LP, 8), RANDN(MX_F32, 8)),
    BUILTIN("stack", MX_F32, run_stack, RANDN(LP, 8), RANDN(MX_F32, 8)),
};
#define N_LIST_CASES ((int)(sizeof list_cases / sizeof list_cases[0]))

static mx_tensor *make_input(const in_spec *s, mx_dtype lower, mx_generator *gen) {
  mx_dtype dtype = s->dtype == LP ? lower : s->dtype;
  mx_tensor *t = NULL;
  switch (s->kind) {
  case IN_RANDN: t = mx_randn(s->shape, MX_F32, MX_CPU, gen); break;
  case IN_RAND: t = mx_rand(s->shape, MX_F32, MX_CPU, gen); break;
  case IN_CLAMP: t = mx_clamp(mx_randn(s->shape, MX_F32, MX_CPU, gen), s->a, s->b); break;
  case IN_POW_BASE: t = mx_clamp(mx_add_scalar(mx_randn(s->shape, MX_F32, MX_CPU, gen), 1.0), 0.0, 100.0); break;
  case IN_FULL: t = mx_full(s->shape, s->a, MX_F32, MX_CPU); break;
  case IN_RANDINT: return mx_randint((int64_t)s->a, (int64_t)s->b, s->shape, dtype, MX_CPU, gen);
  case IN_VALUES: t = mx_from_data(s->values, s->shape, MX_F64, MX_CPU); break;
  }
  return t ? mx_to_dtype(t, dtype) : NULL;
}

/* PyTorch's cast(): floating tensors to to_type, the rest as they are. */
static mx_tensor *cast_arg(mx_tensor *t, mx_dtype to) {
  return mx_dtype_is_floating(mx_dtype_of(t)) ? mx_to_dtype(t, to) : t;
}

typedef struct {
  int row;
  mx_dtype region;
} list_param;

static list_param list_params[2 * N_LIST_CASES];

ParameterizedTestParameters(pytorch_cases, autocast_lists) {
  int n = 0, stride = case_stride();
  for (int k = 0; k < 2 * N_LIST_CASES; k += stride)
    list_params[n++] = (list_param){k / 2, k % 2 ? MX_BF16 : MX_F16};
  return cr_make_param_array(list_param, list_params, (size_t)n);
}

ParameterizedTest(list_param *p, pytorch_cases, autocast_lists) {
  const list_case *c = &list_cases[p->row];
  mx_dtype region = p->region;
  mx_dtype run_as = c->kind == RUN_LOWER ? region : MX_F32;
  mx_dtype out_type = c->kind == RUN_BUILTIN ? c->out_type : run_as;
  char what[160];
  snprintf(what, sizeof what, "%s (%s) in a %s region", c->torch_op, c->list, mx_dtype_name(region));

  mx_generator *gen = mx_generator_new(1234 + (uint64_t)p->row);
  mx_tensor *in[8] = {0}, *cast_in[8] = {0};
  for (int i = 0; i < c->n_in; i++) {
    in[i] = make_input(&c->in[i], region, gen);
    cr_assert_not_null(in[i], "%s: input %d: %s", what, i, mx_last_error());
  }
  mx_generator_free(gen);

  mx_tensor *out[2] = {0}, *control[2] = {0};
  mx_status status = MX_OK, control_status = MX_OK;
  cr_assert_not(mx_autocast_is_enabled(MX_CPU));
  MX_AUTOCAST(MX_CPU, region, true, true) {
    cr_assert(mx_autocast_is_enabled(MX_CPU));
    status = c->run(in, out);
    MX_AUTOCAST(MX_CPU, region, false, true) {
      cr_assert_not(mx_autocast_is_enabled(MX_CPU));
      for (int i = 0; i < c->n_in; i++) cast_in[i] = cast_arg(in[i], run_as);
      control_status = c->run(cast_in, control);
    }
    cr_assert(mx_autocast_is_enabled(MX_CPU));
  }
  cr_assert_not(mx_autocast_is_enabled(MX_CPU));
  cr_assert_eq(status, MX_OK, "%s: %s", what, mx_last_error());
  cr_assert_eq(control_status, MX_OK, "%s: control: %s", what, mx_last_error());
  for (int k = 0; k < 2 && out[k]; k++) {
    cr_assert_eq(mx_dtype_of(out[k]), out_type, "autocast for %s produced %s, should produce %s", what,
                 mx_dtype_name(mx_dtype_of(out[k])), mx_dtype_name(out_type));
    NOT_NULL(control[k]);
    expect_bitwise(what, out[k], control[k]);
  }
}

/* The policy column of ops/ops.def against the lists: each row's op carries
 * the list's policy, and every op with a policy other than NONE is in a list
 * (or named below with the reason it is not). */
Test(pytorch_cases, policy_column_matches_the_lists) {
  for (int k = 0; k < N_LIST_CASES; k++) {
    const list_case *c = &list_cases[k];
    int op = op_index(c->mx_op);
    cr_assert_geq(op, 0, "no op row named %s (for %s)", c->mx_op, c->torch_op);
    mx_cast_policy want = c->kind == RUN_LOWER     ? MX_CAST_LOWER
                          : c->kind == RUN_FP32    ? MX_CAST_FP32
                          : c->kind == RUN_PROMOTE ? MX_CAST_PROMOTE
                                                   : MX_CAST_NONE;
    cr_expect_eq(mx_autocast_policy(op), want, "%s (%s): policy %s, the list says %s", c->torch_op, c->list,
                 mx_cast_policy_name(mx_autocast_policy(op)), mx_cast_policy_name(want));
  }
  /* ops with a policy that PyTorch's test lists do not name */
  static const char *const elsewhere[] = {
      "convolution",           /* the primitive under conv (the list's "convolution" row) */
      "conv_transpose",        /* the rank-generic form of the listed conv_transpose1d/2d/3d */
      "binary_cross_entropy",  /* banned: autocast_banned below */
      "softmin",               /* softmax(-x): float32 in PyTorch through softmax */
      "cross_entropy",         /* log_softmax + nll_loss: float32 in PyTorch through both */
      "cross_entropy_indices", /* cross_entropy's fused primitive: float32 as cross_entropy */
      "normalize",             /* x / norm(x): float32 in PyTorch through norm */
      "rdiv",                  /* scalar / tensor: reciprocal's float32, rdiv_is_float32 below */
      "conv2d_relu",           /* relu(conv2d): lower in PyTorch through conv2d */
      "linear_relu",           /* relu(linear): lower in PyTorch through linear */
      "linear_bias",           /* linear's primitive for a bias (PyTorch's addmm): lower through linear */
      "conv2d_max_pool_relu",  /* max_pool(relu(conv2d)): lower in PyTorch through conv2d */
  };
  for (int op = 0; op < mx_op_count(); op++) {
    if (mx_autocast_policy(op) == MX_CAST_NONE) continue;
    bool listed = false;
    for (int k = 0; k < N_LIST_CASES && !listed; k++) listed = strcmp(list_cases[k].mx_op, mx_op_name(op)) == 0;
    for (size_t k = 0; k < sizeof elsewhere / sizeof *elsewhere && !listed; k++)
      listed = strcmp(elsewhere[k], mx_op_name(op)) == 0;
    cr_expect(listed, "op %s has policy %s but no PyTorch list names it", mx_op_name(op),
              mx_cast_policy_name(mx_autocast_policy(op)));
  }
}

/* The ops reached through another one's float32 policy in PyTorch (named
 * in policy_column_matches_the_lists): float32 under autocast here too. */
Test(pytorch_cases, ops_float32_through_a_listed_op) {
  mx_tensor *x = mx_to_dtype(mx_randn(MX_SHAPE(4, 5), MX_F32, MX_CPU, NULL), MX_F16);
  mx_tensor *t = mx_full(MX_SHAPE(4), 2, MX_I64, MX_CPU);
  mx_tensor *y[4] = {0};
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
    y[0] = mx_softmin(x, 1);
    y[1] = mx_cross_entropy(x, t, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.0);
    y[2] = mx_normalize(x, 2.0, 1, 1e-12);
    y[3] = mx_rdiv_scalar(2.0, x);
  }
  for (int k = 0; k < 4; k++) {
    NOT_NULL(y[k]);
    cr_expect_eq(mx_dtype_of(y[k]), MX_F32, "case %d: %s", k, mx_dtype_name(mx_dtype_of(y[k])));
  }
  expect_bitwise("rdiv", y[3], mx_rdiv_scalar(2.0, mx_to_dtype(x, MX_F32)));
}

/* autocast_mode.h prioritize() (the promote policy), input by input from
 * the region's dtype: float32 wins over the lower dtype, float64 is
 * skipped, and the other 16-bit dtype met before any float32 raises
 * "Unexpected floating ScalarType in at::autocast::prioritize" (the error
 * behind test_autocast_prioritize's issue 132715). So, as in PyTorch, the
 * order counts: a float32 first makes the float16 that follows harmless. */
Test(pytorch_cases, promote_of_mixed_lower_dtypes) {
  mx_tensor *h = mx_to_dtype(mx_randn(MX_SHAPE(8), MX_F32, MX_CPU, NULL), MX_F16);
  mx_tensor *b = mx_to_dtype(mx_randn(MX_SHAPE(8), MX_F32, MX_CPU, NULL), MX_BF16);
  mx_tensor *f = mx_randn(MX_SHAPE(8), MX_F32, MX_CPU, NULL);
  mx_tensor *mixed = b, *f16_before_f32 = b, *f32_first = NULL, *same = NULL, *in_f16_region = b;
  char mixed_error[512] = "";
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    mixed = mx_addcmul(b, h, b, 1.0); /* PyTorch: RuntimeError */
    snprintf(mixed_error, sizeof mixed_error, "%s", mx_last_error());
    f16_before_f32 = mx_addcmul(b, h, f, 1.0); /* PyTorch: RuntimeError, at h */
    f32_first = mx_addcmul(f, h, b, 1.0);
    same = mx_addcmul(b, b, b, 1.0);
  }
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) { in_f16_region = mx_addcmul(b, b, b, 1.0); }
  cr_assert_null(mixed);
  cr_assert_str_eq(mixed_error, "mx_addcmul: autocast cannot promote input 1, float16, with bfloat16 (the bfloat16 "
                   "region's dtype): float16 and bfloat16 have no common type under the promote policy (PyTorch: "
                   "\"Unexpected floating ScalarType in at::autocast::prioritize\"); cast the inputs to one dtype "
                   "first");
  cr_assert_null(f16_before_f32);
  cr_assert_null(in_f16_region);
  cr_assert_eq(mx_dtype_of(f32_first), MX_F32);
  cr_assert_eq(mx_dtype_of(same), MX_BF16);
  expect_bitwise("addcmul(f32, f16, bf16)", f32_first,
                 mx_addcmul(f, mx_to_dtype(h, MX_F32), mx_to_dtype(b, MX_F32), 1.0));
}

/* test_cuda.py test_autocast_banned: every op of the banned list raises
 * inside a region (binary_cross_entropy of two (8, 8) float32 tensors). */
Test(pytorch_cases, autocast_banned) {
  mx_tensor *a = mx_rand(MX_SHAPE(8, 8), MX_F32, MX_CPU, NULL), *b = mx_rand(MX_SHAPE(8, 8), MX_F32, MX_CPU, NULL);
  mx_tensor *y = a;
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) { y = mx_binary_cross_entropy(a, b, NULL, MX_REDUCTION_MEAN); }
  cr_assert_null(y);
  cr_assert_eq(mx_last_status(), MX_DTYPE_ERROR);
  cr_assert(strstr(mx_last_error(), "unsafe to autocast"), "%s", mx_last_error());
  MX_AUTOCAST(MX_CPU, MX_F16, false, true) { y = mx_binary_cross_entropy(a, b, NULL, MX_REDUCTION_MEAN); }
  NOT_NULL(y);
}
