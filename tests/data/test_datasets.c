/* The new datasets: CIFAR-100 files (fine and coarse labels), tensors in memory, a user's callbacks. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "data_files.h"
#include "ops/ops.h"
#include "tests/common/expect_error.h"

TestSuite(cifar100, .init = make_tmp_dir, .fini = remove_tmp_dir);
TestSuite(tensor_dataset);
TestSuite(custom_dataset);

/* CIFAR-100 records: record i has coarse[i], fine[i] and the 3072 test
 * pixels of image i (malloc'ed, *len bytes). */
static uint8_t *cifar100_bytes(int n, const uint8_t *coarse, const uint8_t *fine, size_t *len) {
  *len = (size_t)n * 3074;
  uint8_t *out = malloc(*len);
  for (int i = 0; i < n; i++) {
    out[(size_t)i * 3074] = coarse[i];
    out[(size_t)i * 3074 + 1] = fine[i];
    for (int p = 0; p < 3072; p++) out[(size_t)i * 3074 + 2 + p] = test_pixel(i, p);
  }
  return out;
}

static const uint8_t coarse3[3] = {19, 0, 7}, fine3[3] = {99, 42, 0};

Test(cifar100, fine_and_coarse_labels) {
  size_t len;
  uint8_t *bytes = cifar100_bytes(3, coarse3, fine3, &len);
  char *dir = strdup(tmp_subdir("cifar-100-binary"));
  write_raw(fmt("%s/train.bin", dir), bytes, len);
  write_gz(fmt("%s/test.bin", dir), bytes, 3074); /* its first record, gzipped */
  mx_dataset *fine = mx_cifar100_load(tmp_dir, true, MX_CIFAR100_FINE);
  mx_dataset *coarse = mx_cifar100_load(dir, true, MX_CIFAR100_COARSE); /* the folder itself */
  mx_dataset *test = mx_cifar100_load(tmp_dir, false, MX_CIFAR100_COARSE);
  cr_assert(fine && coarse && test, "%s", mx_last_error());
  cr_expect(fine->n == 3 && fine->c == 3 && fine->h == 32 && fine->w == 32 && fine->classes == 100);
  cr_expect(coarse->n == 3 && coarse->classes == 20);
  for (int i = 0; i < 3; i++) {
    cr_expect_eq(fine->labels[i], fine3[i], "fine label %d", i);
    cr_expect_eq(coarse->labels[i], coarse3[i], "coarse label %d", i);
    for (int p = 0; p < 3072; p++)
      if (fine->images[i * 3072 + p] != test_pixel(i, p) || coarse->images[i * 3072 + p] != test_pixel(i, p))
        cr_assert(false, "image %d pixel %d", i, p);
  }
  cr_expect(test->n == 1 && test->labels[0] == 19);
  mx_dataset_free(fine);
  mx_dataset_free(coarse);
  mx_dataset_free(test);
  free(bytes);
  free(dir);
}

