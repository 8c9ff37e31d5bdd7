/* mixgrad's collectives timed over the ranks mpirun started, beside the
 * same sums done by raw MPI_Allreduce (bench/all_reduce.py is PyTorch's
 * twin, on gloo). Rank 0 prints one JSON line per measurement:
 *
 *     {"impl":"mixgrad","op":"all_reduce","bytes":2678824,"times_ms":[...]}
 *
 * Each timing is one call, back to back after warm-up calls; all_reduce
 * sums float32 tensors of the sizes below (2,678,824 bytes are the MNIST
 * MLP's gradients), barrier waits for the other ranks. ddp_step_mlp is a
 * data-parallel training step of the MNIST MLP (bench/train_step.c's, SGD
 * with momentum), its batch of 128 split among the ranks: zero_grad,
 * forward, cross-entropy, backward, mx_ddp_average_gradients, step.
 *
 *     scripts/launch 2 build/bench/all_reduce [--quick]   # OMP_NUM_THREADS=1 per rank is the fair setting
 */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
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

/* One data-parallel step of net on this rank's share of the batch. */
static mx_status ddp_step(mx_process_group *g, mx_module *net, mx_optimizer *opt, const mx_tensor *x,
                          const mx_tensor *y) {
  mx_scope *s = mx_scope_begin();
  mx_status st = mx_optimizer_zero_grad(opt, true);
  mx_tensor *logits = st == MX_OK ? mx_module_forward(net, x) : NULL;
  mx_tensor *loss = logits ? mx_cross_entropy(logits, y, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.0) : NULL;
  if (st == MX_OK) st = loss ? mx_backward(loss, NULL, false) : mx_last_status();
  if (st == MX_OK) st = mx_ddp_average_gradients(g, net);
  if (st == MX_OK) st = mx_optimizer_step(opt);
  mx_scope_end(s);
  return st;
}

/* The MLP's DDP steps timed into times; 0, or 1 with the error set. */
static int time_ddp_steps(mx_process_group *g, double *times, int reps) {
  int rank = mx_dist_rank(g), world = mx_dist_world_size(g);
  mx_module *net = mx_demo_mlp();
  mx_tensor *params[6]; /* its three weights and biases */
  int n = net ? mx_module_num_parameters(net) : 0;
  for (int i = 0; i < n && i < 6; i++) params[i] = mx_module_parameter(net, i, NULL);
  mx_sgd_opts o = mx_sgd_defaults();
  o.lr = 0.05, o.momentum = 0.9;
  mx_optimizer *opt = n == 6 ? mx_sgd_new(n, params, &o) : NULL;
  mx_generator *gen = mx_generator_new(7 + (uint64_t)rank);
  mx_tensor *x = mx_randn(MX_SHAPE(128 / world, 1, 28, 28), MX_F32, MX_CPU, gen);
  mx_tensor *y = mx_randint(0, 10, MX_SHAPE(128 / world), MX_I64, MX_CPU, gen);
  int rc = opt && x && y && mx_ddp_broadcast_module(g, net, 0) == MX_OK ? 0 : 1;
  for (int i = -5; rc == 0 && i < reps; i++) {
    double t0 = bench_now_ms();
    if (ddp_step(g, net, opt, x, y) != MX_OK) rc = 1;
    if (i >= 0) times[i] = bench_now_ms() - t0;
  }
  mx_release(x);
  mx_release(y);
  mx_generator_free(gen);
  mx_optimizer_free(opt);
  mx_module_free(net);
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
  if (rc == 0) rc = time_ddp_steps(g, times, reps);
  if (rc == 0) report(rank, "mixgrad", "ddp_step_mlp", 0, times, reps);
  if (rc) fprintf(stderr, "all_reduce: rank %d: %s\n", rank, mx_last_error());
  fflush(stdout);
  mx_dist_free(g);
  return rc;
}
