/* Sequential runs a Linear followed by a ReLU as one mx_linear_relu: the same output and gradients bit for bit as
 * its children run one by one (float32, whose pairs oneDNN runs fused, and bfloat16 autocast), and no fusion where a
 * hook watches a child. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

/* linear, relu, linear (no bias), relu, linear, tanh, relu (after a kind that does not fuse), linear, relu (the last
 * pair: the output's node says which ran) */
static mx_module *make_net(mx_generator *gen) {
  return mx_sequential_new(9, (mx_module *[]){mx_linear_new(12, 32, true, gen), mx_relu_new(),
                                              mx_linear_new(32, 16, false, gen), mx_relu_new(),
                                              mx_linear_new(16, 16, true, gen), mx_tanh_new(), mx_relu_new(),
                                              mx_linear_new(16, 8, true, gen), mx_relu_new()});
}

/* The children run one by one, as Sequential did before it fused. */
static mx_tensor *children_in_turn(mx_module *net, const mx_tensor *x) {
  mx_tensor *y = (mx_tensor *)x;
  for (int i = 0; i < mx_module_num_children(net) && y; i++) y = mx_module_forward(mx_module_child(net, i, NULL), y);
  return y;
}

static void expect_same_bits(const mx_tensor *a, const mx_tensor *b, const char *what) {
  cr_assert(a && b, "%s: %s", what, mx_last_error());
  size_t n = (size_t)mx_numel(a) * mx_dtype_size(mx_dtype_of(a));
  cr_assert_eq(mx_numel(a), mx_numel(b), "%s", what);
  cr_assert_eq(mx_dtype_of(a), mx_dtype_of(b), "%s", what);
  char *ba = malloc(n + 1), *bb = malloc(n + 1);
  cr_assert(ba && bb);
  cr_assert_eq(mx_to_host(a, ba, n), MX_OK);
  cr_assert_eq(mx_to_host(b, bb, n), MX_OK);
  cr_expect(!memcmp(ba, bb, n), "%s: fused and unfused differ", what);
  free(ba);
  free(bb);
}

/* The output of the net (fused or its children in turn) and the gradients of sum(out * r) for x and every
 * parameter, into grads[0..1 + parameters). */
static mx_tensor *run(mx_module *net, mx_tensor *x, bool fused, mx_dtype autocast, mx_tensor **grads) {
  mx_tensor *out = NULL;
  MX_AUTOCAST(MX_CPU, autocast, autocast != MX_DTYPE_COUNT, true) {
    out = fused ? mx_module_forward(net, x) : children_in_turn(net, x);
  }
  cr_assert(out, "%s", mx_last_error());
  mx_generator *gen = mx_generator_new(5);
  mx_tensor *r = mx_to_dtype(mx_randn(mx_shape_get(out), MX_F32, MX_CPU, gen), mx_dtype_of(out));
  mx_generator_free(gen);
  mx_tensor *loss = mx_sum(mx_mul(out, r), MX_ALL_DIMS, false);
  int n = mx_module_num_parameters(net);
  mx_tensor *inputs[16] = {x};
  for (int i = 0; i < n; i++) inputs[1 + i] = mx_module_parameter(net, i, NULL);
  cr_assert_eq(mx_grad(1, &loss, 1 + n, inputs, NULL, false, false, false, grads), MX_OK, "%s", mx_last_error());
  return out;
}

/* x of shape (rows..., 12): fused and in turn give the same bits, and the last pair ran fused. */
static void check_fused_against_children(mx_shape shape, mx_dtype autocast) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(38);
  mx_module *net = make_net(gen);
  mx_tensor *x = mx_randn(shape, MX_F32, MX_CPU, gen);
  cr_assert(net && x && mx_set_requires_grad(x, true) == MX_OK, "%s", mx_last_error());
  mx_tensor *grads[2][16] = {{NULL}};
  mx_tensor *fused = run(net, x, true, autocast, grads[0]), *plain = run(net, x, false, autocast, grads[1]);
  cr_expect_str_eq(mx_grad_fn_name(plain), "RELUBackward");
  cr_expect_str_eq(mx_grad_fn_name(fused), "LINEAR_RELUBackward");
  expect_same_bits(fused, plain, "output");
  for (int i = 0; i <= mx_module_num_parameters(net); i++) {
    const char *name = "x";
    if (i) mx_module_parameter(net, i - 1, &name);
    expect_same_bits(grads[0][i], grads[1][i], name);
  }
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

static void count_output(const char *name, const char *type, const mx_tensor *out, void *ctx) { (*(int *)ctx)++; }

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
