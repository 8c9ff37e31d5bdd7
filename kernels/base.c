/* dtype and status tables, and the thread-local error message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels/base_internal.h"

static const size_t dtype_sizes[] = {
#define X(name, ctype, size, str) size,
    MX_DTYPE_MAP(X)
#undef X
};
static const char *const dtype_names[] = {
#define X(name, ctype, size, str) str,
    MX_DTYPE_MAP(X)
#undef X
};
static const char *const status_strs[] = {
#define X(name, desc) desc,
    MX_STATUS_MAP(X)
#undef X
};
_Static_assert(sizeof dtype_sizes / sizeof *dtype_sizes == MX_DTYPE_COUNT, "dtype table");
_Static_assert(sizeof status_strs / sizeof *status_strs == MX_STATUS_COUNT, "status table");

bool mx_dtype_valid(mx_dtype dtype) { return (unsigned)dtype < MX_DTYPE_COUNT; }

size_t mx_dtype_size(mx_dtype dtype) { return mx_dtype_valid(dtype) ? dtype_sizes[dtype] : 0; }

const char *mx_dtype_name(mx_dtype dtype) {
  return mx_dtype_valid(dtype) ? dtype_names[dtype] : "invalid dtype";
}

bool mx_dtype_is_floating(mx_dtype dtype) {
  return dtype == MX_F32 || dtype == MX_F64 || dtype == MX_F16 || dtype == MX_BF16;
}

const char *mx_device_name(mx_device device) {
  switch (device) {
  case MX_CPU: return "cpu";
  case MX_CUDA: return "cuda";
  default: return "invalid device";
  }
}

const char *mx_status_str(mx_status status) {
  return (unsigned)status < MX_STATUS_COUNT ? status_strs[status] : "unknown status";
}

/* --- the thread-local error ------------------------------------------------ */

static _Thread_local char error_message[1024];
static _Thread_local mx_status error_status = MX_OK;

const char *mx_last_error(void) { return error_message; }
mx_status mx_last_status(void) { return error_status; }

void mx_clear_error(void) {
  error_message[0] = '\0';
  error_status = MX_OK;
}

mx_status mx__error(mx_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error_message, sizeof error_message, fmt, ap);
  va_end(ap);
  error_status = status;
  return status;
}

mx_status mx__error_prefix(const char *op) {
  char why[sizeof error_message];
  snprintf(why, sizeof why, "%s", error_message);
  return mx__error(error_status, "%s: %s", op, why);
}

mx_status mx__null_input(const char *op, const char *arg) {
  if (error_status == MX_OK)
    mx__error(MX_NULL_INPUT, "%s: argument '%s' is NULL", op, arg);
  return MX_NULL_INPUT;
}

const char *mx__dims_str(char *buf, int ndim, const int64_t *dims) {
  size_t n = 0;
  buf[n++] = '[';
  for (int i = 0; i < ndim && n < MX__DIMS_STR - 24; i++)
    n += (size_t)snprintf(buf + n, MX__DIMS_STR - n, i ? ",%lld" : "%lld", (long long)dims[i]);
  buf[n++] = ']';
  buf[n] = '\0';
  return buf;
}

bool mx__numel_overflows(int ndim, const int64_t *dims, int64_t *numel) {
  int64_t count = 1, extent = 1;
  for (int i = 0; i < ndim; i++) {
    if (mx__mul_overflows(extent, dims[i] ? dims[i] : 1, &extent)) return true;
    count *= dims[i]; /* |count| <= extent: no overflow */
  }
  *numel = count;
  return false;
}

/* No check here: a kernel only sees tensors whose shapes passed
 * mx__numel_overflows. */
int64_t mx__kview_numel(const mx_kview *v) {
  int64_t n = 1;
  for (int i = 0; i < v->ndim; i++) n *= v->shape[i];
  return n;
}

void mx__channels_last_strides(const int64_t shape[4], int64_t strides[4]) {
  static const int memory_order[4] = {1, 3, 2, 0}; /* innermost first: C, W, H, N */
  int64_t s = 1;
  for (int k = 0; k < 4; k++) {
    strides[memory_order[k]] = s;
    s *= shape[memory_order[k]] > 1 ? shape[memory_order[k]] : 1;
  }
}

bool mx__kview_is_channels_last(const mx_kview *v) {
  if (v->ndim != 4) return false;
  int64_t expected[4];
  mx__channels_last_strides(v->shape, expected);
  for (int i = 0; i < 4; i++)
    if (v->shape[i] != 1 && v->strides[i] != expected[i]) return false;
  return true;
}

bool mx__kview_is_contiguous(const mx_kview *v) {
  int64_t expected = 1;
  for (int i = v->ndim - 1; i >= 0; i--) {
    if (v->shape[i] != 1 && v->strides[i] != expected) return false;
    expected *= v->shape[i];
  }
  return true;
}
