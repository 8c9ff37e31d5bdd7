/* Checks the op suite's files share: an exact error (status and message), bitwise equality, a shape, a tensor's
 * values. */
#ifndef MX_TESTS_OP_CHECKS_H
#define MX_TESTS_OP_CHECKS_H

#include <stdbool.h>

#include <mixgrad.h>

/* The call what failed (failed is true) with this status and exactly this message. */
void op_expect_error(const char *what, bool failed, mx_status status, const char *message);

/* Runs expr (a pointer-returning call) with the error cleared first, and expects NULL with status and message. */
#define EXPECT_NULL(expr, status, message)                   \
  do {                                                       \
    mx_clear_error();                                        \
    op_expect_error(#expr, (expr) == NULL, status, message); \
  } while (0)

/* The same for a call returning an mx_status: anything but MX_OK. */
#define EXPECT_FAIL(expr, status, message)                    \
  do {                                                        \
    mx_clear_error();                                         \
    op_expect_error(#expr, (expr) != MX_OK, status, message); \
  } while (0)

/* Whether a and b (float64; a NULL one fails the test) hold as many values, bit for bit the same. */
bool op_bitwise_equal(const mx_tensor *a, const mx_tensor *b);

/* t is not NULL and has exactly the shape want; what names it in the messages. */
void op_expect_shape(const char *what, const mx_tensor *t, mx_shape want);

/* The values of t as doubles, through float64 (malloc'ed: the caller frees them). */
double *op_host_values(const mx_tensor *t);

#endif
