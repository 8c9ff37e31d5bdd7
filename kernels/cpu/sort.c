/* The sort along one dim on the CPU: the shared line sort (kernels/sort_line.h)
 * over every line, the lines split among the threads, each thread with its
 * own scratch for the line's permutation. */
#include <stdlib.h>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/sort.h"
#include "kernels/sort_line.h"

mx_status mx__cpu_sort(const mx_kview *values, const mx_kview *indices, const mx_kview *in, int dim, bool descending) {
  int64_t lines = mx_scan_lines(in, dim), len = in->shape[dim];
  if (lines == 0) return MX_OK;
  int threads = mx__cpu_threads_here();
  int64_t *scratch = malloc(sizeof(int64_t) * 2 * (size_t)len * (size_t)threads);
  if (!scratch)
    return mx__error(MX_OUT_OF_MEMORY, "mx_sort: out of memory for the scratch of %d lines of %lld", threads,
                     (long long)len);
  int64_t elem_size = (int64_t)mx_dtype_size(in->dtype);
  MX_PARALLEL_FOR(lines * len)
  for (int64_t line = 0; line < lines; line++) {
    int64_t *mine = scratch + 2 * len * mx__cpu_thread_index();
    mx_sort_line(values, indices, in, elem_size, dim, descending, line, mine, mine + len);
  }
  free(scratch);
  return MX_OK;
}
