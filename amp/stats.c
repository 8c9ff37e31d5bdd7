/* The AMP watcher: per-step loss and scale, and on sampled steps the
 * log2-magnitude histograms of layer outputs, their gradients and the
 * parameter gradients, all counted on the device (amp/stats.h). */
#include <stdlib.h>
#include <string.h>

#include "amp/amp_internal.h"
#include "amp/stats_internal.h"

/* A layer's histograms in one sample: a device int64 (2, BINS) tensor. */
typedef struct {
  char *name, *type;
  mx_dtype dtype;
  mx_tensor *hist;
  bool hooked; /* a gradient hook was registered on its output */
} layer_site;

/* One unscale pass's (or step_end's) parameter gradients: (k, 2, BINS). */
typedef struct {
  const mx_tensor **params;
  mx_dtype *dtype;
  int k;
  mx_tensor *hist;
} grad_block;

typedef struct {
  int64_t step;
  mx_tensor *scale; /* the scale the gradients were unscaled by (f32 0-d), NULL without */
  layer_site *layers;
  int n_layers;
  grad_block *blocks;
  int n_blocks;
} sample;

typedef struct {
  const mx_tensor *param;
  char *name;
} param_name;

struct mx_amp_stats {
  mx_scaler *scaler;
  int64_t every;
  int64_t steps;      /* begun */
  bool open, sampled; /* the step steps - 1 */
  mx_status failure;  /* the first failure inside a hook this step */
  /* per step, on the device: loss, the scale used, the scaler's skipped count after it */
  mx_tensor *loss, *scale, *skipped;
  int64_t capacity;
  sample *samples;
  int n_samples;
  param_name *names;
  int n_names;
};

/* A tensor the watcher owns (no scope's handle). */
static mx_tensor *owned(mx_tensor *t) {
  if (!t) return NULL;
  mx__retain(t);
  mx_release(t);
  return t;
}

static void drop(mx_tensor **t) {
  if (*t) mx__decref(*t);
  *t = NULL;
}

static int64_t *bins_of(const mx_tensor *hist, int64_t row) {
  return (int64_t *)mx__kview_of(hist).data + row * MX_AMP_HIST_BINS;
}

mx_amp_stats *mx_amp_stats_new(mx_scaler *scaler, int64_t every) {
  if (every < 1) {
    mx__error(MX_INVALID_ARGUMENT, "mx_amp_stats_new: every must be >= 1, got %lld", (long long)every);
    return NULL;
  }
  mx_amp_stats *st = calloc(1, sizeof *st);
  if (!st) {
    mx__error(MX_OUT_OF_MEMORY, "mx_amp_stats_new: out of memory");
    return NULL;
  }
  st->scaler = scaler, st->every = every;
  if (scaler) mx__scaler_watch(scaler, st);
  return st;
}

void mx__amp_stats_detach(mx_amp_stats *st) { st->scaler = NULL; }

void mx_amp_stats_free(mx_amp_stats *st) {
  if (!st) return;
  if (st->scaler) mx__scaler_watch(st->scaler, NULL);
  for (int i = 0; i < st->n_samples; i++) {
    sample *sm = &st->samples[i];
    drop(&sm->scale);
    for (int j = 0; j < sm->n_layers; j++)
      free(sm->layers[j].name), free(sm->layers[j].type), drop(&sm->layers[j].hist);
    for (int j = 0; j < sm->n_blocks; j++)
      free(sm->blocks[j].params), free(sm->blocks[j].dtype), drop(&sm->blocks[j].hist);
    free(sm->layers);
    free(sm->blocks);
  }
  free(st->samples);
  for (int i = 0; i < st->n_names; i++) free(st->names[i].name);
  free(st->names);
  drop(&st->loss);
  drop(&st->scale);
  drop(&st->skipped);
  free(st);
}

