/* The collectives over the ranks mpirun started (any number): sums of every
 * dtype, layouts, averages that are the same bits everywhere, max and min
 * with NaN, broadcasts, gathers, reduce-scatter, asynchronous all-reduces,
 * and calls that differ between the ranks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_tests.h"

/* Rank r holds (r + 1) * (i % 5 + 1) at i: the sum over w ranks is
 * w(w + 1)/2 * (i % 5 + 1), exact in every dtype up to 8 ranks (at most
 * 180, 8 significant bits). */
static void sums_every_dtype(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  const mx_dtype dtypes[] = {MX_F32, MX_F64, MX_F16, MX_BF16, MX_I64, MX_I32, MX_U8};
  const int64_t sizes[] = {0, 1, 2, 7, 4099};
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      int64_t n = sizes[k];
      double *v = malloc((size_t)(n + 1) * sizeof *v);
      for (int64_t j = 0; v && j < n; j++) v[j] = (rank + 1) * (double)(j % 5 + 1);
      mx_tensor *t = v ? mx_to_dtype(mx_from_data(v, MX_SHAPE(n), MX_F64, MX_CPU), dtypes[d]) : NULL;
      free(v);
      CHECK(t, "making the input: %s", mx_last_error());
      CHECK(mx_dist_all_reduce(g, t, MX_DIST_SUM) == MX_OK, "%s n=%lld: %s", mx_dtype_name(dtypes[d]), (long long)n,
            mx_last_error());
      for (int64_t j = 0; j < n; j++) {
        double want = world * (world + 1) / 2 * (double)(j % 5 + 1), got = mx_at(t, MX_SHAPE(j));
        CHECK(got == want, "%s n=%lld: element %lld is %g, not %g", mx_dtype_name(dtypes[d]), (long long)n,
              (long long)j, got, want);
      }
    }
  /* 3M floats: MPI's large-message path */
  int64_t big_n = mpi_test_quick() ? 300001 : 3000001;
  mx_tensor *big = mx_full(MX_SHAPE(big_n), rank + 0.5, MX_F32, MX_CPU);
  CHECK(big && mx_dist_all_reduce(g, big, MX_DIST_SUM) == MX_OK, "big: %s", mx_last_error());
  double want = world * world / 2.0;
  int64_t probes[] = {0, big_n / 3, big_n - 2, big_n - 1};
  for (int j = 0; j < 4; j++)
    CHECK(mx_at(big, MX_SHAPE(probes[j])) == want, "big: element %lld is %g, not %g", (long long)probes[j],
          mx_at(big, MX_SHAPE(probes[j])), want);
done:;
}

/* 16-bit floats are summed in float32 and rounded once: rank 0 holds 2048
 * and the others 1 (float16's step at 2048 is 2), so over 3 ranks float16
 * partial sums lose a 1 (2048 + 1 rounds to 2048, even) unless 1 + 1 comes
 * first; rounded once, the sum is the exact 2050. Over w ranks the exact
 * sum 2048 + w - 1 (below 4096) rounded to a multiple of 2, halves to even. */
static void halves_sum_in_float32(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  const mx_dtype dtypes[] = {MX_F16, MX_BF16};
  for (int d = 0; d < 2; d++) {
    double big = dtypes[d] == MX_F16 ? 2048 : 256; /* bfloat16's step at 256 is 2 */
    mx_tensor *t = mx_full(MX_SHAPE(3), rank == 0 ? big : 1, dtypes[d], MX_CPU);
    CHECK(mx_dist_all_reduce(g, t, MX_DIST_SUM) == MX_OK, "%s", mx_last_error());
    double want = 2 * nearbyint((big + world - 1) / 2); /* the default rounding: halves to even */
    CHECK(mx_at(t, MX_SHAPE(2)) == want, "%s sum %.9g, not %.9g", mx_dtype_name(dtypes[d]), mx_at(t, MX_SHAPE(2)),
          want);
  }
done:;
}

/* A transposed view is reduced element for element (through a copy), a
 * dense parameter in place. */
