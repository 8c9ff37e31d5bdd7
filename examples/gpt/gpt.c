/* Trains a character-level GPT on the text of Debian's fortune files (apt-get install fortunes), with autocast
 * and a GradScaler as --amp says, then samples text from it. `gpt --help` lists the flags: those of the other
 * demos (examples/train/flags.h) and three of its own for the sampling.
 *
 * The recipe: every tenth fortune is validation text, the rest training text; a step takes --batch windows of
 * the model's context length at random places of the training text (a function of the seed and the step, so a
 * resumed run takes the very windows it would have) and predicts each next character. An epoch is EPOCH_STEPS
 * steps; after each, the validation loss over VAL_WINDOWS fixed windows. AdamW under a one-cycle schedule, as
 * the other demos. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "examples/gpt/model.h"
#include "examples/gpt/text.h"
#include "examples/train/flags.h"
#include "examples/train/metrics.h"
#include "examples/train/progress.h"
#include "mixgrad.h"

#define FORTUNE_DIR "/usr/share/games/fortunes"
#define EPOCH_STEPS 100
#define VAL_WINDOWS 256
/* The GradScaler's guard rails and the exploded loss, as examples/train/trainer.c's. */
#define SCALE_FLOOR 1.0
#define MAX_SKIPS_IN_A_ROW 25
#define MAX_LOSS 1e4

static const char *const models[] = {"small", "tiny"};

/* The settings that define a run, by their keys in the checkpoint (examples/train/trainer.c's, but ranks). */
enum { MODEL, OPTIMIZER, AMP, BATCH, EPOCHS, LR, SCHEDULE, SEED, DATA, DATA_SOURCE, N_SETTINGS };
static const char *const setting_keys[N_SETTINGS] = {"model", "optimizer", "amp",  "batch", "epochs",
                                                     "lr",    "schedule",  "seed", "data",  "data_source"};

typedef struct {
  double temperature;
  int64_t top_k, chars;
  bool checkpoint_activations; /* --checkpoint-activations */
} sample_flags;

typedef struct {
  const mx_demo_flags *flags;
  const mx_gpt_config *config;
  const mx_gpt_text *text;
  mx_module *model;
  mx_optimizer *opt;
  mx_schedule *schedule;
  mx_scaler *scaler;
  mx_amp_stats *stats; /* --amp-report's watcher, or NULL */
  mx_demo_metrics metrics;
  char settings[N_SETTINGS][1100];
  const char *values[N_SETTINGS];
  int64_t total, skipped, skips_in_a_row;
} run_state;

static int fail(const char *what) {
  fprintf(stderr, "gpt: %s: %s\n", what, mx_last_error());
  return 1;
}

static mx_dtype autocast_dtype(mx_dtype amp) { return amp == MX_F32 ? MX_AUTOCAST_DEFAULT_DTYPE : amp; }

/* --- the flags of its own ------------------------------------------------------------------------------------- */

/* Takes --temperature, --top-k, --sample and --checkpoint-activations out of argv (the shared parser knows none
 * of them). Returns 0, or 2 after a message. */
static int take_sample_flags(int *argc, char **argv, sample_flags *s) {
  int kept = 1;
  for (int i = 1; i < *argc; i++) {
    const char *flag = argv[i];
    if (!strcmp(flag, "--checkpoint-activations")) {
      s->checkpoint_activations = true;
      continue;
    }
    bool ours = !strcmp(flag, "--temperature") || !strcmp(flag, "--top-k") || !strcmp(flag, "--sample");
    if (!ours) {
      argv[kept++] = argv[i];
      if (!strncmp(flag, "--", 2) && i + 1 < *argc && strcmp(flag, "--help")) argv[kept++] = argv[++i];
      continue;
    }
    if (i + 1 >= *argc) {
      fprintf(stderr, "gpt: %s needs a value (see --help)\n", flag);
      return 2;
    }
    const char *v = argv[++i];
    char *end;
    double x = strtod(v, &end);
    bool whole = *v && !*end && x == floor(x);
    if (!strcmp(flag, "--temperature") && (end == v || *end || !(x > 0) || x > 100)) {
      fprintf(stderr, "gpt: --temperature '%s': expected a number in (0, 100] (see --help)\n", v);
      return 2;
    }
    if (strcmp(flag, "--temperature") && (!whole || x < 0 || x > 100000)) {
      fprintf(stderr, "gpt: %s '%s': expected a whole number from 0 to 100000 (see --help)\n", flag, v);
      return 2;
    }
    if (!strcmp(flag, "--temperature")) s->temperature = x;
    else if (!strcmp(flag, "--top-k")) s->top_k = (int64_t)x;
    else s->chars = (int64_t)x;
  }
  argv[kept] = NULL;
  *argc = kept;
  return 0;
}