mx_status mx_amp_stats_name_params(mx_amp_stats *st, int n, mx_tensor *const *params, const char *const *names) {
  if (!st || (n > 0 && (!params || !names)))
    return mx__null_input("mx_amp_stats_name_params", !st ? "st" : !params ? "params" : "names");
  if (n < 0) return mx__error(MX_INVALID_ARGUMENT, "mx_amp_stats_name_params: n must be >= 0, got %d", n);
  param_name *grown = realloc(st->names, sizeof *grown * (size_t)(st->n_names + n + 1));
  if (!grown) return mx__error(MX_OUT_OF_MEMORY, "mx_amp_stats_name_params: out of memory");
  st->names = grown;
  for (int i = 0; i < n; i++) {
    char *copy = strdup(names[i] ? names[i] : "");
    if (!copy) return mx__error(MX_OUT_OF_MEMORY, "mx_amp_stats_name_params: out of memory");
    st->names[st->n_names++] = (param_name){params[i], copy};
  }
  return MX_OK;
}

/* --- the per-step trajectory ------------------------------------------------------ */

/* The three per-step buffers hold at least `need` steps (grown by doubling). */
static mx_status ensure_capacity(mx_amp_stats *st, mx_device device, int64_t need) {
  if (need <= st->capacity) return MX_OK;
  int64_t cap = st->capacity ? 2 * st->capacity : 256;
  while (cap < need) cap *= 2;
  mx_tensor **buffers[3] = {&st->loss, &st->scale, &st->skipped};
  const double initial[3] = {NAN, 1.0, 0.0}; /* no loss yet, no scaler, nothing skipped */
  mx_scope *scope = mx_scope_begin();
  if (!scope) return mx_last_status();
  mx_status status = MX_OK;
  for (int b = 0; b < 3 && status == MX_OK; b++) {
    mx_device where = *buffers[b] ? mx_device_of(*buffers[b]) : device;
    mx_tensor *grown = mx_full(MX_SHAPE(cap), initial[b], MX_F32, where);
    if (grown && *buffers[b]) status = mx_copy_(mx_narrow(grown, 0, 0, st->capacity), *buffers[b]);
    if (!grown) status = mx_last_status();
    if (status == MX_OK) {
      drop(buffers[b]);
      *buffers[b] = owned(grown);
    }
  }
  mx_scope_end(scope);
  if (status == MX_OK) st->capacity = cap;
  return status;
}

/* buffer[step] = value (a device copy, converted to float32). */
static mx_status put(mx_tensor *buffer, int64_t step, const mx_tensor *value) {
  mx_scope *scope = mx_scope_begin();
  if (!scope) return mx_last_status();
  mx_tensor *slot = mx_select(buffer, 0, step);
  mx_status status = slot ? mx_copy_(slot, value) : mx_last_status();
  mx_scope_end(scope);
  return status;
}

bool mx_amp_stats_step_begin(mx_amp_stats *st) {
  if (!st) return false;
  int64_t step = st->steps++;
  st->open = true;
  st->failure = MX_OK;
  st->sampled = step % st->every == 0;
  if (!st->sampled) return false;
  sample *grown = realloc(st->samples, sizeof *grown * (size_t)(st->n_samples + 1));
  if (!grown) {
    st->sampled = false; /* this step goes unsampled; step_end reports it */
    st->failure = mx__error(MX_OUT_OF_MEMORY, "mx_amp_stats_step_begin: out of memory");
    return false;
  }
  st->samples = grown;
  st->samples[st->n_samples++] = (sample){.step = step};
  return true;
}

static sample *current(mx_amp_stats *st) { return st->open && st->sampled ? &st->samples[st->n_samples - 1] : NULL; }

static void remember(mx_amp_stats *st, mx_status status) {
  if (status != MX_OK && st->failure == MX_OK) st->failure = status;
}

/* --- layer outputs and their gradients ------------------------------------------------ */

static mx_status histogram_into(const mx_tensor *x, int64_t *bins, const char *fn) {
  const mx_backend *be = mx__backend(mx_device_of(x));
  if (!be) return mx_last_status();
  if (!be->amp_histogram) return mx__error(MX_NOT_BUILT, "%s: no amp_histogram kernel on %s", fn, be->name);
  mx_kview v = mx__kview_of(x);
  return be->amp_histogram(&v, bins);
}

static mx_tensor *gradient_hook(mx_tensor *grad, void *ctx) {
  const mx_tensor *hist = ctx;
  if (grad && mx_device_of(grad) == mx_device_of(hist) && mx_dtype_is_floating(mx_dtype_of(grad)))
    histogram_into(grad, bins_of(hist, 1), "mx_amp_stats_output_hook");
  return NULL; /* the gradient goes on as it is */
}

