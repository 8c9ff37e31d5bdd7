/* The demos' dataset readers on any bytes, cut into two files: the first 4
 * bytes (little-endian) modulo the count of the rest + 1 say how many of
 * the rest go to the first file; the others go to the second. IDX: images
 * then labels (mx_idx_load); CIFAR-10: two batch files (mx_cifar_load_files).
 * Accepted, every label is in 0..9, every gzipped file is whole (each of
 * its gzip members inflates to its end, CRC and length right, and nothing
 * follows the last), and the images and labels are the files' bytes, once
 * gunzipped by the reference below. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/data.h"
#include "fuzz/fuzz.h"

typedef struct {
  const uint8_t *data[2];
  size_t size[2];
  const char *path[2];
} two_files;

static two_files split(const uint8_t *data, size_t size, const char *first, const char *second) {
  two_files t;
  size_t rest = size >= 4 ? size - 4 : 0;
  uint32_t k = size >= 4 ? (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 |
                               (uint32_t)data[3] << 24
                         : 0;
  t.data[0] = data + (size >= 4 ? 4 : size);
  t.size[0] = (size_t)(k % (rest + 1));
  t.data[1] = t.data[0] + t.size[0];
  t.size[1] = rest - t.size[0];
  t.path[0] = mx_fuzz_write(first, t.data[0], t.size[0]);
  t.path[1] = mx_fuzz_write(second, t.data[1], t.size[1]);
  return t;
}

/* gzip's magic: the readers tell gzipped files from raw ones by it. */
static bool gzipped(const uint8_t *data, size_t size) { return size >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

/* A file's bytes as a reader must see them. */
typedef struct {
  const uint8_t *data;
  size_t size;
  uint8_t *owned; /* the gunzipped bytes, malloc'ed */
} contents;

/* The reference: the whole file inflated in memory in one pass, each member
 * up to inflate's Z_STREAM_END; false unless every member is whole and only
 * another member follows one. */
static bool gunzip(const uint8_t *data, size_t size, contents *out) {
  z_stream z = {.next_in = (uint8_t *)data, .avail_in = (uInt)size};
  mx_fuzz_check(inflateInit2(&z, 15 + 16) == Z_OK, "inflateInit2");
  size_t cap = 4096;
  out->owned = malloc(cap);
  out->size = 0;
  bool whole = false;
  for (;;) {
    if (out->size == cap) out->owned = realloc(out->owned, cap *= 2);
    mx_fuzz_check(out->owned != NULL, "out of memory gunzipping");
    z.next_out = out->owned + out->size;
    z.avail_out = (uInt)(cap - out->size);
    int r = inflate(&z, Z_NO_FLUSH);
    out->size = cap - z.avail_out;
    if (r == Z_STREAM_END && z.avail_in == 0) {
      whole = true;
      break;
    }
    if (r == Z_STREAM_END && gzipped(z.next_in, z.avail_in)) {
      inflateReset(&z);
      continue;
    }
    if (r != Z_OK && !(r == Z_BUF_ERROR && z.avail_out == 0)) break; /* corrupt, cut short, or junk after */
  }
  inflateEnd(&z);
  out->data = out->owned;
  return whole;
}

/* The contents of a file the reader accepted: its bytes, gunzipped when it is gzipped (which must be whole). */
static contents contents_of(const uint8_t *data, size_t size) {
  contents c = {data, size, NULL};
  if (gzipped(data, size))
    mx_fuzz_check(gunzip(data, size, &c), "an accepted gzipped file is whole: every member to its checked end");
  return c;
}

static void check_labels(const mx_dataset *ds) {
  mx_fuzz_check(ds->n > 0 && ds->classes == 10, "a dataset has samples of 10 classes");
  for (int64_t i = 0; i < ds->n; i++) mx_fuzz_check(ds->labels[i] < 10, "labels are in 0..9");
}

bool mx_fuzz_idx(const uint8_t *data, size_t size) {
  two_files t = split(data, size, "images-idx3-ubyte", "labels-idx1-ubyte");
  mx_dataset *ds = mx_idx_load(t.path[0], t.path[1]);
  if (!ds) {
    mx_fuzz_expect_refusal("mx_idx_load", t.path[0], t.path[1]);
    return false;
  }
  check_labels(ds);
  mx_fuzz_check(ds->c == 1 && ds->h > 0 && ds->w > 0, "IDX images are one plane of rows and columns");
  size_t pixels = (size_t)ds->n * (size_t)ds->h * (size_t)ds->w;
  contents images = contents_of(t.data[0], t.size[0]), labels = contents_of(t.data[1], t.size[1]);
  mx_fuzz_check(images.size == 16 + pixels && memcmp(ds->images, images.data + 16, pixels) == 0,
                "the images are the file's bytes after its header, and all of them");
  mx_fuzz_check(labels.size == 8 + (size_t)ds->n && memcmp(ds->labels, labels.data + 8, (size_t)ds->n) == 0,
                "the labels are the file's bytes after its header, and all of them");
  free(images.owned);
  free(labels.owned);
  mx_dataset_free(ds);
  return true;
}

enum { PIXELS = 3072, RECORD = 1 + PIXELS };

bool mx_fuzz_cifar(const uint8_t *data, size_t size) {
  two_files t = split(data, size, "data_batch_1.bin", "data_batch_2.bin");
  mx_dataset *ds = mx_cifar_load_files(t.path, 2);
  if (!ds) {
    mx_fuzz_expect_refusal("mx_cifar_load", t.path[0], t.path[1]);
    return false;
  }
  check_labels(ds);
  mx_fuzz_check(ds->c == 3 && ds->h == 32 && ds->w == 32, "CIFAR-10 images are 3 planes of 32x32");
  contents first = contents_of(t.data[0], t.size[0]), second = contents_of(t.data[1], t.size[1]);
  mx_fuzz_check((size_t)ds->n * RECORD == first.size + second.size, "every byte of the two files is read");
  for (int64_t i = 0; i < ds->n; i++) {
    const uint8_t *record = i * RECORD < (int64_t)first.size ? first.data + i * RECORD
                                                             : second.data + (i * RECORD - (int64_t)first.size);
    mx_fuzz_check(ds->labels[i] == record[0] && memcmp(ds->images + i * PIXELS, record + 1, PIXELS) == 0,
                  "sample i is record i, the second file's after the first's");
  }
  free(first.owned);
  free(second.owned);
  mx_dataset_free(ds);
  return true;
}
