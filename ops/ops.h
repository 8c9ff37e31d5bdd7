/* The ops: every function here goes through one dispatcher (check,
 * autocast, autograd, kernel), is differentiable where math allows, and
 * returns a new tensor handle or NULL with mx_last_error() set.
 *
 *     mx_tensor *y = mx_relu(mx_add(mx_matmul(x, w), b));
 *     mx_tensor *loss = mx_mean(mx_mul(y, y), MX_ALL_DIMS, false);
 *
 * Binary ops broadcast like NumPy and promote dtypes like PyTorch
 * (f16 + f32 -> f32, int + float -> float, a C scalar never widens a
 * tensor's dtype). The table of every op, with its autocast policy, is
 * ops/ops.def.
 */
#ifndef MX_OPS_OPS_H
#define MX_OPS_OPS_H

#include "autograd/autograd.h"
#include "tensor/tensor.h"

MX_API_BEGIN

/* What autocast does to an op's floating inputs (see ops/ops.def). */
typedef enum { MX_CAST_NONE, MX_CAST_LOWER, MX_CAST_FP32, MX_CAST_PROMOTE, MX_CAST_BANNED } mx_cast_policy;

/* Reduce over every dim. */
#define MX_ALL_DIMS ((mx_shape){-1, {0}})

/* --- views: share the storage, no copy; differentiable ------------------------- */
/* One dim may be -1 (inferred). reshape copies when a view is impossible;
 * view fails instead. */
mx_tensor *mx_reshape(const mx_tensor *t, mx_shape shape);
mx_tensor *mx_view(const mx_tensor *t, mx_shape shape);
mx_tensor *mx_transpose(const mx_tensor *t, int dim0, int dim1);
mx_tensor *mx_permute(const mx_tensor *t, mx_shape dims);
mx_tensor *mx_squeeze(const mx_tensor *t, int dim); /* no-op if size(dim) != 1 */
mx_tensor *mx_squeeze_all(const mx_tensor *t);
mx_tensor *mx_unsqueeze(const mx_tensor *t, int dim);
/* Elements start, start+step, ... below end (ends clamp like Python's). */
mx_tensor *mx_slice(const mx_tensor *t, int dim, int64_t start, int64_t end, int64_t step);
mx_tensor *mx_narrow(const mx_tensor *t, int dim, int64_t start, int64_t length);
mx_tensor *mx_select(const mx_tensor *t, int dim, int64_t index); /* drops dim */
/* Size-1 dims broadcast to any size (stride 0); -1 keeps a size. */
mx_tensor *mx_expand(const mx_tensor *t, mx_shape shape);
mx_tensor *mx_broadcast_to(const mx_tensor *t, mx_shape shape);
mx_tensor *mx_flatten(const mx_tensor *t, int start_dim, int end_dim);

/* --- copies, casts and moves (differentiable) ---------------------------------------- */
mx_tensor *mx_contiguous(const mx_tensor *t); /* row-major; a new handle, copies only if needed */
/* A fresh copy, contiguous, or channels-last when t is (mx_is_channels_last);
 * mx_to_dtype and mx_to_device keep that layout too. */
mx_tensor *mx_clone(const mx_tensor *t);
/* t laid out channels-last (a 4-D (N, C, H, W) tensor stored as (N, H, W, C)):
 * a copy, or a new handle when t already is. Convolutions on the CPU read and
 * write this layout without converting it, and elementwise ops, clones and
 * casts of such a tensor keep it: convert a CNN's input once. The gradient
 * passes through unchanged. */
mx_tensor *mx_to_channels_last(const mx_tensor *t);
mx_tensor *mx_to_dtype(const mx_tensor *t, mx_dtype dtype);
mx_tensor *mx_to_device(const mx_tensor *t, mx_device device);