static layer_site *layer_for(mx_amp_stats *st, sample *sm, const char *name, const char *type, const mx_tensor *out) {
  for (int i = 0; i < sm->n_layers; i++)
    if (!strcmp(sm->layers[i].name, name)) return &sm->layers[i]; /* a layer called twice adds up */
  layer_site *grown = realloc(sm->layers, sizeof *grown * (size_t)(sm->n_layers + 1));
  if (!grown) {
    remember(st, mx__error(MX_OUT_OF_MEMORY, "mx_amp_stats_output_hook: out of memory"));
    return NULL;
  }
  sm->layers = grown;
  layer_site site = {strdup(name), strdup(type ? type : "?"), mx_dtype_of(out),
                     owned(mx_zeros(MX_SHAPE(2, MX_AMP_HIST_BINS), MX_I64, mx_device_of(out))), false};
  if (!site.name || !site.type || !site.hist) {
    free(site.name), free(site.type), drop(&site.hist);
    remember(st, mx_last_status() != MX_OK ? mx_last_status()
                                           : mx__error(MX_OUT_OF_MEMORY, "mx_amp_stats_output_hook: out of memory"));
    return NULL;
  }
  sm->layers[sm->n_layers] = site;
  return &sm->layers[sm->n_layers++];
}

void mx_amp_stats_output_hook(const char *name, const char *type, const mx_tensor *out, void *ctx) {
  mx_amp_stats *st = ctx;
  sample *sm = st ? current(st) : NULL;
  if (!sm || !name || !*name || !out || !mx_dtype_is_floating(mx_dtype_of(out))) return;
  layer_site *site = layer_for(st, sm, name, type, out);
  if (!site) return;
  remember(st, histogram_into(out, bins_of(site->hist, 0), "mx_amp_stats_output_hook"));
  if (!site->hooked && mx_requires_grad(out) && mx_is_grad_enabled()) {
    remember(st, mx_register_hook((mx_tensor *)out, gradient_hook, site->hist));
    site->hooked = true;
  }
}

/* --- parameter gradients ------------------------------------------------------------------ */

static grad_block *add_block(sample *sm, int k, const mx_tensor *const *params, mx_device device) {
  grad_block *grown = realloc(sm->blocks, sizeof *grown * (size_t)(sm->n_blocks + 1));
  if (!grown) return NULL;
  sm->blocks = grown;
  grad_block b = {malloc(sizeof *b.params * (size_t)(k > 0 ? k : 1)), malloc(sizeof *b.dtype * (size_t)(k > 0 ? k : 1)),
                  k, owned(mx_zeros(MX_SHAPE(k > 0 ? k : 1, 2, MX_AMP_HIST_BINS), MX_I64, device))};
  if (!b.params || !b.dtype || !b.hist) {
    free(b.params), free(b.dtype), drop(&b.hist);
    return NULL;
  }
  for (int j = 0; j < k; j++) b.params[j] = params[j], b.dtype[j] = mx_dtype_of(mx_grad_of((mx_tensor *)params[j]));
  sm->blocks[sm->n_blocks] = b;
  return &sm->blocks[sm->n_blocks++];
}

static mx_status out_of_memory(const char *fn) {
  return mx_last_status() != MX_OK ? mx_last_status() : mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
}

mx_status mx__amp_stats_on_unscale(mx_amp_stats *st, const mx_tensor *scale, int k, const mx_tensor *const *params,
                                   int64_t **hist) {
  static const char *const fn = "mx_scaler_unscale (amp stats)";
  *hist = NULL;
  if (!st->open) return MX_OK; /* a step outside step_begin/step_end is not watched */
  mx_status status = ensure_capacity(st, mx_device_of(scale), st->steps);
  if (status == MX_OK) status = put(st->scale, st->steps - 1, scale);
  sample *sm = current(st);
  if (status != MX_OK || !sm) return status;
  const mx_backend *be = mx__backend(mx_device_of(scale));
  if (!be) return mx_last_status();
  if (!be->amp_unscale_histogram)
    return mx__error(MX_NOT_BUILT, "%s: no amp_unscale_histogram kernel on %s", fn, be->name);
  if (!sm->scale && !(sm->scale = owned(mx_clone(scale)))) return mx_last_status();
  grad_block *b = add_block(sm, k, params, mx_device_of(scale));
  if (!b) return out_of_memory(fn);
  *hist = bins_of(b->hist, 0);
  return MX_OK;
}