static void print_sample_usage(const sample_flags *d) {
  printf("\nAn epoch here is %d steps of random windows, a sample one predicted character; --synthetic N\n"
         "trains on N characters of generated sentences. The text sampled at the end:\n", EPOCH_STEPS);
  printf("  --temperature X    divides the logits (default %g; lower is more conservative)\n", d->temperature);
  printf("  --top-k N          draws from the N most likely characters only, 0 for all (default %lld)\n",
         (long long)d->top_k);
  printf("  --sample N         characters to sample, 0 for none (default %lld)\n", (long long)d->chars);
  printf("And for memory: --checkpoint-activations keeps no activations inside the transformer blocks; backward\n"
         "runs each block again (same gradients, bit for bit; about a third more compute).\n");
}

/* --- optimizer, steps, validation ------------------------------------------------------------------------------ */

static double warm_up(int64_t total_steps) { return total_steps >= 8 ? 0.25 : 0.5; }

static int make_optimizer(run_state *r) {
  const mx_demo_flags *f = r->flags;
  int n = mx_module_num_parameters(r->model);
  mx_tensor **params = malloc((size_t)n * sizeof *params);
  if (!params) return fail("out of memory");
  for (int i = 0; i < n; i++) params[i] = mx_module_parameter(r->model, i, NULL);
  if (!strcmp(f->optimizer, "sgd")) {
    mx_sgd_opts o = mx_sgd_defaults();
    o.lr = f->lr, o.momentum = 0.9, o.nesterov = true;
    r->opt = mx_sgd_new(n, params, &o);
  } else {
    mx_adam_opts o = mx_adamw_defaults();
    o.lr = f->lr;
    r->opt = mx_adamw_new(n, params, &o);
  }
  free(params);
  if (!r->opt) return fail("optimizer");
  if (r->total >= 3) {
    mx_one_cycle_opts oc = mx_one_cycle_defaults(f->lr, r->total);
    oc.pct_start = warm_up(r->total);
    if (!(r->schedule = mx_one_cycle_lr_new(r->opt, &oc))) return fail("schedule");
  }
  mx_scaler_opts so = mx_scaler_defaults();
  so.enabled = f->amp == MX_F16, so.growth_interval = 100;
  so.min_scale = SCALE_FLOOR, so.max_consecutive_skips = MAX_SKIPS_IN_A_ROW;
  r->scaler = mx_scaler_new(&so);
  return r->scaler ? 0 : fail("GradScaler");
}

/* --amp-report: histograms every 50 steps (at least 10 samples in a shorter run), named after the parameters and
 * layers, as the other demos take them (examples/train/trainer.c). */
static int watch_amp(run_state *r, int64_t stop) {
  int64_t every = stop >= 500 ? 50 : stop >= 10 ? stop / 10 : 1;
  if (!(r->stats = mx_amp_stats_new(r->scaler, every))) return fail("--amp-report");
  for (int i = 0; i < mx_module_num_parameters(r->model); i++) {
    const char *name;
    mx_tensor *p = mx_module_parameter(r->model, i, &name);
    if (mx_amp_stats_name_params(r->stats, 1, &p, &name) != MX_OK) return fail("--amp-report");
  }
  mx_module_set_output_hook(r->model, mx_amp_stats_output_hook, r->stats);
  mx_amp_report_reset();
  return 0;
}

