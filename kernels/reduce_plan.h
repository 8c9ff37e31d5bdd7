/* A reduction's plan: which dims are kept (outer) and which reduced
 * (inner), with their strides, shared by the CPU's reductions
 * (kernels/cpu/reduce.c) and CUDA's (kernels/cuda/reduce.cu). */
#ifndef MX_KERNELS_REDUCE_PLAN_H
#define MX_KERNELS_REDUCE_PLAN_H

#include <string.h>

#include "kernels/backend.h"

typedef struct {
  int n_outer, n_inner;
  int64_t outer_shape[MX_MAX_DIMS], outer_in[MX_MAX_DIMS], outer_out[MX_MAX_DIMS], outer_idx[MX_MAX_DIMS];
  int64_t inner_shape[MX_MAX_DIMS], inner_in[MX_MAX_DIMS];
  int64_t inner_numel, outputs; /* elements reduced into each output; outputs */
} mx_reduce_plan;

/* in's dims split by mask (bit d: dim d is reduced); out and index (either
 * may be NULL) have in's ndim, size 1 along the reduced dims. */
MX_HD static inline mx_reduce_plan mx_reduce_plan_of(const mx_kview *out, const mx_kview *index, const mx_kview *in,
                                                     uint32_t mask) {
  mx_reduce_plan p;
  memset(&p, 0, sizeof p);
  p.inner_numel = p.outputs = 1;
  for (int d = 0; d < in->ndim; d++) {
    if (mask & (1u << d)) {
      p.inner_shape[p.n_inner] = in->shape[d];
      p.inner_in[p.n_inner++] = in->strides[d];
      p.inner_numel *= in->shape[d];
    } else {
      p.outer_shape[p.n_outer] = in->shape[d];
      p.outer_in[p.n_outer] = in->strides[d];
      p.outer_out[p.n_outer] = out ? out->strides[d] : 0;
      p.outer_idx[p.n_outer++] = index ? index->strides[d] : 0;
      p.outputs *= in->shape[d];
    }
  }
  return p;
}

#endif
