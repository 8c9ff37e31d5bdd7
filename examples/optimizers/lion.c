/* Lion on mixgrad's optimizer interface (lion.h says what it computes):
 * its hyper-parameters, its state and its step, with the installed header only. */
#include "lion.h"

enum { LR, BETA1, BETA2, WEIGHT_DECAY, N_HPARAMS };

static const mx_optimizer_hparam lion_hparams[N_HPARAMS] = {
    {.name = "lr"}, {.name = "beta1"}, {.name = "beta2"}, {.name = "weight_decay"}};

lion_opts lion_defaults(void) { return (lion_opts){.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.99}; }

/* The library has checked lr >= 0 already. */
static mx_status lion_check(const double *h, const char *fn) {
  if (!(h[BETA1] >= 0 && h[BETA1] <= 1))
    return mx_optimizer_error(MX_INVALID_ARGUMENT, "%s: invalid beta1 %g (must be in [0, 1])", fn, h[BETA1]);
  if (!(h[BETA2] >= 0 && h[BETA2] <= 1))
    return mx_optimizer_error(MX_INVALID_ARGUMENT, "%s: invalid beta2 %g (must be in [0, 1])", fn, h[BETA2]);
  if (!(h[WEIGHT_DECAY] >= 0))
    return mx_optimizer_error(MX_INVALID_ARGUMENT, "%s: invalid weight_decay %g (must be >= 0)", fn,
                              h[WEIGHT_DECAY]);
  return MX_OK;
}

/* exp_avg: zeros with the parameter's shape, float32 (float64 for a float64
 * parameter, so a 16-bit parameter keeps a full-precision average). */
static mx_status lion_init_group(mx_optimizer *opt, int group, const char *fn) {
  int first = mx_optimizer_group_first(opt, group), n = mx_optimizer_group_size(opt, group);
  for (int i = first; i < first + n; i++) {
    mx_tensor *p = mx_optimizer_param(opt, i);
    mx_dtype dtype = mx_dtype_of(p) == MX_F64 ? MX_F64 : MX_F32;
    if (mx_optimizer_add_state(opt, i, "exp_avg", mx_zeros(mx_shape_get(p), dtype, mx_device_of(p))) != MX_OK)
      return mx_optimizer_error(mx_last_status(), "%s: %s", fn, mx_last_error()); /* name the call that failed */
  }
  return MX_OK;
}

/* Every new value is computed from the old ones first, then written with
 * mx_optimizer_assign_, which keeps the old values on the device when
 * found_inf says the gradients overflowed: no host sync, nothing changed.
 * A NULL from any op (its error set) ends at the first assign. */
static mx_status lion_step(mx_optimizer *opt, int group, const mx_tensor *found_inf, const mx_tensor *grad_scale) {
  const double *h = mx_optimizer_hparams(opt, group);
  int first = mx_optimizer_group_first(opt, group), n = mx_optimizer_group_size(opt, group);
  for (int i = first; i < first + n; i++) {
    mx_tensor *p = mx_optimizer_param(opt, i);
    if (!mx_grad_of(p)) continue; /* parameters without a gradient are left alone */
    mx_tensor *m = mx_optimizer_state(opt, i, "exp_avg"), *g = mx_optimizer_grad(p, grad_scale);
    mx_tensor *wide = mx_to_dtype(p, mx_dtype_of(m));
    mx_tensor *direction = mx_sign(mx_add(mx_mul_scalar(m, h[BETA1]), mx_mul_scalar(g, 1 - h[BETA1])));
    mx_tensor *p_new = mx_sub(mx_mul_scalar(wide, 1 - h[LR] * h[WEIGHT_DECAY]), mx_mul_scalar(direction, h[LR]));
    mx_tensor *m_new = mx_add(mx_mul_scalar(m, h[BETA2]), mx_mul_scalar(g, 1 - h[BETA2]));
    if (mx_optimizer_assign_(p, p_new, found_inf) != MX_OK || mx_optimizer_assign_(m, m_new, found_inf) != MX_OK)
      return mx_last_status();
  }
  return MX_OK;
}

static const mx_optimizer_type lion_type = {.name = "Lion",
                                            .n_hparams = N_HPARAMS,
                                            .hparams = lion_hparams,
                                            .momentum = "beta1", /* what OneCycleLR cycles */
                                            .check = lion_check,
                                            .init_group = lion_init_group,
                                            .step = lion_step};

static void values_of(const lion_opts *o, double h[N_HPARAMS]) {
  h[LR] = o->lr, h[BETA1] = o->beta1, h[BETA2] = o->beta2, h[WEIGHT_DECAY] = o->weight_decay;
}

mx_optimizer *lion_new(int n_params, mx_tensor *const *params, const lion_opts *opts) {
  lion_opts o = opts ? *opts : lion_defaults();
  double h[N_HPARAMS];
  values_of(&o, h);
  return mx_optimizer_new(&lion_type, NULL, n_params, params, h);
}

mx_status lion_add_group(mx_optimizer *opt, int n_params, mx_tensor *const *params, const lion_opts *opts) {
  if (opt && mx_optimizer_type_of(opt) != &lion_type)
    return mx_optimizer_error(MX_INVALID_ARGUMENT, "lion_add_group: the optimizer is %s, not Lion",
                              mx_optimizer_name(opt));
  double h[N_HPARAMS];
  if (opts) values_of(opts, h);
  return mx_optimizer_add_group(opt, n_params, params, opts ? h : NULL);
}
