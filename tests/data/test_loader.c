/* The data loader (shuffling, batching, normalisation, crop and flip, the worker thread) and the synthetic data. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "data_files.h"
#include "kernels/math.h"
#include "tensor/scope.h"
#include "tests/common/expect_error.h"

TestSuite(loader);
TestSuite(synthetic);

/* n samples of 1x2x2 whose pixels spell their index (i % 256, i / 256)
 * and labels i % 10. */
static mx_dataset *indexed(int64_t n) {
  mx_dataset *ds = mx_dataset_new(n, 1, 2, 2, 10);
  cr_assert_not_null(ds, "%s", mx_last_error());
  for (int64_t i = 0; i < n; i++) {
    uint8_t *p = ds->images + 4 * i;
    p[0] = (uint8_t)(i % 256), p[1] = (uint8_t)(i / 256), p[2] = 7, p[3] = 200;
    ds->labels[i] = (uint8_t)(i % 10);
  }
  return ds;
}

/* The sample index that x's row r spells (the loader normalised with mean 0, std 1). */
static int64_t index_of(const float *x, int64_t r) {
  return lrintf(x[4 * r] * 255.0f) + 256 * lrintf(x[4 * r + 1] * 255.0f);
}

/* The batch's elements, copied to the host (malloc'ed). */
static float *host_x(const mx_tensor *x) {
  float *h = malloc((size_t)mx_numel(x) * sizeof *h);
  cr_assert_eq(mx_to_host(x, h, (size_t)mx_numel(x) * sizeof *h), MX_OK);
  return h;
}

static int64_t *host_y(const mx_tensor *y) {
  int64_t *h = malloc((size_t)mx_numel(y) * sizeof *h);
  cr_assert_eq(mx_to_host(y, h, (size_t)mx_numel(y) * sizeof *h), MX_OK);
  return h;
}

static int compare_int64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

Test(loader, shuffling_is_a_seeded_permutation) {
  mx_dataset *ds = indexed(1000);
  mx_loader_options o = {.batch_size = 10, .shuffle = true, .seed = 42};
  mx_loader *a = mx_loader_new(ds, &o), *b = mx_loader_new(ds, &o);
  o.seed = 43;
  mx_loader *c = mx_loader_new(ds, &o);
  o.shuffle = false;
  mx_loader *plain = mx_loader_new(ds, &o);
  int64_t epoch0[1000], sorted[1000];
  memcpy(epoch0, mx_loader_order(a), sizeof epoch0);
  memcpy(sorted, epoch0, sizeof sorted);
  qsort(sorted, 1000, sizeof *sorted, compare_int64);
  int64_t fixed = 0;
  for (int64_t i = 0; i < 1000; i++) {
    cr_expect_eq(sorted[i], i, "not a permutation at %lld", LL(i));
    cr_expect_eq(mx_loader_order(plain)[i], i);
    fixed += epoch0[i] == i;
  }
  cr_expect_lt(fixed, 10, "%lld of 1000 indices stay in place", LL(fixed));
  cr_expect_arr_eq(mx_loader_order(b), epoch0, sizeof epoch0, "the same seed gives the same order");
  cr_expect_arr_neq(mx_loader_order(c), epoch0, sizeof epoch0, "another seed, another order");
  cr_assert_eq(mx_loader_reset(a, 1), MX_OK);
  cr_expect_arr_neq(mx_loader_order(a), epoch0, sizeof epoch0, "each epoch has its own order");
  cr_assert_eq(mx_loader_reset(a, 0), MX_OK);
  cr_expect_arr_eq(mx_loader_order(a), epoch0, sizeof epoch0, "epoch 0 again is the same order");
  mx_loader_free(a);
  mx_loader_free(b);
  mx_loader_free(c);
  mx_loader_free(plain);
  mx_dataset_free(ds);
}

