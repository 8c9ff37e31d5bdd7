/* Transforms one by one and composed, against hand-computed samples; shards covering every sample. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "data_files.h"
#include "kernels/math.h"
#include "tests/common/expect_error.h"

TestSuite(transforms);
TestSuite(shards);

/* The flip sample `index` of epoch 3 draws with seed 11 when it reads word w (0..3) of its block. */
static bool flips(int64_t index, int w) {
  return mx_philox4x32_10((mx_philox_block){{(uint32_t)index, 0, 3, 2}}, 11).v[w] & 1u;
}

Test(transforms, normalize_per_channel) {
  const float mean[2] = {0.5f, -1.0f}, std[2] = {0.25f, 2.0f};
  mx_transform *t = mx_transform_normalize(mean, std, 2);
  float x[4] = {1.0f, 0.0f, 3.0f, -1.0f}; /* 2 channels of 1x2 */
  cr_assert_eq(mx_transform_apply(t, x, 2, 1, 2, 0, 0, 0), MX_OK, "%s", mx_last_error());
  const float want[4] = {2.0f, -2.0f, 2.0f, 0.0f}; /* (1 - 0.5) / 0.25, (0 - 0.5) / 0.25, (3 + 1) / 2, (-1 + 1) / 2 */
  cr_expect_arr_eq(x, want, sizeof want);
  EXPECT_STATUS_ERROR(mx_transform_apply(t, x, 3, 1, 1, 0, 0, 0),
                      "mx_transform_apply: the normalisation has 2 channels, the samples (3x1x1) 3");
  mx_transform_free(t);
}

Test(transforms, flip_mirrors_each_row_half_the_time) {
  mx_transform *t = mx_transform_random_flip();
  int flipped = 0;
  for (int64_t index = 0; index < 40; index++) {
    float x[6] = {1, 2, 3, 4, 5, 6}; /* 1 channel, 2 rows of 3 */
    cr_assert_eq(mx_transform_apply(t, x, 1, 2, 3, 11, 3, index), MX_OK);
    const float mirrored[6] = {3, 2, 1, 6, 5, 4}, same[6] = {1, 2, 3, 4, 5, 6};
    bool want = flips(index, 0); /* a flip alone reads word 0 */
    cr_expect_arr_eq(x, want ? mirrored : same, sizeof x, "sample %lld", LL(index));
    flipped += want;
  }
  cr_expect(flipped > 10 && flipped < 30, "%d of 40 flipped", flipped);
  mx_transform_free(t);
}

Test(transforms, crop_of_padding_zero_is_the_image) {
  mx_transform *t = mx_transform_random_crop(0);
  float x[4] = {1, 2, 3, 4};
  cr_assert_eq(mx_transform_apply(t, x, 1, 2, 2, 1, 0, 5), MX_OK);
  const float same[4] = {1, 2, 3, 4};
  cr_expect_arr_eq(x, same, sizeof x);
  mx_transform_free(t);
}

/* Compose applies in the order given: normalising before a crop pads with
 * 0 after normalisation, normalising after it pads with (0 - mean) / std.
 * Crop (padding 1) then flip read words 0, 1 and 2 of the sample's block. */
Test(transforms, compose_applies_in_order) {
  const float mean = 1.0f, std = 0.5f;
  mx_transform *crop_first = mx_transform_compose(
      (mx_transform *[]){mx_transform_random_crop(1), mx_transform_random_flip(), mx_transform_normalize(&mean, &std, 1)},
      3);
  mx_transform *normalize_first = mx_transform_compose(
      (mx_transform *[]){mx_transform_normalize(&mean, &std, 1), mx_transform_random_crop(1), mx_transform_random_flip()},
      3);
  cr_assert(crop_first && normalize_first, "%s", mx_last_error());
  int checked = 0;
  for (int64_t index = 0; index < 200; index++) {
    mx_philox_block b = mx_philox4x32_10((mx_philox_block){{(uint32_t)index, 0, 3, 2}}, 11);
    int dy = (int)(b.v[0] % 3), dx = (int)(b.v[1] % 3);
    bool flip = b.v[2] & 1u;
    if (dy != 0 || dx != 0 || !flip) continue; /* the corner (0, 0), mirrored: worked out by hand below */
    /* image 2x2 {2, 3; 4, 5}; padded 4x4, its (0, 0) crop {0, 0; 0, 2}, mirrored {0, 0; 2, 0} */
    float a[4] = {2, 3, 4, 5}, c[4] = {2, 3, 4, 5};
    cr_assert_eq(mx_transform_apply(crop_first, a, 1, 2, 2, 11, 3, index), MX_OK);
    cr_assert_eq(mx_transform_apply(normalize_first, c, 1, 2, 2, 11, 3, index), MX_OK);
    const float want_a[4] = {-2, -2, 2, -2}; /* then (v - 1) / 0.5 */
    const float want_c[4] = {0, 0, 2, 0};    /* normalised first: {2, 4; 6, 8}, then cropped and mirrored */
    cr_expect_arr_eq(a, want_a, sizeof a, "sample %lld", LL(index));
    cr_expect_arr_eq(c, want_c, sizeof c, "sample %lld", LL(index));
    checked++;
  }
  cr_expect_gt(checked, 5, "the corner (0, 0) mirrored came %d times in 200", checked);
  mx_transform_free(crop_first);
  mx_transform_free(normalize_first);
}

