/* The GradScaler (torch.amp.GradScaler): scale, unscale, step, update,
 * and its state. Scale, growth tracker, found_inf flags and counters are
 * device tensors; only the calls that return a number read them back. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp_internal.h"
#include "kernels/cuda_graph.h"

typedef enum { READY, UNSCALED, STEPPED } opt_stage;

/* What the scaler knows of one optimizer (or, key == the scaler, of the
 * leaves of mx_scaler_backward) since the last update. */
typedef struct {
  const void *key;
  opt_stage stage;
  bool checked;         /* an inf check is recorded for the next update */
  bool read_clean;      /* mx_scaler_step's info has read this check's found_inf: 0 */
  mx_tensor *found_inf; /* float32 0-d, on the scale's device */
  mx_tensor *stats;     /* int64 (rows, 3): infs, NaNs, fp16-underflows of each gradient checked */
  int rows;
  /* The counts of the check before (int64 (spare_rows, 3)), which the next
   * check counts into: the reports read the last check's after the update,
   * so the update clears the other. *_clear: the last update's launch
   * zeroed it, and the next check need not (see clears_for). captured: a
   * check of this record was captured in a CUDA graph, whose replays
   * write stats and found_inf unseen by the host: from then on every
   * check fills them, in place, as the replays do. */
  mx_tensor *spare;
  int spare_rows;
  bool found_clear, spare_clear, captured;
  struct checked_row { int param; int64_t numel; } *row; /* what each row counted */
  int64_t values;    /* how many values the last check saw */
} opt_record;

struct mx_scaler {
  mx_scaler_opts o;
  double init_scale;
  int64_t init_tracker;
  mx_tensor *scale;    /* float32 0-d */
  mx_tensor *tracker;  /* int32 0-d: clean steps since the last growth or backoff */
  mx_tensor *counters; /* int64 (3): updates, skipped, consecutive skips */
  opt_record *records;
  int n_records;
  mx_amp_stats *stats; /* histograms of the unscale pass (amp/stats.h), or NULL */
};

void mx__scaler_watch(mx_scaler *s, mx_amp_stats *st) { s->stats = st; }
const mx_tensor *mx__scaler_counters(const mx_scaler *s) { return s->counters; }

/* A tensor the scaler owns (no scope's handle). */
static mx_tensor *owned(mx_tensor *t) {
  if (!t) return NULL;
  mx__retain(t);
  mx_release(t);
  return t;
}

static bool capturing(mx_device device) { return device == MX_CUDA && mx_cuda_graph_capturing(); }

static void drop(mx_tensor **t) {
  if (*t) mx__decref(*t);
  *t = NULL;
}

mx_scaler_opts mx_scaler_defaults(void) {
  return (mx_scaler_opts){.init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5,
                          .growth_interval = 2000, .enabled = true};
}

static mx_status check_growth(const char *fn, double v) {
  if (!(v > 1.0) || !isfinite(v))
    return mx__error(MX_INVALID_ARGUMENT, "%s: growth_factor must be a finite number > 1.0, got %g", fn, v);
  return MX_OK;
}

static mx_status check_backoff(const char *fn, double v) {
  if (!(v > 0.0 && v < 1.0))
    return mx__error(MX_INVALID_ARGUMENT, "%s: backoff_factor must be in (0, 1), got %g", fn, v);
  return MX_OK;
}

static mx_status check_interval(const char *fn, int64_t v) {
  if (v < 1 || v > INT32_MAX)
    return mx__error(MX_INVALID_ARGUMENT, "%s: growth_interval must be in [1, 2^31), got %lld", fn, (long long)v);
  return MX_OK;
}

static mx_status check_scale(const char *fn, const char *what, double v) {
  if (!(v > 0.0) || !isfinite(v))
    return mx__error(MX_INVALID_ARGUMENT, "%s: %s must be a finite number > 0, got %g", fn, what, v);
  return MX_OK;
}