static void keeps_the_layout(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  mx_tensor *base = mx_reshape(mx_arange(0, 6, 1, MX_F64, MX_CPU), MX_SHAPE(2, 3));
  mx_tensor *t = mx_transpose(base, 0, 1); /* (3, 2), strides (1, 3) */
  CHECK(t && mx_mul_scalar_(base, rank + 1) == MX_OK, "%s", mx_last_error());
  CHECK(mx_dist_all_reduce(g, t, MX_DIST_SUM) == MX_OK, "%s", mx_last_error());
  double factors = world * (world + 1) / 2.0;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      CHECK(mx_at(base, MX_SHAPE(i, j)) == (3 * i + j) * factors, "base[%d][%d] = %g, not %g", i, j,
            mx_at(base, MX_SHAPE(i, j)), (3 * i + j) * factors);
  /* A parameter, reduced in place in grad mode: it stays a leaf that
   * requires grad, and its version moves on like any in-place write's
   * (one rank writes nothing: every op of one rank is the identity). */
  mx_tensor *w = mx_full(MX_SHAPE(4), rank + 1, MX_F32, MX_CPU);
  CHECK(w && mx_set_requires_grad(w, true) == MX_OK, "%s", mx_last_error());
  uint64_t v0 = mx_version(w);
  CHECK(mx_dist_all_reduce(g, w, MX_DIST_AVG) == MX_OK, "a parameter: %s", mx_last_error());
  CHECK(mx_at(w, MX_SHAPE(3)) == (world + 1) / 2.0, "the parameter's average is %g", mx_at(w, MX_SHAPE(3)));
  CHECK((mx_version(w) > v0) == (world > 1) && mx_requires_grad(w) && !mx_grad_fn_name(w),
        "version %llu -> %llu, grad_fn %s", (unsigned long long)v0, (unsigned long long)mx_version(w),
        mx_grad_fn_name(w));
done:;
}

/* Each rank's own random floats, averaged: the mean of the gathered inputs
 * within rounding, and the same bits on every rank. */
static void averages_are_the_same_bits(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  mx_generator *gen = mx_generator_new(1000 + (uint64_t)rank);
  CHECK(gen, "generator: %s", mx_last_error());
  mx_tensor *t = mx_randn(MX_SHAPE(4099), MX_F32, MX_CPU, gen);
  mx_tensor *inputs = mx_dist_all_gather(g, t);
  CHECK(inputs, "gathering the inputs: %s", mx_last_error());
  CHECK(mx_dist_all_reduce(g, t, MX_DIST_AVG) == MX_OK, "%s", mx_last_error());
  mx_tensor *results = mx_dist_all_gather(g, t);
  CHECK(results, "gathering the results: %s", mx_last_error());
  for (int64_t i = 0; i < 4099; i += 97) {
    double mean = 0;
    for (int r = 0; r < world; r++) mean += mx_at(inputs, MX_SHAPE(r, i)) / world;
    double got = mx_at(t, MX_SHAPE(i));
    CHECK(fabs(got - mean) <= 1e-6 * (1 + fabs(mean)), "element %lld: %.9g, mean %.9g", (long long)i, got, mean);
  }
  float mine[4099], theirs[4099];
  CHECK(mx_to_host(t, mine, sizeof mine) == MX_OK, "%s", mx_last_error());
  for (int r = 0; r < world; r++) {
    mx_tensor *row = mx_contiguous(mx_select(results, 0, r));
    CHECK(row && mx_to_host(row, theirs, sizeof theirs) == MX_OK, "%s", mx_last_error());
    CHECK(!memcmp(mine, theirs, sizeof mine), "rank %d's average differs from rank %d's in some bits", r, rank);
  }
done:
  mx_generator_free(gen);
}

/* Root 1 (0 alone): every rank ends with root's 10 * root + i, in float64
 * and int64. */
