/* What the dist tests share on top of ranks.c (which bench/all_reduce
 * links too, without Criterion): the assertion that every rank passed, and
 * ranks whose work runs inside a process group. */
#ifndef MX_TESTS_DIST_RANK_TESTS_H
#define MX_TESTS_DIST_RANK_TESTS_H

#include "mixgrad.h"
#include "ranks.h"

/* Runs body as ranks 0..world-1 (run_ranks) and asserts that none failed,
 * quoting what each failed rank reported. */
void expect_ranks_pass(int world, rank_body body, void *ctx, rank_report *reports);

/* One rank's work in a joined group; a failed check writes msg (RANK_CHECK). */
typedef void (*group_body)(mx_process_group *g, int rank, void *ctx, rank_report *out);

/* expect_ranks_pass for ranks that each join a group on loopback (with
 * timeout in seconds), run body inside a scope, and leave the group. */
void expect_group_passes(int world, double timeout, group_body body, void *ctx, rank_report *reports);

#endif
