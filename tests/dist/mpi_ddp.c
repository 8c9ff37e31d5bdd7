/* DistributedDataParallel over the ranks mpirun started: W ranks, each on
 * its share of the batch, take the steps one process takes on the whole
 * batch, starting from rank 0's weights; an overflow on one rank makes
 * every rank skip the step; and the mistakes (gradients on some ranks
 * only, modules that differ) are errors on every rank. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_tests.h"

#define ROWS 4 /* each rank's share of the batch */

/* Linear(4, 8), ReLU, Linear(8, 3), drawn from seed: 67 parameters. */
static mx_module *tiny_net(uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_module *net = mx_sequential_new(3, (mx_module *[]){mx_linear_new(4, 8, true, gen), mx_relu_new(),
                                                        mx_linear_new(8, 3, true, gen)});
  mx_generator_free(gen);
  return net;
}

/* Rows lo..hi-1 of a batch (as many as the ranks share): x[i][j] =
 * sin(4i + j), y[i] = i % 3 (NULLs, which the ops refuse, when out of memory). */
static void rows(int64_t lo, int64_t hi, mx_tensor **x, mx_tensor **y) {
  float *xs = malloc((size_t)(hi - lo) * 4 * sizeof *xs);
  int64_t *ys = malloc((size_t)(hi - lo) * sizeof *ys);
  for (int64_t i = lo; xs && ys && i < hi; i++) {
    for (int j = 0; j < 4; j++) xs[(i - lo) * 4 + j] = sinf((float)(4 * i + j));
    ys[i - lo] = i % 3;
  }
  *x = xs && ys ? mx_from_data(xs, MX_SHAPE(hi - lo, 4), MX_F32, MX_CPU) : NULL;
  *y = xs && ys ? mx_from_data(ys, MX_SHAPE(hi - lo), MX_I64, MX_CPU) : NULL;
  free(xs);
  free(ys);
}

static int flat_params(const mx_module *net, double *out) {
  int n = 0;
  for (int i = 0; i < mx_module_num_parameters(net); i++) {
    const mx_tensor *p = mx_module_parameter(net, i, NULL);
    float v[32];
    mx_to_host(p, v, (size_t)mx_numel(p) * sizeof *v);
    for (int64_t j = 0; j < mx_numel(p); j++) out[n++] = v[j];
  }
  return n;
}

static mx_optimizer *sgd(mx_module *net) {
  mx_tensor *params[4];
  for (int i = 0; i < 4; i++) params[i] = mx_module_parameter(net, i, NULL);
  mx_sgd_opts o = mx_sgd_defaults();
  o.lr = 0.1, o.momentum = 0.9;
  return mx_sgd_new(4, params, &o);
}

/* The scaled loss of rows lo..hi-1, backpropagated. */
static mx_status backward(mx_module *net, mx_scaler *scaler, int64_t lo, int64_t hi) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x, *y;
  rows(lo, hi, &x, &y);
  mx_tensor *loss = mx_cross_entropy(mx_module_forward(net, x), y, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.0);
  mx_status st = loss ? mx_backward(mx_scaler_scale(scaler, loss), NULL, false) : mx_last_status();
  mx_scope_end(s);
  return st;
}

/* Three SGD steps on rows lo..hi-1, the gradients averaged over g's ranks
 * when g is given; the parameters afterwards go to values. NULL, or what
 * failed. */
static const char *train(mx_module *net, mx_process_group *g, int64_t lo, int64_t hi, double *values) {
  mx_optimizer *opt = sgd(net);
  mx_scaler *off = mx_scaler_new(&(mx_scaler_opts){.enabled = false});
  const char *failed = opt && off ? NULL : "optimizer";
  for (int step = 0; !failed && step < 3; step++) {
    mx_optimizer_zero_grad(opt, true);
    if (backward(net, off, lo, hi) != MX_OK) failed = "backward";
    else if (g && mx_ddp_average_gradients(g, net) != MX_OK) failed = "average";
    else if (mx_optimizer_step(opt) != MX_OK) failed = "step";
  }
  flat_params(net, values);
  mx_scaler_free(off);
  mx_optimizer_free(opt);
  return failed;
}

/* Rank r starts from its own seed, takes rank 0's weights and trains on
 * its 4 rows; one process (here, on every rank) trains from rank 0's seed
 * on all of them (4 per rank). */
