/* Views: new geometry over the same storage, no data copied. */
#include <string.h>

#include "tensor/tensor_impl.h"

#define CHECK_INPUT(op, t)        \
  do {                            \
    if (!(t)) {                   \
      mx__null_input(op, #t);     \
      return NULL;                \
    }                             \
  } while (0)

/* Resolves a -1 in a requested shape against numel. */
static mx_status infer_shape(const char *op, const mx_tensor *t, mx_shape *shape) {
  if (shape->ndim < 0 || shape->ndim > MX_MAX_DIMS)
    return mx__check_shape(op, *shape);
  int infer = -1;
  int64_t known, numel = mx_numel(t);
  mx_shape given = *shape; /* with 1 for the -1 */
  char a[MX__DIMS_STR];
  for (int i = 0; i < shape->ndim; i++) {
    if (shape->d[i] == -1) {
      if (infer >= 0) return mx__error(MX_SHAPE_ERROR, "%s: only one dimension can be inferred (-1)", op);
      infer = i;
      given.d[i] = 1;
    } else if (shape->d[i] < 0) {
      return mx__error(MX_SHAPE_ERROR, "%s: invalid size %lld in dim %d of shape %s", op,
                       (long long)shape->d[i], i, mx__dims_str(a, shape->ndim, shape->d));
    }
  }
  if (mx__numel_overflows(given.ndim, given.d, &known)) return mx__error_too_many_elements(op, shape->ndim, shape->d);
  if (infer >= 0 && known != 0 && numel % known == 0) shape->d[infer] = numel / known;
  if ((infer >= 0 && (known == 0 || numel % known != 0)) || (infer < 0 && known != numel))
    return mx__error(MX_SHAPE_ERROR, "%s: shape %s is invalid for input of size %lld", op,
                     mx__dims_str(a, shape->ndim, shape->d), (long long)numel);
  return MX_OK;
}

/* Strides that view t with the new shape without copying, if any exist:
 * each run of old dims that is contiguous in memory may be regrouped freely
 * (PyTorch's computeStride). */
static bool view_strides(const mx_tensor *t, const mx_shape *shape, int64_t *strides) {
  int64_t numel = mx_numel(t);
  if (numel == 0 || t->ndim == 0) {
    mx__contiguous_strides(shape->ndim, shape->d, strides);
    return true;
  }
  int view_d = shape->ndim - 1;
  int64_t chunk_base_stride = t->strides[t->ndim - 1];
  int64_t tensor_numel = 1, view_numel = 1, chunk_end;
  for (int d = t->ndim - 1; d >= 0; d--) {
    tensor_numel *= t->shape[d]; /* a run of t's dims: fits, as t's numel does */
    if (d == 0 || (t->shape[d - 1] != 1 && (mx__mul_overflows(tensor_numel, chunk_base_stride, &chunk_end) ||
                                           t->strides[d - 1] != chunk_end))) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape->d[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape->d[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = t->strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

mx_tensor *mx__tensor_view_shape(const mx_tensor *t, mx_shape shape) {
  CHECK_INPUT("mx_view", t);
  if (infer_shape("mx_view", t, &shape) != MX_OK) return NULL;
  int64_t strides[MX_MAX_DIMS];
  if (!view_strides(t, &shape, strides)) {
    char a[MX__DIMS_STR], b[MX__DIMS_STR], c[MX__DIMS_STR];
    mx__error(MX_SHAPE_ERROR,
              "mx_view: shape %s cannot view a tensor of shape %s and strides %s without a copy; "
              "use mx_reshape", mx__dims_str(a, shape.ndim, shape.d), mx__dims_str(b, t->ndim, t->shape),
              mx__dims_str(c, t->ndim, t->strides));
    return NULL;
  }
  return mx__tensor_view(t, shape.ndim, shape.d, strides, t->offset);
}

mx_tensor *mx__tensor_reshape(const mx_tensor *t, mx_shape shape) {
  CHECK_INPUT("mx_reshape", t);
  if (infer_shape("mx_reshape", t, &shape) != MX_OK) return NULL;
  int64_t strides[MX_MAX_DIMS];
  if (view_strides(t, &shape, strides)) return mx__tensor_view(t, shape.ndim, shape.d, strides, t->offset);
  mx_tensor *dense = mx__tensor_contiguous(t);
  if (!dense) return NULL;
  mx__contiguous_strides(shape.ndim, shape.d, strides);
  mx_tensor *out = mx__tensor_view(dense, shape.ndim, shape.d, strides, dense->offset);
  mx_release(dense);
  return out;
}

mx_tensor *mx__tensor_transpose(const mx_tensor *t, int dim0, int dim1) {
  CHECK_INPUT("mx_transpose", t);
  int a = mx__wrap_dim("mx_transpose", dim0, t->ndim);
  int b = a < 0 ? -1 : mx__wrap_dim("mx_transpose", dim1, t->ndim);
  if (b < 0) return NULL;
  if (t->ndim == 0) return mx__tensor_view(t, 0, NULL, NULL, t->offset);
  int64_t shape[MX_MAX_DIMS], strides[MX_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  memcpy(strides, t->strides, sizeof strides);
  shape[a] = t->shape[b], shape[b] = t->shape[a];
  strides[a] = t->strides[b], strides[b] = t->strides[a];
  return mx__tensor_view(t, t->ndim, shape, strides, t->offset);
}

mx_tensor *mx__tensor_permute(const mx_tensor *t, mx_shape dims) {
  CHECK_INPUT("mx_permute", t);
  char a[MX__DIMS_STR];
  if (dims.ndim != t->ndim) {
    mx__error(MX_SHAPE_ERROR, "mx_permute: %d dims given for a %d-d tensor", dims.ndim, t->ndim);
    return NULL;
  }
  int64_t shape[MX_MAX_DIMS], strides[MX_MAX_DIMS];
  bool seen[MX_MAX_DIMS] = {false};
  for (int i = 0; i < t->ndim; i++) {
    int64_t d = dims.d[i] < 0 ? dims.d[i] + t->ndim : dims.d[i];
    if (d < 0 || d >= t->ndim || seen[d]) {
      mx__error(MX_INVALID_ARGUMENT, "mx_permute: dims %s are not a permutation of 0..%d", 
                mx__dims_str(a, dims.ndim, dims.d), t->ndim - 1);
      return NULL;
    }
    seen[d] = true;
    shape[i] = t->shape[d];
    strides[i] = t->strides[d];
  }
  return mx__tensor_view(t, t->ndim, shape, strides, t->offset);
}

/* A view without dim d (whose size must be 1, or the index is fixed). */
static mx_tensor *drop_dim(const mx_tensor *t, int d, int64_t offset) {
  int64_t shape[MX_MAX_DIMS], strides[MX_MAX_DIMS];
  for (int i = 0, j = 0; i < t->ndim; i++) {
    if (i == d) continue;
    shape[j] = t->shape[i];
    strides[j++] = t->strides[i];
  }
  return mx__tensor_view(t, t->ndim - 1, shape, strides, offset);
}

mx_tensor *mx__tensor_squeeze(const mx_tensor *t, int dim) {
  CHECK_INPUT("mx_squeeze", t);
  int d = mx__wrap_dim("mx_squeeze", dim, t->ndim);
  if (d < 0) return NULL;
  if (t->ndim == 0 || t->shape[d] != 1) return mx__tensor_view(t, t->ndim, t->shape, t->strides, t->offset);
  return drop_dim(t, d, t->offset);
}

mx_tensor *mx__tensor_squeeze_all(const mx_tensor *t) {
  CHECK_INPUT("mx_squeeze_all", t);
  int64_t shape[MX_MAX_DIMS], strides[MX_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] == 1) continue;
    shape[n] = t->shape[i];
    strides[n++] = t->strides[i];
  }
  return mx__tensor_view(t, n, shape, strides, t->offset);
}

mx_tensor *mx__tensor_unsqueeze(const mx_tensor *t, int dim) {
  CHECK_INPUT("mx_unsqueeze", t);
  if (t->ndim == MX_MAX_DIMS) {
    mx__error(MX_SHAPE_ERROR, "mx_unsqueeze: a tensor has at most %d dims", MX_MAX_DIMS);
    return NULL;
  }
  if (dim < -(t->ndim + 1) || dim > t->ndim) { /* a new dim may go anywhere in 0..ndim */
    mx__error(MX_INDEX_ERROR, "mx_unsqueeze: dim %d out of range for a %d-d tensor (expected %d to %d)", dim,
              t->ndim, -(t->ndim + 1), t->ndim);
    return NULL;
  }
  int d = dim < 0 ? dim + t->ndim + 1 : dim;
  int64_t shape[MX_MAX_DIMS], strides[MX_MAX_DIMS];
  for (int i = 0, j = 0; i <= t->ndim; i++) {
    if (i == d) {
      shape[i] = 1;
      strides[i] = d < t->ndim ? t->shape[d] * t->strides[d] : 1;
    } else {
      shape[i] = t->shape[j];
      strides[i] = t->strides[j++];
    }
  }
  return mx__tensor_view(t, t->ndim + 1, shape, strides, t->offset);
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

mx_tensor *mx__tensor_slice(const mx_tensor *t, int dim, int64_t start, int64_t end, int64_t step) {
  CHECK_INPUT("mx_slice", t);
  if (t->ndim == 0) {
    mx__error(MX_INDEX_ERROR, "mx_slice: cannot slice a 0-d tensor");
    return NULL;
  }
  int d = mx__wrap_dim("mx_slice", dim, t->ndim);
  if (d < 0) return NULL;
  if (step <= 0) {
    mx__error(MX_INVALID_ARGUMENT, "mx_slice: step must be positive, got %lld", (long long)step);
    return NULL;
  }
  int64_t size = t->shape[d];
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = clamp64(start, 0, size);
  end = clamp64(end, start, size);
  int64_t shape[MX_MAX_DIMS], strides[MX_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  memcpy(strides, t->strides, sizeof strides);
  shape[d] = end == start ? 0 : (end - start - 1) / step + 1; /* no overflow for huge steps */
  if (shape[d] > 1) strides[d] = t->strides[d] * step;
  return mx__tensor_view(t, t->ndim, shape, strides, t->offset + start * t->strides[d]);
}

mx_tensor *mx__tensor_narrow(const mx_tensor *t, int dim, int64_t start, int64_t length) {
  CHECK_INPUT("mx_narrow", t);
  if (t->ndim == 0) {
    mx__error(MX_INDEX_ERROR, "mx_narrow: cannot narrow a 0-d tensor");
    return NULL;
  }
  int d = mx__wrap_dim("mx_narrow", dim, t->ndim);
  if (d < 0) return NULL;
  int64_t size = t->shape[d], given = start;
  if (start < 0) start += size;
  if (start < 0 || length < 0 || start > size || length > size - start) {
    mx__error(MX_INDEX_ERROR, "mx_narrow: start %lld and length %lld out of range for dim %d of size %lld",
              (long long)given, (long long)length, d, (long long)size);
    return NULL;
  }
  return mx__tensor_slice(t, d, start, start + length, 1);
}

mx_tensor *mx__tensor_select(const mx_tensor *t, int dim, int64_t index) {
  CHECK_INPUT("mx_select", t);
  if (t->ndim == 0) {
    mx__error(MX_INDEX_ERROR, "mx_select: cannot select from a 0-d tensor");
    return NULL;
  }
  int d = mx__wrap_dim("mx_select", dim, t->ndim);
  if (d < 0) return NULL;
  int64_t k = index < 0 ? index + t->shape[d] : index;
  if (k < 0 || k >= t->shape[d]) {
    mx__error(MX_INDEX_ERROR, "mx_select: index %lld out of range for dim %d of size %lld", (long long)index,
              d, (long long)t->shape[d]);
    return NULL;
  }
  return drop_dim(t, d, t->offset + k * t->strides[d]);
}

static mx_tensor *expand(const char *op, const mx_tensor *t, mx_shape shape, bool keep_allowed) {
  char a[MX__DIMS_STR], b[MX__DIMS_STR];
  if (shape.ndim < t->ndim || shape.ndim > MX_MAX_DIMS) {
    mx__error(MX_SHAPE_ERROR, "%s: cannot expand shape %s to %d dims", op, mx__dims_str(a, t->ndim, t->shape),
              shape.ndim);
    return NULL;
  }
  int64_t sizes[MX_MAX_DIMS], strides[MX_MAX_DIMS];
  for (int i = shape.ndim - 1, j = t->ndim - 1; i >= 0; i--, j--) {
    int64_t want = shape.d[i];
    int64_t have = j >= 0 ? t->shape[j] : 1;
    if (want == -1 && keep_allowed && j >= 0) want = have;
    if (want < 0 || (have != want && have != 1)) {
      mx__error(MX_SHAPE_ERROR, "%s: shape %s cannot be broadcast to %s (dim %d: %lld vs %lld)", op,
                mx__dims_str(a, t->ndim, t->shape), mx__dims_str(b, shape.ndim, shape.d), i,
                (long long)have, (long long)shape.d[i]);
      return NULL;
    }
    sizes[i] = want;
    strides[i] = j >= 0 && have == want ? t->strides[j] : 0;
  }
  int64_t numel; /* a view, so no byte count: [2^31, 2^31] of one element is fine, as in PyTorch */
  if (mx__numel_overflows(shape.ndim, sizes, &numel)) {
    mx__error_too_many_elements(op, shape.ndim, sizes);
    return NULL;
  }
  return mx__tensor_view(t, shape.ndim, sizes, strides, t->offset);
}

mx_tensor *mx__tensor_expand(const mx_tensor *t, mx_shape shape) {
  CHECK_INPUT("mx_expand", t);
  return expand("mx_expand", t, shape, true);
}

mx_tensor *mx__tensor_broadcast_to(const mx_tensor *t, mx_shape shape) {
  CHECK_INPUT("mx_broadcast_to", t);
  return expand("mx_broadcast_to", t, shape, true);
}

mx_tensor *mx__tensor_flatten(const mx_tensor *t, int start_dim, int end_dim) {
  CHECK_INPUT("mx_flatten", t);
  if (t->ndim == 0) return mx__tensor_reshape(t, MX_SHAPE(1));
  int s = mx__wrap_dim("mx_flatten", start_dim, t->ndim);
  int e = s < 0 ? -1 : mx__wrap_dim("mx_flatten", end_dim, t->ndim);
  if (e < 0) return NULL;
  if (s > e) {
    mx__error(MX_INVALID_ARGUMENT, "mx_flatten: start_dim %d comes after end_dim %d", start_dim, end_dim);
    return NULL;
  }
  mx_shape shape = {.ndim = t->ndim - (e - s)};
  for (int i = 0, j = 0; i < t->ndim; i++) {
    if (i > s && i <= e) {
      shape.d[j - 1] *= t->shape[i];
    } else {
      shape.d[j++] = t->shape[i];
    }
  }
  return mx__tensor_reshape(t, shape);
}
