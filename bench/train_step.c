/* The training-step benchmark, mixgrad's side (bench/train_step.py is
 * PyTorch's; bench/run_train.py runs both, alternating, and compares).
 *
 *     OMP_NUM_THREADS=2 build/bench/train_step --model cnn --amp bf16 --batch 128 --warmup 5 --repeat 30
 *     build/bench/train_step --device cuda --model resnet9 --amp bf16 --batch 64
 *     build/bench/train_step --model resnet9 --channels-last
 *
 * A step is what a training loop does per batch: zero_grad (set_to_none),
 * forward under autocast, cross-entropy, backward (through an enabled
 * GradScaler for f16), optimizer step, and the end of the step's scope,
 * which frees its temporaries as PyTorch frees them when their last
 * reference goes. Every step reuses one random batch, so the time is the
 * framework's, not a data loader's. On CUDA each step ends with
 * mx_synchronize, so its time is the GPU's work and not just the launches.
 * --channels-last lays the batch out channels-last once
 * (mx_to_channels_last), and on CUDA the model's 4-d weights too
 * (mx_module_to_channels_last), so cuDNN reads them without a KRSC copy,
 * as train_step.py's --channels-last does (model.to(memory_format=...)).
 * The CPU keeps row-major weights: oneDNN reorders either layout into its
 * own blocked one, so the CPU rows stay comparable with earlier rounds.
 * --cudnn-tf32 and --cudnn-nondeterministic set mx_set_cudnn_allow_tf32
 * and mx_set_cudnn_deterministic(false) (PyTorch's defaults for its cuDNN
 * convolutions; mixgrad's are exact float32 and deterministic), as
 * train_step.py's flags of those names set torch.backends.cudnn's.
 * --cudnn-benchmark times cuDNN's algorithms for each new geometry and
 * keeps the fastest allowed (mx_set_cudnn_benchmark; PyTorch's
 * torch.backends.cudnn.benchmark, off by default on both); the timing
 * happens in the warm-up steps.
 * --no-scaler runs an f16 step without its GradScaler. --scaler-share
 * alternates f16 steps with the GradScaler and without it in one process,
 * in pairs whose order alternates too, and prints the second kind's times
 * as "times_without_scaler_ms": loss scaling's share of the step is the
 * difference. Separate processes cannot show it: on a GPU machine one
 * process's median step differs from the next one's by up to 30%
 * (bench/GPU.md), far more than the 2% being measured.
 * "host_ms" times each timed step (with the GradScaler, under
 * --scaler-share) up to its closing synchronisation: the host's part. On a
 * GPU a step whose host part is near its whole time is bound by the host
 * (or waits for the device inside the step); one well below it, by the
 * device. On the CPU the two are the same.
 * The result is one JSON line on stdout:
 *
 *     {"impl":"mixgrad","model":"cnn","amp":"bf16","device":"cpu","batch":128,"threads":2,"warmup":5,
 *      "channels_last":false,"cudnn_tf32":false,"cudnn_deterministic":true,"cudnn_benchmark":false,
 *      "scaler":false,
 *      "times_ms":[...one per timed step...],"host_ms":[...],["times_without_scaler_ms":[...],]
 *      "peak_rss_kb":...,"base_rss_kb":...,
 *      "graph_bytes":...,"forward_bytes":...,"params":...,"version":"0.1.0"}
 *
 * and a one-line summary on stderr for people.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "examples/train/models.h"
#include "mixgrad.h"
#include "mx_config.h"

typedef struct {
  const char *model; /* mlp | cnn | resnet9 */
  const char *amp;   /* off | bf16 | f16 */
  mx_device device;
  int64_t batch, warmup, repeat, seed;
  double seconds; /* a cap on the timed steps' time (warm-up: a quarter of it); 0: none */
  bool channels_last;
  bool cudnn_tf32, cudnn_nondeterministic; /* PyTorch's cuDNN defaults instead of mixgrad's */
  bool cudnn_benchmark;                    /* algorithms chosen by timing them */
  bool no_scaler;                          /* f16 without loss scaling */
  bool scaler_share;                       /* f16 steps with and without it, alternating */
} options;

/* What a run makes, freed in one place. */
typedef struct {
  mx_module *net;
  mx_optimizer *opt;
  mx_scaler *scaler; /* f16 only: bf16 has float32's range and needs none */
  mx_dtype amp;      /* MX_F32: autocast off */
  mx_device device;
  mx_tensor *x, *y;  /* the batch: images, int64 labels */
} bench_state;

