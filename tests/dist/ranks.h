/* Runs a test's ranks as processes forked from the test, one process
 * group over loopback, and brings back what each rank reports. Fork before
 * the test itself touches mixgrad: the children then start clean (no
 * OpenMP threads, no caches) as launched ranks do. */
#ifndef MX_TESTS_DIST_RANKS_H
#define MX_TESTS_DIST_RANKS_H

#include <stdbool.h>
#include <stdio.h>

#define RANK_VALUES 512

typedef struct {
  char msg[512];                /* "" when every check on the rank passed */
  int n_values;
  double values[RANK_VALUES];   /* what the rank reports for the test to compare */
} rank_report;

/* A loopback port nobody listens on now (the kernel's pick for port 0). */
int free_port(void);

/* One rank's work; a failed check writes msg (see RANK_CHECK). */
typedef void (*rank_body)(int rank, int world, int port, void *ctx, rank_report *out);

/* Runs body as ranks 0..world-1 in forked processes with a free loopback
 * port for the group, waits for them (a rank is killed after 120 s), and
 * fills reports[rank]; a rank that died says so in its msg. Returns how
 * many ranks failed. */
int run_ranks(int world, rank_body body, void *ctx, rank_report *reports);

/* In a rank body: records the first failed check and leaves the body. */
#define RANK_CHECK(out, cond, ...)                                                           \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      if (!(out)->msg[0]) snprintf((out)->msg, sizeof (out)->msg, __VA_ARGS__);              \
      goto done;                                                                             \
    }                                                                                        \
  } while (0)

#endif