/* The mean cross-entropy of logits (N, L, V) against y (N, L), and the characters it got right. */
static mx_tensor *lm_loss(const mx_tensor *logits, const mx_tensor *y, mx_reduction reduction, int64_t *correct) {
  int64_t v = mx_size(logits, -1);
  mx_tensor *flat = mx_reshape(logits, MX_SHAPE(-1, v)), *target = mx_reshape(y, MX_SHAPE(-1));
  mx_tensor *loss = mx_cross_entropy(flat, target, NULL, MX_IGNORE_INDEX, reduction, 0.0);
  if (loss && correct) *correct = (int64_t)mx_item(mx_sum(mx_eq(mx_argmax(flat, 1, false), target), MX_ALL_DIMS, false));
  return loss;
}

static bool to_device(const mx_demo_flags *f, mx_tensor **x, mx_tensor **y) {
  if (!*x || !*y) return false;
  if (f->device == MX_CPU) return true;
  *x = mx_to_device(*x, f->device), *y = *x ? mx_to_device(*y, f->device) : NULL;
  return *y != NULL;
}

static int diverged(const run_state *r, int64_t step, const char *why) {
  fprintf(stderr, "training diverged at step %lld: %s\n", (long long)step, why);
  fprintf(stderr, "nothing was saved after it%s; try a smaller --lr (this run's peak is %g)%s\n",
          r->flags->save ? " (an earlier checkpoint stays as it was)" : "", r->flags->lr,
          r->flags->amp == MX_F16 ? ", or --amp bf16 (float32's range, no loss scaling)" : "");
  return 3;
}

/* Step `step` (0-based): its windows, forward under autocast, scaled backward, scaler step, schedule step. */
static int train_step(run_state *r, int64_t step, mx_demo_step_row *row, int64_t *correct) {
  const mx_demo_flags *f = r->flags;
  int64_t b = f->batch, ctx = r->config->ctx;
  int64_t *start = malloc(sizeof *start * (size_t)b);
  if (!start) return fail("out of memory");
  for (int64_t i = 0; i < b; i++) start[i] = mx_gpt_window_start(f->seed, step, i, r->text->n_train, ctx);
  mx_scope *s = mx_scope_begin();
  mx_tensor *x, *y;
  mx_gpt_windows(r->text->train, start, b, ctx, &x, &y);
  free(start);
  int rc = 0;
  row->lr = mx_optimizer_lr(r->opt, 0);
  if (r->stats) mx_amp_stats_step_begin(r->stats);
  mx_optimizer_zero_grad(r->opt, true);
  mx_tensor *loss = NULL;
  if (to_device(f, &x, &y)) {
    MX_AUTOCAST(f->device, autocast_dtype(f->amp), f->amp != MX_F32, true) {
      loss = lm_loss(mx_module_forward(r->model, x), y, MX_REDUCTION_MEAN, correct);
    }
  }
  mx_scaler_step_info info = {.stepped = true, .scale = 1.0};
  bool stepped = loss && mx_backward(mx_scaler_scale(r->scaler, loss), NULL, false) == MX_OK &&
                 mx_scaler_step(r->scaler, r->opt, &info) == MX_OK;
  if (stepped) r->skips_in_a_row = info.stepped ? 0 : r->skips_in_a_row + 1;
  char why[600];
  if (!stepped) {
    rc = fail("training step");
  } else if (mx_scaler_update(r->scaler) != MX_OK) {
    snprintf(why, sizeof why, "%s", mx_last_error());
    rc = r->skips_in_a_row > MAX_SKIPS_IN_A_ROW ? diverged(r, step + 1, why) : fail("training step");
  } else if (!info.stepped && info.scale <= SCALE_FLOOR) {
    snprintf(why, sizeof why, "the gradients overflow float16 even at the loss scale's floor, %g", SCALE_FLOOR);
    rc = diverged(r, step + 1, why);
  } else if (r->schedule && mx_schedule_step(r->schedule) != MX_OK) {
    rc = fail("training step");
  } else if (r->stats && mx_amp_stats_step_end(r->stats, loss) != MX_OK) {
    rc = fail("--amp-report");
  } else {
    row->loss = mx_item(loss);
    row->accuracy = (double)*correct / (double)(b * ctx);
    row->scale = info.scale, row->skipped = !info.stepped;
    r->skipped += !info.stepped;
  }
  mx_scope_end(s);
  return rc;
}

/* The validation loss and accuracy over VAL_WINDOWS windows spread evenly over the validation text, in eval mode
 * without gradients, under the run's autocast. */
