/* Element loads and stores through double, and bulk float16/bfloat16
 * conversions (F16C where the CPU has it: bit-identical to kernels/math.h). */
#ifndef MX_KERNELS_CPU_CONVERT_H
#define MX_KERNELS_CPU_CONVERT_H

#include "kernels/base_internal.h"

/* Reads one element of any dtype as a double (exact for every dtype but
 * int64 beyond 2^53). */
double mx__load_f64(const void *p, mx_dtype dtype);
/* Writes a double as one element: floats round to nearest even, integers
 * truncate toward zero and saturate (NaN becomes 0), bool is v != 0. */
void mx__store_f64(void *p, mx_dtype dtype, double v);

void mx__f32_to_f16_n(const float *src, uint16_t *dst, int64_t n);
void mx__f16_to_f32_n(const uint16_t *src, float *dst, int64_t n);
void mx__f32_to_bf16_n(const float *src, uint16_t *dst, int64_t n);
void mx__bf16_to_f32_n(const uint16_t *src, float *dst, int64_t n);

/* Whether the F16C fast path is in use on this CPU. */
bool mx__cpu_has_f16c(void);

#endif
