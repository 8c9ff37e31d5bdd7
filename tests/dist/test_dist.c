/* The process group: a world of one, arguments and environment, a
 * rendezvous among connections that are not ranks, and over forked ranks
 * on loopback the sums of every dtype, layouts, averages that are the same
 * bits everywhere, broadcasts, and the errors: calls that do not match, a
 * peer that leaves, a peer that stays silent. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "mixgrad.h"
#include "rank_tests.h"

static const char *fmt_port(const char *format, int port) {
  static char buf[256];
  snprintf(buf, sizeof buf, format, port);
  return buf;
}

Test(dist, a_world_of_one_needs_no_network) {
  mx_process_group *g = mx_dist_init(0, 1, NULL, 0, 0);
  cr_assert_not_null(g, "%s", mx_last_error());
  cr_expect_eq(mx_dist_rank(g), 0);
  cr_expect_eq(mx_dist_world_size(g), 1);
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_from_data((float[]){1.5f, -2, 3}, MX_SHAPE(3), MX_F32, MX_CPU);
  cr_assert_eq(mx_dist_all_reduce(g, t, MX_DIST_SUM), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_dist_all_reduce(g, t, MX_DIST_AVG), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_dist_broadcast(g, t, 0), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_dist_barrier(g), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_at(t, MX_SHAPE(0)), 1.5);
  cr_expect_eq(mx_at(t, MX_SHAPE(1)), -2);
  cr_expect_eq(mx_at(t, MX_SHAPE(2)), 3);
  cr_expect_eq(mx_dist_broadcast(g, t, 1), MX_INVALID_ARGUMENT);
  cr_expect_str_eq(mx_last_error(), "mx_dist_broadcast: root 1 is not in [0, 1)");
  mx_tensor *flags = mx_ones(MX_SHAPE(2), MX_BOOL, MX_CPU), *ints = mx_ones(MX_SHAPE(2), MX_I64, MX_CPU);
  cr_expect_eq(mx_dist_all_reduce(g, flags, MX_DIST_SUM), MX_DTYPE_ERROR);
  cr_expect_str_eq(mx_last_error(), "mx_dist_all_reduce: cannot sum bool tensors");
  cr_expect_eq(mx_dist_all_reduce(g, ints, MX_DIST_AVG), MX_DTYPE_ERROR);
  cr_expect_str_eq(mx_last_error(), "mx_dist_all_reduce: cannot average int64 tensors");
  cr_expect_eq(mx_dist_all_reduce(g, flags, MX_DIST_MAX), MX_DTYPE_ERROR);
  cr_expect_str_eq(mx_last_error(), "mx_dist_all_reduce: cannot take the maximum of bool tensors");
  cr_expect_eq(mx_dist_all_reduce(g, ints, (mx_dist_reduce_op)4), MX_INVALID_ARGUMENT);
  cr_expect_str_eq(mx_last_error(), "mx_dist_all_reduce: unknown reduce op 4");
  cr_expect_eq(mx_dist_all_reduce(NULL, ints, MX_DIST_SUM), MX_NULL_INPUT);
  mx_tensor *stacked = mx_dist_all_gather(g, t);
  cr_assert_not_null(stacked, "%s", mx_last_error());
  cr_expect_eq(mx_ndim(stacked), 2);
  cr_expect_eq(mx_size(stacked, 0), 1);
  cr_expect_eq(mx_at(stacked, MX_SHAPE(0, 2)), 3);
  cr_expect_null(mx_dist_all_gather(g, mx_zeros(MX_SHAPE(1, 1, 1, 1, 1, 1, 1, 1), MX_F32, MX_CPU)));
  cr_expect_str_eq(mx_last_error(), "mx_dist_all_gather: t has 8 dims, and the result would need one more (at most 8)");
  mx_scope_end(s);
  mx_dist_free(g);
}

Test(dist, init_rejects_bad_arguments) {
  struct {
    int rank, world, port;
    const char *addr;
    double timeout;
    const char *error;
  } cases[] = {
      {0, 0, 1234, "127.0.0.1", 0, "mx_dist_init: world_size 0 is not in [1, 65535]"},
      {2, 2, 1234, "127.0.0.1", 0, "mx_dist_init: rank 2 is not in [0, 2)"},
      {-1, 2, 1234, "127.0.0.1", 0, "mx_dist_init: rank -1 is not in [0, 2)"},
      {0, 2, 0, "127.0.0.1", 0, "mx_dist_init: master port 0 is not in [1, 65535]"},
      {0, 2, 70000, "127.0.0.1", 0, "mx_dist_init: master port 70000 is not in [1, 65535]"},
      {0, 2, 1234, NULL, 0, "mx_dist_init: argument 'master_addr' is NULL"},
      {0, 2, 1234, "127.0.0.1", -1, "mx_dist_init: timeout -1 s is not in [0, 1e6]"},
      {0, 2, 1234, "127.0.0.1", NAN, "mx_dist_init: timeout nan s is not in [0, 1e6]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mx_clear_error();
    cr_expect_null(mx_dist_init(cases[i].rank, cases[i].world, cases[i].addr, cases[i].port, cases[i].timeout));
    cr_expect_str_eq(mx_last_error(), cases[i].error, "case %zu", i);
  }
}

/* Nobody else comes: rank 1 finds no rank 0, rank 0 waits in vain. */
Test(dist, a_rendezvous_nobody_joins_times_out) {
  int port = free_port();
  mx_clear_error();
  cr_expect_null(mx_dist_init(1, 2, "127.0.0.1", port, 0.3));
  cr_expect(strstr(mx_last_error(), fmt_port("mx_dist_init: rank 1: cannot reach rank 0 at 127.0.0.1:%d", port)),
            "%s", mx_last_error());
  mx_clear_error();
  cr_expect_null(mx_dist_init(0, 3, "127.0.0.1", port, 0.3));
  cr_expect(strstr(mx_last_error(), fmt_port("mx_dist_init: rank 0: waiting for rank 1 of 3 at port %d (0 arrived)", port)),
            "%s", mx_last_error());
}

