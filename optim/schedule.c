/* The LR schedules' core: making and freeing one, the plain kinds (StepLR,
 * MultiStepLR, ExponentialLR, CosineAnnealingLR, LinearLR) with PyTorch's
 * chainable and closed forms, a step, and the read-outs. A schedule starts
 * at PyTorch's default last_epoch -1 (resuming goes through its state), so
 * CosineAnnealingLR's branch for one made at a later epoch has no use here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/schedule_impl.h"

const char *const mx__schedule_names[MX__N_SCHEDULE_KINDS] = {
    "StepLR",   "MultiStepLR", "ExponentialLR",    "CosineAnnealingLR",
    "LinearLR", "OneCycleLR",  "ChainedScheduler", "SequentialLR"};

/* --- making and freeing --------------------------------------------------------------------------- */

mx_status mx__schedule_check_range(const char *fn, const char *name, double x, double min, double max) {
  if (isfinite(x) && x >= min && (isinf(max) || x <= max)) return MX_OK;
  if (isinf(max))
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid %s %g (must be finite and >= %g)", fn, name, x, min);
  return mx__error(MX_INVALID_ARGUMENT, "%s: invalid %s %g (must be in [%g, %g])", fn, name, x, min, max);
}

static mx_status check_positive(const char *fn, const char *name, int64_t x) {
  if (x > 0) return MX_OK;
  return mx__error(MX_INVALID_ARGUMENT, "%s: invalid %s %lld (must be > 0)", fn, name, (long long)x);
}

mx_schedule *mx__schedule_new(const char *fn, mx__schedule_kind kind, mx_optimizer *opt) {
  if (!opt) {
    mx__null_input(fn, "opt");
    return NULL;
  }
  int n = mx_optimizer_num_groups(opt);
  mx_schedule *s = calloc(1, sizeof *s);
  if (s) {
    s->base_lrs = calloc((size_t)n, sizeof *s->base_lrs);
    s->last_lrs = calloc((size_t)n, sizeof *s->last_lrs);
  }
  if (!s || !s->base_lrs || !s->last_lrs) {
    mx_schedule_free(s);
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
    return NULL;
  }
  s->kind = kind;
  s->opt = opt;
  s->n_groups = n;
  s->last_epoch = -1;
  for (int g = 0; g < n; g++) {
    if (isnan(mx_optimizer_initial_lr(opt, g))) mx_optimizer_set_initial_lr(opt, g, mx_optimizer_lr(opt, g));
    s->base_lrs[g] = s->last_lrs[g] = mx_optimizer_initial_lr(opt, g);
  }
  return s;
}

mx_schedule *mx__schedule_start(const char *fn, mx_schedule *s) {
  if (s && mx__schedule_step_plain(fn, s, false) == MX_OK) return s;
  mx_schedule_free(s);
  return NULL;
}

void mx_schedule_free(mx_schedule *s) {
  if (!s) return;
  if (s->parent) {
    mx__error(MX_STATE_ERROR, "mx_schedule_free: this %s belongs to a %s and is freed with it",
              mx__schedule_names[s->kind], mx__schedule_names[s->parent->kind]);
    return;
  }
  for (int i = 0; i < s->n_children; i++) {
    s->children[i]->parent = NULL;
    mx_schedule_free(s->children[i]);
  }
  free(s->children);
  free(s->milestones);
  free(s->cycle.max_lrs);
  free(s->cycle.min_lrs);
  free(s->cycle.last_momentums);
  free(s->base_lrs);
  free(s->last_lrs);
  free(s);
}

mx_schedule *mx_step_lr_new(mx_optimizer *opt, int64_t step_size, double gamma) {
  const char *fn = "mx_step_lr_new";
  if (check_positive(fn, "step_size", step_size) != MX_OK ||
      mx__schedule_check_range(fn, "gamma", gamma, 0, INFINITY) != MX_OK)
    return NULL;
  mx_schedule *s = mx__schedule_new(fn, MX__STEP_LR, opt);
  if (s) s->step_size = step_size, s->gamma = gamma;
  return mx__schedule_start(fn, s);
}

