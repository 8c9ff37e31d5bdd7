/* Where batch norm's per-channel kernels find a channel's values in a
 * contiguous (N, C, *) tensor, how CUDA's channel_sums
 * (kernels/cuda/batch_norm.cu) splits each channel's values among blocks,
 * and how a thread walks its share of them.
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

/* A walk over channel c's values j, j + step, j + 2 step, ... by their
 * offsets, with no division per value (a 64-bit division costs dozens of
 * instructions on a GPU): each step adds a constant, and one more jump
 * past the other channels' planes where it crosses into the next plane. */
typedef struct {
  int64_t offset;      /* of the current value */
  int64_t within;      /* its place in its plane: j % plane */
  int64_t plane;       /* the plan's */
  int64_t step_within; /* step % plane */
  int64_t step_offset; /* the offset's change when the step stays in a plane as far in */
  int64_t wrap;        /* the offset's extra change when the step crosses one plane more */
} mx_channel_walk;

/* The walk from value j of channel c (a plan with values: plane >= 1). */
MX_HD static inline mx_channel_walk mx_channel_walk_of(const mx_channel_plan *p, int64_t c, int64_t j, int64_t step) {
  mx_channel_walk w;
  w.offset = mx_channel_offset(p, c, j);
  w.within = j % p->plane;
  w.plane = p->plane;
  w.step_within = step % p->plane;
  w.step_offset = step / p->plane * p->channels * p->plane + w.step_within;
  w.wrap = (p->channels - 1) * p->plane; /* the next plane of channel c is channels planes on, not one */
  return w;
}

/* Moves the walk on by its step. */
MX_HD static inline void mx_channel_walk_next(mx_channel_walk *w) {
  w->offset += w->step_offset;
  w->within += w->step_within;
  if (w->within >= w->plane) {
    w->within -= w->plane;
    w->offset += w->wrap;
  }
}

/* The channel of the element at offset i. */
MX_HD static inline int64_t mx_channel_of(const mx_channel_plan *p, int64_t i) {
  return i / p->plane % p->channels;
}

#endif
