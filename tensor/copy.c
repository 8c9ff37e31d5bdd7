/* Copies: between views, dtypes and devices, and element access. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor_impl.h"

/* src's view broadcast to shape, or an error naming op. */
static mx_status broadcast_view(const char *op, const mx_tensor *src, int ndim, const int64_t *shape,
                                mx_kview *out) {
  *out = mx__kview_of(src);
  if (src->ndim > ndim) goto mismatch;
  out->ndim = ndim;
  for (int i = ndim - 1, j = src->ndim - 1; i >= 0; i--, j--) {
    int64_t size = j >= 0 ? src->shape[j] : 1, stride = j >= 0 ? src->strides[j] : 0;
    if (size != shape[i] && size != 1) goto mismatch;
    out->shape[i] = shape[i];
    out->strides[i] = size == shape[i] ? stride : 0;
  }
  return MX_OK;
mismatch:;
  char a[MX__DIMS_STR], b[MX__DIMS_STR];
  return mx__error(MX_SHAPE_ERROR, "%s: source shape %s cannot be broadcast to %s", op,
                   mx__dims_str(a, src->ndim, src->shape), mx__dims_str(b, ndim, shape));
}

/* A contiguous tensor on `device` with `src`'s shape and dtype whose
 * bytes are src's, moved across devices. */
static mx_tensor *transfer(const mx_tensor *src, mx_device device) {
  mx_tensor *dense = mx__tensor_contiguous(src);
  if (!dense) return NULL;
  mx_tensor *out = mx__tensor_alloc("mx_copy_", mx_shape_of(src->ndim, src->shape), src->dtype, device);
  mx_status status = out ? MX_OK : mx_last_status();
  if (out) {
    size_t bytes = out->storage->bytes; /* numel times the dtype size, checked when out was made */
    mx_kview from = mx__kview_of(dense), to = mx__kview_of(out);
    status = device == MX_CPU ? dense->storage->backend->copy_to_host(to.data, from.data, bytes)
                              : out->storage->backend->copy_from_host(to.data, from.data, bytes);
  }
  mx_release(dense);
  if (status != MX_OK) {
    mx_release(out);
    return NULL;
  }
  return out;
}

mx_status mx_copy_(mx_tensor *dst, const mx_tensor *src) {
  if (!dst) return mx__null_input("mx_copy_", "dst");
  if (!src) return mx__null_input("mx_copy_", "src");
  mx_kview sv, dv = mx__kview_of(dst);
  mx_status status = broadcast_view("mx_copy_", src, dst->ndim, dst->shape, &sv);
  if (status != MX_OK) return status;
  mx_tensor *staged = NULL;
  if (src->device != dst->device) {
    /* convert on the source device, move the bytes, then scatter */
    mx_tensor *wide = mx__tensor_view(src, sv.ndim, sv.shape, sv.strides, src->offset);
    mx_tensor *converted = wide ? mx__tensor_to_dtype(wide, dst->dtype) : NULL;
    staged = converted ? transfer(converted, dst->device) : NULL;
    mx_release(wide);
    mx_release(converted);
    if (!staged) return mx_last_status();
    sv = mx__kview_of(staged);
  } else if (src->storage == dst->storage) {
    staged = mx__tensor_clone(src); /* overlapping views: read everything first */
    if (!staged) return mx_last_status();
    broadcast_view("mx_copy_", staged, dst->ndim, dst->shape, &sv);
  }
  status = dst->storage->backend->convert(&dv, &sv);
  mx_release(staged);
  if (status == MX_OK) mx__bump_version(dst);
  return status;
}

mx_status mx_fill_(mx_tensor *t, double value) {
  if (!t) return mx__null_input("mx_fill_", "t");
  mx_kview v = mx__kview_of(t);
  mx_status status = t->storage->backend->fill(&v, value);
  if (status == MX_OK) mx__bump_version(t);
  return status;
}

/* A copy of t in dtype on device, laid out channels-last or row-major. */
static mx_tensor *copy_as(const char *op, const mx_tensor *t, mx_dtype dtype, mx_device device, bool channels_last) {
  mx_shape shape = mx_shape_of(t->ndim, t->shape);
  mx_tensor *out = channels_last ? mx__tensor_alloc_channels_last(op, shape, dtype, device)
                                 : mx__tensor_alloc(op, shape, dtype, device);
  if (out && mx_copy_(out, t) != MX_OK) {
    mx_release(out);
    return NULL;
  }
  return out;
}

mx_tensor *mx__tensor_contiguous(const mx_tensor *t) {
  if (!t) {
    mx__null_input("mx_contiguous", "t");
    return NULL;
  }
  if (mx_is_contiguous(t)) return mx__tensor_view(t, t->ndim, t->shape, t->strides, t->offset);
  return copy_as("mx_contiguous", t, t->dtype, t->device, false);
}

mx_tensor *mx__tensor_in_layout(const char *op, const mx_tensor *t, bool channels_last) {
  if (!channels_last || !t) return mx__tensor_contiguous(t);
  if (mx__is_channels_last(t)) return mx__tensor_view(t, t->ndim, t->shape, t->strides, t->offset);
  return copy_as(op, t, t->dtype, t->device, true);
}

mx_tensor *mx__tensor_to_channels_last(const mx_tensor *t) {
  if (!t) {
    mx__null_input("mx_to_channels_last", "t");
    return NULL;
  }
  if (t->ndim != 4) {
    char a[MX__DIMS_STR];
    mx__error(MX_SHAPE_ERROR, "mx_to_channels_last: a channels-last tensor has 4 dims (N, C, H, W); got shape %s",
              mx__dims_str(a, t->ndim, t->shape));
    return NULL;
  }
  if (!mx__is_channels_last(t)) return copy_as("mx_to_channels_last", t, t->dtype, t->device, true);
  /* a view, with the strides a channels-last tensor is made with: the same
   * memory, and for one channel or one pixel the mark that it is meant as
   * channels-last (mx__suggests_channels_last) */
  int64_t strides[4];
  mx__channels_last_strides(t->shape, strides);
  return mx__tensor_view(t, 4, t->shape, strides, t->offset);
}

