/* What the Sequential fusion tests share (test_sequential_fusion.c,
 * test_linear_relu_fusion.c, test_pool_relu_fusion.c,
 * test_conv_pool_fusion.c): a net's children run
 * in turn as Sequential did before it fused, a bitwise comparison, one
 * forward + gradient, what saved-tensor hooks see, and checkpointing. */
#ifndef MX_TESTS_NN_FUSION_CASE_H
#define MX_TESTS_NN_FUSION_CASE_H

#include <mixgrad.h>

/* The children run one by one, as Sequential did before it fused. */
mx_tensor *children_in_turn(mx_module *net, const mx_tensor *x);
/* a and b hold the same bits (what names the pair in a failure). */
void expect_same_bits(const mx_tensor *a, const mx_tensor *b, const char *what);
/* grads[0][i] and grads[1][i] hold the same bits for x (i = 0) and each of net's parameters (named in a failure). */
void expect_same_gradients(mx_module *net, mx_tensor *grads[2][16]);
/* fused and plain hold the same bits, and so do the gradients (expect_same_gradients). */
void expect_same_run(mx_module *net, const mx_tensor *fused, const mx_tensor *plain, mx_tensor *grads[2][16]);
/* The output of the net (fused or its children in turn; autocast MX_DTYPE_COUNT: none) and the gradients of
 * sum(out * r) for x and every parameter (at most 15), into grads[0..1 + parameters). */
mx_tensor *fusion_run(mx_module *net, mx_tensor *x, bool fused, mx_dtype autocast, mx_tensor **grads);

/* What saved-tensor hooks were handed: how many tensors, their elements, and the sum of their values. */
typedef struct {
  int packs;
  int64_t elements;
  double sum;
} fusion_pack_log;
/* fusion_run fused (into log[0], grads[0]) and with the children in turn (log[1], grads[1]), each under
 * saved-tensor hooks that log every tensor packed. */
void fusion_run_logging_packs(mx_module *net, mx_tensor *x, fusion_pack_log log[2], mx_tensor *grads[2][16]);
/* net run on x under activation checkpointing gives plain (net's output computed without it) and the same
 * gradients for x and every parameter, bit for bit. */
void expect_checkpointing_as(mx_module *net, mx_tensor *x, mx_tensor *plain);
/* An output hook that counts its calls into *(int *)ctx. */
void count_output(const char *name, const char *type, const mx_tensor *out, void *ctx);

#endif