/* A connection to 127.0.0.1:port, tried for 10 s while nobody listens
 * there yet; reads on it give up after 20 s. -1 if none. */
static int connect_to(int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  for (int tries = 0; tries < 500; tries++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){20, 0}, sizeof(struct timeval));
      return fd;
    }
    if (fd >= 0) close(fd);
    usleep(20 * 1000);
  }
  return -1;
}

/* Whether the other end hung up on fd: a read sees the end, or a reset
 * (a peer that closes with bytes left unread resets), not a timeout. */
static bool closed_by_peer(int fd) {
  char c;
  ssize_t r = recv(fd, &c, 1, 0);
  return r == 0 || (r < 0 && errno == ECONNRESET);
}

static const char http_request[] = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";

/* Not a rank: connects to the master port twice, once to say nothing and
 * once as an HTTP client would, then lets rank 1 go on (a byte to
 * go_ahead), and checks that rank 0 hangs up on both (on the silent one
 * when the rendezvous is over). */
static void stray_client(int port, int go_ahead, rank_report *out) {
  int silent = connect_to(port), talker = silent >= 0 ? connect_to(port) : -1;
  RANK_CHECK(out, talker >= 0, "cannot reach the master port %d", port);
  RANK_CHECK(out, send(talker, http_request, sizeof http_request - 1, 0) == (ssize_t)sizeof http_request - 1,
             "sending");
  RANK_CHECK(out, write(go_ahead, "x", 1) == 1, "cannot tell rank 1 to go on");
  RANK_CHECK(out, closed_by_peer(talker), "rank 0 kept the HTTP client's connection");
  RANK_CHECK(out, closed_by_peer(silent), "rank 0 kept the silent connection");
done:
  if (silent >= 0) close(silent);
  if (talker >= 0) close(talker);
}

