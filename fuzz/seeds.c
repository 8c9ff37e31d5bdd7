/* Valid inputs for each fuzz target, written by mixgrad's own writers (the
 * safetensors saver, the checkpoint target's run) or laid out here byte by
 * byte from the formats' descriptions (IDX, CIFAR-10), raw and gzipped (in
 * one gzip member or two); broken gzipped ones the readers must refuse (a
 * trailer cut or wrong, bytes after the data); and for the ops target,
 * each op case on float64 inputs of its own shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fuzz/fuzz.h"
#include "mixgrad.h"
#include "op_cases.h"

bool (*mx_fuzz_target(const char *name))(const uint8_t *data, size_t size) {
  if (!strcmp(name, "safetensors")) return mx_fuzz_safetensors;
  if (!strcmp(name, "checkpoint")) return mx_fuzz_checkpoint;
  if (!strcmp(name, "idx")) return mx_fuzz_idx;
  if (!strcmp(name, "cifar")) return mx_fuzz_cifar;
  if (!strcmp(name, "ops")) return mx_fuzz_ops;
  return NULL;
}

/* A growing byte string. */
typedef struct {
  uint8_t *data;
  size_t size;
} bytes;

static void put(bytes *b, const void *data, size_t n) {
  b->data = realloc(b->data, b->size + n + 1);
  mx_fuzz_check(b->data != NULL, "out of memory making a seed");
  memcpy(b->data + b->size, data, n);
  b->size += n;
}

static void put_u32(bytes *b, uint32_t v, bool big_endian) {
  uint8_t p[4];
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * (big_endian ? 3 - i : i));
  put(b, p, 4);
}

/* b gzipped (through a file: zlib's gz functions write the gzip format). */
static bytes gzip(bytes b) {
  const char *path = mx_fuzz_path("seed.gz");
  gzFile gz = gzopen(path, "wb");
  mx_fuzz_check(gz && gzwrite(gz, b.data, (unsigned)b.size) == (int)b.size && gzclose(gz) == Z_OK, "gzip a seed");
  bytes out;
  out.data = mx_fuzz_read(path, &out.size);
  free(b.data);
  return out;
}

/* b with its last n bytes cut (a gzip file's trailer: CRC and length). */
static bytes cut(bytes b, size_t n) {
  b.size = b.size > n ? b.size - n : 0;
  return b;
}

/* b with the bits of mask flipped in its byte `from_end` bytes before its end. */
static bytes flip(bytes b, size_t from_end, uint8_t mask) {
  b.data[b.size - from_end] ^= mask;
  return b;
}

/* a's bytes, then b's. */
static bytes cat(bytes a, bytes b) {
  put(&a, b.data, b.size);
  free(b.data);
  return a;
}

/* b's first k bytes and the rest, gzipped each on its own: a file of two gzip members. */
static bytes gzip_two_members(bytes b, size_t k) {
  bytes first = {0}, second = {0};
  put(&first, b.data, k);
  put(&second, b.data + k, b.size - k);
  free(b.data);
  return cat(gzip(first), gzip(second));
}

static mx_fuzz_seed seed_of(const char *target, const char *name, bytes b) {
  mx_fuzz_seed seed = {target, "", true, false, b.data, b.size};
  snprintf(seed.name, sizeof seed.name, "%s", name);
  return seed;
}

/* The two-file inputs of the dataset targets: the first file's length, then
 * both; a name beginning "bad-" marks an input the reader must refuse. */
static mx_fuzz_seed two_files(const char *target, const char *name, bytes first, bytes second) {
  bytes all = {0};
  put_u32(&all, (uint32_t)first.size, false);
  put(&all, first.data, first.size);
  put(&all, second.data, second.size);
  free(first.data);
  free(second.data);
  mx_fuzz_seed seed = seed_of(target, name, all);
  seed.refused = !strncmp(name, "bad-", 4);
  seed.accepted = !seed.refused;
  return seed;
}

/* n images of rows x cols and their labels, as IDX files. */
static bytes idx_images(uint32_t n, uint32_t rows, uint32_t cols) {
  bytes b = {0};
  put_u32(&b, 0x803, true);
  put_u32(&b, n, true);
  put_u32(&b, rows, true);
  put_u32(&b, cols, true);
  for (uint32_t i = 0; i < n * rows * cols; i++) put(&b, &(uint8_t){(uint8_t)(i * 37)}, 1);
  return b;
}

static bytes idx_labels(uint32_t n) {
  bytes b = {0};
  put_u32(&b, 0x801, true);
  put_u32(&b, n, true);
  for (uint32_t i = 0; i < n; i++) put(&b, &(uint8_t){(uint8_t)(i * 7 % 10)}, 1);
  return b;
}

/* n CIFAR-10 records, labels counting from first_label. */
static bytes cifar_records(int n, int first_label) {
  bytes b = {0};
  for (int i = 0; i < n; i++) {
    uint8_t record[3073];
    record[0] = (uint8_t)((first_label + i) % 10);
    for (int k = 1; k < 3073; k++) record[k] = (uint8_t)(k * 13 + i);
    put(&b, record, sizeof record);
  }
  return b;
}

