/* Asynchronous all-reduces over the ranks mpirun started: starting one
 * does not wait for the other ranks, a call that differs between the ranks
 * still fails naming both (at the wait, before any tensor moves), and a
 * rank may wait at once for what another starts asynchronously. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "mpi_tests.h"

/* Every rank but 0 starts its all-reduce and only then tells rank 0, which
 * starts its own once all have told it: a start that waited for the other
 * ranks would never return (the watchdog would end the job after 60 s). */
static void starting_does_not_wait(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  mx_dist_work *w = NULL;
  mx_tensor *t = mx_full(MX_SHAPE(1000), rank + 1, MX_F32, MX_CPU);
  int started = 1;
  if (rank != 0) {
    w = mx_dist_all_reduce_async(g, t, MX_DIST_SUM);
    CHECK(w, "start: %s", mx_last_error());
    MPI_Send(&started, 1, MPI_INT, 0, 35, MPI_COMM_WORLD);
  } else {
    for (int r = 1; r < world; r++) MPI_Recv(&started, 1, MPI_INT, r, 35, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    w = mx_dist_all_reduce_async(g, t, MX_DIST_SUM);
    CHECK(w, "start: %s", mx_last_error());
  }
  mx_status st = mx_dist_wait(w);
  w = NULL;
  CHECK(st == MX_OK, "wait: %s", mx_last_error());
  for (int64_t i = 0; i < 1000; i += 333)
    CHECK(mx_at(t, MX_SHAPE(i)) == world * (world + 1) / 2.0, "element %lld is %g", (long long)i,
          mx_at(t, MX_SHAPE(i)));
done:
  if (w) mx_dist_wait(w);
}

/* Rank 1 sums 5 floats (or broadcasts 4) where the others sum 4, each
 * asynchronously (rank 1's broadcast at once), then all start a second sum
 * that agrees: the first fails naming both calls, the second because the
 * first broke the group (at its start, when this rank has already seen
 * the first's agreement, else at its wait, even when waited first); no
 * tensor moved, and no rank is left waiting for another's second start:
 * rank 1 broadcasts only once rank 0 has started both, so rank 0 has posted
 * an agreement that rank 1, broken at once, never posts (the group's drain
 * must end it). 2 ranks or more. */
static void mismatched_asynchronous(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  (void)g, (void)world;
  for (int broadcast_on_1 = 0; broadcast_on_1 < 2; broadcast_on_1++) {
    mx_process_group *h = mx_dist_init(60);
    mx_dist_work *first = NULL, *second = NULL;
    CHECK(h, "init: %s", mx_last_error());
    mx_tensor *t = mx_full(MX_SHAPE(rank == 1 && !broadcast_on_1 ? 5 : 4), rank + 1, MX_F32, MX_CPU);
    mx_tensor *u = mx_full(MX_SHAPE(3), rank + 1, MX_F32, MX_CPU);
    char want[512], first_error[512] = "", second_error[512] = "", second_op[32] = "mx_dist_wait";
    mx_status first_st = MX_OK, second_st = MX_OK;
    if (rank == 1 && broadcast_on_1) {
      int both_started;
      MPI_Recv(&both_started, 1, MPI_INT, 0, 36, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      first_st = mx_dist_broadcast(h, t, 0);
      snprintf(first_error, sizeof first_error, "%s", mx_last_error());
    } else {
      first = mx_dist_all_reduce_async(h, t, MX_DIST_SUM);
      second = first ? mx_dist_all_reduce_async(h, u, MX_DIST_SUM) : NULL;
      if (rank == 0 && broadcast_on_1) MPI_Send(&rank, 1, MPI_INT, 1, 36, MPI_COMM_WORLD);
      CHECK(first, "the first start: %s", mx_last_error());
      if (!second) snprintf(second_op, sizeof second_op, "mx_dist_all_reduce_async");
      second_st = second ? mx_dist_wait(second) : mx_last_status(); /* the second first */
      snprintf(second_error, sizeof second_error, "%s", mx_last_error());
      second = NULL;
      first_st = mx_dist_wait(first);
      first = NULL;
      snprintf(first_error, sizeof first_error, "%s", mx_last_error());
    }
    bool barrier_refused = mx_dist_barrier(h) == MX_STATE_ERROR &&
                           strstr(mx_last_error(), "mx_dist_barrier: the process group failed earlier (");
    CHECK(first_st == MX_INVALID_ARGUMENT, "status %d: %s", first_st, first_error);
    const char *theirs = broadcast_on_1 ? "broadcast on 4 float32 elements from root 0"
                                        : "all_reduce(sum) on 5 float32 elements";
    if (rank == 1)
      snprintf(want, sizeof want, "%s: rank 1 calls %s, but rank 0 calls all_reduce(sum) on 4 float32 elements "
               "(collective #0)", broadcast_on_1 ? "mx_dist_broadcast" : "mx_dist_wait", theirs);
    else
      snprintf(want, sizeof want, "mx_dist_wait: rank %d calls all_reduce(sum) on 4 float32 elements, but rank 1 "
               "calls %s (collective #0)", rank, theirs);
    CHECK(!strcmp(first_error, want), "the error is '%s', not '%s'", first_error, want);
    if (!(rank == 1 && broadcast_on_1)) {
      char failed_earlier[600];
      snprintf(failed_earlier, sizeof failed_earlier, "%s: the process group failed earlier (%s)", second_op, want);
      CHECK(second_st == MX_STATE_ERROR && !strcmp(second_error, failed_earlier),
            "the second wait: status %d, '%s'", second_st, second_error);
    }
    CHECK(barrier_refused, "a broken group took a barrier");
    CHECK(mx_at(t, MX_SHAPE(3)) == rank + 1 && mx_at(u, MX_SHAPE(2)) == rank + 1, "a tensor moved: %g, %g",
          mx_at(t, MX_SHAPE(3)), mx_at(u, MX_SHAPE(2)));
  done:
    if (first) mx_dist_wait(first);
    if (second) mx_dist_wait(second);
    mx_dist_free(h);
    if (msg[0]) break;
  }
}

/* Rank 0 waits at once where the others start and wait, small and large
 * (MPI matches a blocking collective with a blocking one only); and a
 * blocking sum between an asynchronous start and its wait, on every rank. */
static void waited_at_once_and_asynchronous(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  const int64_t sizes[] = {1, 7, mpi_test_quick() ? 30001 : 300001}; /* 1: fewer elements than ranks */
  for (int k = 0; k < 3; k++) {
    mx_tensor *t = mx_full(MX_SHAPE(sizes[k]), rank + 1, MX_F32, MX_CPU);
    if (rank == 0) {
      CHECK(mx_dist_all_reduce(g, t, MX_DIST_SUM) == MX_OK, "at once: %s", mx_last_error());
    } else {
      mx_dist_work *w = mx_dist_all_reduce_async(g, t, MX_DIST_SUM);
      CHECK(w && mx_dist_wait(w) == MX_OK, "asynchronous: %s", mx_last_error());
    }
    CHECK(mx_at(t, MX_SHAPE(sizes[k] - 1)) == world * (world + 1) / 2.0, "n=%lld: the sum is %g",
          (long long)sizes[k], mx_at(t, MX_SHAPE(sizes[k] - 1)));
  }
  mx_tensor *a = mx_full(MX_SHAPE(5), rank + 1, MX_F64, MX_CPU), *b = mx_full(MX_SHAPE(6), rank + 1, MX_I64, MX_CPU);
  mx_dist_work *w = mx_dist_all_reduce_async(g, a, MX_DIST_MAX);
  CHECK(w, "start: %s", mx_last_error());
  mx_status between = mx_dist_all_reduce(g, b, MX_DIST_SUM);
  mx_status waited = mx_dist_wait(w);
  CHECK(between == MX_OK && waited == MX_OK, "%s", mx_last_error());
  CHECK(mx_at(a, MX_SHAPE(4)) == world && mx_at(b, MX_SHAPE(5)) == world * (world + 1) / 2.0, "max %g, sum %g",
        mx_at(a, MX_SHAPE(4)), mx_at(b, MX_SHAPE(5)));
done:;
}

const mpi_test async_tests[] = {
    {"an asynchronous all-reduce starts without waiting for the other ranks", starting_does_not_wait, 1},
    {"an asynchronous all-reduce that differs fails at its wait naming both", mismatched_asynchronous, 2},
    {"a rank may wait at once for what another starts asynchronously", waited_at_once_and_asynchronous, 1},
};
const int n_async_tests = sizeof async_tests / sizeof *async_tests;
