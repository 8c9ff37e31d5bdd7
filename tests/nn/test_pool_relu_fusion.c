/* Sequential runs a ReLU followed by a MaxPool as one mx_max_pool_relu, ahead of the fusion of that ReLU with a
 * Conv2d before it (and behind the fusion of all three, conv2d_max_pool_relu, which the nets here get where no hook
 * watches the convolution: tests/nn/test_conv_pool_fusion.c): the same output and gradients bit for bit as the
 * children run one by one (float32, bfloat16 autocast, channels-last), without the ReLU's full-resolution output
 * among the saved tensors (saved-tensor hooks see two fewer per pair), activation checkpointing as plain, and no
 * fusion where a hook watches the pair. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "fusion_case.h"

/* The demo CNN's shape: conv, relu, 2x2 pool twice, then a third conv, relu and an overlapping 3x3 pool (stride 2,
 * padding 1) */
static mx_module *make_net(mx_generator *gen) {
  return mx_sequential_new(
      9, (mx_module *[]){mx_conv2d_new(3, 8, MX_SHAPE(3), MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 1, true, gen),
                         mx_relu_new(), mx_max_pool2d_new(MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT),
                         mx_conv2d_new(8, 16, MX_SHAPE(3), MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 1, true, gen),
                         mx_relu_new(), mx_max_pool2d_new(MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT),
                         mx_conv2d_new(16, 16, MX_SHAPE(3), MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 1, true, gen),
                         mx_relu_new(), mx_max_pool2d_new(MX_SHAPE(3), MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT)});
}

static void check_fused_against_children(mx_dtype autocast, bool channels_last) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(38);
  mx_module *net = make_net(gen);
  mx_tensor *x = mx_randn(MX_SHAPE(2, 3, 16, 16), MX_F32, MX_CPU, gen);
  if (channels_last) x = mx_detach(mx_to_channels_last(x));
  cr_assert(net && x && mx_set_requires_grad(x, true) == MX_OK, "%s", mx_last_error());
  mx_tensor *grads[2][16] = {{NULL}};
  mx_tensor *fused = fusion_run(net, x, true, autocast, grads[0]);
  mx_tensor *plain = fusion_run(net, x, false, autocast, grads[1]);
  cr_expect_str_eq(mx_grad_fn_name(fused), "CONV2D_MAX_POOL_RELUBackward");
  cr_expect_str_eq(mx_grad_fn_name(plain), "MAX_POOLBackward");
  expect_same_run(net, fused, plain, grads);
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

Test(pool_relu_fusion, relu_pool_pairs_give_the_same_bits_fused) {
  check_fused_against_children(MX_DTYPE_COUNT, false);
}

Test(pool_relu_fusion, relu_pool_pairs_give_the_same_bits_fused_under_bf16_autocast) {
  check_fused_against_children(MX_BF16, false);
}

Test(pool_relu_fusion, relu_pool_pairs_give_the_same_bits_fused_channels_last) {
  check_fused_against_children(MX_DTYPE_COUNT, true);
  check_fused_against_children(MX_BF16, true);
}


/* A hook on the pool keeps it apart (the ReLU then fuses with the conv before it), one on the ReLU keeps all three
 * apart, one on the conv leaves the pair to fuse; without a hook all three fuse again. */
Test(pool_relu_fusion, a_hook_keeps_the_pair_apart) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(1);
  mx_module *net = make_net(gen);
  mx_tensor *x = mx_randn(MX_SHAPE(1, 3, 8, 8), MX_F32, MX_CPU, gen);
  int last = mx_module_num_children(net) - 1;
  mx_module *watched[2] = {mx_module_child(net, last, NULL), mx_module_child(net, last - 1, NULL)};
  for (int k = 0; k < 2; k++) {
    int calls = 0;
    mx_module_set_output_hook(watched[k], count_output, &calls);
    mx_tensor *out = mx_module_forward(net, x);
    cr_assert(out, "%s", mx_last_error());
    cr_expect_eq(calls, 1, "hook %d: %d calls", k, calls);
    cr_expect_str_eq(mx_grad_fn_name(out), "MAX_POOLBackward", "hook %d", k);
    mx_module_set_output_hook(watched[k], NULL, NULL);
  }
  int calls = 0;
  mx_module *conv = mx_module_child(net, last - 2, NULL);
  mx_module_set_output_hook(conv, count_output, &calls);
  cr_expect_str_eq(mx_grad_fn_name(mx_module_forward(net, x)), "MAX_POOL_RELUBackward");
  cr_expect_eq(calls, 1, "the conv's hook: %d calls", calls);
  mx_module_set_output_hook(conv, NULL, NULL);
  cr_expect_str_eq(mx_grad_fn_name(mx_module_forward(net, x)), "CONV2D_MAX_POOL_RELUBackward");
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

