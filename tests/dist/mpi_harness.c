/* The runner of the dist tests that run as MPI ranks (see mpi_harness.h). */
#include "mpi_harness.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

int mpi_test_quick(void) {
  const char *q = getenv("MX_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0;
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
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf("%s %s\n", any ? "FAIL" : "ok  ", tests[i].name);
    fflush(stdout);
    any ? counts->failed++ : counts->passed++;
  }
}
