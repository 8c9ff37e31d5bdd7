/* OneCycleLR: the lr up from max_lr / div_factor to max_lr and down again, in two or three phases, with
 * the momentum (SGD's momentum, Adam's beta1) going the other way; PyTorch's arithmetic, operation by operation. */
#include <math.h>
#include <stdlib.h>

#include "optim/schedule_impl.h"

mx_one_cycle_opts mx_one_cycle_defaults(double max_lr, int64_t total_steps) {
  return (mx_one_cycle_opts){.max_lr = max_lr,
                             .total_steps = total_steps,
                             .pct_start = 0.3,
                             .anneal_strategy = MX_ANNEAL_COS,
                             .cycle_momentum = true,
                             .base_momentum = 0.85,
                             .max_momentum = 0.95,
                             .div_factor = 25,
                             .final_div_factor = 1e4};
}

static mx_status check_opts(const char *fn, const mx_optimizer *opt, const mx_one_cycle_opts *o) {
  if (!opt) return mx__null_input(fn, "opt");
  if (!o) return mx__null_input(fn, "opts");
  if (o->total_steps <= 0)
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid total_steps %lld (must be > 0)", fn, (long long)o->total_steps);
  if (o->anneal_strategy != MX_ANNEAL_COS && o->anneal_strategy != MX_ANNEAL_LINEAR)
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid anneal_strategy %d (MX_ANNEAL_COS or MX_ANNEAL_LINEAR)", fn,
                     (int)o->anneal_strategy);
  if (mx__schedule_check_range(fn, "pct_start", o->pct_start, 0, 1) != MX_OK) return MX_INVALID_ARGUMENT;
  if (!(o->div_factor > 0 && isfinite(o->div_factor)))
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid div_factor %g (must be finite and > 0)", fn, o->div_factor);
  if (!(o->final_div_factor > 0 && isfinite(o->final_div_factor)))
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid final_div_factor %g (must be finite and > 0)", fn,
                     o->final_div_factor);
  if (o->cycle_momentum && !mx_optimizer_type_of(opt)->momentum) /* PyTorch's check too */
    return mx__error(MX_INVALID_ARGUMENT, "%s: %s has no momentum or beta1 to cycle; make it with cycle_momentum "
                     "false", fn, mx_optimizer_name(opt));
  if (o->cycle_momentum && !(o->base_momentum >= 0 && o->base_momentum < 1))
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid base_momentum %g (must be in [0, 1))", fn, o->base_momentum);
  if (o->cycle_momentum && !(o->max_momentum >= 0 && o->max_momentum < 1))
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid max_momentum %g (must be in [0, 1))", fn, o->max_momentum);
  int n = mx_optimizer_num_groups(opt);
  for (int g = 0; g < n; g++) {
    double max_lr = o->max_lrs ? o->max_lrs[g] : o->max_lr;
    if (!(max_lr >= 0 && isfinite(max_lr)))
      return mx__error(MX_INVALID_ARGUMENT, "%s: invalid max_lr %g for group %d (must be finite and >= 0)", fn, max_lr,
                       g);
  }
  return MX_OK;
}

/* PyTorch's _schedule_phases: the step each phase ends at and what it anneals from and to. */
static void set_phases(mx__one_cycle *c, double pct_start, bool three_phase) {
  double total = (double)c->total_steps;
  if (three_phase) {
    c->n_phases = 3;
    c->phases[0] =
        (mx__cycle_phase){pct_start * total - 1, MX__CYCLE_INITIAL, MX__CYCLE_MAX, MX__MOMENTUM_MAX, MX__MOMENTUM_BASE};
    c->phases[1] = (mx__cycle_phase){2 * pct_start * total - 2, MX__CYCLE_MAX, MX__CYCLE_INITIAL, MX__MOMENTUM_BASE,
                                     MX__MOMENTUM_MAX};
    c->phases[2] = (mx__cycle_phase){total - 1, MX__CYCLE_INITIAL, MX__CYCLE_MIN, MX__MOMENTUM_MAX, MX__MOMENTUM_MAX};
  } else {
    c->n_phases = 2;
    c->phases[0] =
        (mx__cycle_phase){pct_start * total - 1, MX__CYCLE_INITIAL, MX__CYCLE_MAX, MX__MOMENTUM_MAX, MX__MOMENTUM_BASE};
    c->phases[1] = (mx__cycle_phase){total - 1, MX__CYCLE_MAX, MX__CYCLE_MIN, MX__MOMENTUM_BASE, MX__MOMENTUM_MAX};
  }
}

