/* Backends are vtables: one struct of function pointers per device.
 *
 * The CPU backend is always there. The CUDA backend registers when mixgrad
 * was built with CUDA and a device is found at run time; otherwise asking for
 * it fails with "mixgrad was built without CUDA" or "no CUDA device".
 * Nothing above this header knows which backend it is talking to.
 */
#ifndef MX_KERNELS_BACKEND_H
#define MX_KERNELS_BACKEND_H

#include "kernels/base_internal.h"
#include "kernels/math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reductions: out has in's ndim with size 1 along the reduced dims (mask
 * bit d set); index (int64, may be NULL) receives the position of the max
 * or min within the reduced sub-space, in row-major order. */
typedef enum { MX_RED_SUM, MX_RED_PROD, MX_RED_MAX, MX_RED_MIN, MX_RED_ALL, MX_RED_ANY } mx_reduce_code;

/* Convolution over the last `spatial` dims: x (N, C_in, *S), w (C_out,
 * C_in / groups, *K), y (N, C_out, *S_out). */
#ifndef MX_CONV_PARAMS_DEFINED /* kernels/cpu/conv.h defines it too */
#define MX_CONV_PARAMS_DEFINED
typedef struct {
  int spatial;
  int64_t stride[3], padding[3], dilation[3];
  int64_t groups;
} mx_conv_params;
#endif

/* Pooling over the last `spatial` dims of (N, C, *S). */
typedef struct {
  int spatial;
  int64_t kernel[3], stride[3], padding[3], dilation[3];
  bool count_include_pad; /* average pooling: the padding counts in the mean */
  bool relu;              /* max pooling: the search sees relu(x), max_pool_relu's */
} mx_pool_params;

/* An optimizer step's cast of a dense float32 parameter walked row-major,
 * for the next autocast region (tensor_impl.h: prepared casts), in host
 * memory: the step writes the updated parameter rounded to dtype (float16
 * or bfloat16 as kernels/math.h rounds) at data (the device's memory,
 * dense, in the walk's order), then sets written. A step skipped on
 * found_inf writes neither where the backend reads found_inf on the host
 * (the CPU); where it is read on the device (CUDA), the step writes the
 * cast of the parameter as it stands, skipped or not, and sets written. */
typedef struct {
  void *data;
  mx_dtype dtype;
  bool written;
} mx_optim_cast;

/* One parameter of an optimizer step; the pointers are the device's memory.
 * The state is contiguous, in the parameter's row-major order: float64 for
 * a float64 parameter, float32 for the others. */
typedef struct {
  mx_kview param, grad; /* one shape, any strides */
  void *state[3];       /* SGD: momentum buffer; Adam: exp_avg, exp_avg_sq, max_exp_avg_sq; NULL: unused */
  int64_t *step;        /* the steps this parameter has taken, counted here; NULL: SGD without momentum */
  mx_optim_cast *cast;  /* NULL, or where the step writes the parameter's cast (backends with optim_casts) */
} mx_optim_item;

/* What amp_update_scale zeroes after the update: a found_inf flag (NULL: none) and n_stats int64 counts (stats
 * NULL or n_stats 0: none), so that the scaler's next check need not launch fills of its own. */
typedef struct {
  float *found_inf;
  int64_t *stats;
  int64_t n_stats;
} mx_amp_clear;

/* Which of batch norm's per-channel coefficient formulas batch_norm_vectors computes. */
typedef enum { MX_BN_VECTORS_FORWARD, MX_BN_VECTORS_BACKWARD } mx_bn_vectors_formula;

/* batch_norm_vectors' (C) vectors: contiguous, of one dtype (float32, or float64 for float64 data); NULL: not given
 * (inputs) or not wanted (outputs). count is the values per channel n, momentum the running statistics'. */
