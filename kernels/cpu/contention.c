/* The CPU kernels' default thread count on a busy machine.
 *
 * Why: while OpenMP's threads wait for work or at a barrier, libgomp keeps
 * them spinning for a while (OMP_WAIT_POLICY unset). When other programs
 * hold cores, a team of one thread per core then spends its share of the
 * machine spinning for a member the system has paused: on 2 cores with one
 * busy program beside it, a 0.6 ms MLP step took 80 ms, and OMP_WAIT_POLICY
 * =passive, which avoids that, made steps 1.5-2.6x slower on an idle machine
 * (bench/contention.md). libgomp reads its wait policy once, at start-up; the team
 * size is what a library can still choose.
 *
 * How: every window (50 ms of the asking thread's clock), the thread reads
 * how long it waited for a core since the window began, the scheduler's
 * run-queue delay (/proc/thread-self/schedstat). Waiting more than a fifth
 * of the window means more runnable threads than cores: the count halves,
 * and is kept for a hold before the full count is tried again. A try that
 * meets a busy machine again doubles the next hold (1 s to 16 s), so a long
 * busy spell costs one short slow window now and then. */
#include "kernels/cpu/contention.h"

#include <stdatomic.h>

mx__busy_state mx__busy_start(int full) {
  return (mx__busy_state){.full = full, .now = full, .hold_ns = MX_BUSY_FIRST_HOLD_NS};
}

void mx__busy_update(mx__busy_state *s, double waited_fraction, int64_t now_ns) {
  if (waited_fraction > MX_BUSY_WAITED_FRACTION) {
    if (s->now == s->full) { /* busy at the full count: the first sign, or a try that failed */
      s->hold_until_ns = now_ns + s->hold_ns;
      s->hold_ns = s->hold_ns * 2 < MX_BUSY_LAST_HOLD_NS ? s->hold_ns * 2 : MX_BUSY_LAST_HOLD_NS;
    } else { /* still busy with fewer: hold on, at the hold already reached */
      s->hold_until_ns = now_ns + s->hold_ns / 2;
    }
    s->now = s->now > 1 ? s->now / 2 : 1;
  } else if (s->now < s->full) {
    if (now_ns >= s->hold_until_ns) s->now = s->full; /* try the full count again */
  } else {
    s->hold_ns = MX_BUSY_FIRST_HOLD_NS; /* a quiet window at the full count: forget the busy spell */
  }
}

#ifdef __linux__
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static mx__busy_state state;   /* under lock */
static atomic_int threads_now; /* state.now, read without the lock; 0: no window yet */
static atomic_bool unreadable; /* the system does not say how long threads wait */

/* This thread's window: when it began, and the thread's run-queue delay then. */
static _Thread_local struct {
  int64_t start_ns, waited_ns;
} window = {-1, 0};

/* A clock that costs a few nanoseconds (no system call); its ticks of a
 * few milliseconds are fine for windows of 50. */
static int64_t coarse_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The calling thread's total wait for a core in ns, or -1. schedstat holds
 * "<ns on a core> <ns runnable, waiting for one> <timeslices>". */
static int64_t waited_for_a_core_ns(void) {
  char text[96];
  int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return -1;
  text[n] = '\0';
  unsigned long long ran, waited;
  return sscanf(text, "%llu %llu", &ran, &waited) == 2 ? (int64_t)waited : -1;
}

int mx__busy_threads(int full) {
  int now = atomic_load_explicit(&threads_now, memory_order_relaxed);
  if (full <= 1 || atomic_load_explicit(&unreadable, memory_order_relaxed)) return full;
  int64_t t = coarse_now_ns();
  if (window.start_ns >= 0 && t - window.start_ns < MX_BUSY_WINDOW_NS && now) return now;
  int64_t waited = waited_for_a_core_ns();
  if (waited < 0) {
    atomic_store(&unreadable, true);
    return full;
  }
  pthread_mutex_lock(&lock);
  if (state.full != full) state = mx__busy_start(full); /* the first window, or a new count set */
  if (window.start_ns >= 0 && t > window.start_ns)
    mx__busy_update(&state, (double)(waited - window.waited_ns) / (double)(t - window.start_ns), t);
  now = state.now;
  atomic_store_explicit(&threads_now, now, memory_order_relaxed);
  pthread_mutex_unlock(&lock);
  window.start_ns = t, window.waited_ns = waited;
  return now;
}
#else
int mx__busy_threads(int full) { return full; }
#endif
