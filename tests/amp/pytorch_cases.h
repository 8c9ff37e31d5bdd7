/* What the three files of PyTorch's translated AMP cases share
 * (test_pytorch_cases.c, test_pytorch_autocast.c, test_pytorch_scaling.c):
 * comparisons, leaves, a Linear layer. */
#ifndef MX_TESTS_AMP_PYTORCH_CASES_H
#define MX_TESTS_AMP_PYTORCH_CASES_H

#include "amp_suite.h"

/* Row-major values of t as doubles (malloc'ed; free() them). */
double *values_of(const mx_tensor *t);
bool same_shape(const mx_tensor *a, const mx_tensor *b);
/* torch.equal, made stricter: the same dtype, shape and bits. */
void expect_bitwise(const char *what, const mx_tensor *got, const mx_tensor *want);
/* assertEqual(got, want, atol=, rtol=): |got - want| <= atol + rtol |want|. */
void expect_close(const char *what, const mx_tensor *got, const mx_tensor *want, double atol, double rtol);
bool all_equal_to(const mx_tensor *t, double v);
/* t made a leaf that requires grad (asserts it is not NULL). */
mx_tensor *leaf(mx_tensor *t);

typedef struct {
  mx_tensor *weight, *bias;
} linear_layer;
/* torch.nn.Linear(in, out): weight (out, in) and bias (out), float32 leaves. */
linear_layer make_linear(int64_t in, int64_t out, mx_generator *gen);
mx_tensor *apply_linear(const linear_layer *l, const mx_tensor *x);

#endif
