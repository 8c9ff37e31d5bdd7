/* CIFAR-10 binary batches: records of a label byte and 32x32x3 pixel bytes, checked before allocating. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "examples/data/data_file.h"
#include "examples/data/data_internal.h"
#include "kernels/base_internal.h"

#define PIXELS 3072           /* 3 planes (red, green, blue) of 32 rows of 32 */
#define RECORD (1 + PIXELS)   /* a label byte, then the pixels */

static const char *op = "mx_cifar_load";

/* Appends one batch file's records to ds (grown with realloc). */
static mx_status append_file(mx_dataset *ds, const char *path) {
  mx__data_file f;
  mx_status st = mx__data_open(&f, op, path);
  if (st != MX_OK) return st;
  const char *expected = "expected a whole number of 3073-byte records (a label byte and 3072 pixels)";
  if (f.raw && (f.size == 0 || f.size % RECORD != 0)) {
    mx__data_close(&f);
    return mx__error(MX_CORRUPT_DATA, "%s: %s: %s, got %lld bytes", op, path, expected,
                     (long long)f.size);
  }
  int64_t len = 0;
  uint8_t *data = mx__data_read_all(&f, &len);
  mx__data_close(&f);
  if (!data) return mx_last_status();
  int64_t n = len / RECORD;
  if (len == 0 || len % RECORD != 0) {
    free(data);
    return mx__error(MX_CORRUPT_DATA, "%s: %s: %s, got %lld bytes", op, path, expected,
                     (long long)len);
  }
  uint8_t *images = realloc(ds->images, (size_t)((ds->n + n) * PIXELS));
  if (images) ds->images = images;
  uint8_t *labels = images ? realloc(ds->labels, (size_t)(ds->n + n)) : NULL;
  if (labels) ds->labels = labels;
  if (!labels) {
    free(data);
    return mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory for %lld more images", op, path,
                     (long long)n);
  }
  for (int64_t i = 0; i < n; i++) {
    labels[ds->n + i] = data[i * RECORD];
    memcpy(images + (ds->n + i) * PIXELS, data + i * RECORD + 1, PIXELS);
  }
  free(data);
  st = mx__labels_check(op, path, labels + ds->n, n, 10, "record");
  ds->n += n;
  return st;
}

mx_dataset *mx_cifar_load_files(const char *const *paths, int count) {
  if (!paths || count < 1) {
    mx__error(MX_INVALID_ARGUMENT, "%s: expected at least one batch file, got %d", op, paths ? count : 0);
    return NULL;
  }
  mx_dataset *ds = calloc(1, sizeof *ds);
  if (!ds) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
    return NULL;
  }
  *ds = (mx_dataset){.c = 3, .h = 32, .w = 32, .classes = 10};
  for (int i = 0; i < count; i++) {
    if (!paths[i]) {
      mx__null_input(op, "paths[i]");
    } else if (append_file(ds, paths[i]) == MX_OK) {
      continue;
    }
    mx_dataset_free(ds);
    return NULL;
  }
  return ds;
}

mx_dataset *mx_cifar_load(const char *dir, bool train) {
  if (!dir) {
    mx__null_input(op, "dir");
    return NULL;
  }
  /* The archive unpacks to cifar-10-batches-bin/; the files may also lie in dir. */
  char base[PATH_MAX], names[5][PATH_MAX];
  struct stat st;
  int len = snprintf(base, sizeof base, "%s/cifar-10-batches-bin", dir);
  if (len < 0 || (size_t)len >= sizeof base || stat(base, &st) != 0 || !S_ISDIR(st.st_mode))
    snprintf(base, sizeof base, "%s", dir);
  int count = train ? 5 : 1;
  const char *paths[5];
  for (int i = 0; i < count; i++) {
    int n = train ? snprintf(names[i], PATH_MAX, "%s/data_batch_%d.bin", base, i + 1)
                  : snprintf(names[i], PATH_MAX, "%s/test_batch.bin", base);
    if (n < 0 || n >= PATH_MAX) {
      mx__error(MX_INVALID_ARGUMENT, "%s: %s: the path is too long", op, dir);
      return NULL;
    }
    paths[i] = names[i];
  }
  return mx_cifar_load_files(paths, count);
}
