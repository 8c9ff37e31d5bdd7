/* AMP you can see: log2-magnitude histograms of every parameter gradient
 * (scaled and true, taken inside the GradScaler's fused unscale pass), of
 * every layer's output and of its gradient, sampled every N steps and kept
 * on the device, plus the loss and loss-scale trajectory; and the HTML page
 * that draws them (docs/AMP.md, section 9).
 *
 *     mx_amp_stats *st = mx_amp_stats_new(scaler, 50);            // sample every 50 steps
 *     mx_amp_stats_name_params(st, n, params, names);              // "0.weight", ...
 *     mx_module_set_output_hook(net, mx_amp_stats_output_hook, st); // layer outputs and their gradients
 *     for (...) {
 *       mx_amp_stats_step_begin(st);
 *       ... forward, scaled backward, mx_scaler_step, mx_scaler_update ...
 *       mx_amp_stats_step_end(st, loss);
 *     }
 *     mx_amp_report_write_html("report/index.html", st, &(mx_amp_report_opts){.title = "my run"});
 *     mx_amp_stats_free(st);
 *
 * Nothing here waits for the device during training: counts are added up by
 * kernels into device tensors, and only the report (and the readers below)
 * copy them back.
 */
#ifndef MX_AMP_STATS_H
#define MX_AMP_STATS_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/scaler.h"
#include "kernels/math.h"
#include "tensor/tensor.h"

MX_API_BEGIN

typedef struct mx_amp_stats mx_amp_stats;

/* Watches scaler (NULL: no scaler; then gradients are histogrammed unscaled
 * at step_end) and samples steps 0, every, 2 every, ... (every >= 1). One
 * watcher per scaler; free the watcher before the scaler, or after (it is
 * told). */
mx_amp_stats *mx_amp_stats_new(mx_scaler *scaler, int64_t every);
void mx_amp_stats_free(mx_amp_stats *st);

/* Names the parameters for the report (copied); unnamed ones are "param i". */
mx_status mx_amp_stats_name_params(mx_amp_stats *st, int n, mx_tensor *const *params, const char *const *names);

/* Opens a training step (before its forward): returns whether it is sampled. */
bool mx_amp_stats_step_begin(mx_amp_stats *st);
/* Closes it (after mx_scaler_update): records the loss, the scale and whether
 * the step was skipped, with device copies. */
mx_status mx_amp_stats_step_end(mx_amp_stats *st, const mx_tensor *loss);

/* For mx_module_set_output_hook (nn/module.h), ctx the watcher: on a sampled
 * step, histograms the output of every layer (name "": the root, skipped)
 * and, through a gradient hook, the gradient that reaches it in backward
 * (so free the watcher only after that backward has run). */
void mx_amp_stats_output_hook(const char *name, const char *type, const mx_tensor *out, void *ctx);

/* --- reading back (each a device read) ------------------------------------------------ */

typedef enum {
  MX_AMP_HIST_ACTIVATION,      /* a layer's output */
  MX_AMP_HIST_ACTIVATION_GRAD, /* the gradient reaching it, as backward computed it (scaled) */
  MX_AMP_HIST_GRAD_SCALED,     /* a parameter's gradient before unscaling */
  MX_AMP_HIST_GRAD,            /* the same after unscaling: the true gradient */
} mx_amp_hist_kind;

int mx_amp_stats_num_samples(const mx_amp_stats *st);
/* The step (0-based) sample i was taken at, or -1. */
int64_t mx_amp_stats_sample_step(const mx_amp_stats *st, int i);
/* Sample i's histogram of the layer or parameter `name`: counts[MX_AMP_HIST_BINS]
 * (bins as in kernels/math.h); an error naming the name when it has none. */
mx_status mx_amp_stats_histogram(const mx_amp_stats *st, int i, const char *name, mx_amp_hist_kind kind,
                                 int64_t *counts);
/* The histogram of x now: counts[MX_AMP_HIST_BINS] (the same kernel). */
mx_status mx_amp_histogram(const mx_tensor *x, int64_t *counts);

/* --- the report ------------------------------------------------------------------------ */

typedef struct {
  const char *title;   /* the page's heading (NULL: "AMP report") */
  mx_dtype amp;        /* the autocast dtype of the run: MX_F16, MX_BF16, or MX_F32 for none */
  const char *command; /* how to reproduce the run, shown on the page (NULL: none) */
} mx_amp_report_opts;

/* Writes a self-contained HTML page (inline SVG, no script, no network) to
 * path, atomically: the loss and loss scale, the histograms against
 * float16's and bfloat16's ranges at the start, once the scale settled and
 * at the end, the underflow shares per layer, this thread's per-op autocast
 * table (mx_amp_report's counts) and a verdict. */
mx_status mx_amp_report_write_html(const char *path, const mx_amp_stats *st, const mx_amp_report_opts *opts);

MX_API_END

#endif
