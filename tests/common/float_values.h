/* Reading float32 tensors back in tests: their values, and how far two are
 * apart. Include after Criterion and mixgrad.h. */
#ifndef MX_TESTS_COMMON_FLOAT_VALUES_H
#define MX_TESTS_COMMON_FLOAT_VALUES_H

#include <mixgrad.h>

/* The floats of a float32 tensor (malloc'd; the test fails on an error). */
float *values(const mx_tensor *t);
/* The largest |a[i] - b[i]| of two float32 tensors of one size. */
double max_abs_diff(const mx_tensor *a, const mx_tensor *b);

#endif