static int fail(const char *what) {
  fprintf(stderr, "train_step: %s: %s\n", what, mx_last_error());
  return 1;
}

/* mlp: SGD momentum 0.9, lr 0.05; cnn: Adam, lr 1e-3; resnet9: Nesterov SGD,
 * lr 0.1, weight decay 5e-4 (the recipes of mnist.c and cifar10.c, without
 * their schedules: a schedule's cost is not the step's). */
static mx_optimizer *make_optimizer(const char *model, const mx_module *net) {
  int n = mx_module_num_parameters(net);
  mx_tensor **params = malloc((size_t)n * sizeof *params);
  if (!params) return NULL;
  for (int i = 0; i < n; i++) params[i] = mx_module_parameter(net, i, NULL);
  mx_optimizer *opt;
  if (!strcmp(model, "cnn")) {
    mx_adam_opts o = mx_adam_defaults();
    o.lr = 1e-3;
    opt = mx_adam_new(n, params, &o);
  } else {
    bool resnet = !strcmp(model, "resnet9");
    mx_sgd_opts o = mx_sgd_defaults();
    o.lr = resnet ? 0.1 : 0.05, o.momentum = 0.9, o.nesterov = resnet, o.weight_decay = resnet ? 5e-4 : 0.0;
    opt = mx_sgd_new(n, params, &o);
  }
  free(params);
  return opt;
}

/* --- the step ------------------------------------------------------------------------------------------------- */

/* The batch's mean cross-entropy under the run's autocast (NULL with the
 * error set). */
static mx_tensor *forward_loss(const bench_state *b) {
  mx_tensor *loss = NULL;
  MX_AUTOCAST(b->device, b->amp == MX_F32 ? MX_AUTOCAST_DEFAULT_DTYPE : b->amp, b->amp != MX_F32, true) {
    mx_tensor *logits = mx_module_forward(b->net, b->x);
    loss = logits ? mx_cross_entropy(logits, b->y, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.0) : NULL;
  }
  return loss;
}

/* Backward and update: plain, or scaled, unscaled and checked by the
 * GradScaler (f16; NULL: none). */
static mx_status backward_step(bench_state *b, mx_scaler *scaler, mx_tensor *loss) {
  if (!scaler) {
    mx_status st = mx_backward(loss, NULL, false);
    return st == MX_OK ? mx_optimizer_step(b->opt) : st;
  }
  mx_status st = mx_backward(mx_scaler_scale(scaler, loss), NULL, false);
  if (st == MX_OK) st = mx_scaler_step(scaler, b->opt, NULL);
  return st == MX_OK ? mx_scaler_update(scaler) : st;
}

/* A step; *host_ms (NULL: not wanted) its time from start_ms until the
 * host has queued all of it, before the closing synchronisation. */
static mx_status train_step(bench_state *b, mx_scaler *scaler, double start_ms, double *host_ms) {
  mx_scope *s = mx_scope_begin();
  mx_status st = mx_optimizer_zero_grad(b->opt, true);
  if (st == MX_OK) {
    mx_tensor *loss = forward_loss(b);
    st = loss ? backward_step(b, scaler, loss) : mx_last_status();
  }
  mx_scope_end(s);
  if (host_ms) *host_ms = bench_now_ms() - start_ms;
  return st == MX_OK ? mx_synchronize(b->device) : st;
}

/* One more step, untimed, that measures what the forward pass leaves in
 * memory: mx_memory_stats_get(b->device).bytes_in_use (storage bytes) after
 * the loss is computed minus the value before the forward, taken after
 * zero_grad so the last step's gradients are gone and only the
 * parameters, optimizer state and batch are counted in "before".
 *   forward_bytes: with every handle the forward made still open, as a
 *     loop that holds its scope sees it (mx_module_forward already
 *     releases each layer's temporaries, so this is graph_bytes plus the
 *     logits);
 *   graph_bytes: after those handles are released and only the loss is
 *     kept, so what remains is what the autograd graph holds for backward
 *     (saved activations, autocast's casts of weights and inputs) plus
 *     the 0-d loss. PyTorch's side sums the storages its saved-tensor hooks
 *     see, less the parameters and the batch: the same quantity. */
