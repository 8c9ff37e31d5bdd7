/* Running a program as a child process with its output captured (see child_run.h). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "child_run.h"
#include "tmp_files.h"

extern char **environ;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

child_run child_run_argv(const char *const *argv, double limit_seconds) {
  char out_path[1024], err_path[1024]; /* not tmp_path's rotating buffers: the caller's paths stay valid */
  snprintf(out_path, sizeof out_path, "%s/stdout.txt", tmp_dir);
  snprintf(err_path, sizeof err_path, "%s/stderr.txt", tmp_dir);
  posix_spawn_file_actions_t files;
  cr_assert_eq(posix_spawn_file_actions_init(&files), 0);
  cr_assert_eq(posix_spawn_file_actions_addopen(&files, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600), 0);
  cr_assert_eq(posix_spawn_file_actions_addopen(&files, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600), 0);
  double t0 = now();
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &files, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&files);
  cr_assert_eq(rc, 0, "cannot run %s: %s", argv[0], strerror(rc));
  int status;
  pid_t done;
  if (limit_seconds > 0) {
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 && now() - t0 < limit_seconds) usleep(10000);
    if (done == 0) { /* past the limit */
      kill(pid, SIGKILL);
      done = waitpid(pid, &status, 0);
    }
  } else {
    done = waitpid(pid, &status, 0);
  }
  cr_assert_eq(done, pid);
  child_run r = {.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), .seconds = now() - t0};
  r.out = read_file(out_path, NULL);
  r.err = read_file(err_path, NULL);
  unlink(out_path);
  unlink(err_path);
  return r;
}

void child_run_free(child_run *r) {
  free(r->out);
  free(r->err);
}
