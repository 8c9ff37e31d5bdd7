#include "examples/train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "examples/train/metrics.h"
#include "examples/train/progress.h"
#include "mixgrad.h"

/* The GradScaler's guard rails: below a loss scale of 1 the scaler would
 * be shrinking gradients that overflow float16 even unscaled, and no
 * healthy run skips 25 steps in a row (each halves the scale: 2^25 down). A
 * step skipped at the floor, or one more skip in a row, is divergence. */
#define SCALE_FLOOR 1.0
#define MAX_SKIPS_IN_A_ROW 25
/* A classifier's cross-entropy starts near log(classes) (2.3 for 10) and
 * falls: one above this has exploded, even while it is finite. */
#define MAX_LOSS 1e4

/* The settings that define a run, by their keys in the checkpoint, in the
 * order a refused resume lists them; the data's source (folder or
 * --synthetic) only explains a difference in the data. */
enum { MODEL, OPTIMIZER, AMP, BATCH, EPOCHS, LR, SCHEDULE, SEED, DATA, RANKS, DATA_SOURCE, N_SETTINGS };
static const char *const setting_keys[N_SETTINGS] = {"model", "optimizer", "amp",  "batch", "epochs",     "lr",
                                                     "schedule", "seed",   "data", "ranks", "data_source"};
/* How a difference names each: its flag, or what it is. */
static const char *const setting_labels[N_SETTINGS] = {"--model", "--optimizer", "--amp", "--batch", "--epochs", "--lr",
                                                       "schedule", "--seed", "data", "ranks", "data source"};

/* Each at most this long (a longer --data folder is cut short in the texts). */
#define SETTING_CHARS 1024

typedef struct {
  char text[N_SETTINGS][SETTING_CHARS];
  const char *values[N_SETTINGS]; /* the texts */
} run_settings;

/* Everything a run makes, freed in one place. */
typedef struct {
  const mx_demo_task *task;
  const mx_demo_flags *flags;
  mx_optimizer *opt;
  mx_schedule *schedule;
  mx_scaler *scaler;
  mx_amp_stats *stats; /* --amp-report's watcher, or NULL */
  mx_loader *train, *test;
  mx_demo_metrics metrics;
  run_settings settings;
  int64_t skipped, skips_in_a_row;
  /* data parallelism: this process is rank `rank` of `world` (1: alone) */
  mx_process_group *group;
  int rank, world;
  /* --cuda-graph: the captured step, its static inputs and outputs */
  mx_cuda_graph *graph;
  mx_tensor *static_x, *static_y, *graph_logits, *graph_loss;
} run_state;

static int fail(const char *what) {
  fprintf(stderr, "%s: %s\n", what, mx_last_error());
  return 1;
}

/* A batch from the loader (made on the CPU) moved to the run's device, its
 * images converted once to channels-last with --channels-last. */
static bool batch_to_device(const mx_demo_flags *f, mx_tensor **x, mx_tensor **y) {
  if (f->channels_last) {
    mx_tensor *images = mx_to_channels_last(*x);
    mx_release(*x);
    *x = images;
    if (!images) {
      mx_release(*y);
      *y = NULL;
      return false;
    }
  }
  if (f->device == MX_CPU) return true;
  mx_tensor *xd = mx_to_device(*x, f->device), *yd = xd ? mx_to_device(*y, f->device) : NULL;
  mx_release(*x);
  mx_release(*y);
  if (!yd) mx_release(xd), xd = NULL;
  *x = xd, *y = yd;
  return yd != NULL;
}

static int64_t count_correct(const mx_tensor *logits, const mx_tensor *y) {
  return (int64_t)mx_item(mx_sum(mx_eq(mx_argmax(logits, 1, false), y), MX_ALL_DIMS, false));
}

/* Adds v[0..n) up over the ranks, so each rank reports the whole batch or
 * test set rather than its share. */
static mx_status sum_over_ranks(run_state *r, double *v, int n) {
  if (r->world == 1) return MX_OK;
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_from_data(v, MX_SHAPE(n), MX_F64, MX_CPU);
  mx_status st = t ? mx_dist_all_reduce(r->group, t, MX_DIST_SUM) : mx_last_status();
  if (st == MX_OK) st = mx_to_host(t, v, (size_t)n * sizeof *v);
  mx_scope_end(s);
  return st;
}

/* The one-cycle schedule's warm-up, a fraction of the run's steps. */
static double warm_up(int64_t total_steps) { return total_steps >= 8 ? 0.25 : 0.5; }

/* Says (rank 0 does: every rank finds it) that training diverged at step
 * and why, and what to try; returns MX_DEMO_DIVERGED. Nothing is saved
 * after this. */
static int diverged(const run_state *r, int64_t step, const char *why) {
  const mx_demo_flags *f = r->flags;
  if (r->rank != 0) return MX_DEMO_DIVERGED;
  fprintf(stderr, "training diverged at step %lld: %s\n", (long long)step, why);
  fprintf(stderr, "nothing was saved after it%s; try a smaller --lr (this run's peak is %g)%s, or check the data\n",
          f->save ? " (an earlier checkpoint stays as it was)" : "", f->lr,
          f->amp == MX_F16 ? ", --amp bf16 (float32's range, no loss scaling)" : "");
  return MX_DEMO_DIVERGED;
}

/* --amp-report: histograms every 50 steps (at least 10 samples in a shorter
 * run), named after the model's parameters and layers; the per-op counts
 * start afresh. */
