/* A schedule's state as a list of doubles, for checkpoints: reading it, and setting it (checked whole first). */
#include <math.h>
#include <stdlib.h>

#include "optim/schedule_impl.h"

/* kind, last_epoch, G, G base lrs, G last lrs, [G momentums], [number of schedules, their states] */
static bool has_momentums(const mx_schedule *s) { return s->kind == MX__ONE_CYCLE_LR && s->cycle.cycle_momentum; }
static bool has_children(const mx_schedule *s) { return s->kind == MX__CHAINED || s->kind == MX__SEQUENTIAL; }

static int size_of(const mx_schedule *s) {
  int n = 3 + 2 * s->n_groups + (has_momentums(s) ? s->n_groups : 0) + (has_children(s) ? 1 : 0);
  for (int i = 0; i < s->n_children; i++) n += size_of(s->children[i]);
  return n;
}

int mx_schedule_state_size(const mx_schedule *s) {
  if (!s) {
    mx__null_input("mx_schedule_state_size", "s");
    return -1;
  }
  return size_of(s);
}

static void write_state(const mx_schedule *s, double *state, int *pos) {
  state[(*pos)++] = (double)s->kind;
  state[(*pos)++] = (double)s->last_epoch;
  state[(*pos)++] = (double)s->n_groups;
  for (int g = 0; g < s->n_groups; g++) state[(*pos)++] = s->base_lrs[g];
  for (int g = 0; g < s->n_groups; g++) state[(*pos)++] = s->last_lrs[g];
  if (has_momentums(s))
    for (int g = 0; g < s->n_groups; g++) state[(*pos)++] = s->cycle.last_momentums[g];
  if (has_children(s)) state[(*pos)++] = (double)s->n_children;
  for (int i = 0; i < s->n_children; i++) write_state(s->children[i], state, pos);
}

mx_status mx_schedule_state_get(const mx_schedule *s, double *state, int n) {
  const char *fn = "mx_schedule_state_get";
  if (!s) return mx__null_input(fn, "s");
  if (!state) return mx__null_input(fn, "state");
  int size = size_of(s);
  if (n < size)
    return mx__error(MX_INVALID_ARGUMENT, "%s: the state of this %s has %d values but there is room for %d", fn,
                     mx__schedule_names[s->kind], size, n);
  int pos = 0;
  write_state(s, state, &pos);
  return MX_OK;
}

/* Whether x is a whole number in [min, max]. */
static bool whole(double x, double min, double max) { return x >= min && x <= max && x == floor(x); }

/* Checks the part of state at *pos that s would take, moving *pos past it. */
static mx_status check_state(const char *fn, const mx_schedule *s, const double *state, int *pos) {
  const char *name = mx__schedule_names[s->kind];
  double kind = state[*pos], last_epoch = state[*pos + 1], groups = state[*pos + 2];
  if (kind != (double)s->kind) {
    if (whole(kind, 0, MX__N_SCHEDULE_KINDS - 1))
      return mx__error(MX_INVALID_ARGUMENT, "%s: the state is %s's, not this %s's", fn, mx__schedule_names[(int)kind],
                       name);
    return mx__error(MX_INVALID_ARGUMENT, "%s: the state is not a schedule's (its kind is %g)", fn, kind);
  }
  if (s->kind == MX__ONE_CYCLE_LR && !whole(last_epoch, -1, (double)s->cycle.total_steps))
    return mx__error(MX_INVALID_ARGUMENT, "%s: last_epoch %g is not a whole number in [-1, %lld] for this %s", fn,
                     last_epoch, (long long)s->cycle.total_steps, name);
  if (!whole(last_epoch, -1, 9007199254740992.0)) /* 2^53, below which doubles count exactly */
    return mx__error(MX_INVALID_ARGUMENT, "%s: last_epoch %g is not a whole number >= -1 for this %s", fn, last_epoch,
                     name);
  if (groups != s->n_groups)
    return mx__error(MX_INVALID_ARGUMENT, "%s: the state is for %g groups but this %s has %d", fn, groups, name,
                     s->n_groups);
  *pos += 3;
  for (int k = 0; k < 2 * s->n_groups; k++, (*pos)++)
    if (!(state[*pos] >= 0 && isfinite(state[*pos])))
      return mx__error(MX_INVALID_ARGUMENT, "%s: the %s lr of group %d is %g; it must be finite and >= 0", fn,
                       k < s->n_groups ? "base" : "last", k % s->n_groups, state[*pos]);
  if (has_momentums(s))
    for (int g = 0; g < s->n_groups; g++, (*pos)++)
      if (!(state[*pos] >= 0 && state[*pos] < 1))
        return mx__error(MX_INVALID_ARGUMENT, "%s: the momentum of group %d is %g; it must be in [0, 1)", fn, g,
                         state[*pos]);
  if (!has_children(s)) return MX_OK;
  if (state[*pos] != s->n_children)
    return mx__error(MX_INVALID_ARGUMENT, "%s: the state holds %g schedules but this %s has %d", fn, state[*pos], name,
                     s->n_children);
  (*pos)++;
  for (int i = 0; i < s->n_children; i++)
    if (check_state(fn, s->children[i], state, pos) != MX_OK) return MX_INVALID_ARGUMENT;
  return MX_OK;
}

/* Takes the (checked) state at *pos; the optimizer gets the lrs (and momentums) back, a chain's after its
 * schedules'. */
static mx_status read_state(const char *fn, mx_schedule *s, const double *state, int *pos) {
  s->last_epoch = (int64_t)state[*pos + 1];
  *pos += 3;
  for (int g = 0; g < s->n_groups; g++) s->base_lrs[g] = state[(*pos)++];
  const double *lrs = state + *pos, *momentums = has_momentums(s) ? lrs + s->n_groups : NULL;
  *pos += s->n_groups + (momentums ? s->n_groups : 0) + (has_children(s) ? 1 : 0);
  for (int i = 0; i < s->n_children; i++)
    if (read_state(fn, s->children[i], state, pos) != MX_OK) return mx_last_status();
  return mx__schedule_apply(fn, s, lrs, momentums);
}

mx_status mx_schedule_state_set(mx_schedule *s, const double *state, int n) {
  const char *fn = "mx_schedule_state_set";
  if (!s) return mx__null_input(fn, "s");
  if (!state) return mx__null_input(fn, "state");
  int size = size_of(s);
  if (n != size)
    return mx__error(MX_INVALID_ARGUMENT, "%s: the state has %d values but this %s's has %d", fn, n,
                     mx__schedule_names[s->kind], size);
  if (mx__schedule_check_groups(fn, s) != MX_OK) return MX_STATE_ERROR;
  int pos = 0;
  if (check_state(fn, s, state, &pos) != MX_OK) return MX_INVALID_ARGUMENT;
  pos = 0;
  return read_state(fn, s, state, &pos);
}
