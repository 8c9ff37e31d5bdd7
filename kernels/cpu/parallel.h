/* OpenMP for the CPU kernels: loops go parallel only above a size where the
 * threads' start-up cost is paid back. Builds without OpenMP run serially. */
#ifndef MX_KERNELS_CPU_PARALLEL_H
#define MX_KERNELS_CPU_PARALLEL_H

/* Elements below which a loop runs on one thread. */
#define MX_PARALLEL_MIN_ELEMENTS 32768

#ifdef _OPENMP
#include <omp.h>
#define MX__PRAGMA(x) _Pragma(#x)
/* Put before a `for`: parallel when `work` (elements touched) is large. */
#define MX_PARALLEL_FOR(work) MX__PRAGMA(omp parallel for schedule(static) if ((work) >= MX_PARALLEL_MIN_ELEMENTS))
#else
#define MX_PARALLEL_FOR(work)
#endif

#endif
