/* What the channels-last op tests share: channels-last copies of tensors
 * (a contiguous (N, H, W, C) tensor permuted to (N, C, H, W)), checks of a
 * result's layout, and comparisons of values bit for bit or within a
 * tolerance. Include after Criterion and mixgrad.h. */
#ifndef MX_TESTS_OPS_CHANNELS_LAST_CASE_H
#define MX_TESTS_OPS_CHANNELS_LAST_CASE_H

#include <stdbool.h>

/* Whether MX_TEST_QUICK is set (non-empty, not "0"): CI's sanitizer and
 * valgrind runs, where the tests do less. */
bool test_quick(void);
/* x's values, laid out channels-last (x is 4-d, any layout). */
mx_tensor *to_channels_last(const mx_tensor *x);
/* Whether t's strides are the channels-last ones, (H W C, 1, W C, C) (size-1 dims: any). */
bool has_channels_last_strides(const mx_tensor *t);
/* Asserts t's strides are channels-last and not row-major, naming what. */
void expect_channels_last(const mx_tensor *t, const char *what);
/* Asserts a and b hold the same bits, element for element (a NaN matches any NaN). */
void expect_same_bits(const mx_tensor *a, const mx_tensor *b, const char *what);
/* Asserts |a - b| <= tol (1 + |b|) element for element (NaN where the other is). */
void expect_close(const mx_tensor *a, const mx_tensor *b, double tol, const char *what);
/* A random (N, C, H, W) tensor of dtype, seeded: normal values in steps of
 * 1/4 (ties in every window) when ties, with NaN at two places. */
mx_tensor *random_input(mx_shape shape, mx_dtype dtype, uint64_t seed, bool ties, bool nans);

#endif
