/* The losses of torch.nn.functional as composites: each body follows
 * PyTorch's own formula (ATen's Loss.cpp, LossNLL.cpp and friends) with mx
 * ops, so values match it and gradients come from the ops underneath.
 * Where a formula would send 0 * inf into a gradient (a log of 0 that a
 * mask discards), the masked elements are first replaced by a harmless
 * value, so gradients stay finite.
 *
 * Arguments: args.i[0] the optional inputs given (weight, pos_weight),
 * passed after the required ones, as norm.c does; args.i[1] the reduction;
 * the rest per op, as the public functions at the end fill them. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cuda_graph.h"
#include "ops/op_table.h"

enum { HAS_WEIGHT = 1, HAS_POS_WEIGHT = 2 };

#define OP_NAME(c) (mx__ops[(c)->op].name)
#define REDUCTION(c) ((c)->args->i[1])

/* The optional input with flag `which` (after n_required inputs), or NULL. */
static mx_tensor *optional(mx__call *c, int n_required, int which) {
  int mask = (int)c->args->i[0], k = n_required;
  for (int bit = 1; bit < which; bit <<= 1) k += (mask & bit) != 0;
  return mask & which ? c->in[k] : NULL;
}

static bool same_shape(const mx_tensor *a, const mx_tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return false;
  return true;
}

/* What every loss checks first: a known reduction and a floating input. */
static mx_status check_common(mx__call *c, bool batchmean) {
  int64_t r = (int)REDUCTION(c); /* the enum's values come as unsigned: -1 is -1 again */
  if (r < MX_REDUCTION_NONE || r > MX_REDUCTION_BATCHMEAN || (r == MX_REDUCTION_BATCHMEAN && !batchmean))
    return mx__error(MX_INVALID_ARGUMENT, "mx_%s: invalid reduction %lld (expected MX_REDUCTION_NONE, _MEAN%s _SUM%s)",
                     OP_NAME(c), (long long)r, batchmean ? "," : " or", batchmean ? " or _BATCHMEAN" : "");
  if (!mx_dtype_is_floating(c->in[0]->dtype)) {
    char name[32];
    return mx__error(MX_DTYPE_ERROR, "mx_%s: %s must be floating, got %s", OP_NAME(c),
                     mx__input_name(c->op, 0, name, sizeof name), mx_dtype_name(c->in[0]->dtype));
  }
  return MX_OK;
}

static mx_status target_mismatch(mx__call *c, const mx_tensor *target, const mx_tensor *input, const char *expected) {
  char a[MX__DIMS_STR], b[MX__DIMS_STR];
  return mx__error(MX_SHAPE_ERROR, "mx_%s: target of shape %s does not match input of shape %s%s", OP_NAME(c),
                   mx__dims_str(a, target->ndim, target->shape), mx__dims_str(b, input->ndim, input->shape),
                   expected ? expected : "");
}

/* w broadcasts to x's shape without growing it (PyTorch multiplies in place). */
static mx_status check_fits(mx__call *c, const char *what, mx_tensor *w, mx_tensor *x) {
  mx_tensor *pair[2] = {x, w};
  mx_shape shape;
  mx_status status = mx__broadcast_shape(mx__ops[c->op].api_name, 2, pair, &shape);
  if (status != MX_OK || shape.ndim == x->ndim) return status;
  char a[MX__DIMS_STR], b[MX__DIMS_STR];
  return mx__error(MX_SHAPE_ERROR, "mx_%s: %s of shape %s does not broadcast to the input's shape %s", OP_NAME(c),
                   what, mx__dims_str(a, w->ndim, w->shape), mx__dims_str(b, x->ndim, x->shape));
}

/* loss reduced as asked (batchmean: the sum, divided by the caller). */
static mx_tensor *reduce(mx_tensor *loss, int64_t reduction) {
  switch (reduction) {
  case MX_REDUCTION_MEAN: return mx_mean(loss, MX_ALL_DIMS, false);
  case MX_REDUCTION_SUM:
  case MX_REDUCTION_BATCHMEAN: return mx_sum(loss, MX_ALL_DIMS, false);
  default: return loss;
  }
}

static mx_status out_reduced(mx__call *c, mx_tensor *loss) { return OUT0(c, reduce(loss, REDUCTION(c))); }

/* t's int64 values on the host (malloc'ed), or NULL with the error set. */
static int64_t *host_indices(mx__call *c, const mx_tensor *t) {
  if (t->dtype != MX_I64) {
    mx__error(MX_DTYPE_ERROR, "mx_%s: target must be int64 class indices, got %s", OP_NAME(c), mx_dtype_name(t->dtype));
    return NULL;
  }
  int64_t n = mx_numel(t);
  int64_t *v = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  if (!v) {
    mx__error(MX_OUT_OF_MEMORY, "mx_%s: out of memory", OP_NAME(c));
    return NULL;
  }
  if (mx_to_host(t, v, sizeof(int64_t) * (size_t)n) != MX_OK) {
    free(v);
    return NULL;
  }
  return v;
}

