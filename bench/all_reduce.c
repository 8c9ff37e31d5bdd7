/* mixgrad's collectives timed on 2 ranks on this machine (bench/all_reduce.py is
 * PyTorch's twin, on gloo): the ranks are forked here (tests/dist/ranks.c),
 * meet on a free loopback port, and rank 0 prints one JSON line per measurement:
 *
 *     {"impl":"mixgrad","op":"all_reduce","bytes":2678824,"times_ms":[...]}
 *
 * Each timing is one call, back to back after warm-up calls; all_reduce
 * sums float32 tensors of the sizes below (2,678,824 bytes are the MNIST
 * MLP's gradients), barrier waits for the other rank.
 *
 *     build/bench/all_reduce [--quick]      # OMP_NUM_THREADS=1 per rank is the fair setting
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "bench/bench_util.h"
#include "mixgrad.h"
#include "tests/dist/ranks.h" /* the ranks, forked as the dist tests fork theirs */

#define WORLD 2

static const long sizes[] = {4096, 262144, 2678824, 16777216}; /* bytes */

static void report(int rank, const char *op, long bytes, const double *times, int n) {
  if (rank != 0) return;
  printf("{\"impl\":\"mixgrad\",\"op\":\"%s\",\"bytes\":%ld,", op, bytes);
  bench_json_doubles(stdout, "times_ms", times, n);
  printf("}\n");
}

/* One rank's measurements; 0, or 1 with the error set. */
static int rank_main(int rank, int port, bool quick) {
  mx_process_group *g = mx_dist_init(rank, WORLD, "127.0.0.1", port, 60);
  if (!g) return 1;
  int reps = quick ? 5 : 50;
  double times[50];
  int rc = 0;
  for (size_t k = 0; rc == 0 && k < sizeof sizes / sizeof *sizes; k++) {
    mx_tensor *t = mx_ones(MX_SHAPE(sizes[k] / 4), MX_F32, MX_CPU);
    for (int i = -5; rc == 0 && i < reps; i++) {
      double t0 = bench_now_ms();
      if (mx_dist_all_reduce(g, t, MX_DIST_SUM) != MX_OK) rc = 1;
      if (i >= 0) times[i] = bench_now_ms() - t0;
    }
    mx_release(t);
    if (rc == 0) report(rank, "all_reduce", sizes[k], times, reps);
  }
  for (int i = -5; rc == 0 && i < reps; i++) {
    double t0 = bench_now_ms();
    if (mx_dist_barrier(g) != MX_OK) rc = 1;
    if (i >= 0) times[i] = bench_now_ms() - t0;
  }
  if (rc == 0) report(rank, "barrier", 0, times, reps);
  fflush(stdout);
  mx_dist_free(g);
  return rc;
}

static void timed_rank(int rank, int world, int port, void *ctx, rank_report *out) {
  (void)world;
  if (rank_main(rank, port, *(bool *)ctx) != 0) snprintf(out->msg, sizeof out->msg, "%s", mx_last_error());
}

int main(int argc, char **argv) {
  bool quick = argc > 1 && !strcmp(argv[1], "--quick");
  rank_report reports[WORLD];
  int failed = run_ranks(WORLD, timed_rank, &quick, reports);
  for (int r = 0; r < WORLD; r++)
    if (reports[r].msg[0]) fprintf(stderr, "all_reduce: rank %d: %s\n", r, reports[r].msg);
  return failed ? 1 : 0;
}
