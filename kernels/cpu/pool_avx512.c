/* Max pooling's 2x2 stride-2 loops in AVX-512 (see pool_avx512.h): even and
 * odd columns split by permutes (float32) or by the halves of 32-bit loads
 * (bfloat16, a pair of neighbours a lane), the search's steps on masks, the
 * offsets stored as bytes straight from them.
 *
 * Loads and stores with a partial mask are slow here: on this project's
 * AMD EPYC, a (128, 32, 28, 28) float32 forward whose rows (14 outputs)
 * each took one ran 2.5x slower than with whole vectors, slower than the
 * baseline SSE2 loop. So a row's last vector runs on past its end wherever
 * the plane has room: reads see the next rows' values (their lanes are
 * dropped), and writes land on elements that later rows (or, backward, the
 * bottom row and the edge zeroing) write again; only a plane's last rows
 * fall back to masks. The row-major callers pass that room. */
#include "kernels/cpu/pool_avx512.h"

#ifdef MX__POOL_AVX512
#include <immintrin.h>

#define WIDE __attribute__((target("avx512f,avx512bw,avx512vl")))
#define WIDE_INLINE WIDE static inline __attribute__((always_inline))

bool mx__pool_avx512(void) {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

/* The first n (clamped to 0..16 or 0..32) lanes. */
WIDE_INLINE __mmask16 first16(int64_t n) { return n <= 0 ? 0 : n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }
WIDE_INLINE __mmask32 first32(int64_t n) { return n <= 0 ? 0 : n >= 32 ? 0xffffffffu : (__mmask32)((1u << n) - 1); }

/* mx__pool_relu_bits: a negative lane becomes +0; -0 and NaN stay. */
WIDE_INLINE __m512 relu(__m512 v) {
  return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_setzero_ps());
}

/* MX__MAX_STEP across 16 lanes: v replaces best where it is larger or NaN; where takes r there. */
WIDE_INLINE __m512 max_step(__m512 best, __m512 v, __m128i *where, int r) {
  __mmask16 take = _mm512_cmp_ps_mask(best, v, _CMP_LT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  *where = _mm_mask_mov_epi8(*where, take, _mm_set1_epi8((char)r));
  return _mm512_mask_mov_ps(best, take, v);
}

/* The max of the windows a b / c d (ReLU of each first when relu) and its offsets. */
WIDE_INLINE __m512 search(__m512 a, __m512 b, __m512 c, __m512 d, bool with_relu, __m128i *where) {
  if (with_relu) a = relu(a), b = relu(b), c = relu(c), d = relu(d);
  *where = _mm_setzero_si128();
  a = max_step(a, b, where, 1);
  a = max_step(a, c, where, 2);
  return max_step(a, d, where, 3);
}

/* mx__pool_bf16_store of lanes holding bfloat16 values, in each 32-bit lane's low half. */
WIDE_INLINE __m512i bf16_store(__m512 v) {
  __m512i bits = _mm512_srli_epi32(_mm512_castps_si512(v), 16);
  return _mm512_mask_or_epi32(bits, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), bits, _mm512_set1_epi32(0x40));
}

/* A 32-bit lane's two bfloat16 values as float32: the low one (even column or channel), the high one. */
WIDE_INLINE __m512 low_bf16(__m512i pair) { return _mm512_castsi512_ps(_mm512_slli_epi32(pair, 16)); }
WIDE_INLINE __m512 high_bf16(__m512i pair) {
  return _mm512_castsi512_ps(_mm512_and_si512(pair, _mm512_set1_epi32((int)0xffff0000u)));
}

/* readable: input elements from top that may be read; writable: outputs from out and offset that may be written
 * (pool_avx512.h). */