Test(cifar100, wrong_files_name_the_file) {
  const char *path = tmp_path("train.bin");
  size_t len;
  uint8_t *bytes = cifar100_bytes(3, coarse3, fine3, &len);
  write_raw(path, bytes, len - 1);
  const char *paths[1] = {path};
  EXPECT_ERROR(mx_cifar100_load_files(paths, 1, MX_CIFAR100_FINE),
               fmt("mx_cifar100_load: %s: expected a whole number of 3074-byte records (a coarse and a fine label "
                   "byte and 3072 pixels), got 9221 bytes", path));
  bytes[3074] = 20; /* record 1's coarse label */
  write_raw(path, bytes, len);
  EXPECT_ERROR(mx_cifar100_load_files(paths, 1, MX_CIFAR100_FINE),
               fmt("mx_cifar100_load: %s: coarse label 20 of record 1 is outside 0..19", path));
  bytes[3074] = 0;
  bytes[2 * 3074 + 1] = 100; /* record 2's fine label */
  write_raw(path, bytes, len);
  EXPECT_ERROR(mx_cifar100_load_files(paths, 1, MX_CIFAR100_COARSE),
               fmt("mx_cifar100_load: %s: fine label 100 of record 2 is outside 0..99", path));
  /* a CIFAR-10 file of 3 records is 9219 bytes: no whole number of CIFAR-100 records */
  uint8_t *ten = cifar_bytes(3, (const uint8_t[3]){1, 2, 3}, 0, &len);
  write_raw(path, ten, len);
  EXPECT_ERROR(mx_cifar100_load_files(paths, 1, MX_CIFAR100_FINE),
               fmt("mx_cifar100_load: %s: expected a whole number of 3074-byte records (a coarse and a fine label "
                   "byte and 3072 pixels), got 9219 bytes", path));
  EXPECT_ERROR(mx_cifar100_load(tmp_dir, false, MX_CIFAR100_FINE),
               fmt("mx_cifar100_load: %s/test.bin: cannot open: No such file or directory", tmp_dir));
  EXPECT_ERROR(mx_cifar100_load(tmp_dir, true, (mx_cifar100_labels)7),
               "mx_cifar100_load: labels must be MX_CIFAR100_FINE or MX_CIFAR100_COARSE, got 7");
  EXPECT_ERROR(mx_cifar100_load(NULL, true, MX_CIFAR100_FINE), "mx_cifar100_load: argument 'dir' is NULL");
  free(bytes);
  free(ten);
}

/* Every batch of l, concatenated: xs (n * sample floats) and ys. Returns the sample count. */
static int64_t drain(mx_loader *l, float *xs, int64_t *ys, int64_t sample) {
  int64_t k = 0;
  mx_tensor *x, *y;
  while (mx_loader_next(l, &x, &y)) {
    int64_t b = mx_size(x, 0);
    cr_assert_eq(mx_to_host(x, xs + k * sample, (size_t)(b * sample) * sizeof *xs), MX_OK);
    cr_assert_eq(mx_to_host(y, ys + k, (size_t)b * sizeof *ys), MX_OK);
    k += b;
    mx_release(x);
    mx_release(y);
  }
  cr_expect_eq(mx_loader_status(l), MX_OK, "%s", mx_last_error());
  return k;
}

Test(tensor_dataset, samples_and_labels_from_tensors) {
  /* 5 samples of 2 features (float64 in, float32 out), labels as int32 */
  const double xv[10] = {0.5, -1, 2, 3, 4.25, 5, 6, 7, 8, -9};
  const int32_t yv[5] = {3, 0, 1, 3, 2};
  mx_tensor *x = mx_from_data(xv, MX_SHAPE(5, 2), MX_F64, MX_CPU), *y = mx_from_data(yv, MX_SHAPE(5), MX_I32, MX_CPU);
  mx_dataset *ds = mx_dataset_from_tensors(x, y);
  mx_release(x);
  mx_release(y);
  cr_assert_not_null(ds, "%s", mx_last_error());
  cr_expect(ds->n == 5 && ds->c == 1 && ds->h == 1 && ds->w == 2 && ds->ndim == 1 && ds->classes == 4);
  float one[2];
  int64_t label;
  cr_assert_eq(mx_dataset_get(ds, 4, one, &label), MX_OK);
  cr_expect(one[0] == 8.0f && one[1] == -9.0f && label == 2);
  mx_loader *l = mx_loader_new(ds, &(mx_loader_options){.batch_size = 2, .drop_last = true});
  cr_assert_not_null(l, "%s", mx_last_error());
  mx_tensor *bx, *by;
  cr_assert(mx_loader_next(l, &bx, &by));
  mx_shape s = mx_shape_get(bx);
  cr_expect(s.ndim == 2 && s.d[0] == 2 && s.d[1] == 2, "batches of (2, 2)");
  mx_release(bx);
  mx_release(by);
  cr_assert_eq(mx_loader_reset(l, 0), MX_OK);
  float xs[10];
  int64_t ys[5];
  cr_expect_eq(drain(l, xs, ys, 2), 4, "drop_last: 2 batches of 2, sample 4 dropped");
  const float want_x[8] = {0.5f, -1, 2, 3, 4.25f, 5, 6, 7};
  const int64_t want_y[4] = {3, 0, 1, 3};
  cr_expect_arr_eq(xs, want_x, sizeof want_x);
  cr_expect_arr_eq(ys, want_y, sizeof want_y);
  mx_loader_free(l);
  mx_dataset_free(ds);

  /* images (n, h, w) come in batches (B, h, w) */
  mx_tensor *img = mx_zeros(MX_SHAPE(3, 4, 5), MX_F32, MX_CPU), *lab = mx_zeros(MX_SHAPE(3), MX_I64, MX_CPU);
  ds = mx_dataset_from_tensors(img, lab);
  cr_assert_not_null(ds, "%s", mx_last_error());
  cr_expect(ds->c == 1 && ds->h == 4 && ds->w == 5 && ds->ndim == 2 && ds->classes == 1);
  l = mx_loader_new(ds, &(mx_loader_options){.batch_size = 8});
  cr_assert(mx_loader_next(l, &bx, &by));
  s = mx_shape_get(bx);
  cr_expect(s.ndim == 3 && s.d[0] == 3 && s.d[1] == 4 && s.d[2] == 5, "batches of (3, 4, 5)");
  mx_release(bx);
  mx_release(by);
  mx_loader_free(l);
  mx_dataset_free(ds);
  mx_release(img);
  mx_release(lab);
}