/* --- elementwise: one function per MX_UNARY / MX_BINARY row of ops/ops.def, declared with the row's doc line
 * in ops/elementwise_api.h, which the build writes from the rows: mx_neg(x) ... mx_exp(x), mx_relu(x),
 * mx_leaky_relu(x, negative_slope), mx_elu(x, alpha), mx_softplus(x, beta, threshold), mx_clamp(x, min, max), ...;
 * mx_add(a, b), mx_sub, mx_mul, mx_div, mx_pow, mx_remainder, mx_maximum, mx_minimum, mx_atan2, mx_eq ... mx_ge,
 * mx_logical_and/or/xor. docs/ops.md lists them all. */
#include "ops/elementwise_api.h"

/* --- elementwise: the other forms ------------------------------------------------- */
mx_tensor *mx_add_scaled(const mx_tensor *a, const mx_tensor *b, double alpha); /* a + alpha b */
mx_tensor *mx_logical_not(const mx_tensor *a);
/* With a C scalar on the right (or left, for rsub/rdiv/rpow). */
mx_tensor *mx_add_scalar(const mx_tensor *a, double b);
mx_tensor *mx_sub_scalar(const mx_tensor *a, double b);
mx_tensor *mx_rsub_scalar(double a, const mx_tensor *b); /* a - b */
mx_tensor *mx_mul_scalar(const mx_tensor *a, double b);
mx_tensor *mx_div_scalar(const mx_tensor *a, double b);
mx_tensor *mx_rdiv_scalar(double a, const mx_tensor *b); /* a / b */
mx_tensor *mx_pow_scalar(const mx_tensor *a, double b);
mx_tensor *mx_rpow_scalar(double a, const mx_tensor *b); /* a ** b */
mx_tensor *mx_eq_scalar(const mx_tensor *a, double b);
mx_tensor *mx_gt_scalar(const mx_tensor *a, double b);
mx_tensor *mx_ge_scalar(const mx_tensor *a, double b);
mx_tensor *mx_lt_scalar(const mx_tensor *a, double b);
mx_tensor *mx_le_scalar(const mx_tensor *a, double b);

/* --- ternary ------------------------------------------------------------------------- */
mx_tensor *mx_where(const mx_tensor *cond, const mx_tensor *a, const mx_tensor *b);
mx_tensor *mx_addcmul(const mx_tensor *a, const mx_tensor *t1, const mx_tensor *t2, double value);
mx_tensor *mx_addcdiv(const mx_tensor *a, const mx_tensor *t1, const mx_tensor *t2, double value);
mx_tensor *mx_lerp(const mx_tensor *start, const mx_tensor *end, const mx_tensor *weight);
mx_tensor *mx_masked_fill(const mx_tensor *a, const mx_tensor *mask, double value);

