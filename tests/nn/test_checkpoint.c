/* State dicts and training checkpoints: strict loading with exact errors,
 * nothing changed by a failed load, and a run resumed from a checkpoint
 * that goes on bit for bit as if it had never stopped (f16 autocast,
 * GradScaler with skipped steps, Adam, an LR schedule, dropout). */
#include <criterion/criterion.h>
#include <math.h>
#include <mixgrad.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/common/tmp_files.h"

#define OK(expr) cr_assert_eq((expr), MX_OK, "%s", mx_last_error())
/* expr fails with status and exactly msg, where msg is printf-formatted */
#define FAILS(expr, status, ...)                                                             \
  do {                                                                                       \
    char want_[2048];                                                                        \
    snprintf(want_, sizeof want_, __VA_ARGS__);                                              \
    mx_clear_error();                                                                        \
    mx_status got_ = (expr);                                                                 \
    cr_assert_eq(got_, (status), "status %s, error '%s'", mx_status_str(got_), mx_last_error()); \
    cr_assert_str_eq(mx_last_error(), want_);                                                \
    mx_clear_error();                                                                        \
  } while (0)

/* --- a small hand-built net: fc1 (Linear), bn (BatchNorm1d), fc2 (Linear) ----------------- */

/* fc2(relu(bn(fc1(x)))), then dropout when the net has a child "drop" */
static mx_tensor *net_forward(mx_module *m, const mx_tensor *x) {
  mx_tensor *h = mx_module_forward(mx_module_get_child(m, "fc1"), x);
  h = mx_relu(mx_module_forward(mx_module_get_child(m, "bn"), h));
  h = mx_module_forward(mx_module_get_child(m, "fc2"), h);
  mx_module *drop = mx_module_get_child(m, "drop");
  return drop ? mx_module_forward(drop, h) : h;
}

static const mx_module_type net_type = {.name = "Net", .forward = net_forward};

static mx_module *net_new(int64_t in, bool fc2_bias, mx_generator *gen) {
  mx_module *m = mx_module_new(&net_type, NULL);
  cr_assert_not_null(m, "%s", mx_last_error());
  OK(mx_module_add_child(m, "fc1", mx_linear_new(in, 5, true, gen)));
  OK(mx_module_add_child(m, "bn", mx_batch_norm1d_new(5, 1e-5, 0.1, true, true)));
  OK(mx_module_add_child(m, "fc2", mx_linear_new(5, 2, fc2_bias, gen)));
  return m;
}

/* Every parameter and buffer of a and b holds the same bits. */
static void expect_same_module(const mx_module *a, const mx_module *b) {
  int np = mx_module_num_parameters(a), nb = mx_module_num_buffers(a);
  cr_assert_eq(np, mx_module_num_parameters(b));
  cr_assert_eq(nb, mx_module_num_buffers(b));
  for (int i = 0; i < np + nb; i++) {
    const char *name;
    mx_tensor *x = i < np ? mx_module_parameter(a, i, &name) : mx_module_buffer(a, i - np, &name);
    mx_tensor *y = i < np ? mx_module_parameter(b, i, NULL) : mx_module_buffer(b, i - np, NULL);
    size_t bytes = (size_t)mx_numel(x) * mx_dtype_size(mx_dtype_of(x));
    cr_assert_eq(mx_numel(x), mx_numel(y), "%s", name);
    char *p = malloc(bytes + 1), *q = malloc(bytes + 1);
    OK(mx_to_host(x, p, bytes));
    OK(mx_to_host(y, q, bytes));
    cr_assert(!memcmp(p, q, bytes), "tensor '%s' differs", name);
    free(p);
    free(q);
  }
}

TestSuite(state_dict, .init = make_tmp_dir, .fini = remove_tmp_dir);

