/* mx_set_num_threads: the count the CPU kernels' loops and oneDNN use, its
 * default from MX_NUM_THREADS or OpenMP, and its errors. Each Criterion
 * test is a fresh process, so each sees the count unchosen. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include <mixgrad.h>

#include "../common/expect_error.h"
#include "kernels/cpu/parallel.h"
#include "mx_config.h"

/* The largest team a parallel loop of the kernels' kind ran with. */
static int loop_team(void) {
  atomic_int most = 0;
  int64_t work = 4 * MX_PARALLEL_MIN_ELEMENTS;
  MX_PARALLEL_FOR(work)
  for (int64_t i = 0; i < work; i++) {
    int team = mx__cpu_team_size(), seen = atomic_load(&most);
    while (team > seen && !atomic_compare_exchange_weak(&most, &seen, team)) {}
  }
  return atomic_load(&most);
}

Test(threads, the_count_set_is_the_loops_team) {
  cr_assert_eq(mx_set_num_threads(1), MX_OK);
  cr_expect_eq(mx_num_threads(), 1);
  cr_expect_eq(loop_team(), 1);
  cr_assert_eq(mx_set_num_threads(2), MX_OK);
  cr_expect_eq(mx_num_threads(), MX_HAVE_OPENMP ? 2 : 1);
  cr_expect_eq(loop_team(), MX_HAVE_OPENMP ? 2 : 1);
}

static void *team_in_a_new_thread(void *out) {
  *(int *)out = loop_team();
  return NULL;
}

/* OpenMP's own setting is per thread; mixgrad's count holds in threads the
 * program starts later (a data loader, a server's workers). */
Test(threads, the_count_holds_in_other_threads) {
  cr_assert_eq(mx_set_num_threads(2), MX_OK);
  int team = 0;
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, team_in_a_new_thread, &team), 0);
  pthread_join(th, NULL);
  cr_expect_eq(team, MX_HAVE_OPENMP ? 2 : 1);
}

Test(threads, the_default_comes_from_MX_NUM_THREADS) {
  setenv("MX_NUM_THREADS", "3", 1);
  cr_expect_eq(mx_num_threads(), MX_HAVE_OPENMP ? 3 : 1);
}

#ifdef _OPENMP
Test(threads, without_MX_NUM_THREADS_openmp_decides) {
  setenv("MX_NUM_THREADS", "many", 1); /* not a count: ignored */
  omp_set_num_threads(3);
  cr_expect_eq(mx_num_threads(), 3);
}

/* oneDNN runs its primitives on OpenMP teams the calling thread's setting
 * sizes: a matmul leaves that setting at mixgrad's count. */
Test(threads, onednn_gets_the_count) {
  omp_set_num_threads(2);
  cr_assert_eq(mx_set_num_threads(1), MX_OK);
  mx_scope *scope = mx_scope_begin();
  mx_tensor *a = mx_ones(MX_SHAPE(64, 64), MX_F32, MX_CPU);
  mx_tensor *y = mx_mm(a, a);
  cr_assert(y, "%s", mx_last_error());
  cr_expect_eq(mx_item(mx_sum(y, MX_ALL_DIMS, false)), 64.0 * 64 * 64);
  if (MX_HAVE_DNNL) cr_expect_eq(omp_get_max_threads(), 1);
  mx_scope_end(scope);
}
#endif

Test(threads, a_count_out_of_range_is_refused) {
  cr_assert_eq(mx_set_num_threads(2), MX_OK);
  EXPECT_STATUS_ERROR(mx_set_num_threads(0), "mx_set_num_threads: n must be from 1 to 1024, got 0");
  EXPECT_STATUS_ERROR(mx_set_num_threads(1025), "mx_set_num_threads: n must be from 1 to 1024, got 1025");
  cr_expect_eq(mx_num_threads(), MX_HAVE_OPENMP ? 2 : 1); /* unchanged */
}