static int validate(run_state *r, double *loss, double *accuracy) {
  const mx_demo_flags *f = r->flags;
  int64_t ctx = r->config->ctx, n = r->text->n_val - ctx - 1, chunk = f->batch < 64 ? f->batch : 64;
  double sum = 0;
  int64_t right = 0, done = 0;
  int rc = 0;
  mx_module_train(r->model, false);
  for (int64_t first = 0; rc == 0 && first < VAL_WINDOWS; first += chunk) {
    int64_t b = VAL_WINDOWS - first < chunk ? VAL_WINDOWS - first : chunk, start[64];
    for (int64_t i = 0; i < b; i++) start[i] = (first + i) * n / VAL_WINDOWS;
    mx_scope *s = mx_scope_begin();
    mx_tensor *x, *y, *l = NULL;
    int64_t correct = 0;
    mx_gpt_windows(r->text->val, start, b, ctx, &x, &y);
    MX_NO_GRAD {
      if (to_device(f, &x, &y)) {
        MX_AUTOCAST(f->device, autocast_dtype(f->amp), f->amp != MX_F32, true) {
          l = lm_loss(mx_module_forward(r->model, x), y, MX_REDUCTION_SUM, &correct);
        }
      }
    }
    if (!l) rc = fail("validation");
    else sum += mx_item(l), right += correct, done += b * ctx;
    mx_scope_end(s);
  }
  mx_module_train(r->model, true);
  *loss = sum / (double)done, *accuracy = (double)right / (double)done;
  return rc;
}

static int save(run_state *r, int64_t step) {
  mx_checkpoint ck = {r->model, r->opt, r->scaler, NULL, r->schedule, step, step / EPOCH_STEPS};
  mx_checkpoint_settings settings = {N_SETTINGS, (const char **)setting_keys, r->values};
  return mx_checkpoint_save_with_settings(r->flags->save, &ck, &settings) == MX_OK ? 0 : fail("--save");
}

/* From step to stop, a validation pass and a checkpoint after each epoch (and at the stop). */
static int train(run_state *r, int64_t step, int64_t stop, double *val_loss) {
  const mx_demo_flags *f = r->flags;
  bool scaled = mx_scaler_is_enabled(r->scaler);
  int64_t chars = f->batch * r->config->ctx;
  while (step < stop) {
    int epoch = (int)(step / EPOCH_STEPS);
    int64_t end = (epoch + 1) * (int64_t)EPOCH_STEPS < stop ? (epoch + 1) * (int64_t)EPOCH_STEPS : stop;
    mx_demo_progress bar;
    double t0 = mx_demo_now();
    mx_demo_progress_begin(&bar, stdout, epoch, f->epochs, EPOCH_STEPS, step - (int64_t)epoch * EPOCH_STEPS, scaled);
    for (; step < end; step++) {
      mx_demo_step_row row = {.step = step + 1, .epoch = epoch + 1};
      int64_t correct = 0;
      int rc = train_step(r, step, &row, &correct);
      if (rc) return rc;
      if (!(row.loss <= MAX_LOSS)) {
        char why[64];
        snprintf(why, sizeof why, "the loss is %g", row.loss);
        return diverged(r, row.step, why);
      }
      if (!mx_demo_metrics_add_step(&r->metrics, row)) return fail("metrics: out of memory");
      mx_demo_progress_step(&bar, chars, row.loss, correct, mx_scaler_get_scale(r->scaler), r->skipped);
    }
    mx_demo_progress_end(&bar, mx_scaler_get_scale(r->scaler), r->skipped);
    double accuracy;
    if (validate(r, val_loss, &accuracy)) return 1;
    if (!(*val_loss <= MAX_LOSS)) return diverged(r, step, "the validation loss is not finite");
    printf("  validation: loss %.4f (%.3f bits per character)  accuracy %.2f%%\n", *val_loss, *val_loss / log(2.0),
           100 * accuracy);
    mx_demo_epoch_row er = {.epoch = epoch + 1, .step = step, .test_loss = *val_loss, .test_accuracy = accuracy,
                            .seconds = mx_demo_now() - t0};
    er.train_loss = bar.samples ? bar.loss_sum / (double)bar.samples : NAN;
    er.train_accuracy = bar.samples ? (double)bar.correct / (double)bar.samples : NAN;
    if (!mx_demo_metrics_add_epoch(&r->metrics, er)) return fail("metrics: out of memory");
    if (f->save && save(r, step)) return 1;
  }
  return 0;
}

