/* How many threads the CPU kernels use: mx_set_num_threads, MX_NUM_THREADS
 * or OpenMP's default, read once; the default shrinks on a busy machine. */
#include "kernels/cpu/parallel.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/base_internal.h"
#include "kernels/cpu/contention.h"

#define MAX_THREADS 1024

static atomic_int configured; /* 0: not chosen yet */
/* Whether the count is OpenMP's default with libgomp's default waiting:
 * nobody chose the count or how threads wait, so mixgrad may use fewer
 * while other programs hold the cores (kernels/cpu/contention.c). */
static atomic_bool adapts;

#ifdef _OPENMP
/* MX_NUM_THREADS when it is a whole number in range, else 0 (unset) */
static int from_environment(void) {
  const char *env = getenv("MX_NUM_THREADS");
  if (!env || !*env) return 0;
  char *end;
  long n = strtol(env, &end, 10);
  return *end == '\0' && n >= 1 && n <= MAX_THREADS ? (int)n : 0;
}

static bool set(const char *name) { return getenv(name) && *getenv(name); }

/* The count chosen, reading the environment the first time. */
static int configured_threads(void) {
  int n = atomic_load_explicit(&configured, memory_order_relaxed);
  if (n) return n;
  int expected = 0;
  bool chosen = true;
  if (!(n = from_environment())) {
    n = omp_get_max_threads();
    chosen = set("OMP_NUM_THREADS") || set("OMP_WAIT_POLICY") || set("GOMP_SPINCOUNT");
  }
  if (atomic_compare_exchange_strong(&configured, &expected, n > 0 ? n : 1)) atomic_store(&adapts, !chosen);
  return atomic_load(&configured);
}

int mx__cpu_threads(void) {
  int n = configured_threads();
  return atomic_load_explicit(&adapts, memory_order_relaxed) ? mx__busy_threads(n) : n;
}
#else
static int configured_threads(void) { return 1; }
int mx__cpu_threads(void) { return 1; } /* no OpenMP: every loop runs on the calling thread */
#endif

mx_status mx_set_num_threads(int n) {
  if (n < 1 || n > MAX_THREADS)
    return mx__error(MX_INVALID_ARGUMENT, "mx_set_num_threads: n must be from 1 to %d, got %d", MAX_THREADS, n);
  atomic_store(&adapts, false); /* a count the program chose is kept, busy machine or not */
  atomic_store(&configured, n);
  return MX_OK;
}

int mx_num_threads(void) { return configured_threads(); }