/* Ranks 0 and 1 of a world of two, and process 2 the stray client: the
 * group forms and sums as if the strays had not been there. ctx is a pipe
 * on which the stray client tells rank 1 that the strays are in. */
static void among_strays(int rank, int world, int port, void *ctx, rank_report *out) {
  (void)world;
  const int *pipe_fds = ctx;
  mx_process_group *g = NULL;
  mx_scope *s = mx_scope_begin();
  if (rank == 2) {
    stray_client(port, pipe_fds[1], out);
    goto done;
  }
  char c;
  RANK_CHECK(out, rank == 0 || read(pipe_fds[0], &c, 1) == 1, "no word from the stray client");
  g = mx_dist_init(rank, 2, "127.0.0.1", port, 60);
  RANK_CHECK(out, g, "init: %s", mx_last_error());
  mx_tensor *t = mx_full(MX_SHAPE(5), rank + 1, MX_F32, MX_CPU);
  RANK_CHECK(out, mx_dist_all_reduce(g, t, MX_DIST_SUM) == MX_OK, "%s", mx_last_error());
  RANK_CHECK(out, mx_at(t, MX_SHAPE(4)) == 3, "the sum is %g, not 3", mx_at(t, MX_SHAPE(4)));
done:
  mx_scope_end(s);
  mx_dist_free(g);
}

Test(dist, connections_that_are_not_ranks_are_dropped) {
  rank_report reports[3];
  int pipe_fds[2];
  cr_assert_eq(pipe(pipe_fds), 0);
  expect_ranks_pass(3, among_strays, pipe_fds, reports);
  close(pipe_fds[0]), close(pipe_fds[1]);
}

/* Rank 0 alone, with an HTTP client (process 1) at its door: the timeout
 * error counts the connection it dropped. */
static void waits_past_a_stray(int rank, int world, int port, void *ctx, rank_report *out) {
  (void)world, (void)ctx;
  int fd = -1;
  if (rank == 1) {
    fd = connect_to(port);
    RANK_CHECK(out, fd >= 0 && send(fd, http_request, sizeof http_request - 1, 0) > 0, "cannot reach rank 0");
    RANK_CHECK(out, closed_by_peer(fd), "rank 0 kept the HTTP client's connection");
    goto done;
  }
  RANK_CHECK(out, !mx_dist_init(0, 2, "127.0.0.1", port, 1.0), "a world of two formed with one rank");
  char want[160];
  snprintf(want, sizeof want,
           "waiting for rank 1 of 2 at port %d (0 arrived; dropped 1 connection that did not greet as a mixgrad rank)",
           port);
  RANK_CHECK(out, strstr(mx_last_error(), want), "the error is '%s'", mx_last_error());
done:
  if (fd >= 0) close(fd);
}

Test(dist, a_rendezvous_that_times_out_counts_the_strays) {
  rank_report reports[2];
  expect_ranks_pass(2, waits_past_a_stray, NULL, reports);
}

Test(dist, init_from_env_reads_torchrun_variables) {
  unsetenv("WORLD_SIZE"), unsetenv("RANK"), unsetenv("MASTER_ADDR"), unsetenv("MASTER_PORT");
  mx_process_group *g = mx_dist_init_from_env(0);
  cr_assert_not_null(g, "%s", mx_last_error());
  cr_expect_eq(mx_dist_world_size(g), 1);
  mx_dist_free(g);
  setenv("WORLD_SIZE", "2", 1);
  cr_expect_null(mx_dist_init_from_env(0));
  cr_expect_str_eq(mx_last_error(), "mx_dist_init_from_env: WORLD_SIZE is set but RANK is not");
  setenv("RANK", "2", 1);
  cr_expect_null(mx_dist_init_from_env(0));
  cr_expect_str_eq(mx_last_error(), "mx_dist_init_from_env: RANK='2' is not an integer in [0, 1]");
  setenv("RANK", "1", 1);
  cr_expect_null(mx_dist_init_from_env(0));
  cr_expect_str_eq(mx_last_error(), "mx_dist_init_from_env: WORLD_SIZE is set but MASTER_ADDR is not");
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "http", 1);
  cr_expect_null(mx_dist_init_from_env(0));
  cr_expect_str_eq(mx_last_error(), "mx_dist_init_from_env: MASTER_PORT='http' is not an integer in [1, 65535]");
  setenv("WORLD_SIZE", "1", 1), setenv("RANK", "0", 1);
  g = mx_dist_init_from_env(0);
  cr_expect_not_null(g, "%s", mx_last_error());
  mx_dist_free(g);
}