/* Every class index in [0, classes), ignore_index aside (when `ignore`).
 * Not while a CUDA graph is captured: the host cannot read the targets. */
static mx_status check_indices(mx__call *c, const mx_tensor *t, int64_t classes, bool ignore, int64_t ignore_index) {
  if (t->device == MX_CUDA && mx_cuda_graph_capturing()) return MX_OK;
  int64_t *v = host_indices(c, t);
  if (!v) return mx_last_status();
  mx_status status = MX_OK;
  for (int64_t k = 0, n = mx_numel(t); k < n && status == MX_OK; k++)
    if ((v[k] < 0 || v[k] >= classes) && !(ignore && v[k] == ignore_index))
      status = mx__error(MX_INDEX_ERROR, "mx_%s: target %lld out of range for %lld classes", OP_NAME(c),
                         (long long)v[k], (long long)classes);
  free(v);
  return status;
}

/* log(v) clamped to >= -100, -100 where v <= 0, with finite gradients. */
static mx_tensor *clamped_log(mx_tensor *v) {
  mx_tensor *nonpositive = mx_le_scalar(v, 0);
  mx_tensor *log = mx_clamp(mx_log(mx_masked_fill(v, nonpositive, 1)), -100, INFINITY);
  return mx_masked_fill(log, nonpositive, -100);
}

/* --- cross_entropy and nll_loss ------------------------------------------------------------------- */

static int class_dim(const mx_tensor *input) { return input->ndim == 1 ? 0 : 1; }

/* (1, C, 1, ...) for broadcasting a per-class vector over the input. */
static mx_tensor *per_class(const mx_tensor *w, int ndim) {
  if (ndim == 1) return (mx_tensor *)w;
  mx_shape shape = {ndim, {0}};
  for (int d = 0; d < ndim; d++) shape.d[d] = d == 1 ? -1 : 1;
  return mx_reshape(w, shape);
}

/* The input of a classification loss, and its per-class weight. */
static mx_status check_classes(mx__call *c, const mx_tensor *input, const mx_tensor *weight) {
  if (input->ndim < 1)
    return mx__error(MX_SHAPE_ERROR,
                     "mx_%s: expected an input of shape (C), (N, C) or (N, C, d1, ...), got a 0-d tensor", OP_NAME(c));
  int64_t classes = input->shape[class_dim(input)];
  if (weight && (weight->ndim != 1 || weight->shape[0] != classes)) {
    char a[MX__DIMS_STR];
    return mx__error(MX_SHAPE_ERROR, "mx_%s: weight of shape %s does not hold one value per class (%lld classes)",
                     OP_NAME(c), mx__dims_str(a, weight->ndim, weight->shape), (long long)classes);
  }
  return MX_OK;
}

/* A class-index target: the input's shape without the class dim, in range. */
static mx_status check_class_target(mx__call *c, const mx_tensor *input, const mx_tensor *target, int64_t ignore_index,
                                    const char *alternative) {
  int cd = class_dim(input);
  mx_shape want = {0};
  for (int d = 0; d < input->ndim; d++)
    if (d != cd) want.d[want.ndim++] = input->shape[d];
  bool fits = target->ndim == want.ndim;
  for (int d = 0; fits && d < want.ndim; d++) fits = target->shape[d] == want.d[d];
  if (!fits) {
    char a[MX__DIMS_STR], b[MX__DIMS_STR * 2 + 64];
    char *end = b + snprintf(b, sizeof b, " (expected %s", mx__dims_str(a, want.ndim, want.d));
    snprintf(end, sizeof b - (size_t)(end - b), alternative ? " for class indices or %s for class probabilities)" : ")",
             mx__dims_str(a, input->ndim, input->shape));
    return target_mismatch(c, target, input, b);
  }
  return check_indices(c, target, input->shape[cd], true, ignore_index);
}

/* The per-sample weights of class-index targets: weight[t] (or 1), 0 where
 * t is ignore_index; and the target with ignored entries set to 0. */
typedef struct {
  mx_tensor *ignored, *safe, *w;
} class_targets;

static class_targets targets_of(const mx_tensor *input, const mx_tensor *target, const mx_tensor *weight,
                                int64_t ignore_index) {
  class_targets t;
  t.ignored = mx_eq(target, mx_scalar((double)ignore_index, MX_I64, MX_CPU));
  t.safe = mx_masked_fill(target, t.ignored, 0);
  if (weight) {
    mx_tensor *picked = mx_index_select(weight, 0, mx_reshape(t.safe, MX_SHAPE(-1)));
    t.w = mx_masked_fill(mx_reshape(picked, mx_shape_get(target)), t.ignored, 0);
  } else {
    t.w = mx_to_dtype(mx_logical_not(t.ignored), input->dtype);
  }
  return t;
}

/* nll_loss on log-probabilities: -w[t] logp[t], the mean divided by the
 * summed weights. */
