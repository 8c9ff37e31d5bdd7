/* The dataset readers: IDX and CIFAR-10 files, good, gzipped, truncated, wrong or missing, word for word. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_files.h"
#include "data/data.h"

TestSuite(idx, .init = make_tmp_dir, .fini = remove_tmp_dir);
TestSuite(cifar, .init = make_tmp_dir, .fini = remove_tmp_dir);

/* A load that fails with exactly this message (and allocates nothing the caller must free). */
#define EXPECT_LOAD_ERROR(call, expected)                         \
  do {                                                            \
    mx_clear_error();                                             \
    mx_dataset *ds_ = (call);                                     \
    cr_expect_null(ds_, "%s should fail", #call);                 \
    mx_dataset_free(ds_);                                         \
    cr_expect_str_eq(mx_last_error(), (expected), "from %s", #call); \
  } while (0)

static const uint8_t three_labels[3] = {0, 9, 5};

/* Writes 3 images of 2x3 and their labels as images/labels files (gzipped or not). */
static void write_idx_pair(const char *images, const char *labels, bool gz_images, bool gz_labels) {
  size_t len;
  uint8_t *bytes = idx_images(3, 2, 3, &len);
  (gz_images ? write_gz : write_raw)(images, bytes, len);
  free(bytes);
  bytes = idx_labels(3, three_labels, &len);
  (gz_labels ? write_gz : write_raw)(labels, bytes, len);
  free(bytes);
}

/* ds holds n test images (first, first+1, ...) of c x h x w with these labels. */
static void expect_dataset(const mx_dataset *ds, int64_t n, int c, int h, int w, const uint8_t *labels,
                           int first) {
  cr_assert_not_null(ds, "%s", mx_last_error());
  cr_expect_eq(ds->n, n);
  cr_expect_eq(ds->c, c);
  cr_expect_eq(ds->h, h);
  cr_expect_eq(ds->w, w);
  cr_expect_eq(ds->classes, 10);
  int64_t sample = (int64_t)c * h * w;
  for (int64_t i = 0; i < n; i++) {
    cr_expect_eq(ds->labels[i], labels[i], "label %lld", LL(i));
    for (int64_t p = 0; p < sample; p++)
      if (ds->images[i * sample + p] != test_pixel(first + i, p)) {
        cr_expect(false, "image %lld pixel %lld is %d, expected %d", LL(i), LL(p), ds->images[i * sample + p],
                  test_pixel(first + i, p));
        return;
      }
  }
}

Test(idx, reads_raw_and_gzipped_files) {
  bool gz[4][2] = {{false, false}, {true, true}, {true, false}, {false, true}};
  for (int k = 0; k < 4; k++) {
    const char *images = tmp_path(gz[k][0] ? "i.gz" : "i"), *labels = tmp_path(gz[k][1] ? "l.gz" : "l");
    write_idx_pair(images, labels, gz[k][0], gz[k][1]);
    mx_dataset *ds = mx_idx_load(images, labels);
    expect_dataset(ds, 3, 1, 2, 3, three_labels, 0);
    mx_dataset_free(ds);
  }
}

Test(idx, mnist_folders_gzipped_or_raw) {
  const char *dir = tmp_subdir("mnist");
  write_idx_pair(fmt("%s/train-images-idx3-ubyte.gz", dir), fmt("%s/train-labels-idx1-ubyte.gz", dir),
                 true, true);
  write_idx_pair(fmt("%s/t10k-images-idx3-ubyte", dir), fmt("%s/t10k-labels-idx1-ubyte", dir), false,
                 false);
  /* a broken raw file beside the .gz one: the .gz is the one read */
  write_raw(fmt("%s/train-images-idx3-ubyte", dir), "junk", 4);
  mx_dataset *train = mx_mnist_load(dir, true), *test = mx_mnist_load(dir, false);
  expect_dataset(train, 3, 1, 2, 3, three_labels, 0);
  expect_dataset(test, 3, 1, 2, 3, three_labels, 0);
  mx_dataset_free(train);
  mx_dataset_free(test);
}

Test(idx, missing_files) {
  const char *images = tmp_path("images"), *labels = tmp_path("labels"), *nothing = tmp_path("nothing");
  write_idx_pair(images, labels, false, false);
  EXPECT_LOAD_ERROR(mx_idx_load(nothing, labels),
                    fmt("mx_idx_load: %s: cannot open: No such file or directory", nothing));
  EXPECT_LOAD_ERROR(mx_idx_load(images, nothing),
                    fmt("mx_idx_load: %s: cannot open: No such file or directory", nothing));
  EXPECT_LOAD_ERROR(mx_idx_load(tmp_dir, labels), fmt("mx_idx_load: %s is a folder, not a regular file", tmp_dir));
  EXPECT_LOAD_ERROR(mx_idx_load(NULL, labels), "mx_idx_load: argument 'images_path' is NULL");
  EXPECT_LOAD_ERROR(mx_mnist_load(NULL, true), "mx_mnist_load: argument 'dir' is NULL");
  EXPECT_LOAD_ERROR(mx_mnist_load(tmp_dir, true),
                    fmt("mx_mnist_load: %s: no train-images-idx3-ubyte.gz or train-images-idx3-ubyte there",
                            tmp_dir));
  write_raw(tmp_path("t10k-images-idx3-ubyte"), "x", 1);
  EXPECT_LOAD_ERROR(mx_mnist_load(tmp_dir, false),
                    fmt("mx_mnist_load: %s: no t10k-labels-idx1-ubyte.gz or t10k-labels-idx1-ubyte there",
                            tmp_dir));
}

Test(idx, truncated_raw_files) {
  size_t len;
  uint8_t *bytes = idx_images(3, 2, 3, &len); /* 16 + 18 = 34 bytes */
  const char *images = tmp_path("images"), *labels = tmp_path("labels");
  write_idx_pair(tmp_path("unused"), labels, false, false);
  size_t cuts[] = {0, 3, 4, 15, 16, 17, 30, 33};
  for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
    write_raw(images, bytes, cuts[k]);
    EXPECT_LOAD_ERROR(
        mx_idx_load(images, labels),
        cuts[k] < 16 ? fmt("mx_idx_load: %s: expected an IDX header of 16 bytes (images), got %zu", images,
                               cuts[k])
                     : fmt("mx_idx_load: %s: expected 34 bytes (a 16-byte header and 3 images of 2x3), got %zu",
                               images, cuts[k]));
  }
  free(bytes);
  bytes = idx_labels(3, three_labels, &len); /* 8 + 3 bytes */
  write_idx_pair(images, tmp_path("unused"), false, false);
  for (size_t cut = 0; cut < len; cut += 3) {
    write_raw(labels, bytes, cut);
    EXPECT_LOAD_ERROR(mx_idx_load(images, labels),
                      cut < 8 ? fmt("mx_idx_load: %s: expected an IDX header of 8 bytes (labels), got %zu",
                                        labels, cut)
                              : fmt("mx_idx_load: %s: expected 11 bytes (an 8-byte header and 3 labels), got %zu",
                                        labels, cut));
  }
  free(bytes);
}

Test(idx, truncated_gzip_files) {
  const char *images = tmp_path("images.gz"), *labels = tmp_path("labels");
  write_idx_pair(tmp_path("unused"), labels, false, false);
  size_t len, gz_len;
  uint8_t *bytes = idx_images(3, 2, 3, &len);
  uint8_t *gz = gzip_bytes(bytes, len, &gz_len);
  /* inside the gzip header, just after it, and in the 8-byte trailer (CRC, length) */
  size_t header_cuts[] = {2, 5, 10};
  for (size_t k = 0; k < 3; k++) {
    write_raw(images, gz, header_cuts[k]);
    EXPECT_LOAD_ERROR(mx_idx_load(images, labels),
                      fmt("mx_idx_load: %s: expected an IDX header of 16 bytes (images), got 0 "
                              "(the gzip stream ends early)",
                              images));
  }
  for (size_t cut = gz_len - 8; cut < gz_len; cut += 3) {
    write_raw(images, gz, cut);
    EXPECT_LOAD_ERROR(mx_idx_load(images, labels),
                      fmt("mx_idx_load: %s: the gzip stream ends early, after 34 bytes", images));
  }
  free(bytes);
  free(gz);

  /* a larger file cut in the middle of its data */
  bytes = idx_images(100, 28, 28, &len);
  gz = gzip_bytes(bytes, len, &gz_len);
  write_raw(images, gz, gz_len / 2);
  mx_clear_error();
  cr_expect_null(mx_idx_load(images, labels));
  const char *prefix = fmt("mx_idx_load: %s: expected 78416 bytes (a 16-byte header and 100 images of 28x28), got ",
                               images);
  const char *err = mx_last_error(), *suffix = " (the gzip stream ends early)";
  cr_expect_eq(strncmp(err, prefix, strlen(prefix)), 0, "%s", err);
  cr_expect_str_eq(err + strlen(err) - strlen(suffix), suffix);
  long got = atol(err + strlen(prefix));
  cr_expect(got > 16 && got < 78416, "got %ld", got);
  free(bytes);
  free(gz);
}

Test(idx, corrupt_gzip_files) {
  const char *images = tmp_path("images.gz"), *labels = tmp_path("labels");
  write_idx_pair(tmp_path("unused"), labels, false, false);
  size_t len, gz_len;
  uint8_t *bytes = idx_images(3, 2, 3, &len);
  uint8_t *gz = gzip_bytes(bytes, len, &gz_len);
  struct {
    size_t at;
    uint8_t xor;
    const char *why;
  } damage[] = {{gz_len - 8, 0x01, "incorrect data check"},   /* the CRC */
                {gz_len - 4, 0x01, "incorrect length check"}, /* the length */
                {2, 0x0f, "unknown compression method"},
                {3, 0xe0, "unknown header flags set"}};
  for (size_t k = 0; k < sizeof damage / sizeof *damage; k++) {
    gz[damage[k].at] ^= damage[k].xor;
    write_raw(images, gz, gz_len);
    gz[damage[k].at] ^= damage[k].xor;
    EXPECT_LOAD_ERROR(mx_idx_load(images, labels),
                      fmt("mx_idx_load: %s: corrupt gzip data (%s)", images, damage[k].why));
  }
  free(bytes);
  free(gz);
}

Test(idx, wrong_magic) {
  const char *images = tmp_path("images"), *labels = tmp_path("labels");
  write_idx_pair(images, labels, false, false);
  EXPECT_LOAD_ERROR(mx_idx_load(labels, labels),
                    fmt("mx_idx_load: %s: bad magic 0x00000801 (labels) where images (0x00000803) were expected",
                            labels));
  EXPECT_LOAD_ERROR(mx_idx_load(images, images),
                    fmt("mx_idx_load: %s: bad magic 0x00000803 (images) where labels (0x00000801) were expected",
                            images));
  const char *other = tmp_path("other.gz");
  write_gz(other, "\x12\x34\x56\x78 and then some bytes", 25);
  EXPECT_LOAD_ERROR(mx_idx_load(other, labels),
                    fmt("mx_idx_load: %s: bad magic 0x12345678 where images (0x00000803) were expected", other));
}

Test(idx, wrong_sizes) {
  const char *images = tmp_path("images"), *gz_images = tmp_path("images.gz"), *labels = tmp_path("labels");
  write_idx_pair(images, labels, false, false);
  size_t len;
  uint8_t *bytes = idx_images(3, 2, 3, &len), *longer = malloc(len + 1);
  memcpy(longer, bytes, len);
  longer[len] = 0;
  write_raw(images, longer, len + 1);
  EXPECT_LOAD_ERROR(mx_idx_load(images, labels),
                    fmt("mx_idx_load: %s: expected 34 bytes (a 16-byte header and 3 images of 2x3), got 35", images));
  write_gz(gz_images, longer, len + 1);
  EXPECT_LOAD_ERROR(mx_idx_load(gz_images, labels),
                    fmt("mx_idx_load: %s: expected 34 bytes (a 16-byte header and 3 images of 2x3), got more",
                            gz_images));
  free(bytes);
  free(longer);

  /* dimensions of 0, and more than the limit: refused before reading (or allocating) */
  uint32_t zero_rows[3] = {3, 0, 3}, huge[3] = {60000, 1000, 1000}, wide[3] = {1, 0xffffffffu, 0xffffffffu};
  bytes = idx_bytes(0x803, 3, zero_rows, NULL, 0, &len);
  write_raw(images, bytes, len);
  free(bytes);
  EXPECT_LOAD_ERROR(mx_idx_load(images, labels), fmt("mx_idx_load: %s: the header says 3 images of 0x3", images));
  bytes = idx_bytes(0x803, 3, huge, NULL, 0, &len);
  write_gz(gz_images, bytes, len);
  free(bytes);
  EXPECT_LOAD_ERROR(mx_idx_load(gz_images, labels),
                    fmt("mx_idx_load: %s: the header says 60000 images of 1000x1000, more than the "
                            "100000000-byte limit",
                            gz_images));
  bytes = idx_bytes(0x803, 3, wide, NULL, 0, &len);
  write_raw(images, bytes, len);
  free(bytes);
  EXPECT_LOAD_ERROR(mx_idx_load(images, labels),
                    fmt("mx_idx_load: %s: the header says 1 images of 4294967295x4294967295, more than the "
                            "100000000-byte limit",
                            images));
  write_idx_pair(images, labels, false, false);
  uint32_t no_labels = 0, many_labels = 0xffffffffu;
  bytes = idx_bytes(0x801, 1, &no_labels, NULL, 0, &len);
  write_raw(labels, bytes, len);
  free(bytes);
  EXPECT_LOAD_ERROR(mx_idx_load(images, labels), fmt("mx_idx_load: %s: the header says 0 labels", labels));
  bytes = idx_bytes(0x801, 1, &many_labels, NULL, 0, &len);
  write_raw(labels, bytes, len);
  free(bytes);
  EXPECT_LOAD_ERROR(mx_idx_load(images, labels),
                    fmt("mx_idx_load: %s: the header says 4294967295 labels, more than the 100000000-byte limit",
                            labels));
}

Test(idx, labels_must_match_and_lie_in_range) {
  const char *images = tmp_path("images"), *labels = tmp_path("labels");
  write_idx_pair(images, labels, false, false);
  size_t len;
  uint8_t *bytes = idx_labels(2, three_labels, &len);
  write_raw(labels, bytes, len);
  free(bytes);
  EXPECT_LOAD_ERROR(mx_idx_load(images, labels),
                    fmt("mx_idx_load: %s holds 3 images but %s holds 2 labels", images, labels));
  uint8_t bad[3] = {0, 10, 255};
  bytes = idx_labels(3, bad, &len);
  write_gz(labels, bytes, len);
  free(bytes);
  EXPECT_LOAD_ERROR(mx_idx_load(images, labels),
                    fmt("mx_idx_load: %s: label 10 of sample 1 is outside 0..9", labels));
}

/* Debian's dataset-fashion-mnist (scripts/setup installs it). */
Test(idx, fashion_mnist_as_debian_installs_it) {
  const char *dir = "/usr/share/datasets/fashion-mnist";
  if (access(fmt("%s/t10k-images-idx3-ubyte.gz", dir), R_OK) != 0) cr_skip_test("dataset-fashion-mnist is not installed");
  mx_dataset *test = mx_mnist_load(dir, false);
  cr_assert_not_null(test, "%s", mx_last_error());
  cr_expect_eq(test->n, 10000);
  cr_expect_eq(test->c * test->h * test->w, 784);
  int per_class[10] = {0};
  for (int64_t i = 0; i < test->n; i++) per_class[test->labels[i]]++;
  for (int k = 0; k < 10; k++) cr_expect_eq(per_class[k], 1000, "class %d", k);
  mx_dataset_free(test);
}

/* --- CIFAR-10 ------------------------------------------------------------------- */

static const uint8_t five_labels[5] = {3, 0, 9, 1, 7};

/* Writes count records (test images first, first+1, ...) to path. */
static void write_cifar(const char *path, int count, const uint8_t *labels, int first, bool gz) {
  size_t len;
  uint8_t *bytes = cifar_bytes(count, labels, first, &len);
  (gz ? write_gz : write_raw)(path, bytes, len);
  free(bytes);
}

Test(cifar, reads_batches_in_order) {
  const char *paths[2] = {tmp_path("a.bin"), tmp_path("b.bin.gz")};
  write_cifar(paths[0], 2, five_labels, 0, false);
  write_cifar(paths[1], 3, five_labels + 2, 2, true);
  mx_dataset *ds = mx_cifar_load_files(paths, 2);
  expect_dataset(ds, 5, 3, 32, 32, five_labels, 0);
  mx_dataset_free(ds);
}

Test(cifar, folders) {
  /* the archive's layout: train and test */
  char sub_dir[1024];
  snprintf(sub_dir, sizeof sub_dir, "%s", tmp_subdir("cifar-10-batches-bin"));
  for (int b = 1; b <= 5; b++)
    write_cifar(fmt("%s/data_batch_%d.bin", sub_dir, b), 1, five_labels + b - 1, b - 1, false);
  write_cifar(fmt("%s/test_batch.bin", sub_dir), 2, five_labels, 7, false);
  mx_dataset *train = mx_cifar_load(tmp_dir, true), *test = mx_cifar_load(tmp_dir, false);
  expect_dataset(train, 5, 3, 32, 32, five_labels, 0);
  expect_dataset(test, 2, 3, 32, 32, five_labels, 7);
  mx_dataset_free(train);
  mx_dataset_free(test);
  /* the files in the folder itself */
  mx_dataset *direct = mx_cifar_load(sub_dir, true);
  expect_dataset(direct, 5, 3, 32, 32, five_labels, 0);
  mx_dataset_free(direct);
  const char *missing = fmt("%s/data_batch_3.bin", sub_dir);
  remove(missing);
  EXPECT_LOAD_ERROR(mx_cifar_load(tmp_dir, true),
                    fmt("mx_cifar_load: %s: cannot open: No such file or directory", missing));
  EXPECT_LOAD_ERROR(mx_cifar_load(NULL, true), "mx_cifar_load: argument 'dir' is NULL");
  EXPECT_LOAD_ERROR(mx_cifar_load_files(NULL, 1), "mx_cifar_load: expected at least one batch file, got 0");
}

Test(cifar, truncated_and_wrong_files) {
  const char *path = tmp_path("data_batch_1.bin");
  const char *paths[1] = {path};
  size_t len;
  uint8_t *bytes = cifar_bytes(2, five_labels, 0, &len);
  size_t cuts[] = {0, 1, 3072, 3074, 2 * 3073 - 1};
  for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
    write_raw(path, bytes, cuts[k]);
    EXPECT_LOAD_ERROR(mx_cifar_load_files(paths, 1),
                      fmt("mx_cifar_load: %s: expected a whole number of 3073-byte records (a label byte and "
                              "3072 pixels), got %zu bytes",
                              path, cuts[k]));
  }
  /* gzipped: the length is known only once read */
  write_gz(path, bytes, 3073 + 100);
  EXPECT_LOAD_ERROR(mx_cifar_load_files(paths, 1),
                    fmt("mx_cifar_load: %s: expected a whole number of 3073-byte records (a label byte and "
                            "3072 pixels), got 3173 bytes",
                            path));
  size_t gz_len;
  uint8_t *gz = gzip_bytes(bytes, len, &gz_len);
  write_raw(path, gz, gz_len - 3);
  EXPECT_LOAD_ERROR(mx_cifar_load_files(paths, 1),
                    fmt("mx_cifar_load: %s: the gzip stream ends early, after 6146 bytes", path));
  write_raw(path, gz, gz_len / 2);
  mx_clear_error();
  cr_expect_null(mx_cifar_load_files(paths, 1));
  const char *prefix = fmt("mx_cifar_load: %s: the gzip stream ends early, after ", path);
  cr_expect_eq(strncmp(mx_last_error(), prefix, strlen(prefix)), 0, "%s", mx_last_error());
  free(gz);
  /* a label out of range in the second record */
  bytes[3073] = 10;
  write_raw(path, bytes, len);
  EXPECT_LOAD_ERROR(mx_cifar_load_files(paths, 1),
                    fmt("mx_cifar_load: %s: label 10 of record 1 is outside 0..9", path));
  free(bytes);
}
