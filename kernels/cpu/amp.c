/* The AMP kernels on the CPU: the fused check-and-unscale pass over a list
 * of gradients, and the loss-scale update (kernels/math.h's rule). */
#include "kernels/cpu/amp.h"
#include "kernels/cpu/strided.h"

typedef struct {
  mx_dtype dtype;
  float inv_scale;
  float *found_inf;
  int64_t *stats; /* this gradient's three counters */
} unscale_ctx;

/* One element: counted as it was (scaled), then unscaled in place. f64
 * multiplies in f64, the others in f32 (PyTorch's opmath). */
static void unscale_row(const mx__row *row, void *ctx) {
  const unscale_ctx *c = ctx;
  int64_t infs = 0, nans = 0, tiny = 0;
  char *p = row->ptr[0];
  for (int64_t i = 0; i < row->n; i++, p += row->step[0]) {
    double v = mx_element_load(p, c->dtype);
    infs += v - v != 0 && v == v;
    nans += v != v;
    tiny += mx_amp_underflows_f16(v);
    double unscaled = c->dtype == MX_F64 ? v * (double)c->inv_scale : (double)((float)v * c->inv_scale);
    mx_element_store(p, c->dtype, unscaled);
  }
  if (infs + nans) {
    float one = 1.0f;
    __atomic_store(c->found_inf, &one, __ATOMIC_RELAXED);
  }
  if (!c->stats) return;
  __atomic_fetch_add(&c->stats[0], infs, __ATOMIC_RELAXED);
  __atomic_fetch_add(&c->stats[1], nans, __ATOMIC_RELAXED);
  __atomic_fetch_add(&c->stats[2], tiny, __ATOMIC_RELAXED);
}

mx_status mx__cpu_amp_unscale(int n, const mx_kview *grads, const float *scale, float *found_inf, int64_t *stats) {
  for (int t = 0; t < n; t++) {
    unscale_ctx ctx = {grads[t].dtype, mx_amp_inv_scale(*scale), found_inf, stats ? stats + 3 * t : NULL};
    mx__cpu_foreach_row(&grads[t], NULL, unscale_row, &ctx);
  }
  return MX_OK;
}

mx_status mx__cpu_amp_update_scale(float *scale, int32_t *growth_tracker, const float *found_inf,
                                   const mx_amp_update_params *p, int64_t *counters) {
  mx_amp_update_scale(scale, growth_tracker, *found_inf, p, counters);
  return MX_OK;
}
