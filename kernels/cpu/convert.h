/* Bulk float16/bfloat16 conversions (F16C where the CPU has it:
 * bit-identical to kernels/math.h). */
#ifndef MX_KERNELS_CPU_CONVERT_H
#define MX_KERNELS_CPU_CONVERT_H

#include "kernels/base_internal.h"

/* One element as a double and back: mx_element_load / mx_element_store in
 * kernels/math.h, shared with CUDA. */
#include "kernels/math.h"

void mx__f32_to_f16_n(const float *src, uint16_t *dst, int64_t n);
void mx__f16_to_f32_n(const uint16_t *src, float *dst, int64_t n);
void mx__f32_to_bf16_n(const float *src, uint16_t *dst, int64_t n);
void mx__bf16_to_f32_n(const uint16_t *src, float *dst, int64_t n);

/* mx_f32_to_bf16 with the NaN test as a select, so loops over it vectorise. */
static inline uint16_t mx__bf16_nearest(float f) {
  uint32_t x = mx_f32_bits(f);
  uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u), quiet = x | 0x400000u;
  return (uint16_t)(((x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded) >> 16);
}

/* Whether the F16C fast path is in use on this CPU. */
bool mx__cpu_has_f16c(void);

#endif