static mx_tensor *nll(const mx_tensor *logp, const class_targets *t, int64_t reduction) {
  int cd = class_dim(logp);
  mx_tensor *picked = mx_squeeze(mx_gather(logp, cd, mx_unsqueeze(t->safe, cd)), cd);
  mx_tensor *loss = mx_neg(mx_mul(picked, t->w));
  if (reduction == MX_REDUCTION_MEAN) return mx_div(mx_sum(loss, MX_ALL_DIMS, false), mx_sum(t->w, MX_ALL_DIMS, false));
  return reduce(loss, reduction);
}

mx_status mx__fwd_nll_loss(mx__call *c) {
  mx_tensor *input = c->in[0], *target = c->in[1], *weight = optional(c, 2, HAS_WEIGHT);
  int64_t ignore_index = c->args->i[2];
  mx_status status = check_common(c, false);
  if (status == MX_OK) status = check_classes(c, input, weight);
  if (status == MX_OK) status = check_class_target(c, input, target, ignore_index, NULL);
  if (status != MX_OK) return status;
  class_targets t = targets_of(input, target, weight, ignore_index);
  return OUT0(c, nll(input, &t, REDUCTION(c)));
}

/* Class probabilities: -sum(target logp weight) over the class dim; the
 * mean divides by the number of samples. */
static mx_tensor *soft_targets(mx__call *c, mx_tensor *logp, mx_tensor *target, mx_tensor *weight, double smoothing) {
  int cd = class_dim(logp);
  int64_t classes = logp->shape[cd];
  if (smoothing > 0) target = mx_add_scalar(mx_mul_scalar(target, 1 - smoothing), smoothing / (double)classes);
  mx_tensor *product = mx_mul(logp, target);
  if (weight) product = mx_mul(product, per_class(weight, logp->ndim));
  switch (REDUCTION(c)) {
  case MX_REDUCTION_NONE: return mx_neg(mx_sum(product, MX_DIMS(cd), false));
  case MX_REDUCTION_SUM: return mx_neg(mx_sum(product, MX_ALL_DIMS, false));
  default: return mx_div_scalar(mx_neg(mx_sum(product, MX_ALL_DIMS, false)), (double)(mx_numel(logp) / classes));
  }
}

mx_status mx__fwd_cross_entropy(mx__call *c) {
  mx_tensor *input = c->in[0], *target = c->in[1], *weight = optional(c, 2, HAS_WEIGHT);
  int64_t ignore_index = c->args->i[2];
  double smoothing = c->args->f[0];
  mx_status status = check_common(c, false);
  if (status == MX_OK) status = check_classes(c, input, weight);
  if (status != MX_OK) return status;
  if (!(smoothing >= 0 && smoothing <= 1))
    return mx__error(MX_INVALID_ARGUMENT, "mx_cross_entropy: label_smoothing must be between 0 and 1, got %g",
                     smoothing);
  int cd = class_dim(input);
  if (same_shape(input, target)) {
    if (!mx_dtype_is_floating(target->dtype))
      return mx__error(MX_DTYPE_ERROR,
                       "mx_cross_entropy: a target of the input's shape holds class probabilities and must be "
                       "floating, got %s", mx_dtype_name(target->dtype));
    if (ignore_index >= 0)
      return mx__error(MX_INVALID_ARGUMENT,
                       "mx_cross_entropy: ignore_index (%lld) is not supported with class-probability targets",
                       (long long)ignore_index);
    return OUT0(c, soft_targets(c, mx_log_softmax(input, cd), target, weight, smoothing));
  }
  status = check_class_target(c, input, target, ignore_index, "probabilities");
  if (status != MX_OK) return status;
  if (mx__cross_entropy_indices_fits(input, target, weight, smoothing)) /* one op and one backward node */
    return OUT0(c, mx__call2(MX_OP_CROSS_ENTROPY_INDICES, input, target, c->args));
  mx_tensor *logp = mx_log_softmax(input, cd);
  class_targets t = targets_of(input, target, weight, ignore_index);
  mx_tensor *loss = nll(logp, &t, REDUCTION(c));
  if (smoothing == 0) return OUT0(c, loss);
  /* label smoothing: the uniform part, -sum(logp weight) over the classes */
  mx_tensor *uniform = mx_neg(mx_sum(weight ? mx_mul(logp, per_class(weight, input->ndim)) : logp, MX_DIMS(cd), false));
  uniform = mx_masked_fill(uniform, t.ignored, 0);
  if (REDUCTION(c) == MX_REDUCTION_MEAN)
    uniform = mx_div(mx_sum(uniform, MX_ALL_DIMS, false), mx_sum(t.w, MX_ALL_DIMS, false));
  else
    uniform = reduce(uniform, REDUCTION(c));
  double classes = (double)input->shape[cd];
  return OUT0(c, mx_add(mx_mul_scalar(loss, 1 - smoothing), mx_mul_scalar(uniform, smoothing / classes)));
}

/* --- binary cross entropy --------------------------------------------------------------------------- */

static mx_status check_binary(mx__call *c, mx_tensor *input, mx_tensor *target, mx_tensor *weight,
                              mx_tensor *pos_weight) {
  mx_status status = check_common(c, false);
  if (status == MX_OK && !same_shape(input, target)) status = target_mismatch(c, target, input, NULL);
  if (status == MX_OK && weight) status = check_fits(c, "weight", weight, input);
  if (status == MX_OK && pos_weight) status = check_fits(c, "pos_weight", pos_weight, input);
  return status;
}

