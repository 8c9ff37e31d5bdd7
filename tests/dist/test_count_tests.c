/* scripts/count-tests, which gives CI's "N passed, N failed", on small
 * meson test logs made up here: the MPI program's summary and Criterion's
 * synthesis lines are added up, and a run of the MPI program that ends
 * without its summary (a rank's MPI_Abort, a crash, a timeout) or any test
 * that fails with no failure counted from its output counts as failed. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/child_run.h"
#include "tests/common/tmp_files.h"

TestSuite(count_tests, .init = make_tmp_dir, .fini = remove_tmp_dir);

/* One test's entry as meson writes it to testlog.txt. */
static const char *entry(int k, const char *name, const char *result, const char *out, const char *err) {
  return fmt("==================================== %d/9 =====================================\n"
             "test:         mixgrad:dist / %s\nstart time:   05:00:00\nduration:     1.00s\nresult:       %s\n"
             "command:      /usr/bin/mpirun -np 2 build/tests/dist/test_dist_mpi\n"
             "----------------------------------- stdout -----------------------------------\n%s"
             "----------------------------------- stderr -----------------------------------\n%s"
             "==============================================================================\n\n",
             k, name, result, out, err);
}

/* What count-tests prints for the log made of the entries given, NULL-terminated. */
static char *count(const char *first, ...) {
  const char *path = tmp_path("testlog.txt");
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "%s", path);
  fputs("Log of Meson test suite run on 2026-11-27T05:00:00\n\n", f);
  va_list ap;
  va_start(ap, first);
  for (const char *e = first; e; e = va_arg(ap, const char *)) fputs(e, f);
  va_end(ap);
  fputs("Ok:                 1\nFail:               1\n", f);
  cr_assert_eq(fclose(f), 0);
  const char *script = getenv("MX_COUNT_TESTS");
  cr_assert_not_null(script, "MX_COUNT_TESTS is not set (tests/dist/meson.build sets it)");
  child_run r = child_run_argv((const char *const[]){script, path, NULL}, 60);
  cr_assert_eq(r.status, 0, "count-tests: status %d, stderr:\n%s", r.status, r.err);
  char *out = strdup(r.out);
  child_run_free(&r);
  return out;
}

#define EXPECT_COUNT(want, ...)                        \
  do {                                                 \
    char *got = count(__VA_ARGS__, NULL);              \
    cr_expect_str_eq(got, want "\n");                  \
    free(got);                                         \
  } while (0)

#define SYNTHESIS(p, f, c)                                                                                    \
  "[\x1b[0;34m====\x1b[0m] \x1b[0;1mSynthesis: Tested: \x1b[0;34m" #p "\x1b[0;1m | Passing: \x1b[0;32m" #p \
  "\x1b[0;1m | Failing: \x1b[0;31m" #f "\x1b[0;1m | Crashing: \x1b[0;31m" #c "\x1b[0;1m \x1b[0m\n"

Test(count_tests, adds_the_mpi_summaries_and_criterion_synthesis) {
  EXPECT_COUNT("7 passed, 1 failed",
               entry(1, "dist_mpi_2", "exit status 1",
                     "dist over 2 ranks: starting\nok   a\nFAIL b\nok   c\ndist over 2 ranks: 2 passed, 1 failed\n", ""),
               entry(2, "dist", "exit status 0", "", SYNTHESIS(5, 0, 0)));
}

Test(count_tests, an_aborted_mpi_run_counts_its_lines_and_its_failure) {
  const char *out = "dist over 3 ranks: starting\nok   a\nFAIL b\nok   c\n"
                    "FAIL d (rank 1; the other ranks did not finish it within 10 s, so the job ends here)\n"
                    "FAIL d (rank 2; the other ranks did not finish it within 10 s, so the job ends here)\n";
  EXPECT_COUNT("7 passed, 2 failed", entry(1, "dist_mpi_3", "exit status 1", out, "[rank 1] d: MPI_Abort\n"),
               entry(2, "dist", "exit status 0", "", SYNTHESIS(5, 0, 0)));
}

Test(count_tests, a_crashed_or_timed_out_mpi_run_counts_as_failed) {
  const char *out = "dist over 2 ranks: starting\nok   a\nok   b\n";
  EXPECT_COUNT("7 passed, 1 failed", entry(1, "dist", "exit status 0", "", SYNTHESIS(5, 0, 0)),
               entry(2, "dist_mpi_2", "killed by signal 15 SIGTERM", out, ""));
  /* no summary: not passed, whatever the status */
  EXPECT_COUNT("7 passed, 1 failed", entry(1, "dist", "exit status 0", "", SYNTHESIS(5, 0, 0)),
               entry(2, "dist_mpi_2", "exit status 0", out, ""));
}

Test(count_tests, a_failed_test_with_nothing_counted_counts_once) {
  EXPECT_COUNT("5 passed, 2 failed", entry(1, "dist_mpi_2", "exit status 1", "", "init: MPI_Init failed\n"),
               entry(2, "dist", "killed by signal 6 SIGABRT", "", "[----] a message before the synthesis\n"),
               entry(3, "gpu", "exit status 0", "", SYNTHESIS(5, 0, 0)));
  /* skipped (77), or passed with no counts: nothing */
  EXPECT_COUNT("0 passed, 0 failed", entry(1, "dist_nccl", "exit status 77", "", ""),
               entry(2, "lint", "exit status 0", "", ""));
}

Test(count_tests, other_tests_ok_lines_are_not_the_mpi_programs) {
  EXPECT_COUNT("3 passed, 0 failed", entry(1, "layers-cases", "exit status 0", "ok   conv\nok   pool\n", ""),
               entry(2, "gpu", "exit status 0", "", SYNTHESIS(3, 0, 0)));
}