static void ranks_step_as_one_process(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  double got[67], want[67], before[67];
  mx_module *net = tiny_net(100 + (uint64_t)rank), *alone = tiny_net(100);
  CHECK(net && alone, "net: %s", mx_last_error());
  CHECK(mx_ddp_broadcast_module(g, net, 0) == MX_OK, "broadcast: %s", mx_last_error());
  const char *failed = train(net, g, ROWS * rank, ROWS * (rank + 1), got);
  CHECK(!failed, "%s: %s", failed, mx_last_error());
  flat_params(alone, before);
  failed = train(alone, NULL, 0, ROWS * world, want);
  CHECK(!failed, "alone: %s: %s", failed, mx_last_error());
  double moved = 0;
  for (int i = 0; i < 67; i++) {
    CHECK(fabs(got[i] - want[i]) <= 1e-6, "parameter %d: %.9g on the ranks, %.9g in one process", i, got[i], want[i]);
    moved = fmax(moved, fabs(want[i] - before[i]));
  }
  CHECK(moved > 1e-3, "the steps did not move the parameters");
  mx_tensor *mine = mx_from_data(got, MX_SHAPE(67), MX_F64, MX_CPU), *all = mx_dist_all_gather(g, mine);
  CHECK(all, "%s", mx_last_error());
  for (int r = 0; r < world; r++)
    for (int i = 0; i < 67; i++)
      CHECK(mx_at(all, MX_SHAPE(r, i)) == got[i], "parameter %d differs between ranks %d and %d", i, r, rank);
done:
  mx_module_free(net);
  mx_module_free(alone);
}

/* Linear(4, 70000), ReLU, Linear(70000, 3): 2.2 MB of float32 parameters,
 * so the reducer makes two buckets (the last layer's 0.84 MB first, then
 * the first layer's). Three SGD steps with momentum, as one process takes
 * them on the whole batch: the first averaged after backward, the next two
 * from the hooks during backward. */
static mx_module *wide_net(uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_module *net = mx_sequential_new(3, (mx_module *[]){mx_linear_new(4, 70000, true, gen), mx_relu_new(),
                                                        mx_linear_new(70000, 3, true, gen)});
  mx_generator_free(gen);
  return net;
}

static void buckets_filled_during_backward(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  mx_module *net = wide_net(200 + (uint64_t)rank), *alone = wide_net(200);
  mx_optimizer *opt = NULL, *opt_alone = NULL;
  mx_scaler *off = mx_scaler_new(&(mx_scaler_opts){.enabled = false});
  CHECK(net && alone && off, "nets: %s", mx_last_error());
  CHECK(mx_ddp_broadcast_module(g, net, 0) == MX_OK, "broadcast: %s", mx_last_error());
  opt = sgd(net), opt_alone = sgd(alone);
  CHECK(opt && opt_alone, "%s", mx_last_error());
  for (int step = 0; step < 3; step++) {
    mx_optimizer_zero_grad(opt, true);
    mx_optimizer_zero_grad(opt_alone, true);
    CHECK(backward(net, off, ROWS * rank, ROWS * (rank + 1)) == MX_OK, "backward: %s", mx_last_error());
    CHECK(mx_ddp_average_gradients(g, net) == MX_OK, "step %d: average: %s", step, mx_last_error());
    CHECK(mx_optimizer_step(opt) == MX_OK, "%s", mx_last_error());
    CHECK(backward(alone, off, 0, ROWS * world) == MX_OK && mx_optimizer_step(opt_alone) == MX_OK, "alone: %s",
          mx_last_error());
  }
  for (int i = 0; i < 4; i++) {
    mx_tensor *p = mx_module_parameter(net, i, NULL), *q = mx_module_parameter(alone, i, NULL);
    mx_tensor *diff = mx_max(mx_abs(mx_sub(p, q)));
    CHECK(diff && mx_item(diff) <= 1e-6, "parameter %d: the ranks' and one process's differ by %g", i,
          diff ? mx_item(diff) : NAN);
  }
done:
  mx_optimizer_free(opt);
  mx_optimizer_free(opt_alone);
  mx_scaler_free(off);
  mx_module_free(net);
  mx_module_free(alone);
}