static int watch_amp(run_state *r, int64_t total_steps) {
  int64_t stop = r->flags->steps && r->flags->steps < total_steps ? r->flags->steps : total_steps;
  int64_t every = stop >= 500 ? 50 : stop >= 10 ? stop / 10 : 1;
  mx_module *m = r->task->model;
  r->stats = mx_amp_stats_new(r->scaler, every);
  for (int i = 0; r->stats && i < mx_module_num_parameters(m); i++) {
    const char *name;
    mx_tensor *p = mx_module_parameter(m, i, &name);
    if (mx_amp_stats_name_params(r->stats, 1, &p, &name) != MX_OK) return fail("--amp-report");
  }
  if (!r->stats) return fail("--amp-report");
  mx_module_set_output_hook(m, mx_amp_stats_output_hook, r->stats);
  mx_amp_report_reset();
  return 0;
}

/* The optimizer over every parameter, its one-cycle schedule over the whole
 * run, and the GradScaler (enabled for f16 only: bf16 has float32's range). */
static int make_optimizer(run_state *r, int64_t total_steps) {
  const mx_demo_task *t = r->task;
  int n = mx_module_num_parameters(t->model);
  mx_tensor **params = malloc((size_t)n * sizeof *params);
  if (!params) return fail("out of memory");
  for (int i = 0; i < n; i++) params[i] = mx_module_parameter(t->model, i, NULL);
  if (!strcmp(r->flags->optimizer, "sgd")) {
    mx_sgd_opts o = mx_sgd_defaults();
    o.lr = r->flags->lr, o.momentum = t->sgd_momentum, o.nesterov = true, o.weight_decay = t->weight_decay;
    r->opt = mx_sgd_new(n, params, &o);
  } else {
    mx_adam_opts o = mx_adamw_defaults();
    o.lr = r->flags->lr, o.weight_decay = t->weight_decay;
    r->opt = mx_adamw_new(n, params, &o);
  }
  free(params);
  if (!r->opt) return fail("optimizer");
  /* A quarter of the run warming up; OneCycleLR needs both phases to hold
   * a step, so short runs warm up for half, and runs under 3 steps keep
   * the peak lr. */
  if (total_steps >= 3 && !r->flags->cuda_graph) { /* a captured step keeps the lr it was captured with */
    mx_one_cycle_opts oc = mx_one_cycle_defaults(r->flags->lr, total_steps);
    oc.pct_start = warm_up(total_steps);
    r->schedule = mx_one_cycle_lr_new(r->opt, &oc);
    if (!r->schedule) return fail("schedule");
  }
  mx_scaler_opts so = mx_scaler_defaults();
  so.enabled = r->flags->amp == MX_F16;
  /* PyTorch's default waits 2000 clean steps before growing, longer than a
   * demo runs; 100 lets the picture show the scale finding its level. */
  so.growth_interval = 100;
  /* a captured step cannot read the skips on the host: replay_step counts them */
  so.min_scale = SCALE_FLOOR, so.max_consecutive_skips = r->flags->cuda_graph ? 0 : MAX_SKIPS_IN_A_ROW;
  r->scaler = mx_scaler_new(&so);
  if (!r->scaler) return fail("GradScaler");
  return r->flags->amp_report ? watch_amp(r, total_steps) : 0;
}

/* With several ranks each takes its shard of every epoch (the same
 * shuffle everywhere) in batches of batch / world, so a step's batches
 * together are the batch one process would take: the recipe and the
 * number of steps stay the same. The test set is sharded without padding,
 * so the ranks' counts add up to every test sample once. */
static int make_loaders(run_state *r) {
  const mx_demo_task *t = r->task;
  r->train = mx_loader_new(t->train, &(mx_loader_options){.batch_size = r->flags->batch / r->world, .shuffle = true,
                                                           .seed = r->flags->seed, .transform = t->train_transform,
                                                           .background = true, .shards = r->world, .shard = r->rank});
  if (!r->train) return fail("training data");
  if (t->test) {
    r->test = mx_loader_new(t->test, &(mx_loader_options){.batch_size = 500, .transform = t->test_transform,
                                                          .background = true, .shards = r->world, .shard = r->rank,
                                                          .uneven_shards = true});
    if (!r->test) return fail("test data");
  }
  return 0;
}

/* One step: forward under autocast, scaled backward, the gradients
 * averaged over the ranks, scaler step and update, schedule step. Fills the
 * step's row and the samples and right answers of the whole batch. */
