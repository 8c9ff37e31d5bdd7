/* The default thread count on a busy machine (kernels/cpu/contention.c):
 * the rule that halves it and tries the full count again, by hand-made
 * windows, and the whole path with busy programs started beside the test. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mixgrad.h>

#include "kernels/cpu/contention.h"
#include "kernels/cpu/parallel.h"
#include "mx_config.h"

#define SECOND 1000000000LL

Test(contention, a_quiet_machine_keeps_the_full_count) {
  mx__busy_state s = mx__busy_start(8);
  for (int i = 1; i <= 100; i++) mx__busy_update(&s, 0.05, i * MX_BUSY_WINDOW_NS);
  cr_expect_eq(s.now, 8);
  mx__busy_update(&s, MX_BUSY_WAITED_FRACTION, 101 * MX_BUSY_WINDOW_NS); /* at the line: not busy */
  cr_expect_eq(s.now, 8);
}

Test(contention, busy_windows_halve_the_count_down_to_one) {
  mx__busy_state s = mx__busy_start(8);
  mx__busy_update(&s, 0.5, 10 * SECOND);
  cr_expect_eq(s.now, 4);
  cr_expect_eq(s.hold_until_ns, 11 * SECOND); /* the first hold: 1 s */
  mx__busy_update(&s, 0.3, 10 * SECOND + MX_BUSY_WINDOW_NS);
  cr_expect_eq(s.now, 2);
  mx__busy_update(&s, 0.3, 10 * SECOND + 2 * MX_BUSY_WINDOW_NS);
  mx__busy_update(&s, 0.3, 10 * SECOND + 3 * MX_BUSY_WINDOW_NS);
  cr_expect_eq(s.now, 1);
  cr_expect_eq(s.hold_until_ns, 11 * SECOND + 3 * MX_BUSY_WINDOW_NS); /* held 1 s from the last busy window */
}

Test(contention, the_full_count_is_tried_again_after_the_hold) {
  mx__busy_state s = mx__busy_start(2);
  mx__busy_update(&s, 0.5, 10 * SECOND);
  mx__busy_update(&s, 0.0, 10 * SECOND + SECOND / 2); /* quiet, inside the hold */
  cr_expect_eq(s.now, 1);
  mx__busy_update(&s, 0.0, 11 * SECOND);
  cr_expect_eq(s.now, 2);
}

Test(contention, a_try_that_meets_a_busy_machine_holds_twice_as_long) {
  mx__busy_state s = mx__busy_start(2);
  int64_t t = 10 * SECOND, holds[6];
  for (int i = 0; i < 6; i++) {
    mx__busy_update(&s, 0.5, t); /* busy at the full count */
    cr_assert_eq(s.now, 1);
    holds[i] = s.hold_until_ns - t;
    t = s.hold_until_ns;
    mx__busy_update(&s, 0.0, t); /* the hold is over: try 2 */
    cr_assert_eq(s.now, 2);
  }
  const int64_t want[6] = {1 * SECOND, 2 * SECOND, 4 * SECOND, 8 * SECOND, 16 * SECOND, 16 * SECOND};
  for (int i = 0; i < 6; i++) cr_expect_eq(holds[i], want[i], "hold %d: %lld ns", i, (long long)holds[i]);
  mx__busy_update(&s, 0.0, t + MX_BUSY_WINDOW_NS); /* quiet at the full count: the spell is forgotten */
  mx__busy_update(&s, 0.5, t + 2 * MX_BUSY_WINDOW_NS);
  cr_expect_eq(s.hold_until_ns - (t + 2 * MX_BUSY_WINDOW_NS), 1 * SECOND);
}

/* --- the whole path, with busy programs beside the test ------------------------- */

/* One busy program per core, each in a session of its own (as programs
 * started from other terminals are: the scheduler shares the cores among
 * sessions); they end with the test, or after 20 s whatever happens. */
static int start_busy_programs(pid_t *pids, int max) {
  int cores = (int)sysconf(_SC_NPROCESSORS_ONLN), n = cores < max ? cores : max;
  for (int i = 0; i < n; i++) {
    if ((pids[i] = fork()) == 0) {
      setsid();
      alarm(20);
      for (volatile unsigned long spin = 0;; spin++) {}
    }
  }
  return n;
}

static void stop_busy_programs(const pid_t *pids, int n) {
  for (int i = 0; i < n; i++) {
    kill(pids[i], SIGKILL);
    waitpid(pids[i], NULL, 0);
  }
}

/* Parallel work for up to `seconds`, until the kernels' count drops below
 * `full`; the smallest count seen. */
enum { WORK = 4 * MX_PARALLEL_MIN_ELEMENTS };
static double work_out[WORK];

static int smallest_count_while_working(int full, double seconds) {
  int smallest = full;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    MX_PARALLEL_FOR(WORK)
    for (int64_t i = 0; i < WORK; i++) work_out[i] = (double)i * 0.5;
    int now = mx__cpu_threads();
    smallest = now < smallest ? now : smallest;
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while (smallest == full && (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec) < seconds);
  return smallest;
}

/* The default count (MX_NUM_THREADS, OMP_NUM_THREADS, OMP_WAIT_POLICY unset):
 * with every core busy beside it, the kernels use fewer threads within a
 * few windows, while mx_num_threads still says the default. */
Test(contention, the_default_count_shrinks_while_every_core_is_busy) {
  unsetenv("MX_NUM_THREADS"); /* the suite pins it; each test is a fresh process */
  if (getenv("OMP_NUM_THREADS") || getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
    cr_skip_test("OpenMP's count or waiting is set in the environment: the default does not adapt");
  int full = mx_num_threads();
  if (full < 2) cr_skip_test("one thread by default here: nothing to shrink");
  pid_t pids[64];
  int n = start_busy_programs(pids, 64);
  int smallest = smallest_count_while_working(full, 5.0);
  stop_busy_programs(pids, n);
  cr_expect_lt(smallest, full, "%d busy programs beside %d threads, and the count stayed %d", n, full, smallest);
  cr_expect_eq(mx_num_threads(), full);
}

/* A count the program set is kept, however busy the machine. */
Test(contention, a_count_set_is_kept_on_a_busy_machine) {
  cr_assert_eq(mx_set_num_threads(2), MX_OK);
  pid_t pids[64];
  int n = start_busy_programs(pids, 64);
  int smallest = smallest_count_while_working(2, 0.5);
  stop_busy_programs(pids, n);
  cr_expect_eq(smallest, MX_HAVE_OPENMP ? 2 : 1);
}
