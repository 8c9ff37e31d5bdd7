/* Training checkpoints: the model, the optimizer, the GradScaler, the
 * generator, the LR schedule and the step and epoch in one safetensors file,
 * restored so that a run goes on bit for bit as if it had never stopped. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/checkpoint_internal.h"
#include "tensor/scope.h"

#define FORMAT "mixgrad.checkpoint.1" /* the metadata 'format' of every checkpoint */
#define SETTING "run."                  /* the prefix of the run settings' metadata keys */

static const char *const save_fn = "mx_checkpoint_save";
static const char *const load_fn = "mx_checkpoint_load";

/* --- saving -------------------------------------------------------------------------- */

/* The group's hyper-parameters by the names its type gives them (flags
 * as true or false), then its initial lr. */
static void add_group(mx__ckpt_writer *w, const mx_optimizer *opt, int g) {
  const mx_optimizer_type *type = mx_optimizer_type_of(opt);
  const double *h = mx_optimizer_hparams(opt, g);
  char key[96];
  for (int k = 0; k < type->n_hparams; k++) {
    snprintf(key, sizeof key, "optimizer.group.%d.%s", g, type->hparams[k].name);
    if (type->hparams[k].flag) mx__ckpt_add_meta(w, h[k] != 0 ? "true" : "false", "%s", key);
    else mx__ckpt_add_f64(w, key, h[k]);
  }
  snprintf(key, sizeof key, "optimizer.group.%d.initial_lr", g);
  mx__ckpt_add_f64(w, key, mx_optimizer_initial_lr(opt, g));
}

static void add_optimizer(mx__ckpt_writer *w, const mx_optimizer *opt) {
  mx__ckpt_add_meta(w, mx_optimizer_name(opt), "optimizer");
  mx__ckpt_add_i64(w, "optimizer.groups", mx_optimizer_num_groups(opt));
  mx__ckpt_add_i64(w, "optimizer.params", mx_optimizer_num_params(opt));
  for (int g = 0; g < mx_optimizer_num_groups(opt); g++) add_group(w, opt, g);
  for (int i = 0; i < mx_optimizer_num_params(opt); i++)
    for (int k = 0; k < mx_optimizer_num_states(opt, i); k++) {
      const char *name = mx_optimizer_state_name(opt, i, k);
      mx__ckpt_add_tensor(w, mx_optimizer_state(opt, i, name), true, "optimizer.%d.%s", i, name);
    }
}

static mx_status add_scaler(mx__ckpt_writer *w, const mx_scaler *s) {
  mx_scaler_state st;
  if (mx_scaler_state_dict(s, &st) != MX_OK) return mx__error_prefix(save_fn);
  mx__ckpt_add_meta(w, st.present ? "enabled" : "disabled", "scaler");
  if (!st.present) return MX_OK;
  mx__ckpt_add_f64(w, "scaler.scale", st.scale);
  mx__ckpt_add_f64(w, "scaler.growth_factor", st.growth_factor);
  mx__ckpt_add_f64(w, "scaler.backoff_factor", st.backoff_factor);
  mx__ckpt_add_i64(w, "scaler.growth_interval", st.growth_interval);
  mx__ckpt_add_i64(w, "scaler.growth_tracker", st.growth_tracker);
  return MX_OK;
}

static mx_status add_schedule(mx__ckpt_writer *w, const mx_schedule *s) {
  int n = mx_schedule_state_size(s);
  double *state = n >= 0 ? malloc(sizeof *state * ((size_t)n + 1)) : NULL;
  mx_tensor *t = state && mx_schedule_state_get(s, state, n) == MX_OK
                     ? mx_from_data(state, MX_SHAPE(n), MX_F64, MX_CPU)
                     : NULL;
  if (n >= 0 && !state) mx__error(MX_OUT_OF_MEMORY, "out of memory");
  free(state);
  if (!t) return mx__error_prefix(save_fn);
  mx__ckpt_add_tensor(w, t, true, "schedule.state");
  mx__ckpt_add_meta(w, mx_schedule_name(s), "schedule");
  return MX_OK;
}

