/* The tensor object: allocation, reference counts, geometry, properties. */
#include <stdlib.h>
#include <string.h>

#include "tensor/object_cache.h"
#include "tensor/tensor_impl.h"

mx_shape mx_shape_of(int ndim, const int64_t *dims) {
  mx_shape s = {.ndim = ndim};
  for (int i = 0; i < ndim && i < MX_MAX_DIMS; i++) s.d[i] = dims[i];
  return s;
}

/* No check here: every tensor's shape passed mx__check_shape (or expand's
 * check), so its count and strides fit int64_t. */
int64_t mx__numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

void mx__contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i] > 1 ? shape[i] : 1;
  }
}

mx_status mx__error_too_many_elements(const char *op, int ndim, const int64_t *dims) {
  char buf[MX__DIMS_STR];
  for (int i = 0; i < ndim; i++)
    if (dims[i] == 0)
      return mx__error(MX_SHAPE_ERROR, "%s: shape %s is too large: its nonzero sizes multiply past 2^63-1", op,
                       mx__dims_str(buf, ndim, dims));
  return mx__error(MX_SHAPE_ERROR, "%s: shape %s has too many elements", op, mx__dims_str(buf, ndim, dims));
}

mx_status mx__check_shape(const char *op, mx_shape shape) {
  if (shape.ndim < 0 || shape.ndim > MX_MAX_DIMS)
    return mx__error(MX_SHAPE_ERROR, "%s: %d dims given, a tensor has 0 to %d", op, shape.ndim,
                     MX_MAX_DIMS);
  char buf[MX__DIMS_STR];
  for (int i = 0; i < shape.ndim; i++)
    if (shape.d[i] < 0)
      return mx__error(MX_SHAPE_ERROR, "%s: negative size %lld in dim %d of shape %s", op,
                       (long long)shape.d[i], i, mx__dims_str(buf, shape.ndim, shape.d));
  int64_t numel;
  if (mx__numel_overflows(shape.ndim, shape.d, &numel)) return mx__error_too_many_elements(op, shape.ndim, shape.d);
  return MX_OK;
}

mx_status mx__check_dtype(const char *op, mx_dtype dtype) {
  if (!mx_dtype_valid(dtype))
    return mx__error(MX_DTYPE_ERROR, "%s: invalid dtype %d", op, (int)dtype);
  return MX_OK;
}

int mx__wrap_dim(const char *op, int dim, int ndim) {
  int range = ndim > 0 ? ndim : 1; /* a 0-d tensor accepts dim 0 and -1 */
  if (dim < -range || dim >= range) {
    mx__error(MX_INDEX_ERROR, "%s: dim %d out of range for a %d-d tensor (expected %d to %d)", op, dim,
              ndim, -range, range - 1);
    return -1;
  }
  return dim < 0 ? dim + range : dim;
}

/* --- storage ------------------------------------------------------------------ */

static _Thread_local bool inference_mode; /* MX_INFERENCE_MODE's, per thread */

bool mx__inference_mode_set(bool enabled) {
  bool previous = inference_mode;
  inference_mode = enabled;
  return previous;
}

bool mx_is_inference_mode_enabled(void) { return inference_mode; }

bool mx_is_inference(const mx_tensor *t) { return t && t->storage->inference; }

static mx__storage *storage_new(const char *op, size_t bytes, mx_device device) {
  const mx_backend *backend = mx__backend(device);
  if (!backend) {
    mx__error_prefix(op); /* the backend's words, and the op that asked */
    return NULL;
  }
  mx__storage *s = mx__object_new(sizeof *s);
  if (!s) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
    return NULL;
  }
  if (backend->alloc(bytes, &s->data) != MX_OK) {
    mx__error_prefix(op);
    mx__object_free(s, sizeof *s);
    return NULL;
  }
  atomic_init(&s->refs, 1);
  atomic_init(&s->version, 0);
  static atomic_ullong last_id;
  s->id = atomic_fetch_add(&last_id, 1) + 1;
  atomic_init(&s->exposed, false);
  s->inference = inference_mode;
  s->bytes = bytes;
  s->device = device;
  s->backend = backend;
  mx__stats_storage(device, (int64_t)bytes, 1);
  return s;
}

