/* The AMP kernels on the CPU: the fused check-and-unscale pass over a list
 * of gradients, and the loss-scale update (kernels/math.h's rule). */
#include <string.h>

#include "kernels/cpu/amp.h"
#include "kernels/cpu/strided.h"

typedef struct {
  mx_dtype dtype;
  float inv_scale;
  float *found_inf;
  int64_t *stats; /* this gradient's three counters */
  int64_t copies; /* how many logical values each stored one stands for */
} unscale_ctx;

/* A dense float32 run, the common case: typed, and without branches so
 * it vectorises. Classified by bits: exponent all ones is inf or NaN, and
 * a NaN has mantissa bits too. */
static void unscale_f32(float *x, int64_t n, float inv_scale, int64_t counts[3]) {
  int64_t nonfinite = 0, nan = 0, small = 0;
  /* 32-bit counts per block keep the vector lanes as wide as the floats' */
  for (int64_t start = 0; start < n; start += 1 << 20) {
    int64_t end = n - start < 1 << 20 ? n : start + (1 << 20);
    uint32_t block_nonfinite = 0, block_nan = 0, block_small = 0;
    for (int64_t i = start; i < end; i++) {
      uint32_t bits = mx_f32_bits(x[i]) & 0x7fffffffu;
      block_nonfinite += bits >= 0x7f800000u;
      block_nan += bits > 0x7f800000u;
      block_small += bits < 0x38800000u; /* |v| < 2^-14, mx_amp_underflows_f16 */
      x[i] *= inv_scale;
    }
    nonfinite += block_nonfinite, nan += block_nan, small += block_small;
  }
  counts[0] += nonfinite - nan, counts[1] += nan, counts[2] += small;
}

/* Any dtype and stride, one element at a time: counted as it was (scaled),
 * then unscaled in place. f64 multiplies in f64, the others in f32
 * (PyTorch's opmath). */
static void unscale_strided(const mx__row *row, const unscale_ctx *c, int64_t counts[3]) {
  char *p = row->ptr[0];
  for (int64_t i = 0; i < row->n; i++, p += row->step[0]) {
    double v = mx_element_load(p, c->dtype);
    (void)mx_amp_tally(v, counts);
    mx_element_store(p, c->dtype, mx_amp_unscaled(v, c->dtype, c->inv_scale));
  }
}

static void unscale_row(const mx__row *row, void *ctx) {
  const unscale_ctx *c = ctx;
  int64_t counts[3] = {0, 0, 0}; /* infs, NaNs, float16 underflows */
  if (c->dtype == MX_F32 && row->step[0] == sizeof(float))
    unscale_f32((float *)row->ptr[0], row->n, c->inv_scale, counts);
  else
    unscale_strided(row, c, counts);
  if (counts[0] + counts[1]) {
    float one = 1.0f;
    __atomic_store(c->found_inf, &one, __ATOMIC_RELAXED);
  }
  if (!c->stats) return;
  for (int k = 0; k < 3; k++) __atomic_fetch_add(&c->stats[k], counts[k] * c->copies, __ATOMIC_RELAXED);
}

mx_status mx__cpu_amp_unscale(int n, const mx_kview *grads, const float *scale, float *found_inf, int64_t *stats) {
  for (int t = 0; t < n; t++) {
    /* A broadcast gradient (stride 0, as the backward of a sum leaves it)
     * is unscaled once per stored value, not once per view position. */
    mx_kview stored = grads[t];
    int64_t copies = 1;
    for (int d = 0; d < stored.ndim; d++)
      if (stored.strides[d] == 0 && stored.shape[d] > 1) copies *= stored.shape[d], stored.shape[d] = 1;
    unscale_ctx ctx = {grads[t].dtype, mx_amp_inv_scale(*scale), found_inf, stats ? stats + 3 * t : NULL, copies};
    mx__cpu_foreach_row(&stored, NULL, unscale_row, &ctx);
  }
  return MX_OK;
}

mx_status mx__cpu_amp_update_scale(float *scale, int32_t *growth_tracker, const float *found_inf,
                                   const mx_amp_update_params *p, int64_t *counters, const mx_amp_clear *clear) {
  mx_amp_update_scale(scale, growth_tracker, *found_inf, p, counters);
  if (clear && clear->found_inf) *clear->found_inf = 0.0f;
  if (clear && clear->stats && clear->n_stats > 0)
    memset(clear->stats, 0, sizeof *clear->stats * (size_t)clear->n_stats);
  return MX_OK;
}