/* The run settings, checked first: keys present, non-empty and distinct, values present. */
static mx_status check_settings(const mx_checkpoint_settings *s) {
  static const char *const fn = "mx_checkpoint_save_with_settings";
  if (s->n < 0 || (s->n > 0 && (!s->keys || !s->values)))
    return mx__error(MX_INVALID_ARGUMENT, "%s: settings: %d settings with keys %s and values %s", fn, s->n,
                     s->keys ? "given" : "NULL", s->values ? "given" : "NULL");
  for (int i = 0; i < s->n; i++) {
    if (!s->keys[i] || !*s->keys[i] || !s->values[i])
      return mx__error(MX_INVALID_ARGUMENT, "%s: settings: setting %d has %s", fn, i,
                       !s->keys[i] ? "a NULL key" : !*s->keys[i] ? "an empty key" : "a NULL value");
    for (int k = 0; k < i; k++)
      if (!strcmp(s->keys[k], s->keys[i]))
        return mx__error(MX_INVALID_ARGUMENT, "%s: settings: settings %d and %d have the same key '%s'",
                         fn, k, i, s->keys[i]);
  }
  return MX_OK;
}

mx_status mx_checkpoint_save(const char *path, const mx_checkpoint *ck) {
  return mx_checkpoint_save_with_settings(path, ck, NULL);
}

mx_status mx_checkpoint_save_with_settings(const char *path, const mx_checkpoint *ck,
                                           const mx_checkpoint_settings *settings) {
  if (!path || !ck) return mx__null_input(save_fn, path ? "ckpt" : "path");
  if (!ck->model) return mx__null_input(save_fn, "ckpt->model");
  if (settings && check_settings(settings) != MX_OK) return mx_last_status();
  mx__ckpt_writer w = {0};
  uint64_t seed, offset;
  mx_generator_get_state(ck->generator, &seed, &offset);
  char text[32];
  mx__ckpt_add_meta(&w, FORMAT, "format");
  mx__ckpt_add_i64(&w, "step", ck->step);
  mx__ckpt_add_i64(&w, "epoch", ck->epoch);
  snprintf(text, sizeof text, "%" PRIu64, seed);
  mx__ckpt_add_meta(&w, text, "rng.seed");
  snprintf(text, sizeof text, "%" PRIu64, offset);
  mx__ckpt_add_meta(&w, text, "rng.offset");
  for (int i = 0; settings && i < settings->n; i++)
    mx__ckpt_add_meta(&w, settings->values[i], SETTING "%s", settings->keys[i]);
  mx_status status = mx__ckpt_add_module(save_fn, &w, ck->model, "model.");
  if (status == MX_OK && ck->optimizer) add_optimizer(&w, ck->optimizer);
  if (status == MX_OK && ck->scaler) status = add_scaler(&w, ck->scaler);
  if (status == MX_OK && ck->schedule) status = add_schedule(&w, ck->schedule);
  if (status == MX_OK) status = mx__ckpt_write(save_fn, &w, path);
  mx__ckpt_writer_free(&w);
  return status;
}

/* --- reading and checking ------------------------------------------------------------ */

/* Everything a load will set, read and checked before anything changes. */
typedef struct {
  int64_t step, epoch;
  uint64_t seed, offset;
  int n_groups, n_hparams;
  double *hparams; /* n_groups x n_hparams, in the optimizer type's order */
  double *initial_lr;
  mx_scaler_state scaler;
  const mx_tensor *schedule; /* the file's schedule.state */
} plan;

static void plan_free(plan *p) {
  free(p->hparams);
  free(p->initial_lr);
}

static mx_status read_group(mx__ckpt_reader *r, const mx_optimizer *opt, int g, plan *p) {
  const mx_optimizer_type *type = mx_optimizer_type_of(opt);
  double *h = p->hparams + (size_t)g * (size_t)p->n_hparams;
  char key[96];
  mx_status st = MX_OK;
  for (int k = 0; k < type->n_hparams && st == MX_OK; k++) {
    snprintf(key, sizeof key, "optimizer.group.%d.%s", g, type->hparams[k].name);
    bool flag = false;
    st = type->hparams[k].flag ? mx__ckpt_bool(r, key, &flag) : mx__ckpt_f64(r, key, &h[k]);
    if (type->hparams[k].flag) h[k] = flag;
  }
  snprintf(key, sizeof key, "optimizer.group.%d.initial_lr", g);
  return st == MX_OK ? mx__ckpt_f64(r, key, &p->initial_lr[g]) : st;
}