/* (target - 1) max(log(1 - x), -100) - target max(log(x), -100) */
mx_status mx__fwd_binary_cross_entropy(mx__call *c) {
  mx_tensor *x = c->in[0], *target = c->in[1], *weight = optional(c, 2, HAS_WEIGHT);
  mx_status status = check_binary(c, x, target, weight, NULL);
  if (status != MX_OK) return status;
  mx_tensor *inside = mx_all(mx_logical_and(mx_ge_scalar(x, 0), mx_le_scalar(x, 1)), MX_ALL_DIMS, false);
  if (!inside) return mx_last_status();
  if (mx_item(inside) == 0)
    return mx__error(MX_INVALID_ARGUMENT, "mx_binary_cross_entropy: all elements of input should be between 0 and 1");
  mx_tensor *loss = mx_sub(mx_mul(mx_sub_scalar(target, 1), clamped_log(mx_rsub_scalar(1, x))),
                           mx_mul(target, clamped_log(x)));
  if (weight) loss = mx_mul(loss, weight);
  return out_reduced(c, loss);
}

/* (1 - t) x + lw (log(exp(-m) + exp(-x - m)) + m), m = max(-x, 0),
 * lw = (pos_weight - 1) t + 1 (1 without pos_weight): no exp overflows. */
mx_status mx__fwd_binary_cross_entropy_with_logits(mx__call *c) {
  mx_tensor *x = c->in[0], *target = c->in[1];
  mx_tensor *weight = optional(c, 2, HAS_WEIGHT), *pos_weight = optional(c, 2, HAS_POS_WEIGHT);
  mx_status status = check_binary(c, x, target, weight, pos_weight);
  if (status != MX_OK) return status;
  mx_tensor *m = mx_clamp(mx_neg(x), 0, INFINITY);
  mx_tensor *log_sum = mx_log(mx_add(mx_exp(mx_neg(m)), mx_exp(mx_sub(mx_neg(x), m))));
  mx_tensor *loss = mx_mul(mx_rsub_scalar(1, target), x);
  if (pos_weight) {
    mx_tensor *log_weight = mx_add_scalar(mx_mul(mx_sub_scalar(pos_weight, 1), target), 1);
    loss = mx_add(loss, mx_mul(log_weight, mx_add(log_sum, m)));
  } else {
    loss = mx_add(mx_add(loss, m), log_sum);
  }
  if (weight) loss = mx_mul(loss, weight);
  return out_reduced(c, loss);
}

/* --- margins over classes ---------------------------------------------------------------------------- */

/* input (C) or (N, C), non-empty. */
static mx_status check_matrix(mx__call *c, const mx_tensor *input) {
  if (input->ndim >= 1 && input->ndim <= 2 && input->shape[input->ndim - 1] > 0) return MX_OK;
  char a[MX__DIMS_STR];
  return mx__error(MX_SHAPE_ERROR, "mx_%s: expected an input of shape (C) or (N, C) with C > 0, got %s", OP_NAME(c),
                   mx__dims_str(a, input->ndim, input->shape));
}

/* sum over targets j and non-targets i of max(0, 1 - x[j] + x[i]) / C */
mx_status mx__fwd_multilabel_margin_loss(mx__call *c) {
  mx_tensor *x = c->in[0], *target = c->in[1];
  mx_status status = check_common(c, false);
  if (status == MX_OK) status = check_matrix(c, x);
  if (status == MX_OK && target->dtype == MX_I64 && !same_shape(x, target))
    status = target_mismatch(c, target, x, NULL);
  int64_t *t = status == MX_OK ? host_indices(c, target) : NULL;
  if (!t) return mx_last_status();
  int64_t classes = x->shape[x->ndim - 1], n = x->ndim == 2 ? x->shape[0] : 1;
  double *count = calloc((size_t)(n * classes + 1), sizeof(double));
  double *other = malloc(sizeof(double) * (size_t)(n * classes + 1));
  for (int64_t k = 0; k < n * classes && status == MX_OK; k++)
    if (t[k] < -1 || t[k] >= classes)
      status = mx__error(MX_INDEX_ERROR, "mx_multilabel_margin_loss: target %lld out of range for %lld classes "
                         "(expected -1 to %lld)", (long long)t[k], (long long)classes, (long long)classes - 1);
  if (status == MX_OK && (!count || !other))
    status = mx__error(MX_OUT_OF_MEMORY, "mx_multilabel_margin_loss: out of memory");
  if (status != MX_OK) {
    free(t), free(count), free(other);
    return status;
  }
  /* the targets of each row, up to its first -1: how often each class is one, and the other classes */
  for (int64_t k = 0; k < n * classes; k++) other[k] = 1;
  for (int64_t row = 0; row < n; row++)
    for (int64_t j = 0; j < classes && t[row * classes + j] >= 0; j++) {
      count[row * classes + t[row * classes + j]] += 1;
      other[row * classes + t[row * classes + j]] = 0;
    }
  mx_tensor *counts = mx_to_dtype(mx_from_data(count, MX_SHAPE(n, classes, 1), MX_F64, x->device), x->dtype);
  mx_tensor *others = mx_to_dtype(mx_from_data(other, MX_SHAPE(n, 1, classes), MX_F64, x->device), x->dtype);
  free(t), free(count), free(other);
  mx_tensor *rows = mx_reshape(x, MX_SHAPE(n, classes));
  /* z[n, j, i] = 1 - x[n, j] + x[n, i] */
  mx_tensor *z = mx_add(mx_rsub_scalar(1, mx_unsqueeze(rows, 2)), mx_unsqueeze(rows, 1));
  mx_tensor *hinge = mx_mul(mx_mul(mx_relu(z), counts), others);
  mx_tensor *loss = mx_div_scalar(mx_sum(hinge, MX_DIMS(1, 2), false), (double)classes);
  if (x->ndim == 1) loss = mx_reshape(loss, MX_SCALAR);
  return out_reduced(c, loss);
}

