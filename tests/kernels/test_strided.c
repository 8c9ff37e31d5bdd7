/* How mx__cpu_foreach (kernels/cpu/strided.c) cuts a single long row into
 * tasks for its threads: shares that a static schedule makes equal, and
 * every element visited once, at its own offset. */
#include <criterion/criterion.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

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
    mx__cpu_foreach_row_indexed(&v, NULL, write_offsets, NULL);
    int64_t wrong = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
      if (x[i] != (int32_t)i + 1 && wrong++ == 0) first = i;
    cr_expect_eq(wrong, 0, "row of %lld: %lld elements not visited once at their offset; first %lld holds %d",
                 (long long)n, (long long)wrong, (long long)first, first >= 0 ? x[first] : 0);
    free(x);
  }
}

/* --- memory order ------------------------------------------------------------------------------------------------- */

/* (2, 3, 4, 5) as (N, C, H, W), strides in elements */
static const int64_t cl_shape[4] = {2, 3, 4, 5}, cl_strides[4] = {60, 1, 15, 3}, rm_strides[4] = {60, 20, 5, 1};

static mx_kview view4(void *data, mx_dtype dtype, const int64_t *strides) {
  mx_kview v = {.data = data, .dtype = dtype, .ndim = 4};
  memcpy(v.shape, cl_shape, sizeof cl_shape);
  memcpy(v.strides, strides, 4 * sizeof *strides);
  return v;
}

typedef struct {
  int rows;
  int64_t longest, first;
  int64_t step[2];
} row_census;

static void count_rows(const mx__row *row, void *ctx) {
  row_census *c = ctx;
  c->rows++;
  if (row->n > c->longest) c->longest = row->n, c->step[0] = row->step[0], c->step[1] = row->step[1];
  c->first = row->first;
  for (int64_t i = 0; i < row->n; i++) /* out = in */
    *(float *)(row->ptr[0] + i * row->step[0]) = *(const float *)(row->ptr[1] + i * row->step[1]);
}

Test(strided, channels_last_views_are_one_row) {
  float out[120], in[120];
  for (int i = 0; i < 120; i++) in[i] = (float)i, out[i] = -1;
  mx_kview o = view4(out, MX_F32, cl_strides), x = view4(in, MX_F32, cl_strides);
  row_census c = {0};
  mx__cpu_foreach_row(&o, &x, count_rows, &c);
  cr_expect_eq(c.rows, 1, "two channels-last views walked in %d rows", c.rows);
  cr_expect(c.longest == 120 && c.step[0] == 4 && c.step[1] == 4, "a row of %lld, steps %lld and %lld",
            (long long)c.longest, (long long)c.step[0], (long long)c.step[1]);
  cr_expect_eq(c.first, -1, "a walk in memory order numbers no elements");
  cr_expect_eq(memcmp(out, in, sizeof out), 0);
}

Test(strided, mixed_layouts_pair_each_element) {
  /* out channels-last, in row-major: the output's order decides, each element still lands on its own */
  float out[120], in[120];
  for (int i = 0; i < 120; i++) in[i] = (float)i, out[i] = -1;
  mx_kview o = view4(out, MX_F32, cl_strides), x = view4(in, MX_F32, rm_strides);
  row_census c = {0};
  mx__cpu_foreach_row(&o, &x, count_rows, &c);
  /* the input, 80 bytes a step along the output's rows, is gathered into dense tiles first */
  cr_expect(c.step[0] == 4 && c.step[1] == 4, "the rows are dense for both (steps %lld, %lld)", (long long)c.step[0],
            (long long)c.step[1]);
  int wrong = 0;
  for (int n = 0; n < 2; n++)
    for (int ch = 0; ch < 3; ch++)
      for (int h = 0; h < 4; h++)
        for (int w = 0; w < 5; w++)
          wrong += out[n * 60 + ch + h * 15 + w * 3] != in[n * 60 + ch * 20 + h * 5 + w];
  cr_expect_eq(wrong, 0, "%d elements paired wrong", wrong);
}

static void write_index(const mx__row *row, void *ctx) {
  (void)ctx;
  for (int64_t i = 0; i < row->n; i++) *(float *)(row->ptr[0] + i * row->step[0]) = (float)(row->first + i);
}

Test(strided, the_indexed_walk_numbers_elements_row_major) {
  /* random draws and optimizer states: element (n, c, h, w) is number n*60 + c*20 + h*5 + w in every layout */
  float out[120];
  mx_kview o = view4(out, MX_F32, cl_strides);
  mx__cpu_foreach_row_indexed(&o, NULL, write_index, NULL);
  int wrong = 0;
  for (int n = 0; n < 2; n++)
    for (int ch = 0; ch < 3; ch++)
      for (int h = 0; h < 4; h++)
        for (int w = 0; w < 5; w++)
          wrong += out[n * 60 + ch + h * 15 + w * 3] != (float)(n * 60 + ch * 20 + h * 5 + w);
  cr_expect_eq(wrong, 0, "%d elements numbered out of row-major order", wrong);
}

/* out = in, elements of *ctx bytes. */
static void copy_elements(const mx__row *row, void *ctx) {
  size_t size = *(const size_t *)ctx;
  for (int64_t i = 0; i < row->n; i++) memcpy(row->ptr[0] + i * row->step[0], row->ptr[1] + i * row->step[1], size);
}

/* Tiles of a transposed input (kernels/cpu/strided.c's run_tile): full and partial ones, elements of 1, 2, 4 and
 * 8 bytes, both ways round, each element paired with its own. */
Test(strided, transposed_inputs_go_by_tiles) {
  const int64_t N = 2, C = 40, H = 9, W = 70, n = N * C * H * W;
  const int64_t cl[4] = {H * W * C, 1, W * C, C}, rm[4] = {C * H * W, H * W, W, 1};
  mx_dtype dtypes[] = {MX_U8, MX_I32, MX_F16, MX_F64};
  for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++)
    for (int out_cl = 0; out_cl < 2; out_cl++) {
      size_t size = mx_dtype_size(dtypes[k]);
      unsigned char *out = calloc((size_t)n, size), *in = malloc((size_t)n * size);
      cr_assert(out && in);
      for (int64_t i = 0; i < n * (int64_t)size; i++) in[i] = (unsigned char)(i * 7 + i / 251);
      mx_kview o = {.data = out, .dtype = dtypes[k], .ndim = 4, .shape = {N, C, H, W}};
      mx_kview x = o;
      x.data = in;
      memcpy(o.strides, out_cl ? cl : rm, sizeof cl);
      memcpy(x.strides, out_cl ? rm : cl, sizeof cl);
      mx__cpu_foreach_row(&o, &x, copy_elements, &size);
      int64_t wrong = 0;
      for (int64_t a = 0; a < N; a++)
        for (int64_t c = 0; c < C; c++)
          for (int64_t h = 0; h < H; h++)
            for (int64_t w = 0; w < W; w++) {
              int64_t po = a * o.strides[0] + c * o.strides[1] + h * o.strides[2] + w * o.strides[3];
              int64_t px = a * x.strides[0] + c * x.strides[1] + h * x.strides[2] + w * x.strides[3];
              wrong += memcmp(out + po * (int64_t)size, in + px * (int64_t)size, size) != 0;
            }
      cr_expect_eq(wrong, 0, "%s, output %s: %lld elements paired wrong", mx_dtype_name(dtypes[k]),
                   out_cl ? "channels-last" : "row-major", (long long)wrong);
      free(out);
      free(in);
    }
}