Test(state_dict, round_trips_parameters_and_buffers) {
  mx_generator *g1 = mx_generator_new(1), *g2 = mx_generator_new(2);
  mx_module *a = net_new(4, true, g1), *b = net_new(4, true, g2);
  mx_scope *s = mx_scope_begin(); /* move the running statistics off their start */
  mx_module_forward(a, mx_randn(MX_SHAPE(6, 4), MX_F32, MX_CPU, g1));
  mx_scope_end(s);
  const char *path = tmp_path("net.safetensors");
  OK(mx_module_save(a, path));
  mx_safetensors *f = mx_safetensors_load(path);
  cr_assert_not_null(f, "%s", mx_last_error());
  const char *names[] = {"fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "fc2.weight", "fc2.bias",
                         "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"};
  cr_assert_eq(mx_safetensors_count(f), 9);
  for (int i = 0; i < 9; i++) cr_assert_str_eq(mx_safetensors_name(f, i), names[i]);
  cr_assert_eq(mx_item(mx_safetensors_get(f, "bn.num_batches_tracked")), 1);
  mx_safetensors_free(f);

  OK(mx_module_load(b, path));
  expect_same_module(a, b);
  cr_assert(mx_requires_grad(mx_module_get_parameter(b, "fc1.weight")), "parameters stay parameters");
  mx_module_free(a);
  mx_module_free(b);
  mx_generator_free(g1);
  mx_generator_free(g2);
}

Test(state_dict, load_is_strict_and_changes_nothing_on_failure) {
  mx_generator *gen = mx_generator_new(5);
  mx_module *net = net_new(4, true, gen), *no_bias = net_new(4, false, gen), *wide = net_new(3, true, gen);
  mx_module *before = net_new(4, true, gen);
  const char *full = tmp_path("full.ckpt"), *partial = tmp_path("partial.ckpt"), *narrow = tmp_path("narrow.ckpt");
  OK(mx_module_save(net, full));
  OK(mx_module_save(no_bias, partial));
  OK(mx_module_save(wide, narrow));
  OK(mx_module_save(net, tmp_path("before.ckpt")));
  OK(mx_module_load(before, tmp_path("before.ckpt")));
  mx_memory_stats stats = mx_memory_stats_get(MX_CPU);

  FAILS(mx_module_load(net, partial), MX_CORRUPT_DATA, "mx_module_load: %s: missing tensor 'fc2.bias'", partial);
  FAILS(mx_module_load(no_bias, full), MX_CORRUPT_DATA, "mx_module_load: %s: unexpected tensor 'fc2.bias'", full);
  FAILS(mx_module_load(net, narrow), MX_SHAPE_ERROR,
        "mx_module_load: %s: tensor 'fc1.weight' has shape [5,3] in the file but [5,4] in the module", narrow);
  /* the same names with a float16 weight */
  const char *half = tmp_path("half.ckpt");
  mx_safetensors *f = mx_safetensors_load(full);
  const char *names[9];
  const mx_tensor *ts[9];
  for (int i = 0; i < 9; i++) names[i] = mx_safetensors_name(f, i), ts[i] = mx_safetensors_tensor(f, i);
  mx_tensor *w16 = mx_to_dtype(ts[0], MX_F16);
  ts[0] = w16;
  OK(mx_safetensors_save(half, 9, names, ts, 0, NULL, NULL));
  mx_release(w16);
  mx_safetensors_free(f);
  FAILS(mx_module_load(net, half), MX_DTYPE_ERROR,
        "mx_module_load: %s: tensor 'fc1.weight' is float16 in the file but float32 in the module", half);
  FAILS(mx_module_load(net, tmp_path("absent.ckpt")), MX_IO_ERROR,
        "mx_module_load: mx_safetensors_load: %s: cannot open (No such file or directory)", tmp_path("absent.ckpt"));
  FAILS(mx_module_load(NULL, full), MX_NULL_INPUT, "mx_module_load: argument 'm' is NULL");
  FAILS(mx_module_save(net, NULL), MX_NULL_INPUT, "mx_module_save: argument 'path' is NULL");
  FAILS(mx_module_save(net, tmp_path("no/dir/x.ckpt")), MX_IO_ERROR,
        "mx_module_save: mx_safetensors_save: %s: the folder %s does not exist", tmp_path("no/dir/x.ckpt"),
        tmp_path("no/dir"));

  expect_same_module(net, before); /* every failed load left net alone */
  mx_memory_stats now = mx_memory_stats_get(MX_CPU);
  cr_assert_eq(now.live_tensors, stats.live_tensors, "failed loads leaked tensors");
  cr_assert_eq(now.bytes_in_use, stats.bytes_in_use, "failed loads leaked memory");
  mx_module_free(net);
  mx_module_free(no_bias);
  mx_module_free(wide);
  mx_module_free(before);
  mx_generator_free(gen);
}

/* --- a training run: everything a checkpoint holds ------------------------------------------ */