/* sum over i != y of max(0, margin - x[y] + x[i])^p weight[y] / C */
mx_status mx__fwd_multi_margin_loss(mx__call *c) {
  mx_tensor *x = c->in[0], *target = c->in[1], *weight = optional(c, 2, HAS_WEIGHT);
  int64_t p = c->args->i[2];
  double margin = c->args->f[0];
  mx_status status = check_common(c, false);
  if (status == MX_OK) status = check_matrix(c, x);
  if (status != MX_OK) return status;
  if (p != 1 && p != 2)
    return mx__error(MX_INVALID_ARGUMENT, "mx_multi_margin_loss: p must be 1 or 2, got %lld", (long long)p);
  int64_t classes = x->shape[x->ndim - 1], n = x->ndim == 2 ? x->shape[0] : 1;
  if (target->ndim != x->ndim - 1 || (x->ndim == 2 && target->shape[0] != n)) {
    char a[MX__DIMS_STR], b[MX__DIMS_STR + 16];
    snprintf(b, sizeof b, " (expected %s)", mx__dims_str(a, x->ndim - 1, x->shape));
    return target_mismatch(c, target, x, b);
  }
  status = check_classes(c, x, weight);
  if (status == MX_OK) status = check_indices(c, target, classes, false, 0);
  if (status != MX_OK) return status;
  mx_tensor *rows = mx_reshape(x, MX_SHAPE(n, classes)), *t = mx_reshape(target, MX_SHAPE(n, 1));
  mx_tensor *z = mx_add(mx_rsub_scalar(margin, mx_gather(rows, 1, t)), rows);
  mx_tensor *hinge = mx_relu(z);
  if (p == 2) hinge = mx_mul(hinge, hinge);
  hinge = mx_masked_fill(hinge, mx_eq(mx_arange(0, (double)classes, 1, MX_I64, x->device), t), 0);
  if (weight) /* weight[y] for the whole row */
    hinge = mx_mul(hinge, mx_reshape(mx_index_select(weight, 0, mx_reshape(t, MX_SHAPE(-1))), MX_SHAPE(n, 1)));
  mx_tensor *loss = mx_div_scalar(mx_sum(hinge, MX_DIMS(1), false), (double)classes);
  if (x->ndim == 1) loss = mx_reshape(loss, MX_SCALAR);
  return out_reduced(c, loss);
}

/* --- regression ------------------------------------------------------------------------------------ */

mx_status mx__fwd_mse_loss(mx__call *c) {
  mx_status status = check_common(c, false);
  if (status != MX_OK) return status;
  mx_tensor *d = mx_sub(c->in[0], c->in[1]);
  return out_reduced(c, mx_mul(d, d));
}

mx_status mx__fwd_l1_loss(mx__call *c) {
  mx_status status = check_common(c, false);
  return status != MX_OK ? status : out_reduced(c, mx_abs(mx_sub(c->in[0], c->in[1])));
}

/* smooth_l1 (huber false): 0.5 z^2 / beta below beta, z - 0.5 beta above;
 * huber: 0.5 z^2 below delta, delta (z - 0.5 delta) above. */
static mx_status piecewise(mx__call *c, const char *what, bool huber) {
  double at = c->args->f[0];
  mx_status status = check_common(c, false);
  if (status != MX_OK) return status;
  if (huber ? !(at > 0) : !(at >= 0))
    return mx__error(MX_INVALID_ARGUMENT, "mx_%s: %s must be %s, got %g", OP_NAME(c), what,
                     huber ? "positive" : "non-negative", at);
  mx_tensor *z = mx_abs(mx_sub(c->in[0], c->in[1]));
  if (at == 0) return out_reduced(c, z); /* smooth_l1 with beta 0: l1 */
  mx_tensor *square = mx_mul_scalar(mx_mul(z, z), 0.5), *line = mx_sub_scalar(z, 0.5 * at);
  if (huber) line = mx_mul_scalar(line, at);
  else square = mx_div_scalar(square, at);
  return out_reduced(c, mx_where(mx_lt_scalar(z, at), square, line));
}

