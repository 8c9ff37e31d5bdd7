/* IDX files (MNIST's format): an image file and a label file, checked before allocating. */
#include <stdio.h>
#include <stdlib.h>

#include "data/data_file.h"
#include "data/data_internal.h"
#include "kernels/base_internal.h"

#define IDX_LABELS 0x00000801u /* u8 data, 1 dim: n */
#define IDX_IMAGES 0x00000803u /* u8 data, 3 dims: n, rows, cols */

static uint32_t big_endian32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static const char *magic_name(uint32_t magic) {
  return magic == IDX_IMAGES ? "images" : magic == IDX_LABELS ? "labels" : NULL;
}

/* Reads the magic and ndims big-endian dimensions and checks them. */
static mx_status read_header(mx__data_file *f, uint32_t magic, int ndims, uint32_t *dims) {
  uint8_t header[16];
  int len = 4 + 4 * ndims;
  int64_t got = mx__data_read(f, header, len);
  if (got < 0) return mx_last_status();
  uint32_t found = got >= 4 ? big_endian32(header) : magic; /* a wrong file says so first */
  if (found != magic) {
    const char *what = magic_name(found);
    char found_str[32] = "";
    if (what) snprintf(found_str, sizeof found_str, " (%s)", what);
    return mx__error(MX_CORRUPT_DATA, "%s: %s: bad magic 0x%08x%s where %s (0x%08x) were expected",
                     f->op, f->path, found, found_str, magic_name(magic), magic);
  }
  if (got < len)
    return mx__error(MX_CORRUPT_DATA, "%s: %s: expected an IDX header of %d bytes (%s), got %lld%s",
                     f->op, f->path, len, magic_name(magic), (long long)got, f->end);
  for (int i = 0; i < ndims; i++) dims[i] = big_endian32(header + 4 + 4 * i);
  return MX_OK;
}

/* The image bytes: *n images of *rows x *cols. */
static uint8_t *read_images(const char *op, const char *path, uint32_t *n, uint32_t *rows,
                            uint32_t *cols) {
  mx__data_file f;
  if (mx__data_open(&f, op, path) != MX_OK) return NULL;
  uint32_t dims[3] = {0, 0, 0};
  uint8_t *data = NULL;
  if (read_header(&f, IDX_IMAGES, 3, dims) == MX_OK) {
    uint64_t per_row = (uint64_t)dims[0] * dims[1]; /* < 2^64: no overflow */
    if (dims[0] == 0 || dims[1] == 0 || dims[2] == 0) {
      mx__error(MX_CORRUPT_DATA, "%s: %s: the header says %u images of %ux%u", op, path, dims[0],
                dims[1], dims[2]);
    } else if (per_row > MX_DATA_MAX_FILE_BYTES || per_row * dims[2] > MX_DATA_MAX_FILE_BYTES - 16) {
      mx__error(MX_CORRUPT_DATA, "%s: %s: the header says %u images of %ux%u, more than the %d-byte limit",
                op, path, dims[0], dims[1], dims[2], MX_DATA_MAX_FILE_BYTES);
    } else {
      char what[128];
      snprintf(what, sizeof what, "a 16-byte header and %u images of %ux%u", dims[0], dims[1],
               dims[2]);
      data = mx__data_read_rest(&f, (int64_t)(per_row * dims[2]), what);
    }
  }
  mx__data_close(&f);
  *n = dims[0];
  *rows = dims[1];
  *cols = dims[2];
  return data;
}

/* The label bytes, each checked to lie in 0..9. */
static uint8_t *read_labels(const char *op, const char *path, uint32_t *n) {
  mx__data_file f;
  if (mx__data_open(&f, op, path) != MX_OK) return NULL;
  uint8_t *data = NULL;
  if (read_header(&f, IDX_LABELS, 1, n) == MX_OK) {
    if (*n == 0) {
      mx__error(MX_CORRUPT_DATA, "%s: %s: the header says 0 labels", op, path);
    } else if (*n > MX_DATA_MAX_FILE_BYTES - 8) {
      mx__error(MX_CORRUPT_DATA, "%s: %s: the header says %u labels, more than the %d-byte limit",
                op, path, *n, MX_DATA_MAX_FILE_BYTES);
    } else {
      char what[96];
      snprintf(what, sizeof what, "an 8-byte header and %u labels", *n);
      data = mx__data_read_rest(&f, *n, what);
    }
  }
  mx__data_close(&f);
  if (data && mx__labels_check(op, path, data, *n, 10, "sample") != MX_OK) {
    free(data);
    return NULL;
  }
  return data;
}

mx_dataset *mx__idx_load(const char *op, const char *images_path, const char *labels_path) {
  if (!images_path || !labels_path) {
    mx__null_input(op, images_path ? "labels_path" : "images_path");
    return NULL;
  }
  uint32_t n_images, rows, cols, n_labels = 0;
  uint8_t *images = read_images(op, images_path, &n_images, &rows, &cols);
  uint8_t *labels = images ? read_labels(op, labels_path, &n_labels) : NULL;
  mx_dataset *ds = NULL;
  if (labels && n_images != n_labels) {
    mx__error(MX_CORRUPT_DATA, "%s: %s holds %u images but %s holds %u labels", op, images_path,
              n_images, labels_path, n_labels);
  } else if (labels && !(ds = calloc(1, sizeof *ds))) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
  }
  if (!ds) {
    free(images);
    free(labels);
    return NULL;
  }
  *ds = (mx_dataset){.images = images, .labels = labels, .n = n_images, .c = 1,
                     .h = (int)rows, .w = (int)cols, .classes = 10, .ndim = 3};
  return ds;
}

mx_dataset *mx_idx_load(const char *images_path, const char *labels_path) {
  return mx__idx_load("mx_idx_load", images_path, labels_path);
}
