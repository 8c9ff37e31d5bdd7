/* The CPU's batch norm kernels (slots of the CPU backend): the scale and
 * shift, or the statistics' gradient, in one pass (channel_affine), and the
 * backward's sums in one pass (channel_sums), either with a ReLU fused in,
 * the statistics in one pass (channel_moments), and batch norm's input
 * gradient from its two terms in one pass (channel_combine). */
#ifndef MX_KERNELS_CPU_BATCH_NORM_H
#define MX_KERNELS_CPU_BATCH_NORM_H

#include "kernels/backend.h"

mx_status mx__cpu_channel_affine(const mx_kview *y, const mx_kview *x, const mx_kview *center, const mx_kview *scale,
                                 const mx_kview *shift, const mx_kview *mask, bool relu);
mx_status mx__cpu_channel_sums(const mx_kview *sum, const mx_kview *dot, const mx_kview *a, const mx_kview *b,
                               const mx_kview *a_center, const mx_kview *b_center, const mx_kview *a_mask);
mx_status mx__cpu_channel_moments(const mx_kview *mean, const mx_kview *var, const mx_kview *x);
mx_status mx__cpu_channel_combine(const mx_kview *y, const mx_kview *a, const mx_kview *b, const mx_kview *scale_a,
                                  const mx_kview *center_b, const mx_kview *scale_b, const mx_kview *shift,
                                  const mx_kview *a_mask);

#endif
