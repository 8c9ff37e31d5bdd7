/* The dist tests as one MPI program, run by meson under mpirun -np 2, 3
 * and 5 (tests/dist/meson.build), and correct over 1 to 8 ranks (more are
 * refused with a message): every test on every rank (those that need more
 * ranks skipped): rank 0 prints "dist over N ranks: starting", a line per
 * test, and "dist over N ranks: N passed, N failed".
 *
 * With --scenario, a rank misbehaves instead and test_dist.c's dist_jobs
 * tests check how the job ends: "kill" (rank 1 dies by SIGKILL after a
 * first sum), "stop" (rank 1 stops itself with SIGSTOP; the others wait
 * past the timeout that MX_DIST_TIMEOUT gives), "ports" (each rank says
 * how many TCP ports it listens on, after a sum). */
#include <dirent.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mpi_tests.h"

/* The most ranks the tests hold for: past 8, sums such as 55 * 5 leave uint8
 * and bfloat16's exact integers (mpi_collectives.c, mpi_fold.c). */
#define MPI_MAX_RANKS 8

/* Every rank sums twice; rank 1 is gone before the second. Nothing should
 * return from that second sum. */
static int scenario(const char *which) {
  mx_process_group *g = mx_dist_init(0);
  if (!g) return fprintf(stderr, "init: %s\n", mx_last_error()), 1;
  mx_tensor *t = mx_ones(MX_SHAPE(8), MX_F32, MX_CPU);
  if (mx_dist_all_reduce(g, t, MX_DIST_SUM) != MX_OK) return fprintf(stderr, "%s\n", mx_last_error()), 1;
  if (mx_dist_rank(g) == 1) raise(!strcmp(which, "kill") ? SIGKILL : SIGSTOP);
  mx_status st = mx_dist_all_reduce(g, t, MX_DIST_SUM);
  fprintf(stderr, "rank %d: the sum after rank 1 left returned: %s\n", mx_dist_rank(g),
          st == MX_OK ? "MX_OK" : mx_last_error());
  mx_release(t);
  mx_dist_free(g);
  return 1;
}

/* Whether socket inode `inode` listens, by /proc/net/tcp and tcp6 (state 0A). */
static int listens(unsigned long inode) {
  const char *tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  for (int t = 0; t < 2; t++) {
    FILE *f = fopen(tables[t], "r");
    char line[512], state[8];
    unsigned long ino;
    while (f && fgets(line, sizeof line, f))
      if (sscanf(line, "%*s %*s %*s %7s %*s %*s %*s %*s %*s %lu", state, &ino) == 2 && !strcmp(state, "0A") &&
          ino == inode) {
        fclose(f);
        return 1;
      }
    if (f) fclose(f);
  }
  return 0;
}

/* The TCP sockets this process listens on: its descriptors that are
 * sockets in the LISTEN state (-1 when /proc cannot say). */
static int listening_sockets(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    char path[300], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(path, target, sizeof target - 1);
    unsigned long inode;
    if (len <= 0) continue;
    target[len] = 0;
    if (sscanf(target, "socket:[%lu]", &inode) == 1) n += listens(inode);
  }
  closedir(d);
  return n;
}

/* Every rank sums once (the transports are up) and prints its count. */
static int ports_scenario(void) {
  mx_process_group *g = mx_dist_init(0);
  if (!g) return fprintf(stderr, "init: %s\n", mx_last_error()), 1;
  mx_tensor *t = mx_ones(MX_SHAPE(8), MX_F32, MX_CPU);
  mx_status st = mx_dist_all_reduce(g, t, MX_DIST_SUM);
  if (st == MX_OK) printf("rank %d: %d listening TCP sockets\n", mx_dist_rank(g), listening_sockets());
  else fprintf(stderr, "%s\n", mx_last_error());
  fflush(stdout);
  mx_release(t);
  mx_dist_free(g);
  return st == MX_OK ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--scenario")) return strcmp(argv[2], "ports") ? scenario(argv[2]) : ports_scenario();
  mx_process_group *keep = mx_dist_init(0); /* keeps MPI up between the tests' own groups */
  if (!keep) return fprintf(stderr, "init: %s\n", mx_last_error()), 1;
  if (mx_dist_world_size(keep) > MPI_MAX_RANKS) { /* every rank returns: a clean failure */
    if (mx_dist_rank(keep) == 0)
      printf("dist over %d ranks: the tests' values are exact over at most %d ranks; run fewer\n",
             mx_dist_world_size(keep), MPI_MAX_RANKS);
    mx_dist_free(keep);
    return 1;
  }
  /* scripts/count-tests counts a run that starts and ends without the summary line (MPI_Abort, a crash) as failed */
  if (mx_dist_rank(keep) == 0) printf("dist over %d ranks: starting\n", mx_dist_world_size(keep));
  fflush(stdout);
  mpi_counts counts = {0, 0, 0};
  mpi_run_tests(collective_tests, n_collective_tests, &counts);
  mpi_run_tests(ddp_tests, n_ddp_tests, &counts);
  mpi_run_tests(async_tests, n_async_tests, &counts);
  mpi_run_tests(fold_tests, n_fold_tests, &counts);
  if (mx_dist_rank(keep) == 0) {
    if (counts.skipped) printf("dist over %d ranks: %d skipped (too few ranks)\n", mx_dist_world_size(keep),
                               counts.skipped);
    printf("dist over %d ranks: %d passed, %d failed\n", mx_dist_world_size(keep), counts.passed, counts.failed);
  }
  mx_dist_free(keep);
  return counts.failed ? 1 : 0;
}
