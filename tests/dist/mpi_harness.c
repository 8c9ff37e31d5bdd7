/* The runner of the dist tests that run as MPI ranks (see mpi_harness.h). */
#include "mpi_harness.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int mpi_test_quick(void) {
  const char *q = getenv("MX_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0;
}

/* On a rank whose test failed: waits for the result's all-reduce, which
 * the others join once they are done with the test, for at most
 * MPI_FAIL_GRACE_S seconds; past that they are taken to wait for this rank
 * in a collective, and the job ends. */
static void wait_or_end_the_job(MPI_Request *req, const char *name, int rank) {
  double until = MPI_Wtime() + MPI_FAIL_GRACE_S;
  for (int done = 0; MPI_Test(req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done;) {
    if (MPI_Wtime() > until) {
      printf("FAIL %s (rank %d; the other ranks did not finish it within %d s, so the job ends here)\n", name, rank,
             MPI_FAIL_GRACE_S);
      fflush(stdout);
      fprintf(stderr, "[rank %d] %s: failed here, and the other ranks may wait for this rank in a collective: "
              "MPI_Abort\n", rank, name);
      fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
  }
}

void mpi_run_tests(const mpi_test *tests, int n, mpi_counts *counts) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (int i = 0; i < n; i++) {
    if (world < tests[i].min_ranks) {
      if (rank == 0) printf("skip %s (needs at least %d ranks, not %d)\n", tests[i].name, tests[i].min_ranks, world);
      fflush(stdout);
      counts->skipped++;
      continue;
    }
    char msg[1024] = "";
    mx_clear_error();
    mx_process_group *g = mx_dist_init(60);
    if (!g) {
      snprintf(msg, sizeof msg, "init: %s", mx_last_error());
    } else {
      mx_scope *s = mx_scope_begin();
      tests[i].fn(g, mx_dist_rank(g), mx_dist_world_size(g), msg, sizeof msg);
      mx_scope_end(s);
    }
    mx_dist_free(g);
    int mine = msg[0] != 0, any = 0;
    if (mine) fprintf(stderr, "[rank %d] %s: %s\n", rank, tests[i].name, msg);
    fflush(stderr);
    /* Nonblocking, so that a failed rank can stop waiting (MPI matches it
     * only with nonblocking all-reduces: every rank calls this one). */
    MPI_Request req;
    MPI_Iallreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &req);
    if (mine) wait_or_end_the_job(&req, tests[i].name, rank);
    else MPI_Wait(&req, MPI_STATUS_IGNORE);
    if (rank == 0) printf("%s %s\n", any ? "FAIL" : "ok  ", tests[i].name);
    fflush(stdout);
    any ? counts->failed++ : counts->passed++;
  }
}
