/* Learning-rate schedules: PyTorch 1.13's torch.optim.lr_scheduler, each
 * setting the lr of every group of an optimizer once per mx_schedule_step.
 *
 *     mx_schedule *parts[] = {mx_linear_lr_new(opt, 0.1, 1.0, 5),        // warm-up
 *                             mx_cosine_annealing_lr_new(opt, 95, 1e-5)};
 *     mx_schedule *s = mx_sequential_lr_new(opt, 2, parts, (int64_t[]){5});
 *     for (int epoch = 0; epoch < 100; epoch++) {
 *       train_one_epoch(opt);            // mx_optimizer_step inside
 *       mx_schedule_step(s);
 *     }
 *     mx_schedule_free(s);               // and the schedules it took
 *
 * As in PyTorch, making a schedule takes its first step (last_epoch 0: a
 * warm-up's lr is already lowered), each group's lr when the first schedule
 * was made on it is the group's initial lr (mx_optimizer_initial_lr: a
 * schedule's base lrs), and each step works on the lr the group has now
 * (the recursive, "chainable" forms of PyTorch's get_lr, operation by
 * operation), so schedules made on one optimizer compose: stepped together
 * by mx_chained_schedule_new, or one after another by mx_sequential_lr_new.
 * A schedule borrows its optimizer, which must outlive it.
 *
 * For checkpoints the state of a schedule is a list of doubles
 * (mx_schedule_state_get/_set): its kind, last_epoch, the number of groups
 * G, its G base lrs, the G lrs it set last, for OneCycleLR with
 * cycle_momentum the G momentums it set last, and for a ChainedScheduler or
 * SequentialLR the number of its schedules followed by each one's state.
 * Setting it on a schedule made the same way (on an optimizer with the same
 * groups) continues the very same sequence, and gives the optimizer back the
 * lrs (and momentums) of the moment the state was read.
 */
#ifndef MX_OPTIM_SCHEDULE_H
#define MX_OPTIM_SCHEDULE_H

#include "optim/optimizer.h"

MX_API_BEGIN

typedef struct mx_schedule mx_schedule;

/* StepLR: lr * gamma every step_size steps. */
mx_schedule *mx_step_lr_new(mx_optimizer *opt, int64_t step_size, double gamma);
/* MultiStepLR: lr * gamma at each milestone (a milestone listed k times:
 * gamma^k), in any order. */
mx_schedule *mx_multistep_lr_new(mx_optimizer *opt, int n_milestones, const int64_t *milestones, double gamma);
/* ExponentialLR: lr * gamma every step. */
mx_schedule *mx_exponential_lr_new(mx_optimizer *opt, double gamma);
/* CosineAnnealingLR: from the base lr down to eta_min over t_max steps
 * along a cosine, and back up over the next t_max (SGDR without restarts). */
mx_schedule *mx_cosine_annealing_lr_new(mx_optimizer *opt, int64_t t_max, double eta_min);
/* LinearLR: the lr times a factor going linearly from start_factor (in
 * (0, 1]) to end_factor (in [0, 1]) over total_iters steps: a warm-up. */
mx_schedule *mx_linear_lr_new(mx_optimizer *opt, double start_factor, double end_factor, int64_t total_iters);

/* OneCycleLR: from max_lr / div_factor up to max_lr over pct_start of
 * total_steps, then down to max_lr / div_factor / final_div_factor (with
 * three_phase: back to the start first, then down). With cycle_momentum,
 * SGD's momentum or Adam's beta1 goes the opposite way between
 * max_momentum and base_momentum. Stepping past total_steps is an error. */
typedef enum { MX_ANNEAL_COS, MX_ANNEAL_LINEAR } mx_anneal_strategy;
typedef struct {
  double max_lr;         /* the peak lr of every group ... */
  const double *max_lrs; /* ... or one per group (NULL: max_lr for all) */
  int64_t total_steps;
  double pct_start;
  mx_anneal_strategy anneal_strategy;
  bool cycle_momentum;
  double base_momentum, max_momentum; /* in [0, 1) */
  double div_factor, final_div_factor;
  bool three_phase;
} mx_one_cycle_opts;
/* PyTorch's defaults: pct_start 0.3, cos, cycle_momentum, momentum 0.85 to
 * 0.95, div_factor 25, final_div_factor 1e4, two phases. */
mx_one_cycle_opts mx_one_cycle_defaults(double max_lr, int64_t total_steps);
mx_schedule *mx_one_cycle_lr_new(mx_optimizer *opt, const mx_one_cycle_opts *opts);

/* ChainedScheduler: each step steps all n schedules (made on one optimizer,
 * in this order). SequentialLR: schedules[i] runs from milestones[i - 1]
 * (non-decreasing, n - 1 of them) on, restarted there at its step 0; the
 * lrs start again from the groups' initial lrs. On success the new schedule
 * owns the n schedules (mx_schedule_free frees them); on failure they stay
 * the caller's. SequentialLR takes the plain schedules above only. */
mx_schedule *mx_chained_schedule_new(int n, mx_schedule *const *schedules);
mx_schedule *mx_sequential_lr_new(mx_optimizer *opt, int n, mx_schedule *const *schedules, const int64_t *milestones);

/* One step: sets the lr (and momentum) of every group. On failure (a step
 * past OneCycleLR's total_steps, an optimizer whose groups changed) nothing
 * changes. */
mx_status mx_schedule_step(mx_schedule *s);
void mx_schedule_free(mx_schedule *s);

/* PyTorch's class name: "StepLR", ..., "ChainedScheduler", "SequentialLR". */
const char *mx_schedule_name(const mx_schedule *s);
/* The steps taken since the schedule was made (0 right after). */
int64_t mx_schedule_last_epoch(const mx_schedule *s);
double mx_schedule_base_lr(const mx_schedule *s, int group);
/* The lr the schedule (or, for a chain, its last step) set on the group. */
double mx_schedule_get_last_lr(const mx_schedule *s, int group);

/* The number of doubles in the state, or -1 with the error set. */
int mx_schedule_state_size(const mx_schedule *s);
/* Writes the state into state[0 .. size) (n: the room there). */
mx_status mx_schedule_state_get(const mx_schedule *s, double *state, int n);
/* Checks the whole state first: on failure nothing changes. */
mx_status mx_schedule_state_set(mx_schedule *s, const double *state, int n);

MX_API_END

#endif
