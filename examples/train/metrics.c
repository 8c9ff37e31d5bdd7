/* The demos' training curves: kept in memory, written as CSV and drawn by
 * gnuplot, both through the atomic-file module. */
#include "examples/train/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensor/atomic_file.h"

extern char **environ;

/* Grows *items (of size bytes each) to hold one more; false when out of memory. */
static bool grow(void **items, int64_t n, int64_t *cap, size_t size) {
  if (n < *cap) return true;
  int64_t c = *cap ? 2 * *cap : 256;
  void *p = realloc(*items, (size_t)c * size);
  if (!p) return false;
  *items = p;
  *cap = c;
  return true;
}

bool mx_demo_metrics_add_step(mx_demo_metrics *m, mx_demo_step_row row) {
  if (!grow((void **)&m->steps, m->n_steps, &m->cap_steps, sizeof row)) return false;
  m->steps[m->n_steps++] = row;
  return true;
}

bool mx_demo_metrics_add_epoch(mx_demo_metrics *m, mx_demo_epoch_row row) {
  int64_t cap = m->cap_epochs;
  if (!grow((void **)&m->epochs, m->n_epochs, &cap, sizeof row)) return false;
  m->cap_epochs = (int)cap;
  m->epochs[m->n_epochs++] = row;
  return true;
}

void mx_demo_metrics_free(mx_demo_metrics *m) {
  free(m->steps);
  free(m->epochs);
  *m = (mx_demo_metrics){0};
}

static void write_rows(const mx_demo_metrics *m, FILE *f) {
  fprintf(f, "kind,step,epoch,loss,accuracy,lr,loss_scale,skipped,test_loss,test_accuracy\n");
  for (int64_t i = 0; i < m->n_steps; i++) {
    const mx_demo_step_row *r = &m->steps[i];
    fprintf(f, "step,%lld,%d,%.6g,%.6g,%.6g,%.9g,%d,,\n", (long long)r->step, r->epoch, r->loss, r->accuracy, r->lr,
            r->scale, r->skipped ? 1 : 0);
  }
  for (int i = 0; i < m->n_epochs; i++) {
    const mx_demo_epoch_row *r = &m->epochs[i];
    fprintf(f, "epoch,%lld,%d,%.6g,%.6g,,,,%.6g,%.6g\n", (long long)r->step, r->epoch, r->train_loss,
            r->train_accuracy, r->test_loss, r->test_accuracy);
  }
}

bool mx_demo_metrics_write_csv(const mx_demo_metrics *m, const char *path) {
  mx_atomic_file file;
  if (mx_atomic_begin(&file, "--metrics", path) != MX_OK) {
    fprintf(stderr, "%s\n", mx_last_error());
    return false;
  }
  write_rows(m, file.fp);
  if (mx_atomic_commit(&file) != MX_OK) {
    fprintf(stderr, "%s\n", mx_last_error());
    return false;
  }
  return true;
}

/* text as a gnuplot string in single quotes, where only the quote itself
 * is special (doubled), and a control character, which could end the line,
 * becomes a space. */
static void put_quoted(FILE *g, const char *text) {
  fputc('\'', g);
  for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
    if (*c == '\'') fputc('\'', g);
    fputc(*c < 0x20 || *c == 0x7f ? ' ' : *c, g);
  }
  fputc('\'', g);
}

/* The script, with the data inline as gnuplot datablocks ($steps, $epochs,
 * $skips). The picture goes to gnuplot's standard output (set output with no
 * name), which mx_demo_metrics_plot points at the file: no name given by a
 * user is ever part of the script. */