static int train_step(run_state *r, const mx_tensor *x, const mx_tensor *y, mx_demo_step_row *row,
                      int64_t *samples, int64_t *correct) {
  const mx_demo_flags *f = r->flags;
  mx_scope *s = mx_scope_begin();
  int rc = 0;
  row->lr = mx_optimizer_lr(r->opt, 0);
  if (r->stats) mx_amp_stats_step_begin(r->stats);
  mx_optimizer_zero_grad(r->opt, true);
  mx_tensor *logits = NULL, *loss = NULL;
  MX_AUTOCAST(f->device, f->amp == MX_F32 ? MX_AUTOCAST_DEFAULT_DTYPE : f->amp, f->amp != MX_F32, true) {
    logits = mx_module_forward(r->task->model, x);
    loss = logits ? mx_cross_entropy(logits, y, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, r->task->label_smoothing)
                  : NULL;
  }
  mx_scaler_step_info info = {.stepped = true, .scale = 1.0};
  bool stepped = loss && mx_backward(mx_scaler_scale(r->scaler, loss), NULL, false) == MX_OK &&
                 /* alone, no averaging: a one-GPU run needs no NCCL (mx_ddp_average_gradients would start it) */
                 (r->world == 1 || mx_ddp_average_gradients(r->group, r->task->model) == MX_OK) &&
                 mx_ddp_unscale(r->group, r->scaler, r->opt) == MX_OK &&
                 mx_scaler_step(r->scaler, r->opt, &info) == MX_OK;
  if (stepped) r->skips_in_a_row = info.stepped ? 0 : r->skips_in_a_row + 1;
  char why[600];
  if (!stepped) {
    rc = fail("training step");
  } else if (mx_scaler_update(r->scaler) != MX_OK) { /* its guard rail, or a failure */
    snprintf(why, sizeof why, "%s", mx_last_error());
    rc = r->skips_in_a_row > MAX_SKIPS_IN_A_ROW ? diverged(r, row->step, why) : fail("training step");
  } else if (!info.stepped && info.scale <= SCALE_FLOOR) {
    snprintf(why, sizeof why, "the gradients overflow float16 even at the loss scale's floor, %g", SCALE_FLOOR);
    rc = diverged(r, row->step, why);
  } else if (r->schedule && mx_schedule_step(r->schedule) != MX_OK) {
    rc = fail("training step");
  } else if (r->stats && mx_amp_stats_step_end(r->stats, loss) != MX_OK) {
    rc = fail("--amp-report");
  } else {
    /* the loss summed over the batch, its right answers and its size */
    double batch = (double)mx_shape_get(y).d[0];
    double sums[3] = {mx_item(loss) * batch, (double)count_correct(logits, y), batch};
    if (sum_over_ranks(r, sums, 3) != MX_OK) {
      rc = fail("training step");
    } else {
      row->loss = sums[0] / sums[2];
      row->accuracy = sums[1] / sums[2];
      *samples = (int64_t)sums[2], *correct = (int64_t)sums[1];
      row->scale = info.scale;
      row->skipped = !info.stepped;
      r->skipped += !info.stepped;
    }
  }
  mx_scope_end(s);
  return rc;
}

/* --cuda-graph: train_step's work on the static inputs, without its host
 * reads (the scaler's step info, the loss), so that it can be captured. */
static mx_status captured_step(void *ctx) {
  run_state *r = ctx;
  const mx_demo_flags *f = r->flags;
  mx_status status = mx_optimizer_zero_grad(r->opt, true);
  mx_scope *s = mx_scope_begin();
  mx_tensor *logits = NULL, *loss = NULL;
  MX_AUTOCAST(f->device, f->amp == MX_F32 ? MX_AUTOCAST_DEFAULT_DTYPE : f->amp, f->amp != MX_F32, true) {
    logits = mx_module_forward(r->task->model, r->static_x);
    loss = logits ? mx_cross_entropy(logits, r->static_y, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN,
                                     r->task->label_smoothing)
                  : NULL;
  }
  if (status == MX_OK && !loss) status = mx_last_status();
  if (status == MX_OK) status = mx_backward(mx_scaler_scale(r->scaler, loss), NULL, false);
  if (status == MX_OK) status = mx_scaler_step(r->scaler, r->opt, NULL);
  if (status == MX_OK) status = mx_scaler_update(r->scaler);
  if (status == MX_OK) r->graph_logits = mx_keep(mx_detach(logits)), r->graph_loss = mx_keep(mx_detach(loss));
  mx_scope_end(s);
  return status;
}

/* After the first full batch's eager step made what a step makes lazily
 * (the scaler's tensors, cuDNN's choices), so no warm-up is needed: the
 * step on static inputs of that batch's shape, captured (nothing runs). */
static int capture(run_state *r, const mx_tensor *x, const mx_tensor *y) {
  r->static_x = mx_clone(x), r->static_y = mx_clone(y);
  r->graph = r->static_x && r->static_y ? mx_cuda_graph_capture(captured_step, r, 0) : NULL;
  return r->graph ? 0 : fail("--cuda-graph");
}

/* A full batch under --cuda-graph: copied into the static inputs, the step
 * replayed, the row read from its outputs and the scaler's counters. */
static int replay_step(run_state *r, const mx_tensor *x, const mx_tensor *y, mx_demo_step_row *row,
                       int64_t *samples, int64_t *correct) {
  row->lr = mx_optimizer_lr(r->opt, 0);
  int64_t skipped = mx_scaler_stats_get(r->scaler).skipped;
  if (mx_copy_(r->static_x, x) != MX_OK || mx_copy_(r->static_y, y) != MX_OK || mx_cuda_graph_replay(r->graph) != MX_OK)
    return fail("training step (--cuda-graph)");
  row->skipped = mx_scaler_stats_get(r->scaler).skipped != skipped;
  row->scale = mx_scaler_get_scale(r->scaler);
  r->skipped += row->skipped;
  r->skips_in_a_row = row->skipped ? r->skips_in_a_row + 1 : 0;
  if (r->skips_in_a_row > MAX_SKIPS_IN_A_ROW || (row->skipped && row->scale <= SCALE_FLOOR))
    return diverged(r, row->step, "the gradients keep overflowing float16 (--cuda-graph)");
  double batch = (double)mx_shape_get(y).d[0];
  row->loss = mx_item(r->graph_loss);
  *correct = count_correct(r->graph_logits, r->static_y);
  row->accuracy = (double)*correct / batch;
  *samples = (int64_t)batch;
  return 0;
}