static void broadcasts(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  const mx_dtype dtypes[] = {MX_F64, MX_I64};
  int root = world > 1 ? 1 : 0;
  for (int d = 0; d < 2; d++) {
    mx_tensor *t = mx_reshape(mx_arange(rank * 10, rank * 10 + 6, 1, dtypes[d], MX_CPU), MX_SHAPE(3, 2));
    CHECK(mx_dist_broadcast(g, t, root) == MX_OK, "%s", mx_last_error());
    for (int i = 0; i < 6; i++)
      CHECK(mx_at(t, MX_SHAPE(i / 2, i % 2)) == 10 * root + i, "%s element %d: %g", mx_dtype_name(dtypes[d]), i,
            mx_at(t, MX_SHAPE(i / 2, i % 2)));
  }
  CHECK(mx_dist_barrier(g) == MX_OK, "barrier: %s", mx_last_error());
  CHECK(mx_dist_local_rank(g) == rank, "local rank %d on one machine, rank %d", mx_dist_local_rank(g), rank);
done:;
}

/* Rank r holds ((i + r) % 3 - 1) * (r + 1) at i; float32 and float64 get
 * NaNs on some ranks only (rank 1 at 5, the last rank at 7, rank 0 at 9,
 * a positive and a negative NaN; no NaN at 5 on one rank): the maximum and
 * minimum over the ranks, in 6 dtypes, against the same fold on the host,
 * NaNs surviving, and the same bits on every rank (-0 and +0 included).
 * uint8 holds the values plus world, which held never goes below. */
static double held(int r, int i) { return ((i + r) % 3 - 1) * (double)(r + 1); }

static void extremes(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  const mx_dtype dtypes[] = {MX_F32, MX_F64, MX_F16, MX_I64, MX_I32, MX_U8};
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
    for (int how = MX_DIST_MAX; how <= MX_DIST_MIN; how++) {
      bool unsigned8 = dtypes[d] == MX_U8, with_nan = dtypes[d] == MX_F32 || dtypes[d] == MX_F64;
      double v[12];
      for (int i = 0; i < 11; i++) v[i] = unsigned8 ? held(rank, i) + world : held(rank, i);
      v[11] = unsigned8 ? 0 : rank % 2 ? 0.0 : -0.0;
      if (with_nan && rank == 1) v[5] = NAN;
      if (with_nan && rank == world - 1) v[7] = -NAN;
      if (with_nan && rank == 0) v[9] = NAN;
      mx_tensor *t = mx_to_dtype(mx_from_data(v, MX_SHAPE(12), MX_F64, MX_CPU), dtypes[d]);
      CHECK(t && mx_dist_all_reduce(g, t, (mx_dist_reduce_op)how) == MX_OK, "%s: %s", mx_dtype_name(dtypes[d]),
            mx_last_error());
      for (int i = 0; i < 11; i++) {
        double want = held(0, i);
        for (int r = 1; r < world; r++) want = how == MX_DIST_MAX ? fmax(want, held(r, i)) : fmin(want, held(r, i));
        if (unsigned8) want += world; /* held is in [-world, world] */
        double got = mx_at(t, MX_SHAPE(i));
        if (with_nan && ((i == 5 && world > 1) || i == 7 || i == 9))
          CHECK(isnan(got), "%s %s: the NaN at %d was lost (%g)", mx_dtype_name(dtypes[d]),
                how == MX_DIST_MAX ? "max" : "min", i, got);
        else
          CHECK(got == want, "%s %s: element %d is %g, not %g", mx_dtype_name(dtypes[d]),
                how == MX_DIST_MAX ? "max" : "min", i, got, want);
      }
      if (!unsigned8 && world > 1 && mx_dtype_is_floating(dtypes[d]))
        CHECK(!signbit(mx_at(t, MX_SHAPE(11))) == (how == MX_DIST_MAX), "%s: max(-0, +0) or min has the wrong sign",
              mx_dtype_name(dtypes[d]));
      mx_tensor *all = mx_dist_all_gather(g, t);
      CHECK(all, "%s", mx_last_error());
      for (int r = 1; r < world; r++)
        CHECK(!memcmp(mx_data_ptr(mx_contiguous(mx_select(all, 0, r))),
                      mx_data_ptr(mx_contiguous(mx_select(all, 0, 0))), 12 * mx_dtype_size(dtypes[d])),
              "%s: rank %d's result differs from rank 0's", mx_dtype_name(dtypes[d]), r);
    }
done:;
}

/* Each rank gathers a transposed (3, 2) view of rank * 10 + i, in float64
 * and bfloat16 (exact up to 25 ranks), and an empty int32 tensor; the
 * result stacks them in rank order. */
