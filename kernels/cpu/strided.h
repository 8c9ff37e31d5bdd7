/* Walking up to four strided views of one shape, row by row.
 *
 * The dims are walked in memory order (the output's strides decide, as in
 * PyTorch's TensorIterator), and those contiguous in every view are merged,
 * so tensors of one dense layout, row-major or channels-last, are one long
 * row; the rows are shared among threads. View 0 is the output; broadcast
 * inputs carry stride 0. */
#ifndef MX_KERNELS_CPU_STRIDED_H
#define MX_KERNELS_CPU_STRIDED_H

#include "kernels/base_internal.h"

#define MX__MAX_OPERANDS 4

/* One run of n elements: operand k starts at ptr[k] and advances step[k]
 * bytes; `first` is the linear (row-major) index of the run's first element
 * in the walks that go in row-major order (mx__cpu_foreach_row_indexed),
 * -1 in the others. */
typedef struct {
  char *ptr[MX__MAX_OPERANDS];
  int64_t step[MX__MAX_OPERANDS];
  int64_t n, first;
} mx__row;

typedef void (*mx__row_fn)(const mx__row *row, void *ctx);

/* Calls fn on every row of the n views (views[0]'s shape; the others have it
 * too). */
void mx__cpu_foreach(int n, const mx_kview *const *views, mx__row_fn fn, void *ctx);

/* The common cases: out alone, and out with one input of its shape. */
void mx__cpu_foreach_row(const mx_kview *out, const mx_kview *in, mx__row_fn fn, void *ctx);
/* The same in row-major order, each row's `first` set: for the kernels that
 * number the elements (random draws, an optimizer's state) the same in
 * every layout. */
void mx__cpu_foreach_row_indexed(const mx_kview *out, const mx_kview *in, mx__row_fn fn, void *ctx);

/* The length of the tasks mx__cpu_foreach cuts a single row of row_len
 * elements into for `threads` threads: the whole row when it is short. */
int64_t mx__cpu_row_chunk(int64_t row_len, int threads);

#endif