/* Reads every batch of three epochs and checks each sample comes once, in the epoch's order. */
static void expect_each_sample_once(bool background) {
  mx_dataset *ds = indexed(37);
  mx_loader *l = mx_loader_new(ds, &(mx_loader_options){.batch_size = 8, .shuffle = true, .seed = 5,
                                                        .background = background});
  cr_assert_not_null(l, "%s", mx_last_error());
  for (int epoch = 0; epoch < 3; epoch++) {
    cr_assert_eq(mx_loader_reset(l, epoch), MX_OK);
    const int64_t *order = mx_loader_order(l);
    int seen[37] = {0};
    int64_t pos = 0;
    mx_tensor *x, *y;
    while (mx_loader_next(l, &x, &y)) {
      cr_assert_eq(mx_dtype_of(x), MX_F32);
      cr_assert_eq(mx_dtype_of(y), MX_I64);
      float *hx = host_x(x);
      int64_t *hy = host_y(y);
      for (int64_t r = 0; r < mx_size(x, 0); r++, pos++) {
        int64_t i = index_of(hx, r);
        cr_assert(i >= 0 && i < 37);
        cr_expect_eq(i, order[pos], "epoch %d position %lld", epoch, LL(pos));
        cr_expect_eq(hy[r], i % 10);
        seen[i]++;
      }
      free(hx);
      free(hy);
      mx_release(x);
      mx_release(y);
    }
    cr_expect_eq(mx_loader_status(l), MX_OK);
    cr_expect_eq(pos, 37);
    for (int i = 0; i < 37; i++) cr_expect_eq(seen[i], 1, "epoch %d: sample %d seen %d times", epoch, i, seen[i]);
  }
  mx_loader_free(l);
  mx_dataset_free(ds);
}

Test(loader, every_sample_once_per_epoch) { expect_each_sample_once(false); }
Test(loader, every_sample_once_per_epoch_in_the_background) { expect_each_sample_once(true); }

Test(loader, batch_counts_and_drop_last) {
  struct {
    int64_t n, batch_size;
    bool drop_last;
    int64_t batches, last;
  } cases[] = {{37, 8, false, 5, 5},   {37, 8, true, 4, 8},     {32, 8, false, 4, 8},
               {32, 8, true, 4, 8},    {37, 37, false, 1, 37},  {37, 100, false, 1, 37},
               {37, 100, true, 0, 0},  {37, 1, false, 37, 1},   {37, 36, true, 1, 36}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    mx_dataset *ds = indexed(cases[k].n);
    for (int background = 0; background < 2; background++) {
      mx_loader *l = mx_loader_new(ds, &(mx_loader_options){.batch_size = cases[k].batch_size,
                                                            .drop_last = cases[k].drop_last,
                                                            .background = background});
      cr_assert_not_null(l, "%s", mx_last_error());
      cr_expect_eq(mx_loader_batches(l), cases[k].batches, "case %zu", k);
      int64_t count = 0, last = 0;
      mx_tensor *x, *y;
      while (mx_loader_next(l, &x, &y)) {
        count++;
        last = mx_size(x, 0);
        cr_expect_eq(mx_size(y, 0), last);
        mx_shape s = mx_shape_get(x);
        cr_expect(s.ndim == 4 && s.d[1] == 1 && s.d[2] == 2 && s.d[3] == 2);
        if (count < cases[k].batches) cr_expect_eq(last, cases[k].batch_size, "case %zu batch %lld", k, LL(count));
        mx_release(x);
        mx_release(y);
      }
      cr_expect_null(x);
      cr_expect_null(y);
      cr_expect_eq(mx_loader_status(l), MX_OK);
      cr_expect_eq(count, cases[k].batches, "case %zu", k);
      cr_expect_eq(last, cases[k].last, "case %zu", k);
      cr_expect_not(mx_loader_next(l, &x, &y), "still at the end");
      mx_loader_free(l);
    }
    mx_dataset_free(ds);
  }
}

/* Three shards of 37 shuffled samples, as DistributedSampler cuts them:
 * shard r serves positions r, r + 3, ... of the epoch's permutation padded
 * to 39 with its first two, so each shard has 13 and together they hold
 * every sample, those at positions 0 and 1 twice. */