static mx_status read_optimizer(mx__ckpt_reader *r, const mx_optimizer *opt, plan *p) {
  const char *kind = mx__ckpt_meta(r, "optimizer");
  if (!kind) return mx_last_status();
  if (strcmp(kind, mx_optimizer_name(opt)))
    return mx__error(MX_INVALID_ARGUMENT, "%s: %s: the file's optimizer is %s but the one given is %s", r->fn,
                     r->path, kind, mx_optimizer_name(opt));
  int64_t groups, params;
  if (mx__ckpt_i64(r, "optimizer.groups", &groups) || mx__ckpt_i64(r, "optimizer.params", &params))
    return mx_last_status();
  if (groups != mx_optimizer_num_groups(opt) || params != mx_optimizer_num_params(opt))
    return mx__error(MX_INVALID_ARGUMENT, "%s: %s: the file's optimizer has %" PRId64 " groups of %" PRId64
                     " parameters but the one given %d of %d", r->fn, r->path, groups, params,
                     mx_optimizer_num_groups(opt), mx_optimizer_num_params(opt));
  p->n_groups = (int)groups;
  p->n_hparams = mx_optimizer_type_of(opt)->n_hparams;
  p->hparams = calloc((size_t)groups * (size_t)p->n_hparams, sizeof *p->hparams);
  p->initial_lr = calloc((size_t)groups, sizeof *p->initial_lr);
  if (!p->hparams || !p->initial_lr) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", r->fn);
  for (int g = 0; g < p->n_groups; g++)
    if (read_group(r, opt, g, p) != MX_OK) return mx_last_status();
  return MX_OK;
}

static mx_status read_scaler(mx__ckpt_reader *r, plan *p) {
  const char *v = mx__ckpt_meta(r, "scaler");
  if (!v) return mx_last_status();
  if (strcmp(v, "enabled") && strcmp(v, "disabled"))
    return mx__error(MX_CORRUPT_DATA, "%s: %s: metadata 'scaler' is '%s', not enabled or disabled", r->fn, r->path,
                     v);
  mx_scaler_state *s = &p->scaler;
  if (!(s->present = !strcmp(v, "enabled"))) return MX_OK;
  mx_status st = mx__ckpt_f64(r, "scaler.scale", &s->scale);
  if (st == MX_OK) st = mx__ckpt_f64(r, "scaler.growth_factor", &s->growth_factor);
  if (st == MX_OK) st = mx__ckpt_f64(r, "scaler.backoff_factor", &s->backoff_factor);
  if (st == MX_OK) st = mx__ckpt_i64(r, "scaler.growth_interval", &s->growth_interval);
  if (st == MX_OK) st = mx__ckpt_i64(r, "scaler.growth_tracker", &s->growth_tracker);
  return st;
}

static mx_status read_schedule(mx__ckpt_reader *r, const mx_schedule *s, plan *p) {
  const char *kind = mx__ckpt_meta(r, "schedule");
  if (!kind) return mx_last_status();
  if (strcmp(kind, mx_schedule_name(s)))
    return mx__error(MX_INVALID_ARGUMENT, "%s: %s: the file's schedule is %s but the one given is %s", r->fn, r->path,
                     kind, mx_schedule_name(s));
  int i = mx_safetensors_find(r->file, "schedule.state");
  if (i < 0) return mx__error(MX_CORRUPT_DATA, "%s: %s: missing tensor 'schedule.state'", r->fn, r->path);
  p->schedule = mx_safetensors_tensor(r->file, i);
  if (mx_dtype_of(p->schedule) != MX_F64 || mx_ndim(p->schedule) != 1)
    return mx__error(MX_CORRUPT_DATA, "%s: %s: tensor 'schedule.state' is %s with %d dims; it must be a float64 "
                     "list", r->fn, r->path, mx_dtype_name(mx_dtype_of(p->schedule)), mx_ndim(p->schedule));
  r->used[i] = true;
  return MX_OK;
}

/* The file's metadata 'format' says it is a training checkpoint. */
static mx_status check_format(mx__ckpt_reader *r) {
  const char *format = mx_safetensors_metadata(r->file, "format");
  if (format && !strcmp(format, FORMAT)) return MX_OK;
  return mx__error(MX_INVALID_ARGUMENT, "%s: %s: not a training checkpoint (its metadata 'format' is %s%s%s, not "
                   "'" FORMAT "')", r->fn, r->path, format ? "'" : "", format ? format : "missing",
                   format ? "'" : "");
}

static mx_status read_plan(mx__ckpt_reader *r, const mx_checkpoint *ck, plan *p) {
  if (check_format(r) != MX_OK) return mx_last_status();
  mx_status st = mx__ckpt_i64(r, "step", &p->step);
  if (st == MX_OK) st = mx__ckpt_i64(r, "epoch", &p->epoch);
  if (st == MX_OK) st = mx__ckpt_u64(r, "rng.seed", &p->seed);
  if (st == MX_OK) st = mx__ckpt_u64(r, "rng.offset", &p->offset);
  if (st == MX_OK) st = mx__ckpt_check_module(r, ck->model, "model.");
  if (st == MX_OK && ck->optimizer) st = read_optimizer(r, ck->optimizer, p);
  if (st == MX_OK && ck->scaler) st = read_scaler(r, p);
  if (st == MX_OK && ck->schedule) st = read_schedule(r, ck->schedule, p);
  return st;
}

