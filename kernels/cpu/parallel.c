/* How many threads the CPU kernels use: mx_set_num_threads, MX_NUM_THREADS
 * or OpenMP's default, read once. */
#include "kernels/cpu/parallel.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/base_internal.h"

#define MAX_THREADS 1024

static atomic_int configured; /* 0: not chosen yet */

#ifdef _OPENMP
/* MX_NUM_THREADS when it is a whole number in range, else 0 (unset) */
static int from_environment(void) {
  const char *env = getenv("MX_NUM_THREADS");
  if (!env || !*env) return 0;
  char *end;
  long n = strtol(env, &end, 10);
  return *end == '\0' && n >= 1 && n <= MAX_THREADS ? (int)n : 0;
}

int mx__cpu_threads(void) {
  int n = atomic_load_explicit(&configured, memory_order_relaxed);
  if (n) return n;
  int expected = 0;
  if (!(n = from_environment())) n = omp_get_max_threads();
  atomic_compare_exchange_strong(&configured, &expected, n > 0 ? n : 1);
  return atomic_load(&configured);
}
#else
int mx__cpu_threads(void) { return 1; } /* no OpenMP: every loop runs on the calling thread */
#endif

mx_status mx_set_num_threads(int n) {
  if (n < 1 || n > MAX_THREADS)
    return mx__error(MX_INVALID_ARGUMENT, "mx_set_num_threads: n must be from 1 to %d, got %d", MAX_THREADS, n);
  atomic_store(&configured, n);
  return MX_OK;
}

int mx_num_threads(void) { return mx__cpu_threads(); }