typedef struct {
  double loss, accuracy;
  int64_t *right, *seen; /* per class */
} eval_result;

/* The test set in eval mode without gradients, under the same autocast. */
static int evaluate(run_state *r, eval_result *out) {
  const mx_demo_task *t = r->task;
  int classes = t->test->classes;
  memset(out->right, 0, (size_t)classes * sizeof *out->right);
  memset(out->seen, 0, (size_t)classes * sizeof *out->seen);
  double loss_sum = 0;
  int64_t n = 0, right = 0;
  mx_module_train(t->model, false);
  mx_loader_reset(r->test, 0);
  mx_tensor *x, *y;
  int rc = 0;
  int64_t *pred = NULL, *label = NULL;
  while (rc == 0 && mx_loader_next(r->test, &x, &y)) {
    if (!batch_to_device(r->flags, &x, &y)) {
      rc = fail("test data to the device");
      break;
    }
    int64_t b = mx_shape_get(y).d[0];
    mx_scope *s = mx_scope_begin();
    int64_t *p = realloc(pred, (size_t)b * sizeof *p), *l = p ? realloc(label, (size_t)b * sizeof *l) : NULL;
    if (p) pred = p;
    if (l) label = l;
    mx_tensor *loss = NULL, *argmax = NULL;
    MX_NO_GRAD {
      MX_AUTOCAST(r->flags->device, r->flags->amp == MX_F32 ? MX_AUTOCAST_DEFAULT_DTYPE : r->flags->amp,
                  r->flags->amp != MX_F32, true) {
        mx_tensor *logits = mx_module_forward(t->model, x);
        loss = logits ? mx_cross_entropy(logits, y, NULL, MX_IGNORE_INDEX, MX_REDUCTION_SUM, 0.0) : NULL;
        argmax = logits ? mx_argmax(logits, 1, false) : NULL;
      }
    }
    if (!p || !l) rc = fail("evaluation: out of memory");
    else if (!loss || !argmax || mx_to_host(argmax, pred, (size_t)b * sizeof *pred) != MX_OK ||
             mx_to_host(y, label, (size_t)b * sizeof *label) != MX_OK)
      rc = fail("evaluation");
    else {
      loss_sum += mx_item(loss);
      for (int64_t i = 0; i < b; i++) {
        out->seen[label[i]]++;
        out->right[label[i]] += pred[i] == label[i];
        right += pred[i] == label[i];
      }
      n += b;
    }
    mx_scope_end(s);
    mx_release(x);
    mx_release(y);
  }
  free(pred);
  free(label);
  mx_module_train(t->model, true);
  if (rc == 0 && mx_loader_status(r->test) != MX_OK) rc = fail("test data");
  if (rc == 0 && r->world > 1) { /* every rank's share, added up */
    double *v = malloc((3 + 2 * (size_t)classes) * sizeof *v);
    if (v) {
      v[0] = loss_sum, v[1] = (double)n, v[2] = (double)right;
      for (int c = 0; c < classes; c++) v[3 + c] = (double)out->right[c], v[3 + classes + c] = (double)out->seen[c];
    }
    if (!v || sum_over_ranks(r, v, 3 + 2 * classes) != MX_OK) rc = fail("evaluation over the ranks");
    else {
      loss_sum = v[0], n = (int64_t)v[1], right = (int64_t)v[2];
      for (int c = 0; c < classes; c++) out->right[c] = (int64_t)v[3 + c], out->seen[c] = (int64_t)v[3 + classes + c];
    }
    free(v);
  }
  out->loss = n ? loss_sum / (double)n : NAN;
  out->accuracy = n ? (double)right / (double)n : NAN;
  return rc;
}

static void print_class_table(const mx_demo_task *t, const eval_result *e) {
  printf("\n  %-14s %9s\n", "class", "accuracy");
  for (int c = 0; c < t->test->classes; c++)
    printf("  %-14s %8.2f%%  (%lld/%lld)\n", t->class_names[c],
           e->seen[c] ? 100.0 * (double)e->right[c] / (double)e->seen[c] : 0.0, (long long)e->right[c],
           (long long)e->seen[c]);
}

/* With the run's settings, which a resume compares with its own. */
static int save_checkpoint(run_state *r, int64_t step, int64_t batches) {
  mx_checkpoint ck = {r->task->model, r->opt, r->scaler, NULL, r->schedule, step, step / batches};
  mx_checkpoint_settings settings = {N_SETTINGS, (const char **)setting_keys, r->settings.values};
  if (mx_checkpoint_save_with_settings(r->flags->save, &ck, &settings) != MX_OK) return fail("--save");
  return 0;
}

/* Divergence at the end of an epoch (step): a weight that is not finite
 * (each parameter's sum times 0 adds up to 0, or to NaN when one holds inf
 * or NaN: one sync), before the test pass and before anything is saved. */
static int check_weights(const run_state *r, int64_t step) {
  mx_module *m = r->task->model;
  mx_scope *s = mx_scope_begin();
  mx_tensor *zero = NULL;
  MX_NO_GRAD {
    for (int i = 0; i < mx_module_num_parameters(m); i++) {
      mx_tensor *z = mx_sum(mx_mul_scalar(mx_module_parameter(m, i, NULL), 0.0), MX_ALL_DIMS, false);
      zero = zero ? mx_add(zero, z) : z;
    }
  }
  double v = zero ? mx_item(zero) : 0.0;
  bool failed = mx_module_num_parameters(m) > 0 && !zero;
  mx_scope_end(s);
  if (failed) return fail("checking the weights");
  return v == 0.0 ? 0 : diverged(r, step, "a weight is not finite after it");
}

