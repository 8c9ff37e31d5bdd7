/* Watching autocast: a line per op dispatched in an enabled region (the
 * trace) and this thread's counts (the report). */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp_internal.h"

static _Atomic(FILE *) trace_out;
static atomic_int env_read;

void mx_amp_trace(FILE *out) {
  atomic_store(&env_read, 1); /* an explicit choice wins over MX_AMP_TRACE */
  atomic_store(&trace_out, out);
}

static FILE *trace_stream(void) {
  if (!atomic_exchange(&env_read, 1)) {
    const char *env = getenv("MX_AMP_TRACE");
    if (env && strcmp(env, "0") != 0 && *env) atomic_store(&trace_out, stderr);
  }
  return atomic_load(&trace_out);
}

/* --- this thread's counts --------------------------------------------------------- */

typedef struct {
  int64_t calls[MX_OP_COUNT];
  int64_t out_dtype[MX_OP_COUNT][MX_DTYPE_COUNT];
  int64_t casts[MX_OP_COUNT], hits[MX_OP_COUNT];
  int64_t via_f32[MX_OP_COUNT][MX_DTYPE_COUNT]; /* kernels run on float32 copies, any region */
  int64_t total_casts, total_hits, bytes_cast;
  /* per op for the HTML report (amp/report_html.c): input dtypes, and the
   * bytes its casts made (counted while it dispatches, then booked to it) */
  int64_t in_dtype[MX_OP_COUNT][MX_DTYPE_COUNT], bytes[MX_OP_COUNT], pending_bytes;
} op_counts;

static _Thread_local op_counts counts;

/* Out of line so that each function computes the address once (see
 * tensor/object_cache.c). */
__attribute__((noinline)) static op_counts *this_thread(void) { return &counts; }

void mx__amp_count_cast(int64_t bytes, bool hit) {
  if (hit) {
    counts.total_hits++;
    return;
  }
  counts.total_casts++;
  counts.bytes_cast += bytes;
  counts.pending_bytes += bytes;
}

mx_autocast_cache_stats mx_autocast_cache_stats_get(void) {
  return (mx_autocast_cache_stats){mx__cast_cache_entries(), counts.total_casts, counts.total_hits};
}

void mx_amp_report_reset(void) { memset(&counts, 0, sizeof counts); }

static const char *kind_note(mx__cast_kind kind) {
  switch (kind) {
  case MX__CAST_CACHED: return " (cache miss)";
  case MX__CAST_CACHE_HIT: return " (cache hit)";
  default: return "";
  }
}

static void print_record(FILE *f, const mx__trace_record *r, int n_out, mx_tensor *const *out, mx_status status) {
  char line[1024];
  int len = snprintf(line, sizeof line, "amp: %-20s %-7s", mx__ops[r->op].name,
                     r->explicit_dtype ? "dtype" : mx_cast_policy_name(r->policy));
  for (int i = 0; i < r->n_in && len < (int)sizeof line; i++) {
    const char *sep = i ? ", " : " ";
    if (r->cast[i] == MX__CAST_NOT)
      len += snprintf(line + len, sizeof line - (size_t)len, "%s%s", sep,
                      r->in_scalar[i] ? "scalar" : mx_dtype_name(r->in_dtype[i]));
    else
      len += snprintf(line + len, sizeof line - (size_t)len, "%s%s->%s%s", sep, mx_dtype_name(r->in_dtype[i]),
                      mx_dtype_name(r->cast_to[i]), kind_note(r->cast[i]));
  }
  if (status != MX_OK)
    fprintf(f, "%s => error\n", line);
  else
    fprintf(f, "%s => %s\n", line, n_out > 0 && out[0] ? mx_dtype_name(mx_dtype_of(out[0])) : "-");
}

void mx__amp_trace_op(const mx__trace_record *r, int n_out, mx_tensor *const *out, mx_status status) {
  op_counts *c = this_thread();
  c->calls[r->op]++;
  c->bytes[r->op] += c->pending_bytes;
  c->pending_bytes = 0;
  if (status == MX_OK && n_out > 0 && out[0]) c->out_dtype[r->op][mx_dtype_of(out[0])]++;
  for (int i = 0; i < r->n_in; i++) {
    c->casts[r->op] += r->cast[i] == MX__CAST_MADE || r->cast[i] == MX__CAST_CACHED;
    c->hits[r->op] += r->cast[i] == MX__CAST_CACHE_HIT;
    if (!r->in_scalar[i]) c->in_dtype[r->op][r->in_dtype[i]]++;
  }
  FILE *f = trace_stream();
  if (f) print_record(f, r, n_out, out, status);
}

/* Said once per op, dtype and device in a process: the trace is for reading. */
static atomic_bool via_f32_said[MX_OP_COUNT][MX_DTYPE_COUNT][2];

void mx__amp_note_via_f32(mx_op op, mx_dtype dtype, mx_device device) {
  this_thread()->via_f32[op][dtype]++;
  FILE *f = trace_stream();
  if (f && !atomic_exchange(&via_f32_said[op][dtype][device == MX_CUDA], true))
    fprintf(f, "amp: %-20s %s on %s runs via float32: no %s kernel here (said once)\n", mx__ops[op].name,
            mx_dtype_name(dtype), mx_device_name(device), mx_dtype_name(dtype));
}

/* "kernels via float32: matmul bfloat16 x3, conv float16 x2" when any ran so */
static void report_via_f32(FILE *out) {
  const char *sep = "kernels via float32 (no native 16-bit kernel here):";
  for (int op = 0; op < MX_OP_COUNT; op++)
    for (int t = 0; t < MX_DTYPE_COUNT; t++)
      if (counts.via_f32[op][t]) {
        fprintf(out, "%s %s %s x%lld", sep, mx__ops[op].name, mx_dtype_name((mx_dtype)t),
                (long long)counts.via_f32[op][t]);
        sep = ",";
      }
  if (sep[0] == ',') fputc('\n', out);
}

void mx_amp_report(FILE *out) {
  if (!out) return;
  int64_t ops = 0;
  fprintf(out, "AMP report (this thread)\n%-28s %8s %8s %8s  %s\n", "op", "calls", "casts", "hits", "outputs");
  for (int op = 0; op < MX_OP_COUNT; op++) {
    if (!counts.calls[op]) continue;
    ops += counts.calls[op];
    fprintf(out, "%-28s %8lld %8lld %8lld ", mx__ops[op].name, (long long)counts.calls[op],
            (long long)counts.casts[op], (long long)counts.hits[op]);
    for (int t = 0; t < MX_DTYPE_COUNT; t++)
      if (counts.out_dtype[op][t])
        fprintf(out, " %s x%lld", mx_dtype_name((mx_dtype)t), (long long)counts.out_dtype[op][t]);
    fputc('\n', out);
  }
  fprintf(out, "total: %lld ops in autocast regions, %lld casts (%.2f MB), %lld cache hits\n", (long long)ops,
          (long long)counts.total_casts, (double)counts.bytes_cast / 1e6, (long long)counts.total_hits);
  report_via_f32(out);
}

bool mx__amp_op_row_get(int op, mx__amp_op_row *row) {
  if (op < 0 || op >= MX_OP_COUNT || !counts.calls[op]) return false;
  *row = (mx__amp_op_row){.calls = counts.calls[op], .casts = counts.casts[op], .hits = counts.hits[op],
                          .bytes = counts.bytes[op]};
  memcpy(row->in_dtype, counts.in_dtype[op], sizeof row->in_dtype);
  memcpy(row->out_dtype, counts.out_dtype[op], sizeof row->out_dtype);
  return true;
}