/* Clones, casts and moves keep a channels-last tensor's layout (PyTorch's
 * preserve_format), so that autocast's casts and the ops after them do too. */
mx_tensor *mx__tensor_clone(const mx_tensor *t) {
  if (!t) {
    mx__null_input("mx_clone", "t");
    return NULL;
  }
  return copy_as("mx_clone", t, t->dtype, t->device, mx__suggests_channels_last(t));
}

mx_tensor *mx__tensor_to_dtype(const mx_tensor *t, mx_dtype dtype) {
  if (!t) {
    mx__null_input("mx_to_dtype", "t");
    return NULL;
  }
  return copy_as("mx_to_dtype", t, dtype, t->device, mx__suggests_channels_last(t));
}

mx_tensor *mx__tensor_to_device(const mx_tensor *t, mx_device device) {
  if (!t) {
    mx__null_input("mx_to_device", "t");
    return NULL;
  }
  return copy_as("mx_to_device", t, t->dtype, device, mx__suggests_channels_last(t));
}

/* --- element access ---------------------------------------------------------- */

/* A 0-d view of one element, or NULL with an error naming op. */
static mx_tensor *element(const char *op, const mx_tensor *t, mx_shape index) {
  if (!t) {
    mx__null_input(op, "t");
    return NULL;
  }
  char a[MX__DIMS_STR], b[MX__DIMS_STR];
  if (index.ndim != t->ndim) {
    mx__error(MX_INDEX_ERROR, "%s: index %s has %d dims but the tensor has %d (shape %s)", op,
              mx__dims_str(a, index.ndim < 0 || index.ndim > MX_MAX_DIMS ? 0 : index.ndim, index.d),
              index.ndim, t->ndim, mx__dims_str(b, t->ndim, t->shape));
    return NULL;
  }
  int64_t offset = t->offset;
  for (int i = 0; i < t->ndim; i++) {
    int64_t k = index.d[i] < 0 ? index.d[i] + t->shape[i] : index.d[i];
    if (k < 0 || k >= t->shape[i]) {
      mx__error(MX_INDEX_ERROR, "%s: index %lld out of range for dim %d of size %lld (shape %s)", op,
                (long long)index.d[i], i, (long long)t->shape[i], mx__dims_str(b, t->ndim, t->shape));
      return NULL;
    }
    offset += k * t->strides[i];
  }
  return mx__tensor_view(t, 0, NULL, NULL, offset);
}

static double read_scalar(const mx_tensor *e) {
  double value = NAN;
  mx_tensor *host = mx__tensor_alloc("mx_at", MX_SCALAR, MX_F64, MX_CPU);
  if (host && mx_copy_(host, e) == MX_OK) value = *(const double *)host->storage->data;
  mx_release(host);
  return value;
}

double mx_at(const mx_tensor *t, mx_shape index) {
  mx_tensor *e = element("mx_at", t, index);
  if (!e) return NAN;
  double value = read_scalar(e);
  mx_release(e);
  return value;
}

mx_status mx_set(mx_tensor *t, mx_shape index, double value) {
  mx_tensor *e = element("mx_set", t, index);
  if (!e) return mx_last_status();
  mx_tensor *host = mx_scalar(value, MX_F64, MX_CPU);
  mx_status status = host ? mx_copy_(e, host) : mx_last_status();
  mx_release(host);
  mx_release(e);
  return status;
}

double mx_item(const mx_tensor *t) {
  if (!t) {
    mx__null_input("mx_item", "t");
    return NAN;
  }
  if (mx_numel(t) != 1) {
    char b[MX__DIMS_STR];
    mx__error(MX_SHAPE_ERROR, "mx_item: a tensor with %lld elements (shape %s) has no single value",
              (long long)mx_numel(t), mx__dims_str(b, t->ndim, t->shape));
    return NAN;
  }
  mx_tensor *e = mx__tensor_view(t, 0, NULL, NULL, t->offset);
  double value = e ? read_scalar(e) : NAN;
  mx_release(e);
  return value;
}

mx_status mx_to_host(const mx_tensor *t, void *dst, size_t bytes) {
  if (!t) return mx__null_input("mx_to_host", "t");
  if (!dst) return mx__null_input("mx_to_host", "dst");
  int64_t numel = mx_numel(t), need; /* a view may hold more elements than memory can */
  if (mx__mul_overflows(numel, (int64_t)mx_dtype_size(t->dtype), &need))
    return mx__error(MX_SHAPE_ERROR, "mx_to_host: %lld %s elements are more than 2^63-1 bytes", (long long)numel,
                     mx_dtype_name(t->dtype));
  if (bytes != (size_t)need)
    return mx__error(MX_INVALID_ARGUMENT, "mx_to_host: buffer of %zu bytes given, %lld %s elements need %lld",
                     bytes, (long long)numel, mx_dtype_name(t->dtype), (long long)need);
  /* a move keeps a channels-last layout: made row-major after it */
  mx_tensor *moved = t->device == MX_CPU ? NULL : mx__tensor_to_device(t, MX_CPU);
  mx_tensor *host = t->device == MX_CPU ? mx__tensor_contiguous(t) : moved ? mx__tensor_contiguous(moved) : NULL;
  mx_release(moved);
  if (!host) return mx_last_status();
  memcpy(dst, mx__kview_of(host).data, (size_t)need);
  mx_release(host);
  return MX_OK;
}
