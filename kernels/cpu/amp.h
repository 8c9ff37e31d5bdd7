/* The AMP kernels on the CPU (kernels/backend.h says what each computes). */
#ifndef MX_KERNELS_CPU_AMP_H
#define MX_KERNELS_CPU_AMP_H

#include "kernels/backend.h"

mx_status mx__cpu_amp_unscale(int n, const mx_kview *grads, const float *scale, float *found_inf, int64_t *stats);
mx_status mx__cpu_amp_update_scale(float *scale, int32_t *growth_tracker, const float *found_inf,
                                   const mx_amp_update_params *p, int64_t *counters, const mx_amp_clear *clear);

#endif
