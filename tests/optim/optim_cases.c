/* The optimizer tests' shared pieces: reading tests/fixtures/optim_fixtures.txt, replaying its problem, snapshots. */
#include "optim_cases.h"

#include "autograd/node.h" /* gradients are set directly: the gradients of sum(p * g) */

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- the problem: initial values and per-step gradients ------------------------------------------------- */

static fx_tensor init[OC_PARAMS], grads[OC_STEPS][OC_PARAMS];
static bool problem_loaded;

static void load_problem(void) {
  if (problem_loaded) return;
  char *buf = fx_read_file(OC_FIXTURES);
  cr_assert_not_null(buf, "cannot read %s (run tests/fixtures/make_optim_fixtures.py)", OC_FIXTURES);
  char *lines = NULL;
  for (char *line = strtok_r(buf, "\n", &lines); line; line = strtok_r(NULL, "\n", &lines)) {
    char *save = NULL, *tok = strtok_r(line, " ", &save);
    fx_tensor *t = NULL;
    if (!strcmp(tok, "init")) {
      t = &init[atoi(strtok_r(NULL, " ", &save))];
    } else if (!strcmp(tok, "grad")) {
      int step = atoi(strtok_r(NULL, " ", &save));
      t = &grads[step][atoi(strtok_r(NULL, " ", &save))];
    }
    if (t) cr_assert(fx_parse_tensor(&save, t, FX_DTYPE(MX_F64)), "bad line in %s", OC_FIXTURES);
  }
  free(buf);
  for (int k = 0; k < OC_PARAMS; k++) cr_assert_not_null(init[k].v, "%s has no init %d", OC_FIXTURES, k);
  for (int s = 0; s < OC_STEPS; s++)
    for (int k = 0; k < OC_PARAMS; k++) cr_assert_not_null(grads[s][k].v, "%s has no grad %d %d", OC_FIXTURES, s, k);
  problem_loaded = true;
}

/* A CPU tensor of dtype with the fixture's values (rounded once from float64), in the current scope. */
static mx_tensor *tensor_of(const fx_tensor *t, mx_dtype dtype) {
  return mx_to_dtype(mx_from_data(t->v, t->shape, MX_F64, MX_CPU), dtype);
}

void oc_params(mx_dtype dtype, mx_tensor *params[OC_PARAMS]) { oc_params_on(dtype, MX_CPU, params); }

void oc_params_on(mx_dtype dtype, mx_device device, mx_tensor *params[OC_PARAMS]) {
  load_problem();
  for (int k = 0; k < OC_PARAMS; k++) {
    mx_scope *s = mx_scope_begin();
    params[k] = mx_keep(mx_to_device(tensor_of(&init[k], dtype), device));
    mx_scope_end(s);
    cr_assert_not_null(params[k], "%s", mx_last_error());
    cr_assert_eq(mx_set_requires_grad(params[k], true), MX_OK, "%s", mx_last_error());
  }
}

void oc_set_grads(mx_tensor *const params[OC_PARAMS], int step, double scale, const oc_case *c) {
  load_problem();
  for (int k = 0; k < OC_PARAMS; k++) {
    mx_zero_grad(params[k]);
    if (c && c->nograd[k][step]) continue;
    mx_scope *s = mx_scope_begin();
    mx_tensor *g = mx_mul_scalar(tensor_of(&grads[step][k], mx_dtype_of(params[k])), scale);
    g = mx_to_device(g, mx_device_of(params[k])); /* computed on the CPU: CUDA has few ops yet */
    cr_assert_not_null(g, "%s", mx_last_error());
    mx__meta_of(params[k])->grad = mx__retain(g); /* what mx_backward would leave */
    mx_scope_end(s);
  }
}

/* --- cases ---------------------------------------------------------------------------------------------- */

static bool parse_header(void *arg, const char *line) {
  oc_case *c = arg;
  char kind[16], dtype[8];
  if (sscanf(line, "case %63s %15s %7s", c->id, kind, dtype) != 3) return false;
  c->kind = !strcmp(kind, "sgd") ? OC_SGD : !strcmp(kind, "adam") ? OC_ADAM : OC_ADAMW;
  c->dtype = !strcmp(dtype, "f64") ? MX_F64 : MX_F32;
  return true;
}