static void gathers(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  const mx_dtype dtypes[] = {MX_F64, MX_BF16};
  for (int d = 0; d < 2; d++) {
    mx_tensor *base = mx_reshape(mx_arange(rank * 10, rank * 10 + 6, 1, dtypes[d], MX_CPU), MX_SHAPE(2, 3));
    mx_tensor *all = mx_dist_all_gather(g, mx_transpose(base, 0, 1));
    CHECK(all, "%s: %s", mx_dtype_name(dtypes[d]), mx_last_error());
    CHECK(mx_ndim(all) == 3 && mx_size(all, 0) == world && mx_size(all, 1) == 3 && mx_size(all, 2) == 2 &&
              mx_dtype_of(all) == dtypes[d],
          "%s: the result's shape or dtype", mx_dtype_name(dtypes[d]));
    for (int r = 0; r < world; r++)
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
          double want = r * 10 + 3 * j + i, got = mx_at(all, MX_SHAPE(r, i, j));
          CHECK(got == want, "%s: [%d][%d][%d] is %g, not %g", mx_dtype_name(dtypes[d]), r, i, j, got, want);
        }
  }
  mx_tensor *none = mx_dist_all_gather(g, mx_zeros(MX_SHAPE(0), MX_I32, MX_CPU));
  CHECK(none && mx_ndim(none) == 2 && mx_size(none, 0) == world && mx_numel(none) == 0, "empty: %s", mx_last_error());
done:;
}

/* Rank r holds t[k][j] = (r + 1) * (k + j + 1), shape (world, 3): rank k
 * gets the sum over the ranks of their t[k] in float32, their average in
 * bfloat16 and their maximum in int32 (small numbers: every input, sum and
 * average is exact in bfloat16 up to 8 ranks). */
static void reduce_scatters(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  const mx_dtype dtypes[] = {MX_F32, MX_BF16, MX_I32};
  const mx_dist_reduce_op ops[] = {MX_DIST_SUM, MX_DIST_AVG, MX_DIST_MAX};
  for (int d = 0; d < 3; d++) {
    mx_tensor *t = mx_zeros(MX_SHAPE(world, 3), dtypes[d], MX_CPU);
    for (int k = 0; k < world; k++)
      for (int j = 0; j < 3; j++) mx_set(t, MX_SHAPE(k, j), (rank + 1) * (k + j + 1.0));
    mx_tensor *mine = mx_dist_reduce_scatter(g, t, ops[d]);
    CHECK(mine, "%s: %s", mx_dtype_name(dtypes[d]), mx_last_error());
    CHECK(mx_ndim(mine) == 1 && mx_size(mine, 0) == 3 && mx_dtype_of(mine) == dtypes[d], "%s: shape or dtype",
          mx_dtype_name(dtypes[d]));
    double factor = ops[d] == MX_DIST_SUM   ? world * (world + 1) / 2.0
                    : ops[d] == MX_DIST_AVG ? (world + 1) / 2.0
                                            : world;
    for (int j = 0; j < 3; j++)
      CHECK(mx_at(mine, MX_SHAPE(j)) == factor * (rank + j + 1.0), "%s: element %d is %g, not %g",
            mx_dtype_name(dtypes[d]), j, mx_at(mine, MX_SHAPE(j)), factor * (rank + j + 1.0));
  }
  CHECK(!mx_dist_reduce_scatter(g, mx_zeros(MX_SHAPE(world + 1, 2), MX_F32, MX_CPU), MX_DIST_SUM),
        "a bad shape passed");
  char want[160];
  snprintf(want, sizeof want,
           "mx_dist_reduce_scatter: t's first dim must be the world size %d, but t has 2 dims and that dim is another "
           "size", world);
  CHECK(!strcmp(mx_last_error(), want), "the error is '%s'", mx_last_error());
done:;
}

/* Three all-reduces in flight at once, waited for in another order, each
 * with its own result; the tensors' handles released before the wait. */
