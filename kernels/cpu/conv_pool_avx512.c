/* The fused convolution-pooling op's nChw16c loops in AVX-512 (see conv_pool_avx512.h). A pixel's 16 channels are
 * one vector, so a 2x2 window is four whole loads and pool_avx512.c's search on masks; the plain NCHW side runs
 * along the pixels, so 16 pixels' vectors are transposed as a 16x16 tile of 32-bit lanes (a 16-bit value and its
 * offset share a lane, so that takes one transpose, float32 two).
 *
 * A channel's outputs run 16 at a time across its rows (a vector may hold the end of one row and the start of the
 * next), so every vector but a channel's last is whole: the demo CNN's rows are 14 and 7 outputs, and a vector a row
 * left 2 and 9 of its 16 lanes idle. As in pool_avx512.c, loads with a partial mask are slow on this project's AMD
 * EPYC: the backward loads whole vectors wherever the tensor has room, so only its end takes masks. */
#include "kernels/cpu/conv_pool_avx512.h"

#ifdef MX__POOL_AVX512
#include <immintrin.h>

#define WIDE __attribute__((target("avx512f,avx512bw,avx512vl")))
#define WIDE_INLINE WIDE static inline __attribute__((always_inline))

/* The first n (clamped to 0..16) lanes. */
WIDE_INLINE __mmask16 first16(int64_t n) {
  return n <= 0 ? 0 : n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

/* Rows become columns: lane j of v[i] goes to lane i of v[j]. */
WIDE_INLINE void transpose16(__m512i v[16]) {
  __m512 t[16], r[16];
  for (int i = 0; i < 8; i++) { /* t[2i], t[2i + 1]: rows 2i and 2i + 1 interleaved, by pairs of columns */
    t[2 * i] = _mm512_unpacklo_ps(_mm512_castsi512_ps(v[2 * i]), _mm512_castsi512_ps(v[2 * i + 1]));
    t[2 * i + 1] = _mm512_unpackhi_ps(_mm512_castsi512_ps(v[2 * i]), _mm512_castsi512_ps(v[2 * i + 1]));
  }
  for (int i = 0; i < 4; i++) { /* r[4i + j]'s 128-bit lane k: column 4k + j of rows 4i .. 4i + 3 */
    __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int j = 0; j < 4; j++) { /* column 4k + j: lane k of r[j], r[4 + j], r[8 + j], r[12 + j] */
    __m512 a02 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88), a13 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
    __m512 b02 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88), b13 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
    v[j] = _mm512_castps_si512(_mm512_shuffle_f32x4(a02, b02, 0x88));
    v[4 + j] = _mm512_castps_si512(_mm512_shuffle_f32x4(a13, b13, 0x88));
    v[8 + j] = _mm512_castps_si512(_mm512_shuffle_f32x4(a02, b02, 0xdd));
    v[12 + j] = _mm512_castps_si512(_mm512_shuffle_f32x4(a13, b13, 0xdd));
  }
}

/* Asks for the bytes from address from + skip on into L1, a cache line at a time, ahead of their use. The plain NCHW
 * side of a call is 16 channels' short rows, 16 streams too many and too short for the hardware's prefetchers, so
 * each iteration asks for its share of the next call's (the next block's channels follow this block's): on this
 * project's Intel Xeon, the forward's share of the float32 CNN's step fell by 28%, the backward's by up to a tenth
 * (bench/NOTES.md, round 40). A prefetch never faults, so the last block's, past the tensor's end, are harmless;
 * the address is an integer's, as no pointer may point there. */
WIDE_INLINE void prefetch(const void *from, int64_t skip, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64)
    _mm_prefetch((const char *)((uintptr_t)from + (uintptr_t)(skip + b)), _MM_HINT_T0);
}

/* mx__pool_relu_bits: a negative lane becomes +0; -0 and NaN stay. */
WIDE_INLINE __m512 relu(__m512 v) {
  return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_setzero_ps());
}

