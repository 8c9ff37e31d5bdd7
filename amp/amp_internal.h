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

#endif
