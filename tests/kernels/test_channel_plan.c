/* kernels/channel_plan.h: where batch norm's CUDA kernels find each
 * channel's values, and how channel_sums cuts them into runs. The GPU
 * suite checks the kernels' results; these checks run everywhere. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/channel_plan.h"
#include "shape_view.h"

static mx_kview view(int ndim, const int64_t *shape) { return shape_view(MX_F32, ndim, shape); }

/* Walking every run of every channel, as the partials kernel does, visits
 * each element exactly once, and each in its own channel. */
static void expect_runs_cover(int ndim, const int64_t *shape, int64_t target_blocks, int64_t min_segment) {
  mx_kview v = view(ndim, shape);
  mx_channel_plan p = mx_channel_plan_split(mx_channel_plan_of(&v), target_blocks, min_segment);
  int64_t numel = p.channels * p.count;
  unsigned char *seen = calloc((size_t)(numel ? numel : 1), 1);
  cr_assert_not_null(seen);
  for (int64_t r = 0; r < p.channels * p.segments; r++) {
    int64_t c = r / p.segments, first = r % p.segments * p.segment;
    int64_t end = first + p.segment < p.count ? first + p.segment : p.count;
    cr_assert_lt(first, end, "run %lld is empty", (long long)r);
    for (int64_t j = first; j < end; j++) {
      int64_t i = mx_channel_offset(&p, c, j);
      cr_assert(i >= 0 && i < numel, "channel %lld, value %lld: offset %lld outside [0, %lld)", (long long)c,
                (long long)j, (long long)i, (long long)numel);
      cr_assert_eq(seen[i]++, 0, "offset %lld visited twice", (long long)i);
      cr_assert_eq(mx_channel_of(&p, i), c, "offset %lld: channel %lld, expected %lld", (long long)i,
                   (long long)mx_channel_of(&p, i), (long long)c);
    }
  }
  for (int64_t i = 0; i < numel; i++) cr_assert_eq(seen[i], 1, "offset %lld never visited", (long long)i);
  free(seen);
}

Test(channel_plan, runs_cover_every_element_once) {
  expect_runs_cover(4, (int64_t[]){3, 5, 4, 7}, 64, 8); /* 84 a channel: 9 runs of 9, the last of 3 */
  expect_runs_cover(4, (int64_t[]){3, 5, 4, 7}, 1, 8);  /* one run per channel */
  expect_runs_cover(2, (int64_t[]){9, 6}, 64, 2);       /* no dims after the channels: planes of one */
  expect_runs_cover(3, (int64_t[]){1, 2, 1000}, 10, 64);
  expect_runs_cover(5, (int64_t[]){2, 3, 2, 3, 5}, 1000, 1); /* a run per value */
}

/* (2, 3, 4, 5): channel 1's values are items 0 and 1's planes of 20. */
Test(channel_plan, layout_of_an_nchw_tensor) {
  mx_kview v = view(4, (int64_t[]){2, 3, 4, 5});
  mx_channel_plan p = mx_channel_plan_of(&v);
  cr_expect_eq(p.channels, 3);
  cr_expect_eq(p.plane, 20);
  cr_expect_eq(p.count, 40);
  cr_expect_eq(p.segments, 1);
  cr_expect_eq(p.segment, 40);
  cr_expect_eq(mx_channel_offset(&p, 1, 0), 20);
  cr_expect_eq(mx_channel_offset(&p, 1, 19), 39);
  cr_expect_eq(mx_channel_offset(&p, 1, 20), 80); /* item 1's plane: (1 * 3 + 1) * 20 */
  cr_expect_eq(mx_channel_of(&p, 79), 0);
  cr_expect_eq(mx_channel_of(&p, 119), 2);
}

/* The runs: enough to fill target_blocks, none under min_segment, and no
 * empty run at the end (the last holds what is left). */