static void asynchronous(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  mx_dist_work *w[3] = {NULL, NULL, NULL};
  mx_tensor *t[3];
  for (int k = 0; k < 3; k++) {
    t[k] = mx_full(MX_SHAPE(1000 * (k + 1)), (rank + 1) * (k + 1), k == 1 ? MX_BF16 : MX_F32, MX_CPU);
    w[k] = mx_dist_all_reduce_async(g, t[k], k == 2 ? MX_DIST_MAX : MX_DIST_SUM);
    CHECK(w[k], "start %d: %s", k, mx_last_error());
  }
  const int order[] = {2, 0, 1};
  for (int i = 0; i < 3; i++) {
    int k = order[i];
    mx_status st = mx_dist_wait(w[k]);
    w[k] = NULL;
    CHECK(st == MX_OK, "wait %d: %s", k, mx_last_error());
  }
  CHECK(mx_at(t[0], MX_SHAPE(999)) == world * (world + 1) / 2.0, "sum %g", mx_at(t[0], MX_SHAPE(999)));
  CHECK(mx_at(t[1], MX_SHAPE(1999)) == world * (world + 1), "bfloat16 sum %g", mx_at(t[1], MX_SHAPE(1999)));
  CHECK(mx_at(t[2], MX_SHAPE(0)) == 3.0 * world, "max %g", mx_at(t[2], MX_SHAPE(0)));
done:
  for (int k = 0; k < 3; k++)
    if (w[k]) mx_dist_wait(w[k]);
}

/* Rank 0 sums 4 floats; rank 1 sums, broadcasts or gathers 5: both fail
 * naming both calls, and the group stays broken; ranks past 1 call what
 * rank 0 calls and name rank 1. 2 ranks or more. */
static void mismatched(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  (void)world;
  static const char *const calls[] = {"all_reduce(sum) on 5 float32 elements",
                                      "broadcast on 5 float32 elements from root 0",
                                      "all_gather on 5 float32 elements"};
  for (int call_on_1 = 0; call_on_1 < 3; call_on_1++) {
    mx_process_group *h = mx_dist_init(60);
    CHECK(h, "init: %s", mx_last_error());
    mx_tensor *t = mx_ones(MX_SHAPE(rank == 1 ? 5 : 4), MX_F32, MX_CPU);
    mx_status st = rank != 1 || call_on_1 == 0 ? mx_dist_all_reduce(h, t, MX_DIST_SUM)
                   : call_on_1 == 1            ? mx_dist_broadcast(h, t, 0)
                   : mx_dist_all_gather(h, t)  ? MX_OK
                                               : mx_last_status();
    char got[512], want[256];
    snprintf(got, sizeof got, "%s", mx_last_error());
    bool barrier_refused = mx_dist_barrier(h) == MX_STATE_ERROR &&
                           strstr(mx_last_error(), "mx_dist_barrier: the process group failed earlier (mx_dist_");
    mx_dist_free(h);
    CHECK(st == MX_INVALID_ARGUMENT, "status %d: %s", st, got);
    if (rank == 1)
      snprintf(want, sizeof want, "rank 1 calls %s, but rank 0 calls all_reduce(sum) on 4 float32 elements",
               calls[call_on_1]);
    else
      snprintf(want, sizeof want, "rank %d calls all_reduce(sum) on 4 float32 elements, but rank 1 calls %s", rank,
               calls[call_on_1]);
    CHECK(strstr(got, want), "the error is '%s', not '%s'", got, want);
    CHECK(barrier_refused, "a broken group took a barrier");
  }
  (void)g;
done:;
}

const mpi_test collective_tests[] = {
    {"all_reduce sums every dtype", sums_every_dtype, 1},
    {"float16 sums in float32, rounded once", halves_sum_in_float32, 1},
    {"all_reduce on strided views and parameters", keeps_the_layout, 1},
    {"an average is the same bits on every rank", averages_are_the_same_bits, 1},
    {"broadcast copies the root's tensor", broadcasts, 1},
    {"max and min propagate NaN, the same bits everywhere", extremes, 1},
    {"all_gather stacks every rank's tensor", gathers, 1},
    {"reduce_scatter gives rank k the reduction of every t[k]", reduce_scatters, 1},
    {"asynchronous all-reduces waited in any order", asynchronous, 1},
    {"calls that differ fail on every rank naming both", mismatched, 2},
};
const int n_collective_tests = sizeof collective_tests / sizeof *collective_tests;
