/* The scalar steps of max pooling's search and scatter on the CPU, written
 * so GCC vectorises the loops around them: a branch-free select, the max
 * step with its NaN and tie rules, ReLU on load, bfloat16 stores and 0 + dy
 * on 16-bit bits. Shared by every loop that pools (pool.c and the fused
 * convolution-pooling kernels). */
#ifndef MX_KERNELS_CPU_POOL_SEARCH_H
#define MX_KERNELS_CPU_POOL_SEARCH_H

#include <stdint.h>

#include "kernels/math.h"

/* a where mask is all ones, b elsewhere: a float select the compiler
 * cannot turn into a branch (it does for `take ? a : b` outside vector
 * loops, and random data mispredicts it). */
static inline float mx__pool_select_f32(uint32_t mask, float a, float b) {
  return mx_bits_f32((mx_f32_bits(a) & mask) | (mx_f32_bits(b) & ~mask));
}

/* The search's step: v at flat index i replaces the best so far when it is
 * larger or NaN (a NaN wins, the last one; a tie keeps the first). */
#define MX__MAX_STEP(v, i)                                      \
  do {                                                          \
    uint32_t take_ = -(uint32_t)(((v) > best) | ((v) != (v)));  \
    best = mx__pool_select_f32(take_, (v), best);                        \
    where = take_ ? (i) : where;                                \
  } while (0)

static inline float mx__pool_f32_of_f32(float v) { return v; }
static inline float mx__pool_f32_of_bf16(uint16_t v) { return mx_bf16_to_f32(v); }
/* max_pool_relu's loads: mx_relu_f32 (kernels/elementwise.def's relu: -0 and NaN stay), so the search meets the
 * values the unfused ReLU would have stored (a 16-bit value's relu is exact in float32), as a mask on the bits:
 * GCC does not vectorise the search around `v < 0 ? 0 : v` (measured: 15% of a bfloat16 CNN step, against 1%). */
static inline float mx__pool_relu_bits(float v) { return mx_bits_f32(mx_f32_bits(v) & ~-(uint32_t)(v < 0)); }
static inline float mx__pool_relu_of_f32(float v) { return mx__pool_relu_bits(v); }
static inline float mx__pool_relu_of_bf16(uint16_t v) { return mx__pool_relu_bits(mx_bf16_to_f32(v)); }
static inline float mx__pool_f32_store(float v) { return v; }
/* v is a bfloat16 value, so rounding is truncation; a NaN is made quiet as
 * mx_f32_to_bf16 makes it, without its branch, so the row loop vectorises. */
static inline uint16_t mx__pool_bf16_store(float v) {
  uint32_t bits = mx_f32_bits(v);
  return (uint16_t)((bits >> 16) | (uint32_t)((bits & 0x7fffffffu) > 0x7f800000u) << 6);
}

/* 0 + d in bfloat16 or float16, on the bits: d itself, but -0 becomes +0
 * and a NaN gets its quiet bit. */
static inline uint16_t mx__pool_bf16_plus_zero(uint16_t d) {
  return d == 0x8000u ? 0u : (uint16_t)(d | (uint32_t)((d & 0x7fffu) > 0x7f80u) << 6);
}

static inline uint16_t mx__pool_f16_plus_zero(uint16_t d) {
  return d == 0x8000u ? 0u : (uint16_t)(d | (uint32_t)((d & 0x7fffu) > 0x7c00u) << 9);
}

#endif
