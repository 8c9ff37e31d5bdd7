/* The CPU's sums over strided runs (kernels/cpu/reduce.c, sum_over_runs),
 * whose walk requests runs ahead of the one it sums: many runs, a run split
 * between two of a long reduction's chunks, runs reached through two walking
 * dims, and one and two threads, against a double reference rounded once.
 * The values are multiples of 2^-7 in [0.5, 1.5), so every double sum is
 * exact and the expected bits do not depend on the order of the additions. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "mixgrad.h"

/* Element i's value: k / 128 + 0.5, k = 37 i mod 128 (no run of these shapes repeats its neighbour's values) */
static double value_at(int64_t i) { return (double)((i * 37) % 128) / 128 + 0.5; }

static mx_tensor *patterned(mx_shape shape, mx_dtype dtype) {
  int64_t n = 1;
  for (int d = 0; d < shape.ndim; d++) n *= shape.d[d];
  double *v = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = value_at(i);
  mx_tensor *t = mx_to_dtype(mx_from_data(v, shape, MX_F64, MX_CPU), dtype);
  free(v);
  return t;
}

/* got's n values against want's, rounded once to dtype. */
static void expect_sums(const mx_tensor *got, double *want, int64_t n, mx_dtype dtype, const char *what) {
  cr_assert_not_null(got, "%s: %s", what, mx_last_error());
  mx_tensor *rounded = mx_to_dtype(mx_from_data(want, MX_SHAPE(n), MX_F64, MX_CPU), dtype);
  cr_assert_eq(mx_to_host(mx_to_dtype(rounded, MX_F64), want, sizeof(double) * (size_t)n), MX_OK);
  double *values = malloc(sizeof(double) * (size_t)n);
  cr_assert_eq(mx_to_host(mx_to_dtype(mx_reshape(got, MX_SHAPE(-1)), MX_F64), values, sizeof(double) * (size_t)n), MX_OK,
               "%s: %s", what, mx_last_error());
  for (int64_t o = 0; o < n; o++)
    cr_expect_eq(values[o], want[o], "%s %s: output %lld is %.17g, want %.17g", mx_dtype_name(dtype), what, (long long)o,
                 values[o], want[o]);
  free(values);
}

/* (N, C, H, W) over (0, 2, 3): N runs of H * W per channel, C * H * W apart. */
static void check_per_channel(int64_t N, int64_t C, int64_t H, int64_t W, mx_dtype dtype, const char *what) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = patterned(MX_SHAPE(N, C, H, W), dtype);
  cr_assert_not_null(x, "%s", mx_last_error());
  double *want = calloc((size_t)C, sizeof(double));
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t i = 0; i < H * W; i++) want[c] += value_at((n * C + c) * H * W + i);
  expect_sums(mx_sum(x, MX_DIMS(0, 2, 3), false), want, C, dtype, what);
  free(want);
  mx_scope_end(s);
}

static const mx_dtype dtypes[] = {MX_F32, MX_BF16, MX_F16, MX_F64};

Test(reduce_runs, many_short_runs_per_channel) {
  for (int k = 0; k < 4; k++) check_per_channel(600, 3, 5, 7, dtypes[k], "600 runs of 35");
}

/* 40 runs of 1961: 78440 elements a channel, two chunks of a long reduction
 * (65536 elements), the first ending 823 elements into run 33 (not float16:
 * the sums pass its largest finite value). */
Test(reduce_runs, a_run_split_between_chunks) {
  for (int k = 0; k < 4; k++)
    if (dtypes[k] != MX_F16) check_per_channel(40, 3, 37, 53, dtypes[k], "40 runs of 1961");
}

Test(reduce_runs, fewer_runs_than_the_walk_requests_ahead) {
  for (int k = 0; k < 4; k++) {
    check_per_channel(1, 2, 3, 4, dtypes[k], "1 run of 12");
    check_per_channel(3, 2, 3, 4, dtypes[k], "3 runs of 12");
    check_per_channel(5, 2, 3, 4, dtypes[k], "5 runs of 12");
  }
}

/* (A, B, C, W) over (0, 1, 3): runs of W walked through two dims, B's
 * wrapping into A's, and a permuted view (C's stride the smallest but W's). */
Test(reduce_runs, runs_walked_through_two_dims) {
  const int64_t A = 7, B = 11, C = 3, W = 13;
  for (int k = 0; k < 4; k++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *x = patterned(MX_SHAPE(A, C, B, W), dtypes[k]);
    cr_assert_not_null(x, "%s", mx_last_error());
    mx_tensor *view = mx_permute(x, MX_DIMS(0, 2, 1, 3)); /* (A, B, C, W), strides (C*B*W, W, B*W, 1) */
    double want[3] = {0};
    for (int64_t a = 0; a < A; a++)
      for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++)
          for (int64_t w = 0; w < W; w++) want[c] += value_at(((a * C + c) * B + b) * W + w);
    expect_sums(mx_sum(view, MX_DIMS(0, 1, 3), false), want, C, dtypes[k], "(A, B, C, W) over (0, 1, 3)");
    mx_scope_end(s);
  }
}

/* The chunks are the same whatever the thread count, so are the bits. */
Test(reduce_runs, same_bits_on_one_and_two_threads) {
  mx_scope *s = mx_scope_begin();
  mx_manual_seed(38);
  mx_tensor *x = mx_randn(MX_SHAPE(40, 3, 37, 53), MX_F32, MX_CPU, NULL);
  cr_assert_not_null(x, "%s", mx_last_error());
  float sums[2][3];
  for (int threads = 1; threads <= 2; threads++) {
    mx_set_num_threads(threads);
    mx_tensor *sum = mx_sum(x, MX_DIMS(0, 2, 3), false);
    cr_assert_not_null(sum, "%s", mx_last_error());
    cr_assert_eq(mx_to_host(sum, sums[threads - 1], sizeof sums[0]), MX_OK, "%s", mx_last_error());
  }
  for (int c = 0; c < 3; c++)
    cr_expect_eq(sums[0][c], sums[1][c], "channel %d: %.9g on one thread, %.9g on two", c, sums[0][c], sums[1][c]);
  mx_scope_end(s);
}
