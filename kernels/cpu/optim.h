/* The optimizer kernels on the CPU (kernels/backend.h says what each computes). */
#ifndef MX_KERNELS_CPU_OPTIM_H
#define MX_KERNELS_CPU_OPTIM_H

#include "kernels/backend.h"

mx_status mx__cpu_sgd_step(int n, const mx_optim_item *items, const mx_sgd_hparams *h, const float *found_inf,
                           const float *grad_scale);
mx_status mx__cpu_adam_step(int n, const mx_optim_item *items, const mx_adam_hparams *h, const float *found_inf,
                            const float *grad_scale);

#endif
