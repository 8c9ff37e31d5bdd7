/* The CPU's batch_norm_vectors slot: batch norm's per-channel coefficients in one loop over the channels. */
#ifndef MX_KERNELS_CPU_BATCH_NORM_VECTORS_H
#define MX_KERNELS_CPU_BATCH_NORM_VECTORS_H

#include "kernels/backend.h"

mx_status mx__cpu_batch_norm_vectors(mx_bn_vectors_formula formula, const mx_bn_vectors *v);

#endif