Test(loader, shards_split_each_epoch_like_distributed_sampler) {
  mx_dataset *ds = indexed(37);
  mx_loader *whole = mx_loader_new(ds, &(mx_loader_options){.batch_size = 5, .shuffle = true, .seed = 9});
  cr_assert_not_null(whole, "%s", mx_last_error());
  for (int epoch = 0; epoch < 2; epoch++) {
    cr_assert_eq(mx_loader_reset(whole, epoch), MX_OK);
    const int64_t *perm = mx_loader_order(whole);
    int seen[37] = {0};
    for (int shard = 0; shard < 3; shard++) {
      mx_loader *l = mx_loader_new(ds, &(mx_loader_options){.batch_size = 5, .shuffle = true, .seed = 9,
                                                            .shards = 3, .shard = shard, .background = shard == 1});
      cr_assert_not_null(l, "%s", mx_last_error());
      cr_assert_eq(mx_loader_reset(l, epoch), MX_OK);
      cr_expect_eq(mx_loader_batches(l), 3, "13 samples in batches of 5");
      int64_t k = 0;
      mx_tensor *x, *y;
      while (mx_loader_next(l, &x, &y)) {
        float *hx = host_x(x);
        for (int64_t r = 0; r < mx_size(x, 0); r++, k++) {
          int64_t want = perm[(shard + 3 * k) % 37], got = index_of(hx, r);
          cr_expect_eq(got, want, "epoch %d shard %d sample %lld", epoch, shard, LL(k));
          seen[got]++;
        }
        free(hx);
        mx_release(x);
        mx_release(y);
      }
      cr_expect_eq(k, 13, "shard %d", shard);
      mx_loader_free(l);
    }
    for (int i = 0; i < 37; i++)
      cr_expect_eq(seen[i], i == perm[0] || i == perm[1] ? 2 : 1, "epoch %d: sample %d served %d times", epoch, i, seen[i]);
  }
  mx_loader_free(whole);
  mx_dataset_free(ds);
}

/* Uneven shards, for test passes: 37 samples over 3 shards give 13, 12 and
 * 12, shard r serving positions r, r + 3, ... below 37 of the order, and
 * every sample once; 2 samples over 3 shards leave shard 2 none. */
Test(loader, uneven_shards_serve_every_sample_once) {
  mx_dataset *ds = indexed(37);
  int seen[37] = {0};
  for (int shard = 0; shard < 3; shard++) {
    mx_loader *l = mx_loader_new(ds, &(mx_loader_options){.batch_size = 5, .shards = 3, .shard = shard,
                                                          .uneven_shards = true, .background = shard == 1});
    cr_assert_not_null(l, "%s", mx_last_error());
    int64_t want_n = shard == 0 ? 13 : 12, k = 0;
    cr_expect_eq(mx_loader_batches(l), 3, "shard %d: %lld samples in batches of 5", shard, LL(want_n));
    mx_tensor *x, *y;
    while (mx_loader_next(l, &x, &y)) {
      float *hx = host_x(x);
      for (int64_t r = 0; r < mx_size(x, 0); r++, k++) {
        int64_t got = index_of(hx, r);
        cr_expect_eq(got, shard + 3 * k, "shard %d sample %lld", shard, LL(k)); /* unshuffled: position = index */
        seen[got]++;
      }
      free(hx);
      mx_release(x);
      mx_release(y);
    }
    cr_expect_eq(k, want_n, "shard %d", shard);
    mx_loader_free(l);
  }
  for (int i = 0; i < 37; i++) cr_expect_eq(seen[i], 1, "sample %d served %d times", i, seen[i]);
  mx_dataset_free(ds);

  ds = indexed(2);
  for (int shard = 0; shard < 3; shard++) {
    mx_loader *l = mx_loader_new(ds, &(mx_loader_options){.batch_size = 4, .shards = 3, .shard = shard,
                                                          .uneven_shards = true, .background = true});
    cr_assert_not_null(l, "%s", mx_last_error());
    cr_expect_eq(mx_loader_batches(l), shard < 2 ? 1 : 0, "shard %d of 2 samples", shard);
    mx_tensor *x, *y;
    bool got = mx_loader_next(l, &x, &y);
    cr_expect_eq(got, shard < 2, "shard %d", shard);
    if (got) {
      cr_expect_eq(mx_size(x, 0), 1);
      mx_release(x);
      mx_release(y);
    }
    cr_expect_eq(mx_loader_status(l), MX_OK, "%s", mx_last_error());
    mx_loader_free(l);
  }
  mx_dataset_free(ds);
}