static mx_status check_opts(const mx_scaler_opts *o) {
  const char *fn = "mx_scaler_new";
  mx_status status = check_scale(fn, "init_scale", o->init_scale);
  if (status == MX_OK) status = check_growth(fn, o->growth_factor);
  if (status == MX_OK) status = check_backoff(fn, o->backoff_factor);
  if (status == MX_OK) status = check_interval(fn, o->growth_interval);
  if (status == MX_OK && (o->min_scale < 0 || o->max_scale < 0 || o->max_consecutive_skips < 0))
    status = mx__error(MX_INVALID_ARGUMENT, "mx_scaler_new: min_scale %g, max_scale %g and "
                       "max_consecutive_skips %lld must not be negative (0 turns each off)",
                       o->min_scale, o->max_scale, (long long)o->max_consecutive_skips);
  if (status == MX_OK && o->min_scale > 0 && o->max_scale > 0 && o->min_scale > o->max_scale)
    status = mx__error(MX_INVALID_ARGUMENT, "mx_scaler_new: min_scale %g is above max_scale %g", o->min_scale,
                       o->max_scale);
  return status;
}

mx_scaler *mx_scaler_new(const mx_scaler_opts *opts) {
  mx_scaler_opts o = opts ? *opts : mx_scaler_defaults();
  if (o.enabled && check_opts(&o) != MX_OK) return NULL;
  mx_scaler *s = calloc(1, sizeof *s);
  if (!s) {
    mx__error(MX_OUT_OF_MEMORY, "mx_scaler_new: out of memory");
    return NULL;
  }
  s->o = o;
  s->init_scale = o.init_scale;
  return s;
}

static void free_record(opt_record *r) {
  drop(&r->found_inf);
  drop(&r->stats);
  drop(&r->spare);
  free(r->row);
}

void mx_scaler_free(mx_scaler *s) {
  if (!s) return;
  if (s->stats) mx__amp_stats_detach(s->stats);
  for (int i = 0; i < s->n_records; i++) free_record(&s->records[i]);
  free(s->records);
  drop(&s->scale);
  drop(&s->tracker);
  drop(&s->counters);
  free(s);
}

static opt_record *record_for(mx_scaler *s, const void *key) {
  for (int i = 0; i < s->n_records; i++)
    if (s->records[i].key == key) return &s->records[i];
  opt_record *grown = realloc(s->records, sizeof *grown * (size_t)(s->n_records + 1));
  if (!grown) {
    mx__error(MX_OUT_OF_MEMORY, "GradScaler: out of memory");
    return NULL;
  }
  s->records = grown;
  opt_record *r = &s->records[s->n_records++];
  *r = (opt_record){.key = key, .stage = READY};
  return r;
}

/* --- scale --------------------------------------------------------------------------- */

static mx_status lazy_init(mx_scaler *s, mx_device device) {
  if (s->scale) return MX_OK;
  s->scale = owned(mx_scalar(s->init_scale, MX_F32, device));
  s->tracker = owned(mx_scalar((double)s->init_tracker, MX_I32, device));
  s->counters = owned(mx_zeros(MX_SHAPE(3), MX_I64, device));
  return s->scale && s->tracker && s->counters ? MX_OK : mx_last_status();
}

mx_tensor *mx_scaler_scale(mx_scaler *s, const mx_tensor *loss) {
  if (!s || !loss) {
    mx__null_input("mx_scaler_scale", s ? "loss" : "s");
    return NULL;
  }
  if (!s->o.enabled) return mx_mul_scalar(loss, 1.0);
  if (lazy_init(s, mx_device_of(loss)) != MX_OK) return NULL;
  return mx_mul(loss, s->scale);
}

mx_status mx_scaler_scale_list(mx_scaler *s, int n, mx_tensor *const *losses, mx_tensor **scaled) {
  for (int i = 0; i < n; i++) scaled[i] = NULL;
  for (int i = 0; i < n; i++)
    if (!(scaled[i] = mx_scaler_scale(s, losses[i]))) return mx_last_status();
  return MX_OK;
}