/* Training from step (a resumed run's) to the stop, a test pass per epoch. */
static int train_epochs(run_state *r, int64_t step, int64_t stop, eval_result *last) {
  const mx_demo_flags *f = r->flags;
  int64_t batches = mx_loader_batches(r->train);
  bool scaled = mx_scaler_is_enabled(r->scaler);
  int rc;
  while (step < stop) {
    int epoch = (int)(step / batches);
    double t0 = mx_demo_now();
    if (mx_loader_reset(r->train, epoch) != MX_OK) return fail("training data");
    mx_tensor *x, *y;
    for (int64_t skip = step - (int64_t)epoch * batches; skip > 0; skip--) /* a resumed epoch's first batches */
      if (mx_loader_next(r->train, &x, &y)) mx_release(x), mx_release(y);
    mx_demo_progress bar;
    mx_demo_progress_begin(&bar, stdout, epoch, f->epochs, batches, step - (int64_t)epoch * batches, scaled);
    while (step < stop && mx_loader_next(r->train, &x, &y)) {
      if (!batch_to_device(f, &x, &y)) return fail("training data to the device");
      mx_demo_step_row row = {.step = step + 1, .epoch = epoch + 1};
      int64_t correct = 0, b = 0;
      bool graphed = f->cuda_graph && mx_shape_get(x).d[0] == f->batch; /* a short last batch runs eagerly */
      rc = graphed && r->graph ? replay_step(r, x, y, &row, &b, &correct) : train_step(r, x, y, &row, &b, &correct);
      if (rc == 0 && graphed && !r->graph) rc = capture(r, x, y);
      mx_release(x);
      mx_release(y);
      if (rc) return rc;
      if (!(row.loss <= MAX_LOSS)) { /* read for the progress line anyway: in every precision, no extra sync */
        char why[64];
        snprintf(why, sizeof why, "the loss is %g%s", row.loss, isfinite(row.loss) ? " (above 1e4)" : "");
        return diverged(r, row.step, why);
      }
      step++;
      if (!mx_demo_metrics_add_step(&r->metrics, row)) return fail("metrics: out of memory");
      mx_demo_progress_step(&bar, b, row.loss, correct, mx_scaler_get_scale(r->scaler), r->skipped);
    }
    if (mx_loader_status(r->train) != MX_OK) return fail("training data");
    mx_demo_progress_end(&bar, mx_scaler_get_scale(r->scaler), r->skipped);
    mx_demo_epoch_row er = {.epoch = epoch + 1, .step = step, .test_loss = NAN, .test_accuracy = NAN,
                            .seconds = mx_demo_now() - t0};
    er.train_loss = bar.samples ? bar.loss_sum / (double)bar.samples : NAN;
    er.train_accuracy = bar.samples ? (double)bar.correct / (double)bar.samples : NAN;
    /* Batch norm's running statistics differ between the ranks (each saw
     * its own shard): rank 0's are the model's, as in PyTorch's DDP. */
    if (r->world > 1 && mx_ddp_broadcast_module(r->group, r->task->model, 0) != MX_OK) return fail("syncing the ranks");
    if ((rc = check_weights(r, step))) return rc;
    if (r->test) {
      if (evaluate(r, last)) return 1;
      if (!(last->loss <= MAX_LOSS)) {
        char why[64];
        snprintf(why, sizeof why, "the test loss is %g after it%s", last->loss,
                 isfinite(last->loss) ? " (above 1e4)" : "");
        return diverged(r, step, why);
      }
      er.test_loss = last->loss, er.test_accuracy = last->accuracy;
      printf("  test: loss %.4f  accuracy %.2f%%\n", last->loss, 100 * last->accuracy);
    }
    if (!mx_demo_metrics_add_epoch(&r->metrics, er)) return fail("metrics: out of memory");
    if (f->save && r->rank == 0 && save_checkpoint(r, step, batches)) return 1;
  }
  return 0;
}

/* --amp-report's page, DIR/index.html; says where it is. */
static int write_amp_report(run_state *r) {
  const mx_demo_flags *f = r->flags;
  char path[4096], title[256], command[512];
  snprintf(path, sizeof path, "%s/index.html", f->amp_report);
  snprintf(title, sizeof title, "%s, amp %s, %s", r->task->title, mx_demo_amp_name(f->amp), f->optimizer);
  int len = snprintf(command, sizeof command, "--model %s --amp %s --optimizer %s --epochs %d --batch %lld --lr %g "
                     "--seed %llu", f->model, mx_demo_amp_name(f->amp), f->optimizer, f->epochs, (long long)f->batch,
                     f->lr, (unsigned long long)f->seed);
  if (f->steps) snprintf(command + len, sizeof command - (size_t)len, " --steps %lld", (long long)f->steps);
  mx_amp_report_opts o = {.title = title, .amp = f->amp, .command = command};
  if (mx_amp_report_write_html(path, r->stats, &o) != MX_OK) return fail("--amp-report");
  printf("AMP report: %s\n", path);
  return 0;
}

