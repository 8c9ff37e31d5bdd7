/* CIFAR-10 and CIFAR-100 binary files: records of label bytes and 32x32x3 pixel bytes, checked before allocating. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data_file.h"
#include "data/data_internal.h"
#include "kernels/base_internal.h"

#define PIXELS 3072 /* 3 planes (red, green, blue) of 32 rows of 32 */

/* A file format: its records hold `labels` label bytes, then the pixels;
 * the dataset takes label byte `label` (below `classes`). */
typedef struct {
  const char *op;
  int labels, label, classes;
  const char *expected; /* what a record is, for messages */
} cifar_format;

static const cifar_format cifar10 = {"mx_cifar_load", 1, 0, 10,
                                     "expected a whole number of 3073-byte records (a label byte and 3072 pixels)"};

/* Appends one file's records to ds (grown with realloc). */
static mx_status append_file(mx_dataset *ds, const cifar_format *fmt, const char *path) {
  const char *op = fmt->op;
  int64_t record = fmt->labels + PIXELS;
  mx__data_file f;
  mx_status st = mx__data_open(&f, op, path);
  if (st != MX_OK) return st;
  if (f.raw && (f.size == 0 || f.size % record != 0)) {
    mx__data_close(&f);
    return mx__error(MX_CORRUPT_DATA, "%s: %s: %s, got %lld bytes", op, path, fmt->expected, (long long)f.size);
  }
  int64_t len = 0;
  uint8_t *data = mx__data_read_all(&f, &len);
  mx__data_close(&f);
  if (!data) return mx_last_status();
  int64_t n = len / record;
  if (len == 0 || len % record != 0) {
    free(data);
    return mx__error(MX_CORRUPT_DATA, "%s: %s: %s, got %lld bytes", op, path, fmt->expected, (long long)len);
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
    labels[ds->n + i] = data[i * record + fmt->label];
    memcpy(images + (ds->n + i) * PIXELS, data + i * record + fmt->labels, PIXELS);
  }
  /* CIFAR-100's other label is checked too: a record with either out of range is corrupt */
  for (int k = 0; k < fmt->labels && st == MX_OK; k++) {
    int classes = fmt->labels == 1 ? fmt->classes : k == 0 ? 20 : 100;
    for (int64_t i = 0; i < n && st == MX_OK; i++)
      if (data[i * record + k] >= classes)
        st = mx__error(MX_CORRUPT_DATA, "%s: %s: %slabel %d of record %lld is outside 0..%d", op, path,
                       fmt->labels == 1 ? "" : k == 0 ? "coarse " : "fine ", data[i * record + k], (long long)i,
                       classes - 1);
  }
  free(data);
  ds->n += n;
  return st;
}

static mx_dataset *load_files(const cifar_format *fmt, const char *const *paths, int count) {
  const char *op = fmt->op;
  if (!paths || count < 1) {
    mx__error(MX_INVALID_ARGUMENT, "%s: expected at least one batch file, got %d", op, paths ? count : 0);
    return NULL;
  }
  mx_dataset *ds = calloc(1, sizeof *ds);
  if (!ds) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
    return NULL;
  }
  *ds = (mx_dataset){.c = 3, .h = 32, .w = 32, .classes = fmt->classes, .ndim = 3};
  for (int i = 0; i < count; i++) {
    if (!paths[i]) {
      mx__null_input(op, "paths[i]");
    } else if (append_file(ds, fmt, paths[i]) == MX_OK) {
      continue;
    }
    mx_dataset_free(ds);
    return NULL;
  }
  return ds;
}

mx_dataset *mx_cifar_load_files(const char *const *paths, int count) { return load_files(&cifar10, paths, count); }

/* CIFAR-100's records: a coarse label byte, a fine one, the pixels. */
static cifar_format cifar100_format(const char *op, mx_cifar100_labels labels) {
  bool coarse = labels == MX_CIFAR100_COARSE;
  return (cifar_format){op, 2, coarse ? 0 : 1, coarse ? 20 : 100,
                        "expected a whole number of 3074-byte records (a coarse and a fine label byte and 3072 "
                        "pixels)"};
}

/* Whether labels names one of the two labellings, else the error set. */
static bool cifar100_labels_ok(const char *op, mx_cifar100_labels labels) {
  if (labels == MX_CIFAR100_FINE || labels == MX_CIFAR100_COARSE) return true;
  mx__error(MX_INVALID_ARGUMENT, "%s: labels must be MX_CIFAR100_FINE or MX_CIFAR100_COARSE, got %d", op,
            (int)labels);
  return false;
}

mx_dataset *mx_cifar100_load_files(const char *const *paths, int count, mx_cifar100_labels labels) {
  static const char *op = "mx_cifar100_load";
  if (!cifar100_labels_ok(op, labels)) return NULL;
  cifar_format fmt = cifar100_format(op, labels);
  return load_files(&fmt, paths, count);
}

/* dir/sub if that is a folder (the archive's layout), else dir, into base. */
static void archive_dir(char *base, size_t size, const char *dir, const char *sub) {
  struct stat st;
  int len = snprintf(base, size, "%s/%s", dir, sub);
  if (len < 0 || (size_t)len >= size || stat(base, &st) != 0 || !S_ISDIR(st.st_mode)) snprintf(base, size, "%s", dir);
}

mx_dataset *mx_cifar100_load(const char *dir, bool train, mx_cifar100_labels labels) {
  static const char *op = "mx_cifar100_load";
  if (!dir) {
    mx__null_input(op, "dir");
    return NULL;
  }
  if (!cifar100_labels_ok(op, labels)) return NULL;
  char base[PATH_MAX], path[PATH_MAX];
  archive_dir(base, sizeof base, dir, "cifar-100-binary");
  int n = snprintf(path, sizeof path, "%s/%s", base, train ? "train.bin" : "test.bin");
  if (n < 0 || n >= PATH_MAX) {
    mx__error(MX_INVALID_ARGUMENT, "%s: %s: the path is too long", op, dir);
    return NULL;
  }
  const char *paths[1] = {path};
  cifar_format fmt = cifar100_format(op, labels);
  return load_files(&fmt, paths, 1);
}

mx_dataset *mx_cifar_load(const char *dir, bool train) {
  const char *op = cifar10.op;
  if (!dir) {
    mx__null_input(op, "dir");
    return NULL;
  }
  /* The archive unpacks to cifar-10-batches-bin/; the files may also lie in dir. */
  char base[PATH_MAX], names[5][PATH_MAX];
  archive_dir(base, sizeof base, dir, "cifar-10-batches-bin");
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