/* --- the inf check and unscale -------------------------------------------------------- */

static mx_status no_scale_yet(const char *fn) {
  return mx__error(MX_STATE_ERROR, "%s: the scale is not set up: call mx_scaler_scale(loss) earlier in the "
                   "iteration", fn);
}

/* Divides the gradients of params by the scale in one fused pass, writing
 * r's found_inf and per-gradient counts. */
static mx_status check_and_unscale(mx_scaler *s, opt_record *r, const char *fn, int n, mx_tensor *const *params) {
  mx_device device = mx_device_of(s->scale);
  mx_kview *views = malloc(sizeof *views * (size_t)(n > 0 ? n : 1));
  struct checked_row *rows = malloc(sizeof *rows * (size_t)(n > 0 ? n : 1));
  const mx_tensor **watched = malloc(sizeof *watched * (size_t)(n > 0 ? n : 1)); /* the parameters checked */
  mx_status status = views && rows && watched ? MX_OK : mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
  int k = 0;
  int64_t values = 0;
  for (int i = 0; i < n && status == MX_OK; i++) {
    mx_tensor *g = mx_grad_of(params[i]);
    if (!g) continue;
    if (g->dtype == MX_F16)
      status = mx__error(MX_DTYPE_ERROR, "%s: Attempting to unscale FP16 gradients. (parameter %d's gradient is "
                         "float16: keep parameters in float32 and let autocast make the 16-bit copies)", fn, i);
    else if (!mx_dtype_is_floating(g->dtype))
      status = mx__error(MX_DTYPE_ERROR, "%s: parameter %d's gradient is %s", fn, i, mx_dtype_name(g->dtype));
    else if (g->device != device)
      status = mx__error(MX_DEVICE_ERROR, "%s: parameter %d's gradient is on %s but the scale is on %s", fn, i,
                         mx_device_name(g->device), mx_device_name(device));
    if (status != MX_OK) break;
    views[k] = mx__kview_of(g);
    watched[k] = params[i];
    rows[k++] = (struct checked_row){i, mx_numel(g)};
    values += mx_numel(g);
  }
  if (status != MX_OK) { /* refused before anything was written */
    free(views);
    free(watched);
    free(rows);
    return status;
  }
  if (capturing(device)) r->captured = true, drop(&r->spare);
  if (!r->found_inf) r->found_inf = owned(mx_scalar(0.0, MX_F32, device));
  else if (!(r->found_clear && !r->captured)) status = mx_fill_(r->found_inf, 0.0);
  if (status == MX_OK && !r->found_inf) status = mx_last_status();
  /* this check's counts: the spare (once captured, the last check's), zeroed, else new zeros */
  mx_tensor **source = r->captured ? &r->stats : &r->spare;
  mx_tensor *counts = *source;
  int counts_rows = r->captured ? r->rows : r->spare_rows;
  *source = NULL;
  if (status == MX_OK && (!counts || counts_rows != k)) {
    drop(&counts);
    counts = owned(mx_zeros(MX_SHAPE(k > 0 ? k : 1, 3), MX_I64, device));
    counts_rows = k;
    if (!counts) status = mx_last_status();
  } else if (status == MX_OK && !(r->spare_clear && !r->captured)) {
    status = mx_fill_(counts, 0.0);
  }
  r->found_clear = r->spare_clear = false;
  const mx_backend *be = status == MX_OK ? mx__backend(device) : NULL;
  if (status == MX_OK && !be) status = mx_last_status();
  if (status == MX_OK && !be->amp_unscale) status = mx__error(MX_NOT_BUILT, "%s: no amp_unscale kernel on %s", fn,
                                                              mx_device_name(device));
  int64_t *hist = NULL; /* set on a step the watcher samples: the fused pass histograms too */
  if (status == MX_OK && s->stats) status = mx__amp_stats_on_unscale(s->stats, s->scale, k, watched, &hist);
  if (status == MX_OK && hist)
    status = be->amp_unscale_histogram(k, views, mx__kview_of(s->scale).data, mx__kview_of(r->found_inf).data,
                                       mx__kview_of(counts).data, hist);
  else if (status == MX_OK)
    status = be->amp_unscale(k, views, mx__kview_of(s->scale).data, mx__kview_of(r->found_inf).data,
                             mx__kview_of(counts).data);
  for (int j = 0; j < k && status == MX_OK; j++) mx__bump_version(mx_grad_of(params[rows[j].param]));
  free(views);
  free(watched);
  if (status != MX_OK) {
    if (r->captured) r->rows = 0; /* stats are gone with the failed check's counts */
    else r->spare = counts, r->spare_rows = counts_rows, counts = NULL; /* not clear: the next check fills it */
    drop(&counts);
    free(rows);
    return status;
  }
  if (!r->captured) r->spare = r->stats, r->spare_rows = r->rows; /* the last check's, cleared by the next update */
  r->stats = counts;
  free(r->row);
  r->row = rows;
  r->rows = k;
  r->values = values;
  r->checked = k > 0; /* no gradient, no inf check: update() must not count it (PyTorch's rule) */
  r->read_clean = false;
  return MX_OK;
}

