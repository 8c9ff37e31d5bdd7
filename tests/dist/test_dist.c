/* The process group in one process (Criterion): a world of one without any
 * launcher, its arguments and the launchers' environment, the "built
 * without MPI" error; and, with MPI, whole jobs started by mpirun as child
 * processes: a rank that dies or stops ends the job, and ranks that
 * scripts/launch started listen on no TCP port (the many-rank cases
 * themselves are mpi_main.c's, run by meson under mpirun). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixgrad.h"
#include "tests/common/child_run.h"
#include "tests/common/expect_error.h"
#include "tests/common/tmp_files.h"

#ifdef MX_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

/* The launchers' variables mx_dist_init reads, cleared for a test. */
static void no_launcher(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "WORLD_SIZE", "PMIX_RANK",
                        "MX_DIST_TIMEOUT"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
}

Test(dist, a_world_of_one_needs_no_launcher) {
  no_launcher();
  mx_process_group *g = mx_dist_init(0);
  cr_assert_not_null(g, "%s", mx_last_error());
  cr_expect_eq(mx_dist_rank(g), 0);
  cr_expect_eq(mx_dist_world_size(g), 1);
  cr_expect_eq(mx_dist_local_rank(g), 0);
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_from_data((float[]){1.5f, -2, 3}, MX_SHAPE(3), MX_F32, MX_CPU);
  cr_assert_eq(mx_dist_all_reduce(g, t, MX_DIST_SUM), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_dist_all_reduce(g, t, MX_DIST_AVG), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_dist_broadcast(g, t, 0), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_dist_barrier(g), MX_OK, "%s", mx_last_error());
  mx_dist_work *w = mx_dist_all_reduce_async(g, t, MX_DIST_MAX);
  cr_assert_not_null(w, "%s", mx_last_error());
  cr_assert_eq(mx_dist_wait(w), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_at(t, MX_SHAPE(0)), 1.5);
  cr_expect_eq(mx_at(t, MX_SHAPE(1)), -2);
  cr_expect_eq(mx_at(t, MX_SHAPE(2)), 3);
  EXPECT_STATUS_ERROR(mx_dist_broadcast(g, t, 1), "mx_dist_broadcast: root 1 is not in [0, 1)");
  mx_tensor *flags = mx_ones(MX_SHAPE(2), MX_BOOL, MX_CPU), *ints = mx_ones(MX_SHAPE(2), MX_I64, MX_CPU);
  EXPECT_STATUS_ERROR(mx_dist_all_reduce(g, flags, MX_DIST_SUM), "mx_dist_all_reduce: cannot sum bool tensors");
  EXPECT_STATUS_ERROR(mx_dist_all_reduce(g, ints, MX_DIST_AVG), "mx_dist_all_reduce: cannot average int64 tensors");
  EXPECT_STATUS_ERROR(mx_dist_all_reduce(g, flags, MX_DIST_MAX),
                      "mx_dist_all_reduce: cannot take the maximum of bool tensors");
  EXPECT_STATUS_ERROR(mx_dist_all_reduce(g, ints, (mx_dist_reduce_op)4), "mx_dist_all_reduce: unknown reduce op 4");
  EXPECT_STATUS_ERROR(mx_dist_all_reduce(NULL, ints, MX_DIST_SUM), "mx_dist_all_reduce: argument 'group' is NULL");
  EXPECT_ERROR(mx_dist_all_reduce_async(g, flags, MX_DIST_SUM), "mx_dist_all_reduce_async: cannot sum bool tensors");
  EXPECT_STATUS_ERROR(mx_dist_wait(NULL), "mx_dist_wait: argument 'w' is NULL");
  mx_tensor *stacked = mx_dist_all_gather(g, t);
  cr_assert_not_null(stacked, "%s", mx_last_error());
  cr_expect_eq(mx_ndim(stacked), 2);
  cr_expect_eq(mx_size(stacked, 0), 1);
  cr_expect_eq(mx_at(stacked, MX_SHAPE(0, 2)), 3);
  EXPECT_ERROR(mx_dist_all_gather(g, mx_zeros(MX_SHAPE(1, 1, 1, 1, 1, 1, 1, 1), MX_F32, MX_CPU)),
               "mx_dist_all_gather: t has 8 dims, and the result would need one more (at most 8)");
  mx_tensor *mine = mx_dist_reduce_scatter(g, mx_reshape(t, MX_SHAPE(1, 3)), MX_DIST_SUM);
  cr_assert_not_null(mine, "%s", mx_last_error());
  cr_expect_eq(mx_ndim(mine), 1);
  cr_expect_eq(mx_at(mine, MX_SHAPE(2)), 3);
  EXPECT_ERROR(mx_dist_reduce_scatter(g, t, MX_DIST_SUM),
               "mx_dist_reduce_scatter: t's first dim must be the world size 1, but t has 1 dims and that dim is "
               "another size");
  mx_scope_end(s);
  mx_dist_free(g);
}