/* A ReLU first in the Sequential fuses with the pool after it; a failing pair reports what its pool would have,
 * naming the layer. */
Test(pool_relu_fusion, a_leading_pair_fuses_and_a_failing_one_fails_as_its_pool_would) {
  mx_scope *scope = mx_scope_begin();
  mx_module *net = mx_sequential_new(
      2, (mx_module *[]){mx_relu_new(), mx_max_pool2d_new(MX_SHAPE(5), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT)});
  mx_tensor *x = mx_randn(MX_SHAPE(1, 2, 5, 10), MX_F32, MX_CPU, NULL);
  cr_assert(mx_set_requires_grad(x, true) == MX_OK);
  mx_tensor *y = mx_module_forward(net, x);
  cr_assert(y, "%s", mx_last_error());
  cr_expect_str_eq(mx_grad_fn_name(y), "MAX_POOL_RELUBackward");
  expect_same_bits(y, children_in_turn(net, x), "output");
  mx_clear_error();
  cr_expect_null(mx_module_forward(net, mx_randn(MX_SHAPE(1, 2, 3, 3), MX_F32, MX_CPU, NULL)));
  cr_expect_str_eq(mx_last_error(), "mx_module_forward: layer 1 (MaxPool2d): mx_max_pool: input size 3 is smaller "
                                    "than the kernel 5 in spatial dim 0");
  mx_module_free(net);
  mx_scope_end(scope);
}

/* --- what autograd saves: the pair keeps the pooled output and its indices, not the ReLU's output ---------- */

/* The hooks see one tensor fewer per pair, the ReLU's full-resolution output (2 x 8 x 16 x 16, 2 x 16 x 8 x 8 and
 * 2 x 16 x 4 x 4 elements here), and what they hand back gives the plain gradients. */
Test(pool_relu_fusion, saved_tensor_hooks_see_the_relu_outputs_no_more) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(3);
  mx_module *net = make_net(gen);
  mx_tensor *x = mx_randn(MX_SHAPE(2, 3, 16, 16), MX_F32, MX_CPU, gen);
  cr_assert(mx_set_requires_grad(x, true) == MX_OK);
  fusion_pack_log log[2];
  mx_tensor *grads[2][16] = {{NULL}};
  fusion_run_logging_packs(net, x, log, grads);
  cr_expect_eq(log[0].packs + 3, log[1].packs, "fused %d packs, unfused %d", log[0].packs, log[1].packs);
  cr_expect_eq(log[0].elements + 2 * 8 * 16 * 16 + 2 * 16 * 8 * 8 + 2 * 16 * 4 * 4, log[1].elements,
               "fused %lld elements, unfused %lld", (long long)log[0].elements, (long long)log[1].elements);
  expect_same_gradients(net, grads);
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

/* The recomputation fuses as the forward did (the choice depends on the modules alone), so checkpointing saves
 * what it recorded and gives the plain gradients. */
Test(pool_relu_fusion, activation_checkpointing_gives_the_plain_gradients) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(4);
  mx_module *net = make_net(gen);
  mx_tensor *x = mx_randn(MX_SHAPE(2, 3, 16, 16), MX_F32, MX_CPU, gen);
  cr_assert(mx_set_requires_grad(x, true) == MX_OK);
  expect_checkpointing_as(net, x, children_in_turn(net, x));
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}