WIDE_INLINE void row_f32(const float *top, int64_t W, float *out, uint8_t *offset, int64_t n, int64_t readable,
                         int64_t writable, bool with_relu) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t i = 0; i < n; i += 16) {
    const float *t = top + 2 * i, *b = t + W;
    const bool short_tail = n - i <= 8; /* one vector of each row holds it, half a vector its outputs */
    __m512 t0, t1, b0, b1;
    if (short_tail && W + 2 * i + 16 <= readable) {
      t0 = t1 = _mm512_loadu_ps(t), b0 = b1 = _mm512_loadu_ps(b);
    } else if (W + 2 * i + 32 <= readable) {
      t0 = _mm512_loadu_ps(t), t1 = _mm512_loadu_ps(t + 16), b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    } else {
      __mmask16 lo = first16(2 * (n - i)), hi = first16(2 * (n - i) - 16);
      t0 = _mm512_maskz_loadu_ps(lo, t), t1 = _mm512_maskz_loadu_ps(hi, t + 16);
      b0 = _mm512_maskz_loadu_ps(lo, b), b1 = _mm512_maskz_loadu_ps(hi, b + 16);
    }
    __m128i where;
    __m512 best = search(_mm512_permutex2var_ps(t0, even, t1), _mm512_permutex2var_ps(t0, odd, t1),
                         _mm512_permutex2var_ps(b0, even, b1), _mm512_permutex2var_ps(b0, odd, b1), with_relu, &where);
    if (short_tail && i + 8 <= writable) {
      _mm256_storeu_ps(out + i, _mm512_castps512_ps256(best));
      _mm_storel_epi64((__m128i *)(offset + i), where);
    } else if (i + 16 <= writable) {
      _mm512_storeu_ps(out + i, best);
      _mm_storeu_si128((__m128i *)(offset + i), where);
    } else {
      _mm512_mask_storeu_ps(out + i, first16(n - i), best);
      _mm_mask_storeu_epi8(offset + i, first16(n - i), where);
    }
  }
}

WIDE_INLINE void row_bf16(const uint16_t *top, int64_t W, uint16_t *out, uint8_t *offset, int64_t n,
                          int64_t readable, int64_t writable, bool with_relu) {
  for (int64_t i = 0; i < n; i += 16) {
    const bool short_tail = n - i <= 8;
    __m512i t, b;
    if (short_tail && W + 2 * i + 16 <= readable) {
      t = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(top + 2 * i)));
      b = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(top + W + 2 * i)));
    } else if (W + 2 * i + 32 <= readable) {
      t = _mm512_loadu_si512(top + 2 * i), b = _mm512_loadu_si512(top + W + 2 * i);
    } else {
      t = _mm512_maskz_loadu_epi32(first16(n - i), top + 2 * i);
      b = _mm512_maskz_loadu_epi32(first16(n - i), top + W + 2 * i);
    }
    __m128i where;
    __m512 best = search(low_bf16(t), high_bf16(t), low_bf16(b), high_bf16(b), with_relu, &where);
    if (short_tail && i + 8 <= writable) {
      _mm_storeu_si128((__m128i *)(out + i), _mm256_castsi256_si128(_mm512_cvtepi32_epi16(bf16_store(best))));
      _mm_storel_epi64((__m128i *)(offset + i), where);
    } else if (i + 16 <= writable) {
      _mm256_storeu_si256((__m256i *)(out + i), _mm512_cvtepi32_epi16(bf16_store(best)));
      _mm_storeu_si128((__m128i *)(offset + i), where);
    } else {
      _mm512_mask_cvtepi32_storeu_epi16(out + i, first16(n - i), bf16_store(best));
      _mm_mask_storeu_epi8(offset + i, first16(n - i), where);
    }
  }
}

/* Row r reads from 2 r W past top and writes from r n past out; later rows write again what it writes past its end. */
WIDE_INLINE void rows_f32(const float *top, int64_t W, float *out, uint8_t *offset, int64_t rows, int64_t n,
                          int64_t readable, bool with_relu) {
  for (int64_t r = 0; r < rows; r++)
    row_f32(top + 2 * r * W, W, out + r * n, offset + r * n, n, readable - 2 * r * W, (rows - r) * n, with_relu);
}

WIDE_INLINE void rows_bf16(const uint16_t *top, int64_t W, uint16_t *out, uint8_t *offset, int64_t rows, int64_t n,
                           int64_t readable, bool with_relu) {
  for (int64_t r = 0; r < rows; r++)
    row_bf16(top + 2 * r * W, W, out + r * n, offset + r * n, n, readable - 2 * r * W, (rows - r) * n, with_relu);
}

