/* The CPU's reduction and scan kernels (slots of the CPU backend). */
#ifndef MX_KERNELS_CPU_REDUCE_H
#define MX_KERNELS_CPU_REDUCE_H

#include "kernels/backend.h"

mx_status mx__cpu_reduce(int code, const mx_kview *out, const mx_kview *index, const mx_kview *in, uint32_t mask);
mx_status mx__cpu_scan(int code, const mx_kview *out, const mx_kview *in, int dim, bool reverse);

#endif