/* MX__MAX_STEP across 16 lanes: v replaces best where it is larger or NaN; where takes r there. */
WIDE_INLINE __m512 max_step(__m512 best, __m512 v, __m512i *where, int r) {
  __mmask16 take = _mm512_cmp_ps_mask(best, v, _CMP_LT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  *where = _mm512_mask_mov_epi32(*where, take, _mm512_set1_epi32(r));
  return _mm512_mask_mov_ps(best, take, v);
}

/* max_pool_relu's search over the window a b / c d, its offsets (0 to 3) in where's 32-bit lanes. */
WIDE_INLINE __m512 search(__m512 a, __m512 b, __m512 c, __m512 d, __m512i *where) {
  *where = _mm512_setzero_si512();
  __m512 best = max_step(relu(a), relu(b), where, 1);
  best = max_step(best, relu(c), where, 2);
  return max_step(best, relu(d), where, 3);
}

/* 16 bfloat16 values as float32. */
WIDE_INLINE __m512 load_bf16(const uint16_t *at) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)at)), 16));
}

/* 16 float32 values rounded to bfloat16 (mx__bf16_nearest: to nearest even, a NaN made quiet), as float32. */
WIDE_INLINE __m512 round_bf16(__m512 v) {
  __m512i x = _mm512_castps_si512(v), odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
  rounded = _mm512_mask_or_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), x, _mm512_set1_epi32(0x400000));
  return _mm512_castsi512_ps(_mm512_and_si512(rounded, _mm512_set1_epi32((int)0xffff0000u)));
}

/* 16 float32 values rounded to float16 (F16C's vcvtps2ph, mx__f32_to_f16_n's bits), as float32. */
WIDE_INLINE __m512 round_f16(__m512 v) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* 16 16-bit values (f16: float16, else bfloat16) as float32, all loaded (whole) or the lanes of k. */
WIDE_INLINE __m512 load_half_masked(const uint16_t *at, bool whole, __mmask16 k, bool f16) {
  __m256i bits = whole ? _mm256_loadu_si256((const __m256i *)at) : _mm256_maskz_loadu_epi16(k, at);
  return f16 ? _mm512_cvtph_ps(bits) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

/* mx__pool_bf16_store of lanes holding bfloat16 values, in each 32-bit lane's low half. */
WIDE_INLINE __m512i bf16_store(__m512 v) {
  __m512i bits = _mm512_srli_epi32(_mm512_castps_si512(v), 16);
  return _mm512_mask_or_epi32(bits, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), bits, _mm512_set1_epi32(0x40));
}

/* float16 values of float32 lanes (exact ones: rounded before) in each 32-bit lane's low half, as
 * mx__f32_to_f16_n stores them. */