/* Without a scaler at work, a sampled step's named gradients are binned
 * at its end, as they are: scaled and true are the same. */
static mx_status histogram_plain_gradients(mx_amp_stats *st, sample *sm) {
  const mx_tensor **params = malloc(sizeof *params * (size_t)(st->n_names > 0 ? st->n_names : 1));
  if (!params) return mx__error(MX_OUT_OF_MEMORY, "mx_amp_stats_step_end: out of memory");
  int k = 0;
  for (int i = 0; i < st->n_names; i++) {
    mx_tensor *g = mx_grad_of((mx_tensor *)st->names[i].param);
    if (g && mx_dtype_is_floating(mx_dtype_of(g))) params[k++] = st->names[i].param;
  }
  mx_status status = MX_OK;
  grad_block *b = k ? add_block(sm, k, params, mx_device_of(mx_grad_of((mx_tensor *)params[0]))) : NULL;
  if (k && !b) status = out_of_memory("mx_amp_stats_step_end");
  for (int j = 0; j < k && status == MX_OK; j++) {
    mx_tensor *g = mx_grad_of((mx_tensor *)params[j]);
    for (int row = 0; row < 2 && status == MX_OK; row++)
      status = histogram_into(g, bins_of(b->hist, 2 * j + row), "mx_amp_stats_step_end");
  }
  free(params);
  return status;
}

mx_status mx_amp_stats_step_end(mx_amp_stats *st, const mx_tensor *loss) {
  if (!st || !loss) return mx__null_input("mx_amp_stats_step_end", !st ? "st" : "loss");
  if (!st->open)
    return mx__error(MX_STATE_ERROR, "mx_amp_stats_step_end: no step is open (call mx_amp_stats_step_begin "
                                     "before the step's forward)");
  int64_t step = st->steps - 1;
  mx_status status = st->failure;
  if (status == MX_OK) status = ensure_capacity(st, mx_device_of(loss), st->steps);
  if (status == MX_OK) status = put(st->loss, step, loss);
  const mx_tensor *counters = st->scaler ? mx__scaler_counters(st->scaler) : NULL;
  if (status == MX_OK && counters) {
    mx_scope *scope = mx_scope_begin();
    mx_tensor *skipped = scope ? mx_select(counters, 0, 1) : NULL;
    status = skipped ? put(st->skipped, step, skipped) : mx_last_status();
    if (scope) mx_scope_end(scope);
  }
  sample *sm = current(st);
  if (status == MX_OK && sm && !sm->n_blocks && !mx_scaler_is_enabled(st->scaler))
    status = histogram_plain_gradients(st, sm);
  st->open = false;
  return status;
}

/* --- reading back --------------------------------------------------------------------------- */

int mx_amp_stats_num_samples(const mx_amp_stats *st) { return st ? st->n_samples : 0; }

int64_t mx_amp_stats_sample_step(const mx_amp_stats *st, int i) {
  return st && i >= 0 && i < st->n_samples ? st->samples[i].step : -1;
}

static const char *name_of(const mx_amp_stats *st, const mx_tensor *param, int j, char *fallback, size_t size) {
  for (int i = 0; i < st->n_names; i++)
    if (st->names[i].param == param) return st->names[i].name;
  snprintf(fallback, size, "param %d", j);
  return fallback;
}

/* Row `row` of a device histogram tensor of `rows` rows, into counts. */
static mx_status read_row(const mx_tensor *hist, int64_t rows, int64_t row, int64_t *counts) {
  int64_t *all = malloc(sizeof *all * (size_t)(rows * MX_AMP_HIST_BINS));
  if (!all) return mx__error(MX_OUT_OF_MEMORY, "amp stats: out of memory");
  mx_status status = mx_to_host(hist, all, sizeof *all * (size_t)(rows * MX_AMP_HIST_BINS));
  if (status == MX_OK) memcpy(counts, all + row * MX_AMP_HIST_BINS, sizeof *counts * MX_AMP_HIST_BINS);
  free(all);
  return status;
}