/* Rank r holds (r + 1) * (i % 5 + 1) at i: the sum over w ranks is
 * w(w + 1)/2 * (i % 5 + 1), exact in every dtype (at most 30 for w = 3). */
static void sums_every_dtype(mx_process_group *g, int rank, void *ctx, rank_report *out) {
  (void)ctx;
  int world = mx_dist_world_size(g);
  const mx_dtype dtypes[] = {MX_F32, MX_F64, MX_F16, MX_BF16, MX_I64, MX_I32, MX_U8};
  const int64_t sizes[] = {0, 1, 2, 7, 4099};
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      int64_t n = sizes[k];
      double *v = malloc((size_t)(n + 1) * sizeof *v);
      for (int64_t j = 0; v && j < n; j++) v[j] = (rank + 1) * (double)(j % 5 + 1);
      mx_tensor *t = v ? mx_to_dtype(mx_from_data(v, MX_SHAPE(n), MX_F64, MX_CPU), dtypes[d]) : NULL;
      free(v);
      RANK_CHECK(out, t, "making the input: %s", mx_last_error());
      RANK_CHECK(out, mx_dist_all_reduce(g, t, MX_DIST_SUM) == MX_OK, "%s n=%lld: %s", mx_dtype_name(dtypes[d]),
                 (long long)n, mx_last_error());
      for (int64_t j = 0; j < n; j++) {
        double want = world * (world + 1) / 2 * (double)(j % 5 + 1), got = mx_at(t, MX_SHAPE(j));
        RANK_CHECK(out, got == want, "%s n=%lld: element %lld is %g, not %g", mx_dtype_name(dtypes[d]), (long long)n,
                   (long long)j, got, want);
      }
    }
  /* 3M floats: chunks of 4 MB, many partial sends and receives each. */
  mx_tensor *big = mx_full(MX_SHAPE(3000001), rank + 0.5, MX_F32, MX_CPU);
  RANK_CHECK(out, big && mx_dist_all_reduce(g, big, MX_DIST_SUM) == MX_OK, "3M floats: %s", mx_last_error());
  double want = world * world / 2.0;
  int64_t probes[] = {0, 1000000, 2999999, 3000000};
  for (int j = 0; j < 4; j++)
    RANK_CHECK(out, mx_at(big, MX_SHAPE(probes[j])) == want, "3M floats: element %lld is %g, not %g",
               (long long)probes[j], mx_at(big, MX_SHAPE(probes[j])), want);
done:;
}

Test(dist, all_reduce_sums_every_dtype_over_2_and_3_ranks) {
  rank_report reports[3];
  expect_group_passes(2, 60, sums_every_dtype, NULL, reports);
  expect_group_passes(3, 60, sums_every_dtype, NULL, reports);
}

/* A transposed view is reduced element for element (through a copy), a
 * dense parameter in place. */