mx_status mx__fwd_smooth_l1_loss(mx__call *c) { return piecewise(c, "beta", false); }
mx_status mx__fwd_huber_loss(mx__call *c) { return piecewise(c, "delta", true); }

/* --- distributions ----------------------------------------------------------------------------------- */

/* xlogy(t, t) - t x, or exp(t) (t - x) with log_target */
mx_status mx__fwd_kl_div(mx__call *c) {
  mx_tensor *x = c->in[0], *t = c->in[1];
  mx_status status = check_common(c, true);
  if (status != MX_OK) return status;
  mx_tensor *loss;
  if (c->args->keepdim) {
    loss = mx_mul(mx_exp(t), mx_sub(t, x));
  } else { /* t log t is 0 where t is 0 */
    mx_tensor *zero = mx_eq_scalar(t, 0);
    mx_tensor *xlogy = mx_masked_fill(mx_mul(t, mx_log(mx_masked_fill(t, zero, 1))), zero, 0);
    loss = mx_sub(xlogy, mx_mul(t, x));
  }
  loss = reduce(loss, REDUCTION(c));
  if (REDUCTION(c) == MX_REDUCTION_BATCHMEAN && x->ndim > 0) loss = mx_div_scalar(loss, (double)x->shape[0]);
  return OUT0(c, loss);
}

/* exp(x) - t x (log_input) or x - t log(x + eps); full adds Stirling's
 * t log t - t + log(2 pi t) / 2 where t > 1. */
mx_status mx__fwd_poisson_nll_loss(mx__call *c) {
  mx_tensor *x = c->in[0], *t = c->in[1];
  mx_status status = check_common(c, false);
  if (status != MX_OK) return status;
  double eps = c->args->f[0];
  mx_tensor *loss = c->args->i[2] ? mx_sub(mx_exp(x), mx_mul(t, x))
                                  : mx_sub(x, mx_mul(t, mx_log(mx_add_scalar(x, eps))));
  if (c->args->i[3]) {
    mx_tensor *small = mx_le_scalar(t, 1), *ts = mx_masked_fill(t, small, 2);
    mx_tensor *stirling = mx_add(mx_sub(mx_mul(ts, mx_log(ts)), ts),
                                 mx_mul_scalar(mx_log(mx_mul_scalar(ts, 2 * 3.14159265358979323846)), 0.5));
    loss = mx_add(loss, mx_masked_fill(stirling, small, 0));
  }
  return out_reduced(c, loss);
}

/* --- margins and embeddings ------------------------------------------------------------------------- */

/* x where t != -1, plus max(0, margin - x) where t != 1 */
mx_status mx__fwd_hinge_embedding_loss(mx__call *c) {
  mx_tensor *x = c->in[0], *t = c->in[1];
  mx_status status = check_common(c, false);
  if (status != MX_OK) return status;
  mx_tensor *below = mx_clamp(mx_rsub_scalar(c->args->f[0], x), 0, INFINITY);
  mx_tensor *loss = mx_add(mx_masked_fill(below, mx_eq_scalar(t, 1), 0), mx_masked_fill(x, mx_eq_scalar(t, -1), 0));
  return out_reduced(c, loss);
}

mx_status mx__fwd_margin_ranking_loss(mx__call *c) {
  mx_tensor *x1 = c->in[0], *x2 = c->in[1], *t = c->in[2];
  mx_status status = check_common(c, false);
  if (status != MX_OK) return status;
  if (x1->ndim != x2->ndim || x1->ndim != t->ndim)
    return mx__error(MX_SHAPE_ERROR, "mx_margin_ranking_loss: input1, input2 and target must have the same number of "
                     "dims, got %d, %d and %d", x1->ndim, x2->ndim, t->ndim);
  mx_tensor *loss = mx_add_scalar(mx_mul(mx_neg(t), mx_sub(x1, x2)), c->args->f[0]);
  return out_reduced(c, mx_clamp(loss, 0, INFINITY));
}

mx_status mx__fwd_soft_margin_loss(mx__call *c) {
  mx_status status = check_common(c, false);
  if (status != MX_OK) return status;
  return out_reduced(c, mx_log1p(mx_exp(mx_mul(mx_neg(c->in[0]), c->in[1]))));
}

/* cos = x1.x2 / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12)); 1 - cos where t is
 * 1, max(0, cos - margin) where it is -1 */
