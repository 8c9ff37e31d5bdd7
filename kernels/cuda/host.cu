/* The library's functions the CUDA module calls, each a call through the
 * table kernels/backend.c hands over when it loads the module
 * (kernels/cuda/cuda_backend.h says why the module does not link them). */
#include <stdarg.h>
#include <stdio.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/elementwise.h"

static mx__cuda_host host;

extern "C" {

void mx__cuda_init(const mx__cuda_host *table) { host = *table; }

mx_status mx__error(mx_status status, const char *fmt, ...) {
  char message[1024]; /* the size of the library's own message buffer */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  return host.error(status, "%s", message);
}

const char *mx_last_error(void) { return host.last_error(); }
mx_status mx_last_status(void) { return host.last_status(); }
size_t mx_dtype_size(mx_dtype dtype) { return host.dtype_size(dtype); }
const char *mx_dtype_name(mx_dtype dtype) { return host.dtype_name(dtype); }
bool mx_dtype_is_floating(mx_dtype dtype) { return host.dtype_is_floating(dtype); }
int64_t mx__kview_numel(const mx_kview *v) { return host.kview_numel(v); }
bool mx__kview_is_contiguous(const mx_kview *v) { return host.kview_is_contiguous(v); }
bool mx__kview_is_channels_last(const mx_kview *v) { return host.kview_is_channels_last(v); }
void mx__channels_last_strides(const int64_t shape[4], int64_t strides[4]) { host.channels_last_strides(shape, strides); }
bool mx__unary_has_int(int code) { return host.unary_has_int(code); }
bool mx__binary_has_int(int code) { return host.binary_has_int(code); }
bool mx_cudnn_allow_tf32(void) { return host.cudnn_allow_tf32(); }
bool mx_cudnn_deterministic(void) { return host.cudnn_deterministic(); }
bool mx_cudnn_benchmark(void) { return host.cudnn_benchmark(); }
void mx__cudnn_count(bool ran) { host.cudnn_count(ran); }

mx_status mx__conv_check(mx_conv_kind kind, const mx_kview *x, const mx_kview *w, const mx_kview *y,
                         const mx_kview *bias, const mx_conv_params *p) {
  return host.conv_check(kind, x, w, y, bias, p);
}

}  // extern "C"