static void keeps_the_layout(mx_process_group *g, int rank, void *ctx, rank_report *out) {
  (void)ctx;
  mx_tensor *base = mx_reshape(mx_arange(0, 6, 1, MX_F64, MX_CPU), MX_SHAPE(2, 3));
  mx_tensor *t = mx_transpose(base, 0, 1); /* (3, 2), strides (1, 3) */
  RANK_CHECK(out, t && mx_mul_scalar_(base, rank + 1) == MX_OK, "%s", mx_last_error());
  RANK_CHECK(out, mx_dist_all_reduce(g, t, MX_DIST_SUM) == MX_OK, "%s", mx_last_error());
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) {
      double want = (3 * i + j) * 3.0; /* ranks' factors 1 + 2 */
      RANK_CHECK(out, mx_at(base, MX_SHAPE(i, j)) == want, "base[%d][%d] = %g, not %g", i, j,
                 mx_at(base, MX_SHAPE(i, j)), want);
    }
  /* A parameter, reduced in place in grad mode: it stays a leaf that
   * requires grad, and its version moves on like any in-place write's. */
  mx_tensor *w = mx_full(MX_SHAPE(4), rank + 1, MX_F32, MX_CPU);
  RANK_CHECK(out, w && mx_set_requires_grad(w, true) == MX_OK, "%s", mx_last_error());
  uint64_t v0 = mx_version(w);
  RANK_CHECK(out, mx_dist_all_reduce(g, w, MX_DIST_AVG) == MX_OK, "a parameter: %s", mx_last_error());
  RANK_CHECK(out, mx_at(w, MX_SHAPE(3)) == 1.5, "the parameter's average is %g", mx_at(w, MX_SHAPE(3)));
  RANK_CHECK(out, mx_version(w) > v0 && mx_requires_grad(w) && !mx_grad_fn_name(w),
             "version %llu -> %llu, requires grad %d, grad_fn %s", (unsigned long long)v0,
             (unsigned long long)mx_version(w), mx_requires_grad(w), mx_grad_fn_name(w));
done:;
}

Test(dist, all_reduce_works_on_strided_views_and_parameters) {
  rank_report reports[2];
  expect_group_passes(2, 60, keeps_the_layout, NULL, reports);
}

/* Each rank's own random floats, averaged: reports its inputs, then the
 * result. */
static void averages(mx_process_group *g, int rank, void *ctx, rank_report *out) {
  (void)ctx;
  mx_generator *gen = mx_generator_new(1000 + (uint64_t)rank);
  RANK_CHECK(out, gen, "generator: %s", mx_last_error());
  mx_tensor *t = mx_randn(MX_SHAPE(64), MX_F32, MX_CPU, gen);
  float in[64], res[64];
  RANK_CHECK(out, t && mx_to_host(t, in, sizeof in) == MX_OK, "%s", mx_last_error());
  RANK_CHECK(out, mx_dist_all_reduce(g, t, MX_DIST_AVG) == MX_OK, "%s", mx_last_error());
  RANK_CHECK(out, mx_to_host(t, res, sizeof res) == MX_OK, "%s", mx_last_error());
  for (int i = 0; i < 64; i++) out->values[i] = in[i], out->values[64 + i] = res[i];
  out->n_values = 128;
done:
  mx_generator_free(gen);
}

Test(dist, an_average_is_the_same_bits_on_every_rank) {
  rank_report reports[3];
  expect_group_passes(3, 60, averages, NULL, reports);
  for (int i = 0; i < 64; i++) {
    double mean = (reports[0].values[i] + reports[1].values[i] + reports[2].values[i]) / 3;
    cr_expect(fabs(reports[0].values[64 + i] - mean) <= 1e-6 * (1 + fabs(mean)), "element %d: %.9g, mean %.9g", i,
              reports[0].values[64 + i], mean);
    cr_expect(reports[0].values[i] != reports[1].values[i], "ranks drew the same input %d", i);
    for (int r = 1; r < 3; r++)
      cr_expect_eq(reports[r].values[64 + i], reports[0].values[64 + i], "rank %d's element %d differs from rank 0's",
                   r, i);
  }
}

