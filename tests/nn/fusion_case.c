/* The helpers of fusion_case.h. */
#include "fusion_case.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

mx_tensor *children_in_turn(mx_module *net, const mx_tensor *x) {
  mx_tensor *y = (mx_tensor *)x;
  for (int i = 0; i < mx_module_num_children(net) && y; i++) y = mx_module_forward(mx_module_child(net, i, NULL), y);
  return y;
}

void expect_same_bits(const mx_tensor *a, const mx_tensor *b, const char *what) {
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

void expect_same_gradients(mx_module *net, mx_tensor *grads[2][16]) {
  for (int i = 0; i <= mx_module_num_parameters(net); i++) {
    const char *name = "x";
    if (i) mx_module_parameter(net, i - 1, &name);
    expect_same_bits(grads[0][i], grads[1][i], name);
  }
}

void expect_same_run(mx_module *net, const mx_tensor *fused, const mx_tensor *plain, mx_tensor *grads[2][16]) {
  expect_same_bits(fused, plain, "output");
  expect_same_gradients(net, grads);
}

mx_tensor *fusion_run(mx_module *net, mx_tensor *x, bool fused, mx_dtype autocast, mx_tensor **grads) {
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
  cr_assert(n < 16, "fusion_run: %d parameters, at most 15", n);
  for (int i = 0; i < n; i++) inputs[1 + i] = mx_module_parameter(net, i, NULL);
  cr_assert_eq(mx_grad(1, &loss, 1 + n, inputs, NULL, false, false, false, grads), MX_OK, "%s", mx_last_error());
  return out;
}

/* Runs net fused and as its children in turn (ending in a plain ReLU), expects the same output and gradients bit
 * for bit, and returns the fused output (its node says which op ran last). */

static void *pack(mx_tensor *t, void *ctx) {
  fusion_pack_log *log = ctx;
  log->packs++;
  log->elements += mx_numel(t);
  log->sum += mx_item(mx_sum(mx_to_dtype(t, MX_F64), MX_ALL_DIMS, false));
  return mx_detach_unscoped(t);
}
static mx_tensor *unpack(void *packed) { return mx_detach(packed); }
static void free_packed(void *packed) { mx_release(packed); }
static const mx_saved_tensor_hooks logging_hooks = {"logging", pack, unpack, free_packed};

void fusion_run_logging_packs(mx_module *net, mx_tensor *x, fusion_pack_log log[2], mx_tensor *grads[2][16]) {
  for (int f = 0; f < 2; f++) {
    log[f] = (fusion_pack_log){0};
    cr_assert_eq(mx_saved_tensor_hooks_push(&logging_hooks, &log[f]), MX_OK);
    fusion_run(net, x, f == 0, MX_DTYPE_COUNT, grads[f]);
    cr_assert_eq(mx_saved_tensor_hooks_pop(), MX_OK);
  }
}

static mx_status net_block(void *user, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
  out[0] = mx_module_forward(user, in[0]);
  return out[0] ? MX_OK : mx_last_status();
}

void expect_checkpointing_as(mx_module *net, mx_tensor *x, mx_tensor *plain) {
  mx_tensor *out[2] = {NULL, plain};
  cr_assert_eq(mx_activation_checkpoint(net_block, net, 1, &x, 1, &out[0], NULL), MX_OK, "%s", mx_last_error());
  int n = mx_module_num_parameters(net);
  cr_assert(n < 16, "expect_checkpointing_as: %d parameters, at most 15", n);
  mx_tensor *inputs[16] = {x}, *grads[2][16] = {{NULL}};
  for (int i = 0; i < n; i++) inputs[1 + i] = mx_module_parameter(net, i, NULL);
  for (int f = 0; f < 2; f++) {
    mx_tensor *loss = mx_sum(mx_mul(out[f], out[f]), MX_ALL_DIMS, false);
    cr_assert_eq(mx_grad(1, &loss, 1 + n, inputs, NULL, false, false, false, grads[f]), MX_OK, "%s",
                 mx_last_error());
  }
  expect_same_run(net, out[0], out[1], grads);
}

void count_output(const char *name, const char *type, const mx_tensor *out, void *ctx) { (*(int *)ctx)++; }
