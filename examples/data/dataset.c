/* The dataset: images as bytes and their labels, made, checked and freed. */
#include <stdlib.h>

#include "examples/data/data_internal.h"
#include "kernels/base_internal.h"

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
  return ds;
}

mx_dataset *mx_dataset_new(int64_t n, int c, int h, int w, int classes) {
  return mx__dataset_new("mx_dataset_new", n, c, h, w, classes);
}

void mx_dataset_free(mx_dataset *ds) {
  if (!ds) return;
  free(ds->images);
  free(ds->labels);
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
