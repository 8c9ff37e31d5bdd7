/* The LR schedule cases: reading tests/fixtures/schedule_fixtures.txt, and making each case's optimizer and
 * schedule the way tests/fixtures/make_schedule_fixtures.py makes PyTorch's. */
#include "schedule_cases.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/fixture_io.h"

/* --- the fixture file ------------------------------------------------------------------------------------ */

typedef struct {
  const char *want;
  sc_case *c;
} loading;

static bool header(void *arg, const char *line) {
  loading *l = arg;
  char id[sizeof l->c->id];
  int steps;
  if (sscanf(line, "case %47s %d", id, &steps) != 2 || strcmp(id, l->want) != 0) return false;
  if (steps < 1 || steps > SC_MAX_STEPS) return false;
  memset(l->c, 0, sizeof *l->c);
  strcpy(l->c->id, id);
  l->c->steps = steps;
  return true;
}

static bool body(void *arg, char *line) {
  sc_case *c = ((loading *)arg)->c;
  char *save = NULL, *tag = strtok_r(line, " ", &save), *tok = strtok_r(NULL, " ", &save);
  if (!tag || !tok) return false;
  int g = atoi(tok);
  if (g < 0 || g >= SC_GROUPS) return false;
  bool momentum = !strcmp(tag, "momentum");
  if (!momentum && strcmp(tag, "lr") != 0) return false;
  c->has_momentum |= momentum;
  double *values = momentum ? c->momentum[g] : c->lr[g];
  for (int k = 0; k <= c->steps; k++) {
    if (!(tok = strtok_r(NULL, " ", &save))) return false;
    values[k] = strtod(tok, NULL);
  }
  return strtok_r(NULL, " ", &save) == NULL;
}

bool sc_load(const char *id, sc_case *c) {
  int n = fx_count_cases(SC_FIXTURES);
  loading l = {id, c};
  for (int k = 0; k < n; k++)
    if (fx_load_case(SC_FIXTURES, k, &l, header, body)) return true;
  return false;
}

int sc_count(void) { return fx_count_cases(SC_FIXTURES); }

bool sc_close(double got, double want) {
  if (isnan(want) || isinf(want)) return isnan(want) ? isnan(got) : got == want;
  return fabs(got - want) <= SC_RTOL * fabs(want);
}

/* --- the cases' optimizers and schedules ---------------------------------------------------------------- */

void sc_build_optimizer(const char *kind, sc_setup *s) {
  memset(s, 0, sizeof *s);
  const double lrs[SC_GROUPS] = {0.1, 0.0375};
  for (int g = 0; g < SC_GROUPS; g++) {
    s->params[g] = mx_zeros(MX_SHAPE(3), MX_F32, MX_CPU);
    cr_assert_not_null(s->params[g], "%s", mx_last_error());
    cr_assert_eq(mx_set_requires_grad(s->params[g], true), MX_OK, "%s", mx_last_error());
  }
  if (!strcmp(kind, "sgd")) {
    mx_sgd_opts o = mx_sgd_defaults();
    o.momentum = 0.9;
    o.lr = lrs[0];
    s->opt = mx_sgd_new(1, s->params, &o);
    o.lr = lrs[1];
    cr_assert_not_null(s->opt, "%s", mx_last_error());
    cr_assert_eq(mx_sgd_add_group(s->opt, 1, s->params + 1, &o), MX_OK, "%s", mx_last_error());
  } else {
    mx_adam_opts o = mx_adam_defaults();
    o.lr = lrs[0];
    s->opt = mx_adam_new(1, s->params, &o);
    o.lr = lrs[1];
    cr_assert_not_null(s->opt, "%s", mx_last_error());
    cr_assert_eq(mx_adam_add_group(s->opt, 1, s->params + 1, &o), MX_OK, "%s", mx_last_error());
  }
}

void sc_teardown(sc_setup *s) {
  mx_schedule_free(s->schedule);
  mx_optimizer_free(s->opt);
  for (int g = 0; g < SC_GROUPS; g++) mx_release(s->params[g]);
  memset(s, 0, sizeof *s);
}