WIDE void mx__pool_rows_2x2_avx512(const void *top, int64_t W, void *out, uint8_t *offset, int64_t rows, int64_t n,
                                   int64_t readable, bool bf16, bool relu) {
  if (bf16 && relu) rows_bf16(top, W, out, offset, rows, n, readable, true);
  else if (bf16) rows_bf16(top, W, out, offset, rows, n, readable, false);
  else if (relu) rows_f32(top, W, out, offset, rows, n, readable, true);
  else rows_f32(top, W, out, offset, rows, n, readable, false);
}

/* 0 + d on 16-bit bits in 32-bit lanes (mx__pool_bf16_plus_zero, mx__pool_f16_plus_zero). */
WIDE_INLINE __m512i plus_zero32(__m512i d, bool bf16) {
  __mmask16 negative_zero = _mm512_cmpeq_epi32_mask(d, _mm512_set1_epi32(0x8000));
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(d, _mm512_set1_epi32(0x7fff)),
                                          _mm512_set1_epi32(bf16 ? 0x7f80 : 0x7c00));
  d = _mm512_mask_or_epi32(d, nan, d, _mm512_set1_epi32(bf16 ? 0x40 : 0x200));
  return _mm512_maskz_mov_epi32((__mmask16)~negative_zero, d);
}

/* The same on 32 16-bit lanes. */
WIDE_INLINE __m512i plus_zero16(__m512i d, bool bf16) {
  __mmask32 negative_zero = _mm512_cmpeq_epi16_mask(d, _mm512_set1_epi16((short)0x8000));
  __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(d, _mm512_set1_epi16(0x7fff)),
                                          _mm512_set1_epi16(bf16 ? 0x7f80 : 0x7c00));
  d = _mm512_mask_mov_epi16(d, nan, _mm512_or_si512(d, _mm512_set1_epi16(bf16 ? 0x40 : 0x200)));
  return _mm512_maskz_mov_epi16(~negative_zero, d);
}

/* One dx row (row 0 top, 1 bottom) of n windows: the top row first, so that the bottom row's stores come after
 * the top row's last vector has run on into the bottom row. */
WIDE_INLINE void backward_row(void *top, int64_t W, const void *dy, const uint8_t *offset, int64_t n,
                              int64_t readable, int64_t writable, int dt_bits, bool bf16, int row) {
  const __m512i low_half = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i high_half = _mm512_add_epi32(low_half, _mm512_set1_epi32(8));
  const __m128i even_r = _mm_set1_epi8((char)(2 * row)), odd_r = _mm_set1_epi8((char)(2 * row + 1));
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t span = n - i <= 8 ? 8 : 16; /* outputs a vector covers: a short tail takes half */
    const bool whole_in = i + span <= readable, whole_out = row * W + 2 * (i + span) <= writable;
    __mmask16 k = first16(n - i);
    __m128i off = !whole_in      ? _mm_maskz_loadu_epi8(k, offset + i)
                  : span == 8    ? _mm_loadl_epi64((const __m128i *)(offset + i))
                                 : _mm_loadu_si128((const __m128i *)(offset + i));
    __mmask16 at_even = _mm_cmpeq_epi8_mask(off, even_r), at_odd = _mm_cmpeq_epi8_mask(off, odd_r);
    if (dt_bits == 32) {
      const float *g_at = (const float *)dy + i;
      __m512 g = !whole_in   ? _mm512_maskz_loadu_ps(k, g_at)
                 : span == 8 ? _mm512_zextps256_ps512(_mm256_loadu_ps(g_at))
                             : _mm512_loadu_ps(g_at);
      g = _mm512_add_ps(_mm512_setzero_ps(), g);
      __m512 even = _mm512_maskz_mov_ps(at_even, g), odd = _mm512_maskz_mov_ps(at_odd, g);
      float *d = (float *)top + row * W + 2 * i;
      if (whole_out) {
        _mm512_storeu_ps(d, _mm512_permutex2var_ps(even, low_half, odd));
        if (span == 16) _mm512_storeu_ps(d + 16, _mm512_permutex2var_ps(even, high_half, odd));
      } else {
        _mm512_mask_storeu_ps(d, first16(2 * (n - i)), _mm512_permutex2var_ps(even, low_half, odd));
        _mm512_mask_storeu_ps(d + 16, first16(2 * (n - i) - 16), _mm512_permutex2var_ps(even, high_half, odd));
      }
      continue;
    }
    const uint16_t *g_at = (const uint16_t *)dy + i;
    __m256i g16 = !whole_in   ? _mm256_maskz_loadu_epi16(k, g_at)
                  : span == 8 ? _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)g_at))
                              : _mm256_loadu_si256((const __m256i *)g_at);
    __m512i g = plus_zero32(_mm512_cvtepu16_epi32(g16), bf16);
    __m512i pairs = _mm512_or_si512(_mm512_maskz_mov_epi32(at_even, g),
                                    _mm512_slli_epi32(_mm512_maskz_mov_epi32(at_odd, g), 16));
    uint16_t *d = (uint16_t *)top + row * W + 2 * i;
    if (whole_out && span == 8) _mm256_storeu_si256((__m256i *)d, _mm512_castsi512_si256(pairs));
    else if (whole_out) _mm512_storeu_si512(d, pairs);
    else _mm512_mask_storeu_epi32(d, k, pairs);
  }
}

