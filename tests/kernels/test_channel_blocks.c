/* kernels/cpu/channel_blocks.c: 16-bit tensors into and out of oneDNN's
 * blocks of 16 channels, against the layout's definition, for planes of
 * every width class: shorter than a tile, a multiple of 8 and not, and the
 * CNN's 28 x 28 and 14 x 14, on one and two threads. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/base.h"
#include "kernels/cpu/channel_blocks.h"

static void check_round_trip(int64_t n, int64_t c, int64_t s) {
  size_t count = (size_t)(n * c * s);
  uint16_t *plain = malloc(count * sizeof *plain), *blocked = malloc(count * sizeof *blocked),
           *back = malloc(count * sizeof *back);
  cr_assert(plain && blocked && back);
  for (size_t i = 0; i < count; i++) plain[i] = (uint16_t)(i * 2654435761u >> 11);
  mx__to_channel_blocks16(blocked, plain, n, c, s);
  int64_t wrong = 0;
  for (int64_t b = 0; b < n; b++)
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t j = 0; j < s; j++) {
        uint16_t want = plain[(b * c + ch) * s + j], got = blocked[((b * (c / 16) + ch / 16) * s + j) * 16 + ch % 16];
        if (got != want && wrong++ < 5)
          cr_expect_eq(got, want, "to blocks, (n %lld, c %lld, s %lld) of (%lld, %lld, %lld): %u, want %u", (long long)b,
                       (long long)ch, (long long)j, (long long)n, (long long)c, (long long)s, got, want);
      }
  cr_expect_eq(wrong, 0, "to blocks (%lld, %lld, %lld): %lld values wrong", (long long)n, (long long)c, (long long)s,
               (long long)wrong);
  mx__from_channel_blocks16(back, blocked, n, c, s);
  wrong = 0;
  for (size_t i = 0; i < count; i++)
    if (back[i] != plain[i] && wrong++ < 5)
      cr_expect_eq(back[i], plain[i], "from blocks (%lld, %lld, %lld), element %zu: %u, want %u", (long long)n,
                   (long long)c, (long long)s, i, back[i], plain[i]);
  cr_expect_eq(wrong, 0, "from blocks (%lld, %lld, %lld): %lld values wrong", (long long)n, (long long)c, (long long)s,
               (long long)wrong);
  free(plain), free(blocked), free(back);
}

static void check_widths(void) {
  const int64_t widths[] = {1, 5, 8, 13, 196, 197, 784, 785, 1030};
  for (size_t w = 0; w < sizeof widths / sizeof *widths; w++) {
    check_round_trip(1, 16, widths[w]);
    check_round_trip(3, 32, widths[w]);
  }
  check_round_trip(9, 64, 196);
}

Test(channel_blocks, every_width_on_one_thread) {
  mx_set_num_threads(1);
  check_widths();
}

Test(channel_blocks, every_width_on_two_threads) {
  mx_set_num_threads(2);
  check_widths();
}
