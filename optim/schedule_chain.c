/* Schedules of schedules: ChainedScheduler (all stepped together) and SequentialLR (one after another,
 * each restarted at its milestone), as PyTorch 1.13 runs them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/schedule_impl.h"

static bool is_plain(const mx_schedule *s) { return s->kind != MX__CHAINED && s->kind != MX__SEQUENTIAL; }

/* Checks the n schedules a new chain of kind would own: each once, free, on opt (NULL: on schedules[0]'s
 * optimizer), made for its groups, and plain for a SequentialLR. */
static mx_status check_children(const char *fn, mx__schedule_kind kind, const mx_optimizer *opt, int n,
                                mx_schedule *const *schedules) {
  if (!schedules) return mx__null_input(fn, "schedules");
  if (n < 1)
    return mx__error(MX_INVALID_ARGUMENT, "%s: n is %d; a %s needs at least one schedule", fn, n,
                     mx__schedule_names[kind]);
  for (int i = 0; i < n; i++) {
    const mx_schedule *s = schedules[i];
    if (!s) {
      char arg[32];
      snprintf(arg, sizeof arg, "schedules[%d]", i);
      return mx__null_input(fn, arg);
    }
    if (s->parent)
      return mx__error(MX_INVALID_ARGUMENT, "%s: schedules[%d] already belongs to a %s", fn, i,
                       mx__schedule_names[s->parent->kind]);
    if (s->opt != (opt ? opt : schedules[0]->opt))
      return mx__error(MX_INVALID_ARGUMENT, "%s: schedules[%d] works on another optimizer than %s", fn, i,
                       opt ? "opt" : "schedules[0]");
    if (kind == MX__SEQUENTIAL && !is_plain(s))
      return mx__error(MX_INVALID_ARGUMENT, "%s: schedules[%d] is a %s; SequentialLR takes plain schedules", fn, i,
                       mx__schedule_names[s->kind]);
    for (int j = 0; j < i; j++)
      if (schedules[j] == s)
        return mx__error(MX_INVALID_ARGUMENT, "%s: schedules[%d] appears twice (it is already schedules[%d])", fn, i,
                         j);
    if (mx__schedule_check_groups(fn, s) != MX_OK) return MX_STATE_ERROR;
  }
  return MX_OK;
}

/* A new chain of kind owning the n (checked) schedules; NULL with the error set. */
static mx_schedule *chain_new(const char *fn, mx__schedule_kind kind, mx_optimizer *opt, int n,
                              mx_schedule *const *schedules) {
  mx_schedule *s = mx__schedule_new(fn, kind, opt);
  if (!s) return NULL;
  if (!(s->children = malloc(sizeof *s->children * (size_t)n))) {
    mx_schedule_free(s);
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
    return NULL;
  }
  for (int i = 0; i < n; i++) {
    s->children[i] = schedules[i];
    s->children[i]->parent = s;
  }
  s->n_children = n;
  s->last_epoch = 0;
  return s;
}

mx_schedule *mx_chained_schedule_new(int n, mx_schedule *const *schedules) {
  const char *fn = "mx_chained_schedule_new";
  if (check_children(fn, MX__CHAINED, NULL, n, schedules) != MX_OK) return NULL;
  mx_schedule *s = chain_new(fn, MX__CHAINED, schedules[0]->opt, n, schedules);
  if (s)
    for (int g = 0; g < s->n_groups; g++) s->last_lrs[g] = mx_optimizer_lr(s->opt, g);
  return s;
}

mx_schedule *mx_sequential_lr_new(mx_optimizer *opt, int n, mx_schedule *const *schedules, const int64_t *milestones) {
  const char *fn = "mx_sequential_lr_new";
  if (!opt) {
    mx__null_input(fn, "opt");
    return NULL;
  }
  if (check_children(fn, MX__SEQUENTIAL, opt, n, schedules) != MX_OK) return NULL;
  if (n > 1 && !milestones) {
    mx__null_input(fn, "milestones");
    return NULL;
  }
  for (int i = 1; i < n - 1; i++)
    if (milestones[i] < milestones[i - 1]) {
      mx__error(MX_INVALID_ARGUMENT, "%s: milestones[%d] is %lld, below milestones[%d] = %lld", fn, i,
                (long long)milestones[i], i - 1, (long long)milestones[i - 1]);
      return NULL;
    }
  int64_t *copy = n > 1 ? malloc(sizeof *copy * (size_t)(n - 1)) : NULL;
  if (n > 1 && !copy) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
    return NULL;
  }
  mx_schedule *s = chain_new(fn, MX__SEQUENTIAL, opt, n, schedules);
  if (!s) {
    free(copy);
    return NULL;
  }
  if (n > 1) memcpy(copy, milestones, sizeof *copy * (size_t)(n - 1));
  s->milestones = copy;
  s->n_milestones = n - 1;
  /* back to the initial lrs, every schedule one step back, and the first one's first step again */
  for (int g = 0; g < s->n_groups; g++) mx_optimizer_set_lr(opt, g, s->base_lrs[g]);
  for (int i = 0; i < n; i++) s->children[i]->last_epoch--;
  if (mx__schedule_step_plain(fn, s->children[0], false) != MX_OK) {
    for (int i = 0; i < n; i++) {
      s->children[i]->parent = NULL;
      s->children[i]->last_epoch++;
    }
    s->n_children = 0; /* they stay the caller's */
    mx_schedule_free(s);
    return NULL;
  }
  memcpy(s->last_lrs, s->children[0]->last_lrs, sizeof *s->last_lrs * (size_t)s->n_groups);
  return s;
}

mx_status mx__schedule_step_chain(const char *fn, mx_schedule *s) {
  if (mx__schedule_check_groups(fn, s) != MX_OK) return MX_STATE_ERROR;
  const mx_schedule *last;
  if (s->kind == MX__CHAINED) {
    for (int i = 0; i < s->n_children; i++)
      if (mx_schedule_step(s->children[i]) != MX_OK) return mx_last_status();
    last = s->children[s->n_children - 1];
  } else {
    int64_t e = s->last_epoch + 1;
    int i = 0; /* bisect_right(milestones, e) */
    while (i < s->n_milestones && s->milestones[i] <= e) i++;
    mx_status status = mx__schedule_step_plain(fn, s->children[i], i > 0 && s->milestones[i - 1] == e);
    if (status != MX_OK) return status;
    last = s->children[i];
  }
  s->last_epoch++;
  memcpy(s->last_lrs, last->last_lrs, sizeof *s->last_lrs * (size_t)s->n_groups);
  return MX_OK;
}
