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
 *
 * Your own optimizer. An optimizer is a type (mx_optimizer_type: a name,
 * the names of each group's hyper-parameters, and a few hooks) plus the
 * state tensors it registers per parameter. mixgrad keeps the groups, their
 * hyper-parameters (doubles, in the type's order) and the state, and gives
 * every type what SGD, Adam and AdamW get (they are types like any other):
 * mx_scaler_step unscales the gradients, checks them and hands the step
 * found_inf, so an overflow skips it on the device; clipping works on the
 * parameters; LR schedules set the "lr" hyper-parameter (and OneCycleLR the
 * one .momentum names); training checkpoints save and restore the
 * hyper-parameters and every registered state tensor by name. Lion, in full
 * in examples/optimizers/lion.c:
 *
 *     enum { LR, BETA1, BETA2, WEIGHT_DECAY };
 *     static const mx_optimizer_hparam lion_hparams[] = {{.name = "lr"}, {.name = "beta1"},
 *                                                        {.name = "beta2"}, {.name = "weight_decay"}};
 *
 *     static mx_status lion_init_group(mx_optimizer *opt, int group, const char *fn) {
 *       int first = mx_optimizer_group_first(opt, group), n = mx_optimizer_group_size(opt, group);
 *       for (int i = first; i < first + n; i++) {       // exp_avg: zeros like the parameter
 *         mx_tensor *p = mx_optimizer_param(opt, i);
 *         mx_tensor *m = mx_zeros(mx_shape_get(p), MX_F32, mx_device_of(p));
 *         if (mx_optimizer_add_state(opt, i, "exp_avg", m) != MX_OK)
 *           return mx_optimizer_error(mx_last_status(), "%s: %s", fn, mx_last_error());
 *       }
 *       return MX_OK;
 *     }
 *
 *     static mx_status lion_step(mx_optimizer *opt, int group, const mx_tensor *found_inf,
 *                                const mx_tensor *grad_scale) {
 *       const double *h = mx_optimizer_hparams(opt, group);
 *       int first = mx_optimizer_group_first(opt, group), n = mx_optimizer_group_size(opt, group);
 *       for (int i = first; i < first + n; i++) {
 *         mx_tensor *p = mx_optimizer_param(opt, i);
 *         if (!mx_grad_of(p)) continue;                  // no gradient: left alone
 *         mx_tensor *g = mx_optimizer_grad(p, grad_scale), *m = mx_optimizer_state(opt, i, "exp_avg");
 *         mx_tensor *c = mx_add(mx_mul_scalar(m, h[BETA1]), mx_mul_scalar(g, 1 - h[BETA1]));
 *         mx_tensor *q = mx_sub(mx_mul_scalar(p, 1 - h[LR] * h[WEIGHT_DECAY]),
 *                               mx_mul_scalar(mx_sign(c), h[LR]));
 *         mx_tensor *m2 = mx_add(mx_mul_scalar(m, h[BETA2]), mx_mul_scalar(g, 1 - h[BETA2]));
 *         if (mx_optimizer_assign_(p, q, found_inf) != MX_OK || mx_optimizer_assign_(m, m2, found_inf) != MX_OK)
 *           return mx_last_status();                    // NULLs above end here too
 *       }
 *       return MX_OK;
 *     }
 *
 *     static const mx_optimizer_type lion = {.name = "Lion", .n_hparams = 4, .hparams = lion_hparams,
 *                                            .momentum = "beta1", .init_group = lion_init_group,
 *                                            .step = lion_step};
 *     ...
 *     mx_optimizer *opt = mx_optimizer_new(&lion, NULL, n, params, (double[]){1e-4, 0.9, 0.99, 0.0});
 *
 * A step runs with grad mode off inside a scope of its own (its
 * temporaries, and the handles mx_optimizer_state gives, go when it
 * returns), once per group that has a gradient. Its two rules: when
 * found_inf holds a non-zero value nothing may change, not a parameter, not
 * a piece of state (mx_optimizer_assign_ writes that way on the device,
 * without waiting for it; a step may instead read mx_item(found_inf) and
 * return, at the cost of a host sync), and the gradients are divided by
 * grad_scale when it is given (mx_optimizer_grad does it; under
 * mx_scaler_step it is NULL: the scaler has unscaled them in place).
 * Gradients are never written. State is registered when a group is made
 * (init_group) or when new hyper-parameters need it (update_group), never
 * in the step, so that a fresh optimizer holds the state a checkpoint
 * restores.
 */
#ifndef MX_OPTIM_OPTIMIZER_H
#define MX_OPTIM_OPTIMIZER_H

#include "tensor/tensor.h"

MX_API_BEGIN

typedef struct mx_optimizer mx_optimizer;

/* --- your own optimizer ------------------------------------------------------------------------ */

/* A hyper-parameter of every group: a number, or with flag a switch whose
 * value is 0 or 1 (checkpoints write it as false or true). Names are
 * letters, digits and '_', at most 63 of them. */
typedef struct {
  const char *name;
  bool flag;
} mx_optimizer_hparam;

/* Declare types with designated initializers, so that a field added later
 * needs no edit. fn, in the hooks, is the public function that runs them:
 * name it in errors (mx_optimizer_error). */
typedef struct mx_optimizer_type {
  const char *name; /* "Lion": mx_optimizer_name; checkpoints load only into the same name */
  /* Each group's hyper-parameters, in the order mx_optimizer_hparams gives
   * them; one is "lr" (checked >= 0 before the type's check). */
  int n_hparams;
  const mx_optimizer_hparam *hparams;
  const char *momentum; /* the one OneCycleLR cycles: a momentum or beta1 (NULL: none) */
  /* Optional: checks a group's hyper-parameters h before a group is made
   * with them and before they change. */
  mx_status (*check)(const double *h, const char *fn);
  /* Optional: registers the state of the new group `group` (its parameters
   * and hyper-parameters are in place) with mx_optimizer_add_state. On an
   * error the group is removed with what was registered. */
  mx_status (*init_group)(mx_optimizer *opt, int group, const char *fn);
  /* Optional: group's hyper-parameters are about to become h (checked):
   * registers the state they need, or refuses a change it cannot make. On
   * an error what it registered is dropped and nothing changes. */
  mx_status (*update_group)(mx_optimizer *opt, int group, const double *h, const char *fn);
  /* Required: one update of the group's parameters that have a gradient
   * (the rules are in the prose above). */
  mx_status (*step)(mx_optimizer *opt, int group, const mx_tensor *found_inf, const mx_tensor *grad_scale);
  /* Optional: replaces mx_optimizer_zero_grad's default (free or zero
   * every gradient). */
  mx_status (*zero_grad)(mx_optimizer *opt, bool set_to_none);
  /* Optional: frees mx_optimizer_self's data. */
  void (*free_self)(void *self);
} mx_optimizer_type;

/* An optimizer of the type whose first group is params (floating leaves
 * that require grad, on one device, each once) with the hyper-parameters h
 * (type->n_hparams values). self is the type's own data (mx_optimizer_self),
 * freed by free_self, also when this fails. */
mx_optimizer *mx_optimizer_new(const mx_optimizer_type *type, void *self, int n_params, mx_tensor *const *params,
                               const double *h);
/* Another group (NULL h: the values the optimizer was made with). */
mx_status mx_optimizer_add_group(mx_optimizer *opt, int n_params, mx_tensor *const *params, const double *h);
const mx_optimizer_type *mx_optimizer_type_of(const mx_optimizer *opt);
void *mx_optimizer_self(const mx_optimizer *opt);
/* Group g holds the parameters first .. first + size (mx_optimizer_param). */
int mx_optimizer_group_first(const mx_optimizer *opt, int group);
int mx_optimizer_group_size(const mx_optimizer *opt, int group);
/* The group's hyper-parameters, in the type's order (borrowed, valid until
 * they change); NULL with the error set for a bad group. */
const double *mx_optimizer_hparams(const mx_optimizer *opt, int group);
/* One by name (NAN with the error set when the type has none of that name). */
double mx_optimizer_get_hparam(const mx_optimizer *opt, int group, const char *name);
/* Setting them checks them as mx_optimizer_new does (load_state_dict);
 * on an error nothing changes. */
mx_status mx_optimizer_set_hparams(mx_optimizer *opt, int group, const double *h);
mx_status mx_optimizer_set_hparam(mx_optimizer *opt, int group, const char *name, double value);

/* Registers t as parameter i's state `name` (letters, digits and '_', at
 * most 63; one of each per parameter), on the parameters' device. The
 * optimizer takes t, even when this fails (as a module takes its tensors):
 * it lives, out of any scope, until the optimizer is freed. Call it from
 * init_group or update_group. */
mx_status mx_optimizer_add_state(mx_optimizer *opt, int i, const char *name, mx_tensor *t);
/* The number of states parameter i keeps (-1 with the error set), and the
 * name of the k-th, in the order they were registered. */
int mx_optimizer_num_states(const mx_optimizer *opt, int i);
const char *mx_optimizer_state_name(const mx_optimizer *opt, int i, int k);

/* For a step: parameter p's gradient divided by grad_scale (NULL: as it
 * is) as the built-ins read it, multiplied by the scale's float32 inverse,
 * in float32 (float64 for a float64 gradient): a new handle. NULL with the
 * error set when p has no gradient. */
mx_tensor *mx_optimizer_grad(const mx_tensor *p, const mx_tensor *grad_scale);
/* dst = value (converted to dst's dtype), unless found_inf (NULL: none)
 * holds a non-zero value: then dst keeps its values. Decided on the device,
 * without a host sync. */
mx_status mx_optimizer_assign_(mx_tensor *dst, const mx_tensor *value, const mx_tensor *found_inf);
/* Sets the thread's error to the printf-formatted message and returns
 * status: how a hook reports what went wrong ("%s: invalid beta1 %g", fn, ...). */
mx_status mx_optimizer_error(mx_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* --- the built-in optimizers ------------------------------------------------------------------- */

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

const char *mx_optimizer_name(const mx_optimizer *opt); /* "SGD", "Adam", "AdamW", or the type's name */
int mx_optimizer_num_groups(const mx_optimizer *opt);
double mx_optimizer_lr(const mx_optimizer *opt, int group);
mx_status mx_optimizer_set_lr(mx_optimizer *opt, int group, double lr);
/* The group's lr before an LR schedule first changed it (PyTorch's
 * group['initial_lr']; optim/schedule.h sets it): NAN until then. */
double mx_optimizer_initial_lr(const mx_optimizer *opt, int group);
mx_status mx_optimizer_set_initial_lr(mx_optimizer *opt, int group, double lr);
/* SGD's momentum, or Adam's and AdamW's beta1 (the hyper-parameter the
 * type's .momentum names): what OneCycleLR cycles. An SGD group made
 * without momentum gets its momentum buffers when given one. */
double mx_optimizer_momentum(const mx_optimizer *opt, int group);
mx_status mx_optimizer_set_momentum(mx_optimizer *opt, int group, double momentum);
/* All parameters, group after group (borrowed). */
int mx_optimizer_num_params(const mx_optimizer *opt);
mx_tensor *mx_optimizer_param(const mx_optimizer *opt, int i);
/* The state of parameter i by name; the built-ins use PyTorch's names:
 * "momentum_buffer" (SGD with momentum), "exp_avg", "exp_avg_sq",
 * "max_exp_avg_sq" (amsgrad): a view with the parameter's shape (float32,
 * or float64 for a float64 parameter); and "step" (Adam, AdamW, SGD with
 * momentum): the int64 count, 0-d, of the steps the parameter has taken. A
 * new handle on the optimizer's memory (writes go to the state); NULL with
 * the error set for state the optimizer does not keep. */
mx_tensor *mx_optimizer_state(const mx_optimizer *opt, int i, const char *name);
/* The names of the state parameter i keeps, in their order (the built-ins:
 * "step" first, then the others in the order above) into names[0 ..
 * mx_optimizer_num_states) (at most 4 for the built-ins); returns how many,
 * or -1 with the error set. */
int mx_optimizer_state_names(const mx_optimizer *opt, int i, const char **names);
/* Group i's hyper-parameters (PyTorch's param_groups), as the options of
 * the optimizer's kind (mx_optimizer_hparams for any type); setting them
 * checks them as the constructor does (load_state_dict). An SGD group given momentum gets its buffers (as
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
