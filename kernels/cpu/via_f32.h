/* float16 (and bfloat16 where oneDNN has no native kernel) through float32 kernels:
 * dense float32 copies of strided views, and one rounding back at the end.
 * This is the tensor-core contract: f32 products and sums, one rounding. */
#ifndef MX_KERNELS_CPU_VIA_F32_H
#define MX_KERNELS_CPU_VIA_F32_H

#include "kernels/base_internal.h"

/* A float32 staging buffer of n elements from the CPU's block cache (a
 * fresh malloc would fault its pages in on every call); NULL when out of
 * memory (no error set). Give it back with mx__cpu_f32_free. */
float *mx__cpu_f32_alloc(int64_t n);
void mx__cpu_f32_free(float *buf, int64_t n);

/* A dense (row-major) float32 copy of v, any dtype and strides, in a buffer
 * from mx__cpu_f32_alloc(numel(v)); NULL when out of memory. */
float *mx__cpu_dense_f32(const mx_kview *v);

/* The dense row-major float32 view of data with like's shape. */
mx_kview mx__cpu_dense_f32_view(float *data, const mx_kview *like);

/* out (any dtype and strides) = the dense float32 values src, rounded once
 * to out's dtype. */
void mx__cpu_store_f32(const mx_kview *out, const float *src);

#endif