static mx_status measure_graph(bench_state *b, int64_t *graph_bytes, int64_t *forward_bytes) {
  mx_scope *s = mx_scope_begin();
  mx_status st = mx_optimizer_zero_grad(b->opt, true);
  if (st == MX_OK) {
    int64_t before = mx_memory_stats_get(b->device).bytes_in_use;
    mx_scope *forward = mx_scope_begin();
    mx_tensor *loss = forward_loss(b);
    *forward_bytes = mx_memory_stats_get(b->device).bytes_in_use - before;
    if (loss) mx_keep(loss);
    mx_scope_end(forward);
    *graph_bytes = mx_memory_stats_get(b->device).bytes_in_use - before;
    st = loss ? backward_step(b, b->scaler, loss) : mx_last_status();
  }
  mx_scope_end(s);
  return st;
}

/* --- a run ---------------------------------------------------------------------------------------------------- */

static int setup(bench_state *b, const options *o) {
  bool mnist = strcmp(o->model, "resnet9") != 0;
  b->amp = !strcmp(o->amp, "f16") ? MX_F16 : !strcmp(o->amp, "bf16") ? MX_BF16 : MX_F32;
  b->device = o->device;
  b->net = !strcmp(o->model, "mlp") ? mx_demo_mlp() : mnist ? mx_demo_cnn() : mx_demo_resnet9();
  if (!b->net) return fail("model");
  if (mx_module_to(b->net, b->device) != MX_OK) return fail("the model to the device");
  if (o->channels_last && b->device == MX_CUDA && mx_module_to_channels_last(b->net) != MX_OK)
    return fail("the model channels-last");
  b->opt = make_optimizer(o->model, b->net);
  if (!b->opt) return fail("optimizer");
  if (b->amp == MX_F16 && !o->no_scaler) {
    mx_scaler_opts so = mx_scaler_defaults();
    so.enabled = true;
    b->scaler = mx_scaler_new(&so);
    if (!b->scaler) return fail("GradScaler");
  }
  mx_shape image = mnist ? MX_SHAPE(o->batch, 1, 28, 28) : MX_SHAPE(o->batch, 3, 32, 32);
  b->x = mx_randn(image, MX_F32, b->device, NULL);
  if (b->x && o->channels_last) {
    mx_tensor *x = mx_to_channels_last(b->x);
    mx_release(b->x);
    b->x = x;
  }
  b->y = mx_randint(0, 10, MX_SHAPE(o->batch), MX_I64, b->device, NULL);
  return b->x && b->y ? 0 : fail("batch");
}

static void free_state(bench_state *b) {
  mx_release(b->x);
  mx_release(b->y);
  mx_scaler_free(b->scaler);
  mx_optimizer_free(b->opt);
  mx_module_free(b->net);
}

static void print_result(const bench_state *b, const options *o, const double *times, const double *host_times,
                         const double *times_without, long base_rss_kb, int64_t graph_bytes, int64_t forward_bytes) {
  printf("{\"impl\":\"mixgrad\",\"model\":\"%s\",\"amp\":\"%s\",\"device\":\"%s\",\"batch\":%lld,\"threads\":%d,"
         "\"warmup\":%lld,\"channels_last\":%s,\"cudnn_tf32\":%s,\"cudnn_deterministic\":%s,"
         "\"cudnn_benchmark\":%s,\"scaler\":%s,",
         o->model, o->amp, mx_device_name(o->device), (long long)o->batch, bench_threads(), (long long)o->warmup,
         o->channels_last ? "true" : "false", mx_cudnn_allow_tf32() ? "true" : "false",
         mx_cudnn_deterministic() ? "true" : "false", mx_cudnn_benchmark() ? "true" : "false",
         b->scaler ? "true" : "false");
  bench_json_doubles(stdout, "times_ms", times, (int)o->repeat);
  putchar(',');
  bench_json_doubles(stdout, "host_ms", host_times, (int)o->repeat);
  if (o->scaler_share) {
    putchar(',');
    bench_json_doubles(stdout, "times_without_scaler_ms", times_without, (int)o->repeat);
  }
  printf(",\"peak_rss_kb\":%ld,\"base_rss_kb\":%ld,\"graph_bytes\":%lld,\"forward_bytes\":%lld,\"params\":%lld,"
         "\"version\":\"%s\"}\n",
         bench_peak_rss_kb(), base_rss_kb, (long long)graph_bytes, (long long)forward_bytes,
         (long long)mx_module_parameter_count(b->net), MX_VERSION);
  fprintf(stderr, "train_step: mixgrad %s amp %s on %s, batch %lld, %d threads: median %.3f ms over %lld steps\n",
          o->model, o->amp, mx_device_name(o->device), (long long)o->batch, bench_threads(),
          bench_median(times, (int)o->repeat), (long long)o->repeat);
  if (o->scaler_share)
    fprintf(stderr, "train_step: without the GradScaler, in the same process: median %.3f ms\n",
            bench_median(times_without, (int)o->repeat));
}