/* Row pair r writes from 2 r W past top, reads from r n past dy and offset. */
WIDE void mx__pool_rows_2x2_backward_avx512(void *top, int64_t W, const void *dy, const uint8_t *offset, int64_t rows,
                                            int64_t n, int64_t writable, int dt_bits, bool bf16) {
  const int64_t size = dt_bits / 8;
  for (int64_t r = 0; r < rows; r++) {
    char *pair = (char *)top + 2 * r * W * size;
    const char *g = (const char *)dy + r * n * size;
    const int64_t readable = (rows - r) * n, room = writable - 2 * r * W;
    for (int row = 0; row < 2; row++) {
      if (dt_bits == 32) backward_row(pair, W, g, offset + r * n, n, readable, room, 32, bf16, row);
      else backward_row(pair, W, g, offset + r * n, n, readable, room, 16, bf16, row);
    }
  }
}

/* Channels-last: prefetch the two input rows' bytes of pixel pair at, PREFETCH_AHEAD on (see pool_avx512.h). */
static inline void prefetch_pair(const char *at, int64_t row_bytes, int64_t pair_bytes) {
  const char *ahead = at + MX__POOL_PREFETCH_AHEAD;
  for (int64_t byte = 0; byte < pair_bytes; byte += 64) { /* a prefetch never faults, even past the end */
    __builtin_prefetch(ahead + byte);
    __builtin_prefetch(ahead + row_bytes + byte);
  }
}

/* 16 channels of a pixel from p + i as float32: float32 as they are, float16 widened by vcvtph2ps (exact). */
WIDE_INLINE __m512 load16(const void *p, int64_t i, __mmask16 k, bool f16) {
  return f16 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i))
             : _mm512_maskz_loadu_ps(k, (const float *)p + i);
}

/* load16's inverse for maxima, which are values of the input's dtype: float16 narrowed by vcvtps2ph (exact; a NaN
 * comes back quiet, as the conversions make it). */