static void storage_decref(mx__storage *s) {
  if (atomic_fetch_sub(&s->refs, 1) != 1) return;
  s->backend->free(s->data, s->bytes);
  mx__stats_storage(s->device, -(int64_t)s->bytes, -1);
  mx__object_free(s, sizeof *s);
}

/* --- tensors ------------------------------------------------------------------ */

static mx_tensor *tensor_new(mx__storage *storage, mx_dtype dtype, int ndim, const int64_t *shape,
                             const int64_t *strides, int64_t offset) {
  mx_tensor *t = mx__object_new(sizeof *t);
  if (!t) {
    mx__error(MX_OUT_OF_MEMORY, "out of memory for a tensor handle");
    return NULL;
  }
  atomic_init(&t->refs, 1);
  t->dtype = dtype;
  t->device = storage->device;
  t->ndim = ndim;
  if (ndim > 0) { /* a 0-d view passes NULL arrays */
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    memcpy(t->strides, strides, sizeof(int64_t) * (size_t)ndim);
  }
  t->offset = offset;
  t->storage = storage;
  atomic_fetch_add(&storage->refs, 1);
  mx__stats_tensor(t->device, 1);
  if (mx__scope_adopt(t) != MX_OK) {
    mx__decref(t);
    return NULL;
  }
  return t;
}

static mx_tensor *alloc_with_layout(const char *op, mx_shape shape, mx_dtype dtype, mx_device device,
                                     bool channels_last) {
  if (mx__check_shape(op, shape) != MX_OK || mx__check_dtype(op, dtype) != MX_OK) return NULL;
  int64_t strides[MX_MAX_DIMS], numel = mx__numel(shape.ndim, shape.d), bytes;
  /* int64_t, not size_t: the memory statistics and element offsets count bytes in it */
  _Static_assert(SIZE_MAX >= INT64_MAX, "a byte count that fits int64_t fits size_t");
  if (mx__mul_overflows(numel, (int64_t)mx_dtype_size(dtype), &bytes)) {
    char buf[MX__DIMS_STR];
    mx__error(MX_SHAPE_ERROR, "%s: shape %s of %s is too large: %lld elements of %zu bytes are more than 2^63-1 bytes", op,
              mx__dims_str(buf, shape.ndim, shape.d), mx_dtype_name(dtype), (long long)numel, mx_dtype_size(dtype));
    return NULL;
  }
  if (channels_last)
    mx__channels_last_strides(shape.d, strides);
  else
    mx__contiguous_strides(shape.ndim, shape.d, strides);
  mx__storage *storage = storage_new(op, (size_t)bytes, device);
  if (!storage) return NULL;
  mx_tensor *t = tensor_new(storage, dtype, shape.ndim, shape.d, strides, 0);
  storage_decref(storage); /* the tensor holds it now (or nobody, on failure) */
  return t;
}

mx_tensor *mx__tensor_alloc(const char *op, mx_shape shape, mx_dtype dtype, mx_device device) {
  return alloc_with_layout(op, shape, dtype, device, false);
}

mx_tensor *mx__tensor_alloc_channels_last(const char *op, mx_shape shape, mx_dtype dtype, mx_device device) {
  if (shape.ndim != 4) {
    mx__error(MX_SHAPE_ERROR, "%s: a channels-last tensor has 4 dims (N, C, H, W), not %d", op, shape.ndim);
    return NULL;
  }
  return alloc_with_layout(op, shape, dtype, device, true);
}

bool mx__is_channels_last(const mx_tensor *t) {
  mx_kview v = mx__kview_of(t);
  return mx__kview_is_channels_last(&v);
}

bool mx__suggests_channels_last(const mx_tensor *t) {
  if (!mx__is_channels_last(t)) return false;
  int64_t row_major[4];
  mx__contiguous_strides(4, t->shape, row_major);
  return memcmp(row_major, t->strides, sizeof row_major) != 0;
}

