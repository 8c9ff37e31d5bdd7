/* Sequential runs a Linear followed by a ReLU as one mx_linear_relu: the same output and gradients bit for bit as
 * its children run one by one (float32, whose pairs oneDNN runs fused, and bfloat16 autocast), and no fusion where a
 * hook watches a child. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "fusion_case.h"

/* linear, relu, linear (no bias), relu, linear, tanh, relu (after a kind that does not fuse), linear, relu (the last
 * pair: the output's node says which ran) */
static mx_module *make_net(mx_generator *gen) {
  return mx_sequential_new(9, (mx_module *[]){mx_linear_new(12, 32, true, gen), mx_relu_new(),
                                              mx_linear_new(32, 16, false, gen), mx_relu_new(),
                                              mx_linear_new(16, 16, true, gen), mx_tanh_new(), mx_relu_new(),
                                              mx_linear_new(16, 8, true, gen), mx_relu_new()});
}

/* x of shape (rows..., 12): fused and in turn give the same bits, and the last pair ran fused. */
static void check_fused_against_children(mx_shape shape, mx_dtype autocast) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(38);
  mx_module *net = make_net(gen);
  mx_tensor *x = mx_randn(shape, MX_F32, MX_CPU, gen);
  cr_assert(net && x && mx_set_requires_grad(x, true) == MX_OK, "%s", mx_last_error());
  mx_tensor *grads[2][16] = {{NULL}};
  mx_tensor *fused = fusion_run(net, x, true, autocast, grads[0]), *plain = fusion_run(net, x, false, autocast, grads[1]);
  cr_expect_str_eq(mx_grad_fn_name(plain), "RELUBackward");
  cr_expect_str_eq(mx_grad_fn_name(fused), "LINEAR_RELUBackward");
  expect_same_run(net, fused, plain, grads);
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

Test(linear_relu_fusion, linear_relu_pairs_give_the_same_bits_fused) {
  check_fused_against_children(MX_SHAPE(128, 12), MX_DTYPE_COUNT);
  check_fused_against_children(MX_SHAPE(2, 5, 12), MX_DTYPE_COUNT);
}

Test(linear_relu_fusion, linear_relu_pairs_give_the_same_bits_fused_under_bf16_autocast) {
  check_fused_against_children(MX_SHAPE(128, 12), MX_BF16);
  check_fused_against_children(MX_SHAPE(2, 5, 12), MX_BF16);
}


/* A hook on either child keeps the pair apart. */
Test(linear_relu_fusion, a_hook_on_either_child_keeps_the_pair_apart) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(1);
  mx_module *net = make_net(gen);
  mx_tensor *x = mx_randn(MX_SHAPE(4, 12), MX_F32, MX_CPU, gen);
  int last = mx_module_num_children(net) - 1;
  mx_module *watched[2] = {mx_module_child(net, last, NULL), mx_module_child(net, last - 1, NULL)};
  for (int k = 0; k < 2; k++) {
    int calls = 0;
    mx_module_set_output_hook(watched[k], count_output, &calls);
    mx_tensor *out = mx_module_forward(net, x);
    cr_assert(out, "%s", mx_last_error());
    cr_expect_eq(calls, 1, "hook %d: %d calls", k, calls);
    cr_expect_str_eq(mx_grad_fn_name(out), "RELUBackward", "hook %d", k);
    mx_module_set_output_hook(watched[k], NULL, NULL);
  }
  cr_expect_str_eq(mx_grad_fn_name(mx_module_forward(net, x)), "LINEAR_RELUBackward"); /* no hook: fused again */
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
}
