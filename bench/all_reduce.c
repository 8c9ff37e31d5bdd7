/* mixgrad's collectives timed over the ranks mpirun started, beside the
 * same sums done by raw MPI_Allreduce (bench/all_reduce.py is PyTorch's
 * twin, on gloo). Rank 0 prints one JSON line per measurement:
 *
 *     {"impl":"mixgrad","op":"all_reduce","bytes":2678824,"times_ms":[...]}
 *
 * Each timing is one call, back to back after warm-up calls; all_reduce
 * sums float32 tensors of the sizes below (2,678,824 bytes are the MNIST
 * MLP's gradients), barrier waits for the other ranks. ddp_step_mlp and
 * ddp_step_cnn are data-parallel training steps of the MNIST MLP and CNN
 * (bench/train_step.c's models; SGD with momentum for both), a batch of
 * 128 split among the ranks: zero_grad, forward, cross-entropy, backward,
 * mx_ddp_average_gradients (each bucket's all-reduce started during
 * backward), step. The _no_overlap twins average the gradients after
 * backward instead, in one all-reduce, as a reducer without overlap does.
 *
 *     scripts/launch 2 build/bench/all_reduce [--quick]   # OMP_NUM_THREADS=1 per rank is the fair setting
 */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "examples/train/models.h"
#include "mixgrad.h"

static const long sizes[] = {4096, 262144, 2678824, 16777216}; /* bytes */

static void report(int rank, const char *impl, const char *op, long bytes, const double *times, int n) {
  if (rank != 0) return;
  printf("{\"impl\":\"%s\",\"op\":\"%s\",\"bytes\":%ld,", impl, op, bytes);
  bench_json_doubles(stdout, "times_ms", times, n);
  printf("}\n");
}

/* A model, its optimizer and this rank's share of a batch, for the DDP steps. */
typedef struct {
  mx_module *net;
  mx_optimizer *opt;
  mx_tensor *x, *y;
  bool overlap;     /* averaged by mx_ddp_average_gradients, else by average_after_backward */
  mx_tensor *flat;  /* without overlap: every gradient packed, for one all-reduce after backward */
  mx_tensor **slot; /* views of flat, one per parameter, shaped like it */
} ddp_bench;

/* What a reducer without overlap does, the baseline for DDP's: after
 * backward, the gradients (all float32 here) packed into one buffer (these
 * models' gradients are under DDP's 25 MiB bucket, so its buckets would
 * hold them all), averaged in one all-reduce, copied back. It leaves out
 * DDP's check that every rank has the same gradients (one more small
 * all-reduce), which favours this side. */
static mx_status average_after_backward(mx_process_group *g, const ddp_bench *b) {
  int n = mx_module_num_parameters(b->net);
  mx_status st = MX_OK;
  for (int i = 0; st == MX_OK && i < n; i++)
    st = mx_copy_(b->slot[i], mx_grad_of(mx_module_parameter(b->net, i, NULL)));
  if (st == MX_OK) st = mx_dist_all_reduce(g, b->flat, MX_DIST_AVG);
  for (int i = 0; st == MX_OK && i < n; i++)
    st = mx_copy_(mx_grad_of(mx_module_parameter(b->net, i, NULL)), b->slot[i]);
  return st;
}

/* One data-parallel step on this rank's share of the batch. With overlap,
 * mx_ddp_average_gradients's first call hooks the parameters, and from the
 * second step on each bucket's all-reduce starts during backward. */
static mx_status ddp_step(mx_process_group *g, const ddp_bench *b) {
  mx_scope *s = mx_scope_begin();
  mx_status st = mx_optimizer_zero_grad(b->opt, true);
  mx_tensor *logits = st == MX_OK ? mx_module_forward(b->net, b->x) : NULL;
  mx_tensor *loss = logits ? mx_cross_entropy(logits, b->y, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.0) : NULL;
  if (st == MX_OK) st = loss ? mx_backward(loss, NULL, false) : mx_last_status();
  if (st == MX_OK) st = b->overlap ? mx_ddp_average_gradients(g, b->net) : average_after_backward(g, b);
  if (st == MX_OK) st = mx_optimizer_step(b->opt);
  mx_scope_end(s);
  return st;
}

/* The model ("mlp" or "cnn", bench/train_step.c's), SGD with momentum (the
 * MLP's recipe, for both), a random batch of 128 / world (MNIST-shaped),
 * rank 0's weights: MX_OK or the error. */
