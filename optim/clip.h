/* Gradient clipping: torch.nn.utils.clip_grad_norm_ and clip_grad_value_.
 *
 *     mx_backward(loss, NULL, false);
 *     double norm;
 *     mx_clip_grad_norm_optimizer(opt, 1.0, 2.0, false, &norm);  // all grads scaled to a norm <= 1
 *     mx_optimizer_step(opt);
 *
 * Both work on the gradients in place (parameters without one are skipped),
 * with mx ops outside the graph, so they run on any device. The norm is
 * taken over all gradients together, as if they were one vector: the
 * norm_type-norm (2, 1, INFINITY, or any other p) of each gradient, in its
 * dtype (float16 and bfloat16 computed in float32 and rounded), then of
 * those norms (in their widest dtype). Every gradient is then multiplied by
 * min(max_norm / (total + 1e-6), 1), computed in that dtype as PyTorch does,
 * so the gradients are left alone when they are within max_norm. Without
 * gradients the total is 0.
 */
#ifndef MX_OPTIM_CLIP_H
#define MX_OPTIM_CLIP_H

#include "optim/optimizer.h"

MX_API_BEGIN

/* total_norm_out (may be NULL) gets the total norm (reading it waits for
 * the device). With error_if_nonfinite a total norm that is inf or NaN is
 * an error and the gradients stay as they are; without it they are scaled
 * by max_norm / total anyway, as in PyTorch (to zeros and NaNs). */
mx_status mx_clip_grad_norm(int n, mx_tensor *const *params, double max_norm, double norm_type, bool error_if_nonfinite,
                            double *total_norm_out);
/* Clamps every gradient element into [-clip_value, clip_value]. */
mx_status mx_clip_grad_value(int n, mx_tensor *const *params, double clip_value);

/* The same over all the optimizer's parameters. */
mx_status mx_clip_grad_norm_optimizer(const mx_optimizer *opt, double max_norm, double norm_type,
                                      bool error_if_nonfinite, double *total_norm_out);
mx_status mx_clip_grad_value_optimizer(const mx_optimizer *opt, double clip_value);

MX_API_END

#endif