typedef struct {
  const mx_kview *mean, *var, *weight, *bias;                 /* forward's inputs (var, weight: backward's too) */
  const mx_kview *running_mean, *running_var;                 /* forward: updated in place, both or neither */
  const mx_kview *sum_g, *sum_gxc, *grad_mean, *grad_var;     /* backward's inputs */
  const mx_kview *scale, *shift, *xc_scale, *dweight;         /* outputs */
  double eps, momentum, count;
} mx_bn_vectors;

/* The kernel slots of a backend, for supports(): X(ENUM, slot) */
#define MX_KERNEL_MAP(X)                                                                                    \
  X(FILL, fill) X(CONVERT, convert) X(RANDOM, random) X(BERNOULLI, bernoulli) X(UNARY, unary)             \
  X(BINARY, binary) X(WHERE, where) X(REDUCE, reduce) X(SCAN, scan) X(SORT, sort) X(MATMUL, matmul)        \
  X(SOFTMAX, softmax) X(GATHER, gather) X(SCATTER, scatter) X(INDEX_SELECT, index_select)                  \
  X(INDEX_ADD, index_add) X(CONV_FORWARD, conv_forward) X(CONV_BACKWARD_DATA, conv_backward_data)          \
  X(CONV_BACKWARD_WEIGHT, conv_backward_weight) X(CHANNEL_AFFINE, channel_affine)                         \
  X(CHANNEL_SUMS, channel_sums) X(CHANNEL_MOMENTS, channel_moments) X(MAX_POOL, max_pool)                 \
  X(MAX_POOL_BACKWARD, max_pool_backward)                                                                 \
  X(AVG_POOL, avg_pool) X(AVG_POOL_BACKWARD, avg_pool_backward) X(AMP_UNSCALE, amp_unscale)                \
  X(AMP_UPDATE_SCALE, amp_update_scale) X(AMP_HISTOGRAM, amp_histogram)                                    \
  X(AMP_UNSCALE_HISTOGRAM, amp_unscale_histogram) X(SGD_STEP, sgd_step) X(ADAM_STEP, adam_step)           \
  X(CONV_FORWARD_RELU, conv_forward_relu) X(LINEAR, linear)                                                  \
  X(CONV_BACKWARD_WEIGHT_BIAS, conv_backward_weight_bias) X(CONV_MAX_POOL_RELU, conv_max_pool_relu)           \
  X(CONV_MAX_POOL_RELU_BACKWARD, conv_max_pool_relu_backward) X(CHANNEL_COMBINE, channel_combine)              \
  X(BATCH_NORM_VECTORS, batch_norm_vectors) X(CROSS_ENTROPY, cross_entropy)                               \
  X(CROSS_ENTROPY_BACKWARD, cross_entropy_backward)

typedef enum {
#define MX__KERNEL_ENUM(E, slot) MX_KERNEL_##E,
  MX_KERNEL_MAP(MX__KERNEL_ENUM)
#undef MX__KERNEL_ENUM
  MX_KERNEL_COUNT
} mx_kernel;

/* A backend's answer to supports(kernel, dtype): whether that kernel runs on
 * data of that dtype here, and how. The two "cannot" answers are distinct
 * so that an error can say which it is. */
typedef enum {
  MX_KERNEL_NATIVE,    /* runs in the dtype itself (16-bit elementwise: each element in float32, as on a GPU) */
  MX_KERNEL_VIA_F32,   /* runs, on float32 copies rounded back: this machine has no 16-bit kernel for it */
  MX_KERNEL_NOT_BUILT, /* this build has no such kernel (the slot is empty, or its library was not compiled in) */
  MX_KERNEL_NOT_HERE,  /* built, but this machine cannot run it (a CPU or GPU without the instructions) */
} mx_kernel_support;

/* "matmul", "conv_forward", ...: the slot's name */
const char *mx__kernel_name(mx_kernel kernel);

