/* The CPU's per-channel affine kernel (a slot of the CPU backend): batch
 * norm's scale and shift in one pass. */
#ifndef MX_KERNELS_CPU_CHANNEL_AFFINE_H
#define MX_KERNELS_CPU_CHANNEL_AFFINE_H

#include "kernels/backend.h"

mx_status mx__cpu_channel_affine(const mx_kview *y, const mx_kview *x, const mx_kview *scale, const mx_kview *shift);

#endif
