/* The training curves a demo records: one row per step (loss, accuracy,
 * learning rate, loss scale, skipped or not) and one per epoch (train and
 * test loss and accuracy), written as CSV (--metrics) and drawn by gnuplot
 * (--plot). */
#ifndef MX_EXAMPLES_TRAIN_METRICS_H
#define MX_EXAMPLES_TRAIN_METRICS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
  int64_t step; /* 1-based, counted over the whole run */
  int epoch;    /* 1-based */
  double loss, accuracy, lr, scale;
  bool skipped;
} mx_demo_step_row;

typedef struct {
  int epoch;    /* 1-based */
  int64_t step; /* the last step of the epoch */
  double train_loss, train_accuracy, test_loss, test_accuracy, seconds;
} mx_demo_epoch_row;

typedef struct {
  mx_demo_step_row *steps;
  int64_t n_steps, cap_steps;
  mx_demo_epoch_row *epochs;
  int n_epochs, cap_epochs;
} mx_demo_metrics;

/* Return false when out of memory. */
bool mx_demo_metrics_add_step(mx_demo_metrics *m, mx_demo_step_row row);
bool mx_demo_metrics_add_epoch(mx_demo_metrics *m, mx_demo_epoch_row row);
void mx_demo_metrics_free(mx_demo_metrics *m);

/* The CSV: a header line
 *   kind,step,epoch,loss,accuracy,lr,loss_scale,skipped,test_loss,test_accuracy
 * then a "step" row per step and an "epoch" row per epoch (its train loss
 * and accuracy, test loss and accuracy, at its last step); fields a kind
 * lacks are empty. Accuracies are fractions. Both files are written
 * atomically (tensor/output_file.h): a special file at path is refused and
 * a failed write leaves path as it was. Returns false with a message on
 * stderr. */
bool mx_demo_metrics_write_csv(const mx_demo_metrics *m, const char *path);
/* Draws loss and accuracy over the steps (with the epochs' test values) and,
 * when show_scale, the loss scale on a log axis with skipped steps marked;
 * png or svg by path's extension. Runs gnuplot (no shell), which draws into
 * its standard output, the temporary file: path never reaches its script.
 * False with a message on stderr when that fails. */
bool mx_demo_metrics_plot(const mx_demo_metrics *m, const char *path, const char *title, bool show_scale);

#endif
