/* Sequential runs a Conv2d followed by a ReLU as one mx_conv2d_relu: the same output and gradients bit for bit as
 * its children run one by one (float32 and bfloat16 autocast), the same saved tensors (saved-tensor hooks,
 * activation checkpointing), and no fusion where a hook or a summary watches a child or the pair fails. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "fusion_case.h"

/* conv, relu, conv (stride 2, 16 channels), relu, conv (no ReLU after it), tanh, relu (after a kind that does not
 * fuse), conv, relu (the last pair: the output's node says which ran) */
static mx_module *make_net(mx_generator *gen) {
  return mx_sequential_new(
      9, (mx_module *[]){mx_conv2d_new(3, 8, MX_SHAPE(3), MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 1, true, gen),
                         mx_relu_new(),
                         mx_conv2d_new(8, 16, MX_SHAPE(3), MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT, 1, true, gen),
                         mx_relu_new(),
                         mx_conv2d_new(16, 16, MX_SHAPE(3), MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 2, false, gen),
                         mx_tanh_new(),
                         mx_relu_new(),
                         mx_conv2d_new(16, 8, MX_SHAPE(1), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1, true, gen),
                         mx_relu_new()});
}

/* Runs net fused and as its children in turn (ending in a plain ReLU), expects the same output and gradients bit
 * for bit, and returns the fused output (its node says which op ran last). */
static mx_tensor *fused_as_children(mx_module *net, mx_tensor *x, mx_dtype autocast) {
  mx_tensor *grads[2][16] = {{NULL}};
  mx_tensor *fused = fusion_run(net, x, true, autocast, grads[0]), *plain = fusion_run(net, x, false, autocast, grads[1]);
  cr_expect_str_eq(mx_grad_fn_name(plain), "RELUBackward");
  expect_same_run(net, fused, plain, grads);
  return fused;
}

static void check_fused_against_children(mx_dtype autocast) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(38);
  mx_module *net = make_net(gen);
  mx_tensor *x = mx_randn(MX_SHAPE(2, 3, 12, 12), MX_F32, MX_CPU, gen);
  cr_assert(net && x && mx_set_requires_grad(x, true) == MX_OK, "%s", mx_last_error());
  cr_expect_str_eq(mx_grad_fn_name(fused_as_children(net, x, autocast)), "CONV2D_RELUBackward");
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

Test(sequential_fusion, conv_relu_pairs_give_the_same_bits_fused) { check_fused_against_children(MX_DTYPE_COUNT); }

Test(sequential_fusion, conv_relu_pairs_give_the_same_bits_fused_under_bf16_autocast) {
  check_fused_against_children(MX_BF16);
}


/* A hook on either child, or on the Sequential (it sees every child's output), keeps the pair apart. */
Test(sequential_fusion, a_hook_keeps_the_pair_apart) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(1);
  mx_module *net = make_net(gen);
  mx_tensor *x = mx_randn(MX_SHAPE(1, 3, 8, 8), MX_F32, MX_CPU, gen);
  int last = mx_module_num_children(net) - 1;
  mx_module *watched[3] = {mx_module_child(net, last, NULL), mx_module_child(net, last - 1, NULL), net};
  int expected_calls[3] = {1, 1, 9 + 1}; /* the ReLU's output, the conv's, every child's and the net's */
  for (int k = 0; k < 3; k++) {
    int calls = 0;
    mx_module_set_output_hook(watched[k], count_output, &calls);
    mx_tensor *out = mx_module_forward(net, x);
    cr_assert(out, "%s", mx_last_error());
    cr_expect_eq(calls, expected_calls[k], "hook %d: %d calls", k, calls);
    cr_expect_str_eq(mx_grad_fn_name(out), "RELUBackward", "hook %d", k);
    mx_module_set_output_hook(watched[k], NULL, NULL);
  }
  cr_expect_str_eq(mx_grad_fn_name(mx_module_forward(net, x)), "CONV2D_RELUBackward"); /* no hook: fused again */
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

/* A failing pair reports what its conv would have, naming the layer. */
Test(sequential_fusion, a_failing_pair_fails_as_its_conv_would) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(2);
  mx_module *net = make_net(gen);
  mx_tensor *x = mx_randn(MX_SHAPE(1, 4, 8, 8), MX_F32, MX_CPU, gen);
  mx_clear_error();
  cr_expect_null(mx_module_forward(net, x));
  cr_expect_str_eq(mx_last_error(), "mx_module_forward: layer 0 (Conv2d): mx_conv: input [1,4,8,8] has 4 channels, "
                                    "weight [8,3,3,3] expects 3 (groups 1)");
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

/* --- what autograd saves: the same tensors, fused or not --------------------------------------------------- */

Test(sequential_fusion, saved_tensor_hooks_see_the_same_tensors) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(3);
  mx_module *net = make_net(gen);
  mx_tensor *x = mx_randn(MX_SHAPE(2, 3, 8, 8), MX_F32, MX_CPU, gen);
  cr_assert(mx_set_requires_grad(x, true) == MX_OK);
  fusion_pack_log log[2];
  mx_tensor *grads[2][16] = {{NULL}};
  fusion_run_logging_packs(net, x, log, grads);
  cr_expect_gt(log[0].packs, 0);
  cr_expect_eq(log[0].packs, log[1].packs, "fused %d packs, unfused %d", log[0].packs, log[1].packs);
  cr_expect_eq(log[0].sum, log[1].sum);
  expect_same_gradients(net, grads);
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

/* The recomputation fuses as the forward did, so checkpointing gives the plain gradients. */
Test(sequential_fusion, activation_checkpointing_gives_the_plain_gradients) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(4);
  mx_module *net = make_net(gen);
  mx_tensor *x = mx_randn(MX_SHAPE(2, 3, 8, 8), MX_F32, MX_CPU, gen);
  cr_assert(mx_set_requires_grad(x, true) == MX_OK);
  expect_checkpointing_as(net, x, mx_module_forward(net, x));
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

/* BatchNorm2d followed by a ReLU runs as mx_batch_norm_relu: the same bits, in training (batch statistics) and in
 * evaluation (running statistics), in float32 and under bfloat16 autocast. */
static void check_batch_norm_pairs(mx_dtype autocast, bool training) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(9);
  mx_module *net = mx_sequential_new(
      5, (mx_module *[]){mx_conv2d_new(3, 8, MX_SHAPE(3), MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 1, false, gen),
                         mx_batch_norm2d_new(8, 1e-5, 0.1, true, true), mx_relu_new(),
                         mx_batch_norm2d_new(8, 1e-5, 0.1, true, true), mx_relu_new()});
  mx_tensor *x = mx_randn(MX_SHAPE(4, 3, 6, 6), MX_F32, MX_CPU, gen);
  cr_assert(net && x && mx_set_requires_grad(x, true) == MX_OK, "%s", mx_last_error());
  mx_module_train(net, training);
  cr_expect_str_neq(mx_grad_fn_name(fused_as_children(net, x, autocast)), "RELUBackward", "the last pair ran fused");
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

Test(sequential_fusion, batch_norm_relu_pairs_give_the_same_bits_in_training) {
  check_batch_norm_pairs(MX_DTYPE_COUNT, true);
  check_batch_norm_pairs(MX_BF16, true);
}

Test(sequential_fusion, batch_norm_relu_pairs_give_the_same_bits_in_evaluation) {
  check_batch_norm_pairs(MX_DTYPE_COUNT, false);
  check_batch_norm_pairs(MX_BF16, false);
}
