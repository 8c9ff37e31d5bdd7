/* The CPU's elementwise kernels (slots of the CPU backend). */
#ifndef MX_KERNELS_CPU_ELEMENTWISE_H
#define MX_KERNELS_CPU_ELEMENTWISE_H

#include "kernels/base_internal.h"

/* in and out have one dtype; codes are mx_unary_code. */
mx_status mx__cpu_unary(int code, const mx_kview *out, const mx_kview *in, double a, double b);
/* x and y have one dtype, broadcast to out's shape; out has it too, or is
 * bool for the comparison codes. */
mx_status mx__cpu_binary(int code, const mx_kview *out, const mx_kview *x, const mx_kview *y, double alpha);
/* out = cond ? x : y; cond is bool, x, y and out share a dtype. */
mx_status mx__cpu_where(const mx_kview *out, const mx_kview *cond, const mx_kview *x, const mx_kview *y);

#endif
