/* Sequential runs a Conv2d, a ReLU and a MaxPool2d in turn as one conv2d_max_pool_relu (ahead of the ReLU's pair
 * fusions): the same output and gradients bit for bit as the children run one by one (float32, bfloat16 autocast,
 * channels-last), the fused kernels running where oneDNN does (their run counters), saved-tensor hooks seeing the
 * convolution's inputs, the pooled output and its indices but no full-resolution tensor, and the pair fusions
 * left where a hook watches the convolution. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "fusion_case.h"
#include "kernels/cpu/dnnl_conv_pool.h"
#include "mx_config.h"

/* The demo CNN's blocks, smaller: conv, relu, 2x2 pool twice (the second leaving an edge: 7 -> 3), a bias-less one
 * last */
static mx_module *make_net(mx_generator *gen) {
  return mx_sequential_new(
      6, (mx_module *[]){mx_conv2d_new(1, 16, MX_SHAPE(3), MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 1, true, gen),
                         mx_relu_new(), mx_max_pool2d_new(MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT),
                         mx_conv2d_new(16, 24, MX_SHAPE(3), MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 1, false, gen),
                         mx_relu_new(), mx_max_pool2d_new(MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT)});
}

static void check_fused_against_children(mx_dtype autocast, bool channels_last) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(38);
  mx_module *net = make_net(gen);
  mx_tensor *x = mx_randn(MX_SHAPE(3, 1, 14, 14), MX_F32, MX_CPU, gen);
  if (channels_last) x = mx_detach(mx_to_channels_last(x));
  cr_assert(net && x && mx_set_requires_grad(x, true) == MX_OK, "%s", mx_last_error());
  mx_tensor *grads[2][16] = {{NULL}};
  uint64_t runs[2] = {mx__cpu_conv_max_pool_relu_runs(false), mx__cpu_conv_max_pool_relu_runs(true)};
  mx_tensor *fused = fusion_run(net, x, true, autocast, grads[0]);
  /* two blocks, each once forward and once backward; channels-last ones take the unfused kernels inside the op
   * (bfloat16 runs in float32 where oneDNN has no native kernels: kernels/cpu/dnnl_conv_plan.h) */
  int fused_runs = MX_HAVE_DNNL && !channels_last ? 2 : 0;
  cr_expect_eq(mx__cpu_conv_max_pool_relu_runs(false), runs[0] + fused_runs);
  cr_expect_eq(mx__cpu_conv_max_pool_relu_runs(true), runs[1] + fused_runs);
  runs[0] = mx__cpu_conv_max_pool_relu_runs(false);
  mx_tensor *plain = fusion_run(net, x, false, autocast, grads[1]);
  cr_expect_eq(mx__cpu_conv_max_pool_relu_runs(false), runs[0], "the children in turn ran the fused kernel");
  cr_expect_str_eq(mx_grad_fn_name(fused), "CONV2D_MAX_POOL_RELUBackward");
  cr_expect_str_eq(mx_grad_fn_name(plain), "MAX_POOLBackward");
  expect_same_run(net, fused, plain, grads);
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

Test(conv_pool_fusion, conv_relu_pool_blocks_give_the_same_bits_fused) {
  check_fused_against_children(MX_DTYPE_COUNT, false);
}

Test(conv_pool_fusion, conv_relu_pool_blocks_give_the_same_bits_fused_under_bf16_autocast) {
  check_fused_against_children(MX_BF16, false);
}

Test(conv_pool_fusion, conv_relu_pool_blocks_give_the_same_bits_fused_channels_last) {
  check_fused_against_children(MX_DTYPE_COUNT, true);
  check_fused_against_children(MX_BF16, true);
}

/* --- what autograd saves --------------------------------------------------------------------------------------- */

typedef struct {
  int packs, full_resolution, bytes_indices; /* all, those of a convolution's output's shape, the uint8 ones */
  mx_shape seen[32];
} shape_log;

static void *pack(mx_tensor *t, void *ctx) {
  shape_log *log = ctx;
  mx_shape s = mx_shape_get(t);
  if (log->packs < 32) log->seen[log->packs] = s;
  log->packs++;
  /* the convolutions' outputs: (2, 16, 12, 12) and (2, 24, 6, 6) */
  if (s.ndim == 4 && s.d[0] == 2 && ((s.d[1] == 16 && s.d[2] == 12) || (s.d[1] == 24 && s.d[2] == 6)))
    log->full_resolution++;
  if (mx_dtype_of(t) == MX_U8) log->bytes_indices++;
  return mx_detach_unscoped(t);
}
static mx_tensor *unpack(void *packed) { return mx_detach(packed); }
static void free_packed(void *packed) { mx_release(packed); }
static const mx_saved_tensor_hooks hooks = {"shapes", pack, unpack, free_packed};

