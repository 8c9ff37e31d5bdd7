/* Files for the data suite: the IDX and CIFAR-10 bytes the tests write into their temporary folder. */
#include "data_files.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

void write_raw(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "cannot write %s", path);
  cr_assert_eq(fwrite(data, 1, n, f), n);
  cr_assert_eq(fclose(f), 0);
}

uint8_t *gzip_bytes(const void *data, size_t n, size_t *len) {
  z_stream z = {0};
  cr_assert_eq(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK); /* gzip wrapper */
  size_t cap = deflateBound(&z, n);
  uint8_t *out = malloc(cap);
  z.next_in = (Bytef *)data;
  z.avail_in = (uInt)n;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  cr_assert_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
  *len = cap - z.avail_out;
  deflateEnd(&z);
  return out;
}

void write_gz(const char *path, const void *data, size_t n) {
  size_t len;
  uint8_t *gz = gzip_bytes(data, n, &len);
  write_raw(path, gz, len);
  free(gz);
}

uint8_t *idx_bytes(uint32_t magic, int ndims, const uint32_t *dims, const uint8_t *data,
                   size_t data_len, size_t *len) {
  *len = 4 + 4 * (size_t)ndims + data_len;
  uint8_t *out = malloc(*len), *p = out;
  for (int i = -1; i < ndims; i++) {
    uint32_t v = i < 0 ? magic : dims[i];
    *p++ = (uint8_t)(v >> 24), *p++ = (uint8_t)(v >> 16), *p++ = (uint8_t)(v >> 8), *p++ = (uint8_t)v;
  }
  if (data_len) memcpy(p, data, data_len);
  return out;
}

uint8_t test_pixel(int64_t i, int64_t p) { return (uint8_t)((i * 31 + p * 7 + 1) % 256); }

uint8_t *idx_images(uint32_t n, uint32_t rows, uint32_t cols, size_t *len) {
  size_t sample = (size_t)rows * cols;
  uint8_t *pixels = malloc(n * sample);
  for (size_t i = 0; i < n; i++)
    for (size_t p = 0; p < sample; p++) pixels[i * sample + p] = test_pixel((int64_t)i, (int64_t)p);
  uint32_t dims[3] = {n, rows, cols};
  uint8_t *out = idx_bytes(0x803, 3, dims, pixels, n * sample, len);
  free(pixels);
  return out;
}

uint8_t *idx_labels(uint32_t n, const uint8_t *labels, size_t *len) {
  return idx_bytes(0x801, 1, &n, labels, n, len);
}

uint8_t *cifar_bytes(int n, const uint8_t *labels, int first, size_t *len) {
  *len = (size_t)n * 3073;
  uint8_t *out = malloc(*len);
  for (int i = 0; i < n; i++) {
    out[(size_t)i * 3073] = labels[i];
    for (int p = 0; p < 3072; p++) out[(size_t)i * 3073 + 1 + p] = test_pixel(first + i, p);
  }
  return out;
}