static mx_tensor **optimizer_params(const mx_optimizer *opt, int *n) {
  *n = mx_optimizer_num_params(opt);
  mx_tensor **params = malloc(sizeof *params * (size_t)(*n > 0 ? *n : 1));
  if (!params) mx__error(MX_OUT_OF_MEMORY, "GradScaler: out of memory");
  for (int i = 0; params && i < *n; i++) params[i] = mx_optimizer_param(opt, i);
  return params;
}

static mx_status unscale(mx_scaler *s, opt_record *r, const mx_optimizer *opt, const char *fn) {
  int n;
  mx_tensor **params = optimizer_params(opt, &n);
  if (!params) return mx_last_status();
  mx_status status = check_and_unscale(s, r, fn, n, params);
  free(params);
  if (status == MX_OK) r->stage = UNSCALED;
  return status;
}

mx_status mx_scaler_unscale(mx_scaler *s, mx_optimizer *opt) {
  if (!s || !opt) return mx__null_input("mx_scaler_unscale", s ? "opt" : "s");
  if (!s->o.enabled) return MX_OK;
  if (!s->scale) return no_scale_yet("mx_scaler_unscale");
  opt_record *r = record_for(s, opt);
  if (!r) return mx_last_status();
  if (r->stage == UNSCALED)
    return mx__error(MX_STATE_ERROR,
                     "mx_scaler_unscale: unscale_() has already been called on this optimizer since the last update().");
  if (r->stage == STEPPED)
    return mx__error(MX_STATE_ERROR, "mx_scaler_unscale: unscale_() is being called after step().");
  return unscale(s, r, opt, "mx_scaler_unscale");
}

mx_tensor *mx_scaler_found_inf(mx_scaler *s, const mx_optimizer *opt) {
  if (!s || !opt) return mx__null_input("mx_scaler_found_inf", s ? "opt" : "s"), NULL;
  for (int i = 0; i < s->n_records; i++)
    if (s->records[i].key == opt && s->records[i].stage == UNSCALED && s->records[i].found_inf)
      return s->records[i].found_inf;
  return mx__error(MX_STATE_ERROR, "mx_scaler_found_inf: this optimizer's gradients were not unscaled since the last "
                   "step"), NULL;
}

/* --- step ------------------------------------------------------------------------------ */

