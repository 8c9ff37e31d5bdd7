/* A progress line per epoch: step/total, running loss and accuracy,
 * samples/s, ETA and, when a GradScaler is on, the loss scale and the steps
 * it skipped. On a terminal one line redraws itself in place (at most ten
 * times a second); otherwise a plain line is printed every tenth of the
 * epoch, so logs stay readable. */
#ifndef MX_EXAMPLES_TRAIN_PROGRESS_H
#define MX_EXAMPLES_TRAIN_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
  FILE *out;
  bool tty;
  int epoch, epochs;
  int64_t total, done;  /* steps in the epoch, steps behind us */
  int64_t run_steps;    /* steps taken since begin (a resumed epoch starts part-way) */
  int64_t samples;      /* samples since begin */
  double loss_sum;      /* sum over those samples of loss, and of right answers */
  int64_t correct;
  double start, last_draw;
  int64_t last_tenth;
  bool show_scale;
} mx_demo_progress;

/* Seconds on a monotonic clock. */
double mx_demo_now(void);
/* Starts epoch (0-based) of epochs, of total steps of which done are
 * behind us already (a resumed run). */
void mx_demo_progress_begin(mx_demo_progress *p, FILE *out, int epoch, int epochs, int64_t total, int64_t done,
                            bool show_scale);
/* One step of batch samples: its mean loss and how many it got right, the
 * loss scale and the skipped steps so far. */
void mx_demo_progress_step(mx_demo_progress *p, int64_t batch, double loss, int64_t correct, double scale,
                           int64_t skipped);
/* Ends the line with the epoch's time. */
void mx_demo_progress_end(mx_demo_progress *p, double scale, int64_t skipped);

#endif
