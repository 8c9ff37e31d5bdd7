/* The checks of a convolution's operands, shared by the CPU and CUDA
 * kernels (kernels/conv_check.c). */
#ifndef MX_KERNELS_CONV_CHECK_H
#define MX_KERNELS_CONV_CHECK_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MX_CONV_FORWARD, MX_CONV_BACKWARD_DATA, MX_CONV_BACKWARD_WEIGHT } mx_conv_kind;

/* The views, bias and params against each other (ranks, channels, groups,
 * kernel and output sizes, one floating dtype; the forward's bias NULL or a
 * contiguous (C_out) vector of that dtype): MX_OK or the error set. x, w
 * and y are in their forward roles (dx, dw and dy for the backward kinds);
 * bias is the forward's, or the backward weights' bias gradient db (checked
 * alike), else NULL. */
mx_status mx__conv_check(mx_conv_kind kind, const mx_kview *x, const mx_kview *w, const mx_kview *y,
                         const mx_kview *bias, const mx_conv_params *p);

#ifdef __cplusplus
}
#endif

#endif