WIDE_INLINE __m512i f16_store(__m512 v) {
  return _mm512_cvtepu16_epi32(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* mx__pool_bf16_plus_zero (f16: mx__pool_f16_plus_zero) on 16-bit bits in 32-bit lanes (the high halves zero). */
WIDE_INLINE __m512i half_plus_zero(__m512i d, bool f16) {
  __mmask16 negative_zero = _mm512_cmpeq_epi32_mask(d, _mm512_set1_epi32(0x8000));
  __m512i infinity = _mm512_set1_epi32(f16 ? 0x7c00 : 0x7f80), quiet = _mm512_set1_epi32(f16 ? 0x200 : 0x40);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(d, _mm512_set1_epi32(0x7fff)), infinity);
  d = _mm512_mask_or_epi32(d, nan, d, quiet);
  return _mm512_maskz_mov_epi32((__mmask16)~negative_zero, d);
}

WIDE_INLINE void conv_pool16(const void *plane, int64_t W, int64_t OH, int64_t OW, void *y, uint8_t *offset,
                             int64_t m, bool bf16, bool f16, bool f32_plane) {
  const int64_t area = OH * OW; /* a channel's outputs, 16 at a time across its rows */
  for (int64_t first = 0; first < area; first += 16) {
    const int64_t count = area - first < 16 ? area - first : 16;
    __m512i values[16], wheres[16]; /* pixel p's channels; after the transposes, channel c's pixels */
    const int64_t size = bf16 ? 2 : 4, next = 16 * area; /* the next block's, this iteration's part */
    prefetch(y, (next + 16 * first) * size, 256 * size); /* for the stores */
    prefetch(offset, next + 16 * first, 256);
    int64_t oh = first / OW, ow = first % OW; /* pixel p's window */
    for (int64_t p = 0; p < count; p++, ow = ow + 1 < OW ? ow + 1 : (oh++, 0)) {
      const int64_t a = ((2 * oh) * W + 2 * ow) * 16, c = a + W * 16; /* the window's top left, bottom left */
      __m512i where;
      if (f16) { /* y's values, rounded before the search as the unfused op's output is */
        const float *at = plane;
        __m512 best = search(round_f16(_mm512_loadu_ps(at + a)), round_f16(_mm512_loadu_ps(at + a + 16)),
                             round_f16(_mm512_loadu_ps(at + c)), round_f16(_mm512_loadu_ps(at + c + 16)), &where);
        values[p] = _mm512_or_si512(f16_store(best), _mm512_slli_epi32(where, 16));
      } else if (bf16 && f32_plane) {
        const float *at = plane;
        __m512 best = search(round_bf16(_mm512_loadu_ps(at + a)), round_bf16(_mm512_loadu_ps(at + a + 16)),
                             round_bf16(_mm512_loadu_ps(at + c)), round_bf16(_mm512_loadu_ps(at + c + 16)), &where);
        values[p] = _mm512_or_si512(bf16_store(best), _mm512_slli_epi32(where, 16));
      } else if (bf16) {
        const uint16_t *at = plane;
        __m512 best = search(load_bf16(at + a), load_bf16(at + a + 16), load_bf16(at + c), load_bf16(at + c + 16),
                             &where);
        values[p] = _mm512_or_si512(bf16_store(best), _mm512_slli_epi32(where, 16));
      } else {
        const float *at = plane;
        __m512 best = search(_mm512_loadu_ps(at + a), _mm512_loadu_ps(at + a + 16), _mm512_loadu_ps(at + c),
                             _mm512_loadu_ps(at + c + 16), &where);
        values[p] = _mm512_castps_si512(best), wheres[p] = where;
      }
    }
    for (int64_t p = count; p < 16; p++) values[p] = wheres[p] = _mm512_setzero_si512();
    transpose16(values);
    if (!bf16) transpose16(wheres);
    const bool whole = count == 16;
    const __mmask16 k = first16(count);
    for (int64_t c = 0; c < m; c++) {
      const int64_t at = c * area + first;
      __m512i where = bf16 ? _mm512_srli_epi32(values[c], 16) : wheres[c];
      if (whole) _mm_storeu_si128((__m128i *)(offset + at), _mm512_cvtepi32_epi8(where));
      else _mm512_mask_cvtepi32_storeu_epi8(offset + at, k, where);
      if (bf16 && whole) _mm256_storeu_si256((__m256i *)((uint16_t *)y + at), _mm512_cvtepi32_epi16(values[c]));
      else if (bf16) _mm512_mask_cvtepi32_storeu_epi16((uint16_t *)y + at, k, values[c]);
      else if (whole) _mm512_storeu_si512((float *)y + at, values[c]);
      else _mm512_mask_storeu_epi32((float *)y + at, k, values[c]);
    }
  }
}

WIDE void mx__conv_pool16_avx512(const void *plane, int64_t W, int64_t OH, int64_t OW, void *y, uint8_t *offset,
                                 int64_t m, mx_dtype dtype, bool f32_plane) {
  if (dtype == MX_F16) conv_pool16(plane, W, OH, OW, y, offset, m, true, true, true);
  else if (dtype == MX_BF16 && f32_plane) conv_pool16(plane, W, OH, OW, y, offset, m, true, false, true);
  else if (dtype == MX_BF16) conv_pool16(plane, W, OH, OW, y, offset, m, true, false, false);
  else conv_pool16(plane, W, OH, OW, y, offset, m, false, false, false);
}

/* relu_backward's test on its mask y (kernels/math.h): the lanes where y > 0 or y is NaN, whose gradient passes. */
WIDE_INLINE __mmask16 kept_by(__m512 y) { return _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_NLE_UQ); }