Test(tensor_dataset, errors) {
  mx_tensor *x = mx_zeros(MX_SHAPE(3, 2), MX_F32, MX_CPU), *y = mx_zeros(MX_SHAPE(4), MX_I64, MX_CPU);
  mx_tensor *flat = mx_zeros(MX_SHAPE(3), MX_F32, MX_CPU), *big = mx_zeros(MX_SHAPE(3, 1, 1, 1, 2), MX_F32, MX_CPU);
  mx_tensor *yf = mx_zeros(MX_SHAPE(3), MX_F32, MX_CPU);
  const int64_t bad[3] = {0, -1, 2};
  mx_tensor *yneg = mx_from_data(bad, MX_SHAPE(3), MX_I64, MX_CPU);
  EXPECT_ERROR(mx_dataset_from_tensors(NULL, y), "mx_dataset_from_tensors: argument 'x' is NULL");
  EXPECT_ERROR(mx_dataset_from_tensors(x, y), "mx_dataset_from_tensors: y must be (3), one label per sample of x [3,2], got [4]");
  EXPECT_ERROR(mx_dataset_from_tensors(flat, y),
               "mx_dataset_from_tensors: x must be (n, sample) with n > 0 and a sample of 1 to 3 dims, got [3]");
  EXPECT_ERROR(mx_dataset_from_tensors(big, yneg),
               "mx_dataset_from_tensors: x's sample [1,1,1,2]: a sample needs 1 to 3 dims, each positive, at most "
               "100000000 elements");
  EXPECT_ERROR(mx_dataset_from_tensors(x, yf),
               "mx_dataset_from_tensors: y must hold integer labels (int64, int32 or uint8), got float32");
  EXPECT_ERROR(mx_dataset_from_tensors(x, yneg), "mx_dataset_from_tensors: label -1 of sample 1 is outside 0..65535");
  mx_release(x), mx_release(y), mx_release(flat), mx_release(big), mx_release(yf), mx_release(yneg);
}

/* A user's dataset: sample i of 1x2x3 holds i, i + 1, ..., label i % 3;
 * get fails for sample fail_at, and gives sample bad_label the label 7. */
typedef struct {
  int64_t n, fail_at, bad_label, calls;
} counting;

static int64_t counting_length(void *user) { return ((counting *)user)->n; }

static bool counting_get(void *user, int64_t index, float *x, int64_t *y) {
  counting *c = user;
  c->calls++;
  for (int p = 0; p < 6; p++) x[p] = (float)(index + p);
  *y = index == c->bad_label ? 7 : index % 3;
  return index != c->fail_at;
}

