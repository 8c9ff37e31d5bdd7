/* A contiguous (row-major) kernel view of a host buffer, for tests that call CPU kernels directly. */
#ifndef MX_TESTS_OPS_PLAIN_KVIEW_H
#define MX_TESTS_OPS_PLAIN_KVIEW_H

#include "kernels/base_internal.h"

/* The row-major view of data, ndim dims of the given shape, in dt. */
static inline mx_kview plain(void *data, mx_dtype dt, int ndim, const int64_t *shape) {
  mx_kview v = {.data = data, .dtype = dt, .ndim = ndim};
  int64_t step = 1;
  for (int d = ndim - 1; d >= 0; d--) v.shape[d] = shape[d], v.strides[d] = step, step *= shape[d];
  return v;
}

#endif
