#include "examples/train/progress.h"

#include <math.h>
#include <time.h>
#include <unistd.h>

double mx_demo_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void mx_demo_progress_begin(mx_demo_progress *p, FILE *out, int epoch, int epochs, int64_t total, int64_t done,
                            bool show_scale) {
  *p = (mx_demo_progress){.out = out, .tty = isatty(fileno(out)) != 0, .epoch = epoch, .epochs = epochs,
                          .total = total, .done = done, .start = mx_demo_now(), .last_tenth = done * 10 / total,
                          .show_scale = show_scale};
}

static void format_seconds(double s, char *buf, size_t n) {
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* "epoch 1/3 [#####.....] 234/469 loss 0.4123 acc 85.3% 2345 img/s ETA 0:12 scale 2^16 skipped 2" */
static void draw(mx_demo_progress *p, double scale, int64_t skipped, bool final) {
  double elapsed = mx_demo_now() - p->start;
  char when[32];
  if (final) format_seconds(elapsed, when, sizeof when);
  else format_seconds(p->run_steps ? elapsed / (double)p->run_steps * (double)(p->total - p->done) : 0, when,
                      sizeof when);
  if (p->tty) fputs("\r\033[K", p->out);
  fprintf(p->out, "epoch %d/%d ", p->epoch + 1, p->epochs);
  if (p->tty) {
    enum { WIDTH = 20 };
    int filled = (int)(WIDTH * p->done / p->total);
    fputc('[', p->out);
    for (int i = 0; i < WIDTH; i++) fputc(i < filled ? '#' : '.', p->out);
    fputs("] ", p->out);
  }
  double n = p->samples ? (double)p->samples : 1;
  fprintf(p->out, "%lld/%lld  loss %.4f  acc %5.2f%%  %.0f samples/s  %s %s", (long long)p->done,
          (long long)p->total, p->loss_sum / n, 100.0 * (double)p->correct / n,
          elapsed > 0 ? (double)p->samples / elapsed : 0.0, final ? "time" : "ETA", when);
  if (p->show_scale) {
    double e = log2(scale);
    if (scale > 0 && e == floor(e)) fprintf(p->out, "  scale 2^%.0f", e);
    else fprintf(p->out, "  scale %g", scale);
    fprintf(p->out, "  skipped %lld", (long long)skipped);
  }
  if (!p->tty || final) fputc('\n', p->out);
  fflush(p->out);
}

void mx_demo_progress_step(mx_demo_progress *p, int64_t batch, double loss, int64_t correct, double scale,
                           int64_t skipped) {
  p->done++;
  p->run_steps++;
  p->samples += batch;
  p->loss_sum += loss * (double)batch;
  p->correct += correct;
  if (p->done == p->total) return; /* the end draws the last line */
  double t = mx_demo_now();
  if (p->tty) {
    if (t - p->last_draw < 0.1) return;
  } else {
    int64_t tenth = p->done * 10 / p->total;
    if (tenth == p->last_tenth) return;
    p->last_tenth = tenth;
  }
  p->last_draw = t;
  draw(p, scale, skipped, false);
}

void mx_demo_progress_end(mx_demo_progress *p, double scale, int64_t skipped) { draw(p, scale, skipped, true); }