Test(loader, per_channel_normalisation) {
  mx_dataset *ds = mx_dataset_new(1, 3, 1, 2, 10);
  const uint8_t pixels[6] = {0, 255, 51, 102, 128, 7};
  memcpy(ds->images, pixels, 6);
  ds->labels[0] = 4;
  const float mean[3] = {0.5f, 0.25f, 0.0f}, std[3] = {0.5f, 2.0f, 0.25f};
  mx_transform *normalize = mx_transform_normalize(mean, std, 3);
  mx_loader *l = mx_loader_new(ds, &(mx_loader_options){.batch_size = 4, .transform = normalize});
  mx_tensor *x, *y;
  cr_assert(mx_loader_next(l, &x, &y), "%s", mx_last_error());
  mx_shape s = mx_shape_get(x);
  cr_expect(s.ndim == 4 && s.d[0] == 1 && s.d[1] == 3 && s.d[2] == 1 && s.d[3] == 2);
  float *hx = host_x(x);
  /* (p / 255 - mean) / std: 0 -> -1, 255 -> 1, 51 -> (0.2 - 0.25) / 2, ... */
  const float expected[6] = {-1.0f, 1.0f, -0.025f, 0.075f, 128.0f / 255.0f / 0.25f, 7.0f / 255.0f / 0.25f};
  for (int i = 0; i < 6; i++) cr_expect_float_eq(hx[i], expected[i], 1e-6, "element %d: %g", i, hx[i]);
  cr_expect_eq(mx_item(y), 4.0);
  free(hx);
  mx_release(x);
  mx_release(y);
  mx_loader_free(l);
  mx_transform_free(normalize);
  mx_dataset_free(ds);
}

/* The crop and flip that sample `index` of epoch 0 draws with seed 5, as
 * mx_transform_apply documents them: words 0 and 1 of Philox block
 * (index, 0, epoch 0, stream 2) under the seed give the corner, word 2's
 * low bit the flip. */
static void documented_draw(int64_t index, int pad, int *dy, int *dx, bool *flip) {
  mx_philox_block b = mx_philox4x32_10((mx_philox_block){{(uint32_t)index, 0, 0, 2}}, 5);
  *dy = (int)(b.v[0] % (2u * pad + 1u));
  *dx = (int)(b.v[1] % (2u * pad + 1u));
  *flip = b.v[2] & 1u;
}

