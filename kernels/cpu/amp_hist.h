/* The AMP statistics kernels on the CPU (kernels/backend.h says what each computes). */
#ifndef MX_KERNELS_CPU_AMP_HIST_H
#define MX_KERNELS_CPU_AMP_HIST_H

#include "kernels/backend.h"

mx_status mx__cpu_amp_histogram(const mx_kview *x, int64_t *hist);
mx_status mx__cpu_amp_unscale_histogram(int n, const mx_kview *grads, const float *scale, float *found_inf,
                                        int64_t *stats, int64_t *hist);

#endif
