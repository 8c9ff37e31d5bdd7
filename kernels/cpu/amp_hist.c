/* The AMP statistics kernels on the CPU: log2-magnitude histograms of a
 * tensor, and the GradScaler's fused unscale pass that also histograms each
 * gradient before and after unscaling (kernels/math.h's mx_amp_hist_bin). */
#include <string.h>

#include "kernels/cpu/amp_hist.h"
#include "kernels/cpu/strided.h"

/* Adds a row's local counts (each standing for `copies` values) to the shared histogram. */
static void flush_bins(int64_t *hist, const int64_t *local, int64_t copies) {
  for (int b = 0; b < MX_AMP_HIST_BINS; b++)
    if (local[b]) __atomic_fetch_add(&hist[b], local[b] * copies, __ATOMIC_RELAXED);
}

/* --- the histogram of one tensor -------------------------------------------------- */

typedef struct {
  mx_dtype dtype;
  int64_t *hist;
  int64_t copies;
} histogram_ctx;

/* Counts a dense run into four interleaved histograms: neighbouring values
 * mostly share a bin, and one counter would make each increment wait for the
 * last. */
#define DENSE_BINS(name, type, bin)                                                     \
  static void name(const type *x, int64_t n, int64_t (*local)[MX_AMP_HIST_BINS]) {      \
    int64_t i = 0;                                                                      \
    for (; i + 4 <= n; i += 4) {                                                        \
      local[0][bin(x[i])]++;                                                            \
      local[1][bin(x[i + 1])]++;                                                        \
      local[2][bin(x[i + 2])]++;                                                        \
      local[3][bin(x[i + 3])]++;                                                        \
    }                                                                                   \
    for (; i < n; i++) local[0][bin(x[i])]++;                                           \
  }

static inline int bin_bf16(uint16_t h) { return mx_amp_hist_bin_f32((uint32_t)h << 16); }
DENSE_BINS(dense_f32, uint32_t, mx_amp_hist_bin_f32)
DENSE_BINS(dense_f16, uint16_t, mx_amp_hist_bin_f16)
DENSE_BINS(dense_bf16, uint16_t, bin_bf16)

static void histogram_row(const mx__row *row, void *ctx) {
  const histogram_ctx *c = ctx;
  int64_t local[4][MX_AMP_HIST_BINS];
  memset(local, 0, sizeof local);
  const char *p = row->ptr[0];
  /* dense runs of the common dtypes, typed; the rest element by element */
  if (c->dtype == MX_F32 && row->step[0] == sizeof(float)) dense_f32((const uint32_t *)p, row->n, local);
  else if (c->dtype == MX_F16 && row->step[0] == sizeof(uint16_t)) dense_f16((const uint16_t *)p, row->n, local);
  else if (c->dtype == MX_BF16 && row->step[0] == sizeof(uint16_t)) dense_bf16((const uint16_t *)p, row->n, local);
  else
    for (int64_t i = 0; i < row->n; i++, p += row->step[0]) local[0][mx_amp_hist_bin_at(p, c->dtype)]++;
  for (int b = 0; b < MX_AMP_HIST_BINS; b++) local[0][b] += local[1][b] + local[2][b] + local[3][b];
  flush_bins(c->hist, local[0], c->copies);
}

/* A broadcast view (stride 0) as the values it stores, and how many logical values each stands for. */
static mx_kview stored_values(const mx_kview *v, int64_t *copies) {
  mx_kview stored = *v;
  *copies = 1;
  for (int d = 0; d < stored.ndim; d++)
    if (stored.strides[d] == 0 && stored.shape[d] > 1) *copies *= stored.shape[d], stored.shape[d] = 1;
  return stored;
}

/* A view whose elements fill a block of memory in some order (a transposed
 * or channels-last tensor) as that block, one flat run: a histogram does not
 * care about order, and short rows would each pay for a histogram of their
 * own. Other views are left as they are. */