static mx_schedule *one_cycle(mx_optimizer *opt, const char *id) {
  if (!strcmp(id, "one_cycle_cos_sgd")) {
    static const double max_lrs[SC_GROUPS] = {0.4, 0.1};
    mx_one_cycle_opts o = mx_one_cycle_defaults(0, 60);
    o.max_lrs = max_lrs;
    o.pct_start = 0.25;
    o.base_momentum = 0.8;
    o.max_momentum = 0.93;
    o.div_factor = 20;
    o.final_div_factor = 500;
    return mx_one_cycle_lr_new(opt, &o);
  }
  if (!strcmp(id, "one_cycle_linear_three_phase_adam")) {
    static const double max_lrs[SC_GROUPS] = {0.01, 0.003};
    mx_one_cycle_opts o = mx_one_cycle_defaults(0, 80);
    o.max_lrs = max_lrs;
    o.anneal_strategy = MX_ANNEAL_LINEAR;
    o.three_phase = true;
    return mx_one_cycle_lr_new(opt, &o);
  }
  if (!strcmp(id, "one_cycle_cos_three_phase_sgd")) {
    mx_one_cycle_opts o = mx_one_cycle_defaults(0.3, 64);
    o.pct_start = 0.2;
    o.three_phase = true;
    return mx_one_cycle_lr_new(opt, &o);
  }
  mx_one_cycle_opts o = mx_one_cycle_defaults(0.2, 55); /* one_cycle_no_momentum */
  o.cycle_momentum = false;
  return mx_one_cycle_lr_new(opt, &o);
}

static mx_schedule *chained(mx_optimizer *opt) {
  mx_schedule *parts[] = {mx_linear_lr_new(opt, 0.2, 1.0, 10), mx_cosine_annealing_lr_new(opt, 25, 0.001),
                          mx_multistep_lr_new(opt, 2, (const int64_t[]){20, 45}, 0.5)};
  return mx_chained_schedule_new(3, parts);
}

static mx_schedule *sequential(mx_optimizer *opt) {
  mx_schedule *parts[] = {mx_linear_lr_new(opt, 0.1, 1.0, 8), mx_cosine_annealing_lr_new(opt, 30, 0.001),
                          mx_exponential_lr_new(opt, 0.9)};
  return mx_sequential_lr_new(opt, 3, parts, (const int64_t[]){8, 40});
}

static mx_schedule *chain_with_sequential(mx_optimizer *opt) {
  mx_schedule *inner_parts[] = {mx_linear_lr_new(opt, 0.5, 1.0, 5), mx_step_lr_new(opt, 6, 0.7)};
  mx_schedule *inner = mx_sequential_lr_new(opt, 2, inner_parts, (const int64_t[]){5});
  mx_schedule *parts[] = {inner, mx_exponential_lr_new(opt, 0.98)};
  return mx_chained_schedule_new(2, parts);
}

const char *const sc_known[] = {"step",
                                "multistep",
                                "exponential",
                                "cosine",
                                "cosine_to_zero",
                                "linear_warmup",
                                "linear_decay",
                                "one_cycle_cos_sgd",
                                "one_cycle_linear_three_phase_adam",
                                "one_cycle_cos_three_phase_sgd",
                                "one_cycle_no_momentum",
                                "chain",
                                "sequential",
                                "chain_with_sequential"};
const int sc_n_known = sizeof sc_known / sizeof *sc_known;

static bool uses_adam(const char *id) {
  static const char *const adam[] = {"exponential", "cosine_to_zero", "linear_warmup",
                                     "one_cycle_linear_three_phase_adam", "sequential"};
  for (size_t k = 0; k < sizeof adam / sizeof *adam; k++)
    if (!strcmp(id, adam[k])) return true;
  return false;
}

static mx_schedule *schedule_of(mx_optimizer *opt, const char *id) {
  if (!strcmp(id, "step")) return mx_step_lr_new(opt, 7, 0.5);
  if (!strcmp(id, "multistep")) return mx_multistep_lr_new(opt, 5, (const int64_t[]){30, 5, 12, 12, 41}, 0.3);
  if (!strcmp(id, "exponential")) return mx_exponential_lr_new(opt, 0.93);
  if (!strcmp(id, "cosine")) return mx_cosine_annealing_lr_new(opt, 13, 0.002);
  if (!strcmp(id, "cosine_to_zero")) return mx_cosine_annealing_lr_new(opt, 20, 0);
  if (!strcmp(id, "linear_warmup")) return mx_linear_lr_new(opt, 0.25, 0.9, 17);
  if (!strcmp(id, "linear_decay")) return mx_linear_lr_new(opt, 1.0, 0.05, 45);
  if (!strncmp(id, "one_cycle", 9)) return one_cycle(opt, id);
  if (!strcmp(id, "chain")) return chained(opt);
  if (!strcmp(id, "sequential")) return sequential(opt);
  if (!strcmp(id, "chain_with_sequential")) return chain_with_sequential(opt);
  cr_assert_fail("no schedule is known for the case %s", id);
  return NULL;
}

void sc_build(const char *id, sc_setup *s) {
  sc_build_optimizer(uses_adam(id) ? "adam" : "sgd", s);
  s->schedule = schedule_of(s->opt, id);
  cr_assert_not_null(s->schedule, "%s: %s", id, mx_last_error());
}