/* --- the run's settings and a resume -------------------------------------------------------------------------- */

static void describe_run(run_state *r) {
  const mx_demo_flags *f = r->flags;
  const mx_gpt_text *t = r->text;
#define SET(i, ...) snprintf(r->settings[i], sizeof r->settings[i], __VA_ARGS__)
  SET(MODEL, "%s", f->model);
  SET(OPTIMIZER, "%s", f->optimizer);
  SET(AMP, "%s", mx_demo_amp_name(f->amp));
  SET(BATCH, "%lld", (long long)f->batch);
  SET(EPOCHS, "%d", f->epochs);
  for (int digits = 1; digits <= 17; digits++) { /* the lr in the fewest digits that read back as it */
    SET(LR, "%.*g", digits, f->lr);
    if (strtod(r->settings[LR], NULL) == f->lr) break;
  }
  if (r->total >= 3) SET(SCHEDULE, "one-cycle over %lld steps with %g%% warm-up", (long long)r->total,
                         100 * warm_up(r->total));
  else SET(SCHEDULE, "the peak lr for all %lld steps", (long long)r->total);
  SET(SEED, "%llu", (unsigned long long)f->seed);
  uLong crc = crc32_z(crc32_z(crc32_z(0, NULL, 0), t->train, (size_t)t->n_train), t->val, (size_t)t->n_val);
  SET(DATA, "%lld + %lld characters with CRC-32 %08lx", (long long)t->n_train, (long long)t->n_val,
      (unsigned long)crc);
  if (f->synthetic) SET(DATA_SOURCE, "--synthetic %lld", (long long)f->synthetic);
  else SET(DATA_SOURCE, "--data %s", f->data);
#undef SET
  for (int i = 0; i < N_SETTINGS; i++) r->values[i] = r->settings[i];
}

/* Whether a difference in setting i may go on: --allow-change names it; the schedule follows an allowed change
 * of the run's length (epochs, batch) or peak (lr); the model and the optimizer never change. */
static bool change_allowed(const mx_demo_flags *f, const bool *differs, int i) {
  if (i == MODEL || i == OPTIMIZER || i == DATA_SOURCE) return i == DATA_SOURCE;
  if (mx_demo_change_allowed(f, setting_keys[i])) return true;
  return i == SCHEDULE && ((differs[EPOCHS] && mx_demo_change_allowed(f, "epochs")) ||
                           (differs[BATCH] && mx_demo_change_allowed(f, "batch")));
}

/* Goes on from --resume's checkpoint after comparing its settings with this run's: 0 (*step where it stopped),
 * 2 after listing differences --allow-change does not cover, 1 on an error. */
