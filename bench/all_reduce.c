/* mixgrad's collectives timed on 2 ranks on this machine (bench/all_reduce.py is
 * PyTorch's twin, on gloo): the ranks are forked here, meet on a free
 * loopback port, and rank 0 prints one JSON line per measurement:
 *
 *     {"impl":"mixgrad","op":"all_reduce","bytes":2678824,"times_ms":[...]}
 *
 * Each timing is one call, back to back after warm-up calls; all_reduce
 * sums float32 tensors of the sizes below (2,678,824 bytes are the MNIST
 * MLP's gradients), barrier waits for the other rank.
 *
 *     build/bench/all_reduce [--quick]      # OMP_NUM_THREADS=1 per rank is the fair setting
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "mixgrad.h"

#define WORLD 2

static const long sizes[] = {4096, 262144, 2678824, 16777216}; /* bytes */

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

static void report(int rank, const char *op, long bytes, const double *times, int n) {
  if (rank != 0) return;
  printf("{\"impl\":\"mixgrad\",\"op\":\"%s\",\"bytes\":%ld,", op, bytes);
  bench_json_doubles(stdout, "times_ms", times, n);
  printf("}\n");
}

/* One rank's measurements; returns the process's exit code. */
static int rank_main(int rank, int port, bool quick) {
  mx_process_group *g = mx_dist_init(rank, WORLD, "127.0.0.1", port, 60);
  if (!g) return fprintf(stderr, "all_reduce: %s\n", mx_last_error()), 1;
  int reps = quick ? 5 : 50;
  double times[50];
  int rc = 0;
  for (size_t k = 0; rc == 0 && k < sizeof sizes / sizeof *sizes; k++) {
    mx_tensor *t = mx_ones(MX_SHAPE(sizes[k] / 4), MX_F32, MX_CPU);
    for (int i = -5; rc == 0 && i < reps; i++) {
      double t0 = bench_now_ms();
      if (mx_dist_all_reduce(g, t, MX_DIST_SUM) != MX_OK) rc = 1;
      if (i >= 0) times[i] = bench_now_ms() - t0;
    }
    mx_release(t);
    if (rc == 0) report(rank, "all_reduce", sizes[k], times, reps);
  }
  for (int i = -5; rc == 0 && i < reps; i++) {
    double t0 = bench_now_ms();
    if (mx_dist_barrier(g) != MX_OK) rc = 1;
    if (i >= 0) times[i] = bench_now_ms() - t0;
  }
  if (rc == 0) report(rank, "barrier", 0, times, reps);
  if (rc) fprintf(stderr, "all_reduce: rank %d: %s\n", rank, mx_last_error());
  fflush(stdout);
  mx_dist_free(g);
  return rc;
}

int main(int argc, char **argv) {
  bool quick = argc > 1 && !strcmp(argv[1], "--quick");
  int port = free_port();
  if (port < 0) return perror("all_reduce: free port"), 1;
  fflush(stdout);
  pid_t pids[WORLD];
  for (int r = 0; r < WORLD; r++)
    if ((pids[r] = fork()) == 0) _exit(rank_main(r, port, quick));
  int rc = 0;
  for (int r = 0; r < WORLD; r++) {
    int status = 0;
    if (pids[r] < 0 || waitpid(pids[r], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) rc = 1;
  }
  return rc;
}