mx_schedule *mx_one_cycle_lr_new(mx_optimizer *opt, const mx_one_cycle_opts *opts) {
  const char *fn = "mx_one_cycle_lr_new";
  if (check_opts(fn, opt, opts) != MX_OK) return NULL;
  int n = mx_optimizer_num_groups(opt);
  /* OneCycleLR sets each group's initial lr itself: the base lrs */
  for (int g = 0; g < n; g++)
    mx_optimizer_set_initial_lr(opt, g, (opts->max_lrs ? opts->max_lrs[g] : opts->max_lr) / opts->div_factor);
  mx_schedule *s = mx__schedule_new(fn, MX__ONE_CYCLE_LR, opt);
  if (!s) return NULL;
  mx__one_cycle *c = &s->cycle;
  c->max_lrs = malloc(sizeof *c->max_lrs * (size_t)n);
  c->min_lrs = malloc(sizeof *c->min_lrs * (size_t)n);
  c->last_momentums = calloc((size_t)n, sizeof *c->last_momentums);
  if (!c->max_lrs || !c->min_lrs || !c->last_momentums) {
    mx_schedule_free(s);
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
    return NULL;
  }
  for (int g = 0; g < n; g++) {
    c->max_lrs[g] = opts->max_lrs ? opts->max_lrs[g] : opts->max_lr;
    c->min_lrs[g] = s->base_lrs[g] / opts->final_div_factor;
  }
  c->total_steps = opts->total_steps;
  c->anneal = opts->anneal_strategy;
  c->cycle_momentum = opts->cycle_momentum;
  c->momentum[MX__MOMENTUM_MAX] = opts->max_momentum;
  c->momentum[MX__MOMENTUM_BASE] = opts->base_momentum;
  set_phases(c, opts->pct_start, opts->three_phase);
  return mx__schedule_start(fn, s);
}

/* _annealing_cos and _annealing_linear: from start (pct 0) to end (pct 1). */
static double anneal(mx_anneal_strategy strategy, double start, double end, double pct) {
  if (strategy == MX_ANNEAL_LINEAR) return (end - start) * pct + start;
  double cos_out = cos(M_PI * pct) + 1;
  return end + (start - end) / 2.0 * cos_out;
}

static double lr_of(const mx_schedule *s, int which, int g) {
  return which == MX__CYCLE_INITIAL ? s->base_lrs[g]
         : which == MX__CYCLE_MAX   ? s->cycle.max_lrs[g]
                                    : s->cycle.min_lrs[g];
}

mx_status mx__one_cycle_values(const char *fn, const mx_schedule *s, int64_t last_epoch, double *lrs,
                               double *momentums) {
  const mx__one_cycle *c = &s->cycle;
  if (last_epoch > c->total_steps)
    return mx__error(MX_STATE_ERROR, "%s: OneCycleLR tried to step %lld times; its total_steps is %lld", fn,
                     (long long)last_epoch + 1, (long long)c->total_steps);
  double step = (double)last_epoch, start_step = 0;
  int i = 0;
  while (!(step <= c->phases[i].end_step) && i < c->n_phases - 1) start_step = c->phases[i++].end_step;
  const mx__cycle_phase *phase = &c->phases[i];
  if (phase->end_step - start_step == 0)
    return mx__error(MX_STATE_ERROR, "%s: OneCycleLR's phase %d (steps %g to %g) is empty; choose another pct_start",
                     fn, i + 1, start_step, phase->end_step);
  double pct = (step - start_step) / (phase->end_step - start_step);
  for (int g = 0; g < s->n_groups; g++) {
    lrs[g] = anneal(c->anneal, lr_of(s, phase->start_lr, g), lr_of(s, phase->end_lr, g), pct);
    /* At step total_steps pct passes 1, and a linear anneal overshoots below the final lr: PyTorch sets
     * that negative lr, an optimizer here does not take one (nor should a step ascend), so it stops at 0. */
    if (lrs[g] < 0) lrs[g] = 0;
    momentums[g] = anneal(c->anneal, c->momentum[phase->start_momentum], c->momentum[phase->end_momentum], pct);
  }
  return MX_OK;
}