/* Root 1 of 3: every rank ends with root's 10 + i, in float64 and int64. */
static void broadcasts(mx_process_group *g, int rank, void *ctx, rank_report *out) {
  (void)ctx;
  const mx_dtype dtypes[] = {MX_F64, MX_I64};
  for (int d = 0; d < 2; d++) {
    mx_tensor *t = mx_reshape(mx_arange(rank * 10, rank * 10 + 6, 1, dtypes[d], MX_CPU), MX_SHAPE(3, 2));
    RANK_CHECK(out, mx_dist_broadcast(g, t, 1) == MX_OK, "%s", mx_last_error());
    for (int i = 0; i < 6; i++)
      RANK_CHECK(out, mx_at(t, MX_SHAPE(i / 2, i % 2)) == 10 + i, "%s element %d: %g", mx_dtype_name(dtypes[d]), i,
                 mx_at(t, MX_SHAPE(i / 2, i % 2)));
  }
  RANK_CHECK(out, mx_dist_barrier(g) == MX_OK, "barrier: %s", mx_last_error());
done:;
}

Test(dist, broadcast_copies_the_roots_tensor) {
  rank_report reports[3];
  expect_group_passes(3, 60, broadcasts, NULL, reports);
}

/* Rank r of 3 holds v_r[i] = ((i + r) % 3 - 1) * (r + 1) at i (a NaN at
 * i = 5 on rank 1 in float32): the maximum and minimum over the ranks, in
 * 5 dtypes, against the same fold on the host. */
static double held(int r, int i) { return ((i + r) % 3 - 1) * (double)(r + 1); }

static void extremes(mx_process_group *g, int rank, void *ctx, rank_report *out) {
  (void)ctx;
  const mx_dtype dtypes[] = {MX_F32, MX_F16, MX_I64, MX_I32, MX_U8};
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
    for (int how = MX_DIST_MAX; how <= MX_DIST_MIN; how++) {
      bool unsigned8 = dtypes[d] == MX_U8, with_nan = dtypes[d] == MX_F32;
      double v[11];
      for (int i = 0; i < 11; i++) v[i] = unsigned8 ? held(rank, i) + 3 : held(rank, i);
      if (with_nan && rank == 1) v[5] = NAN;
      mx_tensor *t = mx_to_dtype(mx_from_data(v, MX_SHAPE(11), MX_F64, MX_CPU), dtypes[d]);
      RANK_CHECK(out, t && mx_dist_all_reduce(g, t, (mx_dist_reduce_op)how) == MX_OK, "%s: %s",
                 mx_dtype_name(dtypes[d]), mx_last_error());
      for (int i = 0; i < 11; i++) {
        double want = held(0, i);
        for (int r = 1; r < 3; r++) want = how == MX_DIST_MAX ? fmax(want, held(r, i)) : fmin(want, held(r, i));
        if (unsigned8) want += 3; /* held is in [-3, 3] */
        double got = mx_at(t, MX_SHAPE(i));
        if (with_nan && i == 5) RANK_CHECK(out, isnan(got), "%s: the NaN was lost (%g)", mx_dtype_name(dtypes[d]), got);
        else RANK_CHECK(out, got == want, "%s %s: element %d is %g, not %g", mx_dtype_name(dtypes[d]),
                        how == MX_DIST_MAX ? "max" : "min", i, got, want);
      }
    }
done:;
}

Test(dist, all_reduce_takes_the_maximum_and_the_minimum) {
  rank_report reports[3];
  expect_group_passes(3, 60, extremes, NULL, reports);
}

/* Each rank gathers a transposed (3, 2) view of rank * 100 + i, in float64
 * and bfloat16, and an empty int32 tensor; the result stacks them in rank
 * order. */
