/* What the fused-op tests share (test_conv_relu.c, test_linear_relu.c, test_conv_pool.c, test_conv_pool_mask.c):
 * leaves drawn from [-1, 1), and a bitwise comparison of the fused op's
 * results with the unfused ops'. */
#ifndef MX_TESTS_OPS_FUSED_CASE_H
#define MX_TESTS_OPS_FUSED_CASE_H

#include <mixgrad.h>

/* A leaf of dtype dt drawn from [-1, 1) (so some sums are negative, some positive), requiring grad. */
mx_tensor *fused_case_leaf(mx_shape shape, mx_dtype dt, mx_generator *gen);
/* a and b hold the same dtype and bits; a failure names case k, what and dt. */
void fused_case_same_bits(const mx_tensor *a, const mx_tensor *b, const char *what, int k, mx_dtype dt);
/* The gradients of sum(y[f] * r) for x, w and b (b may be NULL), r drawn from gen, hold the same bits for the
 * fused output y[1] as for the unfused y[0]. */
void fused_case_same_gradients(mx_tensor *const y[2], mx_tensor *x, mx_tensor *w, mx_tensor *b, mx_generator *gen,
                               int k, mx_dtype dt);
/* conv2d_max_pool_relu on in[0 .. 2] (x, weight, bias; padding 1, 2x2 windows), as gradcheck calls it. */
mx_tensor *fused_case_conv_pool(int n, mx_tensor *const *in, void *ctx);

#endif
