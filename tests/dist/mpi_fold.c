/* All-reduces whose data travels inside their agreement (at most
 * MX__FOLD_BYTES of reduced data, dist/process_group.c) over the ranks
 * mpirun started: the same values as the two-step path just past that size
 * (sums, averages, max and min with NaN, every dtype, waited at once or
 * asynchronously), the same bits on every rank, and calls that differ
 * (reduction, dtype, count, collective) failing on every rank naming both,
 * with no tensor moved. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist_internal.h" /* MX__FOLD_BYTES */
#include "mpi_tests.h"

/* The most elements of dt that fold over world ranks (16-bit floats travel
 * as float32): MX__FOLD_BYTES up to 4 ranks, then less, a multiple of 8
 * bytes (ballot_room in dist/process_group.c, which the library does not
 * export). */
static int64_t fold_limit(mx_dtype dt, int world) {
  int64_t room = (world <= 4 ? MX__FOLD_BYTES : MX__FOLD_BYTES * 4 / world) & ~(int64_t)7;
  size_t wire = dt == MX_F16 || dt == MX_BF16 ? 4 : mx_dtype_size(dt);
  return room / (int64_t)wire;
}

/* Rank r holds (r + 1) * (i % 5 + 1) at i: sums, averages, maxima and minima up to 8 ranks are exact in every
 * dtype (at most 180, 8 significant bits). */
static double held(int rank, int64_t i) { return (rank + 1) * (double)(i % 5 + 1); }

static double reduced(mx_dist_reduce_op how, int world, int64_t i) {
  double k = (double)(i % 5 + 1);
  switch (how) {
    case MX_DIST_SUM: return world * (world + 1) / 2 * k;
    case MX_DIST_AVG: return (world + 1) / 2.0 * k;
    case MX_DIST_MAX: return world * k;
    default: return k;
  }
}

static mx_tensor *held_tensor(int rank, int64_t n, mx_dtype dt) {
  double *v = malloc((size_t)(n + 1) * sizeof *v);
  for (int64_t i = 0; v && i < n; i++) v[i] = held(rank, i);
  mx_tensor *t = v ? mx_to_dtype(mx_from_data(v, MX_SHAPE(n), MX_F64, MX_CPU), dt) : NULL;
  free(v);
  return t;
}

static mx_status all_reduce(mx_process_group *g, mx_tensor *t, mx_dist_reduce_op how, bool async) {
  if (!async) return mx_dist_all_reduce(g, t, how);
  mx_dist_work *w = mx_dist_all_reduce_async(g, t, how);
  return w ? mx_dist_wait(w) : mx_last_status();
}

/* Every dtype and reduction at the most elements that fold and one more
 * (which does not), waited at once and asynchronously: the exact values. */
static void folded_values(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  static const char *const hows[] = {"sum", "avg", "max", "min"};
  const mx_dtype dtypes[] = {MX_F32, MX_F64, MX_F16, MX_BF16, MX_I64, MX_I32, MX_U8};
  int64_t step = mpi_test_quick() ? 61 : 1; /* the elements checked */
  for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++)
    for (int how = MX_DIST_SUM; how <= MX_DIST_MIN; how++)
      for (int past = 0; past < 2; past++)
        for (int async = 0; async < 2; async++) {
          if (how == MX_DIST_AVG && !mx_dtype_is_floating(dtypes[d])) continue;
          int64_t n = fold_limit(dtypes[d], world) + past;
          mx_tensor *t = held_tensor(rank, n, dtypes[d]);
          CHECK(t, "making the input: %s", mx_last_error());
          CHECK(all_reduce(g, t, (mx_dist_reduce_op)how, async) == MX_OK, "%s %s n=%lld: %s",
                mx_dtype_name(dtypes[d]), hows[how], (long long)n, mx_last_error());
          for (int64_t i = 0; i < n; i = i + step < n || i == n - 1 ? i + step : n - 1) { /* and the last */
            double want = reduced((mx_dist_reduce_op)how, world, i), got = mx_at(t, MX_SHAPE(i));
            CHECK(got == want, "%s %s n=%lld%s: element %lld is %g, not %g", mx_dtype_name(dtypes[d]), hows[how],
                  (long long)n, async ? " (asynchronous)" : "", (long long)i, got, want);
          }
        }
done:;
}

/* Random floats averaged and summed at the most that fold: within rounding
 * of the host's mean, and the same bits on every rank. */
