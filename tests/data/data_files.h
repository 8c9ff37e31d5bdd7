/* Files for the data suite: IDX and CIFAR-10 bytes, written into the test's
 * temporary folder (tests/common/tmp_files.h). */
#ifndef MX_TESTS_DATA_DATA_FILES_H
#define MX_TESTS_DATA_DATA_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "tests/common/tmp_files.h"

/* For %lld in Criterion's messages, which do not take a cast's parenthesis first. */
#define LL(x) ((long long)(x))

/* Writes n bytes to path, as they are or gzip-compressed. */
void write_raw(const char *path, const void *data, size_t n);
void write_gz(const char *path, const void *data, size_t n);
/* data gzip-compressed into a malloc'ed buffer of *len bytes. */
uint8_t *gzip_bytes(const void *data, size_t n, size_t *len);

/* An IDX file in memory (malloc'ed, *len bytes): magic, the ndims
 * big-endian dims, then the data bytes. */
uint8_t *idx_bytes(uint32_t magic, int ndims, const uint32_t *dims, const uint8_t *data,
                   size_t data_len, size_t *len);
/* Test images: image i's pixel p is (i * 31 + p * 7 + 1) % 256. */
uint8_t test_pixel(int64_t i, int64_t p);
/* An IDX image file of n test images of rows x cols (malloc'ed, *len bytes). */
uint8_t *idx_images(uint32_t n, uint32_t rows, uint32_t cols, size_t *len);
/* An IDX label file of the given labels (malloc'ed, *len bytes). */
uint8_t *idx_labels(uint32_t n, const uint8_t *labels, size_t *len);
/* CIFAR-10 records: record i has labels[i] and 3072 test pixels of image
 * first + i (malloc'ed, *len bytes). */
uint8_t *cifar_bytes(int n, const uint8_t *labels, int first, size_t *len);

#endif
