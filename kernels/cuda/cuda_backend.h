/* The CUDA backend's entry points: kernels/backend.c finds them by name
 * (dlsym) in libmixgrad_cuda.so, so they keep C linkage and these names. */
#ifndef MX_KERNELS_CUDA_CUDA_BACKEND_H
#define MX_KERNELS_CUDA_CUDA_BACKEND_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Devices the CUDA runtime sees now; 0 when there is no driver or GPU. */
int mx__cuda_device_count(void);
/* The backend, initialised on first use (stream, memory pool); NULL with
 * "no CUDA device" (or the runtime's own error) when none can be used. */
const mx_backend *mx__cuda_backend_get(void);

#ifdef __cplusplus
}
#endif

#endif
