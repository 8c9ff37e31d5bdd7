/* The CPU's indexing and softmax kernels (slots of the CPU backend). */
#ifndef MX_KERNELS_CPU_INDEXING_H
#define MX_KERNELS_CPU_INDEXING_H

#include "kernels/base_internal.h"

mx_status mx__cpu_gather(const mx_kview *out, const mx_kview *x, const mx_kview *index, int dim);
mx_status mx__cpu_scatter(const mx_kview *out, const mx_kview *index, const mx_kview *src, int dim, bool accumulate);
mx_status mx__cpu_index_select(const mx_kview *out, const mx_kview *x, const mx_kview *index, int dim);
mx_status mx__cpu_index_add(const mx_kview *out, const mx_kview *index, const mx_kview *src, int dim, double alpha,
                            bool accumulate);
mx_status mx__cpu_softmax(const mx_kview *out, const mx_kview *x, int dim, bool log_softmax);

#endif