mx_schedule *mx_multistep_lr_new(mx_optimizer *opt, int n_milestones, const int64_t *milestones, double gamma) {
  const char *fn = "mx_multistep_lr_new";
  if (n_milestones < 0) {
    mx__error(MX_INVALID_ARGUMENT, "%s: n_milestones is %d (must be >= 0)", fn, n_milestones);
    return NULL;
  }
  if (n_milestones > 0 && !milestones) {
    mx__null_input(fn, "milestones");
    return NULL;
  }
  if (mx__schedule_check_range(fn, "gamma", gamma, 0, INFINITY) != MX_OK) return NULL;
  mx_schedule *s = mx__schedule_new(fn, MX__MULTISTEP_LR, opt);
  if (s && n_milestones > 0) {
    if (!(s->milestones = malloc(sizeof *s->milestones * (size_t)n_milestones))) {
      mx_schedule_free(s);
      mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
      return NULL;
    }
    memcpy(s->milestones, milestones, sizeof *milestones * (size_t)n_milestones);
  }
  if (s) s->n_milestones = n_milestones, s->gamma = gamma;
  return mx__schedule_start(fn, s);
}

mx_schedule *mx_exponential_lr_new(mx_optimizer *opt, double gamma) {
  const char *fn = "mx_exponential_lr_new";
  if (mx__schedule_check_range(fn, "gamma", gamma, 0, INFINITY) != MX_OK) return NULL;
  mx_schedule *s = mx__schedule_new(fn, MX__EXPONENTIAL_LR, opt);
  if (s) s->gamma = gamma;
  return mx__schedule_start(fn, s);
}

mx_schedule *mx_cosine_annealing_lr_new(mx_optimizer *opt, int64_t t_max, double eta_min) {
  const char *fn = "mx_cosine_annealing_lr_new";
  if (check_positive(fn, "t_max", t_max) != MX_OK ||
      mx__schedule_check_range(fn, "eta_min", eta_min, 0, INFINITY) != MX_OK)
    return NULL;
  mx_schedule *s = mx__schedule_new(fn, MX__COSINE_LR, opt);
  if (s) s->t_max = t_max, s->eta_min = eta_min;
  return mx__schedule_start(fn, s);
}

mx_schedule *mx_linear_lr_new(mx_optimizer *opt, double start_factor, double end_factor, int64_t total_iters) {
  const char *fn = "mx_linear_lr_new";
  if (!(start_factor > 0 && start_factor <= 1)) {
    mx__error(MX_INVALID_ARGUMENT, "%s: invalid start_factor %g (must be in (0, 1])", fn, start_factor);
    return NULL;
  }
  if (mx__schedule_check_range(fn, "end_factor", end_factor, 0, 1) != MX_OK ||
      check_positive(fn, "total_iters", total_iters) != MX_OK)
    return NULL;
  mx_schedule *s = mx__schedule_new(fn, MX__LINEAR_LR, opt);
  if (s) s->start_factor = start_factor, s->end_factor = end_factor, s->total_iters = total_iters;
  return mx__schedule_start(fn, s);
}

/* --- the plain kinds' arithmetic, PyTorch's operation by operation ------------------------------- */

/* How many milestones equal e (MultiStepLR's Counter), or are <= e (its bisect). */
static int milestones_at(const mx_schedule *s, int64_t e, bool up_to) {
  int k = 0;
  for (int i = 0; i < s->n_milestones; i++) k += up_to ? s->milestones[i] <= e : s->milestones[i] == e;
  return k;
}

/* get_lr: group g's next lr from its lr now, at the new last_epoch e. */
static double chainable(const mx_schedule *s, int g, int64_t e, double lr) {
  double start = s->start_factor, end = s->end_factor, t = (double)s->t_max;
  switch (s->kind) {
  case MX__STEP_LR:
    return e == 0 || e % s->step_size != 0 ? lr : lr * s->gamma;
  case MX__MULTISTEP_LR: {
    int k = milestones_at(s, e, false);
    return k == 0 ? lr : lr * pow(s->gamma, k);
  }
  case MX__EXPONENTIAL_LR:
    return e == 0 ? lr : lr * s->gamma;
  case MX__COSINE_LR:
    if (e == 0) return lr;
    if ((e - 1 - s->t_max) % (2 * s->t_max) == 0) /* at a trough: the step back up */
      return lr + (s->base_lrs[g] - s->eta_min) * (1 - cos(M_PI / t)) / 2;
    return (1 + cos(M_PI * (double)e / t)) / (1 + cos(M_PI * (double)(e - 1) / t)) * (lr - s->eta_min) + s->eta_min;
  case MX__LINEAR_LR:
    if (e == 0) return lr * start;
    if (e > s->total_iters) return lr;
    return lr * (1. + (end - start) / ((double)s->total_iters * start + (double)(e - 1) * (end - start)));
  default:
    return lr; /* the other kinds have their own steps */
  }
}