/* --- reductions: dims is a list (MX_DIMS(0, 2)) or MX_ALL_DIMS ---------------------- */
mx_tensor *mx_sum(const mx_tensor *x, mx_shape dims, bool keepdim);
/* The sum accumulated and returned in dtype (PyTorch's dtype= argument). */
mx_tensor *mx_sum_dtype(const mx_tensor *x, mx_shape dims, bool keepdim, mx_dtype dtype);
mx_tensor *mx_mean(const mx_tensor *x, mx_shape dims, bool keepdim);
mx_tensor *mx_prod(const mx_tensor *x, mx_shape dims, bool keepdim);
mx_tensor *mx_amax(const mx_tensor *x, mx_shape dims, bool keepdim);
mx_tensor *mx_amin(const mx_tensor *x, mx_shape dims, bool keepdim);
/* Values and int64 indices along one dim. */
mx_status mx_max_dim(const mx_tensor *x, int dim, bool keepdim, mx_tensor **values, mx_tensor **indices);
mx_status mx_min_dim(const mx_tensor *x, int dim, bool keepdim, mx_tensor **values, mx_tensor **indices);
mx_tensor *mx_max(const mx_tensor *x); /* over everything */
mx_tensor *mx_min(const mx_tensor *x);
/* dim MX_FLAT: the index into the flattened tensor */
#define MX_FLAT INT32_MIN
mx_tensor *mx_argmax(const mx_tensor *x, int dim, bool keepdim);
mx_tensor *mx_argmin(const mx_tensor *x, int dim, bool keepdim);
mx_tensor *mx_all(const mx_tensor *x, mx_shape dims, bool keepdim);
mx_tensor *mx_any(const mx_tensor *x, mx_shape dims, bool keepdim);
/* correction 1: Bessel's (unbiased), 0: population */
mx_tensor *mx_var(const mx_tensor *x, mx_shape dims, int64_t correction, bool keepdim);
mx_tensor *mx_std(const mx_tensor *x, mx_shape dims, int64_t correction, bool keepdim);
mx_tensor *mx_logsumexp(const mx_tensor *x, mx_shape dims, bool keepdim);
/* p = 1, 2, INFINITY; MX_NORM_FRO for the Frobenius norm (= 2) */
#define MX_NORM_FRO 2.0
mx_tensor *mx_norm(const mx_tensor *x, double p, mx_shape dims, bool keepdim);
mx_tensor *mx_cumsum(const mx_tensor *x, int dim);
mx_tensor *mx_cumprod(const mx_tensor *x, int dim);

/* --- linear algebra (f32/bf16 on oneDNN, f16 as f32 with rounded results) ----------- */
mx_tensor *mx_mm(const mx_tensor *a, const mx_tensor *b);   /* (n,k) @ (k,m) */
mx_tensor *mx_bmm(const mx_tensor *a, const mx_tensor *b);  /* (B,n,k) @ (B,k,m) */
mx_tensor *mx_matmul(const mx_tensor *a, const mx_tensor *b); /* torch.matmul rules */
/* beta * c + alpha * (a @ b). With beta and alpha 1 and c a vector of b's
 * columns (F.linear's call) it is mx_linear_bias: one rounding in 16 bits,
 * as PyTorch's. Otherwise, and in the four below, c is added to the rounded
 * product. In bfloat16 on the CPU, PyTorch 2.15 rounds addmm, baddbmm and
 * addmv once (an ulp apart from these on a fifth to two fifths of the
 * elements), addbmm once a batch, and addr as these do. */
mx_tensor *mx_addmm(const mx_tensor *c, const mx_tensor *a, const mx_tensor *b, double beta, double alpha);
mx_tensor *mx_addbmm(const mx_tensor *c, const mx_tensor *a, const mx_tensor *b, double beta, double alpha);
mx_tensor *mx_baddbmm(const mx_tensor *c, const mx_tensor *a, const mx_tensor *b, double beta, double alpha);
mx_tensor *mx_addmv(const mx_tensor *c, const mx_tensor *m, const mx_tensor *v, double beta, double alpha);
mx_tensor *mx_addr(const mx_tensor *c, const mx_tensor *u, const mx_tensor *v, double beta, double alpha);
mx_tensor *mx_mv(const mx_tensor *m, const mx_tensor *v);
mx_tensor *mx_dot(const mx_tensor *a, const mx_tensor *b);
mx_tensor *mx_outer(const mx_tensor *a, const mx_tensor *b);

/* --- softmax (numerically stable; dtype variants compute in dtype) ---------------------- */
mx_tensor *mx_softmax(const mx_tensor *x, int dim);
mx_tensor *mx_log_softmax(const mx_tensor *x, int dim);
mx_tensor *mx_softmax_dtype(const mx_tensor *x, int dim, mx_dtype dtype);
mx_tensor *mx_log_softmax_dtype(const mx_tensor *x, int dim, mx_dtype dtype);
mx_tensor *mx_softmin(const mx_tensor *x, int dim);

