/* The CUDA backend's entry points: kernels/backend.c finds them by name
 * (dlsym) in libmixgrad_cuda.so, so they keep C linkage and these names.
 *
 * The module does not link libmixgrad.so: the library's functions it calls
 * come in a table that kernels/backend.c hands over (mx__cuda_init) before
 * anything else, and kernels/cuda/host.cu defines each of them as a call
 * through that table. So libmixgrad.so exports none of the internal ones
 * (it is built with hidden visibility), and the module always calls back
 * into the copy of the library that loaded it, shared or static. */
#ifndef MX_KERNELS_CUDA_CUDA_BACKEND_H
#define MX_KERNELS_CUDA_CUDA_BACKEND_H

#include "kernels/backend.h"
#include "kernels/conv_check.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the module calls in the library. */
typedef struct {
  mx_status (*error)(mx_status status, const char *fmt, ...);
  const char *(*last_error)(void);
  mx_status (*last_status)(void);
  size_t (*dtype_size)(mx_dtype dtype);
  const char *(*dtype_name)(mx_dtype dtype);
  bool (*dtype_is_floating)(mx_dtype dtype);
  int64_t (*kview_numel)(const mx_kview *v);
  bool (*kview_is_contiguous)(const mx_kview *v);
  bool (*kview_is_channels_last)(const mx_kview *v);
  void (*channels_last_strides)(const int64_t shape[4], int64_t strides[4]);
  bool (*unary_has_int)(int code);
  bool (*binary_has_int)(int code);
  mx_status (*conv_check)(mx_conv_kind kind, const mx_kview *x, const mx_kview *w, const mx_kview *y,
                          const mx_kview *bias, const mx_conv_params *p);
  bool (*cudnn_allow_tf32)(void);
  bool (*cudnn_deterministic)(void);
  bool (*cudnn_benchmark)(void);
  void (*cudnn_count)(bool ran);
} mx__cuda_host;

/* Hands the module the library's functions; called once, first. */
void mx__cuda_init(const mx__cuda_host *host);
/* Devices the CUDA runtime sees now; 0 when there is no driver or GPU. */
int mx__cuda_device_count(void);
/* The backend, initialised on first use (stream, memory pool); NULL with
 * "no CUDA device" (or the runtime's own error) when none can be used. */
const mx_backend *mx__cuda_backend_get(void);

#ifdef __cplusplus
}
#endif

#endif
