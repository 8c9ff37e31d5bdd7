/* The AMP kernels on CUDA: the fused check-and-unscale pass over a list of
 * gradients, and the loss-scale update. The arithmetic is kernels/math.h's,
 * the same the CPU kernels (kernels/cpu/amp.c) run. */
#include "kernels/backend.h"
#include "kernels/cuda/common.cuh"

/* Gradients per launch: the chunk travels in the kernel's arguments
 * (common.cuh: MX_CUDA_PARAM_BYTES), 22 in 4 KiB and 185 in 32 KiB. */
#define TENSORS_PER_LAUNCH MX_CUDA_UNSCALE_PER_LAUNCH

struct unscale_chunk {
  mx_kview grads[TENSORS_PER_LAUNCH];
  int64_t start[TENSORS_PER_LAUNCH + 1]; /* prefix sums of the numels */
  int n;
};

MX_HD static void flush(int64_t *stats, int t, int64_t counts[3]) {
  if (!stats || t < 0) return;
  for (int k = 0; k < 3; k++)
    if (counts[k]) atomic_add_i64(&stats[3 * t + k], counts[k]);
  counts[0] = counts[1] = counts[2] = 0;
}

/* One launch over a chunk: every thread walks the flat index space of the
 * chunk grid-stride, counting into registers and flushing a gradient's
 * counters when it moves on to the next one. stats is (n_total, 3), first
 * the offset of this chunk's first gradient. DENSE_F32: every gradient of
 * the chunk is float32 and one run of memory (autocast's case: float32
 * parameters, float32 gradients; chosen on the host), read and written as
 * floats, without mx_element_load's switch on the dtype and the strided
 * offset: the same values, since a float32 value widened to double and
 * narrowed back is itself. */
template <bool DENSE_F32>
struct unscale_op {
  unscale_chunk c;
  const float *scale;
  float *found_inf;
  int64_t *stats;
  MX_HD void operator()(const grid_pos &at) const {
    float inv_scale = mx_amp_inv_scale(*scale);
    int64_t total = c.start[c.n];
    int64_t step = at.threads * at.blocks;
    int current = -1;
    int64_t counts[3] = {0, 0, 0};
    bool non_finite = false;
    for (int64_t i = at.block * at.threads + at.thread; i < total; i += step) {
      int t = chunk_tensor_of(c.start, c.n, i);
      if (t != current) {
        flush(stats, current, counts);
        current = t;
      }
      const mx_kview &g = c.grads[t];
      float *dense = DENSE_F32 ? (float *)g.data + (i - c.start[t]) : NULL;
      char *p = DENSE_F32 ? NULL : element(g, i - c.start[t]);
      double v = DENSE_F32 ? (double)*dense : mx_element_load(p, g.dtype);
      non_finite |= mx_amp_tally(v, counts);
      if constexpr (DENSE_F32) {
        *dense = (float)v * inv_scale;
        continue;
      }
      mx_element_store(p, g.dtype, mx_amp_unscaled(v, g.dtype, inv_scale));
    }
    flush(stats, current, counts);
    if (non_finite) *found_inf = 1.0f; /* every writer writes the same value */
  }
};

static_assert(sizeof(unscale_op<false>) <= MX_CUDA_PARAM_BYTES, "an unscale launch's arguments must fit the kernel's");

/* Whether every gradient of the chunk is float32, 1-d and contiguous
 * (flatten_if_dense made them so): unscale_op's DENSE_F32. */
static bool dense_f32(const unscale_chunk &c) {
  for (int t = 0; t < c.n; t++) {
    const mx_kview &g = c.grads[t];
    if (g.dtype != MX_F32 || g.ndim > 1 || (g.ndim == 1 && g.strides[0] != 1)) return false;
  }
  return true;
}

mx_status mx__cuda_amp_unscale(int n, const mx_kview *grads, const float *scale, float *found_inf,
                               int64_t *stats) {
  for (int first = 0; first < n; first += TENSORS_PER_LAUNCH) {
    unscale_chunk c;
    c.n = n - first < TENSORS_PER_LAUNCH ? n - first : TENSORS_PER_LAUNCH;
    c.start[0] = 0;
    for (int t = 0; t < c.n; t++) {
      c.grads[t] = flatten_if_dense(&grads[first + t]);
      c.start[t + 1] = c.start[t] + mx__kview_numel(&grads[first + t]);
    }
    if (c.start[c.n] == 0) continue; /* an empty grid is an invalid configuration */
    int64_t *chunk_stats = stats ? stats + 3 * first : NULL;
    if (dense_f32(c)) {
      unscale_op<true> op = {c, scale, found_inf, chunk_stats};
      MX__RETURN_IF_FAILED(
          launch_threads("launch of kernel amp_unscale", grid_blocks(c.start[c.n]), THREADS_PER_BLOCK, op));
    } else {
      unscale_op<false> op = {c, scale, found_inf, chunk_stats};
      MX__RETURN_IF_FAILED(
          launch_threads("launch of kernel amp_unscale", grid_blocks(c.start[c.n]), THREADS_PER_BLOCK, op));
    }
  }
  return MX_OK;
}

/* The update rule on thread 0, which alone touches found_inf (clear's may
 * be the one it reads: read, then cleared); the counts to clear, over the
 * block's threads. */
struct update_scale_op {
  float *scale;
  int32_t *growth_tracker;
  const float *found_inf;
  mx_amp_update_params p;
  int64_t *counters;
  mx_amp_clear clear;
  MX_HD void operator()(const grid_pos &at) const {
    if (at.block == 0 && at.thread == 0) {
      mx_amp_update_scale(scale, growth_tracker, *found_inf, &p, counters);
      if (clear.found_inf) *clear.found_inf = 0.0f;
    }
    for (int64_t i = at.block * at.threads + at.thread; clear.stats && i < clear.n_stats; i += at.threads * at.blocks)
      clear.stats[i] = 0;
  }
};

mx_status mx__cuda_amp_update_scale(float *scale, int32_t *growth_tracker, const float *found_inf,
                                    const mx_amp_update_params *p, int64_t *counters, const mx_amp_clear *clear) {
  update_scale_op op = {scale, growth_tracker, found_inf, *p, counters, clear ? *clear : mx_amp_clear{}};
  int64_t threads = op.clear.stats && op.clear.n_stats > 1 ? THREADS_PER_BLOCK : 1;
  return launch_threads("launch of kernel amp_update_scale", 1, threads, op);
}