/* --- indexing and joining (indices are int64) ---------------------------------------------- */
mx_tensor *mx_gather(const mx_tensor *x, int dim, const mx_tensor *index);
mx_tensor *mx_scatter(const mx_tensor *x, int dim, const mx_tensor *index, const mx_tensor *src);
mx_tensor *mx_scatter_add(const mx_tensor *x, int dim, const mx_tensor *index, const mx_tensor *src);
mx_tensor *mx_index_select(const mx_tensor *x, int dim, const mx_tensor *index);
mx_tensor *mx_index_add(const mx_tensor *x, int dim, const mx_tensor *index, const mx_tensor *src, double alpha);
mx_tensor *mx_index_copy(const mx_tensor *x, int dim, const mx_tensor *index, const mx_tensor *src);
/* x[indices[0], ..., indices[n-1]] = values (+= when accumulate); the index
 * tensors broadcast together and address the leading dims */
mx_tensor *mx_index_put(const mx_tensor *x, int n_indices, mx_tensor *const *indices, const mx_tensor *values,
                        bool accumulate);
mx_tensor *mx_embedding(const mx_tensor *weight, const mx_tensor *indices);
mx_tensor *mx_cat(int n, mx_tensor *const *tensors, int dim);
mx_tensor *mx_stack(int n, mx_tensor *const *tensors, int dim);
/* Pieces of split_size (the last may be smaller) or `chunks` nearly equal
 * pieces, as views in out[]; returns how many, or -1 with the error set.
 * As in PyTorch, an empty dim splits into one empty piece and chunks into
 * `chunks` of them. */
int mx_split(const mx_tensor *x, int64_t split_size, int dim, mx_tensor **out, int max_out);
int mx_chunk(const mx_tensor *x, int chunks, int dim, mx_tensor **out, int max_out);
typedef enum { MX_PAD_CONSTANT, MX_PAD_REFLECT, MX_PAD_REPLICATE } mx_pad_mode;
/* pads: (left, right) pairs starting from the last dim, like F.pad */
mx_tensor *mx_pad(const mx_tensor *x, mx_shape pads, mx_pad_mode mode, double value);
mx_tensor *mx_flip(const mx_tensor *x, mx_shape dims);
mx_tensor *mx_roll(const mx_tensor *x, int64_t shift, int dim);
mx_tensor *mx_repeat(const mx_tensor *x, mx_shape repeats);
mx_tensor *mx_tril(const mx_tensor *x, int64_t diagonal);
mx_tensor *mx_triu(const mx_tensor *x, int64_t diagonal);
/* num_classes -1: one more than the largest index */
mx_tensor *mx_one_hot(const mx_tensor *indices, int64_t num_classes);
/* zeroes elements with probability p and scales the rest by 1/(1-p) when
 * training; the identity otherwise. gen may be NULL (default generator). */
mx_tensor *mx_dropout(const mx_tensor *x, double p, bool training, mx_generator *gen);

/* --- sorting and sampling (indices are int64) ----------------------------------------------------- */
/* Sorts every line along dim: values and where each came from. The sort is
 * stable (equal values keep their input order; stable is PyTorch's flag and
 * changes nothing) and NaN counts as larger than every number: last
 * ascending, first descending. values gets a gradient; either output
 * pointer may be NULL. */
mx_status mx_sort(const mx_tensor *x, int dim, bool descending, bool stable, mx_tensor **values,
                  mx_tensor **indices);
mx_tensor *mx_argsort(const mx_tensor *x, int dim, bool descending, bool stable);
/* The k largest (or smallest) along dim, always sorted (sorted is
 * PyTorch's flag), ties in input order. */
mx_status mx_topk(const mx_tensor *x, int64_t k, int dim, bool largest, bool sorted, mx_tensor **values,
                  mx_tensor **indices);
/* num_samples int64 category indices per row of a 1-D (C) or 2-D (B, C)
 * tensor of non-negative floating weights (they need not sum to 1); without
 * replacement no index repeats in a row. gen may be NULL (default
 * generator). */