static mx_kview dense_block(const mx_kview *v) {
  int64_t expected = 1, numel = 1;
  bool used[MX_MAX_DIMS] = {false};
  for (int k = 0; k < v->ndim; k++) { /* the dims by increasing stride must tile memory */
    int best = -1;
    for (int d = 0; d < v->ndim; d++)
      if (!used[d] && v->shape[d] > 1 && (best < 0 || v->strides[d] < v->strides[best])) best = d;
    if (best < 0) break;
    if (v->strides[best] != expected) return *v;
    used[best] = true;
    expected *= v->shape[best];
  }
  for (int d = 0; d < v->ndim; d++) numel *= v->shape[d];
  mx_kview flat = *v;
  flat.ndim = 1, flat.shape[0] = numel, flat.strides[0] = 1;
  return flat;
}

mx_status mx__cpu_amp_histogram(const mx_kview *x, int64_t *hist) {
  histogram_ctx ctx = {x->dtype, hist, 1};
  mx_kview stored = stored_values(x, &ctx.copies);
  stored = dense_block(&stored);
  mx__cpu_foreach_row(&stored, NULL, histogram_row, &ctx);
  return MX_OK;
}

/* --- unscale with histograms ---------------------------------------------------------- */

typedef struct {
  mx_dtype dtype;
  float inv_scale;
  float *found_inf;
  int64_t *stats;        /* this gradient's three counters, as amp_unscale's */
  int64_t *before, *after; /* this gradient's two histograms */
  int64_t copies;
} unscale_ctx;

/* Counts and unscales as kernels/cpu/amp.c does, binning each value as it
 * was (scaled) and as it is stored afterwards (the true gradient). */
static void unscale_row(const mx__row *row, void *ctx) {
  const unscale_ctx *c = ctx;
  int64_t before[MX_AMP_HIST_BINS], after[MX_AMP_HIST_BINS];
  memset(before, 0, sizeof before);
  memset(after, 0, sizeof after);
  int64_t counts[3] = {0, 0, 0}; /* infs, NaNs, float16 underflows */
  char *p = row->ptr[0];
  if (c->dtype == MX_F32 && row->step[0] == sizeof(float)) {
    float *x = (float *)p;
    for (int64_t i = 0; i < row->n; i++) {
      uint32_t bits = mx_f32_bits(x[i]), magnitude = bits & 0x7fffffffu;
      counts[0] += magnitude == 0x7f800000u;
      counts[1] += magnitude > 0x7f800000u;
      counts[2] += magnitude < 0x38800000u; /* |v| < 2^-14, mx_amp_underflows_f16 */
      before[mx_amp_hist_bin_f32(bits)]++;
      x[i] *= c->inv_scale;
      after[mx_amp_hist_bin_f32(mx_f32_bits(x[i]))]++;
    }
  } else {
    for (int64_t i = 0; i < row->n; i++, p += row->step[0]) {
      double v = mx_element_load(p, c->dtype);
      (void)mx_amp_tally(v, counts);
      before[mx_amp_hist_bin_at(p, c->dtype)]++;
      mx_element_store(p, c->dtype, mx_amp_unscaled(v, c->dtype, c->inv_scale));
      after[mx_amp_hist_bin_at(p, c->dtype)]++;
    }
  }
  if (counts[0] + counts[1]) {
    float one = 1.0f;
    __atomic_store(c->found_inf, &one, __ATOMIC_RELAXED);
  }
  if (c->stats)
    for (int k = 0; k < 3; k++) __atomic_fetch_add(&c->stats[k], counts[k] * c->copies, __ATOMIC_RELAXED);
  flush_bins(c->before, before, c->copies);
  flush_bins(c->after, after, c->copies);
}

mx_status mx__cpu_amp_unscale_histogram(int n, const mx_kview *grads, const float *scale, float *found_inf,
                                        int64_t *stats, int64_t *hist) {
  for (int t = 0; t < n; t++) {
    unscale_ctx ctx = {grads[t].dtype, mx_amp_inv_scale(*scale), found_inf, stats ? stats + 3 * t : NULL,
                       hist + (int64_t)2 * t * MX_AMP_HIST_BINS, hist + (int64_t)(2 * t + 1) * MX_AMP_HIST_BINS, 1};
    mx_kview stored = stored_values(&grads[t], &ctx.copies);
    mx__cpu_foreach_row(&stored, NULL, unscale_row, &ctx);
  }
  return MX_OK;
}