static void folded_same_bits(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  mx_generator *gen = mx_generator_new(2000 + (uint64_t)rank);
  CHECK(gen, "generator: %s", mx_last_error());
  int64_t n = fold_limit(MX_F32, world);
  for (int how = MX_DIST_SUM; how <= MX_DIST_AVG; how++) {
    mx_tensor *t = mx_randn(MX_SHAPE(n), MX_F32, MX_CPU, gen);
    mx_tensor *inputs = mx_dist_all_gather(g, t);
    CHECK(inputs, "gathering the inputs: %s", mx_last_error());
    CHECK(mx_dist_all_reduce(g, t, (mx_dist_reduce_op)how) == MX_OK, "%s", mx_last_error());
    mx_tensor *results = mx_dist_all_gather(g, t);
    CHECK(results, "gathering the results: %s", mx_last_error());
    for (int64_t i = 0; i < n; i += 37) {
      double want = 0;
      for (int r = 0; r < world; r++) want += mx_at(inputs, MX_SHAPE(r, i)) / (how == MX_DIST_AVG ? world : 1);
      double got = mx_at(t, MX_SHAPE(i));
      CHECK(fabs(got - want) <= 1e-6 * (1 + fabs(want)) * world, "element %lld: %.9g, not %.9g", (long long)i, got,
            want);
    }
    for (int r = 1; r < world; r++)
      CHECK(!memcmp(mx_data_ptr(mx_contiguous(mx_select(results, 0, r))),
                    mx_data_ptr(mx_contiguous(mx_select(results, 0, 0))), (size_t)n * sizeof(float)),
            "%s: rank %d's result differs from rank 0's in some bits", how == MX_DIST_AVG ? "avg" : "sum", r);
  }
done:
  mx_generator_free(gen);
}

/* Max and min with NaNs on some ranks only (a positive and a negative one),
 * -0 against +0, and numbers, in float32 and float64: folded, the same bits
 * as through MPI (one element more, which does not fold), and NaNs kept.
 * 2 ranks or more. */
static void folded_nan_as_mpi(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  const mx_dtype dtypes[] = {MX_F32, MX_F64};
  for (int d = 0; d < 2; d++)
    for (int how = MX_DIST_MAX; how <= MX_DIST_MIN; how++) {
      int64_t n = fold_limit(dtypes[d], world);
      double v[6] = {rank == 1 ? NAN : 1.0, rank == world - 1 ? -NAN : -2.0 * rank, rank % 2 ? 0.0 : -0.0,
                     rank == 0 ? NAN : rank, 3.0 - rank, rank == 1 ? -NAN : NAN};
      mx_tensor *folded = mx_zeros(MX_SHAPE(n), dtypes[d], MX_CPU), *unfolded = mx_zeros(MX_SHAPE(n + 1), dtypes[d],
                                                                                         MX_CPU);
      for (int i = 0; i < 6; i++) {
        mx_set(folded, MX_SHAPE(i), v[i]);
        mx_set(unfolded, MX_SHAPE(i), v[i]);
      }
      CHECK(mx_dist_all_reduce(g, folded, (mx_dist_reduce_op)how) == MX_OK &&
                mx_dist_all_reduce(g, unfolded, (mx_dist_reduce_op)how) == MX_OK,
            "%s", mx_last_error());
      CHECK(isnan(mx_at(folded, MX_SHAPE(0))) && isnan(mx_at(folded, MX_SHAPE(1))) &&
                isnan(mx_at(folded, MX_SHAPE(3))) && isnan(mx_at(folded, MX_SHAPE(5))),
            "%s %s: a NaN was lost", mx_dtype_name(dtypes[d]), how == MX_DIST_MAX ? "max" : "min");
      CHECK(!signbit(mx_at(folded, MX_SHAPE(2))) == (how == MX_DIST_MAX) && world > 1,
            "%s: max(-0, +0) or min has the wrong sign", mx_dtype_name(dtypes[d]));
      double want4 = how == MX_DIST_MAX ? 3.0 : 3.0 - (world - 1);
      CHECK(mx_at(folded, MX_SHAPE(4)) == want4, "element 4 is %g, not %g", mx_at(folded, MX_SHAPE(4)), want4);
      CHECK(!memcmp(mx_data_ptr(folded), mx_data_ptr(unfolded), (size_t)n * mx_dtype_size(dtypes[d])),
            "%s %s: folded and through MPI differ in some bits", mx_dtype_name(dtypes[d]),
            how == MX_DIST_MAX ? "max" : "min");
    }
done:;
}