mx_tensor *mx_multinomial(const mx_tensor *probs, int64_t num_samples, bool replacement, mx_generator *gen);

/* --- pooling over `spatial` (1-3) dims of (N, C, *S); one-element lists
 * apply to every dim, an empty stride means stride = kernel ------------------------------ */
mx_tensor *mx_max_pool(const mx_tensor *x, int spatial, mx_shape kernel, mx_shape stride, mx_shape padding);
mx_status mx_max_pool_with_indices(const mx_tensor *x, int spatial, mx_shape kernel, mx_shape stride, mx_shape padding,
                                   mx_shape dilation, mx_tensor **values, mx_tensor **indices);
/* mx_max_pool(mx_relu(x), ...) as one op, the same bits forward and
 * backward: the search takes each input's relu as it reads it, and the
 * backward masks the pooled gradient, not the full-resolution one. nn's
 * Sequential runs a ReLU followed by a MaxPool through it. */
mx_tensor *mx_max_pool_relu(const mx_tensor *x, int spatial, mx_shape kernel, mx_shape stride, mx_shape padding,
                            mx_shape dilation);
mx_tensor *mx_avg_pool(const mx_tensor *x, int spatial, mx_shape kernel, mx_shape stride, mx_shape padding,
                       bool count_include_pad);
mx_tensor *mx_adaptive_avg_pool2d(const mx_tensor *x, int64_t out_h, int64_t out_w);

/* --- convolution: x (N, C_in, *S), weight (C_out, C_in / groups, *K), bias (C_out)
 * or NULL; stride, padding, dilation: one value per spatial dim or one for all, empty
 * for the defaults (1, 0, 1). Transposed: weight (C_in, C_out / groups, *K).
 * A float32 2-d convolution with a 3x3 filter, stride 1, one group and 16 or more
 * input channels runs as Winograd on a CPU with AVX-512 (as cuDNN's float32 3x3 ones
 * on the GPU; a bfloat16 one from 64 channels and 8x8 outputs, without a bias, too,
 * in float32 and rounded once): 2-3x faster, rounding within a few units of float32
 * of its terms' magnitudes rather than of the sum's, and a NaN or infinite input
 * makes NaN or infinity of each 4x4 block of outputs that reads it, not only of its
 * window's. ---------------------------------------------------------------------- */
mx_tensor *mx_conv(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, int spatial, mx_shape stride,
                   mx_shape padding, mx_shape dilation, int64_t groups);
mx_tensor *mx_conv1d(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, mx_shape stride,
                     mx_shape padding, mx_shape dilation, int64_t groups);
mx_tensor *mx_conv2d(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, mx_shape stride,
                     mx_shape padding, mx_shape dilation, int64_t groups);
mx_tensor *mx_conv3d(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, mx_shape stride,
                     mx_shape padding, mx_shape dilation, int64_t groups);
/* relu(mx_conv2d(...)) as one op, bit for bit: the CPU runs the ReLU inside
 * oneDNN's convolution (float32 and bfloat16, where a NaN sum gives 0, not
 * NaN, and one that is or rounds to -0 gives +0), and backward keeps the
 * output, not the sum before the ReLU. nn's Sequential runs a Conv2d
 * followed by a ReLU through it. */
mx_tensor *mx_conv2d_relu(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, mx_shape stride,
                          mx_shape padding, mx_shape dilation, int64_t groups);
/* x @ weight^T + bias as one op: x (..., in), weight (out, in), bias (out).
 * The bias is added to the float32 sums before the one rounding of a
 * 16-bit result, as PyTorch's linear (addmm) does; matmul then add would
 * round twice. oneDNN's matmul with its bias on the CPU (float32, and
 * bfloat16 where the CPU has its dot products), cuBLASLt's bias epilogue
 * on CUDA (float32, float16, bfloat16); elsewhere matmul and add, on
 * float32 copies for 16 bits. mx_linear runs it for such a weight and bias. */
