/* Optimizers: SGD, Adam and AdamW over a list of parameters, in groups that
 * each carry their own hyper-parameters.
 *
 *     mx_tensor *params[] = {w, b};
 *     mx_sgd_opts o = mx_sgd_defaults();
 *     o.lr = 0.1, o.momentum = 0.9;
 *     mx_optimizer *opt = mx_sgd_new(2, params, &o);
 *     for (...) {
 *       mx_optimizer_zero_grad(opt, true);
 *       mx_backward(loss(...), NULL, false);
 *       mx_optimizer_step(opt);
 *     }
 *     mx_optimizer_free(opt);
 *
 * Each step updates every parameter of every group in one multi-tensor pass.
 * Under AMP, mx_optimizer_step_amp takes the GradScaler's device flag
 * found_inf (a step with found_inf != 0 changes nothing: not the
 * parameters, not the momentum or moments, not the step counts) and an
 * optional grad_scale that the gradients are divided by inside the same
 * pass, so an AMP step never waits for the device. Parameters whose grad is
 * NULL are skipped, as in PyTorch.
 *
 * The arithmetic is PyTorch 1.13's foreach=False step, operation by
 * operation (kernels/math.h). The state lives on the parameters' device in
 * contiguous buffers, one per group, kind of state and state dtype: float32
 * for f32, f16 and bf16 parameters (so a low-precision parameter keeps
 * full-precision moments), float64 for f64 ones. It is zero-filled when a
 * group is added; each parameter's step count is device memory too.
 * Gradients are only read, never written: grad_scale unscales them on the
 * fly, multiplying by its float32 inverse as GradScaler.unscale_ does.
 */
#ifndef MX_OPTIM_OPTIMIZER_H
#define MX_OPTIM_OPTIMIZER_H

#include "tensor/tensor.h"

MX_API_BEGIN

typedef struct mx_optimizer mx_optimizer;

/* torch.optim.SGD */
typedef struct {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize;
} mx_sgd_opts;
/* torch.optim.Adam / AdamW (AdamW decays the weights directly) */
typedef struct {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize;
} mx_adam_opts;

mx_sgd_opts mx_sgd_defaults(void);    /* lr 1e-3, the rest 0/false */
mx_adam_opts mx_adam_defaults(void);  /* lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0 */
mx_adam_opts mx_adamw_defaults(void); /* the same with weight_decay 1e-2 */

/* A new optimizer whose first group is params (all floating, one device,
 * leaves that require grad); NULL opts: the defaults. */
mx_optimizer *mx_sgd_new(int n_params, mx_tensor *const *params, const mx_sgd_opts *opts);
mx_optimizer *mx_adam_new(int n_params, mx_tensor *const *params, const mx_adam_opts *opts);
mx_optimizer *mx_adamw_new(int n_params, mx_tensor *const *params, const mx_adam_opts *opts);
/* Another parameter group with its own hyper-parameters (the options of
 * the optimizer's kind; NULL: the options the optimizer was made with). */
mx_status mx_sgd_add_group(mx_optimizer *opt, int n_params, mx_tensor *const *params, const mx_sgd_opts *opts);
mx_status mx_adam_add_group(mx_optimizer *opt, int n_params, mx_tensor *const *params, const mx_adam_opts *opts);
void mx_optimizer_free(mx_optimizer *opt);

const char *mx_optimizer_name(const mx_optimizer *opt); /* "SGD", "Adam", "AdamW" */
int mx_optimizer_num_groups(const mx_optimizer *opt);
double mx_optimizer_lr(const mx_optimizer *opt, int group);
mx_status mx_optimizer_set_lr(mx_optimizer *opt, int group, double lr);
/* The group's lr before an LR schedule first changed it (PyTorch's
 * group['initial_lr']; optim/schedule.h sets it): NAN until then. */
double mx_optimizer_initial_lr(const mx_optimizer *opt, int group);
mx_status mx_optimizer_set_initial_lr(mx_optimizer *opt, int group, double lr);
/* SGD's momentum, or Adam's and AdamW's beta1: what OneCycleLR cycles. An
 * SGD group made without momentum gets its momentum buffers when given one. */
double mx_optimizer_momentum(const mx_optimizer *opt, int group);
mx_status mx_optimizer_set_momentum(mx_optimizer *opt, int group, double momentum);
/* All parameters, group after group (borrowed). */
int mx_optimizer_num_params(const mx_optimizer *opt);
mx_tensor *mx_optimizer_param(const mx_optimizer *opt, int i);
/* The state of parameter i by PyTorch's names: "momentum_buffer" (SGD with
 * momentum), "exp_avg", "exp_avg_sq", "max_exp_avg_sq" (amsgrad): a view with
 * the parameter's shape (float32, or float64 for a float64 parameter); and
 * "step" (Adam, AdamW, SGD with momentum): the int64 count, 0-d, of the steps
 * the parameter has taken. A new handle on the optimizer's memory (writes
 * go to the state); NULL with the error set for state the optimizer does
 * not keep. */
mx_tensor *mx_optimizer_state(const mx_optimizer *opt, int i, const char *name);
/* The names of the state parameter i keeps ("step" first, then the others
 * in the order above) into names[0 .. 4); returns how many, or -1 with the
 * error set. */
int mx_optimizer_state_names(const mx_optimizer *opt, int i, const char **names);
/* Group i's hyper-parameters (PyTorch's param_groups), as the options of
 * the optimizer's kind; setting them checks them as the constructor does
 * (load_state_dict). An SGD group given momentum gets its buffers (as
 * mx_optimizer_set_momentum); amsgrad cannot change. */
mx_status mx_optimizer_get_sgd_opts(const mx_optimizer *opt, int i, mx_sgd_opts *out);
mx_status mx_optimizer_get_adam_opts(const mx_optimizer *opt, int i, mx_adam_opts *out);
mx_status mx_optimizer_set_sgd_opts(mx_optimizer *opt, int i, const mx_sgd_opts *opts);
mx_status mx_optimizer_set_adam_opts(mx_optimizer *opt, int i, const mx_adam_opts *opts);

mx_status mx_optimizer_step(mx_optimizer *opt);
/* found_inf: a float32 tensor of one element on the parameters' device, or
 * NULL; grad_scale: the same, or NULL (gradients already unscaled). */
mx_status mx_optimizer_step_amp(mx_optimizer *opt, const mx_tensor *found_inf, const mx_tensor *grad_scale);
/* Clears the gradients: frees them (set_to_none) or fills them with 0. */
mx_status mx_optimizer_zero_grad(mx_optimizer *opt, bool set_to_none);

MX_API_END

#endif