/* _get_closed_form_lr: group g's lr at last_epoch e from its base lr. */
static double closed_form(const mx_schedule *s, int g, int64_t e) {
  double base = s->base_lrs[g], start = s->start_factor, end = s->end_factor;
  switch (s->kind) {
  case MX__STEP_LR:
    return base * pow(s->gamma, (double)(e / s->step_size));
  case MX__MULTISTEP_LR:
    return base * pow(s->gamma, milestones_at(s, e, true));
  case MX__EXPONENTIAL_LR:
    return base * pow(s->gamma, (double)e);
  case MX__COSINE_LR:
    return s->eta_min + (base - s->eta_min) * (1 + cos(M_PI * (double)e / (double)s->t_max)) / 2;
  case MX__LINEAR_LR:
    return base * (start + (end - start) * (double)(e < s->total_iters ? e : s->total_iters) / (double)s->total_iters);
  default:
    return base;
  }
}

/* --- steps ---------------------------------------------------------------------------------------- */

mx_status mx__schedule_check_groups(const char *fn, const mx_schedule *s) {
  int n = mx_optimizer_num_groups(s->opt);
  if (n == s->n_groups) return MX_OK;
  return mx__error(MX_STATE_ERROR, "%s: the optimizer has %d groups but this %s was made for %d", fn, n,
                   mx__schedule_names[s->kind], s->n_groups);
}

mx_status mx__schedule_apply(const char *fn, mx_schedule *s, const double *lrs, const double *momentums) {
  for (int g = 0; g < s->n_groups; g++)
    if (!(lrs[g] >= 0))
      return mx__error(MX_INVALID_ARGUMENT, "%s: this %s computed the lr %g for group %d; an lr must be >= 0", fn,
                       mx__schedule_names[s->kind], lrs[g], g);
  for (int g = 0; g < s->n_groups; g++) {
    mx_optimizer_set_lr(s->opt, g, lrs[g]);
    s->last_lrs[g] = lrs[g];
    if (!momentums) continue;
    if (mx_optimizer_set_momentum(s->opt, g, momentums[g]) != MX_OK) return mx__error_prefix(fn);
    s->cycle.last_momentums[g] = momentums[g];
  }
  return MX_OK;
}

mx_status mx__schedule_step_plain(const char *fn, mx_schedule *s, bool restart) {
  if (mx__schedule_check_groups(fn, s) != MX_OK) return MX_STATE_ERROR;
  int n = s->n_groups;
  double *lrs = malloc(sizeof *lrs * (size_t)(2 * n + 1)), *momentums = lrs + n;
  if (!lrs) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
  int64_t e = restart ? 0 : s->last_epoch + 1;
  mx_status status = MX_OK;
  bool cycles = s->kind == MX__ONE_CYCLE_LR;
  if (cycles)
    status = mx__one_cycle_values(fn, s, e, lrs, momentums);
  else
    for (int g = 0; g < n; g++)
      lrs[g] = restart ? closed_form(s, g, e) : chainable(s, g, e, mx_optimizer_lr(s->opt, g));
  if (status == MX_OK) status = mx__schedule_apply(fn, s, lrs, cycles && s->cycle.cycle_momentum ? momentums : NULL);
  if (status == MX_OK) s->last_epoch = e;
  free(lrs);
  return status;
}

mx_status mx_schedule_step(mx_schedule *s) {
  const char *fn = "mx_schedule_step";
  if (!s) return mx__null_input(fn, "s");
  if (s->kind == MX__CHAINED || s->kind == MX__SEQUENTIAL) return mx__schedule_step_chain(fn, s);
  return mx__schedule_step_plain(fn, s, false);
}

/* --- read-outs ------------------------------------------------------------------------------------ */

const char *mx_schedule_name(const mx_schedule *s) {
  if (!s) {
    mx__null_input("mx_schedule_name", "s");
    return NULL;
  }
  return mx__schedule_names[s->kind];
}

int64_t mx_schedule_last_epoch(const mx_schedule *s) {
  if (!s) {
    mx__null_input("mx_schedule_last_epoch", "s");
    return -1;
  }
  return s->last_epoch;
}

/* s's list at group, or NAN with the error set. */
static double group_value(const char *fn, const mx_schedule *s, const double *list, int group) {
  if (!s) {
    mx__null_input(fn, "s");
    return NAN;
  }
  if (group < 0 || group >= s->n_groups) {
    mx__error(MX_INDEX_ERROR, "%s: group %d is out of range (the %s has %d)", fn, group, mx__schedule_names[s->kind],
              s->n_groups);
    return NAN;
  }
  return list[group];
}

double mx_schedule_base_lr(const mx_schedule *s, int group) {
  return group_value("mx_schedule_base_lr", s, s ? s->base_lrs : NULL, group);
}

double mx_schedule_get_last_lr(const mx_schedule *s, int group) {
  return group_value("mx_schedule_get_last_lr", s, s ? s->last_lrs : NULL, group);
}