mx_status mx__fwd_cosine_embedding_loss(mx__call *c) {
  mx_tensor *x1 = c->in[0], *x2 = c->in[1], *t = c->in[2];
  mx_status status = check_common(c, false);
  if (status != MX_OK) return status;
  if (t->ndim > 1)
    return mx__error(MX_SHAPE_ERROR, "mx_cosine_embedding_loss: target must be 0-d or 1-d, got %d dims", t->ndim);
  if (x1->ndim != t->ndim + 1 || x2->ndim != t->ndim + 1) {
    char a[MX__DIMS_STR], b[MX__DIMS_STR];
    return mx__error(MX_SHAPE_ERROR, "mx_cosine_embedding_loss: a %d-d target needs %d-d inputs, got %s and %s",
                     t->ndim, t->ndim + 1, mx__dims_str(a, x1->ndim, x1->shape), mx__dims_str(b, x2->ndim, x2->shape));
  }
  mx_shape dim = MX_DIMS(t->ndim);
  mx_tensor *dot = mx_sum(mx_mul(x1, x2), dim, false);
  mx_tensor *sq1 = mx_add_scalar(mx_sum(mx_mul(x1, x1), dim, false), 1e-12);
  mx_tensor *sq2 = mx_add_scalar(mx_sum(mx_mul(x2, x2), dim, false), 1e-12);
  mx_tensor *cos = mx_div(dot, mx_sqrt(mx_mul(sq1, sq2)));
  mx_tensor *pos = mx_masked_fill(mx_rsub_scalar(1, cos), mx_logical_not(mx_eq_scalar(t, 1)), 0);
  mx_tensor *neg = mx_masked_fill(mx_clamp(mx_sub_scalar(cos, c->args->f[0]), 0, INFINITY),
                                  mx_logical_not(mx_eq_scalar(t, -1)), 0);
  return out_reduced(c, mx_add(pos, neg));
}

/* PyTorch's pairwise_distance: the p-norm of x1 - x2 + eps along the last
 * dim. Other p than 0, 1, 2 and inf raise to exponents held in tensors of the
 * input's dtype: the gradient of mx_pow_scalar computes its exponent - 1 in
 * float32 (two C scalars meet), 1e-7 off in float64. */
static mx_tensor *pairwise_distance(const mx_tensor *x1, const mx_tensor *x2, double p, double eps) {
  int ndim = x1->ndim > x2->ndim ? x1->ndim : x2->ndim;
  mx_tensor *d = mx_add_scalar(mx_sub(x1, x2), eps);
  if (!d || p == 0 || p == 1 || p == 2 || isinf(p)) return mx_norm(d, p, MX_DIMS(ndim - 1), false);
  mx_tensor *power = mx_pow(mx_abs(d), mx_scalar(p, d->dtype, MX_CPU));
  return mx_pow(mx_sum(power, MX_DIMS(ndim - 1), false), mx_scalar(1 / p, d->dtype, MX_CPU));
}

mx_status mx__fwd_triplet_margin_loss(mx__call *c) {
  mx_tensor *a = c->in[0], *pos = c->in[1], *neg = c->in[2];
  double margin = c->args->f[0], p = c->args->f[1], eps = c->args->f[2];
  mx_status status = check_common(c, false);
  if (status != MX_OK) return status;
  if (a->ndim != pos->ndim || a->ndim != neg->ndim || a->ndim == 0)
    return mx__error(MX_SHAPE_ERROR, "mx_triplet_margin_loss: anchor, positive and negative must have the same number "
                     "of dims (at least 1), got %d, %d and %d", a->ndim, pos->ndim, neg->ndim);
  mx_tensor *d_pos = pairwise_distance(a, pos, p, eps), *d_neg = pairwise_distance(a, neg, p, eps);
  if (c->args->keepdim) d_neg = mx_minimum(d_neg, pairwise_distance(pos, neg, p, eps));
  return out_reduced(c, mx_clamp(mx_add_scalar(mx_sub(d_pos, d_neg), margin), 0, INFINITY));
}

/* --- public functions -------------------------------------------------------------------------------- */

static mx_tensor *call_loss(mx_op op, int n_required, const mx_tensor *const *required, int n_optional,
                            const mx_tensor *const *opt, mx__args *args) {
  const mx_tensor *in[6];
  int n = 0, mask = 0;
  for (int k = 0; k < n_required; k++) in[n++] = required[k];
  for (int k = 0; k < n_optional; k++)
    if (opt[k]) in[n++] = opt[k], mask |= 1 << k;
  args->i[0] = mask;
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  return mx__dispatch(op, n, in, args, out) == MX_OK ? out[0] : NULL;
}

#define REQUIRED(...) (const mx_tensor *[]){__VA_ARGS__}
static mx_tensor *loss2(mx_op op, const mx_tensor *a, const mx_tensor *b, mx__args args) {
  return call_loss(op, 2, REQUIRED(a, b), 0, NULL, &args);
}
static mx_tensor *loss3(mx_op op, const mx_tensor *a, const mx_tensor *b, const mx_tensor *c, mx__args args) {
  return call_loss(op, 3, REQUIRED(a, b, c), 0, NULL, &args);
}

mx_tensor *mx_cross_entropy(const mx_tensor *input, const mx_tensor *target, const mx_tensor *weight,
                            int64_t ignore_index, mx_reduction reduction, double label_smoothing) {
  mx__args args = {.i = {0, reduction, ignore_index}, .f = {label_smoothing}};
  return call_loss(MX_OP_CROSS_ENTROPY, 2, REQUIRED(input, target), 1, REQUIRED(weight), &args);
}