Test(loader, crop_and_flip_exact_pixels) {
  /* A 3x4 image (1..12) padded by 1 is 5x6; the crop's corner (dy, dx) runs over 0..2. */
  struct {
    int dy, dx;
    bool flip;
    float expected[12];
  } cases[] = {{1, 1, false, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
               {0, 0, false, {0, 0, 0, 0, 0, 1, 2, 3, 0, 5, 6, 7}},
               {2, 2, false, {6, 7, 8, 0, 10, 11, 12, 0, 0, 0, 0, 0}},
               {1, 1, true, {4, 3, 2, 1, 8, 7, 6, 5, 12, 11, 10, 9}},
               {0, 2, true, {0, 0, 0, 0, 0, 4, 3, 2, 0, 8, 7, 6}},
               {2, 0, true, {7, 6, 5, 0, 11, 10, 9, 0, 0, 0, 0, 0}}};
  mx_transform *t = mx_transform_compose((mx_transform *[]){mx_transform_random_crop(1), mx_transform_random_flip()}, 2);
  cr_assert_not_null(t, "%s", mx_last_error());
  int hits[6] = {0};
  for (int64_t index = 0; index < 300; index++) {
    int dy, dx;
    bool flip;
    documented_draw(index, 1, &dy, &dx, &flip);
    float out[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    cr_assert_eq(mx_transform_apply(t, out, 1, 3, 4, 5, 0, index), MX_OK, "%s", mx_last_error());
    for (int k = 0; k < 6; k++) {
      if (cases[k].dy != dy || cases[k].dx != dx || cases[k].flip != flip) continue;
      hits[k]++;
      for (int i = 0; i < 12; i++)
        cr_expect_eq(out[i], cases[k].expected[i], "dy %d dx %d flip %d: pixel %d is %g, expected %g", dy, dx, flip, i,
                     out[i], cases[k].expected[i]);
    }
  }
  for (int k = 0; k < 6; k++) cr_expect_gt(hits[k], 0, "case %d never drawn in 300 samples", k);
  mx_transform_free(t);
}

/* Which of the (2 pad + 1)^2 crops, each flipped or not, of a 2x3x4 image
 * with pixels 1..24 the sample out is (its index dy * 2 * span + dx * 2 +
 * flip), or -1; pad pixels are -1 (mean 0.5, std 0.5). */
static int which_crop(const float *out, int pad) {
  int span = 2 * pad + 1;
  for (int dy = 0; dy < span; dy++)
    for (int dx = 0; dx < span; dx++)
      for (int flip = 0; flip < 2; flip++) {
        bool same = true;
        for (int ch = 0; ch < 2 && same; ch++)
          for (int y = 0; y < 3 && same; y++)
            for (int x = 0; x < 4 && same; x++) {
              int sy = y + dy - pad, sx = (flip ? 3 - x : x) + dx - pad;
              int p = sy >= 0 && sy < 3 && sx >= 0 && sx < 4 ? 1 + ch * 12 + sy * 4 + sx : 0;
              same = out[ch * 12 + y * 4 + x] == ((float)p / 255.0f - 0.5f) / 0.5f;
            }
        if (same) return (dy * span + dx) * 2 + flip;
      }
  return -1;
}

Test(loader, augmentation_draws_every_crop_and_flip) {
  mx_dataset *ds = mx_dataset_new(50, 2, 3, 4, 10);
  for (int i = 0; i < 50; i++)
    for (int p = 0; p < 24; p++) ds->images[i * 24 + p] = (uint8_t)(1 + p);
  const float mean[2] = {0.5f, 0.5f}, std[2] = {0.5f, 0.5f};
  struct {
    int pad;
    bool flip;
    int variants;
  } cases[] = {{1, true, 18}, {1, false, 9}, {0, true, 2}, {2, true, 50}};
  for (size_t k = 0; k < 4; k++) {
    mx_transform *items[3];
    int count = 0;
    items[count++] = mx_transform_random_crop(cases[k].pad);
    if (cases[k].flip) items[count++] = mx_transform_random_flip();
    items[count++] = mx_transform_normalize(mean, std, 2);
    mx_transform *t = mx_transform_compose(items, count);
    cr_assert_not_null(t, "%s", mx_last_error());
    mx_loader *l = mx_loader_new(ds, &(mx_loader_options){.batch_size = 16, .seed = 9, .transform = t,
                                                          .background = true});
    cr_assert_not_null(l, "%s", mx_last_error());
    int seen[50] = {0}, distinct = 0;
    for (int epoch = 0; epoch < 10; epoch++) {
      mx_loader_reset(l, epoch);
      mx_tensor *x, *y;
      while (mx_loader_next(l, &x, &y)) {
        float *hx = host_x(x);
        for (int64_t r = 0; r < mx_size(x, 0); r++) {
          int v = which_crop(hx + 24 * r, cases[k].pad);
          cr_assert(v >= 0, "case %zu: sample %lld is no crop of the image", k, LL(r));
          cr_assert(cases[k].flip || v % 2 == 0, "case %zu: flipped without flip", k);
          distinct += seen[v]++ == 0;
        }
        free(hx);
        mx_release(x);
        mx_release(y);
      }
    }
    cr_expect_eq(distinct, cases[k].variants, "case %zu: %d of %d crops seen in 500 draws", k, distinct,
                 cases[k].variants);
    mx_loader_free(l);
    mx_transform_free(t);
  }
  mx_dataset_free(ds);
}

/* Every byte of every batch of both loaders, over epochs 0..2, then epoch 7 after a reset mid-epoch. */
static void expect_same_batches(mx_loader *a, mx_loader *b) {
  int64_t epochs[4] = {0, 1, 2, 7};
  for (int e = 0; e < 4; e++) {
    mx_loader_reset(a, epochs[e]);
    mx_loader_reset(b, epochs[e]);
    mx_tensor *xa, *ya, *xb, *yb;
    int64_t batches = 0;
    for (;;) {
      bool more_a = mx_loader_next(a, &xa, &ya), more_b = mx_loader_next(b, &xb, &yb);
      cr_assert_eq(more_a, more_b);
      if (!more_a) break;
      batches++;
      cr_assert_eq(mx_numel(xa), mx_numel(xb));
      float *ha = host_x(xa), *hb = host_x(xb);
      int64_t *la = host_y(ya), *lb = host_y(yb);
      cr_expect_arr_eq(ha, hb, (size_t)mx_numel(xa) * sizeof *ha, "epoch %lld batch %lld", LL(epochs[e]),
                       LL(batches));
      cr_expect_arr_eq(la, lb, (size_t)mx_numel(ya) * sizeof *la);
      free(ha), free(hb), free(la), free(lb);
      mx_release(xa), mx_release(ya), mx_release(xb), mx_release(yb);
      if (e == 2 && batches == 2) { /* mid-epoch: the worker may hold ready batches */
        mx_loader_reset(a, 7);
        mx_loader_reset(b, 7);
        e++;
        batches = 0;
      }
    }
    cr_expect_eq(batches, mx_loader_batches(a));
  }
}

Test(loader, background_thread_matches_synchronous) {
  mx_dataset *ds = mx_dataset_synthetic(45, 3, 8, 8, 11);
  cr_assert_not_null(ds, "%s", mx_last_error());
  const float mean[3] = {0.4f, 0.5f, 0.6f}, std[3] = {0.2f, 0.25f, 0.3f};
  mx_transform *t = mx_transform_compose(
      (mx_transform *[]){mx_transform_random_crop(2), mx_transform_random_flip(), mx_transform_normalize(mean, std, 3)},
      3);
  for (int drop_last = 0; drop_last < 2; drop_last++) {
    mx_loader_options o = {.batch_size = 8, .shuffle = true, .drop_last = drop_last, .seed = 3, .transform = t};
    mx_loader *sync = mx_loader_new(ds, &o);
    o.background = true;
    mx_loader *threaded = mx_loader_new(ds, &o);
    cr_assert(sync && threaded, "%s", mx_last_error());
    expect_same_batches(sync, threaded);
    mx_loader_free(sync);
    mx_loader_free(threaded);
  }
  mx_transform_free(t);
  mx_dataset_free(ds);
}

Test(loader, batches_belong_to_the_callers_scope) {
  mx_dataset *ds = indexed(20);
  mx_loader *l = mx_loader_new(ds, &(mx_loader_options){.batch_size = 4, .background = true});
  int64_t before = mx_memory_stats_get(MX_CPU).live_tensors;
  mx_scope *s = mx_scope_begin();
  mx_tensor *x, *y;
  cr_assert(mx_loader_next(l, &x, &y));
  cr_assert(mx_loader_next(l, &x, &y));
  cr_expect_eq(mx_memory_stats_get(MX_CPU).live_tensors, before + 4);
  mx_scope_end(s); /* releases both batches */
  cr_expect_eq(mx_memory_stats_get(MX_CPU).live_tensors, before);
  cr_assert(mx_loader_next(l, &x, &y)); /* outside a scope: the caller's */
  mx_loader_free(l);                    /* the batch outlives the loader */
  float *hx = host_x(x);
  cr_expect_eq(index_of(hx, 0), 8);
  int64_t *hy = host_y(y);
  cr_expect_eq(hy[3], 1);
  free(hx);
  free(hy);
  mx_release(x);
  mx_release(y);
  cr_expect_eq(mx_memory_stats_get(MX_CPU).live_tensors, before);
  mx_dataset_free(ds);
}

Test(loader, stops_cleanly_at_any_point) {
  mx_dataset *ds = mx_dataset_synthetic(100, 3, 32, 32, 1);
  mx_transform *t = mx_transform_compose((mx_transform *[]){mx_transform_random_crop(4), mx_transform_random_flip()}, 2);
  mx_loader_options o = {.batch_size = 10, .shuffle = true, .transform = t, .background = true};
  mx_loader_free(mx_loader_new(ds, &o)); /* at once, while the worker fills its first batches */
  for (int taken = 0; taken < 4; taken++) {
    mx_loader *l = mx_loader_new(ds, &o);
    for (int r = 0; r < 5; r++) mx_loader_reset(l, r); /* resets while the worker runs */
    mx_tensor *x, *y;
    for (int i = 0; i < taken; i++) {
      cr_assert(mx_loader_next(l, &x, &y));
      mx_release(x);
      mx_release(y);
    }
    mx_loader_free(l);
  }
  mx_transform_free(t);
  mx_dataset_free(ds);
}

Test(loader, errors) {
  mx_dataset *ds = indexed(10);
  mx_loader_options o = {.batch_size = 4};
  EXPECT_ERROR(mx_loader_new(NULL, &o), "mx_loader_new: argument 'dataset' is NULL");
  EXPECT_ERROR(mx_loader_new(ds, NULL), "mx_loader_new: argument 'opts' is NULL");
  EXPECT_ERROR(mx_loader_new(ds, &(mx_loader_options){0}), "mx_loader_new: batch_size must be positive, got 0");
  mx_transform *crop3 = mx_transform_random_crop(3);
  EXPECT_ERROR(mx_loader_new(ds, &(mx_loader_options){.batch_size = 1, .transform = crop3}),
               "mx_loader_new: the random crop's padding must be in 0..2 for samples of 1x2x2, got 3");
  mx_transform_free(crop3);
  const float zero = 0.0f, nan = NAN, one = 1.0f, three[3] = {0, 0, 0}, ones[3] = {1, 1, 1};
  mx_transform *rgb = mx_transform_normalize(three, ones, 3);
  EXPECT_ERROR(mx_loader_new(ds, &(mx_loader_options){.batch_size = 1, .transform = rgb}),
               "mx_loader_new: the normalisation has 3 channels, the samples (1x2x2) 1");
  mx_transform_free(rgb);
  EXPECT_ERROR(mx_transform_random_crop(-1), "mx_transform_random_crop: padding must be at least 0, got -1");
  EXPECT_ERROR(mx_transform_normalize(&one, &zero, 1), "mx_transform_normalize: std[0] must be positive and finite, got 0");
  EXPECT_ERROR(mx_transform_normalize(&nan, &one, 1), "mx_transform_normalize: mean[0] must be finite, got nan");
  EXPECT_ERROR(mx_loader_new(ds, &(mx_loader_options){.batch_size = 1, .shards = 3, .shard = 3}),
               "mx_loader_new: shard 3 of 3 shards does not exist");
  EXPECT_ERROR(mx_loader_new(ds, &(mx_loader_options){.batch_size = 1, .shards = -2}),
               "mx_loader_new: shard 0 of -2 shards does not exist");
  mx_dataset empty = {0};
  EXPECT_ERROR(mx_loader_new(&empty, &o), "mx_loader_new: the dataset is empty (0 samples of 0x0x0)");
  mx_loader *l = mx_loader_new(ds, &o);
  mx_tensor *x;
  EXPECT_ERROR(mx_loader_reset(l, -1) == MX_OK, "mx_loader_reset: epoch must be in 0..4294967295, got -1");
  EXPECT_ERROR(mx_loader_reset(NULL, 0) == MX_OK, "mx_loader_reset: argument 'loader' is NULL");
  EXPECT_ERROR(mx_loader_next(l, &x, NULL), "mx_loader_next: argument 'y' is NULL");
  cr_expect_null(x);
  EXPECT_ERROR(mx_loader_next(NULL, &x, &x), "mx_loader_next: argument 'loader' is NULL");
  cr_expect_eq(mx_loader_status(NULL), MX_NULL_INPUT);
  cr_expect_eq(mx_loader_batches(NULL), 0);
  cr_expect_null(mx_loader_order(NULL));
  mx_loader_free(l);
  mx_loader_free(NULL);
  mx_dataset_free(ds);
}

/* --- synthetic data -------------------------------------------------------------- */

Test(synthetic, deterministic_and_learnable) {
  int shapes[2][3] = {{1, 28, 28}, {3, 32, 32}};
  for (int k = 0; k < 2; k++) {
    int c = shapes[k][0], h = shapes[k][1], w = shapes[k][2], sample = c * h * w;
    mx_dataset *a = mx_dataset_synthetic(200, c, h, w, 1), *b = mx_dataset_synthetic(200, c, h, w, 1);
    mx_dataset *other = mx_dataset_synthetic(200, c, h, w, 2);
    cr_assert(a && b && other, "%s", mx_last_error());
    cr_expect(a->c == c && a->h == h && a->w == w && a->n == 200 && a->classes == 10);
    cr_expect_arr_eq(a->images, b->images, (size_t)200 * sample);
    cr_expect_arr_eq(a->labels, b->labels, 200);
    cr_expect_arr_neq(a->images, other->images, (size_t)200 * sample);
    /* learnable: class means from seed 1 classify seed 2's samples (nearest mean) */
    double *means = calloc((size_t)10 * sample, sizeof *means);
    int count[10] = {0};
    for (int i = 0; i < 200; i++) {
      cr_assert_lt(a->labels[i], 10);
      count[a->labels[i]]++;
      for (int p = 0; p < sample; p++) means[a->labels[i] * sample + p] += a->images[i * sample + p];
    }
    for (int j = 0; j < 10; j++) {
      cr_expect_gt(count[j], 8, "class %d has %d samples", j, count[j]);
      for (int p = 0; p < sample; p++) means[j * sample + p] /= count[j] ? count[j] : 1;
    }
    int right = 0;
    for (int i = 0; i < 200; i++) {
      int best = -1;
      double best_d = INFINITY;
      for (int j = 0; j < 10; j++) {
        double d = 0;
        for (int p = 0; p < sample; p++) {
          double e = other->images[i * sample + p] - means[j * sample + p];
          d += e * e;
        }
        if (d < best_d) best_d = d, best = j;
      }
      right += best == other->labels[i];
    }
    cr_expect_geq(right, 196, "nearest class mean: %d of 200 right", right);
    free(means);
    mx_dataset_free(a);
    mx_dataset_free(b);
    mx_dataset_free(other);
  }
}

Test(synthetic, bad_sizes) {
  EXPECT_ERROR(mx_dataset_synthetic(0, 1, 28, 28, 0),
               "mx_dataset_synthetic: 0 samples of 1x28x28 in 10 classes: every size must be positive (classes at "
               "most 256)");
  EXPECT_ERROR(mx_dataset_new(10, 3, 32, 32, 300),
               "mx_dataset_new: 10 samples of 3x32x32 in 300 classes: every size must be positive (classes at most "
               "256)");
  EXPECT_ERROR(mx_dataset_new(100000000, 3, 1000, 1000, 10),
               "mx_dataset_new: 100000000 samples of 3x1000x1000 are too many bytes");
}
