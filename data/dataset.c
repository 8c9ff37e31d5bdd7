/* The dataset: bytes, floats from tensors or a user's callbacks; made, checked, read and freed. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/batch.h"
#include "data/data_internal.h"
#include "kernels/base_internal.h"
#include "ops/ops.h"

mx_dataset *mx__dataset_new(const char *op, int64_t n, int c, int h, int w, int classes) {
  if (n < 1 || c < 1 || h < 1 || w < 1 || classes < 1 || classes > 256) {
    mx__error(MX_INVALID_ARGUMENT,
              "%s: %lld samples of %dx%dx%d in %d classes: every size must be positive "
              "(classes at most 256)",
              op, (long long)n, c, h, w, classes);
    return NULL;
  }
  int64_t sample = (int64_t)c * h * w;
  if (sample > MX_DATA_MAX_FILE_BYTES || n > MX_DATA_MAX_FILE_BYTES ||
      n * sample > (int64_t)1 << 40) {
    mx__error(MX_INVALID_ARGUMENT, "%s: %lld samples of %dx%dx%d are too many bytes", op,
              (long long)n, c, h, w);
    return NULL;
  }
  mx_dataset *ds = calloc(1, sizeof *ds);
  if (ds) {
    ds->images = calloc((size_t)(n * sample), 1);
    ds->labels = calloc((size_t)n, 1);
  }
  if (!ds || !ds->images || !ds->labels) {
    mx_dataset_free(ds);
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory for %lld samples of %dx%dx%d", op,
              (long long)n, c, h, w);
    return NULL;
  }
  ds->n = n;
  ds->c = c;
  ds->h = h;
  ds->w = w;
  ds->classes = classes;
  ds->ndim = 3;
  return ds;
}

mx_dataset *mx_dataset_new(int64_t n, int c, int h, int w, int classes) {
  return mx__dataset_new("mx_dataset_new", n, c, h, w, classes);
}

void mx_dataset_free(mx_dataset *ds) {
  if (!ds) return;
  free(ds->images);
  free(ds->labels);
  free(ds->values);
  free(ds->targets);
  free(ds);
}

mx_status mx__labels_check(const char *op, const char *path, const uint8_t *labels, int64_t n,
                           int classes, const char *item) {
  for (int64_t i = 0; i < n; i++)
    if (labels[i] >= classes)
      return mx__error(MX_CORRUPT_DATA, "%s: %s: label %d of %s %lld is outside 0..%d", op, path,
                       labels[i], item, (long long)i, classes - 1);
  return MX_OK;
}

/* The largest label a tensor dataset takes: its classes (largest + 1) stay
 * a size a model's output can have, not whatever a stray value says. */
#define MAX_LABEL 65535

/* Sets c, h, w and ndim from a sample shape of 1 to 3 dims (c and h 1 where missing); checks its size. */
static mx_status sample_shape(const char *op, const char *what, mx_dataset *ds, int ndim, const int64_t *dims) {
  char str[MX__DIMS_STR];
  int64_t numel = 1;
  bool sizes_ok = ndim >= 1 && ndim <= 3;
  for (int i = 0; sizes_ok && i < ndim; i++) {
    sizes_ok = dims[i] >= 1 && dims[i] <= MX_DATA_MAX_FILE_BYTES;
    numel *= sizes_ok ? dims[i] : 1;
  }
  if (!sizes_ok || numel > MX_DATA_MAX_FILE_BYTES)
    return mx__error(MX_SHAPE_ERROR, "%s: %s %s: a sample needs 1 to 3 dims, each positive, at most %d elements",
                     op, what, mx__dims_str(str, ndim, dims), MX_DATA_MAX_FILE_BYTES);
  int64_t chw[3] = {1, 1, 1};
  for (int i = 0; i < ndim; i++) chw[3 - ndim + i] = dims[i];
  ds->c = (int)chw[0];
  ds->h = (int)chw[1];
  ds->w = (int)chw[2];
  ds->ndim = ndim;
  return MX_OK;
}