static int resume(run_state *r, int64_t *step) {
  const mx_demo_flags *f = r->flags;
  mx_checkpoint_settings saved;
  if (mx_checkpoint_settings_read(f->resume, &saved) != MX_OK) return fail("--resume");
  bool differs[N_SETTINGS] = {false}, refused = false;
  char was[N_SETTINGS][1100];
  for (int i = 0; i < N_SETTINGS; i++) {
    const char *v = NULL;
    for (int k = 0; k < saved.n && !v; k++)
      if (!strcmp(saved.keys[k], setting_keys[i])) v = saved.values[k];
    snprintf(was[i], sizeof was[i], "%s", v ? v : "(none)");
    differs[i] = saved.n > 0 && (!v || strcmp(v, r->settings[i]));
  }
  mx_checkpoint_settings_free(&saved);
  for (int i = 0; i < N_SETTINGS; i++) refused |= differs[i] && !change_allowed(f, differs, i);
  if (refused) {
    fprintf(stderr, "--resume %s: the checkpoint's run differs from this one:\n", f->resume);
    for (int i = 0; i < DATA_SOURCE; i++)
      if (differs[i])
        fprintf(stderr, "  %s: saved %s, given %s%s\n", setting_keys[i], was[i], r->settings[i],
                change_allowed(f, differs, i) ? " (allowed)" : "");
    fprintf(stderr, "the model and the optimizer cannot change; the rest can with --allow-change (see --help)\n");
    return 2;
  }
  bool rebuild = differs[SCHEDULE] || differs[LR], fresh_scaler = differs[AMP];
  mx_checkpoint ck = {r->model, r->opt, fresh_scaler ? NULL : r->scaler, NULL, rebuild ? NULL : r->schedule, 0, 0};
  if (mx_checkpoint_load(f->resume, &ck) != MX_OK) return fail("--resume");
  if (ck.step < 0 || ck.step > r->total) {
    fprintf(stderr, "--resume %s: its step %lld is outside this run's %lld steps\n", f->resume, (long long)ck.step,
            (long long)r->total);
    return 1;
  }
  if (rebuild && !r->schedule && mx_optimizer_set_lr(r->opt, 0, f->lr) != MX_OK) return fail("--resume");
  for (int64_t i = 0; rebuild && r->schedule && i < ck.step; i++) /* as if the run had started with these flags */
    if (mx_schedule_step(r->schedule) != MX_OK) return fail("--resume: rebuilding the schedule");
  *step = ck.step;
  printf("resuming %s at step %lld (epoch %lld)\n", f->resume, (long long)ck.step,
         (long long)(ck.step / EPOCH_STEPS + 1));
  for (int i = 0; i < DATA_SOURCE; i++)
    if (differs[i]) printf("--allow-change: %s %s -> %s from step %lld\n", setting_keys[i], was[i], r->settings[i],
                           (long long)ck.step);
  return 0;
}

/* --- the end: the sample, the files, the summary ---------------------------------------------------------------- */

static int report(run_state *r, const sample_flags *sf, double val_loss, double seconds) {
  const mx_demo_flags *f = r->flags;
  bool scaled = mx_scaler_is_enabled(r->scaler);
  if (sf->chars > 0) {
    int64_t prompt = mx_gpt_token('\n'), *out = malloc(sizeof *out * (size_t)sf->chars);
    mx_generator *gen = mx_generator_new(f->seed);
    if (!out || !gen || mx_gpt_sample(r->model, &prompt, 1, sf->chars, sf->temperature, sf->top_k, gen, out) != MX_OK) {
      free(out);
      mx_generator_free(gen);
      return fail("sampling");
    }
    printf("\nsampled at temperature %g, top-k %lld:\n----\n", sf->temperature, (long long)sf->top_k);
    for (int64_t i = 0; i < sf->chars; i++) putchar(mx_gpt_char((int)out[i]));
    printf("\n----\n");
    free(out);
    mx_generator_free(gen);
  }
  if (scaled)
    printf("\nGradScaler: final scale %g, %lld of %lld steps skipped for inf/NaN gradients\n",
           mx_scaler_get_scale(r->scaler), (long long)r->skipped, (long long)r->metrics.n_steps);
  if (f->metrics && !mx_demo_metrics_write_csv(&r->metrics, f->metrics)) return 1;
  char title[128];
  snprintf(title, sizeof title, "character-level GPT (%s), amp %s, %s", f->model, mx_demo_amp_name(f->amp),
           f->optimizer);
  if (f->plot && !mx_demo_metrics_plot(&r->metrics, f->plot, title, scaled)) return 1;
  long secs = (long)(seconds + 0.5);
  printf("\ncharacter-level GPT (%s): ", f->model);
  if (r->metrics.n_epochs) printf("validation loss %.4f", val_loss);
  else printf("no validation pass");
  printf(" after %lld steps in %ld:%02ld (amp %s)\n", (long long)r->metrics.n_steps, secs / 60, secs % 60,
         mx_demo_amp_name(f->amp));
  if (f->metrics) printf("curves: %s\n", f->metrics);
  if (f->plot) printf("picture: %s\n", f->plot);
  if (r->stats) {
    char path[4096], command[256];
    snprintf(path, sizeof path, "%s/index.html", f->amp_report);
    snprintf(command, sizeof command, "build/examples/gpt/gpt --model %s --amp %s --epochs %d --batch %lld --seed %llu",
             f->model, mx_demo_amp_name(f->amp), f->epochs, (long long)f->batch, (unsigned long long)f->seed);
    mx_amp_report_opts o = {.title = title, .amp = f->amp, .command = command};
    if (mx_amp_report_write_html(path, r->stats, &o) != MX_OK) return fail("--amp-report");
    printf("AMP report: %s\n", path);
  }
  return 0;
}

