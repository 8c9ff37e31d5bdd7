/* Automatic mixed precision: autocast regions, the GradScaler, and ways to
 * watch both at work. PyTorch's torch.autocast and torch.amp.GradScaler,
 * rule for rule; docs/AMP.md walks through them.
 *
 *     mx_scaler *scaler = mx_scaler_new(NULL);                 // 2^16, x2 / x0.5, 2000
 *     for (...) {
 *       mx_optimizer_zero_grad(opt, true);
 *       mx_tensor *loss;
 *       MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {            // matmuls in bf16,
 *         loss = mx_cross_entropy(model(x), y, ...);           // softmax & losses in f32
 *       }
 *       mx_backward(mx_scaler_scale(scaler, loss), NULL, false);
 *       mx_scaler_step(scaler, opt, NULL);                     // skipped on inf/NaN
 *       mx_scaler_update(scaler);                              // the scale adapts
 *     }
 *
 * Autocast state is per thread (a new thread starts with autocast off).
 * Inside a region every op applies its policy from the op table
 * (docs/ops.md): LOWER casts eligible inputs to the region's dtype, FP32 to
 * float32, PROMOTE to the widest floating type among them (float16 meeting
 * bfloat16 is an error, as in PyTorch), BANNED refuses to run, NONE leaves
 * them alone. Eligible: floating tensors on the region's
 * device type that are not float64. In-place ops and ops given an explicit
 * dtype (mx_sum_dtype, mx_softmax_dtype, ...) are not autocast. The one
 * policy table applies on every device, so CPU autocast rehearses GPU
 * autocast exactly; float16 on the CPU rounds as the GPU does.
 */
#ifndef MX_AMP_AMP_H
#define MX_AMP_AMP_H

#include <stdio.h>

#include "autograd/autograd.h"
#include "ops/ops.h"
#include "optim/optimizer.h"

MX_API_BEGIN

/* --- autocast regions ------------------------------------------------------------- */

/* The default lower dtype: float16 on CUDA, bfloat16 on the CPU. */
#define MX_AUTOCAST_DEFAULT_DTYPE MX_DTYPE_COUNT

/* Opens a region for device_type (MX_CPU or MX_CUDA) with dtype (MX_F16,
 * MX_BF16 or MX_AUTOCAST_DEFAULT_DTYPE; with enabled = false any dtype is
 * accepted and ignored, so a config can switch AMP off with float32).
 * enabled = false turns autocast off inside an enabled region; it still
 * counts as a nesting level. Leaving the outermost region clears the cast
 * cache. */
mx_status mx_autocast_begin(mx_device device_type, mx_dtype dtype, bool enabled, bool cache_enabled);
/* Closes the innermost region (an error when none is open). */
mx_status mx_autocast_end(void);

/* MX_AUTOCAST(device, dtype, enabled, cache_enabled) { ... }: a region that
 * ends however the block is left (break and return included). The block
 * runs exactly once, so variables assigned in it are always set. When the
 * region cannot begin (a bad dtype, say), every op in the block fails with
 * that error instead: its results are NULL, and mx_last_error() names the
 * op and the cause, as after any failed op. */
typedef struct {
  bool begun, once;
} mx_autocast_guard;
bool mx__autocast_guard_open(mx_device device_type, mx_dtype dtype, bool enabled, bool cache_enabled);
void mx__autocast_guard_end(mx_autocast_guard *guard);
#define MX__AUTOCAST_GUARD MX__GLUE(mx__autocast_guard_, __LINE__)
#define MX_AUTOCAST(device_type, dtype, enabled, cache_enabled)                                          \
  for (mx_autocast_guard MX__AUTOCAST_GUARD __attribute__((cleanup(mx__autocast_guard_end))) = {         \
           .begun = mx__autocast_guard_open(device_type, dtype, enabled, cache_enabled), .once = true}; \
       MX__AUTOCAST_GUARD.once; MX__AUTOCAST_GUARD.once = false)

/* Runs fn(ctx) inside a region (the decorator's equivalent) and returns
 * its status. */
