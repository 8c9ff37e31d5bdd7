#include "examples/train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "examples/train/metrics.h"
#include "examples/train/progress.h"
#include "mixgrad.h"

/* Everything a run makes, freed in one place. */
typedef struct {
  const mx_demo_task *task;
  const mx_demo_flags *flags;
  mx_optimizer *opt;
  mx_schedule *schedule;
  mx_scaler *scaler;
  mx_loader *train, *test;
  mx_demo_metrics metrics;
  int64_t skipped;
  /* data parallelism: this process is rank `rank` of `world` (1: alone) */
  mx_process_group *group;
  int rank, world;
} run_state;

static int fail(const char *what) {
  fprintf(stderr, "%s: %s\n", what, mx_last_error());
  return 1;
}

/* A batch from the loader (made on the CPU) moved to the run's device. */
static bool batch_to_device(const mx_demo_flags *f, mx_tensor **x, mx_tensor **y) {
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
  if (total_steps >= 3) {
    mx_one_cycle_opts oc = mx_one_cycle_defaults(r->flags->lr, total_steps);
    oc.pct_start = total_steps >= 8 ? 0.25 : 0.5;
    r->schedule = mx_one_cycle_lr_new(r->opt, &oc);
    if (!r->schedule) return fail("schedule");
  }
  mx_scaler_opts so = mx_scaler_defaults();
  so.enabled = r->flags->amp == MX_F16;
  /* PyTorch's default waits 2000 clean steps before growing, longer than a
   * demo runs; 100 lets the picture show the scale finding its level. */
  so.growth_interval = 100;
  r->scaler = mx_scaler_new(&so);
  return r->scaler ? 0 : fail("GradScaler");
}

/* With several ranks each takes its shard of every epoch (the same
 * shuffle everywhere) in batches of batch / world, so a step's batches
 * together are the batch one process would take: the recipe and the
 * number of steps stay the same. The test set is sharded without padding,
 * so the ranks' counts add up to every test sample once. */
static int make_loaders(run_state *r) {
  const mx_demo_task *t = r->task;
  r->train = mx_loader_new(t->train, &(mx_loader_options){.batch_size = r->flags->batch / r->world, .shuffle = true,
                                                           .seed = r->flags->seed, .mean = t->mean, .std = t->std,
                                                           .crop_padding = t->crop_padding, .flip = t->flip,
                                                           .background = true, .shards = r->world, .shard = r->rank});
  if (!r->train) return fail("training data");
  if (t->test) {
    r->test = mx_loader_new(t->test, &(mx_loader_options){.batch_size = 500, .mean = t->mean, .std = t->std,
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
  mx_optimizer_zero_grad(r->opt, true);
  mx_tensor *logits = NULL, *loss = NULL;
  MX_AUTOCAST(f->device, f->amp == MX_F32 ? MX_AUTOCAST_DEFAULT_DTYPE : f->amp, f->amp != MX_F32, true) {
    logits = mx_module_forward(r->task->model, x);
    loss = logits ? mx_cross_entropy(logits, y, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, r->task->label_smoothing)
                  : NULL;
  }
  mx_scaler_step_info info = {.stepped = true, .scale = 1.0};
  if (!loss || mx_backward(mx_scaler_scale(r->scaler, loss), NULL, false) != MX_OK ||
      mx_ddp_average_gradients(r->group, r->task->model) != MX_OK ||
      mx_scaler_step(r->scaler, r->opt, &info) != MX_OK || mx_scaler_update(r->scaler) != MX_OK ||
      (r->schedule && mx_schedule_step(r->schedule) != MX_OK)) {
    rc = fail("training step");
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

static int save_checkpoint(run_state *r, int64_t step, int64_t batches) {
  mx_checkpoint ck = {r->task->model, r->opt, r->scaler, NULL, r->schedule, step, step / batches};
  if (mx_checkpoint_save(r->flags->save, &ck) != MX_OK) return fail("--save");
  return 0;
}

/* Training from step (a resumed run's) to the stop, a test pass per epoch. */
static int train_epochs(run_state *r, int64_t step, int64_t stop, eval_result *last) {
  const mx_demo_flags *f = r->flags;
  int64_t batches = mx_loader_batches(r->train);
  bool scaled = mx_scaler_is_enabled(r->scaler);
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
      int rc = train_step(r, x, y, &row, &b, &correct);
      mx_release(x);
      mx_release(y);
      if (rc) return rc;
      if (!isfinite(row.loss) && !scaled) {
        fprintf(stderr, "training diverged at step %lld: loss %g (try a smaller --lr)\n", (long long)row.step,
                row.loss);
        return 1;
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
    if (r->test) {
      if (evaluate(r, last)) return 1;
      er.test_loss = last->loss, er.test_accuracy = last->accuracy;
      printf("  test: loss %.4f  accuracy %.2f%%\n", last->loss, 100 * last->accuracy);
    }
    if (!mx_demo_metrics_add_epoch(&r->metrics, er)) return fail("metrics: out of memory");
    if (f->save && r->rank == 0 && save_checkpoint(r, step, batches)) return 1;
  }
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
  return 0;
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
  return mx_module_to(t->model, f->device) == MX_OK ? 0 : fail("--device cuda");
}


/* Joins the ranks when a launcher (scripts/launch, torchrun) set WORLD_SIZE:
 * each rank starts from rank 0's weights, and only rank 0 prints. */
static int join_ranks(run_state *r) {
  r->group = mx_dist_init_from_env(0);
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

static void free_run(run_state *r) {
  mx_dist_free(r->group);
  mx_loader_free(r->train);
  mx_loader_free(r->test);
  mx_schedule_free(r->schedule);
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
  if (rc == 0) rc = make_loaders(&r);
  int64_t batches = rc ? 0 : mx_loader_batches(r.train);
  int64_t total = batches * flags->epochs;
  if (rc == 0) rc = make_optimizer(&r, total);
  int64_t step = 0;
  if (rc == 0 && flags->resume) {
    mx_checkpoint ck = {task->model, r.opt, r.scaler, NULL, r.schedule, 0, 0};
    if (mx_checkpoint_load(flags->resume, &ck) != MX_OK) rc = fail("--resume");
    else if (ck.step < 0 || ck.step > total) {
      fprintf(stderr, "--resume %s: its step %lld is outside this run's %lld steps\n", flags->resume,
              (long long)ck.step, (long long)total);
      rc = 1;
    } else {
      step = ck.step;
      printf("resuming %s at step %lld (epoch %lld)\n", flags->resume, (long long)step, (long long)(step / batches + 1));
      if (mx_safetensors_last_note()) fprintf(stderr, "--resume: %s\n", mx_safetensors_last_note()); /* no checksums */
    }
  }
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