/* t's elements as dtype into a malloc'ed buffer of `bytes`; NULL with the error set. */
static void *copy_out(const char *op, const mx_tensor *t, mx_dtype dtype, size_t bytes) {
  void *out = malloc(bytes ? bytes : 1);
  if (!out) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", op, bytes);
    return NULL;
  }
  mx_tensor *converted = mx_to_dtype(t, dtype);
  if (!converted || mx_to_host(converted, out, bytes) != MX_OK) {
    mx__error_prefix(op);
    free(out);
    out = NULL;
  }
  mx_release(converted);
  return out;
}

/* Copies x's samples as floats and y's labels as int64 into ds (its
 * shape set) and sets its classes; false with the error set. */
static bool copy_tensors(const char *op, mx_dataset *ds, const mx_tensor *x, const mx_tensor *y) {
  mx_shape sx = mx_shape_get(x);
  char xs[MX__DIMS_STR];
  ds->n = sx.d[0];
  int64_t sample = (int64_t)ds->c * ds->h * ds->w, bytes;
  if (mx__mul_overflows(ds->n, sample * (int64_t)sizeof(float), &bytes) || (uint64_t)bytes > SIZE_MAX) {
    mx__error(MX_OUT_OF_MEMORY, "%s: x %s is too many bytes", op, mx__dims_str(xs, sx.ndim, sx.d));
    return false;
  }
  if (!(ds->values = copy_out(op, x, MX_F32, (size_t)bytes)) ||
      !(ds->targets = copy_out(op, y, MX_I64, (size_t)ds->n * sizeof *ds->targets)))
    return false;
  int64_t largest = 0;
  for (int64_t i = 0; i < ds->n; i++) {
    if (ds->targets[i] < 0 || ds->targets[i] > MAX_LABEL) {
      mx__error(MX_INVALID_ARGUMENT, "%s: label %lld of sample %lld is outside 0..%d", op, (long long)ds->targets[i],
                (long long)i, MAX_LABEL);
      return false;
    }
    if (ds->targets[i] > largest) largest = ds->targets[i];
  }
  ds->classes = (int)largest + 1;
  return true;
}

mx_dataset *mx_dataset_from_tensors(const mx_tensor *x, const mx_tensor *y) {
  static const char *op = "mx_dataset_from_tensors";
  if (!x || !y) {
    mx__null_input(op, x ? "y" : "x");
    return NULL;
  }
  mx_shape sx = mx_shape_get(x), sy = mx_shape_get(y);
  mx_dtype ty = mx_dtype_of(y);
  char xs[MX__DIMS_STR], ys[MX__DIMS_STR];
  mx_dataset *ds = calloc(1, sizeof *ds);
  if (!ds) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
    return NULL;
  }
  if (sx.ndim < 2 || sx.d[0] < 1) {
    mx__error(MX_SHAPE_ERROR, "%s: x must be (n, sample) with n > 0 and a sample of 1 to 3 dims, got %s", op,
              mx__dims_str(xs, sx.ndim, sx.d));
  } else if (sy.ndim != 1 || sy.d[0] != sx.d[0]) {
    mx__error(MX_SHAPE_ERROR, "%s: y must be (%lld), one label per sample of x %s, got %s", op, (long long)sx.d[0],
              mx__dims_str(xs, sx.ndim, sx.d), mx__dims_str(ys, sy.ndim, sy.d));
  } else if (ty != MX_I64 && ty != MX_I32 && ty != MX_U8) {
    mx__error(MX_DTYPE_ERROR, "%s: y must hold integer labels (int64, int32 or uint8), got %s", op,
              mx_dtype_name(ty));
  } else if (sample_shape(op, "x's sample", ds, sx.ndim - 1, sx.d + 1) == MX_OK && copy_tensors(op, ds, x, y)) {
    return ds;
  }
  mx_dataset_free(ds);
  return NULL;
}