Test(transforms, errors) {
  const float one = 1.0f;
  EXPECT_ERROR(mx_transform_normalize(NULL, &one, 1), "mx_transform_normalize: argument 'mean' is NULL");
  EXPECT_ERROR(mx_transform_normalize(&one, &one, 0), "mx_transform_normalize: channels must be positive, got 0");
  EXPECT_ERROR(mx_transform_compose(NULL, 2), "mx_transform_compose: expected at least one transform, got 0");
  /* a failed item fails the composition with its message; the others are freed (valgrind and ASan check it) */
  EXPECT_ERROR(mx_transform_compose((mx_transform *[]){mx_transform_random_flip(), mx_transform_random_crop(-2)}, 2),
               "mx_transform_compose: mx_transform_random_crop: padding must be at least 0, got -2");
  mx_clear_error();
  EXPECT_ERROR(mx_transform_compose((mx_transform *[]){mx_transform_random_flip(), NULL}, 2),
               "mx_transform_compose: transform 1 is NULL");
  mx_transform *crop = mx_transform_random_crop(2);
  float x[2] = {0, 0};
  EXPECT_STATUS_ERROR(mx_transform_apply(crop, x, 1, 1, 2, 0, 0, 0),
                      "mx_transform_apply: the random crop's padding must be in 0..1 for samples of 1x1x2, got 2");
  EXPECT_STATUS_ERROR(mx_transform_apply(crop, x, 1, 0, 2, 0, 0, 0),
                      "mx_transform_apply: a sample of 1x0x2: every size must be positive (at most 100000000 elements)");
  EXPECT_STATUS_ERROR(mx_transform_apply(NULL, x, 1, 1, 2, 0, 0, 0), "mx_transform_apply: argument 'transform' is NULL");
  mx_transform_free(crop);
  mx_transform_free(NULL);
}

/* The samples each shard's loader serves in one epoch, counted per sample. */
static void count_served(const mx_dataset *ds, int shards, bool uneven, int64_t *served, int64_t *per_shard) {
  memset(served, 0, (size_t)ds->n * sizeof *served);
  for (int shard = 0; shard < shards; shard++) {
    mx_loader *l = mx_loader_new(ds, &(mx_loader_options){.batch_size = 4, .shuffle = true, .seed = 2, .shards = shards,
                                                          .shard = shard, .uneven_shards = uneven});
    cr_assert_not_null(l, "%s", mx_last_error());
    cr_assert_eq(mx_loader_reset(l, 1), MX_OK);
    per_shard[shard] = 0;
    mx_tensor *x, *y;
    while (mx_loader_next(l, &x, &y)) {
      int64_t b = mx_size(y, 0), labels[4];
      cr_assert_eq(mx_to_host(y, labels, (size_t)b * sizeof *labels), MX_OK);
      for (int64_t r = 0; r < b; r++) served[labels[r]]++; /* the label is the sample's index */
      per_shard[shard] += b;
      mx_release(x);
      mx_release(y);
    }
    mx_loader_free(l);
  }
}

/* Over all ranks, uneven shards serve every sample exactly once and the
 * padded ones every sample once plus the first n_padded - n of the order
 * again (each shard ceil(n / shards)), for n not a multiple of shards too. */
Test(shards, every_sample_once_over_all_ranks) {
  const int64_t sizes[] = {1, 5, 12, 37, 100};
  const int shard_counts[] = {2, 3, 4, 7};
  for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++) {
    int64_t n = sizes[a];
    mx_dataset *ds = mx_dataset_new(n, 1, 1, 1, 100);
    for (int64_t i = 0; i < n; i++) ds->labels[i] = (uint8_t)i;
    int64_t served[100], per_shard[7];
    for (size_t b = 0; b < sizeof shard_counts / sizeof *shard_counts; b++) {
      int shards = shard_counts[b];
      count_served(ds, shards, true, served, per_shard);
      for (int64_t i = 0; i < n; i++)
        cr_expect_eq(served[i], 1, "uneven, n %lld, %d shards: sample %lld served %lld times", LL(n), shards, LL(i),
                     LL(served[i]));
      for (int s = 0; s < shards; s++)
        cr_expect_eq(per_shard[s], n / shards + (s < n % shards), "uneven, n %lld: shard %d", LL(n), s);
      count_served(ds, shards, false, served, per_shard);
      int64_t each = (n + shards - 1) / shards, twice = 0;
      for (int64_t i = 0; i < n; i++) {
        cr_expect(served[i] >= 1, "padded, n %lld, %d shards: sample %lld never served", LL(n), shards, LL(i));
        twice += served[i] - 1;
      }
      cr_expect_eq(twice, each * shards - n, "padded, n %lld, %d shards: the tail repeats", LL(n), shards);
      for (int s = 0; s < shards; s++) cr_expect_eq(per_shard[s], each, "padded, n %lld: shard %d", LL(n), s);
    }
    mx_dataset_free(ds);
  }
}