typedef struct {
  mx_module *model;
  mx_optimizer *opt;
  mx_scaler *scaler;
  mx_generator *gen;
  mx_schedule *schedule;
  int skipped[4], n_skipped;
} run;

/* A net with dropout, Adam over two groups (the bias of fc2 apart, without
 * weight decay), a scaler that grows every 3 clean steps, warm-up then
 * cosine; init_seed sets the initial weights, data_seed the generator
 * that draws the batches and dropout masks. */
static run run_new(uint64_t init_seed, uint64_t data_seed) {
  run r = {.gen = mx_generator_new(data_seed)};
  mx_generator *init = mx_generator_new(init_seed);
  r.model = net_new(6, true, init);
  OK(mx_module_add_child(r.model, "drop", mx_dropout_new(0.25, r.gen)));
  mx_generator_free(init);
  int np = mx_module_num_parameters(r.model);
  mx_tensor *params[8];
  for (int i = 0; i < np; i++) params[i] = mx_module_parameter(r.model, i, NULL);
  mx_adam_opts o = mx_adamw_defaults();
  o.lr = 0.05, o.weight_decay = 0.01;
  r.opt = mx_adamw_new(np - 1, params, &o);
  cr_assert_not_null(r.opt, "%s", mx_last_error());
  o.weight_decay = 0, o.beta2 = 0.99;
  OK(mx_adam_add_group(r.opt, 1, params + np - 1, &o));
  mx_scaler_opts so = mx_scaler_defaults();
  so.init_scale = 1024, so.growth_interval = 3;
  r.scaler = mx_scaler_new(&so);
  mx_schedule *parts[] = {mx_linear_lr_new(r.opt, 0.25, 1.0, 3), mx_cosine_annealing_lr_new(r.opt, 17, 1e-3)};
  r.schedule = mx_sequential_lr_new(r.opt, 2, parts, (int64_t[]){3});
  cr_assert_not_null(r.schedule, "%s", mx_last_error());
  return r;
}

static void run_free(run *r) {
  mx_schedule_free(r->schedule);
  mx_scaler_free(r->scaler);
  mx_optimizer_free(r->opt);
  mx_module_free(r->model);
  mx_generator_free(r->gen);
}

/* Steps [from, to): a batch and a dropout mask drawn from the generator,
 * the forward under f16 autocast, the scaled backward, and at steps 4 and
 * 13 an inf planted in a gradient, so the scaler skips those steps. */
static void train(run *r, int from, int to) {
  for (int step = from; step < to; step++) {
    mx_scope *s = mx_scope_begin();
    OK(mx_optimizer_zero_grad(r->opt, true));
    mx_tensor *x = mx_randn(MX_SHAPE(8, 6), MX_F32, MX_CPU, r->gen);
    mx_tensor *y = mx_randn(MX_SHAPE(8, 2), MX_F32, MX_CPU, r->gen);
    mx_tensor *loss = NULL;
    MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
      mx_tensor *out = mx_module_forward(r->model, x);
      loss = mx_mse_loss(mx_to_dtype(out, MX_F32), y, MX_REDUCTION_MEAN);
    }
    cr_assert_not_null(loss, "step %d: %s", step, mx_last_error());
    OK(mx_backward(mx_scaler_scale(r->scaler, loss), NULL, false));
    if (step == 4 || step == 13) OK(mx_fill_(mx_grad_of(mx_module_get_parameter(r->model, "fc1.weight")), INFINITY));
    mx_scaler_step_info info;
    OK(mx_scaler_step(r->scaler, r->opt, &info));
    if (!info.stepped) r->skipped[r->n_skipped++ % 4] = step;
    OK(mx_scaler_update(r->scaler));
    OK(mx_schedule_step(r->schedule));
    mx_scope_end(s);
  }
}

/* Bit for bit: the two runs' tensors, optimizer state and hyper-parameters,
 * scaler state, schedule state and generator. */