static int report(run_state *r, const eval_result *last, double seconds) {
  const mx_demo_task *t = r->task;
  const mx_demo_flags *f = r->flags;
  bool scaled = mx_scaler_is_enabled(r->scaler);
  if (r->test && r->metrics.n_epochs) print_class_table(t, last);
  if (scaled)
    printf("\nGradScaler: final scale %g, %lld of %lld steps skipped for inf/NaN gradients\n",
           mx_scaler_get_scale(r->scaler), (long long)r->skipped, (long long)r->metrics.n_steps);
  if (r->rank != 0) return 0; /* rank 0 writes the files */
  if (f->metrics && !mx_demo_metrics_write_csv(&r->metrics, f->metrics)) return 1;
  if (f->plot) {
    char title[256];
    snprintf(title, sizeof title, "%s, amp %s, %s", t->title, mx_demo_amp_name(f->amp), f->optimizer);
    if (!mx_demo_metrics_plot(&r->metrics, f->plot, title, scaled)) return 1;
  }
  long secs = (long)(seconds + 0.5);
  printf("\n%s: ", t->title);
  if (r->test && r->metrics.n_epochs) printf("test accuracy %.2f%%", 100 * last->accuracy);
  else printf("no test pass");
  printf(" after %lld steps in %ld:%02ld (amp %s)\n", (long long)r->metrics.n_steps, secs / 60, secs % 60,
         mx_demo_amp_name(f->amp));
  if (f->metrics) printf("curves: %s\n", f->metrics);
  if (f->plot) printf("picture: %s\n", f->plot);
  return f->amp_report ? write_amp_report(r) : 0;
}

/* The model on the run's device. A layer that needs a kernel the CUDA
 * backend lacks fails at the first forward, naming the layer and the
 * kernel. */
static int to_device(const mx_demo_task *t, const mx_demo_flags *f) {
  if (f->device != MX_CUDA) return 0;
  if (mx_cuda_device_count() <= 0) {
    fprintf(stderr, "--device cuda: no CUDA device is available here (%s); use --device cpu\n",
            mx_last_error()[0] ? mx_last_error() : "none found");
    return 1;
  }
  if (mx_module_to(t->model, f->device) != MX_OK) return fail("--device cuda");
  /* with channels-last batches, weights cuDNN reads as they lie (no KRSC copy each step) */
  return !f->channels_last || mx_module_to_channels_last(t->model) == MX_OK ? 0 : fail("--channels-last");
}


/* Joins the ranks when an MPI launcher (scripts/launch, mpirun, srun) started several:
 * each rank starts from rank 0's weights, and only rank 0 prints. */
static int join_ranks(run_state *r) {
  r->group = mx_dist_init(0);
  if (!r->group) return fail("joining the other ranks");
  r->rank = mx_dist_rank(r->group), r->world = mx_dist_world_size(r->group);
  if (r->world == 1) return 0;
  if (r->flags->batch % r->world) {
    fprintf(stderr, "--batch %lld does not split evenly over %d ranks\n", (long long)r->flags->batch, r->world);
    return 1;
  }
  if (r->rank != 0 && !freopen("/dev/null", "w", stdout)) return fail("rank's stdout");
  return mx_ddp_broadcast_module(r->group, r->task->model, 0) == MX_OK ? 0 : fail("copying rank 0's weights");
}

/* --- the run's settings and a resume ---------------------------------------------------- */

/* v in the fewest digits that read back as v (0.003, not 0.0030000000000000001). */
static void shortest(char *out, size_t n, double v) {
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(out, n, "%.*g", digits, v);
    if (strtod(out, NULL) == v) return;
  }
}

/* A dataset's bytes, labels then images, through zlib's CRC-32: its
 * identity, cheap next to an epoch over it. */
static uLong dataset_crc(uLong crc, const mx_dataset *d) {
  if (!d) return crc;
  crc = crc32_z(crc, d->labels, (size_t)d->n);
  return crc32_z(crc, d->images, (size_t)d->n * (size_t)d->c * (size_t)d->h * (size_t)d->w);
}

/* The settings of this run of total steps, as its checkpoints keep them. */
static void describe_run(run_state *r, int64_t total) {
  const mx_demo_flags *f = r->flags;
  const mx_dataset *train = r->task->train, *test = r->task->test;
  run_settings *s = &r->settings;
#define SET(i, ...) snprintf(s->text[i], sizeof s->text[i], __VA_ARGS__)
  SET(MODEL, "%s", f->model);
  SET(OPTIMIZER, "%s", f->optimizer);
  SET(AMP, "%s", mx_demo_amp_name(f->amp));
  SET(BATCH, "%lld", (long long)f->batch);
  SET(EPOCHS, "%d", f->epochs);
  shortest(s->text[LR], sizeof s->text[LR], f->lr);
  if (total >= 3 && !f->cuda_graph) SET(SCHEDULE, "one-cycle over %lld steps with %g%% warm-up", (long long)total, 100 * warm_up(total));
  else SET(SCHEDULE, "the peak lr for all %lld steps", (long long)total);
  SET(SEED, "%llu", (unsigned long long)f->seed);
  SET(DATA, "%lld + %lld samples of %dx%dx%d with CRC-32 %08lx", (long long)train->n,
      (long long)(test ? test->n : 0), train->c, train->h, train->w,
      (unsigned long)dataset_crc(dataset_crc(crc32_z(0, NULL, 0), train), test));
  SET(RANKS, "%d", r->world);
  if (f->synthetic) SET(DATA_SOURCE, "--synthetic %lld", (long long)f->synthetic);
  else SET(DATA_SOURCE, "--data %s", f->data);
#undef SET
  for (int i = 0; i < N_SETTINGS; i++) s->values[i] = s->text[i];
}

