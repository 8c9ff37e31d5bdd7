/* The CPU's cross_entropy kernels over class indices (slots of the CPU backend; kernels/backend.h says what they
 * compute). */
#ifndef MX_KERNELS_CPU_CROSS_ENTROPY_H
#define MX_KERNELS_CPU_CROSS_ENTROPY_H

#include "kernels/base_internal.h"

mx_status mx__cpu_cross_entropy(const mx_kview *out, const mx_kview *rows, const mx_kview *x, const mx_kview *target,
                                int64_t ignore_index, bool mean);
mx_status mx__cpu_cross_entropy_backward(const mx_kview *dx, const mx_kview *grad, const mx_kview *x,
                                         const mx_kview *target, int64_t ignore_index, bool mean);

#endif