mx_status mx_autocast_run(mx_device device_type, mx_dtype dtype, bool enabled, bool cache_enabled,
                          mx_status (*fn)(void *ctx), void *ctx);

bool mx_autocast_is_enabled(mx_device device_type);
/* The region's dtype for device_type (the default outside any region). */
mx_dtype mx_autocast_dtype(mx_device device_type);
bool mx_autocast_is_cache_enabled(void);
/* Regions open on this thread. */
int mx_autocast_depth(void);

/* This thread's autocast state, to be entered again later: activation
 * checkpointing (nn/activation_checkpoint.h) recomputes a forward in
 * backward under the state it first ran with. Indexed by device type
 * (MX_CPU, MX_CUDA); outside any region every device is disabled. */
typedef struct {
  bool enabled[MX_DEVICE_COUNT];
  mx_dtype dtype[MX_DEVICE_COUNT];
  bool cache_enabled;
} mx_autocast_state;
mx_autocast_state mx_autocast_state_get(void);
/* Opens a region with exactly this state for every device type (one
 * nesting level, closed by mx_autocast_end like any other). */
mx_status mx_autocast_begin_state(const mx_autocast_state *state);

/* --- the policy table, as data ------------------------------------------------------ */

/* The policy autocast applies to op (its number: mx_op_name(op) names
 * it); a run-time override, set by the op's name ("mm"), replaces the op
 * table's default. */
mx_cast_policy mx_autocast_policy(int op);
mx_status mx_autocast_set_policy(const char *op_name, mx_cast_policy policy);
void mx_autocast_reset_policies(void);
/* Prints "op: default -> now" for each overridden op; returns how many. */
int mx_autocast_print_policy_changes(FILE *out);

/* --- the cast cache ------------------------------------------------------------------ */
/* Within a region, a float32 leaf that requires grad (a weight) is cast to
 * the lower dtype once and the cast reused until the outermost region ends
 * or the weight changes in place. Counters are this thread's, since the
 * last mx_amp_report_reset. */
typedef struct {
  int64_t entries; /* casts held now */
  int64_t casts;   /* casts autocast made (cached or not) */
  int64_t hits;    /* casts served from the cache */
} mx_autocast_cache_stats;
mx_autocast_cache_stats mx_autocast_cache_stats_get(void);
/* Drops this thread's cached casts now (torch.clear_autocast_cache), inside
 * a region or out: the next use of each weight casts it afresh. A region
 * that runs many forward passes (evaluation over a whole dataset, say) can
 * free the casts between them; the outermost region's end does it anyway. */
void mx_autocast_clear_cache(void);

/* --- custom functions: custom_fwd / custom_bwd ----------------------------------------- */
/* mx_function_apply with PyTorch's custom_fwd/custom_bwd rules for
 * device_type: with cast_inputs a floating dtype, eligible inputs are cast
 * to it and forward runs with autocast off (when autocast is on); with
 * cast_inputs = MX_DTYPE_COUNT forward runs under the current state.
 * Backward always runs under the autocast state forward ran with (so with
 * cast_inputs, autocast off: PyTorch's _fwd_used_autocast = False). */
mx_status mx_amp_function_apply(const mx_function *fn, void *user, mx_device device_type, mx_dtype cast_inputs,
                                int n_inputs, mx_tensor *const *inputs, int n_outputs, mx_tensor **outputs);

/* --- watching autocast ----------------------------------------------------------------- */
/* One line per op dispatched in an enabled region to out (NULL: off):
 * op, policy, input dtypes, casts made, cache hits and misses, output
 * dtype. MX_AMP_TRACE=1 in the environment traces to stderr. */
void mx_amp_trace(FILE *out);
/* Counts per op and output dtype, casts, cache hits and bytes cast, on this
 * thread since the last reset. */
void mx_amp_report(FILE *out);
void mx_amp_report_reset(void);

#include "amp/scaler.h"
#include "amp/stats.h"

MX_API_END

#endif
