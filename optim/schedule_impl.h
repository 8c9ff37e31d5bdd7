/* The inside of an LR schedule, shared by optim/schedule*.c (not installed). */
#ifndef MX_OPTIM_SCHEDULE_IMPL_H
#define MX_OPTIM_SCHEDULE_IMPL_H

#include "kernels/base_internal.h"
#include "optim/schedule.h"

/* The kinds, in the order of their names (mx__schedule_names); a state's
 * first value is its kind's index here. */
typedef enum {
  MX__STEP_LR,
  MX__MULTISTEP_LR,
  MX__EXPONENTIAL_LR,
  MX__COSINE_LR,
  MX__LINEAR_LR,
  MX__ONE_CYCLE_LR,
  MX__CHAINED,
  MX__SEQUENTIAL,
  MX__N_SCHEDULE_KINDS
} mx__schedule_kind;

extern const char *const mx__schedule_names[MX__N_SCHEDULE_KINDS];

/* OneCycleLR's phases: the step each ends at, and where lr and momentum
 * go from and to (indices into mx__one_cycle's lr and momentum lists). */
enum { MX__CYCLE_INITIAL, MX__CYCLE_MAX, MX__CYCLE_MIN };
enum { MX__MOMENTUM_MAX, MX__MOMENTUM_BASE };
typedef struct {
  double end_step;
  int start_lr, end_lr, start_momentum, end_momentum;
} mx__cycle_phase;

typedef struct {
  int64_t total_steps;
  mx_anneal_strategy anneal;
  bool cycle_momentum;
  double momentum[2]; /* max_momentum, base_momentum */
  int n_phases;
  mx__cycle_phase phases[3];
  double *max_lrs, *min_lrs; /* per group; the initial lrs are the base lrs */
  double *last_momentums;    /* per group, what the last step set (cycle_momentum) */
} mx__one_cycle;

struct mx_schedule {
  mx__schedule_kind kind;
  mx_optimizer *opt;
  mx_schedule *parent; /* the chain that owns it, or NULL */
  int n_groups;
  int64_t last_epoch;
  double *base_lrs, *last_lrs; /* per group */
  /* the plain kinds' settings */
  int64_t step_size, t_max, total_iters;
  double gamma, eta_min, start_factor, end_factor;
  int n_milestones;
  int64_t *milestones; /* MultiStepLR's, SequentialLR's */
  mx__one_cycle cycle;
  int n_children;
  mx_schedule **children; /* ChainedScheduler's, SequentialLR's */
};

/* A zeroed schedule of kind on opt with its per-group lists, whose base lrs
 * are the groups' initial lrs (which it sets from the lrs where none is
 * set yet, as PyTorch's setdefault('initial_lr', lr) does); NULL with the
 * error set. */
mx_schedule *mx__schedule_new(const char *fn, mx__schedule_kind kind, mx_optimizer *opt);
/* Takes the first step (last_epoch -1 to 0); frees s and returns NULL on failure. */
mx_schedule *mx__schedule_start(const char *fn, mx_schedule *s);
/* A plain schedule's step: the next one, or (restart) step 0 by the closed
 * form, as PyTorch's step(0) does. */
mx_status mx__schedule_step_plain(const char *fn, mx_schedule *s, bool restart);
/* An error unless the optimizer still has the schedule's groups. */
mx_status mx__schedule_check_groups(const char *fn, const mx_schedule *s);
/* Sets the groups' lrs (and, if not NULL, momentums) and records them. */
mx_status mx__schedule_apply(const char *fn, mx_schedule *s, const double *lrs, const double *momentums);
/* An error unless x is finite and >= min (and <= max when max is finite). */
mx_status mx__schedule_check_range(const char *fn, const char *name, double x, double min, double max);

/* OneCycleLR's lr and momentum of every group at step last_epoch. */
mx_status mx__one_cycle_values(const char *fn, const mx_schedule *s, int64_t last_epoch, double *lrs,
                               double *momentums);
/* A ChainedScheduler's or SequentialLR's step. */
mx_status mx__schedule_step_chain(const char *fn, mx_schedule *s);

#endif