/* Sums the counts of r's last check (reads the device). */
static mx_status read_counts(const opt_record *r, int64_t totals[3], int *rows_with_nonfinite, int64_t **per_row) {
  totals[0] = totals[1] = totals[2] = 0;
  *rows_with_nonfinite = 0;
  int64_t *counts = malloc(sizeof *counts * 3 * (size_t)(r->rows > 0 ? r->rows : 1));
  if (!counts) return mx__error(MX_OUT_OF_MEMORY, "GradScaler: out of memory");
  mx_status status = r->rows ? mx_to_host(r->stats, counts, sizeof *counts * 3 * (size_t)r->rows) : MX_OK;
  for (int k = 0; k < r->rows && status == MX_OK; k++) {
    for (int c = 0; c < 3; c++) totals[c] += counts[3 * k + c];
    *rows_with_nonfinite += counts[3 * k] + counts[3 * k + 1] > 0;
  }
  if (status == MX_OK && per_row) {
    *per_row = counts;
    return MX_OK;
  }
  free(counts);
  return status;
}

mx_status mx_scaler_step(mx_scaler *s, mx_optimizer *opt, mx_scaler_step_info *info) {
  if (!s || !opt) return mx__null_input("mx_scaler_step", s ? "opt" : "s");
  if (info) *info = (mx_scaler_step_info){.stepped = true, .scale = 1.0};
  if (!s->o.enabled) return mx_optimizer_step(opt);
  if (!s->scale) return no_scale_yet("mx_scaler_step");
  opt_record *r = record_for(s, opt);
  if (!r) return mx_last_status();
  if (r->stage == STEPPED)
    return mx__error(MX_STATE_ERROR, "mx_scaler_step: step() has already been called since the last update().");
  mx_status status = r->stage == READY ? unscale(s, r, opt, "mx_scaler_step") : MX_OK;
  if (status == MX_OK && !r->checked) /* none of opt's parameters has a gradient */
    status = mx__error(MX_STATE_ERROR, "mx_scaler_step: No inf checks were recorded for this optimizer. (none of "
                       "its %d parameters has a gradient: was backward run on the scaled loss?)",
                       mx_optimizer_num_params(opt));
  if (status == MX_OK) status = mx_optimizer_step_amp(opt, r->found_inf, NULL);
  if (status != MX_OK) return status;
  r->stage = STEPPED;
  if (!info) return MX_OK;
  int64_t totals[3];
  status = read_counts(r, totals, &info->params_with_nonfinite, NULL);
  info->infs = totals[0];
  info->nans = totals[1];
  info->stepped = mx_item(r->found_inf) == 0.0;
  r->read_clean = info->stepped;
  info->scale = mx_item(s->scale);
  return status;
}

/* --- update ------------------------------------------------------------------------------ */

static void reset_records(mx_scaler *s) {
  for (int i = 0; i < s->n_records; i++) s->records[i].stage = READY, s->records[i].checked = false;
}

static mx_status guard_consecutive_skips(mx_scaler *s) {
  if (!s->o.max_consecutive_skips) return MX_OK;
  /* A clean update ends the run of skips: when the step infos have read
   * every check of this update clean, the count is 0 without a sync. */
  bool read_clean = true;
  for (int i = 0; i < s->n_records; i++) read_clean &= !s->records[i].checked || s->records[i].read_clean;
  if (read_clean) return MX_OK;
  int64_t counters[3];
  mx_status status = mx_to_host(s->counters, counters, sizeof counters);
  if (status != MX_OK || counters[2] <= s->o.max_consecutive_skips) return status;
  char report[512] = "";
  size_t len = 0;
  for (int i = 0; i < s->n_records && len < sizeof report; i++) {
    if (!s->records[i].checked) continue; /* only this iteration's checks */
    int64_t totals[3];
    int bad;
    if (read_counts(&s->records[i], totals, &bad, NULL) != MX_OK) break;
    len += (size_t)snprintf(report + len, sizeof report - len, "; checked set %d: %d gradients held %lld inf and "
                            "%lld NaN", i, bad, (long long)totals[0], (long long)totals[1]);
  }
  return mx__error(MX_STATE_ERROR, "mx_scaler_update: %lld consecutive steps skipped (limit %lld): the gradients "
                   "keep overflowing at scale %g%s", (long long)counters[2], (long long)s->o.max_consecutive_skips,
                   mx_item(s->scale), report);
}

