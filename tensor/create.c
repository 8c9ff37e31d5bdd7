/* Making tensors: empty, zeros, ones, full, arange, linspace, eye, from data. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor_impl.h"

mx_tensor *mx_empty(mx_shape shape, mx_dtype dtype, mx_device device) {
  return mx__tensor_alloc("mx_empty", shape, dtype, device);
}

static mx_tensor *filled(const char *op, mx_shape shape, double value, mx_dtype dtype, mx_device device) {
  mx_tensor *t = mx__tensor_alloc(op, shape, dtype, device);
  if (!t) return NULL;
  mx_kview v = mx__kview_of(t);
  if (t->storage->backend->fill(&v, value) != MX_OK) {
    mx_release(t);
    return NULL;
  }
  return t;
}

mx_tensor *mx_zeros(mx_shape shape, mx_dtype dtype, mx_device device) {
  return filled("mx_zeros", shape, 0.0, dtype, device);
}

mx_tensor *mx_ones(mx_shape shape, mx_dtype dtype, mx_device device) {
  return filled("mx_ones", shape, 1.0, dtype, device);
}

mx_tensor *mx_full(mx_shape shape, double value, mx_dtype dtype, mx_device device) {
  return filled("mx_full", shape, value, dtype, device);
}

mx_tensor *mx_scalar(double value, mx_dtype dtype, mx_device device) {
  return filled("mx_scalar", MX_SCALAR, value, dtype, device);
}

/* A tensor shaped like t, filled with value (uninitialised when value is NULL). */
static mx_tensor *like(const char *op, const mx_tensor *t, const double *value) {
  if (!t) {
    mx__null_input(op, "t");
    return NULL;
  }
  mx_shape shape = mx_shape_of(t->ndim, t->shape);
  return value ? filled(op, shape, *value, t->dtype, t->device) : mx__tensor_alloc(op, shape, t->dtype, t->device);
}

mx_tensor *mx_empty_like(const mx_tensor *t) { return like("mx_empty_like", t, NULL); }
mx_tensor *mx_zeros_like(const mx_tensor *t) { return like("mx_zeros_like", t, &(double){0.0}); }
mx_tensor *mx_ones_like(const mx_tensor *t) { return like("mx_ones_like", t, &(double){1.0}); }
mx_tensor *mx_full_like(const mx_tensor *t, double value) { return like("mx_full_like", t, &value); }

mx_tensor *mx_from_data(const void *data, mx_shape shape, mx_dtype dtype, mx_device device) {
  if (!data) {
    mx__null_input("mx_from_data", "data");
    return NULL;
  }
  mx_tensor *t = mx__tensor_alloc("mx_from_data", shape, dtype, device);
  if (!t) return NULL;
  if (t->storage->backend->copy_from_host(t->storage->data, data, t->storage->bytes) != MX_OK) {
    mx_release(t);
    return NULL;
  }
  return t;
}

/* arange and linspace build their values on the host first: a bound well
 * below where the host buffer's size could overflow. */
#define MAX_RANGE_ELEMENTS 1e12

/* Values computed on the host as doubles, then converted to the dtype and
 * moved to the device. */
static mx_tensor *from_doubles(const char *op, const double *values, int64_t n, mx_dtype dtype,
                               mx_device device) {
  mx_tensor *host = mx_from_data(values, MX_SHAPE(n), MX_F64, MX_CPU);
  if (!host) return NULL;
  mx_tensor *t = mx__tensor_alloc(op, MX_SHAPE(n), dtype, device);
  if (t && mx_copy_(t, host) != MX_OK) {
    mx_release(t);
    t = NULL;
  }
  mx_release(host);
  return t;
}

static mx_tensor *range_values(const char *op, int64_t n, double start, double step, double end,
                               bool symmetric, mx_dtype dtype, mx_device device) {
  if (mx__check_dtype(op, dtype) != MX_OK) return NULL;
  double *values = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (!values) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory for %lld values", op, (long long)n);
    return NULL;
  }
  /* linspace fills its second half from the end, as PyTorch does, so the
   * last value is exactly `end` */
  for (int64_t i = 0; i < n; i++)
    values[i] = symmetric && n > 1 && i >= n / 2 ? end - step * (double)(n - 1 - i) : start + step * (double)i;
  mx_tensor *t = from_doubles(op, values, n, dtype, device);
  free(values);
  return t;
}

mx_tensor *mx_arange(double start, double end, double step, mx_dtype dtype, mx_device device) {
  if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step)) {
    mx__error(MX_INVALID_ARGUMENT, "mx_arange: start %g, end %g and step %g must be finite and step nonzero",
              start, end, step);
    return NULL;
  }
  if ((end - start) / step < 0) {
    mx__error(MX_INVALID_ARGUMENT,
              "mx_arange: step %g goes the wrong way from start %g to end %g", step, start, end);
    return NULL;
  }
  double count = ceil((end - start) / step);
  if (count > MAX_RANGE_ELEMENTS) {
    mx__error(MX_SHAPE_ERROR, "mx_arange: %g elements is too many", count);
    return NULL;
  }
  return range_values("mx_arange", (int64_t)count, start, step, end, false, dtype, device);
}

mx_tensor *mx_linspace(double start, double end, int64_t steps, mx_dtype dtype, mx_device device) {
  if (steps < 0) {
    mx__error(MX_INVALID_ARGUMENT, "mx_linspace: number of steps must be non-negative, got %lld",
              (long long)steps);
    return NULL;
  }
  if (steps > MAX_RANGE_ELEMENTS) {
    mx__error(MX_SHAPE_ERROR, "mx_linspace: %lld elements is too many", (long long)steps);
    return NULL;
  }
  double step = steps > 1 ? (end - start) / (double)(steps - 1) : 0;
  return range_values("mx_linspace", steps, start, step, end, true, dtype, device);
}

mx_tensor *mx_eye(int64_t n, int64_t m, mx_dtype dtype, mx_device device) {
  mx_tensor *t = filled("mx_eye", MX_SHAPE(n, m), 0.0, dtype, device);
  if (!t) return NULL;
  int64_t len = n < m ? n : m;
  if (len == 0) return t; /* no diagonal, and m + 1 may overflow for [0, INT64_MAX] */
  /* the diagonal is the 1-d view with stride m + 1 */
  mx_kview diagonal = mx__kview_of(t);
  diagonal.ndim = 1;
  diagonal.shape[0] = len;
  diagonal.strides[0] = m + 1;
  if (t->storage->backend->fill(&diagonal, 1.0) != MX_OK) {
    mx_release(t);
    return NULL;
  }
  return t;
}