/* One name=value option into both option structs of group g. */
static bool parse_option(oc_case *c, int g, const char *name, double v) {
  mx_sgd_opts *s = &c->sgd[g];
  mx_adam_opts *a = &c->adam[g];
  if (!strcmp(name, "lr")) s->lr = a->lr = v;
  else if (!strcmp(name, "weight_decay")) s->weight_decay = a->weight_decay = v;
  else if (!strcmp(name, "maximize")) s->maximize = a->maximize = v != 0;
  else if (!strcmp(name, "momentum")) s->momentum = v;
  else if (!strcmp(name, "dampening")) s->dampening = v;
  else if (!strcmp(name, "nesterov")) s->nesterov = v != 0;
  else if (!strcmp(name, "beta1")) a->beta1 = v;
  else if (!strcmp(name, "beta2")) a->beta2 = v;
  else if (!strcmp(name, "eps")) a->eps = v;
  else if (!strcmp(name, "amsgrad")) a->amsgrad = v != 0;
  else return false;
  return true;
}

static bool parse_line(void *arg, char *line) {
  oc_case *c = arg;
  char *save = NULL, *tok = strtok_r(line, " ", &save);
  if (!strcmp(tok, "group")) {
    if (c->n_groups == OC_MAX_GROUPS) return false;
    int g = c->n_groups++;
    c->first[g] = atoi(strtok_r(NULL, " ", &save));
    c->count[g] = atoi(strtok_r(NULL, " ", &save));
    c->sgd[g] = mx_sgd_defaults();
    c->adam[g] = c->kind == OC_ADAMW ? mx_adamw_defaults() : mx_adam_defaults();
    while ((tok = strtok_r(NULL, " ", &save))) {
      char *eq = strchr(tok, '=');
      if (!eq) return false;
      *eq = '\0';
      if (!parse_option(c, g, tok, strtod(eq + 1, NULL))) return false;
    }
    return true;
  }
  if (!strcmp(tok, "nograd")) {
    int k = atoi(strtok_r(NULL, " ", &save));
    while ((tok = strtok_r(NULL, " ", &save))) c->nograd[k][atoi(tok)] = true;
    return true;
  }
  if (!strcmp(tok, "result")) {
    int k = atoi(strtok_r(NULL, " ", &save));
    return k >= 0 && k < OC_PARAMS && fx_parse_tensor(&save, &c->result[k], FX_DTYPE(MX_F32) | FX_DTYPE(MX_F64));
  }
  return false;
}

int oc_count(void) { return fx_count_cases(OC_FIXTURES); }

bool oc_load(int k, oc_case *c) {
  memset(c, 0, sizeof *c);
  return fx_load_case(OC_FIXTURES, k, c, parse_header, parse_line) && c->result[0].v && c->result[1].v;
}

bool oc_find(const char *id, oc_case *c) {
  memset(c, 0, sizeof *c);
  for (int k = 0, n = oc_count(); k < n; k++) {
    if (oc_load(k, c) && !strcmp(c->id, id)) return true;
    oc_free(c);
  }
  return false;
}

void oc_free(oc_case *c) {
  for (int k = 0; k < OC_PARAMS; k++) free(c->result[k].v);
  memset(c, 0, sizeof *c);
}

mx_optimizer *oc_optimizer(const oc_case *c, mx_tensor *const params[OC_PARAMS]) {
  mx_tensor *const *first = params + c->first[0];
  int n = c->count[0];
  mx_optimizer *opt = c->kind == OC_SGD    ? mx_sgd_new(n, first, &c->sgd[0])
                      : c->kind == OC_ADAM ? mx_adam_new(n, first, &c->adam[0])
                                           : mx_adamw_new(n, first, &c->adam[0]);
  cr_assert_not_null(opt, "%s: %s", c->id, mx_last_error());
  for (int g = 1; g < c->n_groups; g++) {
    first = params + c->first[g];
    mx_status status = c->kind == OC_SGD ? mx_sgd_add_group(opt, c->count[g], first, &c->sgd[g])
                                         : mx_adam_add_group(opt, c->count[g], first, &c->adam[g]);
    cr_assert_eq(status, MX_OK, "%s: %s", c->id, mx_last_error());
  }
  return opt;
}