mx_dataset *mx_dataset_custom(const mx_dataset_callbacks *cb, mx_shape sample, int classes) {
  static const char *op = "mx_dataset_custom";
  if (!cb || !cb->length || !cb->get) {
    mx__null_input(op, !cb ? "cb" : !cb->length ? "cb->length" : "cb->get");
    return NULL;
  }
  if (classes < 1) {
    mx__error(MX_INVALID_ARGUMENT, "%s: classes must be positive, got %d", op, classes);
    return NULL;
  }
  mx_dataset *ds = calloc(1, sizeof *ds);
  if (!ds) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
    return NULL;
  }
  if (sample_shape(op, "the sample shape", ds, sample.ndim, sample.d) != MX_OK) {
    free(ds);
    return NULL;
  }
  ds->n = cb->length(cb->user);
  if (ds->n < 1) {
    mx__error(MX_INVALID_ARGUMENT, "%s: the length callback says %lld samples; a dataset needs at least one", op,
              (long long)ds->n);
    free(ds);
    return NULL;
  }
  ds->classes = classes;
  ds->callbacks = *cb;
  return ds;
}

/* byte_values[p] = p / 255 in float, made once: a lookup is several times faster than the division. */
static float byte_values[256];
static pthread_once_t byte_values_once = PTHREAD_ONCE_INIT;

static void byte_values_init(void) {
  for (int p = 0; p < 256; p++) byte_values[p] = (float)p / 255.0f;
}

mx_status mx__dataset_read(const mx_dataset *ds, int64_t index, float *x, int64_t *y, char *error, size_t size) {
  int64_t sample = (int64_t)ds->c * ds->h * ds->w;
  if (ds->images) {
    pthread_once(&byte_values_once, byte_values_init);
    const uint8_t *src = ds->images + index * sample;
    for (int64_t p = 0; p < sample; p++) x[p] = byte_values[src[p]];
    *y = ds->labels[index];
    return MX_OK;
  }
  if (ds->values) {
    memcpy(x, ds->values + index * sample, (size_t)sample * sizeof *x);
    *y = ds->targets[index];
    return MX_OK;
  }
  if (!ds->callbacks.get(ds->callbacks.user, index, x, y)) {
    snprintf(error, size, "the dataset's get failed for sample %lld", (long long)index);
    return MX_IO_ERROR;
  }
  if (*y < 0 || *y >= ds->classes) {
    snprintf(error, size, "the dataset's get gave sample %lld the label %lld, outside 0..%d", (long long)index,
             (long long)*y, ds->classes - 1);
    return MX_CORRUPT_DATA;
  }
  return MX_OK;
}

mx_status mx_dataset_get(const mx_dataset *ds, int64_t index, float *x, int64_t *y) {
  static const char *op = "mx_dataset_get";
  if (!ds || !x || !y) return mx__null_input(op, !ds ? "dataset" : !x ? "x" : "y");
  if (mx__dataset_check(op, ds) != MX_OK) return mx_last_status();
  if (index < 0 || index >= ds->n)
    return mx__error(MX_INDEX_ERROR, "%s: index %lld is outside 0..%lld", op, (long long)index, (long long)(ds->n - 1));
  char error[256];
  mx_status st = mx__dataset_read(ds, index, x, y, error, sizeof error);
  return st == MX_OK ? MX_OK : mx__error(st, "%s: %s", op, error);
}

mx_status mx__dataset_check(const char *op, const mx_dataset *ds) {
  bool has_samples = ds->images ? ds->labels != NULL : ds->values ? ds->targets != NULL : ds->callbacks.get != NULL;
  if (!has_samples || ds->n < 1 || ds->c < 1 || ds->h < 1 || ds->w < 1 || ds->ndim < 1 || ds->ndim > 3)
    return mx__error(MX_INVALID_ARGUMENT, "%s: the dataset is empty (%lld samples of %dx%dx%d)", op,
                     (long long)ds->n, ds->c, ds->h, ds->w);
  return MX_OK;
}
