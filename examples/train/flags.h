/* The command line the training demos share (examples/mnist,
 * examples/cifar10): --model, --amp, --device, --epochs, --batch, --lr,
 * --optimizer, --seed, --steps, --save, --resume, --allow-change,
 * --metrics, --plot, --amp-report, --data, --synthetic, --cuda-graph, --channels-last, --help. Each demo fills
 * in its defaults first. */
#ifndef MX_EXAMPLES_TRAIN_FLAGS_H
#define MX_EXAMPLES_TRAIN_FLAGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/base.h"

typedef struct {
  const char *model;      /* the demo's model names */
  mx_dtype amp;           /* MX_F32 (off), MX_F16 or MX_BF16 */
  mx_device device;       /* MX_CPU or MX_CUDA */
  int epochs;             /* > 0 */
  int64_t batch;          /* > 0 */
  double lr;              /* the peak learning rate, > 0 */
  const char *optimizer;  /* "sgd" or "adam" */
  uint64_t seed;
  int64_t steps;          /* stop after this many training steps; 0: run every epoch */
  const char *save;       /* checkpoint written after each epoch and at the end; NULL: none */
  const char *resume;     /* checkpoint to go on from; NULL: start afresh */
  const char *allow_change; /* with resume: the settings (comma-separated) that may differ from its; NULL: none */
  const char *metrics;    /* CSV of the curves; NULL: none */
  const char *plot;       /* picture of the curves (.png or .svg); NULL: none */
  const char *amp_report; /* folder the AMP report (index.html) goes to, made if missing; NULL: none */
  const char *data;       /* the dataset's folder */
  int64_t synthetic;      /* > 0: that many generated training samples instead of data */
  bool cuda_graph;        /* --cuda-graph: full batches replay a captured step (kernels/cuda_graph.h) */
  bool channels_last;     /* --channels-last (no value): the images laid out channels-last (mx_to_channels_last) */
} mx_demo_flags;

/* What a demo says in --help: its name and purpose, its models (the first is
 * the default) and a line on its data. */
typedef struct {
  const char *program, *summary;
  const char *const *models;
  int n_models;
  const char *data_help;
} mx_demo_usage;

void mx_demo_print_usage(const mx_demo_usage *u, const mx_demo_flags *defaults, FILE *out);
/* Parses argv over the defaults in *flags, then checks the paths: none may
 * hold a control character, and --save, --metrics and --plot must be
 * writable (an existing folder that takes files; no special file at the
 * path; gnuplot on PATH for --plot), so a bad one stops the run before any
 * data is loaded. Returns 0 to train, 1 when --help was printed (exit 0), 2
 * after a message naming the bad flag or value on stderr (exit 2). */
int mx_demo_parse_flags(int argc, char **argv, const mx_demo_usage *u, mx_demo_flags *flags);
/* Whether --allow-change names the setting ("epochs", "lr", ...). */
bool mx_demo_change_allowed(const mx_demo_flags *flags, const char *setting);
/* "off", "f16", "bf16" */
const char *mx_demo_amp_name(mx_dtype amp);

#endif
