/* What the amp/ files share (not installed). */
#ifndef MX_AMP_AMP_INTERNAL_H
#define MX_AMP_AMP_INTERNAL_H

#include "amp/amp.h"
#include "ops/op_table.h"

/* --- the cast cache (cast_cache.c), this thread's ---------------------------------- */
/* The cached cast of source to dtype, or NULL (a stale entry, one whose
 * source changed in place since, is dropped). */
mx_tensor *mx__cast_cache_find(mx_tensor *source, mx_dtype dtype);
mx_status mx__cast_cache_add(mx_tensor *source, mx_dtype dtype, mx_tensor *cast);
void mx__cast_cache_clear(void);
int64_t mx__cast_cache_entries(void);
/* The casts served from an optimizer step's prepared casts (autocast.c), all threads, for the tests. */
int64_t mx__amp_prepared_casts_used(void);

/* --- watching (trace.c): one record per op dispatched in an enabled region ------ */
#define MX__TRACE_MAX_INPUTS 8
typedef enum { MX__CAST_NOT, MX__CAST_MADE, MX__CAST_CACHED, MX__CAST_CACHE_HIT } mx__cast_kind;
typedef struct {
  mx_op op;
  mx_cast_policy policy;
  bool explicit_dtype; /* not autocast: the caller gave a dtype */
  int n_in;
  mx_dtype in_dtype[MX__TRACE_MAX_INPUTS];
  bool in_scalar[MX__TRACE_MAX_INPUTS]; /* a C number the op was given */
  mx_dtype cast_to[MX__TRACE_MAX_INPUTS];
  mx__cast_kind cast[MX__TRACE_MAX_INPUTS];
} mx__trace_record;

/* Counts a cast of `bytes` (hit: served from the cache). */
void mx__amp_count_cast(int64_t bytes, bool hit);
/* Prints (when tracing) and counts one op once its outputs exist. */
void mx__amp_trace_op(const mx__trace_record *r, int n_out, mx_tensor *const *out, mx_status status);
/* op's kernel ran dtype on float32 copies on device (no native kernel
 * there): counted for the report, and a trace line. */
void mx__amp_note_via_f32(mx_op op, mx_dtype dtype, mx_device device);
/* This thread's counts for op since the last reset (false: never dispatched in a region). */
typedef struct {
  int64_t calls, casts, hits, bytes;
  int64_t in_dtype[MX_DTYPE_COUNT], out_dtype[MX_DTYPE_COUNT]; /* inputs (C scalars aside) and outputs */
} mx__amp_op_row;
bool mx__amp_op_row_get(int op, mx__amp_op_row *row);

/* --- statistics (stats.c), attached to a scaler by mx_amp_stats_new ------------ */
/* The scaler's unscale pass over params' gradients (k of them) at scale:
 * records the scale for this step and, on a sampled step, sets *hist to the
 * device histograms (k, 2, MX_AMP_HIST_BINS) the fused kernel fills (else NULL). */
mx_status mx__amp_stats_on_unscale(mx_amp_stats *st, const mx_tensor *scale, int k, const mx_tensor *const *params,
                                   int64_t **hist);
/* Tells st its scaler is being freed. */
void mx__amp_stats_detach(mx_amp_stats *st);
/* The scaler's watcher (NULL: none), set by mx_amp_stats_new and cleared by mx_amp_stats_free. */
void mx__scaler_watch(mx_scaler *s, mx_amp_stats *st);
/* The scaler's device counters (int64 (3): updates, skipped, consecutive skips), NULL before the first scale. */
const mx_tensor *mx__scaler_counters(const mx_scaler *s);

#endif