Test(dist, init_rejects_bad_timeouts) {
  no_launcher();
  EXPECT_ERROR(mx_dist_init(-1), "mx_dist_init: timeout -1 s is not in [0, 1e6]");
  EXPECT_ERROR(mx_dist_init(NAN), "mx_dist_init: timeout nan s is not in [0, 1e6]");
  setenv("MX_DIST_TIMEOUT", "soon", 1);
  EXPECT_ERROR(mx_dist_init(0), "mx_dist_init: MX_DIST_TIMEOUT='soon' is not a number of seconds in (0, 1e6]");
  setenv("MX_DIST_TIMEOUT", "0", 1);
  EXPECT_ERROR(mx_dist_init(0), "mx_dist_init: MX_DIST_TIMEOUT='0' is not a number of seconds in (0, 1e6]");
  mx_process_group *g = mx_dist_init(5); /* the argument wins over the variable */
  cr_expect_not_null(g, "%s", mx_last_error());
  mx_dist_free(g);
  setenv("MX_DIST_TIMEOUT", "2.5", 1);
  g = mx_dist_init(0);
  cr_expect_not_null(g, "%s", mx_last_error());
  mx_dist_free(g);
}

/* torchrun's variables name several ranks, but no MPI launcher started
 * this process: with MPI, an error saying how to start the ranks; without,
 * the "built without MPI" error. */
Test(dist, torchrun_variables_are_not_a_launch) {
  no_launcher();
  setenv("WORLD_SIZE", "2", 1);
  if (mx_dist_mpi_built())
    EXPECT_ERROR(mx_dist_init(0), "mx_dist_init: WORLD_SIZE=2 says 2 ranks, but no MPI launcher started this "
                                  "process; mixgrad's ranks meet through MPI: start them with scripts/launch or "
                                  "mpirun");
  else
    EXPECT_ERROR(mx_dist_init(0), "mx_dist_init: WORLD_SIZE=2 says a launcher started several ranks, but this "
                                  "mixgrad was built without MPI (configure it with -Dmpi=enabled; Debian: "
                                  "libopenmpi-dev)");
  setenv("WORLD_SIZE", "1", 1); /* a world of one, launched or not */
  mx_process_group *g = mx_dist_init(0);
  cr_expect_not_null(g, "%s", mx_last_error());
  mx_dist_free(g);
}

/* Only a build without MPI can be told it was started as several ranks
 * without starting MPI for real. */
Test(dist, a_build_without_mpi_started_as_several_ranks_says_so) {
  if (mx_dist_mpi_built()) cr_skip_test("built with MPI: mpi_main.c runs the launched ranks");
  no_launcher();
  setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  mx_clear_error();
  cr_expect_null(mx_dist_init(0));
  cr_expect_eq(mx_last_status(), MX_NOT_BUILT);
  cr_expect_str_eq(mx_last_error(), "mx_dist_init: OMPI_COMM_WORLD_SIZE=3 says a launcher started several ranks, but "
                                    "this mixgrad was built without MPI (configure it with -Dmpi=enabled; Debian: "
                                    "libopenmpi-dev)");
  no_launcher();
  setenv("SLURM_STEP_NUM_TASKS", "4", 1);
  EXPECT_ERROR(mx_dist_init(0), "mx_dist_init: SLURM_STEP_NUM_TASKS=4 says a launcher started several ranks, but "
                                "this mixgrad was built without MPI (configure it with -Dmpi=enabled; Debian: "
                                "libopenmpi-dev)");
  no_launcher();
  setenv("PMI_SIZE", "1", 1); /* one rank: fine */
  mx_process_group *g = mx_dist_init(0);
  cr_expect_not_null(g, "%s", mx_last_error());
  mx_dist_free(g);
}