/* One call on rank 1 against another on the rest; every rank's error.
 * 2 ranks or more. */
typedef struct {
  const char *what;  /* the case */
  const char *theirs; /* rank 1's call, described */
  mx_dist_reduce_op how;
  mx_dtype dtype;
  int64_t n;
  bool broadcast, async;
} odd_call;

static void mismatched_folded(mx_process_group *g, int rank, int world, char *msg, size_t size) {
  (void)g;
  char fold_n[160], past_fold[160];
  int64_t limit = fold_limit(MX_F32, world);
  snprintf(fold_n, sizeof fold_n, "all_reduce(sum) on %lld float32 elements", (long long)limit);
  snprintf(past_fold, sizeof past_fold, "all_reduce(sum) on %lld float32 elements", (long long)limit + 1);
  const odd_call cases[] = {
      {"the reduction", "all_reduce(max) on 4 float32 elements", MX_DIST_MAX, MX_F32, 4, false, false},
      {"the dtype", "all_reduce(sum) on 4 float64 elements", MX_DIST_SUM, MX_F64, 4, false, false},
      {"the count", "all_reduce(sum) on 5 float32 elements", MX_DIST_SUM, MX_F32, 5, false, false},
      {"the collective", "broadcast on 4 float32 elements from root 0", MX_DIST_SUM, MX_F32, 4, true, false},
      {"asynchronous", "all_reduce(min) on 4 float32 elements", MX_DIST_MIN, MX_F32, 4, false, true},
      {"folded against unfolded", past_fold, MX_DIST_SUM, MX_F32, limit + 1, false, false},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const odd_call *c = &cases[k];
    bool folded_unfolded = c->n == limit + 1;
    int64_t n_rest = folded_unfolded ? limit : 4;
    mx_process_group *h = mx_dist_init(60);
    CHECK(h, "init: %s", mx_last_error());
    mx_tensor *t = rank == 1 ? mx_full(MX_SHAPE(c->n), rank + 1, c->dtype, MX_CPU)
                             : mx_full(MX_SHAPE(n_rest), rank + 1, MX_F32, MX_CPU);
    mx_status st;
    const char *op = c->async ? "mx_dist_wait" : "mx_dist_all_reduce";
    if (rank == 1 && c->broadcast) op = "mx_dist_broadcast", st = mx_dist_broadcast(h, t, 0);
    else st = all_reduce(h, t, rank == 1 ? c->how : MX_DIST_SUM, c->async);
    char got[512], want[512], mine[160];
    snprintf(got, sizeof got, "%s", mx_last_error());
    bool barrier_refused = mx_dist_barrier(h) == MX_STATE_ERROR;
    mx_dist_free(h);
    snprintf(mine, sizeof mine, "%s", folded_unfolded ? fold_n : "all_reduce(sum) on 4 float32 elements");
    if (rank == 1)
      snprintf(want, sizeof want, "%s: rank 1 calls %s, but rank 0 calls %s (collective #0)", op, c->theirs, mine);
    else
      snprintf(want, sizeof want, "%s: rank %d calls %s, but rank 1 calls %s (collective #0)", op, rank, mine,
               c->theirs);
    CHECK(st == MX_INVALID_ARGUMENT, "%s: status %d: %s", c->what, st, got);
    CHECK(!strcmp(got, want), "%s: the error is '%s', not '%s'", c->what, got, want);
    CHECK(barrier_refused, "%s: a broken group took a barrier", c->what);
    CHECK(mx_at(t, MX_SHAPE(0)) == rank + 1 && mx_at(t, MX_SHAPE(mx_numel(t) - 1)) == rank + 1,
          "%s: the tensor moved (%g)", c->what, mx_at(t, MX_SHAPE(0)));
  }
done:;
}

const mpi_test fold_tests[] = {
    {"folded all-reduces give the two-step path's values", folded_values, 1},
    {"folded sums and averages are the same bits on every rank", folded_same_bits, 1},
    {"folded max and min keep NaNs, the same bits as through MPI", folded_nan_as_mpi, 2},
    {"folded calls that differ fail on every rank naming both", mismatched_folded, 2},
};
const int n_fold_tests = sizeof fold_tests / sizeof *fold_tests;