static mx_status ddp_setup(mx_process_group *g, ddp_bench *b, const char *model, bool overlap) {
  int rank = mx_dist_rank(g), world = mx_dist_world_size(g);
  *b = (ddp_bench){.overlap = overlap, .net = strcmp(model, "cnn") ? mx_demo_mlp() : mx_demo_cnn()};
  if (!b->net) return mx_last_status();
  int n = mx_module_num_parameters(b->net);
  mx_tensor **params = calloc((size_t)n, sizeof *params);
  b->slot = calloc((size_t)n, sizeof *b->slot);
  if (!params || !b->slot) {
    free(params);
    return MX_OUT_OF_MEMORY;
  }
  int64_t total = 0;
  for (int i = 0; i < n; i++) params[i] = mx_module_parameter(b->net, i, NULL), total += mx_numel(params[i]);
  mx_sgd_opts o = mx_sgd_defaults();
  o.lr = 0.05, o.momentum = 0.9;
  b->opt = mx_sgd_new(n, params, &o);
  if (!overlap) { /* the packed buffer made once, as DDP makes its buckets once */
    b->flat = mx_empty(MX_SHAPE(total), MX_F32, MX_CPU);
    for (int64_t i = 0, at = 0; b->flat && i < n; at += mx_numel(params[i]), i++) {
      mx_scope *s = mx_scope_begin();
      mx_tensor *run = mx_narrow(b->flat, 0, at, mx_numel(params[i]));
      b->slot[i] = run ? mx_view(run, mx_shape_get(params[i])) : NULL;
      if (b->slot[i]) mx_keep(b->slot[i]);
      mx_scope_end(s);
    }
  }
  free(params);
  for (int i = 0; !overlap && i < n; i++)
    if (!b->slot[i]) return mx_last_status();
  mx_generator *gen = mx_generator_new(7 + (uint64_t)rank);
  b->x = mx_randn(MX_SHAPE(128 / world, 1, 28, 28), MX_F32, MX_CPU, gen);
  b->y = mx_randint(0, 10, MX_SHAPE(128 / world), MX_I64, MX_CPU, gen);
  mx_generator_free(gen);
  if (!b->opt || !b->x || !b->y) return mx_last_status();
  return mx_ddp_broadcast_module(g, b->net, 0);
}

static void ddp_free(ddp_bench *b) {
  for (int i = 0; b->slot && i < mx_module_num_parameters(b->net); i++) mx_release(b->slot[i]);
  free(b->slot);
  mx_release(b->flat);
  mx_release(b->x);
  mx_release(b->y);
  mx_optimizer_free(b->opt);
  mx_module_free(b->net);
}

/* The DDP steps of one model, with or without overlap, timed into times
 * after 5 warm-up steps; 0, or 1 with the error set. */
static int time_ddp_steps(mx_process_group *g, const char *model, bool overlap, double *times, int reps) {
  ddp_bench b;
  int rc = ddp_setup(g, &b, model, overlap) == MX_OK ? 0 : 1;
  for (int i = -5; rc == 0 && i < reps; i++) {
    double t0 = bench_now_ms();
    if (ddp_step(g, &b) != MX_OK) rc = 1;
    if (i >= 0) times[i] = bench_now_ms() - t0;
  }
  ddp_free(&b);
  return rc;
}

int main(int argc, char **argv) {
  bool quick = argc > 1 && !strcmp(argv[1], "--quick");
  mx_process_group *g = mx_dist_init(60);
  if (!g) return fprintf(stderr, "all_reduce: %s\n", mx_last_error()), 1;
  int rank = mx_dist_rank(g), reps = quick ? 5 : 50, rc = 0;
  double times[50];
  for (size_t k = 0; rc == 0 && k < sizeof sizes / sizeof *sizes; k++) {
    mx_tensor *t = mx_ones(MX_SHAPE(sizes[k] / 4), MX_F32, MX_CPU);
    for (int i = -5; rc == 0 && i < reps; i++) {
      double t0 = bench_now_ms();
      if (mx_dist_all_reduce(g, t, MX_DIST_SUM) != MX_OK) rc = 1;
      if (i >= 0) times[i] = bench_now_ms() - t0;
    }
    if (rc == 0) report(rank, "mixgrad", "all_reduce", sizes[k], times, reps);
    for (int i = -5; rc == 0 && i < reps; i++) { /* the engine alone, on the same buffer */
      double t0 = bench_now_ms();
      if (MPI_Allreduce(MPI_IN_PLACE, mx_data_ptr(t), (int)(sizes[k] / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD))
        rc = 1;
      if (i >= 0) times[i] = bench_now_ms() - t0;
    }
    if (rc == 0) report(rank, "mpi", "all_reduce", sizes[k], times, reps);
    mx_release(t);
  }
  for (int i = -5; rc == 0 && i < reps; i++) {
    double t0 = bench_now_ms();
    if (mx_dist_barrier(g) != MX_OK) rc = 1;
    if (i >= 0) times[i] = bench_now_ms() - t0;
  }
  if (rc == 0) report(rank, "mixgrad", "barrier", 0, times, reps);
  static const char *const models[] = {"mlp", "cnn"};
  for (int k = 0; rc == 0 && k < 2; k++)
    for (int overlap = 1; rc == 0 && overlap >= 0; overlap--) {
      char op[64];
      snprintf(op, sizeof op, "ddp_step_%s%s", models[k], overlap ? "" : "_no_overlap");
      if ((rc = time_ddp_steps(g, models[k], overlap, times, reps)) == 0) report(rank, "mixgrad", op, 0, times, reps);
    }
  if (rc) fprintf(stderr, "all_reduce: rank %d: %s\n", rank, mx_last_error());
  fflush(stdout);
  mx_dist_free(g);
  return rc;
}