static void expect_same_run(const run *a, const run *b) {
  expect_same_module(a->model, b->model);
  int n = mx_optimizer_num_params(a->opt);
  cr_assert_eq(n, mx_optimizer_num_params(b->opt));
  for (int i = 0; i < n; i++) {
    const char *names[4], *names_b[4];
    int k = mx_optimizer_state_names(a->opt, i, names);
    cr_assert_eq(k, 3, "step, exp_avg, exp_avg_sq");
    cr_assert_eq(mx_optimizer_state_names(b->opt, i, names_b), k);
    for (int j = 0; j < k; j++) {
      mx_scope *s = mx_scope_begin();
      mx_tensor *x = mx_optimizer_state(a->opt, i, names[j]), *y = mx_optimizer_state(b->opt, i, names[j]);
      size_t bytes = (size_t)mx_numel(x) * mx_dtype_size(mx_dtype_of(x));
      char *p = malloc(bytes), *q = malloc(bytes);
      OK(mx_to_host(x, p, bytes));
      OK(mx_to_host(y, q, bytes));
      cr_assert(!memcmp(p, q, bytes), "optimizer state %d '%s' differs", i, names[j]);
      free(p);
      free(q);
      mx_scope_end(s);
    }
  }
  for (int g = 0; g < 2; g++) {
    mx_adam_opts x, y;
    OK(mx_optimizer_get_adam_opts(a->opt, g, &x));
    OK(mx_optimizer_get_adam_opts(b->opt, g, &y));
    cr_assert(x.lr == y.lr && x.beta1 == y.beta1 && x.beta2 == y.beta2 && x.eps == y.eps &&
                  x.weight_decay == y.weight_decay && x.amsgrad == y.amsgrad && x.maximize == y.maximize,
              "group %d's hyper-parameters differ (lr %.17g vs %.17g)", g, x.lr, y.lr);
    cr_assert_eq(mx_optimizer_initial_lr(a->opt, g), mx_optimizer_initial_lr(b->opt, g));
  }
  mx_scaler_state sa, sb;
  OK(mx_scaler_state_dict(a->scaler, &sa));
  OK(mx_scaler_state_dict(b->scaler, &sb));
  cr_assert(sa.present == sb.present && sa.scale == sb.scale && sa.growth_factor == sb.growth_factor &&
                sa.backoff_factor == sb.backoff_factor && sa.growth_interval == sb.growth_interval &&
                sa.growth_tracker == sb.growth_tracker,
            "scaler: scale %g vs %g, tracker %lld vs %lld", sa.scale, sb.scale,
            (long long)sa.growth_tracker, (long long)sb.growth_tracker);
  int n_state = mx_schedule_state_size(a->schedule);
  cr_assert_eq(n_state, mx_schedule_state_size(b->schedule));
  double *x = malloc(sizeof *x * (size_t)n_state), *y = malloc(sizeof *y * (size_t)n_state);
  OK(mx_schedule_state_get(a->schedule, x, n_state));
  OK(mx_schedule_state_get(b->schedule, y, n_state));
  cr_assert(!memcmp(x, y, sizeof *x * (size_t)n_state), "the schedules differ");
  free(x);
  free(y);
  uint64_t seed_a, off_a, seed_b, off_b;
  mx_generator_get_state(a->gen, &seed_a, &off_a);
  mx_generator_get_state(b->gen, &seed_b, &off_b);
  cr_assert(seed_a == seed_b && off_a == off_b, "generators (%llu, %llu) and (%llu, %llu)",
            (unsigned long long)seed_a, (unsigned long long)off_a, (unsigned long long)seed_b,
            (unsigned long long)off_b);
}

TestSuite(checkpoint, .init = make_tmp_dir, .fini = remove_tmp_dir);

Test(checkpoint, a_resumed_run_is_bit_identical_to_a_straight_one) {
  mx_memory_stats start = mx_memory_stats_get(MX_CPU);
  run straight = run_new(11, 22);
  train(&straight, 0, 20);
  cr_assert_eq(straight.n_skipped, 2, "the planted infs skip steps 4 and 13");
  cr_assert(straight.skipped[0] == 4 && straight.skipped[1] == 13);

  run first = run_new(11, 22);
  train(&first, 0, 10);
  const char *path = tmp_path("run.ckpt");
  OK(mx_checkpoint_save(path, &(mx_checkpoint){first.model, first.opt, first.scaler, first.gen, first.schedule,
                                                 10, 2}));
  /* fresh objects, made as before but from other seeds: the checkpoint overwrites all of it */
  run resumed = run_new(99, 98);
  mx_checkpoint ck = {resumed.model, resumed.opt, resumed.scaler, resumed.gen, resumed.schedule, 0, 0};
  OK(mx_checkpoint_load(path, &ck));
  cr_assert(ck.step == 10 && ck.epoch == 2, "step %lld, epoch %lld", (long long)ck.step, (long long)ck.epoch);
  expect_same_run(&first, &resumed);
  train(&resumed, (int)ck.step, 20);
  cr_assert_eq(resumed.n_skipped, 1);
  cr_assert_eq(resumed.skipped[0], 13);
  expect_same_run(&straight, &resumed);
  mx_scaler_state st;
  OK(mx_scaler_state_dict(resumed.scaler, &st));
  cr_assert(st.scale != 1024, "the scale moved during the run (%g)", st.scale);

  run_free(&straight);
  run_free(&first);
  run_free(&resumed);
  mx_memory_stats end = mx_memory_stats_get(MX_CPU);
  cr_assert_eq(end.live_tensors, start.live_tensors, "tensors leaked");
  cr_assert_eq(end.bytes_in_use, start.bytes_in_use, "memory leaked");
}

