/* The watcher's data read back to the host, for the HTML report (not installed). */
#ifndef MX_AMP_STATS_INTERNAL_H
#define MX_AMP_STATS_INTERNAL_H

#include "amp/stats.h"

/* One layer (output and its gradient) or parameter (gradient scaled and true). */
typedef struct {
  char *name, *type;  /* type: the layer's ("Conv2d"), or "parameter" */
  mx_dtype dtype;     /* of the output, or of the gradient */
  int64_t hist[2][MX_AMP_HIST_BINS]; /* layer: output, gradient (scaled); parameter: scaled, true */
  bool has_grad;      /* a layer whose output got a gradient in backward */
} mx__amp_site;

typedef struct {
  int64_t step;
  double scale;       /* the loss scale of the step (1 without a scaler) */
  mx__amp_site *layers, *params;
  int n_layers, n_params;
} mx__amp_sample;

typedef struct {
  int64_t steps;      /* steps closed */
  float *loss, *scale; /* per step; scale is the one the step used */
  bool *skipped;      /* per step */
  bool scaler_enabled;
  mx__amp_sample *samples;
  int n_samples;
} mx__amp_snapshot;

/* Reads st back (a device sync). */
mx_status mx__amp_stats_snapshot(const mx_amp_stats *st, mx__amp_snapshot *out);
void mx__amp_snapshot_free(mx__amp_snapshot *s);

#endif
