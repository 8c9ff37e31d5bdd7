/* Asserting mixgrad's errors word for word: a call that fails, and the
 * message mx_last_error() holds after it. Include after Criterion and
 * mixgrad.h. */
#ifndef MX_TESTS_COMMON_EXPECT_ERROR_H
#define MX_TESTS_COMMON_EXPECT_ERROR_H

/* A call returning NULL (or 0 or false) with the message set ... */
#define EXPECT_ERROR(call, message)                 \
  do {                                              \
    mx_clear_error();                               \
    cr_expect_not((call), "%s should fail", #call); \
    cr_expect_str_eq(mx_last_error(), (message));   \
  } while (0)

/* ... and one returning a status other than MX_OK. */
#define EXPECT_STATUS_ERROR(call, message)                 \
  do {                                                     \
    mx_clear_error();                                      \
    cr_expect_neq((call), MX_OK, "%s should fail", #call); \
    cr_expect_str_eq(mx_last_error(), (message));          \
  } while (0)

#endif
