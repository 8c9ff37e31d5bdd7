/* A float exponential for the x <= 0 of a row shifted by its max, written so that loops over it vectorise:
 * softmax's lines (kernels/cpu/indexing.c) and cross_entropy's rows (kernels/cpu/cross_entropy.c). */
#ifndef MX_KERNELS_CPU_EXP_F32_H
#define MX_KERNELS_CPU_EXP_F32_H

#include <stdint.h>

#include "kernels/math.h"

/* e^x for x <= 0, written so the loop
 * vectorises (libm's expf is a call per element): Cephes' expf, 2^n times
 * a degree-5 polynomial on [-ln2/2, ln2/2], within 2 ulp. Below -87.33
 * (the smallest normal result) it gives 0, and NaN stays NaN. The choices
 * are bit-mask selects: GCC leaves a loop with ?: on floats unvectorised. */
#define MX__INLINE static inline __attribute__((always_inline)) /* into each ISA's clone of its callers */

MX__INLINE float select_bits(uint32_t mask, float a, float b) {
  return mx_bits_f32((mx_f32_bits(a) & mask) | (mx_f32_bits(b) & ~mask));
}

MX__INLINE float exp_nonpositive(float x) {
  float clamped = select_bits(-(uint32_t)(x > -88.0f), x, -88.0f); /* NaN too: the int conversion needs a number */
  float y = clamped * 1.44269504088896341f + 0.5f;
  float t = (float)(int32_t)y, n = t - (float)(t > y); /* floor(y), as vector code can */
  float r = clamped - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float e = (p * r * r + r + 1.0f) * mx_bits_f32((uint32_t)((int32_t)n + 127) << 23);
  return select_bits(-(uint32_t)(x != x), x, select_bits(-(uint32_t)(x < -87.33654f), 0.0f, e));
}

#endif