void oc_run(mx_optimizer *opt, mx_tensor *const params[OC_PARAMS], const oc_case *c, int from, int to) {
  for (int step = from; step < to; step++) {
    oc_set_grads(params, step, 1.0, c);
    cr_assert_eq(mx_optimizer_step(opt), MX_OK, "%s: step %d: %s", c->id, step, mx_last_error());
  }
}

void oc_expect_results(const oc_case *c, mx_tensor *const params[OC_PARAMS]) {
  double rtol = c->dtype == MX_F64 ? 1e-12 : 1e-6;
  for (int k = 0; k < OC_PARAMS; k++) {
    const fx_tensor *want = &c->result[k];
    cr_assert_eq(mx_numel(params[k]), want->n, "%s: p%d has %lld elements", c->id, k, (long long)mx_numel(params[k]));
    mx_scope *s = mx_scope_begin();
    double got[want->n];
    cr_assert_eq(mx_to_host(mx_to_dtype(params[k], MX_F64), got, sizeof got), MX_OK, "%s", mx_last_error());
    mx_scope_end(s);
    int wrong = 0;
    for (int64_t i = 0; i < want->n; i++) {
      bool ok = fabs(got[i] - want->v[i]) <= rtol * fabs(want->v[i]);
      if (!ok && wrong++ < 4)
        cr_expect(ok, "%s: p%d[%lld] is %.9g, PyTorch %.9g", c->id, k, (long long)i, got[i], want->v[i]);
    }
    cr_expect_eq(wrong, 0, "%s: %d of %lld values of p%d differ from PyTorch", c->id, wrong, (long long)want->n, k);
  }
}

void oc_replay(int k, mx_device device) {
  cr_assert_geq(k, 0, "cannot read %s (run tests/fixtures/make_optim_fixtures.py)", OC_FIXTURES);
  oc_case c;
  cr_assert(oc_load(k, &c), "case %d of %s does not parse", k, OC_FIXTURES);
  mx_tensor *params[OC_PARAMS];
  oc_params_on(c.dtype, device, params);
  mx_optimizer *opt = oc_optimizer(&c, params);
  oc_run(opt, params, &c, 0, OC_STEPS);
  oc_expect_results(&c, params);
  mx_optimizer_free(opt);
  for (int i = 0; i < OC_PARAMS; i++) mx_release(params[i]);
  oc_free(&c);
}

/* --- snapshots ------------------------------------------------------------------------------------------ */

static void append(oc_snapshot *s, const mx_tensor *t) {
  size_t bytes = (size_t)mx_numel(t) * mx_dtype_size(mx_dtype_of(t));
  s->bytes = realloc(s->bytes, s->n + bytes);
  cr_assert_eq(mx_to_host(t, s->bytes + s->n, bytes), MX_OK, "%s", mx_last_error());
  s->n += bytes;
}

oc_snapshot oc_snapshot_take(const mx_optimizer *opt) {
  static const char *const names[] = {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"};
  oc_snapshot s = {0, NULL};
  mx_scope *scope = mx_scope_begin();
  for (int i = 0; i < mx_optimizer_num_params(opt); i++) {
    append(&s, mx_optimizer_param(opt, i));
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
      mx_tensor *state = mx_optimizer_state(opt, i, names[k]);
      if (state) append(&s, state);
      mx_clear_error(); /* state the optimizer does not keep */
    }
  }
  mx_scope_end(scope);
  return s;
}

void oc_snapshot_free(oc_snapshot *s) {
  free(s->bytes);
  s->bytes = NULL;
  s->n = 0;
}