/* --- whole jobs under mpirun ------------------------------------------------------- */

TestSuite(dist_jobs, .init = make_tmp_dir, .fini = remove_tmp_dir);

/* mpirun -np 2 of mpi_main.c's scenario; skips without MPI. */
static child_run job(const char *which, double limit) {
  const char *mpirun = getenv("MX_MPIRUN"), *ranks = getenv("MX_MPI_RANKS");
  if (!mpirun || !*mpirun || !ranks || !*ranks) {
    remove_tmp_dir();
    cr_skip_test("built without MPI: no job to start");
  }
  const char *argv[] = {mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none", ranks, "--scenario", which, NULL};
  return child_run_argv(argv, limit);
}

/* Rank 1 dies: mpirun notices and ends rank 0, which waits in a sum, in
 * seconds (not after the 600 s timeout). */
Test(dist_jobs, a_killed_rank_ends_the_job_within_seconds) {
  setenv("MX_DIST_TIMEOUT", "600", 1);
  double limit = RUNNING_ON_VALGRIND ? 120 : 30;
  child_run r = job("kill", limit);
  cr_expect_neq(r.status, 0, "the job succeeded:\n%s", r.err);
  cr_expect(r.seconds < (RUNNING_ON_VALGRIND ? 60 : 15), "the job took %.1f s (limit %g s)", r.seconds, limit);
  cr_expect(strstr(r.err, "exited on signal 9 (Killed)"), "stderr:\n%s", r.err);
  cr_expect(!strstr(r.err, "the sum after rank 1 left returned"), "rank 0's sum returned:\n%s", r.err);
  child_run_free(&r);
}

/* Rank 1 stops: alive but silent, which mpirun cannot see. Rank 0's
 * watchdog names the pending collective after the 2 s timeout and ends
 * the job. */
Test(dist_jobs, a_stopped_rank_ends_the_job_after_the_timeout) {
  setenv("MX_DIST_TIMEOUT", "2", 1);
  double limit = RUNNING_ON_VALGRIND ? 120 : 30;
  child_run r = job("stop", limit);
  cr_expect_neq(r.status, 0, "the job succeeded:\n%s", r.err);
  cr_expect_neq(r.status, 137, "the job ran past %g s and was killed:\n%s", limit, r.err);
  cr_expect(r.seconds >= 2 && r.seconds < (RUNNING_ON_VALGRIND ? 60 : 15), "the job took %.1f s", r.seconds);
  cr_expect(strstr(r.err, "mixgrad: rank 0 of 2: collective #1, all_reduce(sum) on 8 float32 elements, has waited "),
            "stderr:\n%s", r.err);
  cr_expect(strstr(r.err, "past the process group's timeout of 2 s (a rank died, stopped or calls something else); "
                          "ending the job with MPI_Abort"),
            "stderr:\n%s", r.err);
  child_run_free(&r);
}

/* scripts/launch on one machine: the ranks talk through shared memory and
 * listen on no TCP port (Open MPI's TCP transport would listen on every
 * interface, and a connection that never finishes its handshake stalls
 * the rank that accepted it: scripts/launch says more). */
Test(dist_jobs, ranks_under_the_launcher_listen_on_no_tcp_port) {
  const char *launch = getenv("MX_LAUNCH"), *ranks = getenv("MX_MPI_RANKS");
  if (!launch || !*launch || !ranks || !*ranks) {
    remove_tmp_dir();
    cr_skip_test("built without MPI: no job to start");
  }
  unsetenv("OMPI_MCA_btl"); /* the launcher's choice, not the caller's */
  const char *argv[] = {launch, "2", ranks, "--scenario", "ports", NULL};
  child_run r = child_run_argv(argv, RUNNING_ON_VALGRIND ? 120 : 30);
  cr_expect_eq(r.status, 0, "stderr:\n%s", r.err);
  cr_expect(strstr(r.out, "rank 0: 0 listening TCP sockets\n"), "stdout:\n%s\nstderr:\n%s", r.out, r.err);
  cr_expect(strstr(r.out, "rank 1: 0 listening TCP sockets\n"), "stdout:\n%s\nstderr:\n%s", r.out, r.err);
  child_run_free(&r);
}
