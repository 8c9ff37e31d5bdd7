/* Walking one or two strided views of the same shape, row by row.
 *
 * Dimensions that are contiguous in every view are merged first, so a
 * contiguous tensor is one long row; the rows are shared among threads. */
#ifndef MX_KERNELS_CPU_STRIDED_H
#define MX_KERNELS_CPU_STRIDED_H

#include "kernels/base_internal.h"

/* One run of n elements: out advances by out_step bytes, in by in_step;
 * `first` is the linear (row-major) index of the run's first element. */
typedef struct {
  char *out;
  const char *in;
  int64_t out_step, in_step;
  int64_t n, first;
} mx__row;

typedef void (*mx__row_fn)(const mx__row *row, void *ctx);

/* Calls fn on every row of out (and of in, which has out's shape, or NULL). */
void mx__cpu_foreach_row(const mx_kview *out, const mx_kview *in, mx__row_fn fn, void *ctx);

#endif