typedef struct mx_backend {
  const char *name;
  mx_device device;

  /* What the kernel in a (non-NULL) slot does with dtype on this machine;
   * asked before an op allocates its outputs (ops/dispatch.c). NULL: every
   * present kernel runs natively. */
  mx_kernel_support (*supports)(mx_kernel kernel, mx_dtype dtype);

  /* memory: sizes in bytes; free is given the size for the statistics */
  mx_status (*alloc)(size_t bytes, void **out);
  void (*free)(void *ptr, size_t bytes);
  /* gives freed memory the allocator keeps for reuse back to the system;
   * NULL: it keeps none */
  mx_status (*empty_cache)(void);
  /* copy bytes between this device and the host (to_host: device -> host) */
  mx_status (*copy_from_host)(void *dst, const void *src, size_t bytes);
  mx_status (*copy_to_host)(void *dst, const void *src, size_t bytes);
  mx_status (*synchronize)(void);

  /* kernels on views of this device's memory */
  mx_status (*fill)(const mx_kview *out, double value);
  /* out = src converted to out's dtype; shapes equal, strides arbitrary */
  mx_status (*convert)(const mx_kview *out, const mx_kview *src);
  mx_status (*random)(const mx_kview *out, const mx_rand_params *params);
  /* out[i] = (u_i < p[i]), p a view with out's shape, u from the params */
  mx_status (*bernoulli)(const mx_kview *out, const mx_kview *p, const mx_rand_params *params);

  /* elementwise (kernels/elementwise.def): inputs share one dtype and are
   * broadcast to out's shape (stride 0) */
  mx_status (*unary)(int code, const mx_kview *out, const mx_kview *in, double a, double b);
  mx_status (*binary)(int code, const mx_kview *out, const mx_kview *x, const mx_kview *y, double alpha);
  mx_status (*where)(const mx_kview *out, const mx_kview *cond, const mx_kview *x, const mx_kview *y);

  /* reductions (out may be NULL when only indices are wanted) and scans
   * (cumulative SUM or PROD along dim, from the end when reverse) */
  mx_status (*reduce)(int code, const mx_kview *out, const mx_kview *index, const mx_kview *in, uint32_t mask);
  mx_status (*scan)(int code, const mx_kview *out, const mx_kview *in, int dim, bool reverse);
  /* a stable sort of every line along dim (NaN larger than every number):
   * values (in's dtype) and indices (int64) have in's shape, any strides */
  mx_status (*sort)(const mx_kview *values, const mx_kview *indices, const mx_kview *in, int dim, bool descending);

  /* out (B, M, N) = a (B, M, K) @ b (B, K, N); any strides (0 broadcasts a
   * batch), out contiguous; one dtype, f16/bf16 accumulate in float32 */
  mx_status (*matmul)(const mx_kview *out, const mx_kview *a, const mx_kview *b);

  /* softmax (or log_softmax) along dim; out and x share shape and dtype */
  mx_status (*softmax)(const mx_kview *out, const mx_kview *x, int dim, bool log_softmax);

  /* indexing with int64 indices along dim, checked against the size */
  mx_status (*gather)(const mx_kview *out, const mx_kview *x, const mx_kview *index, int dim);
  mx_status (*scatter)(const mx_kview *out, const mx_kview *index, const mx_kview *src, int dim, bool accumulate);
  mx_status (*index_select)(const mx_kview *out, const mx_kview *x, const mx_kview *index, int dim);
  mx_status (*index_add)(const mx_kview *out, const mx_kview *index, const mx_kview *src, int dim, double alpha,
                         bool accumulate);

  /* convolution (kernels/cpu/conv.h says what each computes) */
  mx_status (*conv_forward)(const mx_kview *y, const mx_kview *x, const mx_kview *w, const mx_kview *bias,
                            const mx_conv_params *p);
  mx_status (*conv_backward_data)(const mx_kview *dx, const mx_kview *dy, const mx_kview *w, const mx_conv_params *p);
  mx_status (*conv_backward_weight)(const mx_kview *dw, const mx_kview *dy, const mx_kview *x,
                                    const mx_conv_params *p);

  /* batch norm's per-channel kernels over contiguous (N, C, *) tensors of
   * one floating dtype, c along dim 1. The (C) vectors (center, scale,
   * shift, sum, dot) are contiguous, float64 for float64 data and float32
   * otherwise, and the arithmetic is in their dtype, rounded step by step
   * as the elementwise ops round it. A NULL center is zeros. ReLU fuses
   * in (kernels/math.h's mx_relu_*): a mask (NULL: none) has x's (a's)
   * shape and dtype and zeroes x (a) where mask <= 0, as relu's backward
   * of gradient x given relu's output mask; relu applies relu to y as
   * stored in its dtype.
   *   channel_affine: y = (x - center[c]) * scale[c] + shift[c]
   *   channel_sums:   sum[c] = sum of a, dot[c] = sum of (a - a_center[c])
   *                   (b - b_center[c]), over every dim but c; sum or dot
   *                   may be NULL (not wanted; b is NULL without dot)
   *   channel_moments: mean[c] and biased variance var[c] of x over every
   *                   dim but c, in one read: kernels/math.h's
   *                   mx_moments_of on sums in double of x - k and of its
   *                   square, k the channel's first value */
  mx_status (*channel_affine)(const mx_kview *y, const mx_kview *x, const mx_kview *center, const mx_kview *scale,
                              const mx_kview *shift, const mx_kview *mask, bool relu);
  mx_status (*channel_sums)(const mx_kview *sum, const mx_kview *dot, const mx_kview *a, const mx_kview *b,
                            const mx_kview *a_center, const mx_kview *b_center, const mx_kview *a_mask);
  mx_status (*channel_moments)(const mx_kview *mean, const mx_kview *var, const mx_kview *x);
  /* channel_combine (optional: without it batch norm's backward takes two
   * channel_affine passes and an add): y = a * scale_a[c] + (b - center_b[c])
   * * scale_b[c] + shift[c], the two products, then their sum, then the
   * shift's added, each rounded in the vectors' dtype, then the store into
   * y's; a, b, y (and a_mask) share one dtype and shape, every vector is
   * given, a is read through relu's backward given a_mask as above */
  mx_status (*channel_combine)(const mx_kview *y, const mx_kview *a, const mx_kview *b, const mx_kview *scale_a,
                               const mx_kview *center_b, const mx_kview *scale_b, const mx_kview *shift,
                               const mx_kview *a_mask);

  /* pooling (contiguous tensors, or 4-d channels-last ones: then x's (dx's)
   * layout is every tensor's of the call). Max pooling's indices say where each
   * max came from, in the encoding their dtype names: uint8, its offset in
   * the window, row-major over the kernel (used for kernels of at most 256
   * elements); int64, its flat position in the (N, C) plane */
  mx_status (*max_pool)(const mx_kview *out, const mx_kview *indices, const mx_kview *x, const mx_pool_params *p);
  mx_status (*max_pool_backward)(const mx_kview *dx, const mx_kview *dy, const mx_kview *indices,
                                 const mx_pool_params *p);
  mx_status (*avg_pool)(const mx_kview *out, const mx_kview *x, const mx_pool_params *p);
  mx_status (*avg_pool_backward)(const mx_kview *dx, const mx_kview *dy, const mx_pool_params *p);

  /* AMP. The pointers are this device's memory.
   * amp_unscale: one pass over n gradients (f32, f64 or bf16, any strides):
   * each value is multiplied by mx_amp_inv_scale(*scale); *found_inf is set
   * to 1 when a value is inf or NaN (never cleared here); stats (int64,
   * n x 3, accumulated into) counts per gradient the infs, the NaNs and the
   * values that are zero or subnormal in fp16, all before unscaling. */
  mx_status (*amp_unscale)(int n, const mx_kview *grads, const float *scale, float *found_inf, int64_t *stats);
  /* amp_update_scale: mx_amp_update_scale on one element (counters: 3),
   * then, in the same launch, clears what clear names (NULL: nothing) for
   * the scaler's next check; clear->found_inf may be found_inf itself, read
   * before it is cleared. */
  mx_status (*amp_update_scale)(float *scale, int32_t *growth_tracker, const float *found_inf,
                                const mx_amp_update_params *p, int64_t *counters, const mx_amp_clear *clear);
  /* AMP statistics (amp/stats.h), run on sampled steps only; hist holds
   * int64 counts of MX_AMP_HIST_BINS bins (mx_amp_hist_bin), accumulated into.
   * amp_histogram: the bins of every value of x (floating, any strides).
   * amp_unscale_histogram: amp_unscale, and for gradient t the bins of its
   * values before unscaling into hist + 2t * BINS and after (as stored)
   * into hist + (2t + 1) * BINS. */
  mx_status (*amp_histogram)(const mx_kview *x, int64_t *hist);
  mx_status (*amp_unscale_histogram)(int n, const mx_kview *grads, const float *scale, float *found_inf,
                                     int64_t *stats, int64_t *hist);

  /* Optimizers: one pass over n parameters sharing hyper-parameters
   * (mx_optim_item; kernels/math.h's element updates). found_inf (NULL:
   * none): when *found_inf != 0 no parameter, state or step count is
   * written (the items' casts: mx_optim_cast). grad_scale (NULL:
   * none): gradients are multiplied by mx_amp_inv_scale(*grad_scale) as they
   * are read. Gradients are never written. */
  mx_status (*sgd_step)(int n, const mx_optim_item *items, const mx_sgd_hparams *h, const float *found_inf,
                        const float *grad_scale);
  mx_status (*adam_step)(int n, const mx_optim_item *items, const mx_adam_hparams *h, const float *found_inf,
                         const float *grad_scale);

  /* y = relu(conv(x, w) + bias) in one kernel (oneDNN's post-op); NULL:
   * the op runs conv_forward, then unary's ReLU on y. Last, so the slots
   * before it keep their offsets. */
  mx_status (*conv_forward_relu)(const mx_kview *y, const mx_kview *x, const mx_kview *w, const mx_kview *bias,
                                 const mx_conv_params *p);
  /* out (1, M, N) = a (1, M, K) @ b (1, K, N) + bias (N), relu'd when
   * relu, in one kernel: float32 products and sums, the bias added before
   * the one rounding into out's dtype; a and b strided as matmul's.
   * MX_NOT_SUPPORTED, with no error set, where it declines the case (the
   * op then runs its float32 fallback, ops/linalg.c); NULL: always
   * declined. Appended, as conv_forward_relu. */
  mx_status (*linear)(const mx_kview *out, const mx_kview *a, const mx_kview *b, const mx_kview *bias, bool relu);
  /* conv_backward_weight's dw and the bias's gradient db (C_out, contiguous,
   * dy's dtype) = dy summed per output channel, in the one pass over dy
   * (oneDNN's diff_bias, cuDNN's backward bias); NULL: the op runs
   * conv_backward_weight, then a sum. Appended, as conv_forward_relu. */
  mx_status (*conv_backward_weight_bias)(const mx_kview *dw, const mx_kview *db, const mx_kview *dy,
                                         const mx_kview *x, const mx_conv_params *p);
  /* y and indices (uint8 window offsets) = max_pool with relu (pp, pp->relu ignored) of conv(x, w) + bias (cp),
   * the convolution's full-resolution output never in a view: laid out as x (channels_last) or row-major where
   * the kernel keeps one of its own. y and indices are those of conv_forward then max_pool, bit for bit.
   * MX_NOT_SUPPORTED, with no error set, where it declines the case; NULL: always declined (the op then runs
   * conv_forward and max_pool). Appended, as conv_forward_relu. */
  mx_status (*conv_max_pool_relu)(const mx_kview *y, const mx_kview *indices, const mx_kview *x, const mx_kview *w,
                                  const mx_kview *bias, const mx_conv_params *cp, const mx_pool_params *pp,
                                  bool channels_last);
  /* Its backward from the pooled gradient g and the indices: g masked by relu's (relu_backward(g, mask), mask the
   * forward's y, g's shape and dtype, any strides; NULL: g comes masked) as it is read, the full-resolution
   * gradient max_pool_backward would give, never in a view, then dx = conv_backward_data (dx NULL: not wanted), dw
   * and db = conv_backward_weight_bias (db NULL: conv_backward_weight alone), bit for bit those kernels'. Declines
   * as conv_max_pool_relu. */
  mx_status (*conv_max_pool_relu_backward)(const mx_kview *dx, const mx_kview *dw, const mx_kview *db,
                                           const mx_kview *g, const mx_kview *mask, const mx_kview *indices,
                                           const mx_kview *x, const mx_kview *w, const mx_conv_params *cp,
                                           const mx_pool_params *pp, bool channels_last);
  /* batch norm's per-channel coefficients in one pass over the channels (optional: without it ops/norm.c runs
   * an elementwise op per step), each step rounded in the vectors' dtype as that op rounds it
   * (kernels/batch_norm_vectors.h has the formulas):
   *   FORWARD: scale and shift of y = x scale + shift from mean, var, weight, bias, eps; given running_mean and
   *            running_var, their momentum update with the unbiased variance (count / (count - 1))
   *   BACKWARD: dweight (may be NULL) from var and sum_gxc; with scale given, also scale, xc_scale and shift of
   *            dx = g scale + (x - mean) xc_scale + shift from weight, sum_g, grad_mean and grad_var (the mean and
   *            var outputs' gradients). Appended, as conv_forward_relu. */
  mx_status (*batch_norm_vectors)(mx_bn_vectors_formula formula, const mx_bn_vectors *v);
  /* cross_entropy over class indices (kernels/cross_entropy_row.h), in double whatever the dtype: x (N, C)
   * floating, target (N) int64, any strides; a row's loss is lse - x[t] (lse the log of the sum of e^x over the
   * row), 0 where t is ignore_index. rows (N; NULL: not wanted) receives each row's, out (0-d; NULL: not wanted)
   * their sum or, with mean, their mean over the rows not ignored (NaN when there are none). Optional: without it
   * mx_cross_entropy runs its composite. Appended, as conv_forward_relu. */
  mx_status (*cross_entropy)(const mx_kview *out, const mx_kview *rows, const mx_kview *x, const mx_kview *target,
                             int64_t ignore_index, bool mean);
  /* its gradient dx (x's shape) = (softmax(x) - onehot(t)) g per row, zeros where t is ignore_index: g is grad's
   * value (0-d, divided by the rows not ignored with mean) or the row's (grad (N)). */
  mx_status (*cross_entropy_backward)(const mx_kview *dx, const mx_kview *grad, const mx_kview *x,
                                      const mx_kview *target, int64_t ignore_index, bool mean);
  /* Whether sgd_step and adam_step write the items' casts (mx_optim_item); false: the optimizer asks for none.
   * Appended, as conv_forward_relu. */
  bool optim_casts;
} mx_backend;

/* The backend for a device, or NULL with the error set. */
const mx_backend *mx__backend(mx_device device);

/* Whether be has a kernel in the slot, and what it does with dtype (an
 * empty slot: MX_KERNEL_NOT_BUILT). */
mx_kernel_support mx__backend_supports(const mx_backend *be, mx_kernel kernel, mx_dtype dtype);


extern const mx_backend mx__cpu_backend;

#ifdef __cplusplus
}
#endif

#endif
