/* What the AMP suite's files share: assertions that print mixgrad's error,
 * and a suite fixture that gives each test a scope and leaves autocast as
 * it found it (regions ended, policies and the report reset). */
#ifndef MX_TESTS_AMP_AMP_SUITE_H
#define MX_TESTS_AMP_AMP_SUITE_H

#include <criterion/criterion.h>
#include <mixgrad.h>

#define OK(expr) cr_assert_eq((expr), MX_OK, "%s", mx_last_error())
#define NOT_NULL(t) cr_assert_not_null((t), "%s", mx_last_error())

/* TestSuite(name, .init = amp_suite_open, .fini = amp_suite_close) */
void amp_suite_open(void);
void amp_suite_close(void);

#endif
