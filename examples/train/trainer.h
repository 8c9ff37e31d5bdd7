/* The training loop the demos share: an optimizer (Nesterov SGD or AdamW)
 * under a one-cycle schedule, autocast and a GradScaler as --amp says,
 * progress lines, a test pass after each epoch, checkpoints, the per-class
 * accuracy table, and the curves as CSV and picture.
 *
 *     mx_demo_task task = {.title = "Fashion-MNIST CNN", .model = net, .train = train, .test = test, ...};
 *     return mx_demo_train(&task, &flags);     // the process's exit code
 */
#ifndef MX_EXAMPLES_TRAIN_TRAINER_H
#define MX_EXAMPLES_TRAIN_TRAINER_H

#include "mixgrad.h"

#include "examples/train/flags.h"

typedef struct {
  const char *title;               /* names the run in the output and the picture */
  mx_module *model;                /* logits (N, classes) from images (N, c, h, w) */
  const mx_dataset *train, *test;  /* test NULL: no test passes */
  const char *const *class_names;  /* train->classes of them */
  /* The recipe. */
  double label_smoothing;
  double weight_decay;
  double sgd_momentum;             /* Nesterov */
  const mx_transform *train_transform, *test_transform; /* the loaders' (NULL: none) */
} mx_demo_task;

/* What mx_demo_train returns, the process's exit code: 0 after the run; 1
 * after an error; 2 when --resume is refused (the checkpoint's run settings
 * differ from the flags' and --allow-change does not name them all);
 * MX_DEMO_DIVERGED when training diverged (a loss or weight not finite, or
 * the GradScaler's guard rails: a step skipped at the scale's floor, or too
 * many skipped in a row), which saves nothing after it. */
#define MX_DEMO_DIVERGED 3

/* Trains task->model as flags say; prints progress and results to stdout,
 * errors to stderr. Returns one of the codes above. */
int mx_demo_train(const mx_demo_task *task, const mx_demo_flags *flags);

#endif
