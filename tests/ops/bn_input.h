/* The batch-norm tests' input (tests/ops/test_batch_norm_training.c, test_batch_norm_vectors.c). */
#ifndef MX_TESTS_OPS_BN_INPUT_H
#define MX_TESTS_OPS_BN_INPUT_H

#include <mixgrad.h>

/* randn x of shape (N, 4, ...) with its 4 channels around different means,
 * so that the centring matters, in dtype, laid out channels-last when asked. */
mx_tensor *bn_input(mx_shape shape, mx_dtype dtype, bool channels_last, uint64_t seed);

#endif