static int run(run_state *r, const sample_flags *sf) {
  const mx_demo_flags *f = r->flags;
  if (f->device == MX_CUDA && mx_cuda_device_count() <= 0) {
    fprintf(stderr, "--device cuda: no CUDA device is available here (%s); use --device cpu\n",
            mx_last_error()[0] ? mx_last_error() : "none found");
    return 1;
  }
  if (!(r->model = mx_gpt_new(r->config))) return fail("model");
  mx_gpt_checkpoint_blocks(r->model, sf->checkpoint_activations);
  if (f->device != MX_CPU && mx_module_to(r->model, f->device) != MX_OK) return fail("--device cuda");
  r->total = (int64_t)f->epochs * EPOCH_STEPS;
  describe_run(r);
  int rc = make_optimizer(r);
  int64_t step = 0;
  if (rc == 0 && f->resume) rc = resume(r, &step);
  if (rc) return rc;
  printf("character-level GPT (%s): %lld parameters, %lld + %lld characters of text, %lld steps of %lld windows of "
         "%lld, amp %s, %s, lr %g\n", f->model, (long long)mx_module_parameter_count(r->model),
         (long long)r->text->n_train, (long long)r->text->n_val, (long long)r->total, (long long)f->batch,
         (long long)r->config->ctx, mx_demo_amp_name(f->amp), f->optimizer, f->lr);
  int64_t stop = f->steps && f->steps < r->total ? f->steps : r->total;
  if (f->amp_report && (rc = watch_amp(r, stop))) return rc;
  double t0 = mx_demo_now(), val_loss = NAN;
  rc = train(r, step, stop, &val_loss);
  return rc ? rc : report(r, sf, val_loss, mx_demo_now() - t0);
}

int main(int argc, char **argv) {
  mx_demo_flags flags = {.model = "small", .amp = MX_BF16, .device = MX_CPU, .epochs = 4, .batch = 32, .lr = 3e-3,
                         .optimizer = "adam", .seed = 1, .data = FORTUNE_DIR};
  sample_flags sample = {.temperature = 0.8, .top_k = 10, .chars = 400};
  mx_demo_usage usage = {
      .program = "gpt",
      .summary = "Trains a character-level GPT (pre-norm Transformer blocks under a causal mask) on fortune files.",
      .models = models, .n_models = 2,
      .data_help = "a folder of plain-text fortune files (default " FORTUNE_DIR ", from apt-get install fortunes)"};
  if (take_sample_flags(&argc, argv, &sample)) return 2;
  int parsed = mx_demo_parse_flags(argc, argv, &usage, &flags);
  if (parsed == 1) print_sample_usage(&sample);
  if (parsed) return parsed == 1 ? 0 : 2;
  mx_manual_seed(flags.seed);

  mx_gpt_text text;
  if (flags.synthetic ? mx_gpt_text_synthetic(flags.synthetic, flags.seed, &text) : mx_gpt_text_load(flags.data, &text)) {
    if (!flags.synthetic && !strcmp(flags.data, FORTUNE_DIR))
      fprintf(stderr, "gpt: install the text with: sudo apt-get install fortunes\n");
    return 1;
  }
  run_state r = {.flags = &flags, .config = mx_gpt_config_named(flags.model), .text = &text};
  if (text.n_val <= r.config->ctx + 1 || text.n_train <= r.config->ctx + 1) {
    fprintf(stderr, "gpt: the text is shorter than a window of %lld characters\n", (long long)r.config->ctx);
    mx_gpt_text_free(&text);
    return 1;
  }
  int rc = run(&r, &sample);
  mx_amp_stats_free(r.stats);
  mx_scaler_free(r.scaler);
  mx_schedule_free(r.schedule);
  mx_optimizer_free(r.opt);
  mx_module_free(r.model);
  mx_demo_metrics_free(&r.metrics);
  mx_gpt_text_free(&text);
  return rc;
}
