/* The CPU's sort kernel (a slot of the CPU backend). */
#ifndef MX_KERNELS_CPU_SORT_H
#define MX_KERNELS_CPU_SORT_H

#include "kernels/backend.h"

mx_status mx__cpu_sort(const mx_kview *values, const mx_kview *indices, const mx_kview *in, int dim, bool descending);

#endif
