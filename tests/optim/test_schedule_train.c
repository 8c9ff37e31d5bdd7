/* Schedules, momentum cycling and clipping inside a training loop, against PyTorch 1.13
 * (tests/fixtures/schedule_train_fixtures.txt): the parameters after 20 steps of clip, optimizer step and
 * schedule step, so each lr and momentum a schedule sets is the one the update uses. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "../ops/fixture_io.h"

#define TR_FIXTURES MX_FIXTURES_DIR "/schedule_train_fixtures.txt"
#define TR_PARAMS 2
#define TR_STEPS 20

typedef struct {
  char id[32];
  fx_tensor init[TR_PARAMS], grad[TR_STEPS][TR_PARAMS], result[TR_PARAMS];
} tr_case;

typedef struct {
  const char *want;
  tr_case *c;
} loading;

static bool header(void *arg, const char *line) {
  loading *l = arg;
  int steps;
  memset(l->c, 0, sizeof *l->c);
  return sscanf(line, "case %31s %d", l->c->id, &steps) == 2 && steps == TR_STEPS && !strcmp(l->c->id, l->want);
}

static bool body(void *arg, char *line) {
  tr_case *c = ((loading *)arg)->c;
  char *save = NULL, *tag = strtok_r(line, " ", &save), *tok;
  int step = 0;
  if (tag && !strcmp(tag, "grad")) {
    if (!(tok = strtok_r(NULL, " ", &save)) || (step = atoi(tok)) < 0 || step >= TR_STEPS) return false;
  }
  if (!tag || !(tok = strtok_r(NULL, " ", &save))) return false;
  int k = atoi(tok);
  if (k < 0 || k >= TR_PARAMS) return false;
  fx_tensor *t = !strcmp(tag, "init") ? &c->init[k] : !strcmp(tag, "result") ? &c->result[k] : &c->grad[step][k];
  return fx_parse_tensor(&save, t, FX_DTYPE(MX_F64));
}

static void case_free(tr_case *c) {
  for (int k = 0; k < TR_PARAMS; k++) {
    free(c->init[k].v);
    free(c->result[k].v);
    for (int s = 0; s < TR_STEPS; s++) free(c->grad[s][k].v);
  }
}

/* --- the cases, as the fixture script makes them --------------------------------------------------------- */

typedef struct {
  mx_optimizer *opt;
  mx_schedule *schedule;
} tr_loop;

static mx_optimizer *sgd(mx_tensor **params, double momentum, bool nesterov) {
  mx_sgd_opts o = mx_sgd_defaults();
  o.lr = 0.1, o.momentum = momentum, o.nesterov = nesterov;
  mx_optimizer *opt = mx_sgd_new(1, params, &o);
  o.lr = 0.05;
  cr_assert(opt && mx_sgd_add_group(opt, 1, params + 1, &o) == MX_OK, "%s", mx_last_error());
  return opt;
}

static mx_optimizer *adam(mx_tensor **params, bool w, double lr0, double lr1) {
  mx_adam_opts o = w ? mx_adamw_defaults() : mx_adam_defaults();
  o.lr = lr0;
  if (w) o.weight_decay = 0.1;
  mx_optimizer *opt = w ? mx_adamw_new(1, params, &o) : mx_adam_new(1, params, &o);
  o.lr = lr1;
  cr_assert(opt && mx_adam_add_group(opt, 1, params + 1, &o) == MX_OK, "%s", mx_last_error());
  return opt;
}

static tr_loop make_loop(const char *id, mx_tensor **params) {
  tr_loop l = {0};
  if (!strcmp(id, "sgd_one_cycle")) {
    l.opt = sgd(params, 0, false); /* no momentum: OneCycleLR gives it one */
    mx_one_cycle_opts o = mx_one_cycle_defaults(0, TR_STEPS);
    o.max_lrs = (const double[]){0.5, 0.2};
    l.schedule = mx_one_cycle_lr_new(l.opt, &o);
  } else if (!strcmp(id, "adam_one_cycle")) {
    l.opt = adam(params, false, 0.01, 0.02);
    mx_one_cycle_opts o = mx_one_cycle_defaults(0.05, TR_STEPS);
    o.pct_start = 0.25, o.anneal_strategy = MX_ANNEAL_LINEAR, o.three_phase = true;
    l.schedule = mx_one_cycle_lr_new(l.opt, &o);
  } else if (!strcmp(id, "adamw_chain")) {
    l.opt = adam(params, true, 0.01, 0.03);
    mx_schedule *parts[] = {mx_linear_lr_new(l.opt, 0.1, 1.0, 6), mx_cosine_annealing_lr_new(l.opt, 8, 0.001)};
    l.schedule = mx_chained_schedule_new(2, parts);
  } else {
    l.opt = sgd(params, 0.9, true);
    mx_schedule *parts[] = {mx_linear_lr_new(l.opt, 0.2, 1.0, 5), mx_step_lr_new(l.opt, 4, 0.5)};
    l.schedule = mx_sequential_lr_new(l.opt, 2, parts, (const int64_t[]){5});
  }
  cr_assert_not_null(l.schedule, "%s: %s", id, mx_last_error());
  return l;
}