/* Whether the buckets start during backward, seen in the order of the
 * collectives: on the second step, rank 0 calls a barrier after its
 * backward, where the others call mx_ddp_average_gradients. Had the
 * buckets waited for the average, the barrier would meet the first
 * bucket's all-reduce; it meets the gradient check that follows them.
 * 2 ranks or more. */
static void buckets_start_during_backward(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  (void)g, (void)world;
  mx_module *net = wide_net(200);
  mx_scaler *off = mx_scaler_new(&(mx_scaler_opts){.enabled = false});
  mx_process_group *h = mx_dist_init(60);
  CHECK(net && off && h, "init: %s", mx_last_error());
  CHECK(backward(net, off, ROWS * rank, ROWS * (rank + 1)) == MX_OK && mx_ddp_average_gradients(h, net) == MX_OK,
        "first step: %s", mx_last_error());
  CHECK(backward(net, off, ROWS * rank, ROWS * (rank + 1)) == MX_OK, "backward: %s", mx_last_error());
  mx_status st = rank == 0 ? mx_dist_barrier(h) : mx_ddp_average_gradients(h, net);
  CHECK(st == MX_INVALID_ARGUMENT, "status %d: %s", st, mx_last_error());
  const char *want = rank == 0 ? "mx_dist_barrier: rank 0 calls barrier, but rank 1 calls all_reduce(sum) on 5 int32"
                               : "mx_ddp_average_gradients: mx_dist_wait: rank 1 calls all_reduce(sum) on 5 int32 "
                                 "elements, but rank 0 calls barrier";
  CHECK(rank > 1 || strstr(mx_last_error(), want), "the error is '%s', not '%s'", mx_last_error(), want);
done:
  mx_dist_free(h);
  mx_scaler_free(off);
  mx_module_free(net);
}

/* Rank 1's first gradient overflows: every rank skips, halves the scale,
 * and steps together on the next, clean, batch. 2 ranks or more. */
static void an_overflow_on_one_rank_skips_everywhere(mx_process_group *g, int rank, int world, char *msg,
                                                      size_t size) {
  (void)world;
  mx_module *net = tiny_net(100);
  mx_optimizer *opt = net ? sgd(net) : NULL;
  mx_scaler *scaler = mx_scaler_new(NULL);
  double before[67], after[67];
  CHECK(opt && scaler, "init: %s", mx_last_error());
  for (int step = 0; step < 2; step++) {
    mx_optimizer_zero_grad(opt, true);
    CHECK(backward(net, scaler, ROWS * rank, ROWS * (rank + 1)) == MX_OK, "backward: %s", mx_last_error());
    if (step == 0 && rank == 1)
      CHECK(mx_set(mx_grad_of(mx_module_parameter(net, 0, NULL)), MX_SHAPE(0, 0), INFINITY) == MX_OK, "%s",
            mx_last_error());
    CHECK(mx_ddp_average_gradients(g, net) == MX_OK, "average: %s", mx_last_error());
    CHECK(mx_ddp_unscale(g, scaler, opt) == MX_OK, "unscale: %s", mx_last_error());
    flat_params(net, before);
    mx_scaler_step_info info;
    CHECK(mx_scaler_step(scaler, opt, &info) == MX_OK && mx_scaler_update(scaler) == MX_OK, "step: %s",
          mx_last_error());
    flat_params(net, after);
    bool moved = memcmp(before, after, sizeof before) != 0;
    CHECK(info.stepped == (step == 1) && moved == (step == 1), "step %d: stepped %d, moved %d", step, info.stepped,
          moved);
    CHECK(mx_scaler_get_scale(scaler) == 32768.0, "step %d: scale %g", step, mx_scaler_get_scale(scaler));
  }
done:
  mx_scaler_free(scaler);
  mx_optimizer_free(opt);
  mx_module_free(net);
}

/* The last rank's gradient overflows after the average (as a gradient
 * that is not averaged would): mx_ddp_unscale's max all-reduce of the
 * found-inf flag makes every rank skip the step and back off, though the
 * other ranks' gradients are clean. */