WIDE_INLINE void conv_pool16_backward(void *top, int64_t W, int64_t OH, int64_t OW, const void *dy, const void *mask,
                                      const uint8_t *offset, int64_t channel_stride, int64_t m, int64_t readable,
                                      bool bf16, bool f16, bool f32_top) {
  const int64_t area = OH * OW; /* a channel's outputs, 16 at a time across its rows */
  for (int64_t first = 0; first < area; first += 16) {
    const int64_t count = area - first < 16 ? area - first : 16;
    const __mmask16 k = first16(count);
    __m512i values[16], wheres[16]; /* channel c's pixels; after the transposes, pixel p's channels */
    const int64_t size = bf16 ? 2 : 4, next = 16 * channel_stride; /* the next block's, this iteration's part */
    prefetch(dy, (next + 16 * first) * size, 256 * size);
    if (mask) prefetch(mask, (next + 16 * first) * size, 256 * size);
    prefetch(offset, next + 16 * first, 256);
    for (int64_t c = 0; c < 16; c++) {
      const int64_t at = c * channel_stride + first;
      if (c >= m) { /* a padding channel: 0 + 0 at offset 0, zeros elsewhere */
        values[c] = wheres[c] = _mm512_setzero_si512();
        continue;
      }
      const bool whole = at + 16 <= readable;
      __m512i where = _mm512_cvtepu8_epi32(whole ? _mm_loadu_si128((const __m128i *)(offset + at))
                                                 : _mm_maskz_loadu_epi8(k, offset + at));
      /* relu's mask: a stopped gradient becomes +0, relu_backward's, which the stores below treat as it */
      __mmask16 kept = (__mmask16)0xffff;
      if (bf16) {
        const uint16_t *g = (const uint16_t *)dy + at, *y = mask ? (const uint16_t *)mask + at : NULL;
        __m256i g16 = whole ? _mm256_loadu_si256((const __m256i *)g) : _mm256_maskz_loadu_epi16(k, g);
        if (y) kept = kept_by(load_half_masked(y, whole, k, f16));
        values[c] = _mm512_or_si512(_mm512_maskz_mov_epi32(kept, _mm512_cvtepu16_epi32(g16)),
                                    _mm512_slli_epi32(where, 16));
      } else {
        const float *g = (const float *)dy + at, *y = mask ? (const float *)mask + at : NULL;
        if (y) kept = kept_by(whole ? _mm512_loadu_ps(y) : _mm512_maskz_loadu_ps(k, y));
        values[c] = _mm512_maskz_mov_epi32(kept, whole ? _mm512_loadu_si512(g) : _mm512_maskz_loadu_epi32(k, g));
        wheres[c] = where;
      }
    }
    transpose16(values);
    if (!bf16) transpose16(wheres);
    int64_t oh = first / OW, ow = first % OW; /* pixel p's window */
    for (int64_t p = 0; p < count; p++, ow = ow + 1 < OW ? ow + 1 : (oh++, 0)) {
      __m512i where = bf16 ? _mm512_srli_epi32(values[p], 16) : wheres[p];
      for (int r = 0; r < 4; r++) {
        const int64_t pixel = ((2 * oh + (r >> 1)) * W + 2 * ow + (r & 1)) * 16;
        const __mmask16 here = _mm512_cmpeq_epi32_mask(where, _mm512_set1_epi32(r));
        if (bf16) {
          __m512i g = half_plus_zero(_mm512_and_si512(values[p], _mm512_set1_epi32(0xffff)), f16);
          if (f16) { /* the float16 values widened */
            __m512 widened = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
            _mm512_storeu_ps((float *)top + pixel, _mm512_maskz_mov_ps(here, widened));
          } else if (f32_top) { /* the bfloat16 values widened */
            _mm512_storeu_si512((float *)top + pixel, _mm512_maskz_mov_epi32(here, _mm512_slli_epi32(g, 16)));
          } else {
            __m256i kept = _mm512_cvtepi32_epi16(_mm512_maskz_mov_epi32(here, g));
            _mm256_storeu_si256((__m256i *)((uint16_t *)top + pixel), kept);
          }
        } else {
          __m512 g = _mm512_add_ps(_mm512_setzero_ps(), _mm512_castsi512_ps(values[p]));
          _mm512_storeu_ps((float *)top + pixel, _mm512_maskz_mov_ps(here, g));
        }
      }
    }
  }
}

WIDE void mx__conv_pool16_backward_avx512(void *top, int64_t W, int64_t OH, int64_t OW, const void *dy,
                                          const void *mask, const uint8_t *offset, int64_t channel_stride, int64_t m,
                                          int64_t readable, mx_dtype dtype, bool f32_top) {
  /* each case its own copy of the loops, the flags constants in it */
#define MX__RUN(bf16, f16, f32_top) \
  conv_pool16_backward(top, W, OH, OW, dy, mask, offset, channel_stride, m, readable, bf16, f16, f32_top)
  if (dtype == MX_F16) MX__RUN(true, true, true);
  else if (dtype == MX_BF16 && f32_top) MX__RUN(true, false, true);
  else if (dtype == MX_BF16) MX__RUN(true, false, false);
  else MX__RUN(false, false, false);
#undef MX__RUN
}
#endif