mx_tensor *mx_linear_bias(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias);
/* relu(mx_linear(x, weight, bias)) as one op: x (..., in), weight (out,
 * in), bias (out) or NULL. The ReLU runs inside mx_linear_bias's kernel:
 * oneDNN's post-op on the CPU, bit for bit (where, as in mx_conv2d_relu, a
 * NaN sum gives 0, not NaN), cuBLASLt's bias-and-ReLU epilogue on CUDA
 * (within the rounding of sums taken in another order); no bias, and cases
 * the kernels decline, run mx_linear's ops and mx_relu. Backward keeps the
 * output, not the sum before the ReLU. nn's Sequential runs a Linear
 * followed by a ReLU through it. */
mx_tensor *mx_linear_relu(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias);
mx_tensor *mx_conv_transpose(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, int spatial,
                             mx_shape stride, mx_shape padding, mx_shape output_padding, mx_shape dilation,
                             int64_t groups);
mx_tensor *mx_conv_transpose1d(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, mx_shape stride,
                               mx_shape padding, mx_shape output_padding, mx_shape dilation, int64_t groups);
mx_tensor *mx_conv_transpose2d(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, mx_shape stride,
                               mx_shape padding, mx_shape output_padding, mx_shape dilation, int64_t groups);
mx_tensor *mx_conv_transpose3d(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias, mx_shape stride,
                               mx_shape padding, mx_shape output_padding, mx_shape dilation, int64_t groups);
/* Empty list for the default of stride/padding/dilation arguments. */
#define MX_DEFAULT ((mx_shape){0, {0}})

/* --- normalisation (weight, bias and the running statistics may be NULL) ------------------ */
/* Training normalises with the batch statistics and updates the running
 * ones in place (unbiased variance, like PyTorch); eval uses them. */
mx_tensor *mx_batch_norm(const mx_tensor *x, mx_tensor *running_mean, mx_tensor *running_var, const mx_tensor *weight,
                         const mx_tensor *bias, bool training, double momentum, double eps);
/* relu(mx_batch_norm(...)), the same bits, with the relu and its backward
 * fused into batch norm's passes: no pass and no tensor of their own. */
mx_tensor *mx_batch_norm_relu(const mx_tensor *x, mx_tensor *running_mean, mx_tensor *running_var,
                              const mx_tensor *weight, const mx_tensor *bias, bool training, double momentum,
                              double eps);
mx_tensor *mx_layer_norm(const mx_tensor *x, mx_shape normalized_shape, const mx_tensor *weight, const mx_tensor *bias,
                         double eps);
mx_tensor *mx_group_norm(const mx_tensor *x, int64_t groups, const mx_tensor *weight, const mx_tensor *bias, double eps);

/* --- in-place (bump the version counter; recorded when the target is not a
 * leaf that requires grad) ---------------------------------------------------------- */
mx_status mx_add_(mx_tensor *self, const mx_tensor *other);
mx_status mx_mul_(mx_tensor *self, const mx_tensor *other);
mx_status mx_mul_scalar_(mx_tensor *self, double value);
mx_status mx_add_scalar_(mx_tensor *self, double value);
mx_status mx_exp_(mx_tensor *self);
mx_status mx_relu_(mx_tensor *self);

/* --- policy table --------------------------------------------------------------------- */
int mx_op_count(void);
const char *mx_op_name(int op);
const char *mx_op_inputs(int op); /* "cond, a, b" */
mx_cast_policy mx_op_policy(int op);
const char *mx_cast_policy_name(mx_cast_policy policy);
/* Composite ops are written with other ops (no kernel of their own). */
bool mx_op_is_composite(int op);
/* How the op is differentiated: "formula", "composite" or "none". */
const char *mx_op_gradient(int op);

#include "ops/composites.h"
#include "ops/losses.h"

MX_API_END

#endif