static mx_status clip(const char *id, const mx_optimizer *opt) {
  if (!strcmp(id, "sgd_one_cycle")) return mx_clip_grad_norm_optimizer(opt, 1.0, 2.0, false, NULL);
  if (!strcmp(id, "adam_one_cycle")) return mx_clip_grad_norm_optimizer(opt, 0.5, INFINITY, false, NULL);
  if (!strcmp(id, "adamw_chain")) return mx_clip_grad_value_optimizer(opt, 0.3);
  return mx_clip_grad_norm_optimizer(opt, 2.0, 1.0, false, NULL);
}

/* --- the test ----------------------------------------------------------------------------------------------- */

typedef struct {
  char id[32];
} case_id;

ParameterizedTestParameters(schedule_train, matches_pytorch) {
  static case_id ids[] = {{"sgd_one_cycle"}, {"adam_one_cycle"}, {"adamw_chain"}, {"sgd_sequential"}};
  return cr_make_param_array(case_id, ids, sizeof ids / sizeof *ids);
}

ParameterizedTest(case_id *id, schedule_train, matches_pytorch) {
  tr_case *c = malloc(sizeof *c);
  loading l = {id->id, c};
  bool found = false;
  for (int k = 0; k < fx_count_cases(TR_FIXTURES) && !found; k++)
    found = fx_load_case(TR_FIXTURES, k, &l, header, body);
  cr_assert(found, "%s has no case %s", TR_FIXTURES, id->id);
  mx_tensor *params[TR_PARAMS];
  for (int k = 0; k < TR_PARAMS; k++) {
    params[k] = mx_from_data(c->init[k].v, c->init[k].shape, MX_F64, MX_CPU);
    cr_assert_eq(mx_set_requires_grad(params[k], true), MX_OK, "%s", mx_last_error());
  }
  tr_loop loop = make_loop(id->id, params);
  for (int step = 0; step < TR_STEPS; step++) {
    mx_scope *s = mx_scope_begin();
    for (int k = 0; k < TR_PARAMS; k++) { /* the gradient of sum(p * g) is g */
      mx_zero_grad(params[k]);
      mx_tensor *g = mx_from_data(c->grad[step][k].v, c->grad[step][k].shape, MX_F64, MX_CPU);
      cr_assert_eq(mx_backward(mx_sum(mx_mul(params[k], g), MX_ALL_DIMS, false), NULL, false), MX_OK, "%s",
                   mx_last_error());
    }
    mx_scope_end(s);
    cr_assert_eq(clip(id->id, loop.opt), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_optimizer_step(loop.opt), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_schedule_step(loop.schedule), MX_OK, "%s", mx_last_error());
  }
  for (int k = 0; k < TR_PARAMS; k++) {
    double got[16];
    cr_assert_eq(mx_to_host(params[k], got, sizeof *got * (size_t)c->result[k].n), MX_OK, "%s", mx_last_error());
    for (int64_t i = 0; i < c->result[k].n; i++) {
      double want = c->result[k].v[i];
      cr_expect(fabs(got[i] - want) <= 1e-12 * fmax(1, fabs(want)),
                "%s: parameter %d element %lld is %.17g, PyTorch's %.17g", id->id, k, (long long)i, got[i], want);
    }
  }
  mx_schedule_free(loop.schedule);
  mx_optimizer_free(loop.opt);
  for (int k = 0; k < TR_PARAMS; k++) mx_release(params[k]);
  case_free(c);
  free(c);
}