mx_status mx_amp_stats_histogram(const mx_amp_stats *st, int i, const char *name, mx_amp_hist_kind kind,
                                 int64_t *counts) {
  static const char *const fn = "mx_amp_stats_histogram";
  if (!st || !name || !counts) return mx__null_input(fn, !st ? "st" : !name ? "name" : "counts");
  if (i < 0 || i >= st->n_samples)
    return mx__error(MX_INVALID_ARGUMENT, "%s: sample %d is out of range (%d samples)", fn, i, st->n_samples);
  const sample *sm = &st->samples[i];
  bool layer = kind == MX_AMP_HIST_ACTIVATION || kind == MX_AMP_HIST_ACTIVATION_GRAD;
  int row = kind == MX_AMP_HIST_ACTIVATION || kind == MX_AMP_HIST_GRAD_SCALED ? 0 : 1;
  for (int j = 0; layer && j < sm->n_layers; j++)
    if (!strcmp(sm->layers[j].name, name)) return read_row(sm->layers[j].hist, 2, row, counts);
  for (int b = 0; !layer && b < sm->n_blocks; b++)
    for (int j = 0; j < sm->blocks[b].k; j++) {
      char fallback[32];
      if (!strcmp(name_of(st, sm->blocks[b].params[j], j, fallback, sizeof fallback), name))
        return read_row(sm->blocks[b].hist, 2 * (int64_t)sm->blocks[b].k, 2 * (int64_t)j + row, counts);
    }
  return mx__error(MX_INVALID_ARGUMENT, "%s: sample %d (step %lld) has no %s histogram named '%s'", fn, i,
                   (long long)sm->step, layer ? "layer" : "parameter gradient", name);
}

mx_status mx_amp_histogram(const mx_tensor *x, int64_t *counts) {
  static const char *const fn = "mx_amp_histogram";
  if (!x || !counts) return mx__null_input(fn, !x ? "x" : "counts");
  if (!mx_dtype_is_floating(mx_dtype_of(x)))
    return mx__error(MX_DTYPE_ERROR, "%s: x is %s; histograms are of floating tensors", fn,
                     mx_dtype_name(mx_dtype_of(x)));
  mx_scope *scope = mx_scope_begin();
  if (!scope) return mx_last_status();
  mx_tensor *hist = mx_zeros(MX_SHAPE(MX_AMP_HIST_BINS), MX_I64, mx_device_of(x));
  mx_status status = hist ? histogram_into(x, bins_of(hist, 0), fn) : mx_last_status();
  if (status == MX_OK) status = mx_to_host(hist, counts, sizeof *counts * MX_AMP_HIST_BINS);
  mx_scope_end(scope);
  return status;
}

/* --- the snapshot for the report ------------------------------------------------------------ */

