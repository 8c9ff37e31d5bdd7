/* The AMP statistics kernels on CUDA: log2-magnitude histograms of a
 * tensor, and the GradScaler's fused unscale pass that also histograms each
 * gradient before and after unscaling. The bins are kernels/math.h's
 * mx_amp_hist_bin_at, the function the CPU twin (kernels/cpu/amp_hist.c) runs;
 * each block counts in shared memory and adds its counts to the device's
 * histogram once (common.cuh's launch_block_counts). */
#include "kernels/backend.h"
#include "kernels/cuda/common.cuh"

/* Gradients per launch of the fused pass: their before/after histograms
 * (32-bit counts) must fit a block's shared memory, 8 * 2 * 280 * 4 bytes. */
#define HIST_TENSORS_PER_LAUNCH 8

/* This thread's share of a block's counts added to hist (global). */
MX_HD static void add_block_counts(int64_t *hist, const unsigned *counts, int bins, const grid_pos &at) {
  for (int64_t b = at.thread; b < bins; b += at.threads)
    if (counts[b]) atomic_add_i64(&hist[b], (int64_t)counts[b]);
}

/* x: any view; hist: MX_AMP_HIST_BINS counts (common.cuh's launch_block_counts). */
struct histogram_body {
  struct shared {
    unsigned counts[MX_AMP_HIST_BINS];
  };
  mx_kview x;
  int64_t n, *hist;
  MX_HD void clear(shared &s, const grid_pos &at) const {
    for (int64_t b = at.thread; b < MX_AMP_HIST_BINS; b += at.threads) s.counts[b] = 0;
  }
  MX_HD void count(shared &s, const grid_pos &at) const {
    int64_t step = at.threads * at.blocks;
    for (int64_t i = at.block * at.threads + at.thread; i < n; i += step)
      atomic_add_u32(&s.counts[mx_amp_hist_bin_at(element(x, i), x.dtype)], 1u);
  }
  MX_HD void publish(const shared &s, const grid_pos &at) const {
    add_block_counts(hist, s.counts, MX_AMP_HIST_BINS, at);
  }
};

/* Blocks for n elements: no more than the cap, and few enough that one
 * block's 32-bit counts cannot wrap (each thread counts at most 2^20). */
static int64_t blocks_for(int64_t n) {
  int64_t blocks = (n + THREADS_PER_BLOCK - 1) / THREADS_PER_BLOCK;
  int64_t floor = (n + ((int64_t)THREADS_PER_BLOCK << 20) - 1) / ((int64_t)THREADS_PER_BLOCK << 20);
  if (blocks > mx__cuda_max_blocks()) blocks = mx__cuda_max_blocks();
  return blocks > floor ? blocks : floor;
}

mx_status mx__cuda_amp_histogram(const mx_kview *x, int64_t *hist) {
  int64_t n = mx__kview_numel(x);
  if (n == 0) return MX_OK; /* an empty grid is an invalid configuration */
  histogram_body body = {flatten_if_dense(x), n, hist};
  return launch_block_counts("launch of kernel amp_histogram", blocks_for(n), THREADS_PER_BLOCK, body);
}

struct histogram_chunk {
  mx_kview grads[HIST_TENSORS_PER_LAUNCH];
  int64_t start[HIST_TENSORS_PER_LAUNCH + 1]; /* prefix sums of the numels */
  int n;
};

MX_HD static void flush(int64_t *stats, int t, int64_t counts[3]) {
  if (!stats || t < 0) return;
  for (int k = 0; k < 3; k++)
    if (counts[k]) atomic_add_i64(&stats[3 * t + k], counts[k]);
  counts[0] = counts[1] = counts[2] = 0;
}

/* kernels/cuda/amp.cu's unscale_op, binning each value before and after:
 * shared counts[t][0] before, counts[t][1] after, for the chunk's gradient
 * t; stats and hist start at the chunk's first gradient. */
struct unscale_histogram_body {
  struct shared {
    unsigned counts[HIST_TENSORS_PER_LAUNCH][2][MX_AMP_HIST_BINS];
  };
  histogram_chunk c;
  const float *scale;
  float *found_inf;
  int64_t *stats, *hist;
  MX_HD void clear(shared &s, const grid_pos &at) const {
    unsigned *flat = &s.counts[0][0][0];
    for (int64_t b = at.thread; b < HIST_TENSORS_PER_LAUNCH * 2 * MX_AMP_HIST_BINS; b += at.threads) flat[b] = 0;
  }
  MX_HD void count(shared &s, const grid_pos &at) const {
    float inv_scale = mx_amp_inv_scale(*scale);
    int64_t total = c.start[c.n];
    int64_t step = at.threads * at.blocks;
    int current = -1;
    int64_t tallies[3] = {0, 0, 0};
    bool non_finite = false;
    for (int64_t i = at.block * at.threads + at.thread; i < total; i += step) {
      int t = chunk_tensor_of(c.start, c.n, i);
      if (t != current) {
        flush(stats, current, tallies);
        current = t;
      }
      const mx_kview &g = c.grads[t];
      char *p = element(g, i - c.start[t]);
      double v = mx_element_load(p, g.dtype);
      non_finite |= mx_amp_tally(v, tallies);
      atomic_add_u32(&s.counts[t][0][mx_amp_hist_bin_at(p, g.dtype)], 1u);
      mx_element_store(p, g.dtype, mx_amp_unscaled(v, g.dtype, inv_scale));
      atomic_add_u32(&s.counts[t][1][mx_amp_hist_bin_at(p, g.dtype)], 1u);
    }
    flush(stats, current, tallies);
    if (non_finite) *found_inf = 1.0f; /* every writer writes the same value */
  }
  MX_HD void publish(const shared &s, const grid_pos &at) const {
    for (int t = 0; t < c.n; t++)
      add_block_counts(hist + (int64_t)2 * t * MX_AMP_HIST_BINS, &s.counts[t][0][0], 2 * MX_AMP_HIST_BINS, at);
  }
};

mx_status mx__cuda_amp_unscale_histogram(int n, const mx_kview *grads, const float *scale, float *found_inf,
                                         int64_t *stats, int64_t *hist) {
  for (int first = 0; first < n; first += HIST_TENSORS_PER_LAUNCH) {
    histogram_chunk c;
    c.n = n - first < HIST_TENSORS_PER_LAUNCH ? n - first : HIST_TENSORS_PER_LAUNCH;
    c.start[0] = 0;
    for (int t = 0; t < c.n; t++) {
      c.grads[t] = flatten_if_dense(&grads[first + t]);
      c.start[t + 1] = c.start[t] + mx__kview_numel(&grads[first + t]);
    }
    if (c.start[c.n] == 0) continue;
    unscale_histogram_body body = {c, scale, found_inf, stats ? stats + 3 * first : NULL,
                                   hist + (int64_t)2 * first * MX_AMP_HIST_BINS};
    MX__RETURN_IF_FAILED(launch_block_counts("launch of kernel amp_unscale_histogram", blocks_for(c.start[c.n]),
                                             THREADS_PER_BLOCK, body));
  }
  return MX_OK;
}