/* Tensors of every kind of shape (a scalar, an empty tensor, 2-d) in five
 * dtypes, and metadata. */
static mx_fuzz_seed safetensors_seed(void) {
  mx_scope *s = mx_scope_begin();
  const char *names[] = {"w", "b", "mask", "count", "none"};
  const mx_tensor *ts[] = {mx_reshape(mx_arange(0, 6, 1, MX_F32, MX_CPU), MX_SHAPE(2, 3)),
                           mx_full(MX_SHAPE(4), 1.5, MX_BF16, MX_CPU),
                           mx_from_data((bool[]){true, false, true}, MX_SHAPE(3), MX_BOOL, MX_CPU),
                           mx_full(MX_SCALAR, 42, MX_I64, MX_CPU), mx_zeros(MX_SHAPE(0, 2), MX_F16, MX_CPU)};
  const char *path = mx_fuzz_path("seed.safetensors");
  mx_fuzz_check(mx_safetensors_save(path, 5, names, ts, 1, (const char *[]){"epoch"}, (const char *[]){"3"}) ==
                    MX_OK,
                "the safetensors seed saves");
  mx_scope_end(s);
  bytes b;
  b.data = mx_fuzz_read(path, &b.size);
  return seed_of("safetensors", "ok-tensors.safetensors", b);
}

/* Op case k on float64 inputs of its own shapes, contiguous, no special
 * values, grad mode off, no autocast (ops.c reads these bytes). */
static mx_fuzz_seed op_seed(int k) {
  bytes b = {0};
  put(&b, (uint8_t[]){(uint8_t)(k >> 8), (uint8_t)k, 0}, 3);
  for (int i = 0; i < op_case_at(k)->n_in; i++) put(&b, (uint8_t[]){0, 0}, 2);
  mx_fuzz_seed seed = seed_of("ops", "", b);
  snprintf(seed.name, sizeof seed.name, "%s", op_case_at(k)->name);
  seed.accepted = false;
  return seed;
}

mx_fuzz_seed *mx_fuzz_seeds(int *n) {
  mx_fuzz_seed *seeds = malloc(sizeof *seeds * (size_t)(14 + op_case_count()));
  mx_fuzz_check(seeds != NULL, "out of memory making the seeds");
  int k = 0;
  seeds[k++] = safetensors_seed();
  bytes ckpt;
  ckpt.data = mx_fuzz_read(mx_fuzz_checkpoint_reference(), &ckpt.size);
  seeds[k++] = seed_of("checkpoint", "ok-run.ckpt", ckpt);
  seeds[k++] = two_files("idx", "ok-idx", idx_images(3, 4, 5), idx_labels(3));
  seeds[k++] = two_files("idx", "ok-idx-gzipped", gzip(idx_images(2, 3, 3)), gzip(idx_labels(2)));
  seeds[k++] = two_files("cifar", "ok-cifar", cifar_records(2, 0), cifar_records(1, 5));
  seeds[k++] = two_files("cifar", "ok-cifar-gzipped", gzip(cifar_records(1, 9)), cifar_records(1, 3));
  /* gzip's own checks: the 8-byte trailer (CRC-32, then the length) whole and right, nothing after the data */
  seeds[k++] = two_files("idx", "ok-idx-gzip-two-members", gzip_two_members(idx_images(3, 4, 4), 20),
                         gzip(idx_labels(3)));
  seeds[k++] = two_files("idx", "bad-idx-gzip-trailer-cut", cut(gzip(idx_images(2, 3, 3)), 8), idx_labels(2));
  seeds[k++] = two_files("idx", "bad-idx-gzip-length-cut", idx_images(2, 3, 3), cut(gzip(idx_labels(2)), 3));
  seeds[k++] = two_files("idx", "bad-idx-gzip-crc", flip(gzip(idx_images(2, 3, 3)), 8, 0x10), idx_labels(2));
  seeds[k++] = two_files("idx", "bad-idx-gzip-junk-after", cat(gzip(idx_images(2, 3, 3)), idx_labels(1)),
                         idx_labels(2));
  seeds[k++] = two_files("cifar", "ok-cifar-gzip-two-members", gzip_two_members(cifar_records(2, 1), 3073),
                         cifar_records(1, 3));
  seeds[k++] = two_files("cifar", "bad-cifar-gzip-trailer-cut", cut(gzip(cifar_records(2, 4)), 8),
                         cifar_records(1, 3));
  seeds[k++] = two_files("cifar", "bad-cifar-gzip-length", cifar_records(1, 3), flip(gzip(cifar_records(1, 4)), 1, 1));
  for (int c = 0; c < op_case_count(); c++) seeds[k++] = op_seed(c);
  *n = k;
  return seeds;
}

void mx_fuzz_seeds_free(mx_fuzz_seed *seeds, int n) {
  for (int i = 0; i < n; i++) free(seeds[i].data);
  free(seeds);
}
