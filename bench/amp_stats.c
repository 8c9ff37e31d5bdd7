/* What the AMP watcher (amp/stats.h, behind --amp-report) costs a training
 * step: the MNIST CNN under float16 autocast and a GradScaler, timed in
 * alternating rounds of `every` steps without and with the watcher (output
 * hooks on every layer, the fused unscale-and-histogram pass and the layer
 * histograms on the round's one sampled step, the per-step device copies of
 * loss, scale and skips on every step), so drifts of a shared machine hit
 * both alike.
 *
 *     OMP_NUM_THREADS=2 build/bench/amp_stats --every 50 --rounds 4 --batch 128
 *
 * Each round is timed by the wall clock and by the process's CPU time; on a
 * machine others share, run it with OMP_NUM_THREADS=1 and read the CPU
 * times, which another process's load does not stretch. One JSON line on
 * stdout (the per-step times of each round) and a summary on stderr: the
 * median step time of each and the overhead in percent.
 */
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "examples/train/models.h"
#include "mixgrad.h"

typedef struct {
  mx_module *net;
  mx_optimizer *opt;
  mx_scaler *scaler;
  mx_tensor *x, *y;
} run;

static int fail(const char *what) {
  fprintf(stderr, "amp_stats: %s: %s\n", what, mx_last_error());
  return 1;
}

/* One step as the demos take it; st NULL: unwatched. */
static mx_status step(run *r, mx_amp_stats *st) {
  mx_scope *s = mx_scope_begin();
  if (st) mx_amp_stats_step_begin(st);
  mx_status status = mx_optimizer_zero_grad(r->opt, true);
  mx_tensor *loss = NULL;
  MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
    loss = mx_cross_entropy(mx_module_forward(r->net, r->x), r->y, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.0);
  }
  if (status == MX_OK) status = loss ? mx_backward(mx_scaler_scale(r->scaler, loss), NULL, false) : mx_last_status();
  if (status == MX_OK) status = mx_scaler_step(r->scaler, r->opt, NULL);
  if (status == MX_OK) status = mx_scaler_update(r->scaler);
  if (status == MX_OK && st) status = mx_amp_stats_step_end(st, loss);
  mx_scope_end(s);
  return status;
}

static double cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* `every` steps: the wall and CPU milliseconds per step. */
static void timed_round(run *r, mx_amp_stats *st, int64_t every, mx_status *status, double *wall, double *cpu) {
  double t0 = bench_now_ms(), c0 = cpu_ms();
  for (int64_t i = 0; i < every && *status == MX_OK; i++) *status = step(r, st);
  *wall = (bench_now_ms() - t0) / (double)every;
  *cpu = (cpu_ms() - c0) / (double)every;
}

int main(int argc, char **argv) {
  int64_t every = 50, rounds = 4, batch = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    int64_t v = strtoll(argv[i + 1], NULL, 10);
    if (!strcmp(argv[i], "--every") && v >= 1) every = v;
    else if (!strcmp(argv[i], "--rounds") && v >= 1) rounds = v;
    else if (!strcmp(argv[i], "--batch") && v >= 1) batch = v;
    else {
      fprintf(stderr, "usage: amp_stats [--every N] [--rounds N] [--batch N]\n");
      return 2;
    }
  }
  mx_manual_seed(1);
  run r = {.net = mx_demo_cnn()};
  if (!r.net) return fail("model");
  int n = mx_module_num_parameters(r.net);
  mx_tensor *params[16];
  const char *names[16];
  for (int i = 0; i < n && i < 16; i++) params[i] = mx_module_parameter(r.net, i, &names[i]);
  r.opt = mx_adam_new(n, params, NULL);
  r.scaler = mx_scaler_new(NULL);
  r.x = mx_randn(MX_SHAPE(batch, 1, 28, 28), MX_F32, MX_CPU, NULL);
  r.y = mx_randint(0, 10, MX_SHAPE(batch), MX_I64, MX_CPU, NULL);
  mx_amp_stats *st = mx_amp_stats_new(r.scaler, every);
  if (!r.opt || !r.scaler || !r.x || !r.y || !st || mx_amp_stats_name_params(st, n, params, names) != MX_OK)
    return fail("setup");
  mx_status status = MX_OK;
  for (int i = 0; i < 3 && status == MX_OK; i++) status = step(&r, NULL); /* warm-up: oneDNN's primitives */
  /* [0] plain, [1] watched; wall then CPU, a round each */
  double *t[2][2];
  for (int m = 0; m < 2; m++)
    for (int c = 0; c < 2; c++) t[m][c] = malloc(sizeof *t[m][c] * (size_t)rounds);
  if (!t[0][0] || !t[0][1] || !t[1][0] || !t[1][1]) return fail("out of memory");
  for (int64_t k = 0; k < rounds && status == MX_OK; k++) {
    mx_module_set_output_hook(r.net, NULL, NULL);
    timed_round(&r, NULL, every, &status, &t[0][0][k], &t[0][1][k]);
    mx_module_set_output_hook(r.net, mx_amp_stats_output_hook, st);
    timed_round(&r, st, every, &status, &t[1][0][k], &t[1][1][k]);
  }
  if (status != MX_OK) return fail("step");
  printf("{\"bench\":\"amp_stats\",\"model\":\"cnn\",\"amp\":\"f16\",\"batch\":%lld,\"every\":%lld,\"threads\":%d",
         (long long)batch, (long long)every, bench_threads());
  static const char *const keys[2][2] = {{"plain_wall_ms", "plain_cpu_ms"}, {"watched_wall_ms", "watched_cpu_ms"}};
  for (int m = 0; m < 2; m++)
    for (int c = 0; c < 2; c++) fputc(',', stdout), bench_json_doubles(stdout, keys[m][c], t[m][c], (int)rounds);
  printf(",\"samples\":%d}\n", mx_amp_stats_num_samples(st));
  for (int c = 0; c < 2; c++) {
    double a = bench_median(t[0][c], (int)rounds), b = bench_median(t[1][c], (int)rounds);
    fprintf(stderr, "MNIST CNN f16, batch %lld, sampled every %lld steps, %d thread(s), %s time: %.2f ms/step plain, "
            "%.2f ms/step watched: %+.2f%%\n", (long long)batch, (long long)every, bench_threads(),
            c ? "CPU" : "wall", a, b, 100 * (b - a) / a);
  }
  mx_module_set_output_hook(r.net, NULL, NULL);
  mx_amp_stats_free(st);
  mx_scaler_free(r.scaler);
  mx_optimizer_free(r.opt);
  mx_module_free(r.net);
  mx_release(r.x);
  mx_release(r.y);
  for (int m = 0; m < 2; m++)
    for (int c = 0; c < 2; c++) free(t[m][c]);
  return 0;
}