static bool seen(const shape_log *log, mx_shape s) {
  for (int i = 0; i < log->packs && i < 32; i++)
    if (log->seen[i].ndim == s.ndim && !memcmp(log->seen[i].d, s.d, sizeof(int64_t) * (size_t)s.ndim)) return true;
  return false;
}

/* Per block: x, the pooled output and its uint8 indices (the weights and biases too, but the hooks see no leaf that
 * requires grad, as PyTorch's); no (N, C_out, H, W) tensor. The children in turn save the ReLUs' full-resolution
 * outputs. */
Test(conv_pool_fusion, saved_tensor_hooks_see_inputs_and_indices_but_no_full_resolution_tensor) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(3);
  mx_module *net = make_net(gen);
  mx_tensor *leaf = mx_randn(MX_SHAPE(2, 1, 12, 12), MX_F32, MX_CPU, gen);
  cr_assert(mx_set_requires_grad(leaf, true) == MX_OK);
  shape_log log[2] = {{0}};
  mx_tensor *grads[2][16] = {{NULL}};
  for (int f = 0; f < 2; f++) {
    mx_tensor *x = mx_mul_scalar(leaf, 1); /* not a leaf: the hooks see it */
    cr_assert_eq(mx_saved_tensor_hooks_push(&hooks, &log[f]), MX_OK);
    mx_tensor *out = fusion_run(net, x, f == 0, MX_DTYPE_COUNT, grads[f]);
    cr_assert_eq(mx_saved_tensor_hooks_pop(), MX_OK);
    cr_expect_str_eq(mx_grad_fn_name(out), f == 0 ? "CONV2D_MAX_POOL_RELUBackward" : "MAX_POOLBackward");
  }
  cr_expect_eq(log[0].full_resolution, 0, "the fused blocks saved %d full-resolution tensors", log[0].full_resolution);
  cr_expect_eq(log[1].full_resolution, 2, "the children saved %d full-resolution tensors", log[1].full_resolution);
  cr_expect_eq(log[0].bytes_indices, 2);
  mx_shape expected[] = {MX_SHAPE(2, 1, 12, 12), MX_SHAPE(2, 16, 6, 6), MX_SHAPE(2, 24, 3, 3)};
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
    cr_expect(seen(&log[0], expected[i]), "fused: tensor %zu not saved", i);
  expect_same_gradients(net, grads);
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

/* A hook on the conv leaves the ReLU and the pool to fuse as a pair; one on the pool leaves the conv and the ReLU
 * (conv2d_relu); without hooks all three fuse again. Checkpointing recomputes as the forward ran. */
Test(conv_pool_fusion, hooks_leave_the_pair_fusions_and_checkpointing_gives_the_plain_gradients) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(1);
  mx_module *net = make_net(gen);
  mx_tensor *x = mx_randn(MX_SHAPE(2, 1, 12, 12), MX_F32, MX_CPU, gen);
  cr_assert(mx_set_requires_grad(x, true) == MX_OK);
  mx_module *conv = mx_module_child(net, 3, NULL), *pool = mx_module_child(net, 5, NULL);
  const char *expected[2] = {"MAX_POOL_RELUBackward", "MAX_POOLBackward"};
  mx_module *watched[2] = {conv, pool};
  for (int k = 0; k < 2; k++) {
    int calls = 0;
    mx_module_set_output_hook(watched[k], count_output, &calls);
    mx_tensor *out = mx_module_forward(net, x);
    cr_assert(out, "%s", mx_last_error());
    cr_expect_eq(calls, 1, "hook %d: %d calls", k, calls);
    cr_expect_str_eq(mx_grad_fn_name(out), expected[k], "hook %d", k);
    mx_module_set_output_hook(watched[k], NULL, NULL);
  }
  cr_expect_str_eq(mx_grad_fn_name(mx_module_forward(net, x)), "CONV2D_MAX_POOL_RELUBackward");
  expect_checkpointing_as(net, x, children_in_turn(net, x));
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

/* A block the op cannot run fails as the children in turn would, naming the layer. */
Test(conv_pool_fusion, a_failing_block_fails_as_its_children_would) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(2);
  mx_module *net = make_net(gen);
  mx_clear_error();
  cr_expect_null(mx_module_forward(net, mx_randn(MX_SHAPE(1, 2, 8, 8), MX_F32, MX_CPU, gen)));
  cr_expect_str_eq(mx_last_error(), "mx_module_forward: layer 0 (Conv2d): mx_conv: input [1,2,8,8] has 2 channels, "
                                    "weight [16,1,3,3] expects 1 (groups 1)");
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}