/* Copies the file `from` to `to` without the tensor `drop` (NULL: none),
 * with metadata `key` set to `value` (NULL: removed), and with a tensor
 * 'extra' when add_extra. */
static void rewrite(const char *from, const char *to, const char *drop, const char *key, const char *value,
                    bool add_extra) {
  mx_safetensors *f = mx_safetensors_load(from);
  cr_assert_not_null(f, "%s", mx_last_error());
  int n = 0, n_meta = 0, count = mx_safetensors_count(f), meta = mx_safetensors_metadata_count(f);
  const char **names = malloc(sizeof *names * (size_t)(count + 1)), **keys = malloc(sizeof *keys * (size_t)(meta + 1));
  const char **values = malloc(sizeof *values * (size_t)(meta + 1));
  const mx_tensor **ts = malloc(sizeof *ts * (size_t)(count + 1));
  for (int i = 0; i < count; i++)
    if (!drop || strcmp(drop, mx_safetensors_name(f, i)))
      names[n] = mx_safetensors_name(f, i), ts[n++] = mx_safetensors_tensor(f, i);
  mx_tensor *extra = mx_zeros(MX_SHAPE(1), MX_F32, MX_CPU);
  if (add_extra) names[n] = "extra", ts[n++] = extra;
  bool replaced = false;
  for (int i = 0; i < meta; i++) {
    bool hit = key && !strcmp(key, mx_safetensors_metadata_key(f, i));
    replaced |= hit;
    if (hit && !value) continue;
    keys[n_meta] = mx_safetensors_metadata_key(f, i);
    values[n_meta++] = hit ? value : mx_safetensors_metadata_value(f, i);
  }
  cr_assert(replaced || !key, "no metadata '%s'", key);
  OK(mx_safetensors_save(to, n, names, ts, n_meta, keys, values));
  mx_release(extra);
  mx_safetensors_free(f);
  free(names);
  free(keys);
  free(values);
  free(ts);
}

static mx_checkpoint ckpt_of(run *r) { return (mx_checkpoint){r->model, r->opt, r->scaler, r->gen, r->schedule, 0, 0}; }

