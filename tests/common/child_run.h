/* Running a program as a child process for the suites that run the demos
 * (examples, reliability): no shell, its stdout and stderr captured through
 * files in the test's directory, an optional time limit. Include after
 * Criterion (a failure to start or wait is a failed assertion). */
#ifndef MX_TESTS_COMMON_CHILD_RUN_H
#define MX_TESTS_COMMON_CHILD_RUN_H

typedef struct {
  int status; /* the exit code; 128 + the signal when one killed it */
  char *out, *err;
  double seconds;
} child_run;

/* Runs argv (NULL-terminated; argv[0] the program's path). With
 * limit_seconds > 0, a child still running then is killed (status 137). */
child_run child_run_argv(const char *const *argv, double limit_seconds);
void child_run_free(child_run *r);

#endif