static void gathers(mx_process_group *g, int rank, void *ctx, rank_report *out) {
  (void)ctx;
  int world = mx_dist_world_size(g);
  const mx_dtype dtypes[] = {MX_F64, MX_BF16};
  for (int d = 0; d < 2; d++) {
    mx_tensor *base = mx_reshape(mx_arange(rank * 100, rank * 100 + 6, 1, dtypes[d], MX_CPU), MX_SHAPE(2, 3));
    mx_tensor *all = mx_dist_all_gather(g, mx_transpose(base, 0, 1));
    RANK_CHECK(out, all, "%s: %s", mx_dtype_name(dtypes[d]), mx_last_error());
    RANK_CHECK(out, mx_ndim(all) == 3 && mx_size(all, 0) == world && mx_size(all, 1) == 3 && mx_size(all, 2) == 2 &&
                        mx_dtype_of(all) == dtypes[d],
               "%s: the result's shape or dtype", mx_dtype_name(dtypes[d]));
    for (int r = 0; r < world; r++)
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
          double want = r * 100 + 3 * j + i, got = mx_at(all, MX_SHAPE(r, i, j));
          RANK_CHECK(out, got == want, "%s: [%d][%d][%d] is %g, not %g", mx_dtype_name(dtypes[d]), r, i, j, got, want);
        }
  }
  mx_tensor *none = mx_dist_all_gather(g, mx_zeros(MX_SHAPE(0), MX_I32, MX_CPU));
  RANK_CHECK(out, none && mx_ndim(none) == 2 && mx_size(none, 0) == world && mx_numel(none) == 0, "empty: %s",
             mx_last_error());
done:;
}

Test(dist, all_gather_stacks_every_ranks_tensor) {
  rank_report reports[3];
  expect_group_passes(3, 60, gathers, NULL, reports);
  expect_group_passes(2, 60, gathers, NULL, reports);
}

/* Rank 0 sums 4 floats; rank 1 sums, broadcasts or gathers 5 (*ctx: 0, 1
 * or 2): both fail naming both calls, and the group stays broken. */
static void mismatched(mx_process_group *g, int rank, void *ctx, rank_report *out) {
  int call_on_1 = *(int *)ctx;
  mx_tensor *t = mx_ones(MX_SHAPE(rank == 0 ? 4 : 5), MX_F32, MX_CPU);
  mx_status st = rank == 0 || call_on_1 == 0 ? mx_dist_all_reduce(g, t, MX_DIST_SUM)
                 : call_on_1 == 1            ? mx_dist_broadcast(g, t, 0)
                 : mx_dist_all_gather(g, t)  ? MX_OK
                                             : mx_last_status();
  RANK_CHECK(out, st == MX_INVALID_ARGUMENT, "status %d: %s", st, mx_last_error());
  char want[256];
  static const char *const calls[] = {"all_reduce(sum) on 5 float32 elements",
                                      "broadcast on 5 float32 elements from root 0", "all_gather on 5 float32 elements"};
  const char *call1 = calls[call_on_1];
  if (rank == 0)
    snprintf(want, sizeof want, "rank 0 calls all_reduce(sum) on 4 float32 elements, but rank 1 calls %s", call1);
  else
    snprintf(want, sizeof want, "rank 1 calls %s, but rank 0 calls all_reduce(sum) on 4 float32 elements", call1);
  RANK_CHECK(out, strstr(mx_last_error(), want), "the error is '%s', not '%s'", mx_last_error(), want);
  RANK_CHECK(out, mx_dist_barrier(g) == MX_STATE_ERROR, "a broken group took a barrier: %s", mx_last_error());
  RANK_CHECK(out, strstr(mx_last_error(), "mx_dist_barrier: the process group failed earlier (mx_dist_"), "%s",
             mx_last_error());
done:;
}

Test(dist, calls_that_differ_fail_on_every_rank) {
  rank_report reports[2];
  for (int call_on_1 = 0; call_on_1 < 3; call_on_1++) expect_group_passes(2, 60, mismatched, &call_on_1, reports);
}

/* Rank 1 leaves at once; rank 0's sum fails instead of waiting. With
 * *ctx set, rank 1 stays but says nothing for longer than the timeout. */
