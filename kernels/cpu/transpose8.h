/* An 8 x 8 block of floats transposed in AVX registers, shared by the
 * 16-bit GEMM's packing (kernels/cpu/gemm16.c) and the channels-last
 * staging copies (kernels/cpu/via_f32.c). x86-64 with GCC or Clang only;
 * callers check the CPU for AVX2 first. */
#ifndef MX_KERNELS_CPU_TRANSPOSE8_H
#define MX_KERNELS_CPU_TRANSPOSE8_H

#include <immintrin.h>

/* v[k] becomes element k of each of v[0..8): three rounds of unpacks,
 * shuffles and lane permutes, the usual 24 instructions. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void mx__transpose8_avx2(__m256 v[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]), t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44), u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44), u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; i++)
    v[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20), v[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
}

#endif