Test(checkpoint, a_failed_load_is_an_exact_error_and_changes_nothing) {
  run saved = run_new(1, 2);
  train(&saved, 0, 6);
  const char *path = tmp_path("run.ckpt"), *bad = tmp_path("bad.ckpt");
  OK(mx_checkpoint_save(path, &(mx_checkpoint){saved.model, saved.opt, saved.scaler, saved.gen, saved.schedule, 6, 1}));
  run fresh = run_new(3, 4), untouched = run_new(3, 4);
  mx_checkpoint ck = ckpt_of(&fresh);
  mx_memory_stats stats = mx_memory_stats_get(MX_CPU);

  OK(mx_module_save(fresh.model, bad));
  FAILS(mx_checkpoint_load(bad, &ck), MX_INVALID_ARGUMENT,
        "mx_checkpoint_load: %s: not a training checkpoint (its metadata 'format' is missing, not "
        "'mixgrad.checkpoint.1')", bad);
  rewrite(path, bad, "optimizer.1.exp_avg_sq", NULL, NULL, false);
  FAILS(mx_checkpoint_load(bad, &ck), MX_CORRUPT_DATA,
        "mx_checkpoint_load: %s: missing tensor 'optimizer.1.exp_avg_sq'", bad);
  rewrite(path, bad, "model.bn.running_var", NULL, NULL, false);
  FAILS(mx_checkpoint_load(bad, &ck), MX_CORRUPT_DATA, "mx_checkpoint_load: %s: missing tensor 'model.bn.running_var'",
        bad);
  rewrite(path, bad, NULL, NULL, NULL, true);
  FAILS(mx_checkpoint_load(bad, &ck), MX_CORRUPT_DATA, "mx_checkpoint_load: %s: unexpected tensor 'extra'", bad);
  rewrite(path, bad, NULL, "scaler.scale", "abc", false);
  FAILS(mx_checkpoint_load(bad, &ck), MX_CORRUPT_DATA,
        "mx_checkpoint_load: %s: metadata 'scaler.scale' is 'abc', not a number", bad);
  rewrite(path, bad, NULL, "rng.offset", "-1", false);
  FAILS(mx_checkpoint_load(bad, &ck), MX_CORRUPT_DATA,
        "mx_checkpoint_load: %s: metadata 'rng.offset' is '-1', not an unsigned integer", bad);
  rewrite(path, bad, NULL, "step", "12x", false);
  FAILS(mx_checkpoint_load(bad, &ck), MX_CORRUPT_DATA,
        "mx_checkpoint_load: %s: metadata 'step' is '12x', not an integer", bad);
  rewrite(path, bad, NULL, "optimizer.group.0.amsgrad", "yes", false);
  FAILS(mx_checkpoint_load(bad, &ck), MX_CORRUPT_DATA,
        "mx_checkpoint_load: %s: metadata 'optimizer.group.0.amsgrad' is 'yes', not true or false", bad);
  rewrite(path, bad, NULL, "rng.seed", NULL, false);
  FAILS(mx_checkpoint_load(bad, &ck), MX_CORRUPT_DATA, "mx_checkpoint_load: %s: missing metadata 'rng.seed'", bad);
  /* found invalid while restoring: what was restored is put back */
  rewrite(path, bad, NULL, "optimizer.group.1.beta1", "1.5", false);
  FAILS(mx_checkpoint_load(bad, &ck), MX_INVALID_ARGUMENT,
        "mx_checkpoint_load: %s: optimizer group 1: mx_optimizer_set_hparams: invalid beta1 1.5 (must be in [0, 1))",
        bad);
  rewrite(path, bad, NULL, "optimizer.group.0.amsgrad", "true", false);
  FAILS(mx_checkpoint_load(bad, &ck), MX_INVALID_ARGUMENT,
        "mx_checkpoint_load: %s: optimizer group 0: mx_optimizer_set_hparams: group 0 was made with amsgrad false; "
        "it cannot change",
        bad);
  rewrite(path, bad, NULL, "scaler.growth_factor", "0.5", false);
  FAILS(mx_checkpoint_load(bad, &ck), MX_INVALID_ARGUMENT,
        "mx_checkpoint_load: %s: mx_scaler_load_state_dict: growth_factor must be a finite number > 1.0, got 0.5", bad);
  FAILS(mx_checkpoint_load(tmp_path("absent.ckpt"), &ck), MX_IO_ERROR,
        "mx_checkpoint_load: mx_safetensors_load: %s: cannot open (No such file or directory)",
        tmp_path("absent.ckpt"));
  FAILS(mx_checkpoint_load(path, NULL), MX_NULL_INPUT, "mx_checkpoint_load: argument 'ckpt' is NULL");
  FAILS(mx_checkpoint_load(path, &(mx_checkpoint){0}), MX_NULL_INPUT,
        "mx_checkpoint_load: argument 'ckpt->model' is NULL");
  FAILS(mx_checkpoint_save(path, &(mx_checkpoint){0}), MX_NULL_INPUT,
        "mx_checkpoint_save: argument 'ckpt->model' is NULL");

  cr_assert(ck.step == 0 && ck.epoch == 0);
  expect_same_run(&fresh, &untouched);
  mx_memory_stats now = mx_memory_stats_get(MX_CPU);
  cr_assert_eq(now.live_tensors, stats.live_tensors, "failed loads leaked tensors");
  cr_assert_eq(now.bytes_in_use, stats.bytes_in_use, "failed loads leaked memory");
  OK(mx_checkpoint_load(path, &ck)); /* and the good file loads */
  cr_assert(ck.step == 6 && ck.epoch == 1);
  expect_same_run(&saved, &fresh);
  run_free(&saved);
  run_free(&fresh);
  run_free(&untouched);
}