/* --- restoring ----------------------------------------------------------------------- */

/* Sets the hyper-parameters of groups [0, n) from p (undoing a change:
 * these were valid, so nothing fails; an initial lr of NAN stays unset). */
static void put_groups(mx_optimizer *opt, const plan *p, int n) {
  for (int g = 0; g < n; g++) {
    mx_optimizer_set_hparams(opt, g, p->hparams + (size_t)g * (size_t)p->n_hparams);
    if (!isnan(p->initial_lr[g])) mx_optimizer_set_initial_lr(opt, g, p->initial_lr[g]);
  }
}

/* The error a call made while restoring from the file at path has set,
 * prefixed with the load, the file and what (NULL: nothing more). */
static mx_status restore_error(const char *path, const char *what) {
  char prefix[4200];
  snprintf(prefix, sizeof prefix, "%s: %s%s%s", load_fn, path, what ? ": " : "", what ? what : "");
  return mx__error_prefix(prefix);
}

/* Sets every group's hyper-parameters from p, keeping the old ones in old;
 * on failure the groups are put back. */
static mx_status set_groups(mx_optimizer *opt, const plan *p, plan *old, const char *path) {
  size_t n = (size_t)p->n_hparams;
  for (int g = 0; g < p->n_groups; g++) {
    memcpy(old->hparams + (size_t)g * n, mx_optimizer_hparams(opt, g), sizeof *old->hparams * n);
    old->initial_lr[g] = mx_optimizer_initial_lr(opt, g);
  }
  for (int g = 0; g < p->n_groups; g++) {
    mx_status st = mx_optimizer_set_hparams(opt, g, p->hparams + (size_t)g * n);
    if (st == MX_OK && !isnan(p->initial_lr[g])) st = mx_optimizer_set_initial_lr(opt, g, p->initial_lr[g]);
    if (st != MX_OK) {
      char what[32];
      snprintf(what, sizeof what, "optimizer group %d", g);
      restore_error(path, what);
      put_groups(opt, old, g + 1);
      return st;
    }
  }
  return MX_OK;
}

/* The schedule's state from the file; the old one in *old (malloc'ed) for undo. */
static mx_status set_schedule(mx_schedule *s, const mx_tensor *state, double **old, int *n_old, const char *path) {
  *n_old = mx_schedule_state_size(s);
  if (*n_old < 0) return restore_error(path, NULL);
  if (!(*old = malloc(sizeof **old * ((size_t)*n_old + 1))))
    return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", load_fn);
  if (mx_schedule_state_get(s, *old, *n_old) != MX_OK ||
      mx_schedule_state_set(s, mx_data_ptr(state), (int)mx_numel(state)) != MX_OK)
    return restore_error(path, NULL);
  return MX_OK;
}

/* Each of the optimizer's state tensors and its entry in the file: checked
 * to be there, shaped as the optimizer keeps it (copy false), or, once
 * everything is checked, copied in (copy true). */
static mx_status each_optimizer_state(mx__ckpt_reader *r, mx_optimizer *opt, bool copy) {
  for (int i = 0; i < mx_optimizer_num_params(opt); i++) {
    for (int k = 0; k < mx_optimizer_num_states(opt, i); k++) {
      char name[96];
      snprintf(name, sizeof name, "optimizer.%d.%s", i, mx_optimizer_state_name(opt, i, k));
      mx_tensor *state = mx_optimizer_state(opt, i, mx_optimizer_state_name(opt, i, k));
      mx_status st;
      if (!copy) st = mx__ckpt_tensor(r, name, state, "the optimizer") ? MX_OK : mx_last_status();
      else if (mx_copy_(state, mx_safetensors_get(r->file, name)) != MX_OK) st = restore_error(r->path, name);
      else st = MX_OK;
      mx_release(state);
      if (st != MX_OK) return st;
    }
  }
  return MX_OK;
}

