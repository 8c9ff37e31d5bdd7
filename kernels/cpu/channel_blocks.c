/* Plain <-> 16-channel-blocked layouts for 16-bit tensors (channel_blocks.h).
 * Each block of 16 channels is a 16 x S matrix to transpose to S x 16: in
 * 8 x 8 tiles of SSE2 unpacks (x86-64's baseline), a scalar loop for the
 * last S % 8 columns and on other CPUs. Threads split the blocks. The
 * float32 blocks of bfloat16 and float16 go through a 16-bit tile of TILE
 * columns, converted by the convert kernel's loops (the same bits) while in
 * cache. */
#include "kernels/cpu/channel_blocks.h"

#include "kernels/cpu/convert.h"
#include "kernels/cpu/parallel.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <emmintrin.h>
#define MX__SSE2 1

/* r[j] = column j of the 8 x 8 tile a[0..7] (each a row of 8 values). */
static inline __attribute__((always_inline)) void transpose8x8(const __m128i a[8], __m128i r[8]) {
  __m128i t[8], u[8];
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm_unpacklo_epi16(a[2 * i], a[2 * i + 1]);
    t[2 * i + 1] = _mm_unpackhi_epi16(a[2 * i], a[2 * i + 1]);
  }
  for (int i = 0; i < 2; i++) { /* rows 4i..4i+3: columns 0-1, 2-3, 4-5, 6-7 */
    u[4 * i] = _mm_unpacklo_epi32(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm_unpackhi_epi32(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm_unpacklo_epi32(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm_unpackhi_epi32(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; j++) {
    r[2 * j] = _mm_unpacklo_epi64(u[j], u[4 + j]);
    r[2 * j + 1] = _mm_unpackhi_epi64(u[j], u[4 + j]);
  }
}
#endif

/* s columns of one block of 16 channels: plain holds 16 rows of them, ld
 * values apart, blocked s rows of 16. to_blocks reads plain and from_blocks
 * writes it; the two mirror each other, kept apart so each has its restrict
 * pointers and no branch. */
static void to_blocks(uint16_t *restrict blocked, const uint16_t *restrict plain, int64_t ld, int64_t s) {
  int64_t j = 0;
#ifdef MX__SSE2
  for (; j + 8 <= s; j += 8)
    for (int half = 0; half < 2; half++) {
      __m128i a[8], r[8];
      for (int i = 0; i < 8; i++) a[i] = _mm_loadu_si128((const __m128i *)(plain + (8 * half + i) * ld + j));
      transpose8x8(a, r);
      for (int i = 0; i < 8; i++) _mm_storeu_si128((__m128i *)(blocked + (j + i) * 16 + 8 * half), r[i]);
    }
#endif
  for (; j < s; j++)
    for (int c = 0; c < 16; c++) blocked[j * 16 + c] = plain[c * ld + j];
}

static void from_blocks(uint16_t *restrict plain, const uint16_t *restrict blocked, int64_t ld, int64_t s) {
  int64_t j = 0;
#ifdef MX__SSE2
  for (; j + 8 <= s; j += 8)
    for (int half = 0; half < 2; half++) {
      __m128i a[8], r[8];
      for (int i = 0; i < 8; i++) a[i] = _mm_loadu_si128((const __m128i *)(blocked + (j + i) * 16 + 8 * half));
      transpose8x8(a, r);
      for (int i = 0; i < 8; i++) _mm_storeu_si128((__m128i *)(plain + (8 * half + i) * ld + j), r[i]);
    }
#endif
  for (; j < s; j++)
    for (int c = 0; c < 16; c++) plain[c * ld + j] = blocked[j * 16 + c];
}

enum { TILE = 256 }; /* columns converted at a time: 8 KiB of 16-bit values */

/* One block of 16 channels between 16 rows of s 16-bit values (f16: float16, else bfloat16) and s float32 rows of
 * 16, a tile at a time. */
static void to_blocks_f32(float *blocked, const uint16_t *plain, int64_t s, bool f16) {
  uint16_t tile[TILE * 16];
  for (int64_t j = 0; j < s; j += TILE) {
    int64_t cols = s - j < TILE ? s - j : TILE;
    to_blocks(tile, plain + j, s, cols);
    if (f16) mx__f16_to_f32_n(tile, blocked + j * 16, cols * 16);
    else mx__bf16_to_f32_n(tile, blocked + j * 16, cols * 16);
  }
}

static void from_blocks_f32(uint16_t *plain, const float *blocked, int64_t s, bool f16) {
  uint16_t tile[TILE * 16];
  for (int64_t j = 0; j < s; j += TILE) {
    int64_t cols = s - j < TILE ? s - j : TILE;
    if (f16) mx__f32_to_f16_n(blocked + j * 16, tile, cols * 16);
    else mx__f32_to_bf16_n(blocked + j * 16, tile, cols * 16);
    from_blocks(plain + j, tile, s, cols);
  }
}

/* Block b of either layout starts at b * 16 * s: (n, c / 16) in both. */
void mx__to_channel_blocks16(uint16_t *blocked, const uint16_t *plain, int64_t n, int64_t c, int64_t s) {
  MX_PARALLEL_FOR(n * c * s)
  for (int64_t b = 0; b < n * (c / 16); b++) to_blocks(blocked + b * 16 * s, plain + b * 16 * s, s, s);
}

void mx__from_channel_blocks16(uint16_t *plain, const uint16_t *blocked, int64_t n, int64_t c, int64_t s) {
  MX_PARALLEL_FOR(n * c * s)
  for (int64_t b = 0; b < n * (c / 16); b++) from_blocks(plain + b * 16 * s, blocked + b * 16 * s, s, s);
}

void mx__to_channel_blocks16_f32(float *blocked, const uint16_t *plain, mx_dtype dtype, int64_t n, int64_t c,
                                 int64_t s) {
  bool f16 = dtype == MX_F16;
  MX_PARALLEL_FOR(n * c * s)
  for (int64_t b = 0; b < n * (c / 16); b++) to_blocks_f32(blocked + b * 16 * s, plain + b * 16 * s, s, f16);
}

void mx__from_channel_blocks16_f32(uint16_t *plain, const float *blocked, mx_dtype dtype, int64_t n, int64_t c,
                                   int64_t s) {
  bool f16 = dtype == MX_F16;
  MX_PARALLEL_FOR(n * c * s)
  for (int64_t b = 0; b < n * (c / 16); b++) from_blocks_f32(plain + b * 16 * s, blocked + b * 16 * s, s, f16);
}