/* Whether a loop that began at start_ms and has made `done` steps stops
 * before its next: past its count, or past its share of --seconds once it
 * has made `least` steps. */
static bool loop_done(const options *o, int64_t done, int64_t count, int64_t least, double share, double start_ms) {
  if (done >= count) return true;
  return o->seconds > 0 && done >= least && bench_now_ms() - start_ms > o->seconds * 1e3 * share;
}

/* Warm-up steps, timed steps, the measuring step, the result. --seconds
 * caps a slow configuration's process: warm-up stops after a quarter of
 * it (one step at least), timing after all of it (three steps at least),
 * as in train_step.py. */
/* One timed step, with the GradScaler or without it; its time in *ms, its
 * host's part in *host_ms (NULL: not wanted). */
static mx_status timed_step(bench_state *b, mx_scaler *scaler, double *ms, double *host_ms) {
  double t0 = bench_now_ms();
  mx_status st = train_step(b, scaler, t0, host_ms);
  *ms = bench_now_ms() - t0;
  return st;
}

/* A timed iteration: one step, or with --scaler-share a pair, the one with
 * the GradScaler first in even iterations and second in odd ones, so
 * neither kind always follows the other. */
static mx_status timed_iteration(bench_state *b, const options *o, int64_t i, double *with, double *host,
                                 double *without) {
  if (!o->scaler_share) return timed_step(b, b->scaler, with, host);
  bool scaler_first = i % 2 == 0;
  mx_status st = scaler_first ? timed_step(b, b->scaler, with, host) : timed_step(b, NULL, without, NULL);
  if (st != MX_OK) return st;
  return scaler_first ? timed_step(b, NULL, without, NULL) : timed_step(b, b->scaler, with, host);
}

static int run(bench_state *b, options *o, long base_rss_kb) {
  double *times = malloc((size_t)o->repeat * sizeof *times);
  double *host_times = malloc((size_t)o->repeat * sizeof *host_times);
  double *times_without = malloc((size_t)o->repeat * sizeof *times_without);
  int rc = times && host_times && times_without ? 0 : fail("out of memory");
  double start = bench_now_ms(), unused;
  for (int64_t i = 0; rc == 0 && !loop_done(o, i, o->warmup, 1, 0.25, start); i++)
    if (timed_iteration(b, o, i, &unused, NULL, &unused) != MX_OK) rc = fail("warm-up step");
  start = bench_now_ms();
  int64_t timed = 0;
  for (; rc == 0 && !loop_done(o, timed, o->repeat, 3, 1.0, start); timed++)
    if (timed_iteration(b, o, timed, &times[timed], &host_times[timed], &times_without[timed]) != MX_OK)
      rc = fail("timed step");
  o->repeat = timed;
  int64_t graph_bytes = 0, forward_bytes = 0;
  if (rc == 0 && measure_graph(b, &graph_bytes, &forward_bytes) != MX_OK) rc = fail("measuring step");
  if (rc == 0) print_result(b, o, times, host_times, times_without, base_rss_kb, graph_bytes, forward_bytes);
  free(times);
  free(host_times);
  free(times_without);
  return rc;
}

/* --- flags ---------------------------------------------------------------------------------------------------- */

static void usage(FILE *out) {
  fprintf(out, "usage: train_step [--model mlp|cnn|resnet9] [--amp off|bf16|f16] [--device cpu|cuda] [--batch N]\n"
               "                  [--warmup N] [--repeat N] [--seed N] [--seconds S] [--channels-last]\n"
               "                  [--cudnn-tf32] [--cudnn-nondeterministic] [--cudnn-benchmark]\n"
               "                  [--no-scaler | --scaler-share]\n"
               "Times mixgrad's training step on a random batch and prints one JSON line.\n"
               "Defaults: --model cnn --amp off --device cpu --batch 128 --warmup 5 --repeat 30 --seed 1.\n"
               "--seconds caps the timed steps' time (at least 3 steps) and the warm-up's at a quarter of it.\n"
               "--cudnn-tf32 lets float32 convolutions on cuDNN use TF32 (mx_set_cudnn_allow_tf32), and\n"
               "--cudnn-nondeterministic lets cuDNN pick non-deterministic algorithms (mx_set_cudnn_deterministic):\n"
               "PyTorch's defaults; without them, mixgrad's (exact float32, deterministic).\n"
               "--cudnn-benchmark: cuDNN's algorithms timed for each new geometry, the fastest allowed kept\n"
               "(mx_set_cudnn_benchmark, as torch.backends.cudnn.benchmark; off on both by default).\n"
               "--no-scaler: an f16 step without its GradScaler (loss scaling's share is the difference).\n"
               "--scaler-share: f16 steps with and without the GradScaler, alternating in this process\n"
               "(each --repeat makes one of each; the second kind's times are \"times_without_scaler_ms\").\n"
               "Threads: OMP_NUM_THREADS.\n");
}