/* Restores everything in p; what fails before the copies is undone. */
static mx_status restore(mx__ckpt_reader *r, mx_checkpoint *ck, const plan *p) {
  size_t groups = (size_t)p->n_groups + 1;
  plan old = {.n_groups = p->n_groups, .n_hparams = p->n_hparams,
              .hparams = calloc(groups * (size_t)(p->n_hparams + 1), sizeof *old.hparams),
              .initial_lr = calloc(groups, sizeof *old.initial_lr)};
  double *old_schedule = NULL;
  int n_old_schedule = 0;
  const char *ignored[2];
  int n_ignored = 0;
  if (!ck->optimizer) ignored[n_ignored++] = "optimizer.";
  if (!ck->schedule) ignored[n_ignored++] = "schedule.";
  mx_status st = old.hparams && old.initial_lr ? MX_OK : mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", load_fn);
  bool groups_set = false, schedule_set = false;
  if (st == MX_OK && ck->optimizer && (st = set_groups(ck->optimizer, p, &old, r->path)) == MX_OK) {
    groups_set = true;
    st = each_optimizer_state(r, ck->optimizer, false); /* the state kept follows the hyper-parameters */
  }
  if (st == MX_OK) st = mx__ckpt_check_unused(r, n_ignored, ignored);
  if (st == MX_OK && ck->schedule) {
    st = set_schedule(ck->schedule, p->schedule, &old_schedule, &n_old_schedule, r->path);
    schedule_set = st == MX_OK;
  }
  /* the scaler checks the whole state before it changes anything */
  if (st == MX_OK && ck->scaler && mx_scaler_load_state_dict(ck->scaler, &p->scaler) != MX_OK)
    st = restore_error(r->path, NULL);
  if (st != MX_OK) { /* undo, newest first */
    if (schedule_set) mx_schedule_state_set(ck->schedule, old_schedule, n_old_schedule);
    if (groups_set) put_groups(ck->optimizer, &old, p->n_groups);
  }
  free(old_schedule);
  plan_free(&old);
  if (st != MX_OK) return st;
  st = mx__ckpt_copy_module(r, ck->model, "model.");
  if (st == MX_OK && ck->optimizer) st = each_optimizer_state(r, ck->optimizer, true);
  if (st != MX_OK) return st;
  mx_generator_set_state(ck->generator, p->seed, p->offset);
  ck->step = p->step;
  ck->epoch = p->epoch;
  return MX_OK;
}

mx_status mx_checkpoint_load(const char *path, mx_checkpoint *ck) {
  if (!path || !ck) return mx__null_input(load_fn, path ? "ckpt" : "path");
  if (!ck->model) return mx__null_input(load_fn, "ckpt->model");
  mx__ckpt_reader r;
  if (mx__ckpt_open(&r, load_fn, path) != MX_OK) return mx_last_status();
  plan p = {0};
  mx_status st = read_plan(&r, ck, &p);
  if (st == MX_OK) st = restore(&r, ck, &p);
  plan_free(&p);
  mx__ckpt_close(&r);
  return st;
}

/* --- the run's settings -------------------------------------------------------------- */

void mx_checkpoint_settings_free(mx_checkpoint_settings *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) {
    if (s->keys) free((char *)s->keys[i]);
    if (s->values) free((char *)s->values[i]);
  }
  free(s->keys);
  free(s->values);
  *s = (mx_checkpoint_settings){0};
}

mx_status mx_checkpoint_settings_read(const char *path, mx_checkpoint_settings *out) {
  static const char *const fn = "mx_checkpoint_settings_read";
  if (!path || !out) return mx__null_input(fn, path ? "out" : "path");
  *out = (mx_checkpoint_settings){0};
  mx__ckpt_reader r;
  if (mx__ckpt_open(&r, fn, path) != MX_OK) return mx_last_status();
  mx_status st = check_format(&r);
  int n = mx_safetensors_metadata_count(r.file);
  if (st == MX_OK) {
    out->keys = calloc((size_t)n + 1, sizeof *out->keys);
    out->values = calloc((size_t)n + 1, sizeof *out->values);
    if (!out->keys || !out->values) st = mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
  }
  for (int i = 0; i < n && st == MX_OK; i++) {
    const char *key = mx_safetensors_metadata_key(r.file, i);
    if (strncmp(key, SETTING, strlen(SETTING)) != 0) continue;
    char *k = strdup(key + strlen(SETTING)), *v = strdup(mx_safetensors_metadata_value(r.file, i));
    if (k && v) out->keys[out->n] = k, out->values[out->n++] = v;
    else free(k), free(v), st = mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
  }
  mx__ckpt_close(&r);
  if (st != MX_OK) mx_checkpoint_settings_free(out);
  return st;
}