/* What the update's launch clears for r's next check (r NULL: several
 * optimizers were checked, and their flags were summed: nothing): r's
 * found_inf, which nothing reads after the update (mx_scaler_found_inf:
 * between unscale and step only), and its spare counts, so that the
 * check launches no fills of its own. Nothing once r's check was captured
 * in a CUDA graph (opt_record: captured): no host code runs at a replay to
 * know what it cleared. */
static mx_amp_clear clears_for(opt_record *r, mx_device device) {
  if (!r || r->captured || capturing(device)) return (mx_amp_clear){0};
  mx_amp_clear clear = {.found_inf = mx__kview_of(r->found_inf).data};
  if (r->spare) clear.stats = mx__kview_of(r->spare).data, clear.n_stats = 3 * (int64_t)r->spare_rows;
  return clear;
}

mx_status mx_scaler_update(mx_scaler *s) {
  if (!s) return mx__null_input("mx_scaler_update", "s");
  if (!s->o.enabled) return MX_OK;
  if (!s->scale) return no_scale_yet("mx_scaler_update");
  mx_scope *scope = mx_scope_begin();
  if (!scope) return mx_last_status();
  mx_tensor *found = NULL;
  mx_status status = MX_OK;
  opt_record *only = NULL; /* the one record checked, if only one was */
  for (int i = 0; i < s->n_records && status == MX_OK; i++) {
    if (!s->records[i].checked) continue;
    only = found ? NULL : &s->records[i];
    found = found ? mx_add(found, s->records[i].found_inf) : s->records[i].found_inf;
    if (!found) status = mx_last_status();
  }
  if (status == MX_OK && !found)
    status = mx__error(MX_STATE_ERROR, "mx_scaler_update: No inf checks were recorded prior to update.");
  const mx_backend *be = status == MX_OK ? mx__backend(mx_device_of(s->scale)) : NULL;
  if (status == MX_OK && !be) status = mx_last_status();
  if (status == MX_OK) {
    mx_amp_update_params p = {s->o.growth_factor, s->o.backoff_factor, (int32_t)s->o.growth_interval,
                              s->o.min_scale, s->o.max_scale};
    mx_amp_clear clear = clears_for(only, mx_device_of(s->scale));
    status = be->amp_update_scale(mx__kview_of(s->scale).data, mx__kview_of(s->tracker).data,
                                  mx__kview_of(found).data, &p, mx__kview_of(s->counters).data, &clear);
    mx__bump_version(s->scale);
    if (status == MX_OK && clear.found_inf) only->found_clear = true, only->spare_clear = clear.stats != NULL;
  }
  mx_scope_end(scope);
  if (status == MX_OK) status = guard_consecutive_skips(s);
  reset_records(s);
  return status;
}

mx_status mx_scaler_update_to(mx_scaler *s, double new_scale) {
  if (!s) return mx__null_input("mx_scaler_update_to", "s");
  if (!s->o.enabled) return MX_OK;
  if (!s->scale) return no_scale_yet("mx_scaler_update_to");
  mx_status status = check_scale("mx_scaler_update_to", "new_scale", new_scale);
  if (status == MX_OK) status = mx_fill_(s->scale, new_scale);
  if (status == MX_OK) reset_records(s);
  return status;
}

/* --- MegEngine's backward -------------------------------------------------------------------- */