Test(checkpoint, the_objects_must_be_made_as_the_saved_ones) {
  run saved = run_new(1, 2);
  const char *path = tmp_path("run.ckpt");
  mx_checkpoint ck = ckpt_of(&saved);
  OK(mx_checkpoint_save(path, &ck));
  int np = mx_module_num_parameters(saved.model);
  mx_tensor *params[8];
  for (int i = 0; i < np; i++) params[i] = mx_module_parameter(saved.model, i, NULL);
  mx_optimizer *sgd = mx_sgd_new(np, params, NULL), *one_group = mx_adamw_new(np, params, NULL);
  FAILS(mx_checkpoint_load(path, &(mx_checkpoint){.model = saved.model, .optimizer = sgd}), MX_INVALID_ARGUMENT,
        "mx_checkpoint_load: %s: the file's optimizer is AdamW but the one given is SGD", path);
  FAILS(mx_checkpoint_load(path, &(mx_checkpoint){.model = saved.model, .optimizer = one_group}), MX_INVALID_ARGUMENT,
        "mx_checkpoint_load: %s: the file's optimizer has 2 groups of 6 parameters but the one given 1 of 6", path);
  mx_schedule *step_lr = mx_step_lr_new(one_group, 2, 0.5);
  FAILS(mx_checkpoint_load(path, &(mx_checkpoint){.model = saved.model, .schedule = step_lr}), MX_INVALID_ARGUMENT,
        "mx_checkpoint_load: %s: the file's schedule is SequentialLR but the one given is StepLR", path);
  /* parts left out when saving are missing when loading */
  const char *bare = tmp_path("bare.ckpt");
  OK(mx_checkpoint_save(bare, &(mx_checkpoint){.model = saved.model}));
  FAILS(mx_checkpoint_load(bare, &ck), MX_CORRUPT_DATA, "mx_checkpoint_load: %s: missing metadata 'optimizer'", bare);
  FAILS(mx_checkpoint_load(bare, &(mx_checkpoint){.model = saved.model, .scaler = saved.scaler}), MX_CORRUPT_DATA,
        "mx_checkpoint_load: %s: missing metadata 'scaler'", bare);
  FAILS(mx_checkpoint_load(bare, &(mx_checkpoint){.model = saved.model, .schedule = saved.schedule}), MX_CORRUPT_DATA,
        "mx_checkpoint_load: %s: missing metadata 'schedule'", bare);
  /* parts left out when loading are ignored */
  OK(mx_checkpoint_load(path, &(mx_checkpoint){.model = saved.model}));
  /* a disabled scaler saves no state, which an enabled one refuses */
  mx_scaler_opts off = mx_scaler_defaults();
  off.enabled = false;
  mx_scaler *disabled = mx_scaler_new(&off);
  OK(mx_checkpoint_save(bare, &(mx_checkpoint){.model = saved.model, .scaler = disabled}));
  OK(mx_checkpoint_load(bare, &(mx_checkpoint){.model = saved.model, .scaler = disabled}));
  FAILS(mx_checkpoint_load(bare, &(mx_checkpoint){.model = saved.model, .scaler = saved.scaler}), MX_STATE_ERROR,
        "mx_checkpoint_load: %s: mx_scaler_load_state_dict: The source state dict is empty, possibly because it was "
        "saved from a disabled instance of GradScaler.",
        bare);
  mx_scaler_free(disabled);
  /* the optimizer's accessors the checkpoint uses check their arguments */
  mx_adam_opts ao;
  FAILS(mx_optimizer_get_adam_opts(sgd, 0, &ao), MX_INVALID_ARGUMENT,
        "mx_optimizer_get_adam_opts: the optimizer is SGD");
  FAILS(mx_optimizer_set_sgd_opts(sgd, 1, &(mx_sgd_opts){0}), MX_INDEX_ERROR,
        "mx_optimizer_set_sgd_opts: group 1 is out of range (the optimizer has 1)");
  FAILS(mx_optimizer_get_sgd_opts(sgd, 0, NULL), MX_NULL_INPUT, "mx_optimizer_get_sgd_opts: argument 'opts' is NULL");
  const char *names[4];
  mx_clear_error();
  cr_assert_eq(mx_optimizer_state_names(sgd, 6, names), -1);
  cr_assert_str_eq(mx_last_error(), "mx_optimizer_state_names: parameter 6 is out of range (the optimizer has 6)");
  mx_clear_error();
  mx_schedule_free(step_lr);
  mx_optimizer_free(sgd);
  mx_optimizer_free(one_group);
  run_free(&saved);
}

