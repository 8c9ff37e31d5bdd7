/* kernels/cpu/channel_blocks.c: 16-bit tensors into and out of oneDNN's
 * blocks of 16 channels, against the layout's definition, for planes of
 * every width class: shorter than a tile, a multiple of 8 and not, longer
 * than the float32 forms' 256-column tile, and the CNN's 28 x 28 and
 * 14 x 14, on one and two threads. The float32 forms, for bfloat16 and
 * float16: the 16-bit values widened exactly into float32 blocks, and
 * float32 blocks (ties, NaN, infinities, subnormals among them) rounded by
 * kernels/math.h's mx_f32_to_bf16 and mx_f32_to_f16. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h"
#include "kernels/cpu/channel_blocks.h"
#include "kernels/math.h"

/* Element (b, ch, j) of an (n, c, s) tensor in blocks of 16 channels. */
static size_t blocked_at(int64_t b, int64_t ch, int64_t j, int64_t c, int64_t s) {
  return (size_t)(((b * (c / 16) + ch / 16) * s + j) * 16 + ch % 16);
}

/* The float32 forms: plain's values of dtype (16 bits) into float32 blocks, and float32 blocks of drawn bits back. */
static void check_f32_blocks(const uint16_t *plain, mx_dtype dtype, int64_t n, int64_t c, int64_t s) {
  size_t count = (size_t)(n * c * s);
  float *wide = malloc(count * sizeof *wide);
  uint16_t *narrow = malloc(count * sizeof *narrow);
  cr_assert(wide && narrow);
  mx__to_channel_blocks16_f32(wide, plain, dtype, n, c, s);
  int64_t wrong = 0;
  for (int64_t b = 0; b < n; b++)
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t j = 0; j < s; j++) {
        uint16_t value = plain[(b * c + ch) * s + j];
        float widened = dtype == MX_F16 ? mx_f16_to_f32(value) : mx_bf16_to_f32(value);
        uint32_t got, want;
        memcpy(&got, &wide[blocked_at(b, ch, j, c, s)], 4);
        memcpy(&want, &widened, 4);
        wrong += got != want;
      }
  const char *name = dtype == MX_F16 ? "float16" : "bfloat16";
  cr_expect_eq(wrong, 0, "%s to float32 blocks (%lld, %lld, %lld): %lld values wrong", name, (long long)n,
               (long long)c, (long long)s, (long long)wrong);
  /* float32 bits of every kind: the low halves drawn (ties 0x8000 among them), the high halves bfloat16's */
  for (size_t i = 0; i < count; i++) {
    uint32_t bits = (uint32_t)plain[i] << 16 | (i % 7 == 0 ? 0x8000u : (uint32_t)(i * 40503u) & 0xffffu);
    memcpy(&wide[i], &bits, 4);
  }
  mx__from_channel_blocks16_f32(narrow, wide, dtype, n, c, s);
  wrong = 0;
  for (int64_t b = 0; b < n; b++)
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t j = 0; j < s; j++) {
        float from = wide[blocked_at(b, ch, j, c, s)];
        uint16_t want = dtype == MX_F16 ? mx_f32_to_f16(from) : mx_f32_to_bf16(from);
        uint16_t got = narrow[(b * c + ch) * s + j];
        wrong += got != want;
      }
  cr_expect_eq(wrong, 0, "%s from float32 blocks (%lld, %lld, %lld): %lld values wrong", name, (long long)n,
               (long long)c, (long long)s, (long long)wrong);
  free(wide), free(narrow);
}

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
        uint16_t want = plain[(b * c + ch) * s + j], got = blocked[blocked_at(b, ch, j, c, s)];
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
  check_f32_blocks(plain, MX_BF16, n, c, s);
  check_f32_blocks(plain, MX_F16, n, c, s);
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
