/* DistributedDataParallel: two ranks, each on half the batch, take the
 * steps one process takes on the whole batch, starting from rank 0's
 * weights; an overflow on one rank makes every rank skip the step; and the
 * mistakes (gradients on some ranks only, modules that differ) are errors
 * on every rank. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "mixgrad.h"
#include "rank_tests.h"

/* Linear(4, 8), ReLU, Linear(8, 3), drawn from seed: 67 parameters. */
static mx_module *tiny_net(uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_module *net = mx_sequential_new(3, (mx_module *[]){mx_linear_new(4, 8, true, gen), mx_relu_new(),
                                                        mx_linear_new(8, 3, true, gen)});
  mx_generator_free(gen);
  return net;
}

/* Rows lo..hi-1 of a batch of 8: x[i][j] = sin(4i + j), y[i] = i % 3. */
static void rows(int64_t lo, int64_t hi, mx_tensor **x, mx_tensor **y) {
  float xs[32];
  int64_t ys[8];
  for (int64_t i = lo; i < hi; i++) {
    for (int j = 0; j < 4; j++) xs[(i - lo) * 4 + j] = sinf((float)(4 * i + j));
    ys[i - lo] = i % 3;
  }
  *x = mx_from_data(xs, MX_SHAPE(hi - lo, 4), MX_F32, MX_CPU);
  *y = mx_from_data(ys, MX_SHAPE(hi - lo), MX_I64, MX_CPU);
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
 * rows 4r..4r+3. */
static void ddp_rank(mx_process_group *g, int rank, void *ctx, rank_report *out) {
  (void)ctx;
  mx_module *net = tiny_net(100 + (uint64_t)rank);
  const char *failed = NULL;
  RANK_CHECK(out, net, "net: %s", mx_last_error());
  RANK_CHECK(out, mx_ddp_broadcast_module(g, net, 0) == MX_OK, "broadcast: %s", mx_last_error());
  failed = train(net, g, 4 * rank, 4 * rank + 4, out->values);
  RANK_CHECK(out, !failed, "%s: %s", failed, mx_last_error());
  out->n_values = 67;
done:
  mx_module_free(net);
}

Test(ddp, two_ranks_on_half_batches_step_as_one_process_on_the_whole) {
  rank_report reports[2];
  expect_group_passes(2, 60, ddp_rank, NULL, reports);
  double want[67], before[67];
  mx_module *net = tiny_net(100);
  flat_params(net, before);
  const char *err = train(net, NULL, 0, 8, want);
  cr_assert_null(err, "%s: %s", err, mx_last_error());
  double moved = 0;
  for (int i = 0; i < 67; i++) {
    cr_expect_eq(reports[1].values[i], reports[0].values[i], "parameter %d differs between the ranks", i);
    cr_expect(fabs(reports[0].values[i] - want[i]) <= 1e-6, "parameter %d: %.9g on the ranks, %.9g in one process",
              i, reports[0].values[i], want[i]);
    moved = fmax(moved, fabs(want[i] - before[i]));
  }
  cr_expect_gt(moved, 1e-3, "the steps did not move the parameters");
  mx_module_free(net);
}

/* Rank 1's first gradient overflows: both ranks skip, halve the scale,
 * and step together on the next, clean, batch. */
static void overflow_rank(mx_process_group *g, int rank, void *ctx, rank_report *out) {
  (void)ctx;
  mx_module *net = tiny_net(100);
  mx_optimizer *opt = net ? sgd(net) : NULL;
  mx_scaler *scaler = mx_scaler_new(NULL);
  double before[67], after[67];
  RANK_CHECK(out, opt && scaler, "init: %s", mx_last_error());
  for (int step = 0; step < 2; step++) {
    mx_optimizer_zero_grad(opt, true);
    RANK_CHECK(out, backward(net, scaler, 4 * rank, 4 * rank + 4) == MX_OK, "backward: %s", mx_last_error());
    if (step == 0 && rank == 1)
      RANK_CHECK(out, mx_set(mx_grad_of(mx_module_parameter(net, 0, NULL)), MX_SHAPE(0, 0), INFINITY) == MX_OK,
                 "%s", mx_last_error());
    RANK_CHECK(out, mx_ddp_average_gradients(g, net) == MX_OK, "average: %s", mx_last_error());
    flat_params(net, before);
    mx_scaler_step_info info;
    RANK_CHECK(out, mx_scaler_step(scaler, opt, &info) == MX_OK && mx_scaler_update(scaler) == MX_OK, "step: %s",
               mx_last_error());
    flat_params(net, after);
    bool moved = memcmp(before, after, sizeof before) != 0;
    RANK_CHECK(out, info.stepped == (step == 1) && moved == (step == 1), "step %d: stepped %d, moved %d", step,
               info.stepped, moved);
    out->values[step] = mx_scaler_get_scale(scaler);
  }
  out->n_values = 2;
done:
  mx_scaler_free(scaler);
  mx_optimizer_free(opt);
  mx_module_free(net);
}

Test(ddp, an_overflow_on_one_rank_skips_the_step_on_every_rank) {
  rank_report reports[2];
  expect_group_passes(2, 60, overflow_rank, NULL, reports);
  for (int r = 0; r < 2; r++) {
    cr_expect_eq(reports[r].values[0], 32768.0, "rank %d's scale after the overflow", r);
    cr_expect_eq(reports[r].values[1], 32768.0, "rank %d's scale after the clean step", r);
  }
}

/* Rank 0 runs a backward, rank 1 does not; or, with *ctx, rank 1's model
 * has one layer fewer. Both ranks fail with the same words. */
static void mistaken_rank(mx_process_group *g, int rank, void *ctx, rank_report *out) {
  bool modules_differ = *(bool *)ctx;
  mx_module *net = modules_differ && rank == 1 ? mx_linear_new(4, 8, true, NULL) : tiny_net(100);
  mx_scaler *off = mx_scaler_new(&(mx_scaler_opts){.enabled = false});
  RANK_CHECK(out, net && off, "init: %s", mx_last_error());
  char want[200];
  if (modules_differ) {
    RANK_CHECK(out, mx_ddp_broadcast_module(g, net, 0) == MX_INVALID_ARGUMENT, "broadcast: %s", mx_last_error());
    snprintf(want, sizeof want,
             "mx_ddp_broadcast_module: the ranks' modules differ: rank %d has %d parameters and 0 buffers, the 2 "
             "ranks 6 and 0 in all",
             rank, rank == 0 ? 4 : 2);
  } else {
    RANK_CHECK(out, rank == 1 || backward(net, off, 0, 4) == MX_OK, "backward: %s", mx_last_error());
    RANK_CHECK(out, mx_ddp_average_gradients(g, net) == MX_STATE_ERROR, "average: %s", mx_last_error());
    snprintf(want, sizeof want,
             "mx_ddp_average_gradients: parameter '0.weight' has a gradient on 1 of the 2 ranks (all or none must)");
  }
  RANK_CHECK(out, !strcmp(mx_last_error(), want), "the error is '%s', not '%s'", mx_last_error(), want);
done:
  mx_scaler_free(off);
  mx_module_free(net);
}

Test(ddp, gradients_on_some_ranks_only_or_modules_that_differ_are_errors) {
  rank_report reports[2];
  bool modules_differ = false;
  expect_group_passes(2, 60, mistaken_rank, &modules_differ, reports);
  modules_differ = true;
  expect_group_passes(2, 60, mistaken_rank, &modules_differ, reports);
}
