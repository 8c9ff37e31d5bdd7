/* Where batch norm's per-channel kernels find a channel's values in a
 * contiguous (N, C, *) tensor, and how CUDA's channel_sums
 * (kernels/cuda/batch_norm.cu) splits each channel's values among blocks.
 * Plain C, so the CPU tests check the arithmetic the GPU runs. */
#ifndef MX_KERNELS_CHANNEL_PLAN_H
#define MX_KERNELS_CHANNEL_PLAN_H

#include "kernels/backend.h"

/* Channel c's values are N planes of `plane` contiguous elements, the plane
 * of batch item n starting at (n * channels + c) * plane; its j-th value
 * (0 <= j < count, in that order) is element j % plane of plane j / plane.
 * Each channel's count values are cut into `segments` runs of `segment`
 * values (the last run may be shorter). */
typedef struct {
  int64_t channels, plane, count;
  int64_t segments, segment;
} mx_channel_plan;

/* The layout of a contiguous view of at least 2 dims, each channel's values
 * in one run. */
MX_HD static inline mx_channel_plan mx_channel_plan_of(const mx_kview *v) {
  mx_channel_plan p;
  int64_t rest = 1; /* the product of the dims after the channels */
  for (int d = 2; d < v->ndim; d++) rest *= v->shape[d];
  p.channels = v->shape[1];
  p.plane = rest;
  p.count = v->shape[0] * rest;
  p.segments = 1;
  p.segment = p.count;
  return p;
}

/* Cuts each channel into runs so that about target_blocks runs cover the
 * tensor (one block each fills the device), none shorter than min_segment
 * unless the channel itself is (one run); a channel never has more runs
 * than values. */
MX_HD static inline mx_channel_plan mx_channel_plan_split(mx_channel_plan p, int64_t target_blocks,
                                                         int64_t min_segment) {
  int64_t wanted = p.channels > 0 ? (target_blocks + p.channels - 1) / p.channels : 1;
  int64_t most = min_segment > 0 ? p.count / min_segment : p.count;
  p.segments = wanted < most ? wanted : most;
  if (p.segments < 1) p.segments = 1;
  p.segment = (p.count + p.segments - 1) / p.segments;
  if (p.segment > 0) p.segments = (p.count + p.segment - 1) / p.segment; /* no empty run at the end */
  return p;
}

/* The element offset of value j of channel c. */
MX_HD static inline int64_t mx_channel_offset(const mx_channel_plan *p, int64_t c, int64_t j) {
  int64_t n = j / p->plane;
  return (n * p->channels + c) * p->plane + (j - n * p->plane);
}

/* The channel of the element at offset i. */
MX_HD static inline int64_t mx_channel_of(const mx_channel_plan *p, int64_t i) {
  return i / p->plane % p->channels;
}

#endif