mx_tensor *mx_nll_loss(const mx_tensor *input, const mx_tensor *target, const mx_tensor *weight, int64_t ignore_index,
                       mx_reduction reduction) {
  mx__args args = {.i = {0, reduction, ignore_index}};
  return call_loss(MX_OP_NLL_LOSS, 2, REQUIRED(input, target), 1, REQUIRED(weight), &args);
}

mx_tensor *mx_binary_cross_entropy(const mx_tensor *input, const mx_tensor *target, const mx_tensor *weight,
                                   mx_reduction reduction) {
  mx__args args = {.i = {0, reduction}};
  return call_loss(MX_OP_BINARY_CROSS_ENTROPY, 2, REQUIRED(input, target), 1, REQUIRED(weight), &args);
}

mx_tensor *mx_binary_cross_entropy_with_logits(const mx_tensor *input, const mx_tensor *target,
                                               const mx_tensor *weight, mx_reduction reduction,
                                               const mx_tensor *pos_weight) {
  mx__args args = {.i = {0, reduction}};
  return call_loss(MX_OP_BINARY_CROSS_ENTROPY_WITH_LOGITS, 2, REQUIRED(input, target), 2, REQUIRED(weight, pos_weight),
                   &args);
}

mx_tensor *mx_multilabel_margin_loss(const mx_tensor *input, const mx_tensor *target, mx_reduction reduction) {
  return loss2(MX_OP_MULTILABEL_MARGIN_LOSS, input, target, (mx__args){.i = {0, reduction}});
}

mx_tensor *mx_multi_margin_loss(const mx_tensor *input, const mx_tensor *target, int p, double margin,
                                const mx_tensor *weight, mx_reduction reduction) {
  mx__args args = {.i = {0, reduction, p}, .f = {margin}};
  return call_loss(MX_OP_MULTI_MARGIN_LOSS, 2, REQUIRED(input, target), 1, REQUIRED(weight), &args);
}

mx_tensor *mx_mse_loss(const mx_tensor *input, const mx_tensor *target, mx_reduction reduction) {
  return loss2(MX_OP_MSE_LOSS, input, target, (mx__args){.i = {0, reduction}});
}

mx_tensor *mx_l1_loss(const mx_tensor *input, const mx_tensor *target, mx_reduction reduction) {
  return loss2(MX_OP_L1_LOSS, input, target, (mx__args){.i = {0, reduction}});
}

mx_tensor *mx_smooth_l1_loss(const mx_tensor *input, const mx_tensor *target, mx_reduction reduction, double beta) {
  return loss2(MX_OP_SMOOTH_L1_LOSS, input, target, (mx__args){.i = {0, reduction}, .f = {beta}});
}

mx_tensor *mx_huber_loss(const mx_tensor *input, const mx_tensor *target, mx_reduction reduction, double delta) {
  return loss2(MX_OP_HUBER_LOSS, input, target, (mx__args){.i = {0, reduction}, .f = {delta}});
}

mx_tensor *mx_kl_div(const mx_tensor *input, const mx_tensor *target, mx_reduction reduction, bool log_target) {
  return loss2(MX_OP_KL_DIV, input, target, (mx__args){.i = {0, reduction}, .keepdim = log_target});
}

mx_tensor *mx_poisson_nll_loss(const mx_tensor *input, const mx_tensor *target, bool log_input, bool full,
                               double eps, mx_reduction reduction) {
  return loss2(MX_OP_POISSON_NLL_LOSS, input, target, (mx__args){.i = {0, reduction, log_input, full}, .f = {eps}});
}

mx_tensor *mx_hinge_embedding_loss(const mx_tensor *input, const mx_tensor *target, double margin,
                                   mx_reduction reduction) {
  return loss2(MX_OP_HINGE_EMBEDDING_LOSS, input, target, (mx__args){.i = {0, reduction}, .f = {margin}});
}

mx_tensor *mx_margin_ranking_loss(const mx_tensor *input1, const mx_tensor *input2, const mx_tensor *target,
                                  double margin, mx_reduction reduction) {
  return loss3(MX_OP_MARGIN_RANKING_LOSS, input1, input2, target, (mx__args){.i = {0, reduction}, .f = {margin}});
}

mx_tensor *mx_soft_margin_loss(const mx_tensor *input, const mx_tensor *target, mx_reduction reduction) {
  return loss2(MX_OP_SOFT_MARGIN_LOSS, input, target, (mx__args){.i = {0, reduction}});
}

mx_tensor *mx_cosine_embedding_loss(const mx_tensor *input1, const mx_tensor *input2, const mx_tensor *target,
                                    double margin, mx_reduction reduction) {
  return loss3(MX_OP_COSINE_EMBEDDING_LOSS, input1, input2, target, (mx__args){.i = {0, reduction}, .f = {margin}});
}

mx_tensor *mx_triplet_margin_loss(const mx_tensor *anchor, const mx_tensor *positive, const mx_tensor *negative,
                                  double margin, double p, double eps, bool swap, mx_reduction reduction) {
  mx__args args = {.i = {0, reduction}, .f = {margin, p, eps}, .keepdim = swap};
  return loss3(MX_OP_TRIPLET_MARGIN_LOSS, anchor, positive, negative, args);
}