static void found_inf_is_agreed_across_ranks(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  mx_module *net = tiny_net(100);
  mx_optimizer *opt = net ? sgd(net) : NULL;
  mx_scaler *scaler = mx_scaler_new(NULL);
  double before[67], after[67];
  CHECK(opt && scaler, "init: %s", mx_last_error());
  CHECK(backward(net, scaler, ROWS * rank, ROWS * (rank + 1)) == MX_OK, "backward: %s", mx_last_error());
  CHECK(mx_ddp_average_gradients(g, net) == MX_OK, "average: %s", mx_last_error());
  if (rank == world - 1)
    CHECK(mx_set(mx_grad_of(mx_module_parameter(net, 2, NULL)), MX_SHAPE(1, 1), INFINITY) == MX_OK, "%s",
          mx_last_error());
  CHECK(mx_ddp_unscale(g, scaler, opt) == MX_OK, "unscale: %s", mx_last_error());
  flat_params(net, before);
  mx_scaler_step_info info;
  CHECK(mx_scaler_step(scaler, opt, &info) == MX_OK && mx_scaler_update(scaler) == MX_OK, "step: %s",
        mx_last_error());
  flat_params(net, after);
  CHECK(!info.stepped && !memcmp(before, after, sizeof before), "rank %d stepped (%d) or moved", rank, info.stepped);
  CHECK(info.infs == (rank == world - 1), "rank %d counted %lld infs", rank, (long long)info.infs);
  CHECK(mx_scaler_get_scale(scaler) == 32768.0, "scale %g after the skip", mx_scaler_get_scale(scaler));
  CHECK(mx_ddp_unscale(NULL, scaler, opt) == MX_NULL_INPUT &&
            !strcmp(mx_last_error(), "mx_ddp_unscale: argument 'group' is NULL"),
        "%s", mx_last_error());
done:
  mx_scaler_free(scaler);
  mx_optimizer_free(opt);
  mx_module_free(net);
}

/* Rank 0 runs a backward, the others do not; then rank 1's model has one
 * layer fewer. Every rank fails with the same words. 2 ranks or more. */
static void mistakes_are_errors_everywhere(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  mx_scaler *off = mx_scaler_new(&(mx_scaler_opts){.enabled = false});
  mx_module *net = tiny_net(100);
  CHECK(net && off, "init: %s", mx_last_error());
  CHECK(rank != 0 || backward(net, off, 0, ROWS) == MX_OK, "backward: %s", mx_last_error());
  CHECK(mx_ddp_average_gradients(g, net) == MX_STATE_ERROR, "average: %s", mx_last_error());
  char want[200];
  snprintf(want, sizeof want,
           "mx_ddp_average_gradients: parameter '0.weight' has a gradient on 1 of the %d ranks (all or none must)",
           world);
  CHECK(!strcmp(mx_last_error(), want), "the error is '%s', not '%s'", mx_last_error(), want);
  mx_module_free(net);
  net = rank == 1 ? mx_linear_new(4, 8, true, NULL) : tiny_net(100);
  mx_process_group *h = mx_dist_init(60);
  CHECK(h, "init: %s", mx_last_error());
  mx_status st = mx_ddp_broadcast_module(h, net, 0);
  mx_dist_free(h);
  CHECK(st == MX_INVALID_ARGUMENT, "broadcast: %s", mx_last_error());
  snprintf(want, sizeof want,
           "mx_ddp_broadcast_module: the ranks' modules differ: rank %d has %d parameters and 0 buffers, the %d "
           "ranks %d and 0 in all",
           rank, rank == 1 ? 2 : 4, world, 4 * world - 2);
  CHECK(!strcmp(mx_last_error(), want), "the error is '%s', not '%s'", mx_last_error(), want);
done:
  mx_scaler_free(off);
  mx_module_free(net);
}

const mpi_test ddp_tests[] = {
    {"ddp: ranks on shares of the batch step as one process on the whole", ranks_step_as_one_process, 1},
    {"ddp: two buckets, averaged from backward's hooks, step as one process", buckets_filled_during_backward, 1},
    {"ddp: the buckets start during backward", buckets_start_during_backward, 2},
    {"ddp: an overflow on one rank skips the step on every rank", an_overflow_on_one_rank_skips_everywhere, 2},
    {"ddp: the found-inf flag is agreed by a max all-reduce", found_inf_is_agreed_across_ranks, 1},
    {"ddp: gradients on some ranks only, or modules that differ, are errors", mistakes_are_errors_everywhere, 2},
};
const int n_ddp_tests = sizeof ddp_tests / sizeof *ddp_tests;