mx_tensor *mx__tensor_view(const mx_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                           int64_t offset) {
  return tensor_new(t->storage, t->dtype, ndim, shape, strides, offset);
}

mx_tensor *mx__retain(mx_tensor *t) {
  atomic_fetch_add(&t->refs, 1);
  return t;
}

void (*mx__autograd_meta_free)(mx__autograd_meta *meta);

void mx__decref(mx_tensor *t) {
  if (atomic_fetch_sub(&t->refs, 1) != 1) return;
  if (t->autograd) mx__autograd_meta_free(t->autograd);
  /* the last reference: no other thread reads cast_ready, and a plain load spares every tensor's end an exchange */
  mx_tensor *cast = atomic_load_explicit(&t->cast_ready, memory_order_relaxed);
  if (cast) mx__decref(cast);
  mx__stats_tensor(t->device, -1);
  storage_decref(t->storage);
  mx__object_free(t, sizeof *t);
}

/* Copies whole arrays, dims past ndim too: a fixed-size copy is a few
 * vector moves, where zeroing the view and copying ndim dims was 9% of a
 * tiny op's time. */
mx_kview mx__kview_of(const mx_tensor *t) {
  mx_kview v;
  v.data = (char *)t->storage->data + t->offset * (int64_t)mx_dtype_size(t->dtype);
  v.dtype = t->dtype;
  v.ndim = t->ndim;
  memcpy(v.shape, t->shape, sizeof v.shape);
  memcpy(v.strides, t->strides, sizeof v.strides);
  /* no origin where the version does not say every write: inference
   * storage, and storage whose address the caller holds */
  bool versioned = !t->storage->inference && !atomic_load_explicit(&t->storage->exposed, memory_order_relaxed);
  v.origin = versioned ? t->storage->id : 0;
  v.origin_version = atomic_load_explicit(&t->storage->version, memory_order_relaxed);
  v.origin_data = v.data;
  return v;
}

void mx__bump_version(mx_tensor *t) {
  if (!t->storage->inference) atomic_fetch_add(&t->storage->version, 1); /* an inference tensor has none */
}

/* --- properties ------------------------------------------------------------------ */

mx_dtype mx_dtype_of(const mx_tensor *t) { return t ? t->dtype : MX_DTYPE_COUNT; }
mx_device mx_device_of(const mx_tensor *t) { return t ? t->device : MX_DEVICE_COUNT; }
int mx_ndim(const mx_tensor *t) { return t ? t->ndim : -1; }
int64_t mx_numel(const mx_tensor *t) { return t ? mx__numel(t->ndim, t->shape) : 0; }
int64_t mx_offset(const mx_tensor *t) { return t ? t->offset : 0; }
uint64_t mx_version(const mx_tensor *t) { return t ? atomic_load(&t->storage->version) : 0; }

mx_shape mx_shape_get(const mx_tensor *t) {
  return t ? mx_shape_of(t->ndim, t->shape) : (mx_shape){0, {0}};
}

mx_shape mx_strides_get(const mx_tensor *t) {
  return t ? mx_shape_of(t->ndim, t->strides) : (mx_shape){0, {0}};
}

int64_t mx_size(const mx_tensor *t, int dim) {
  if (!t) {
    mx__null_input("mx_size", "t");
    return -1;
  }
  int d = mx__wrap_dim("mx_size", dim, t->ndim);
  if (d < 0) return -1;
  return t->ndim ? t->shape[d] : 1;
}

bool mx_is_contiguous(const mx_tensor *t) {
  if (!t) return false;
  mx_kview v = mx__kview_of(t);
  return mx__kview_is_contiguous(&v);
}

bool mx_is_channels_last(const mx_tensor *t) { return t && mx__is_channels_last(t); }

bool mx_shares_storage(const mx_tensor *a, const mx_tensor *b) {
  return a && b && a->storage == b->storage;
}

void *mx_data_ptr(const mx_tensor *t) {
  if (!t) return NULL;
  atomic_store(&t->storage->exposed, true); /* the caller may write through it without a version bump */
  return mx__kview_of(t).data;
}