mx_status mx_scaler_backward(mx_scaler *s, mx_tensor *loss, bool unscale_grad, bool update_scale) {
  if (!s || !loss) return mx__null_input("mx_scaler_backward", s ? "loss" : "s");
  int n = 0;
  mx_tensor **leaves = NULL;
  mx_status status = unscale_grad ? mx__graph_leaves(loss, &n, &leaves) : MX_OK;
  mx_scope *scope = status == MX_OK ? mx_scope_begin() : NULL;
  if (status == MX_OK && !scope) status = mx_last_status();
  if (status == MX_OK) {
    mx_tensor *scaled = mx_scaler_scale(s, loss);
    status = scaled ? mx_backward(scaled, NULL, false) : mx_last_status();
  }
  if (scope) mx_scope_end(scope);
  if (status == MX_OK && unscale_grad && s->o.enabled) {
    opt_record *r = record_for(s, s);
    status = r ? check_and_unscale(s, r, "mx_scaler_backward", n, leaves) : mx_last_status();
    if (status == MX_OK && mx_item(r->found_inf) != 0.0) /* MegEngine drops the gradients */
      for (int i = 0; i < n; i++) mx_zero_grad(leaves[i]);
    if (status == MX_OK && update_scale) status = mx_scaler_update(s);
  }
  free(leaves);
  return status;
}

/* --- getters, setters, state --------------------------------------------------------------------- */

double mx_scaler_get_scale(const mx_scaler *s) {
  if (!s || !s->o.enabled) return 1.0;
  return s->scale ? mx_item(s->scale) : s->init_scale;
}

double mx_scaler_get_growth_factor(const mx_scaler *s) { return s ? s->o.growth_factor : 0; }
double mx_scaler_get_backoff_factor(const mx_scaler *s) { return s ? s->o.backoff_factor : 0; }
int64_t mx_scaler_get_growth_interval(const mx_scaler *s) { return s ? s->o.growth_interval : 0; }
bool mx_scaler_is_enabled(const mx_scaler *s) { return s && s->o.enabled; }
const mx_tensor *mx_scaler_scale_tensor(const mx_scaler *s) { return s ? s->scale : NULL; }

mx_status mx_scaler_set_growth_factor(mx_scaler *s, double growth_factor) {
  if (!s) return mx__null_input("mx_scaler_set_growth_factor", "s");
  mx_status status = check_growth("mx_scaler_set_growth_factor", growth_factor);
  if (status == MX_OK) s->o.growth_factor = growth_factor;
  return status;
}

mx_status mx_scaler_set_backoff_factor(mx_scaler *s, double backoff_factor) {
  if (!s) return mx__null_input("mx_scaler_set_backoff_factor", "s");
  mx_status status = check_backoff("mx_scaler_set_backoff_factor", backoff_factor);
  if (status == MX_OK) s->o.backoff_factor = backoff_factor;
  return status;
}

mx_status mx_scaler_set_growth_interval(mx_scaler *s, int64_t growth_interval) {
  if (!s) return mx__null_input("mx_scaler_set_growth_interval", "s");
  mx_status status = check_interval("mx_scaler_set_growth_interval", growth_interval);
  if (status == MX_OK) s->o.growth_interval = growth_interval;
  return status;
}

mx_status mx_scaler_state_dict(const mx_scaler *s, mx_scaler_state *out) {
  if (!s || !out) return mx__null_input("mx_scaler_state_dict", s ? "out" : "s");
  *out = (mx_scaler_state){0};
  if (!s->o.enabled) return MX_OK;
  /* The per-optimizer stages and found_inf flags of an iteration in
   * progress are not part of the state: saving now would drop them (PyTorch
   * refuses to pickle a scaler then, for the same reason). */
  for (int i = 0; i < s->n_records; i++)
    if (s->records[i].stage != READY)
      return mx__error(MX_STATE_ERROR, "mx_scaler_state_dict: a GradScaler may only be saved at the beginning of "
                       "an iteration, or at its end after mx_scaler_update(): unscale or step has run since the "
                       "last update, and that iteration's checks would be lost. Save after mx_scaler_update().");
  float scale = (float)s->init_scale;
  int32_t tracker = (int32_t)s->init_tracker;
  mx_status status = s->scale ? mx_to_host(s->scale, &scale, sizeof scale) : MX_OK;
  if (status == MX_OK && s->tracker) status = mx_to_host(s->tracker, &tracker, sizeof tracker);
  if (status != MX_OK) return status;
  *out = (mx_scaler_state){.present = true, .scale = scale, .growth_factor = s->o.growth_factor,
                           .backoff_factor = s->o.backoff_factor, .growth_interval = s->o.growth_interval,
                           .growth_tracker = tracker};
  return MX_OK;
}