Test(custom_dataset, callbacks_give_the_samples) {
  counting user = {.n = 7, .fail_at = -1, .bad_label = -1};
  mx_dataset *ds = mx_dataset_custom(&(mx_dataset_callbacks){counting_length, counting_get, &user}, MX_SHAPE(1, 2, 3), 3);
  cr_assert_not_null(ds, "%s", mx_last_error());
  cr_expect(ds->n == 7 && ds->c == 1 && ds->h == 2 && ds->w == 3 && ds->ndim == 3 && !ds->images && !ds->values);
  for (int background = 0; background < 2; background++) {
    mx_loader *l = mx_loader_new(ds, &(mx_loader_options){.batch_size = 3, .shuffle = true, .seed = 4,
                                                          .background = background});
    cr_assert_not_null(l, "%s", mx_last_error());
    cr_assert_eq(mx_loader_reset(l, 1), MX_OK);
    const int64_t *order = mx_loader_order(l);
    float xs[42];
    int64_t ys[7];
    cr_assert_eq(drain(l, xs, ys, 6), 7);
    for (int k = 0; k < 7; k++) {
      cr_expect_eq(ys[k], order[k] % 3, "background %d position %d", background, k);
      for (int p = 0; p < 6; p++) cr_expect_eq(xs[k * 6 + p], (float)(order[k] + p));
    }
    mx_loader_free(l);
  }
  mx_dataset_free(ds);
}

Test(custom_dataset, failures_are_reported_on_the_callers_thread) {
  counting user = {.n = 7, .fail_at = 4, .bad_label = -1};
  mx_dataset_callbacks cb = {counting_length, counting_get, &user};
  mx_dataset *ds = mx_dataset_custom(&cb, MX_SHAPE(6), 3);
  cr_assert_not_null(ds, "%s", mx_last_error());
  for (int background = 0; background < 2; background++) {
    mx_loader *l = mx_loader_new(ds, &(mx_loader_options){.batch_size = 3, .background = background});
    mx_tensor *x, *y;
    cr_assert(mx_loader_next(l, &x, &y), "%s", mx_last_error()); /* samples 0..2 */
    mx_release(x);
    mx_release(y);
    mx_clear_error();
    cr_expect_not(mx_loader_next(l, &x, &y));
    cr_expect_null(x);
    cr_expect_eq(mx_loader_status(l), MX_IO_ERROR);
    cr_expect_str_eq(mx_last_error(), "mx_loader_next: the dataset's get failed for sample 4");
    mx_loader_free(l);
  }
  float one[6];
  int64_t label;
  EXPECT_STATUS_ERROR(mx_dataset_get(ds, 4, one, &label), "mx_dataset_get: the dataset's get failed for sample 4");
  EXPECT_STATUS_ERROR(mx_dataset_get(ds, 7, one, &label), "mx_dataset_get: index 7 is outside 0..6");
  user.fail_at = -1;
  user.bad_label = 5;
  EXPECT_STATUS_ERROR(mx_dataset_get(ds, 5, one, &label),
                      "mx_dataset_get: the dataset's get gave sample 5 the label 7, outside 0..2");
  mx_dataset_free(ds);

  user.n = 0;
  EXPECT_ERROR(mx_dataset_custom(&cb, MX_SHAPE(6), 3),
               "mx_dataset_custom: the length callback says 0 samples; a dataset needs at least one");
  user.n = 7;
  EXPECT_ERROR(mx_dataset_custom(&cb, MX_SHAPE(1, 1, 2, 3), 3),
               "mx_dataset_custom: the sample shape [1,1,2,3]: a sample needs 1 to 3 dims, each positive, at most "
               "100000000 elements");
  EXPECT_ERROR(mx_dataset_custom(&cb, MX_SHAPE(6), 0), "mx_dataset_custom: classes must be positive, got 0");
  EXPECT_ERROR(mx_dataset_custom(&(mx_dataset_callbacks){counting_length, NULL, &user}, MX_SHAPE(6), 3),
               "mx_dataset_custom: argument 'cb->get' is NULL");
}