WIDE_INLINE void store16(void *p, int64_t i, __mmask16 k, __m512 v, bool f16) {
  if (f16) _mm256_mask_storeu_epi16((uint16_t *)p + i, k, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  else _mm512_mask_storeu_ps((float *)p + i, k, v);
}

/* 16 channels at a time, float32 or float16 (load16, store16). */
WIDE_INLINE void cl_row_16(const void *top, int64_t W, int64_t C, int64_t OW, void *out, uint8_t *offset, bool f16,
                           bool with_relu) {
  const int64_t size = f16 ? 2 : 4;
  for (int64_t ow = 0; ow < OW; ow++) {
    const char *a = (const char *)top + 2 * ow * C * size, *b = a + C * size, *c = a + W * C * size, *d = c + C * size;
    prefetch_pair(a, W * C * size, 2 * C * size);
    for (int64_t c0 = 0; c0 < C; c0 += 16) {
      __mmask16 k = first16(C - c0);
      __m128i where;
      __m512 best = search(load16(a, c0, k, f16), load16(b, c0, k, f16), load16(c, c0, k, f16), load16(d, c0, k, f16),
                           with_relu, &where);
      store16(out, ow * C + c0, k, best, f16);
      _mm_mask_storeu_epi8(offset + ow * C + c0, k, where);
    }
  }
}

/* 32 channels at a time: the even ones in each 32-bit lane's low half, the odd ones in its high half. */
WIDE_INLINE void cl_row_bf16(const uint16_t *top, int64_t W, int64_t C, int64_t OW, uint16_t *out, uint8_t *offset,
                             bool with_relu) {
  for (int64_t ow = 0; ow < OW; ow++) {
    const uint16_t *a = top + 2 * ow * C, *c = a + W * C;
    prefetch_pair((const char *)a, W * C * 2, 2 * C * 2);
    for (int64_t c0 = 0; c0 < C; c0 += 32) {
      __mmask32 k = first32(C - c0);
      __m512i va = _mm512_maskz_loadu_epi16(k, a + c0), vb = _mm512_maskz_loadu_epi16(k, a + C + c0);
      __m512i vc = _mm512_maskz_loadu_epi16(k, c + c0), vd = _mm512_maskz_loadu_epi16(k, c + C + c0);
      __m128i where_even, where_odd;
      __m512 even = search(low_bf16(va), low_bf16(vb), low_bf16(vc), low_bf16(vd), with_relu, &where_even);
      __m512 odd = search(high_bf16(va), high_bf16(vb), high_bf16(vc), high_bf16(vd), with_relu, &where_odd);
      __m512i values = _mm512_or_si512(bf16_store(even), _mm512_slli_epi32(bf16_store(odd), 16));
      _mm512_mask_storeu_epi16(out + ow * C + c0, k, values);
      __m256i where = _mm256_set_m128i(_mm_unpackhi_epi8(where_even, where_odd), _mm_unpacklo_epi8(where_even, where_odd));
      _mm256_mask_storeu_epi8(offset + ow * C + c0, k, where);
    }
  }
}

WIDE void mx__pool_cl_row_2x2_avx512(const void *top, int64_t W, int64_t C, int64_t OW, void *out, uint8_t *offset,
                                     int dt_bits, bool bf16, bool relu) {
  if (bf16 && relu) cl_row_bf16(top, W, C, OW, out, offset, true);
  else if (bf16) cl_row_bf16(top, W, C, OW, out, offset, false);
  else if (dt_bits == 16 && relu) cl_row_16(top, W, C, OW, out, offset, true, true);
  else if (dt_bits == 16) cl_row_16(top, W, C, OW, out, offset, true, false);
  else if (relu) cl_row_16(top, W, C, OW, out, offset, false, true);
  else cl_row_16(top, W, C, OW, out, offset, false, false);
}

WIDE void mx__pool_cl_row_2x2_backward_avx512(void *top, int64_t W, int64_t C, int64_t OW, const void *dy,
                                              const uint8_t *offset, int dt_bits, bool bf16) {
  for (int64_t ow = 0; ow < OW; ow++) {
    const int64_t q = ow * C; /* the output pixel's first value */
    if (dt_bits == 32) {
      for (int64_t c0 = 0; c0 < C; c0 += 16) {
        __mmask16 k = first16(C - c0);
        __m512 g = _mm512_add_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(k, (const float *)dy + q + c0));
        __m128i off = _mm_maskz_loadu_epi8(k, offset + q + c0);
        for (int r = 0; r < 4; r++) {
          float *p = (float *)top + ((r >> 1) * W + 2 * ow + (r & 1)) * C + c0;
          _mm512_mask_storeu_ps(p, k, _mm512_maskz_mov_ps(_mm_cmpeq_epi8_mask(off, _mm_set1_epi8((char)r)), g));
        }
      }
      continue;
    }
    for (int64_t c0 = 0; c0 < C; c0 += 32) {
      __mmask32 k = first32(C - c0);
      __m512i g = plus_zero16(_mm512_maskz_loadu_epi16(k, (const uint16_t *)dy + q + c0), bf16);
      __m256i off = _mm256_maskz_loadu_epi8(k, offset + q + c0);
      for (int r = 0; r < 4; r++) {
        uint16_t *p = (uint16_t *)top + ((r >> 1) * W + 2 * ow + (r & 1)) * C + c0;
        _mm512_mask_storeu_epi16(p, k, _mm512_maskz_mov_epi16(_mm256_cmpeq_epi8_mask(off, _mm256_set1_epi8((char)r)), g));
      }
    }
  }
}
#endif
