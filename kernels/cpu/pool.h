/* The CPU's pooling kernels (slots of the CPU backend). Tensors are
 * contiguous; max pooling's indices are encoded as kernels/backend.h says. */
#ifndef MX_KERNELS_CPU_POOL_H
#define MX_KERNELS_CPU_POOL_H

#include "kernels/backend.h"

mx_status mx__cpu_max_pool(const mx_kview *out, const mx_kview *indices, const mx_kview *x, const mx_pool_params *p);
mx_status mx__cpu_max_pool_backward(const mx_kview *dx, const mx_kview *dy, const mx_kview *indices,
                                    const mx_pool_params *p);
mx_status mx__cpu_avg_pool(const mx_kview *out, const mx_kview *x, const mx_pool_params *p);
mx_status mx__cpu_avg_pool_backward(const mx_kview *dx, const mx_kview *dy, const mx_pool_params *p);

#endif