mx_status mx_scaler_load_state_dict(mx_scaler *s, const mx_scaler_state *state) {
  const char *fn = "mx_scaler_load_state_dict";
  if (!s || !state) return mx__null_input(fn, s ? "state" : "s");
  if (!s->o.enabled) return MX_OK;
  if (!state->present)
    return mx__error(MX_STATE_ERROR, "%s: The source state dict is empty, possibly because it was saved from a "
                     "disabled instance of GradScaler.", fn);
  mx_status status = check_scale(fn, "scale", state->scale);
  if (status == MX_OK) status = check_growth(fn, state->growth_factor);
  if (status == MX_OK) status = check_backoff(fn, state->backoff_factor);
  if (status == MX_OK) status = check_interval(fn, state->growth_interval);
  /* a tracker beyond the interval is a state the scaler can be in (after
   * set_growth_interval), so only the int32 range is checked */
  if (status == MX_OK && (state->growth_tracker < 0 || state->growth_tracker > INT32_MAX))
    status = mx__error(MX_INVALID_ARGUMENT, "%s: growth_tracker %lld is outside [0, 2^31)", fn,
                       (long long)state->growth_tracker);
  if (status != MX_OK) return status;
  s->init_scale = state->scale;
  s->init_tracker = state->growth_tracker;
  s->o.growth_factor = state->growth_factor;
  s->o.backoff_factor = state->backoff_factor;
  s->o.growth_interval = state->growth_interval;
  if (s->scale) status = mx_fill_(s->scale, state->scale);
  if (status == MX_OK && s->tracker) status = mx_fill_(s->tracker, (double)state->growth_tracker);
  return status;
}

/* --- watching ------------------------------------------------------------------------------------- */

mx_scaler_stats mx_scaler_stats_get(const mx_scaler *s) {
  mx_scaler_stats st = {.scale = mx_scaler_get_scale(s)};
  int64_t counters[3];
  if (s && s->counters && mx_to_host(s->counters, counters, sizeof counters) == MX_OK)
    st.updates = counters[0], st.skipped = counters[1], st.consecutive_skips = counters[2];
  return st;
}

static const opt_record *find_record(const mx_scaler *s, const void *key) {
  for (int i = 0; s && i < s->n_records; i++)
    if (s->records[i].key == key && s->records[i].stats) return &s->records[i];
  return NULL;
}

int mx_scaler_overflow_report(const mx_scaler *s, const mx_optimizer *opt, const char *const *names, FILE *out) {
  const opt_record *r = find_record(s, opt);
  int64_t totals[3], *counts = NULL;
  int bad = 0;
  if (!r || read_counts(r, totals, &bad, &counts) != MX_OK) return 0;
  for (int k = 0; k < r->rows && out; k++) {
    int64_t infs = counts[3 * k], nans = counts[3 * k + 1];
    if (!infs && !nans) continue;
    int i = r->row[k].param;
    char fallback[32];
    snprintf(fallback, sizeof fallback, "param %d", i);
    fprintf(out, "%s: %lld inf, %lld NaN of %lld\n", names && names[i] ? names[i] : fallback, (long long)infs,
            (long long)nans, (long long)r->row[k].numel);
  }
  free(counts);
  return bad;
}

double mx_scaler_underflow_fraction(const mx_scaler *s, const mx_optimizer *opt) {
  const opt_record *r = find_record(s, opt);
  int64_t totals[3];
  int bad;
  if (!r || read_counts(r, totals, &bad, NULL) != MX_OK) return -1.0;
  return r->values ? (double)totals[2] / (double)r->values : 0.0;
}