/* What the checkpoint's settings say of a resume. */
typedef struct {
  bool checked;                /* the checkpoint holds settings (older ones do not) */
  bool differs[N_SETTINGS];    /* from this run's */
  char saved[N_SETTINGS][SETTING_CHARS]; /* the checkpoint's */
  bool rebuild_schedule, fresh_scaler;
} resume_plan;

/* Whether a difference in setting i may go on: --allow-change names it,
 * or, for the schedule, an allowed difference in the run's length. */
static bool change_allowed(const mx_demo_flags *f, const resume_plan *p, int i) {
  if (i == MODEL || i == OPTIMIZER) return false; /* the checkpoint holds their tensors */
  if (mx_demo_change_allowed(f, setting_keys[i])) return true;
  if (i != SCHEDULE) return false;
  static const int lengths[] = {EPOCHS, BATCH, DATA, RANKS};
  for (int k = 0; k < 4; k++)
    if (p->differs[lengths[k]] && change_allowed(f, p, lengths[k])) return true;
  return false;
}

/* Prints the refusal: each difference, and what would allow them. */
static void refuse(const run_state *r, const resume_plan *p) {
  const mx_demo_flags *f = r->flags;
  fprintf(stderr, "--resume %s: the checkpoint's run differs from this one:\n", f->resume);
  char names[128] = "";
  bool fixed = false, length_listed = false;
  for (int i = 0; i < DATA_SOURCE; i++) {
    if (!p->differs[i]) continue;
    if (i == DATA)
      fprintf(stderr, "  data: saved %s (%s), given %s (%s)\n", p->saved[i], p->saved[DATA_SOURCE],
              r->settings.text[i], r->settings.text[DATA_SOURCE]);
    else fprintf(stderr, "  %s: saved %s, given %s\n", setting_labels[i], p->saved[i], r->settings.text[i]);
    if (change_allowed(f, p, i)) continue;
    if (i == MODEL || i == OPTIMIZER) fixed = true;
    else if (i != SCHEDULE || !length_listed) /* the schedule follows an allowed change of the length */
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", *names ? "," : "", setting_keys[i]);
    length_listed |= i == EPOCHS || i == BATCH || i == DATA || i == RANKS;
  }
  if (fixed) fprintf(stderr, "the model and the optimizer cannot change on a resume: start afresh without --resume\n");
  else
    fprintf(stderr, "to change the run deliberately, add --allow-change %s (see --help); or start afresh without "
            "--resume\n", names);
}

/* Compares this run's settings with the checkpoint's. Returns 0 to go on
 * (*p says what an allowed change rebuilds), 2 after listing differences
 * that are not allowed, 1 when the checkpoint cannot be read. */
static int check_resume(run_state *r, resume_plan *p) {
  const mx_demo_flags *f = r->flags;
  mx_checkpoint_settings saved;
  if (mx_checkpoint_settings_read(f->resume, &saved) != MX_OK) return fail("--resume");
  p->checked = saved.n > 0;
  for (int i = 0; i < N_SETTINGS; i++) {
    const char *v = NULL;
    for (int k = 0; k < saved.n && !v; k++)
      if (!strcmp(saved.keys[k], setting_keys[i])) v = saved.values[k];
    snprintf(p->saved[i], sizeof p->saved[i], "%s", v ? v : "(none)");
    p->differs[i] = p->checked && i != DATA_SOURCE && (!v || strcmp(v, r->settings.text[i]));
  }
  mx_checkpoint_settings_free(&saved);
  bool refused = false;
  for (int i = 0; i < N_SETTINGS; i++) refused |= p->differs[i] && !change_allowed(f, p, i);
  if (refused) {
    if (r->rank == 0) refuse(r, p); /* every rank refuses; one says why */
    return 2;
  }
  p->rebuild_schedule = p->differs[SCHEDULE] || p->differs[LR];
  p->fresh_scaler = p->differs[AMP];
  return 0;
}

/* The schedule made for this run, brought to step as if the run had
 * started with these flags: the lr (and momentum) it sets there. */
static int rebuild_schedule(run_state *r, int64_t step) {
  if (!r->schedule) return mx_optimizer_set_lr(r->opt, 0, r->flags->lr) == MX_OK ? 0 : fail("--resume");
  for (int64_t i = 0; i < step; i++)
    if (mx_schedule_step(r->schedule) != MX_OK) return fail("--resume: rebuilding the schedule");
  return 0;
}