static mx_status snapshot_sample(const mx_amp_stats *st, const sample *sm, mx__amp_sample *out) {
  *out = (mx__amp_sample){.step = sm->step, .scale = 1.0};
  if (sm->scale) out->scale = mx_item(sm->scale);
  int n_params = 0;
  for (int b = 0; b < sm->n_blocks; b++) n_params += sm->blocks[b].k;
  out->layers = calloc((size_t)(sm->n_layers > 0 ? sm->n_layers : 1), sizeof *out->layers);
  out->params = calloc((size_t)(n_params > 0 ? n_params : 1), sizeof *out->params);
  if (!out->layers || !out->params) return mx__error(MX_OUT_OF_MEMORY, "mx_amp_report_write_html: out of memory");
  mx_status status = MX_OK;
  for (int j = 0; j < sm->n_layers && status == MX_OK; j++, out->n_layers++) {
    mx__amp_site *site = &out->layers[j];
    site->name = strdup(sm->layers[j].name), site->type = strdup(sm->layers[j].type);
    site->dtype = sm->layers[j].dtype;
    site->has_grad = sm->layers[j].hooked;
    status = mx_to_host(sm->layers[j].hist, site->hist, sizeof site->hist);
  }
  for (int b = 0; b < sm->n_blocks && status == MX_OK; b++) {
    const grad_block *block = &sm->blocks[b];
    int64_t *all = malloc(sizeof *all * (size_t)(2 * block->k * MX_AMP_HIST_BINS) + 1);
    status = all ? mx_to_host(block->hist, all, sizeof *all * (size_t)(2 * block->k * MX_AMP_HIST_BINS))
                 : mx__error(MX_OUT_OF_MEMORY, "mx_amp_report_write_html: out of memory");
    for (int j = 0; j < block->k && status == MX_OK; j++, out->n_params++) {
      mx__amp_site *site = &out->params[out->n_params];
      char fallback[32];
      site->name = strdup(name_of(st, block->params[j], j, fallback, sizeof fallback));
      site->type = strdup("parameter");
      site->dtype = block->dtype[j];
      site->has_grad = true;
      memcpy(site->hist, all + 2 * j * MX_AMP_HIST_BINS, sizeof site->hist);
    }
    free(all);
  }
  for (int j = 0; j < out->n_layers && status == MX_OK; j++)
    if (!out->layers[j].name || !out->layers[j].type)
      status = mx__error(MX_OUT_OF_MEMORY, "mx_amp_report_write_html: out of memory");
  for (int j = 0; j < out->n_params && status == MX_OK; j++)
    if (!out->params[j].name || !out->params[j].type)
      status = mx__error(MX_OUT_OF_MEMORY, "mx_amp_report_write_html: out of memory");
  return status;
}

mx_status mx__amp_stats_snapshot(const mx_amp_stats *st, mx__amp_snapshot *out) {
  *out =
      (mx__amp_snapshot){.steps = st->steps - (st->open ? 1 : 0), .scaler_enabled = mx_scaler_is_enabled(st->scaler)};
  int64_t n = out->steps;
  mx_scope *scope = mx_scope_begin();
  if (!scope) return mx_last_status();
  float *skipped_total = malloc(sizeof *skipped_total * (size_t)(n > 0 ? n : 1));
  out->loss = malloc(sizeof *out->loss * (size_t)(n > 0 ? n : 1));
  out->scale = malloc(sizeof *out->scale * (size_t)(n > 0 ? n : 1));
  out->skipped = malloc(sizeof *out->skipped * (size_t)(n > 0 ? n : 1));
  out->samples = calloc((size_t)(st->n_samples > 0 ? st->n_samples : 1), sizeof *out->samples);
  mx_status status = skipped_total && out->loss && out->scale && out->skipped && out->samples
                         ? MX_OK
                         : mx__error(MX_OUT_OF_MEMORY, "mx_amp_report_write_html: out of memory");
  if (status == MX_OK && n > 0) {
    status = mx_to_host(mx_narrow(st->loss, 0, 0, n), out->loss, sizeof *out->loss * (size_t)n);
    if (status == MX_OK) status = mx_to_host(mx_narrow(st->scale, 0, 0, n), out->scale, sizeof *out->scale * (size_t)n);
    if (status == MX_OK)
      status = mx_to_host(mx_narrow(st->skipped, 0, 0, n), skipped_total, sizeof *skipped_total * (size_t)n);
  }
  for (int64_t t = 0; t < n && status == MX_OK; t++)
    out->skipped[t] = skipped_total[t] > (t ? skipped_total[t - 1] : 0);
  free(skipped_total);
  for (int i = 0; i < st->n_samples && status == MX_OK; i++, out->n_samples++)
    status = snapshot_sample(st, &st->samples[i], &out->samples[i]);
  mx_scope_end(scope);
  return status;
}

static void free_sites(mx__amp_site *sites, int n) {
  for (int j = 0; j < n; j++) free(sites[j].name), free(sites[j].type);
  free(sites);
}

void mx__amp_snapshot_free(mx__amp_snapshot *s) {
  for (int i = 0; i < s->n_samples; i++)
    free_sites(s->samples[i].layers, s->samples[i].n_layers), free_sites(s->samples[i].params, s->samples[i].n_params);
  free(s->samples);
  free(s->loss);
  free(s->scale);
  free(s->skipped);
  *s = (mx__amp_snapshot){0};
}