static void deserted(mx_process_group *g, int rank, void *ctx, rank_report *out) {
  bool silent = *(bool *)ctx;
  mx_tensor *t = mx_ones(MX_SHAPE(8), MX_F32, MX_CPU);
  if (rank == 1) {
    if (!silent) goto done;
    usleep(1500 * 1000);
  }
  mx_status st = mx_dist_all_reduce(g, t, MX_DIST_SUM);
  RANK_CHECK(out, st == MX_BACKEND_ERROR, "status %d: %s", st, mx_last_error());
  const char *want = rank == 1 ? "mx_dist_all_reduce: rank 1: " /* rank 0 gave up and closed */
                     : silent  ? "mx_dist_all_reduce: rank 0: no word from rank 1 within 0.5 s"
                               : "mx_dist_all_reduce: rank 0: ";
  RANK_CHECK(out, strstr(mx_last_error(), want), "the error is '%s'", mx_last_error());
  RANK_CHECK(out, silent || strstr(mx_last_error(), "the peer closed the connection"), "the error is '%s'",
             mx_last_error());
done:;
}

Test(dist, a_peer_that_leaves_or_stays_silent_is_an_error_not_a_hang) {
  rank_report reports[2];
  bool silent = false;
  expect_group_passes(2, 60, deserted, &silent, reports);
  silent = true;
  expect_group_passes(2, 0.5, deserted, &silent, reports);
}

/* CUDA tensors, staged through host memory: sums, averages, broadcasts
 * and gathers land back on the device. Each rank asks for a GPU itself
 * (CUDA does not survive a fork), and the test skips without one. */
static void on_cuda(int rank, int world, int port, void *ctx, rank_report *out) {
  (void)ctx;
  mx_process_group *g = NULL;
  mx_scope *s = mx_scope_begin();
  out->values[0] = mx_cuda_device_count();
  if (out->values[0] == 0) goto done;
  g = mx_dist_init(rank, world, "127.0.0.1", port, 60);
  RANK_CHECK(out, g, "init: %s", mx_last_error());
  mx_tensor *sum = mx_mul_scalar(mx_arange(0, 1000, 1, MX_F32, MX_CUDA), rank + 1);
  mx_tensor *avg = mx_full(MX_SHAPE(3, 5), rank, MX_BF16, MX_CUDA);
  mx_tensor *root = mx_full(MX_SHAPE(7), rank + 10, MX_I64, MX_CUDA);
  RANK_CHECK(out, sum && avg && root, "%s", mx_last_error());
  RANK_CHECK(out, mx_dist_all_reduce(g, sum, MX_DIST_SUM) == MX_OK && mx_dist_all_reduce(g, avg, MX_DIST_AVG) == MX_OK &&
                      mx_dist_broadcast(g, root, 1) == MX_OK,
             "%s", mx_last_error());
  RANK_CHECK(out, mx_device_of(sum) == MX_CUDA && mx_device_of(avg) == MX_CUDA, "a result left the device");
  for (int i = 0; i < 1000; i += 111)
    RANK_CHECK(out, mx_at(sum, MX_SHAPE(i)) == 3.0 * i, "sum[%d] = %g", i, mx_at(sum, MX_SHAPE(i)));
  RANK_CHECK(out, mx_at(avg, MX_SHAPE(2, 4)) == 0.5, "avg = %g", mx_at(avg, MX_SHAPE(2, 4)));
  RANK_CHECK(out, mx_at(root, MX_SHAPE(6)) == 11, "broadcast = %g", mx_at(root, MX_SHAPE(6)));
  mx_tensor *ranks = mx_dist_all_gather(g, mx_full(MX_SHAPE(3), rank, MX_F32, MX_CUDA));
  RANK_CHECK(out, ranks && mx_device_of(ranks) == MX_CUDA, "all_gather: %s", mx_last_error());
  RANK_CHECK(out, mx_at(ranks, MX_SHAPE(0, 2)) == 0 && mx_at(ranks, MX_SHAPE(1, 0)) == 1, "all_gather: %g %g",
             mx_at(ranks, MX_SHAPE(0, 2)), mx_at(ranks, MX_SHAPE(1, 0)));
done:
  mx_scope_end(s);
  mx_dist_free(g);
}

Test(dist, cuda_tensors_go_through_host_memory) {
  rank_report reports[2];
  expect_ranks_pass(2, on_cuda, NULL, reports);
  if (reports[0].values[0] == 0) cr_skip_test("no CUDA device here: collectives on CUDA tensors are not run");
}
