/* Lion (Chen et al., 2023, "Symbolic Discovery of Optimization
 * Algorithms"), an optimizer written outside mixgrad against its installed
 * header only, through the public optimizer interface (optim/optimizer.h):
 * it steps under the GradScaler (skipped on overflow), and checkpoints,
 * clipping and LR schedules work on it as on the built-in optimizers.
 *
 *     lion_opts o = lion_defaults();
 *     o.lr = 3e-4, o.weight_decay = 0.1;
 *     mx_optimizer *opt = lion_new(n, params, &o);
 *     ...                                    // mx_scaler_step(scaler, opt, NULL), as with AdamW
 *     mx_optimizer_free(opt);
 *
 * Per parameter with gradient g and state m ("exp_avg", float32, or
 * float64 for a float64 parameter; zeros at first), in the state's dtype:
 *
 *     p = p * (1 - lr * weight_decay) - lr * sign(beta1 * m + (1 - beta1) * g)
 *     m = beta2 * m + (1 - beta2) * g
 */
#ifndef LION_H
#define LION_H

#include <mixgrad.h>

typedef struct {
  double lr, beta1, beta2, weight_decay;
} lion_opts;

/* lr 1e-4, betas (0.9, 0.99), weight_decay 0 (lucidrains/lion-pytorch's defaults). */
lion_opts lion_defaults(void);
/* A Lion optimizer over params (NULL opts: the defaults); its name is "Lion". */
mx_optimizer *lion_new(int n_params, mx_tensor *const *params, const lion_opts *opts);
/* Another group (NULL opts: the optimizer's first options). */
mx_status lion_add_group(mx_optimizer *opt, int n_params, mx_tensor *const *params, const lion_opts *opts);

#endif
