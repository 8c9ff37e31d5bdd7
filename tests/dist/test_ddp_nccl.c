/* DDP at one rank (dist/ddp.c): on the CPU, mx_ddp_average_gradients
 * returns at once; with CUDA parameters, its buckets run through NCCL as at
 * any world size (a one-GPU machine allows one NCCL rank only, so this is
 * where that path runs there), the first step averaged after backward, the
 * next ones from backward's hooks, and the average over one rank leaves
 * every gradient the bits the undistributed backward gave. White-box
 * (the group's sequence number and reducers); the CUDA case skips without
 * a GPU. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "dist/dist_internal.h"
#include "mixgrad.h"

#define ROWS 4

/* A world of one, whatever launched the test. */
static mx_process_group *world_of_one(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "WORLD_SIZE", "PMIX_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
  mx_process_group *g = mx_dist_init(0);
  cr_assert_not_null(g, "%s", mx_last_error());
  return g;
}

/* Linear(4, 70000), ReLU, Linear(70000, 3): 2.2 MB of float32 parameters,
 * so the reducer makes two buckets (the last layer's 0.84 MB, then the
 * first layer's), on device. */
static mx_module *wide_net(mx_device device) {
  mx_generator *gen = mx_generator_new(200);
  mx_module *net = mx_sequential_new(3, (mx_module *[]){mx_linear_new(4, 70000, true, gen), mx_relu_new(),
                                                        mx_linear_new(70000, 3, true, gen)});
  mx_generator_free(gen);
  cr_assert_not_null(net, "%s", mx_last_error());
  cr_assert_eq(mx_module_to(net, device), MX_OK, "%s", mx_last_error());
  return net;
}

/* Step step's loss on its rows (x[i][j] = sin(4i + j + step), y[i] = i % 3), backpropagated. */
static void backward(mx_module *net, mx_device device, int step) {
  float xs[ROWS * 4];
  int64_t ys[ROWS];
  for (int i = 0; i < ROWS; i++) {
    for (int j = 0; j < 4; j++) xs[i * 4 + j] = sinf((float)(4 * i + j + step));
    ys[i] = i % 3;
  }
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_to_device(mx_from_data(xs, MX_SHAPE(ROWS, 4), MX_F32, MX_CPU), device);
  mx_tensor *y = mx_to_device(mx_from_data(ys, MX_SHAPE(ROWS), MX_I64, MX_CPU), device);
  mx_tensor *loss = mx_cross_entropy(mx_module_forward(net, x), y, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.0);
  cr_assert_not_null(loss, "%s", mx_last_error());
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  mx_scope_end(s);
}

static mx_optimizer *sgd(mx_module *net) {
  mx_tensor *params[4];
  for (int i = 0; i < 4; i++) params[i] = mx_module_parameter(net, i, NULL);
  mx_sgd_opts o = mx_sgd_defaults();
  o.lr = 0.1, o.momentum = 0.9;
  mx_optimizer *opt = mx_sgd_new(4, params, &o);
  cr_assert_not_null(opt, "%s", mx_last_error());
  return opt;
}

Test(ddp_nccl, a_world_of_one_on_the_cpu_averages_nothing) {
  mx_process_group *g = world_of_one();
  mx_module *net = wide_net(MX_CPU);
  for (int step = 0; step < 2; step++) {
    backward(net, MX_CPU, step);
    cr_assert_eq(mx_ddp_average_gradients(g, net), MX_OK, "%s", mx_last_error());
  }
  cr_expect_eq(g->next_seq, 0, "no collective: %lld", (long long)g->next_seq);
  cr_expect_eq(g->n_reducers, 0);
  mx_dist_free(g);
  mx_module_free(net);
}

Test(ddp_nccl, a_world_of_one_runs_the_cuda_buckets_through_nccl) {
  if (mx_cuda_device_count() == 0) cr_skip_test("no CUDA device");
  mx_process_group *g = world_of_one();
  mx_module *net = wide_net(MX_CUDA);
  mx_optimizer *opt = sgd(net);
  for (int step = 0; step < 3; step++) {
    mx_optimizer_zero_grad(opt, true);
    int64_t before = g->next_seq;
    backward(net, MX_CUDA, step);
    /* from the second step, the hooks start both buckets' all-reduces during backward */
    cr_expect_eq(g->next_seq - before, step == 0 ? 0 : 2, "step %d: %lld collectives during backward", step,
                 (long long)(g->next_seq - before));
    mx_scope *s = mx_scope_begin();
    mx_tensor *undistributed[4];
    for (int i = 0; i < 4; i++) {
      undistributed[i] = mx_to_device(mx_grad_of(mx_module_parameter(net, i, NULL)), MX_CPU);
      cr_assert_not_null(undistributed[i], "%s", mx_last_error());
    }
    before = g->next_seq;
    cr_assert_eq(mx_ddp_average_gradients(g, net), MX_OK, "step %d: %s", step, mx_last_error());
    cr_expect_gt(g->next_seq, before, "step %d: mx_ddp_average_gradients ran no collective", step);
    cr_expect_not_null(g->nccl, "step %d: the group has no NCCL communicator", step);
    cr_expect_eq(g->n_reducers, 1, "step %d: %d reducers", step, g->n_reducers);
    for (int i = 0; i < 4; i++) {
      const char *name;
      mx_tensor *grad = mx_grad_of(mx_module_parameter(net, i, &name));
      cr_assert_not_null(grad, "%s has no gradient", name);
      cr_expect_eq(mx_device_of(grad), MX_CUDA, "%s", name);
      mx_tensor *averaged = mx_to_device(grad, MX_CPU);
      cr_assert_not_null(averaged, "%s", mx_last_error());
      const float *got = mx_data_ptr(averaged), *want = mx_data_ptr(undistributed[i]);
      float largest = 0;
      for (int64_t k = 0; k < mx_numel(averaged); k++) {
        cr_assert_eq(got[k], want[k], "step %d, %s[%lld]: %.9g averaged over one rank, %.9g from backward", step,
                     name, (long long)k, got[k], want[k]);
        largest = fmaxf(largest, fabsf(got[k]));
      }
      cr_expect_gt(largest, 0, "step %d: %s's gradient is all zeros", step, name);
    }
    mx_scope_end(s);
    cr_assert_eq(mx_optimizer_step(opt), MX_OK, "%s", mx_last_error());
  }
  mx_optimizer_free(opt);
  mx_dist_free(g);
  mx_module_free(net);
}