Test(checkpoint, restores_hyper_parameters_and_the_default_generator) {
  mx_generator *gen = mx_generator_new(8);
  mx_module *net = net_new(4, true, gen);
  int np = mx_module_num_parameters(net);
  mx_tensor *params[8];
  for (int i = 0; i < np; i++) params[i] = mx_module_parameter(net, i, NULL);
  mx_sgd_opts o = mx_sgd_defaults();
  o.lr = 0.125, o.momentum = 0.875, o.dampening = 0.25, o.weight_decay = 1e-3, o.maximize = true;
  mx_optimizer *saved = mx_sgd_new(np, params, &o), *fresh = mx_sgd_new(np, params, NULL);
  mx_manual_seed(1234);
  mx_tensor *drawn = mx_rand(MX_SHAPE(5), MX_F32, MX_CPU, NULL);
  const char *path = tmp_path("sgd.ckpt");
  OK(mx_checkpoint_save(path, &(mx_checkpoint){.model = net, .optimizer = saved, .step = -3}));
  mx_manual_seed(5);
  const char *names[4];
  cr_assert_eq(mx_optimizer_state_names(fresh, 0, names), 0, "no momentum: no state yet");
  mx_checkpoint ck = {.model = net, .optimizer = fresh};
  OK(mx_checkpoint_load(path, &ck));
  cr_assert_eq(ck.step, -3);
  mx_sgd_opts got;
  OK(mx_optimizer_get_sgd_opts(fresh, 0, &got));
  cr_assert(got.lr == o.lr && got.momentum == o.momentum && got.dampening == o.dampening &&
                got.weight_decay == o.weight_decay && got.nesterov == o.nesterov && got.maximize == o.maximize,
            "SGD's options came back (lr %g, momentum %g)", got.lr, got.momentum);
  cr_assert_eq(mx_optimizer_state_names(fresh, 0, names), 2, "momentum brought its buffer and step count");
  uint64_t seed, offset;
  mx_generator_get_state(NULL, &seed, &offset);
  cr_assert(seed == 1234 && offset == 5, "the default generator is at (%llu, %llu)", (unsigned long long)seed,
            (unsigned long long)offset);
  mx_release(drawn);
  mx_optimizer_free(saved);
  mx_optimizer_free(fresh);
  mx_module_free(net);
  mx_generator_free(gen);
}

Test(checkpoint, a_checkpoint_is_a_plain_safetensors_file) {
  run r = run_new(1, 2);
  train(&r, 0, 2);
  const char *path = tmp_path("run.ckpt");
  OK(mx_checkpoint_save(path, &(mx_checkpoint){r.model, r.opt, r.scaler, r.gen, r.schedule, 2, 0}));
  mx_safetensors *f = mx_safetensors_load(path);
  cr_assert_not_null(f, "%s", mx_last_error());
  cr_assert_str_eq(mx_safetensors_metadata(f, "format"), "mixgrad.checkpoint.1");
  cr_assert_str_eq(mx_safetensors_metadata(f, "optimizer"), "AdamW");
  cr_assert_str_eq(mx_safetensors_metadata(f, "optimizer.group.1.beta2"), "0.98999999999999999");
  cr_assert_str_eq(mx_safetensors_metadata(f, "scaler"), "enabled");
  cr_assert_str_eq(mx_safetensors_metadata(f, "schedule"), "SequentialLR");
  cr_assert_str_eq(mx_safetensors_metadata(f, "step"), "2");
  cr_assert_eq(mx_item(mx_safetensors_get(f, "optimizer.5.step")), 2);
  cr_assert_eq(mx_dtype_of(mx_safetensors_get(f, "optimizer.0.exp_avg")), MX_F32);
  cr_assert_eq(mx_size(mx_safetensors_get(f, "optimizer.0.exp_avg"), 1), 6);
  cr_assert_not_null(mx_safetensors_get(f, "model.fc1.weight"));
  cr_assert_not_null(mx_safetensors_get(f, "schedule.state"));
  mx_safetensors_free(f);
  run_free(&r);
}