/* Says what each allowed change does from step on. */
static void explain_changes(const run_state *r, const resume_plan *p, int64_t step, int64_t total) {
  const char *now[N_SETTINGS];
  for (int i = 0; i < N_SETTINGS; i++) now[i] = r->settings.text[i];
  long long n = (long long)step;
  for (int i = 0; i < N_SETTINGS; i++) {
    if (!p->differs[i] || i == SCHEDULE) continue;
    printf("--allow-change: %s %s -> %s: ", setting_labels[i], p->saved[i], now[i]);
    switch (i) {
    case AMP: {
      const char *scaler = r->flags->amp == MX_F16              ? ", with a new GradScaler"
                           : !strcmp(p->saved[AMP], "f16") ? ", without the GradScaler"
                                                             : "";
      if (r->flags->amp == MX_F32) printf("no autocast from step %lld%s\n", n, scaler);
      else printf("autocast %s from step %lld%s\n", now[AMP], n, scaler);
      break;
    }
    case BATCH: printf("the steps from %lld on take %s samples each\n", n, now[BATCH]); break;
    case EPOCHS: printf("the run now ends at step %lld\n", (long long)total); break;
    case LR: printf("the schedule now peaks at %s\n", now[LR]); break;
    case SEED: printf("shuffling and augmentation follow seed %s from step %lld\n", now[SEED], n); break;
    case DATA: printf("training goes on over %s from step %lld\n", now[DATA_SOURCE], n); break;
    default: /* RANKS */
      if (r->world == 1) printf("one process takes each step's whole batch from step %lld\n", n);
      else printf("%d ranks share each step's batch from step %lld\n", r->world, n);
      break;
    }
  }
  if (!p->rebuild_schedule) return;
  if (r->schedule)
    printf("--allow-change: the one-cycle schedule is rebuilt over %lld steps (peak lr %s) and goes on from step %lld "
           "at lr %g\n", (long long)total, now[LR], n, mx_optimizer_lr(r->opt, 0));
  else printf("--allow-change: the lr is now %s (a run under 3 steps keeps the peak lr)\n", now[LR]);
}

/* Goes on from the checkpoint --resume names: its model, optimizer, scaler
 * and schedule, except what an allowed change makes afresh. */
static int resume(run_state *r, const resume_plan *p, int64_t total, int64_t *step) {
  const mx_demo_flags *f = r->flags;
  mx_checkpoint ck = {r->task->model, r->opt, p->fresh_scaler ? NULL : r->scaler, NULL,
                      p->rebuild_schedule ? NULL : r->schedule, 0, 0};
  if (mx_checkpoint_load(f->resume, &ck) != MX_OK) return fail("--resume");
  const char *note = mx_safetensors_last_note(); /* an older file, without checksums */
  if (note) fprintf(stderr, "--resume: %s\n", note);
  if (ck.step < 0 || ck.step > total) {
    fprintf(stderr, "--resume %s: its step %lld is outside this run's %lld steps\n", f->resume, (long long)ck.step,
            (long long)total);
    return 1;
  }
  if (p->rebuild_schedule && rebuild_schedule(r, ck.step)) return 1;
  *step = ck.step;
  printf("resuming %s at step %lld (epoch %lld)\n", f->resume, (long long)ck.step,
         (long long)(ck.step / mx_loader_batches(r->train) + 1));
  if (p->checked) explain_changes(r, p, ck.step, total);
  else printf("note: %s holds no run settings (an older checkpoint): they are not checked\n", f->resume);
  return 0;
}

static void free_run(run_state *r) {
  mx_cuda_graph_free(r->graph);
  mx_tensor *graph_tensors[] = {r->static_x, r->static_y, r->graph_logits, r->graph_loss};
  for (int i = 0; i < 4; i++) mx_release(graph_tensors[i]);
  mx_dist_free(r->group);
  mx_loader_free(r->train);
  mx_loader_free(r->test);
  mx_schedule_free(r->schedule);
  if (r->stats) mx_module_set_output_hook(r->task->model, NULL, NULL);
  mx_amp_stats_free(r->stats);
  mx_scaler_free(r->scaler);
  mx_optimizer_free(r->opt);
  mx_demo_metrics_free(&r->metrics);
}

int mx_demo_train(const mx_demo_task *task, const mx_demo_flags *flags) {
  if (to_device(task, flags)) return 1;
  run_state r = {.task = task, .flags = flags, .world = 1};
  int classes = task->train->classes;
  int64_t *counts = calloc(2 * (size_t)classes, sizeof *counts);
  eval_result last = {.right = counts, .seen = counts ? counts + classes : NULL};
  int rc = counts ? join_ranks(&r) : fail("out of memory");
  if (rc == 0 && flags->cuda_graph && r.world > 1) {
    fprintf(stderr, "--cuda-graph: one process only (the gradients' all-reduce is not captured), not %d ranks\n",
            r.world);
    rc = 1;
  }
  if (rc == 0) rc = make_loaders(&r);
  int64_t batches = rc ? 0 : mx_loader_batches(r.train);
  int64_t total = batches * flags->epochs;
  if (rc == 0) describe_run(&r, total);
  resume_plan plan = {0};
  if (rc == 0 && flags->resume) rc = check_resume(&r, &plan); /* before anything trains */
  if (rc == 0) rc = make_optimizer(&r, total);
  int64_t step = 0;
  if (rc == 0 && flags->resume) rc = resume(&r, &plan, total, &step);
  if (rc == 0) {
    printf("%s: %lld parameters, %lld training samples, %lld steps of %lld, amp %s, %s, lr %g", task->title,
           (long long)mx_module_parameter_count(task->model), (long long)task->train->n, (long long)total,
           (long long)flags->batch, mx_demo_amp_name(flags->amp), flags->optimizer, flags->lr);
    if (r.world > 1) printf(", %d ranks of %lld", r.world, (long long)(flags->batch / r.world));
    printf("\n");
    int64_t stop = flags->steps && flags->steps < total ? flags->steps : total;
    double t0 = mx_demo_now();
    rc = train_epochs(&r, step, stop, &last); /* which saves after each epoch, the last partial one too */
    if (rc == 0) rc = report(&r, &last, mx_demo_now() - t0);
  }
  free(counts);
  free_run(&r);
  return rc;
}
