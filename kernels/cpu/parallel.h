/* OpenMP for the CPU kernels: loops go parallel only above a size where the
 * threads' start-up cost is paid back. Builds without OpenMP run serially. */
#ifndef MX_KERNELS_CPU_PARALLEL_H
#define MX_KERNELS_CPU_PARALLEL_H

/* Elements below which a loop runs on one thread. */
#define MX_PARALLEL_MIN_ELEMENTS 32768

/* The threads a loop may use now: mx_set_num_threads's count (kernels/cpu/
 * parallel.c), fewer while a busy machine shrinks the default one
 * (kernels/cpu/contention.c), 1 without OpenMP. */
int mx__cpu_threads(void);

#ifdef _OPENMP
#include <omp.h>
#define MX__PRAGMA(x) _Pragma(#x)
/* Put before a `for`: parallel when `work` (elements touched) is large. */
#define MX_PARALLEL_FOR(work) \
  MX__PRAGMA(omp parallel for schedule(static) num_threads(mx__cpu_threads()) if ((work) >= MX_PARALLEL_MIN_ELEMENTS))
/* Put before a statement every thread of a team of `threads` runs; inside
 * it, a thread is mx__cpu_thread_index() of mx__cpu_team_size(). */
#define MX_PARALLEL_REGION(threads) MX__PRAGMA(omp parallel num_threads(threads))
static inline int mx__cpu_thread_index(void) { return omp_get_thread_num(); }
static inline int mx__cpu_team_size(void) { return omp_get_num_threads(); }
/* The threads a parallel region started here would run on: one inside a
 * region already (nested regions are off). */
static inline int mx__cpu_threads_here(void) { return omp_in_parallel() ? 1 : mx__cpu_threads(); }
#else
#define MX_PARALLEL_FOR(work) (void)(work); /* used, as with OpenMP: no unused-variable warnings */
#define MX_PARALLEL_REGION(threads)
static inline int mx__cpu_thread_index(void) { return 0; }
static inline int mx__cpu_team_size(void) { return 1; }
static inline int mx__cpu_threads_here(void) { return 1; }
#endif

#endif