static void write_script(const mx_demo_metrics *m, FILE *g, bool svg, const char *title, bool show_scale) {
  int panels = show_scale ? 3 : 2;
  fprintf(g, "set terminal %s size 900,%d font 'DejaVu Sans,10' noenhanced\n", svg ? "svg" : "pngcairo",
          panels * 260);
  fprintf(g, "set output\n");
  fprintf(g, "$steps << EOD\n");
  /* Columns: step, loss, accuracy, scale, and loss and accuracy averaged
   * over the last 2% of the run's steps (one step is noisy). */
  int64_t window = m->n_steps / 50 > 1 ? m->n_steps / 50 : 1;
  double loss_sum = 0, acc_sum = 0;
  for (int64_t i = 0; i < m->n_steps; i++) {
    const mx_demo_step_row *r = &m->steps[i];
    loss_sum += r->loss, acc_sum += r->accuracy;
    if (i >= window) loss_sum -= m->steps[i - window].loss, acc_sum -= m->steps[i - window].accuracy;
    double k = (double)(i < window ? i + 1 : window);
    fprintf(g, "%lld %.6g %.6g %.9g %.6g %.6g\n", (long long)r->step, r->loss, 100 * r->accuracy, r->scale,
            loss_sum / k, 100 * acc_sum / k);
  }
  fprintf(g, "EOD\n$epochs << EOD\n");
  for (int i = 0; i < m->n_epochs; i++)
    fprintf(g, "%lld %.6g %.6g %.6g %.6g\n", (long long)m->epochs[i].step, m->epochs[i].train_loss,
            100 * m->epochs[i].train_accuracy, m->epochs[i].test_loss, 100 * m->epochs[i].test_accuracy);
  fprintf(g, "EOD\n$skips << EOD\n");
  int64_t skips = 0;
  for (int64_t i = 0; i < m->n_steps; i++)
    if (m->steps[i].skipped) {
      fprintf(g, "%lld %.9g\n", (long long)m->steps[i].step, m->steps[i].scale);
      skips++;
    }
  fprintf(g, "EOD\n");
  fprintf(g,
          "set grid lc rgb '#dddddd'\nset key top right opaque box\nset lmargin 10\nset xrange [0:*]\n"
          "set multiplot layout %d,1 title ",
          panels);
  put_quoted(g, title);
  fputc('\n', g);
  fprintf(g,
          "set ylabel 'loss'\nplot $steps using 1:2 with lines lc rgb '#9ecae1' title 'train (each step)', "
          "$steps using 1:5 with lines lw 2 lc rgb '#08519c' title 'train (running mean)', "
          "$epochs using 1:4 with linespoints pt 7 lw 2 lc rgb '#e6550d' title 'test (end of epoch)'\n");
  fprintf(g,
          "set ylabel 'accuracy (%%)'\nset key bottom right\n%splot $steps using 1:3 with lines lc rgb '#a1d99b' title 'train (each step)', "
          "$steps using 1:6 with lines lw 2 lc rgb '#006d2c' title 'train (running mean)', "
          "$epochs using 1:5 with linespoints pt 7 lw 2 lc rgb '#e6550d' title 'test (end of epoch)'\n",
          show_scale ? "" : "set xlabel 'step'\n");
  if (show_scale) {
    double lo = INFINITY, hi = 0; /* a range with room, also when the scale never moved */
    for (int64_t i = 0; i < m->n_steps; i++) lo = fmin(lo, m->steps[i].scale), hi = fmax(hi, m->steps[i].scale);
    if (m->n_steps) fprintf(g, "set yrange [%.9g:%.9g]\n", lo / 2, hi * 2);
    fprintf(g, "set ylabel 'loss scale'\nset xlabel 'step'\nset key bottom right\nset logscale y 2\nset format y '2^%%L'\n");
    fprintf(g, "plot $steps using 1:4 with steps lw 2 lc rgb '#54278f' title 'GradScaler scale'%s\n",
            skips ? ", $skips using 1:2 with points pt 2 ps 1.2 lc rgb '#d62728' title 'skipped step (inf/NaN)'" : "");
  }
  fprintf(g, "unset multiplot\nset output\n");
}

/* Runs gnuplot (found on PATH, no shell) with its standard input a pipe,
 * returned in *script, and its standard output out_fd. */
static bool start_gnuplot(int out_fd, pid_t *pid, FILE **script) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    fprintf(stderr, "--plot: cannot make a pipe to gnuplot: %s\n", strerror(errno));
    return false;
  }
  posix_spawn_file_actions_t actions;
  int rc = posix_spawn_file_actions_init(&actions);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&actions, pipe_fds[0], 0);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  if (rc == 0) rc = posix_spawnp(pid, "gnuplot", &actions, NULL, (char *const[]){"gnuplot", NULL}, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[0]);
  *script = rc == 0 ? fdopen(pipe_fds[1], "w") : NULL;
  if (*script) return true;
  if (rc == 0) { /* gnuplot runs, but its script cannot be written: end it */
    rc = errno;
    close(pipe_fds[1]);
    waitpid(*pid, NULL, 0);
  } else {
    close(pipe_fds[1]);
  }
  fprintf(stderr, "--plot: cannot run gnuplot: %s%s\n", strerror(rc),
          rc == ENOENT ? " (apt-get install gnuplot-nox)" : "");
  return false;
}

bool mx_demo_metrics_plot(const mx_demo_metrics *m, const char *path, const char *title, bool show_scale) {
  mx_atomic_file file;
  if (mx_atomic_begin(&file, "--plot", path) != MX_OK) {
    fprintf(stderr, "%s\n", mx_last_error());
    return false;
  }
  pid_t pid;
  FILE *g;
  if (!start_gnuplot(fileno(file.fp), &pid, &g)) {
    mx_atomic_abort(&file);
    return false;
  }
  /* A gnuplot that quits early makes the writes fail (EPIPE) rather than
   * end the demo with SIGPIPE; its exit status says what went wrong. */
  struct sigaction ignore = {.sa_handler = SIG_IGN}, old_action;
  sigaction(SIGPIPE, &ignore, &old_action);
  size_t len = strlen(path);
  write_script(m, g, len >= 4 && !strcmp(path + len - 4, ".svg"), title, show_scale);
  fclose(g); /* gnuplot reads to the end, draws and exits */
  sigaction(SIGPIPE, &old_action, NULL);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) continue;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "--plot: gnuplot failed (%s %d); %s was left as it was\n",
            WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), path);
    mx_atomic_abort(&file);
    return false;
  }
  if (mx_atomic_commit(&file) != MX_OK) {
    fprintf(stderr, "%s\n", mx_last_error());
    return false;
  }
  return true;
}
