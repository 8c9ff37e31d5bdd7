/* The GradScaler: loss scaling for float16 training (torch.amp.GradScaler,
 * plus MegEngine's one-call backward and ways to watch it).
 *
 * scale multiplies the loss by S so small gradients survive float16;
 * unscale divides the gradients by S and checks them for inf/NaN in one
 * fused pass that writes a device flag (found_inf); step runs the
 * optimizer, which skips the update on the device when the flag is set;
 * update halves S after an overflow and doubles it after growth_interval
 * clean steps. Nothing here waits for the device unless it returns a
 * number to the host (get_scale, stats, reports, step info).
 */
#ifndef MX_AMP_SCALER_H
#define MX_AMP_SCALER_H

#include <stdio.h>

#include "optim/optimizer.h"
#include "tensor/tensor.h"

MX_API_BEGIN

typedef struct mx_scaler mx_scaler;

typedef struct {
  double init_scale;       /* 2^16 */
  double growth_factor;    /* 2, must be > 1 */
  double backoff_factor;   /* 0.5, must be in (0, 1) */
  int64_t growth_interval; /* 2000, must be >= 1 */
  bool enabled;            /* false: losses pass through, steps are plain */
  /* guard rails, off (0) by default so the defaults stay PyTorch's */
  double min_scale, max_scale;   /* bounds the update keeps the scale within */
  int64_t max_consecutive_skips; /* more skips in a row: update fails with the overflow report (it reads the
                                  * count from the device, unless step's info has read the step clean) */
} mx_scaler_opts;

mx_scaler_opts mx_scaler_defaults(void);
/* NULL opts: the defaults. Invalid options are an error naming the value. */
mx_scaler *mx_scaler_new(const mx_scaler_opts *opts);
void mx_scaler_free(mx_scaler *s);

/* loss * scale (a new tensor; the loss times 1 when disabled). The scale
 * lives on the first loss's device. */
mx_tensor *mx_scaler_scale(mx_scaler *s, const mx_tensor *loss);
mx_status mx_scaler_scale_list(mx_scaler *s, int n, mx_tensor *const *losses, mx_tensor **scaled);

/* Divides opt's gradients by the scale and records whether any held inf or
 * NaN. Once per optimizer between updates, and not after its step.
 * Gradients must be float32, float64 or bfloat16. */
mx_status mx_scaler_unscale(mx_scaler *s, mx_optimizer *opt);
/* The flag the last unscale of opt wrote (float32 0-d on the scale's
 * device; nonzero: a gradient held inf/NaN), which step and update read.
 * For code that must agree it across processes (mx_ddp_unscale all-reduces
 * it with max); writing it decides whether the step is skipped. Between
 * unscale and step only; NULL with the error otherwise. */
mx_tensor *mx_scaler_found_inf(mx_scaler *s, const mx_optimizer *opt);

/* What a step did. Filling it reads the device flag (a sync on a GPU). */
typedef struct {
  bool stepped;              /* false: skipped, gradients held inf or NaN */
  int64_t infs, nans;        /* how many values, over all the gradients */
  int params_with_nonfinite; /* how many parameters held them */
  double scale;              /* the loss scale the gradients were unscaled by */
} mx_scaler_step_info;
/* Unscales (unless done), then steps opt, skipping the update on the
 * device if a gradient held inf/NaN. info may be NULL (no sync). */
mx_status mx_scaler_step(mx_scaler *s, mx_optimizer *opt, mx_scaler_step_info *info);

/* Adapts the scale from the checks since the last update: backoff after
 * inf/NaN, growth after growth_interval clean steps. */
mx_status mx_scaler_update(mx_scaler *s);
/* Sets the scale to new_scale instead (the growth tracker is kept). */
mx_status mx_scaler_update_to(mx_scaler *s, double new_scale);

/* MegEngine's GradScaler.backward: scales loss, runs backward, and with
 * unscale_grad unscales the gradients of every leaf the backward reached;
 * when one held inf/NaN those gradients are dropped (set to none, so the
 * next plain optimizer step leaves the parameters alone) — this reads the
 * flag from the device. update_scale then updates (ignored without
 * unscale_grad). */
mx_status mx_scaler_backward(mx_scaler *s, mx_tensor *loss, bool unscale_grad, bool update_scale);

double mx_scaler_get_scale(const mx_scaler *s); /* 1.0 when disabled */
double mx_scaler_get_growth_factor(const mx_scaler *s);
double mx_scaler_get_backoff_factor(const mx_scaler *s);
int64_t mx_scaler_get_growth_interval(const mx_scaler *s);
mx_status mx_scaler_set_growth_factor(mx_scaler *s, double growth_factor);
mx_status mx_scaler_set_backoff_factor(mx_scaler *s, double backoff_factor);
mx_status mx_scaler_set_growth_interval(mx_scaler *s, int64_t growth_interval);
bool mx_scaler_is_enabled(const mx_scaler *s);
/* The scale as a device tensor (borrowed; NULL before the first scale). */
const mx_tensor *mx_scaler_scale_tensor(const mx_scaler *s);

/* state_dict / load_state_dict. A disabled scaler's state is empty
 * (present = false); loading an empty state is an error. */
typedef struct {
  bool present;
  double scale, growth_factor, backoff_factor;
  int64_t growth_interval, growth_tracker;
} mx_scaler_state;
mx_status mx_scaler_state_dict(const mx_scaler *s, mx_scaler_state *out);
mx_status mx_scaler_load_state_dict(mx_scaler *s, const mx_scaler_state *state);

/* --- watching the scaler ------------------------------------------------------------- */
typedef struct {
  int64_t updates;           /* updates with inf checks */
  int64_t skipped;           /* of which found inf/NaN */
  int64_t consecutive_skips; /* the current run of them */
  double scale;
} mx_scaler_stats;
mx_scaler_stats mx_scaler_stats_get(const mx_scaler *s);
/* For opt's last unscale: one line per parameter whose gradient held inf
 * or NaN ("fc1.weight: 3 inf, 0 NaN of 1024"), names[i] naming parameter i
 * (NULL: "param i"). Returns how many parameters were named. */
int mx_scaler_overflow_report(const mx_scaler *s, const mx_optimizer *opt, const char *const *names, FILE *out);
/* For opt's last unscale: the fraction of the scaled gradient values that
 * are zero or subnormal in float16 (what loss scaling rescues), or -1
 * before any. */
double mx_scaler_underflow_fraction(const mx_scaler *s, const mx_optimizer *opt);

MX_API_END

#endif