/* value if it is one of the names (NULL-terminated), else NULL. */
static const char *pick(const char *value, const char *const *names) {
  for (; *names; names++)
    if (!strcmp(value, *names)) return *names;
  return NULL;
}

static bool parse_count(const char *s, int64_t lo, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > 1000000000) return false;
  *out = v;
  return true;
}

static bool parse_flag(const char *flag, const char *value, options *o) {
  static const char *const models[] = {"mlp", "cnn", "resnet9", NULL}, *const amps[] = {"off", "bf16", "f16", NULL};
  if (!strcmp(flag, "--device")) {
    bool cpu = !strcmp(value, "cpu"), cuda = !strcmp(value, "cuda");
    o->device = cuda ? MX_CUDA : MX_CPU;
    return cpu || cuda;
  }
  if (!strcmp(flag, "--model")) return (o->model = pick(value, models)) != NULL;
  if (!strcmp(flag, "--amp")) return (o->amp = pick(value, amps)) != NULL;
  if (!strcmp(flag, "--batch")) return parse_count(value, 1, &o->batch);
  if (!strcmp(flag, "--warmup")) return parse_count(value, 0, &o->warmup);
  if (!strcmp(flag, "--repeat")) return parse_count(value, 1, &o->repeat);
  if (!strcmp(flag, "--seed")) return parse_count(value, 0, &o->seed);
  if (!strcmp(flag, "--seconds")) {
    int64_t s;
    if (!parse_count(value, 0, &s)) return false;
    o->seconds = (double)s;
    return true;
  }
  return false;
}

/* 0: parsed; 1: --help printed; 2: a bad flag (reported). */
static int parse_args(int argc, char **argv, options *o) {
  for (int i = 1; i < argc; i += 2) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 1;
    }
    bool *flag = !strcmp(argv[i], "--channels-last")          ? &o->channels_last
                 : !strcmp(argv[i], "--cudnn-tf32")             ? &o->cudnn_tf32
                 : !strcmp(argv[i], "--cudnn-nondeterministic") ? &o->cudnn_nondeterministic
                 : !strcmp(argv[i], "--cudnn-benchmark")        ? &o->cudnn_benchmark
                 : !strcmp(argv[i], "--no-scaler")              ? &o->no_scaler
                 : !strcmp(argv[i], "--scaler-share")           ? &o->scaler_share
                                                                : NULL;
    if (flag) { /* a switch: no value */
      *flag = true;
      i--;
      continue;
    }
    if (i + 1 >= argc || !parse_flag(argv[i], argv[i + 1], o)) {
      fprintf(stderr, "train_step: bad flag or value: %s %s\n", argv[i], i + 1 < argc ? argv[i + 1] : "");
      usage(stderr);
      return 2;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  options o = {.model = "cnn", .amp = "off", .device = MX_CPU, .batch = 128, .warmup = 5, .repeat = 30, .seed = 1};
  int parsed = parse_args(argc, argv, &o);
  if (parsed) return parsed == 1 ? 0 : 2;
  if (o.scaler_share && (strcmp(o.amp, "f16") != 0 || o.no_scaler)) {
    fprintf(stderr, "train_step: --scaler-share needs --amp f16 and no --no-scaler\n");
    return 2;
  }
  mx_set_cudnn_allow_tf32(o.cudnn_tf32);
  mx_set_cudnn_deterministic(!o.cudnn_nondeterministic);
  mx_set_cudnn_benchmark(o.cudnn_benchmark);
  long base_rss_kb = bench_current_rss_kb(); /* the process before the model: libraries, runtime */
  mx_manual_seed((uint64_t)o.seed);
  bench_state b = {0};
  int rc = setup(&b, &o);
  if (rc == 0) rc = run(&b, &o, base_rss_kb);
  free_state(&b);
  return rc;
}
