/* Loss functions, as torch.nn.functional has them: the same formulas, the
 * same defaults (noted after each declaration) and the same reductions.
 * Each is a composite op written with other mx ops, so it differentiates
 * with respect to every floating input (weights and targets too) and runs
 * on every device. Under autocast each computes in float32, except
 * binary_cross_entropy, which autocast refuses (use the _with_logits form).
 *
 *     mx_tensor *loss = mx_cross_entropy(logits, labels, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.0);
 *     mx_backward(loss, NULL, false);
 *
 * Inputs with a class dim take it as dim 1 of (N, C, d1, ...), or dim 0 of
 * a 1-d (C) input. Class-index targets are int64. Optional tensors (weight,
 * pos_weight) may be NULL. With MX_REDUCTION_NONE the result has one loss
 * per sample (the broadcast shape for elementwise losses); MEAN and SUM
 * return a 0-d tensor. Included by ops/ops.h. */
#ifndef MX_OPS_LOSSES_H
#define MX_OPS_LOSSES_H

#include "tensor/tensor.h"

MX_API_BEGIN

typedef enum {
  MX_REDUCTION_NONE,
  MX_REDUCTION_MEAN, /* PyTorch's default */
  MX_REDUCTION_SUM,
  MX_REDUCTION_BATCHMEAN /* kl_div only: the sum divided by the batch size (size of dim 0) */
} mx_reduction;

/* PyTorch's default ignore_index. */
#define MX_IGNORE_INDEX (-100)

/* --- classification ------------------------------------------------------------------------ */
/* log_softmax over the class dim, then nll_loss for int64 class indices
 * (target: the input's shape without the class dim); a floating target of
 * the input's shape holds class probabilities instead (ignore_index must
 * then be negative, and MEAN divides by the number of samples). weight: one
 * per class or NULL. MEAN with class indices divides by the summed weight
 * of the targets not ignored. label_smoothing in [0, 1].
 * PyTorch: weight NULL, ignore_index MX_IGNORE_INDEX, MEAN, label_smoothing 0. */
mx_tensor *mx_cross_entropy(const mx_tensor *input, const mx_tensor *target, const mx_tensor *weight,
                            int64_t ignore_index, mx_reduction reduction, double label_smoothing);
/* -weight[t] * input[t] for log-probabilities input and class indices t.
 * PyTorch: weight NULL, ignore_index MX_IGNORE_INDEX, MEAN. */
mx_tensor *mx_nll_loss(const mx_tensor *input, const mx_tensor *target, const mx_tensor *weight,
                       int64_t ignore_index, mx_reduction reduction);
/* -weight (t log(x) + (1 - t) log(1 - x)) for probabilities x in [0, 1],
 * each log clamped to >= -100; target of the input's shape, weight
 * broadcast to it. Refused under autocast. PyTorch: weight NULL, MEAN. */
mx_tensor *mx_binary_cross_entropy(const mx_tensor *input, const mx_tensor *target, const mx_tensor *weight,
                                   mx_reduction reduction);
/* The same on logits x, computed stably: pos_weight scales the positive
 * term (broadcast along the last dim, one per class).
 * PyTorch: weight NULL, MEAN, pos_weight NULL. */
mx_tensor *mx_binary_cross_entropy_with_logits(const mx_tensor *input, const mx_tensor *target,
                                               const mx_tensor *weight, mx_reduction reduction,
                                               const mx_tensor *pos_weight);
/* input (C) or (N, C); target int64 of the same shape: the class indices of
 * each sample, ended by the first -1. PyTorch: MEAN. */
mx_tensor *mx_multilabel_margin_loss(const mx_tensor *input, const mx_tensor *target, mx_reduction reduction);
/* sum over i != y of max(0, margin - x[y] + x[i])^p * weight[y] / C; input
 * (C) or (N, C), target int64 () or (N), p 1 or 2. PyTorch: p 1, margin 1,
 * weight NULL, MEAN. */
mx_tensor *mx_multi_margin_loss(const mx_tensor *input, const mx_tensor *target, int p, double margin,
                                const mx_tensor *weight, mx_reduction reduction);

/* --- regression (input and target broadcast together) ------------------------------------ */
mx_tensor *mx_mse_loss(const mx_tensor *input, const mx_tensor *target, mx_reduction reduction);
mx_tensor *mx_l1_loss(const mx_tensor *input, const mx_tensor *target, mx_reduction reduction);
/* 0.5 z^2 / beta below beta, z - 0.5 beta above (z = |input - target|;
 * beta 0: l1_loss). PyTorch: MEAN, beta 1. */
mx_tensor *mx_smooth_l1_loss(const mx_tensor *input, const mx_tensor *target, mx_reduction reduction, double beta);
/* 0.5 z^2 below delta, delta (z - 0.5 delta) above. PyTorch: MEAN, delta 1. */
mx_tensor *mx_huber_loss(const mx_tensor *input, const mx_tensor *target, mx_reduction reduction, double delta);

/* --- distributions -------------------------------------------------------------------------- */
/* target (log(target) - input) for log-probabilities input (0 where target
 * is 0), or exp(target) (target - input) with log_target. Also
 * MX_REDUCTION_BATCHMEAN. PyTorch: MEAN, log_target false. */
mx_tensor *mx_kl_div(const mx_tensor *input, const mx_tensor *target, mx_reduction reduction, bool log_target);
/* exp(input) - target input with log_input, else input - target log(input +
 * eps); full adds Stirling's approximation of log(target!) where target > 1.
 * PyTorch: log_input true, full false, eps 1e-8, MEAN. */
mx_tensor *mx_poisson_nll_loss(const mx_tensor *input, const mx_tensor *target, bool log_input, bool full,
                               double eps, mx_reduction reduction);

/* --- margins and embeddings (targets of 1 and -1) -------------------------------------------- */
/* input where target is 1, max(0, margin - input) where it is -1.
 * PyTorch: margin 1, MEAN. */
mx_tensor *mx_hinge_embedding_loss(const mx_tensor *input, const mx_tensor *target, double margin,
                                   mx_reduction reduction);
/* max(0, -target (input1 - input2) + margin); all three of one rank.
 * PyTorch: margin 0, MEAN. */
mx_tensor *mx_margin_ranking_loss(const mx_tensor *input1, const mx_tensor *input2, const mx_tensor *target,
                                  double margin, mx_reduction reduction);
/* log(1 + exp(-target input)). PyTorch: MEAN. */
mx_tensor *mx_soft_margin_loss(const mx_tensor *input, const mx_tensor *target, mx_reduction reduction);
/* 1 - cos(x1, x2) where target is 1, max(0, cos - margin) where it is -1;
 * inputs (N, D) with target (N), or (D) with a 0-d target. PyTorch: margin
 * 0, MEAN. */
mx_tensor *mx_cosine_embedding_loss(const mx_tensor *input1, const mx_tensor *input2, const mx_tensor *target,
                                    double margin, mx_reduction reduction);
/* max(0, margin + d(a, p) - d(a, n)) with d the p-norm of x1 - x2 + eps
 * along the last dim; swap uses min(d(a, n), d(p, n)). PyTorch: margin 1,
 * p 2, eps 1e-6, swap false, MEAN. */
mx_tensor *mx_triplet_margin_loss(const mx_tensor *anchor, const mx_tensor *positive, const mx_tensor *negative,
                                  double margin, double p, double eps, bool swap, mx_reduction reduction);

MX_API_END

#endif