Test(channel_plan, runs_fill_the_target_without_being_short) {
  mx_kview v = view(4, (int64_t[]){64, 64, 32, 32}); /* ResNet-9's first batch norm: 65536 a channel */
  mx_channel_plan p = mx_channel_plan_split(mx_channel_plan_of(&v), 1056, 2048);
  cr_expect_eq(p.segments, 17); /* 1056 / 64 channels, rounded up */
  cr_expect_eq(p.segment, 3856);
  p = mx_channel_plan_split(mx_channel_plan_of(&v), 1056, 32768);
  cr_expect_eq(p.segments, 2, "65536 values in runs of at least 32768");
  cr_expect_eq(p.segment, 32768);
  v = view(4, (int64_t[]){64, 512, 4, 4}); /* more channels than blocks wanted: one run each */
  p = mx_channel_plan_split(mx_channel_plan_of(&v), 1056, 2048);
  cr_expect_eq(p.segments, 1);
  cr_expect_eq(p.segment, 1024);
  v = view(2, (int64_t[]){10, 3}); /* 10 values a channel, 4 runs wanted: runs of 3, the last of 1 */
  p = mx_channel_plan_split(mx_channel_plan_of(&v), 12, 1);
  cr_expect_eq(p.segments, 4);
  cr_expect_eq(p.segment, 3);
  v = view(2, (int64_t[]){9, 3}); /* 9 values, 4 wanted: runs of 3 make 3, not a fourth empty one */
  p = mx_channel_plan_split(mx_channel_plan_of(&v), 12, 1);
  cr_expect_eq(p.segments, 3);
  cr_expect_eq(p.segment, 3);
}

/* An empty batch: one empty run per channel, which the kernels read as
 * sums of zero. */
Test(channel_plan, an_empty_batch_has_one_empty_run) {
  mx_kview v = view(3, (int64_t[]){0, 4, 5});
  mx_channel_plan p = mx_channel_plan_split(mx_channel_plan_of(&v), 1056, 2048);
  cr_expect_eq(p.channels, 4);
  cr_expect_eq(p.count, 0);
  cr_expect_eq(p.segments, 1);
  cr_expect_eq(p.segment, 0);
}

/* Offsets past 2^32 are exact: (3, 2, 2^31 + 5). */
Test(channel_plan, offsets_past_four_billion) {
  int64_t plane = ((int64_t)1 << 31) + 5;
  mx_kview v = view(3, (int64_t[]){3, 2, plane});
  mx_channel_plan p = mx_channel_plan_split(mx_channel_plan_of(&v), 8, 1 << 20);
  cr_expect_eq(p.count, 3 * plane);
  cr_expect_eq(mx_channel_offset(&p, 1, plane + 7), 3 * plane + 7);
  cr_expect_eq(mx_channel_offset(&p, 1, 3 * plane - 1), 6 * plane - 1);
  cr_expect_eq(mx_channel_of(&p, 4 * plane + 9), 0); /* item 2, channel 0 */
  cr_expect_eq(mx_channel_of(&p, 6 * plane - 1), 1);
  cr_expect_eq(p.segments * p.segment >= p.count, 1);
}

/* A walk from every start with every step gives mx_channel_offset's offsets: steps shorter than a plane, as long,
 * and crossing several planes at once, from values anywhere in a plane, planes of one included. */
Test(channel_plan, a_walk_gives_each_values_offset) {
  static const int64_t shapes[][3] = {{5, 3, 7}, {9, 4, 1}, {3, 2, 256}, {40, 1, 3}};
  static const int64_t steps[] = {1, 2, 6, 7, 8, 13, 256, 257};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    mx_kview v = view(3, shapes[s]);
    mx_channel_plan p = mx_channel_plan_of(&v);
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++)
      for (int64_t c = 0; c < p.channels; c++)
        for (int64_t from = 0; from < p.plane + 2 && from < p.count; from++) {
          mx_channel_walk w = mx_channel_walk_of(&p, c, from, steps[k]);
          for (int64_t j = from; j < p.count; j += steps[k], mx_channel_walk_next(&w))
            cr_assert_eq(w.offset, mx_channel_offset(&p, c, j),
                         "shape (%lld, %lld, %lld), channel %lld, step %lld from %lld: value %lld at %lld, not %lld",
                         (long long)shapes[s][0], (long long)shapes[s][1], (long long)shapes[s][2], (long long)c,
                         (long long)steps[k], (long long)from, (long long)j, (long long)w.offset,
                         (long long)mx_channel_offset(&p, c, j));
        }
  }
}
