/* A stand-in for the few Criterion macros a test uses, for builds where
 * Criterion cannot run: under ThreadSanitizer its boxfort arena maps fixed
 * addresses where TSan keeps its shadow memory, and the runner crashes
 * before the first test (Snaipe/Criterion#274). The tests register
 * themselves, run in order in one process, and main() ends with
 * Criterion's synthesis line, which scripts/count-tests reads. A failed
 * assertion ends its test, as in Criterion. */
#ifndef MX_TESTS_NO_CRITERION_H
#define MX_TESTS_NO_CRITERION_H

#include <setjmp.h>
#include <stdio.h>

typedef struct {
  const char *name;
  void (*body)(void);
} nc_test;

static nc_test nc_tests[64];
static int nc_count;
static jmp_buf nc_abort;

static void nc_register(const char *name, void (*body)(void)) {
  if (nc_count < (int)(sizeof nc_tests / sizeof *nc_tests)) nc_tests[nc_count++] = (nc_test){name, body};
}

#define Test(suite, name)                                                                                     \
  static void suite##_##name(void);                                                                           \
  __attribute__((constructor)) static void nc_register_##suite##_##name(void) {                              \
    nc_register(#suite "::" #name, suite##_##name);                                                           \
  }                                                                                                           \
  static void suite##_##name(void)

/* Unlike Criterion's, these need a message (a format and its values). */
#define NC_CHECK(cond, text, ...)                                                                             \
  do {                                                                                                        \
    if (!(cond)) {                                                                                            \
      fprintf(stderr, "%s:%d: assertion failed: %s\n  ", __FILE__, __LINE__, text);                           \
      fprintf(stderr, __VA_ARGS__);                                                                           \
      fprintf(stderr, "\n");                                                                                  \
      longjmp(nc_abort, 1);                                                                                   \
    }                                                                                                         \
  } while (0)
#define cr_assert(cond, ...) NC_CHECK(cond, #cond, __VA_ARGS__)
#define cr_assert_not_null(p, ...) NC_CHECK((p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_assert_eq(a, b, ...) NC_CHECK((a) == (b), #a " == " #b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...) NC_CHECK((a) <= (b), #a " <= " #b, __VA_ARGS__)

/* 1 when the test ran to its end, 0 when an assertion ended it. */
static int nc_run(void (*body)(void)) {
  if (setjmp(nc_abort)) return 0;
  body();
  return 1;
}

int main(void) {
  int passed = 0;
  for (int i = 0; i < nc_count; i++) {
    int ok = nc_run(nc_tests[i].body);
    printf("[%s] %s\n", ok ? "PASS" : "FAIL", nc_tests[i].name);
    passed += ok;
  }
  printf("[====] Synthesis: Tested: %d | Passing: %d | Failing: %d | Crashing: 0\n", nc_count, passed,
         nc_count - passed);
  return passed == nc_count ? 0 : 1;
}

#endif
