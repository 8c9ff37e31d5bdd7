/* Forked ranks for the process-group tests (see ranks.h). */
#include "ranks.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

static bool read_all(int fd, void *buf, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r <= 0) return false;
    got += (size_t)r;
  }
  return true;
}

int run_ranks(int world, rank_body body, void *ctx, rank_report *reports) {
  int port = free_port(), failed = 0;
  pid_t pids[16];
  int pipes[16];
  fflush(NULL);
  for (int r = 0; r < world; r++) {
    int p[2];
    if (port < 0 || world > 16 || pipe(p) != 0) return world;
    pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      alarm(120);
      rank_report out;
      memset(&out, 0, sizeof out);
      body(r, world, port, ctx, &out);
      ssize_t w = write(p[1], &out, sizeof out);
      _exit(w == (ssize_t)sizeof out && !out.msg[0] ? 0 : 1);
    }
    close(p[1]);
    pids[r] = pid, pipes[r] = p[0];
  }
  for (int r = 0; r < world; r++) {
    memset(&reports[r], 0, sizeof reports[r]);
    bool got = pids[r] > 0 && read_all(pipes[r], &reports[r], sizeof reports[r]);
    close(pipes[r]);
    int status = 0;
    if (pids[r] > 0) waitpid(pids[r], &status, 0);
    if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      failed++;
      if (!reports[r].msg[0])
        snprintf(reports[r].msg, sizeof reports[r].msg, "rank %d ended with %s %d", r,
                 WIFSIGNALED(status) ? "signal" : "exit status",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
  }
  return failed;
}
