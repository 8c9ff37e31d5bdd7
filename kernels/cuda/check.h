/* Check macros for CUDA, cuBLAS and cuDNN calls: a failure becomes an mx_status and a message. */
#ifndef MX_KERNELS_CUDA_CHECK_H
#define MX_KERNELS_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "kernels/base_internal.h"

/* Every library gets its checker from this one generator:
 *
 *     mx_status NAME(TYPE status, const char *call, const char *file, int line)
 *
 * returns MX_OK for OK, and otherwise sets the thread's error to
 *
 *     cudaMallocAsync(&p, bytes, stream) failed at kernels/cuda/backend.cu:120:
 *     out of memory (cudaErrorMemoryAllocation = 2)
 *
 * and returns MX_OUT_OF_MEMORY when IS_OOM(status) holds, MX_BACKEND_ERROR
 * otherwise. AFTER runs on failure (the CUDA runtime uses it to clear its
 * non-sticky last error, so a later cudaGetLastError() after a kernel launch
 * does not report this old failure again). Nothing here exits or aborts. */
#define MX__DEFINE_CHECKER(NAME, TYPE, OK, IS_OOM, DESCRIBE, CODE_NAME, AFTER)                  \
  static inline mx_status NAME(TYPE status, const char *call, const char *file, int line) {      \
    if (status == (OK)) return MX_OK;                                                             \
    AFTER;                                                                                        \
    return mx__error(IS_OOM(status) ? MX_OUT_OF_MEMORY : MX_BACKEND_ERROR,                        \
                     "%s failed at %s:%d: %s (%s = %d)", call, file, line, DESCRIBE(status),      \
                     CODE_NAME(status), (int)status);                                             \
  }

#define MX__CUDA_IS_OOM(s) ((s) == cudaErrorMemoryAllocation)
#define MX__CUBLAS_IS_OOM(s) ((s) == CUBLAS_STATUS_ALLOC_FAILED)
#if CUDNN_MAJOR >= 9
#define MX__CUDNN_IS_OOM(s)                                                                       \
  ((s) == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||                                   \
   (s) == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
#else
#define MX__CUDNN_IS_OOM(s) ((s) == CUDNN_STATUS_ALLOC_FAILED)
#endif
/* cudnnGetErrorString already gives the status's name ("CUDNN_STATUS_..."). */
#define MX__CUDNN_CODE_NAME(s) "cudnnStatus_t"

MX__DEFINE_CHECKER(mx__cuda_status, cudaError_t, cudaSuccess, MX__CUDA_IS_OOM, cudaGetErrorString,
                   cudaGetErrorName, (void)cudaGetLastError())
MX__DEFINE_CHECKER(mx__cublas_status, cublasStatus_t, CUBLAS_STATUS_SUCCESS, MX__CUBLAS_IS_OOM,
                   cublasGetStatusString, cublasGetStatusName, (void)0)
MX__DEFINE_CHECKER(mx__cudnn_status, cudnnStatus_t, CUDNN_STATUS_SUCCESS, MX__CUDNN_IS_OOM,
                   cudnnGetErrorString, MX__CUDNN_CODE_NAME, (void)0)

/* The status of one call, as an expression: MX_OK, or the failure's status
 * with the message set. */
#define MX_CUDA_STATUS(call) mx__cuda_status((call), #call, __FILE__, __LINE__)
#define MX_CUBLAS_STATUS(call) mx__cublas_status((call), #call, __FILE__, __LINE__)
#define MX_CUDNN_STATUS(call) mx__cudnn_status((call), #call, __FILE__, __LINE__)

/* Returns the failure's status from the enclosing function (which returns
 * mx_status). */
#define MX__RETURN_IF_FAILED(status_expr)                                                         \
  do {                                                                                            \
    mx_status mx__checked = (status_expr);                                                        \
    if (mx__checked != MX_OK) return mx__checked;                                                 \
  } while (0)
#define MX_CUDA_CHECK(call) MX__RETURN_IF_FAILED(MX_CUDA_STATUS(call))
#define MX_CUBLAS_CHECK(call) MX__RETURN_IF_FAILED(MX_CUBLAS_STATUS(call))
#define MX_CUDNN_CHECK(call) MX__RETURN_IF_FAILED(MX_CUDNN_STATUS(call))

/* After a kernel launch: a bad configuration or an earlier asynchronous
 * fault, reported as the launch of `what` (a string). */
#define MX_CUDA_CHECK_LAUNCH(what) \
  MX__RETURN_IF_FAILED(mx__cuda_status(cudaGetLastError(), (what), __FILE__, __LINE__))

#endif
