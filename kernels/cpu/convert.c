/* Bulk float16 / bfloat16 conversions on the CPU. */
#include "kernels/cpu/convert.h"

#include <stdatomic.h>

#include "kernels/math.h"

/* --- bulk float16 / bfloat16 ------------------------------------------------ */

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define MX__X86 1

__attribute__((target("f16c,avx"))) static void f32_to_f16_f16c(const float *src, uint16_t *dst,
                                                                 int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128((__m128i *)(dst + i), h);
  }
  for (; i < n; i++) dst[i] = mx_f32_to_f16(src[i]);
}

__attribute__((target("f16c,avx"))) static void f16_to_f32_f16c(const uint16_t *src, float *dst,
                                                                 int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
  for (; i < n; i++) dst[i] = mx_f16_to_f32(src[i]);
}
#endif

bool mx__cpu_has_f16c(void) {
#ifdef MX__X86
  /* F16C from CPUID itself: clang's __builtin_cpu_supports does not know
   * "f16c" (AVX's check covers the OS saving the registers). Asked once:
   * in a virtual machine every CPUID instruction traps to the hypervisor,
   * which costs more than converting a row. */
  static _Atomic int known = -1; /* -1: not asked yet; threads that race ask the same CPU */
  int has = atomic_load_explicit(&known, memory_order_relaxed);
  if (has < 0) {
    unsigned eax, ebx, ecx, edx;
    has = __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
    atomic_store_explicit(&known, has, memory_order_relaxed);
  }
  return has;
#else
  return false;
#endif
}

void mx__f32_to_f16_n(const float *src, uint16_t *dst, int64_t n) {
#ifdef MX__X86
  if (mx__cpu_has_f16c()) {
    f32_to_f16_f16c(src, dst, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++) dst[i] = mx_f32_to_f16(src[i]);
}

void mx__f16_to_f32_n(const uint16_t *src, float *dst, int64_t n) {
#ifdef MX__X86
  if (mx__cpu_has_f16c()) {
    f16_to_f32_f16c(src, dst, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++) dst[i] = mx_f16_to_f32(src[i]);
}

/* bfloat16 has no fast instruction that keeps subnormals (AVX512-BF16's
 * vcvtneps2bf16 flushes them to zero), so these are plain loops that
 * vectorise (mx__bf16_nearest is branch-free). */
static inline __attribute__((always_inline)) void f32_to_bf16_loop(const float *src, uint16_t *dst,
                                                                     int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = mx__bf16_nearest(src[i]);
}

static inline __attribute__((always_inline)) void bf16_to_f32_loop(const uint16_t *src, float *dst,
                                                                     int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = mx_bf16_to_f32(src[i]);
}

#ifdef MX__X86
/* The same loops for AVX2: twice the width, and the narrowing is one pack
 * where SSE2 needs a shuffle sequence; with AVX-512 the narrowing is twice
 * as fast again (masked ops, one vpmovdw). */
__attribute__((target("avx512f,avx512bw"))) static void f32_to_bf16_avx512(const float *src, uint16_t *dst,
                                                                            int64_t n) {
  f32_to_bf16_loop(src, dst, n);
}

__attribute__((target("avx2"))) static void f32_to_bf16_avx2(const float *src, uint16_t *dst, int64_t n) {
  f32_to_bf16_loop(src, dst, n);
}

__attribute__((target("avx2"))) static void bf16_to_f32_avx2(const uint16_t *src, float *dst, int64_t n) {
  bf16_to_f32_loop(src, dst, n);
}
#endif

void mx__f32_to_bf16_n(const float *src, uint16_t *dst, int64_t n) {
#ifdef MX__X86
  if (__builtin_cpu_supports("avx512bw")) {
    f32_to_bf16_avx512(src, dst, n);
    return;
  }
  if (__builtin_cpu_supports("avx2")) {
    f32_to_bf16_avx2(src, dst, n);
    return;
  }
#endif
  f32_to_bf16_loop(src, dst, n);
}

void mx__bf16_to_f32_n(const uint16_t *src, float *dst, int64_t n) {
#ifdef MX__X86
  if (__builtin_cpu_supports("avx2")) {
    bf16_to_f32_avx2(src, dst, n);
    return;
  }
#endif
  bf16_to_f32_loop(src, dst, n);
}
