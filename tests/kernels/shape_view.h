/* A contiguous kernel view of a shape with no data, for the tests of the
 * plain-C logic behind CUDA kernels (kernels/channel_plan.h,
 * kernels/conv_cudnn_case.h), which reads shapes and strides only. */
#ifndef MX_TESTS_KERNELS_SHAPE_VIEW_H
#define MX_TESTS_KERNELS_SHAPE_VIEW_H

#include <string.h>

#include "kernels/backend.h"

static inline mx_kview shape_view(mx_dtype dtype, int ndim, const int64_t *shape) {
  mx_kview v;
  memset(&v, 0, sizeof v);
  v.dtype = dtype, v.ndim = ndim;
  int64_t n = 1;
  for (int d = ndim - 1; d >= 0; d--) v.shape[d] = shape[d], v.strides[d] = n, n *= shape[d];
  return v;
}

#endif
