/* How mx__cpu_foreach (kernels/cpu/strided.c) cuts a single long row into
 * tasks for its threads: shares that a static schedule makes equal, and
 * every element visited once, at its own offset. */
#include <criterion/criterion.h>
#include <omp.h>
#include <stdlib.h>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/strided.h"

/* The elements the busiest thread gets when `tasks` tasks of `chunk`
 * elements (the last one shorter) are shared out as OpenMP's static
 * schedule does: contiguous runs of tasks, the first threads one more. */
static int64_t busiest_share(int64_t row_len, int64_t chunk, int threads) {
  int64_t tasks = (row_len + chunk - 1) / chunk;
  int64_t most = (tasks + threads - 1) / threads * chunk;
  return most < row_len ? most : row_len;
}

Test(strided, a_long_row_is_shared_evenly) {
  /* the MLP's first weight: 13 chunks of the minimum gave two threads 7
   * and 6; 14 of 28672 give them 7 each */
  cr_expect_eq(mx__cpu_row_chunk(512 * 784, 2), 28672);
  for (int threads = 2; threads <= 4; threads++)
    for (int64_t row_len = 2 * MX_PARALLEL_MIN_ELEMENTS; row_len <= 4 << 20; row_len += 4093) {
      int64_t chunk = mx__cpu_row_chunk(row_len, threads);
      int64_t even = (row_len + threads - 1) / threads, tasks = (row_len + chunk - 1) / chunk;
      cr_assert_eq(chunk % 16, 0, "row of %lld, %d threads: chunk %lld is not whole vectors", (long long)row_len,
                   threads, (long long)chunk);
      cr_assert_geq(chunk, MX_PARALLEL_MIN_ELEMENTS / 2, "row of %lld, %d threads: chunk %lld",
                    (long long)row_len, threads, (long long)chunk);
      /* beyond the even share, only the rounding of each task to 16 */
      cr_assert_leq(busiest_share(row_len, chunk, threads), even + 16 * (tasks / threads + 1),
                    "row of %lld, %d threads: chunks of %lld give one thread %lld, an even share is %lld",
                    (long long)row_len, threads, (long long)chunk,
                    (long long)busiest_share(row_len, chunk, threads), (long long)even);
    }
}

Test(strided, short_rows_and_one_thread_stay_whole) {
  cr_expect_eq(mx__cpu_row_chunk(2 * MX_PARALLEL_MIN_ELEMENTS - 1, 2), 2 * MX_PARALLEL_MIN_ELEMENTS - 1);
  cr_expect_eq(mx__cpu_row_chunk(1 << 22, 1), 1 << 22);
}

/* Each task writes, into every element it is given, that element's offset
 * in the row (row.first counts from the row's start). */
static void write_offsets(const mx__row *row, void *ctx) {
  (void)ctx;
  for (int64_t i = 0; i < row->n; i++) {
    int32_t *x = (int32_t *)(row->ptr[0] + i * row->step[0]);
    *x += (int32_t)(row->first + i) + 1; /* += : an element visited twice shows */
  }
}

Test(strided, foreach_visits_each_element_of_a_long_row_once) {
  cr_assert_eq(mx_set_num_threads(2), MX_OK);
  int64_t lengths[] = {2 * MX_PARALLEL_MIN_ELEMENTS, 512 * 784, 512 * 784 + 5, 3 * 131072 + 17};
  for (size_t l = 0; l < sizeof lengths / sizeof *lengths; l++) {
    int64_t n = lengths[l];
    int32_t *x = calloc((size_t)n, sizeof *x);
    cr_assert(x);
    mx_kview v = {.data = x, .dtype = MX_I32, .ndim = 1, .shape = {n}, .strides = {1}};
    mx__cpu_foreach_row(&v, NULL, write_offsets, NULL);
    int64_t wrong = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
      if (x[i] != (int32_t)i + 1 && wrong++ == 0) first = i;
    cr_expect_eq(wrong, 0, "row of %lld: %lld elements not visited once at their offset; first %lld holds %d",
                 (long long)n, (long long)wrong, (long long)first, first >= 0 ? x[first] : 0);
    free(x);
  }
}
