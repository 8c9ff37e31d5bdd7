/* What the Sequential fusion tests share (test_sequential_fusion.c,
 * test_linear_relu_fusion.c): a net's children run in turn as Sequential
 * did before it fused, a bitwise comparison, and one forward + gradient. */
#ifndef MX_TESTS_NN_FUSION_CASE_H
#define MX_TESTS_NN_FUSION_CASE_H

#include <mixgrad.h>

/* The children run one by one, as Sequential did before it fused. */
mx_tensor *children_in_turn(mx_module *net, const mx_tensor *x);
/* a and b hold the same bits (what names the pair in a failure). */
void expect_same_bits(const mx_tensor *a, const mx_tensor *b, const char *what);
/* The output of the net (fused or its children in turn; autocast MX_DTYPE_COUNT: none) and the gradients of
 * sum(out * r) for x and every parameter (at most 15), into grads[0..1 + parameters). */
mx_tensor *fusion_run(mx_module *net, mx_tensor *x, bool fused, mx_dtype autocast, mx_tensor **grads);

#endif
