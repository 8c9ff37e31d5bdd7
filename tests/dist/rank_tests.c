/* The dist tests' assertions over forked ranks (see rank_tests.h). */
#include "rank_tests.h"

#include <criterion/criterion.h>
#include <string.h>

void expect_ranks_pass(int world, rank_body body, void *ctx, rank_report *reports) {
  int failed = run_ranks(world, body, ctx, reports);
  char all[2048] = "";
  for (int r = 0; r < world; r++)
    if (reports[r].msg[0]) snprintf(all + strlen(all), sizeof all - strlen(all), "[rank %d] %s ", r, reports[r].msg);
  cr_assert_eq(failed, 0, "%d of %d ranks failed: %s", failed, world, all);
}

typedef struct {
  group_body body;
  void *ctx;
  double timeout;
} group_job;

static void join_and_run(int rank, int world, int port, void *ctx, rank_report *out) {
  const group_job *job = ctx;
  mx_process_group *g = mx_dist_init(rank, world, "127.0.0.1", port, job->timeout);
  mx_scope *s = mx_scope_begin();
  if (g) job->body(g, rank, job->ctx, out);
  else snprintf(out->msg, sizeof out->msg, "init: %s", mx_last_error());
  mx_scope_end(s);
  mx_dist_free(g);
}

void expect_group_passes(int world, double timeout, group_body body, void *ctx, rank_report *reports) {
  group_job job = {body, ctx, timeout};
  expect_ranks_pass(world, join_and_run, &job, reports);
}
