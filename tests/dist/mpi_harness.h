/* A small test runner for the dist tests that run as MPI ranks (Criterion
 * forks each test, and a forked process cannot join MPI): every rank runs
 * every test in a fresh process group, a failed check anywhere fails the
 * test, and rank 0 prints one line per test and "N passed, N failed"
 * (scripts/count-tests adds those up).
 *
 * The tests hold for 1 to 8 ranks (tests/dist/meson.build runs 2, 3 and 5;
 * the others are checked by hand); a test that needs more ranks says so in
 * min_ranks and is skipped, with a "skip" line, below that.
 *
 * A rank whose test failed may have left the others waiting for it, in a
 * collective it will never join or for a message. So it prints its
 * message, then gives the others MPI_FAIL_GRACE_S seconds to finish the
 * test; if they have not, it prints "FAIL <test> (rank N; ...)" and ends
 * the whole job with MPI_Abort (the remaining tests do not run) rather
 * than leave it to hang (or to the process group's 60 s watchdog, which
 * does not see a rank waiting for a message). A test that fails on every
 * rank alike is only counted, and the next one runs. */
#ifndef MX_TESTS_DIST_MPI_HARNESS_H
#define MX_TESTS_DIST_MPI_HARNESS_H

#include <stdio.h>

#include "mixgrad.h"

/* How long a rank whose test failed waits for the others to finish it. */
#define MPI_FAIL_GRACE_S 10

/* One test's body on one rank; a failed check writes msg (CHECK). */
typedef void (*mpi_test_fn)(mx_process_group *g, int rank, int world, char *msg, size_t size);

typedef struct {
  const char *name;
  mpi_test_fn fn;
  int min_ranks; /* the fewest ranks it needs (1: any number); skipped below that */
} mpi_test;

/* What a run of tests gave, added up over the calls of mpi_run_tests. */
typedef struct {
  int passed, failed, skipped;
} mpi_counts;

/* In a test body: records the first failed check and leaves the body,
 * which must end with the label done. */
#define CHECK(cond, ...)                                             \
  do {                                                               \
    if (!(cond)) {                                                   \
      if (!msg[0]) snprintf(msg, size, __VA_ARGS__);                 \
      goto done;                                                     \
    }                                                                \
  } while (0)

/* Whether MX_TEST_QUICK asks for the short runs (sanitizers, valgrind). */
int mpi_test_quick(void);

/* Runs the n tests on every rank (MPI is up: a group is open), adding
 * their results to counts. */
void mpi_run_tests(const mpi_test *tests, int n, mpi_counts *counts);

#endif
