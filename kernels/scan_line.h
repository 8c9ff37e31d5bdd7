/* A scan (cumulative SUM or PROD along dim, from the end when reverse) one
 * line at a time, shared by the CPU (kernels/cpu/reduce.c: a loop over
 * the lines) and CUDA (kernels/cuda/reduce.cu: a thread per line), so the
 * two give the same bits. Floats accumulate in double, rounded to out's
 * dtype at each element; an int64 out accumulates in int64, wrapping on
 * overflow as PyTorch's integers do. */
#ifndef MX_KERNELS_SCAN_LINE_H
#define MX_KERNELS_SCAN_LINE_H

#include "kernels/backend.h"
#include "kernels/math.h"

/* How many lines a scan along dim of in has: its elements with dim fixed. */
static inline int64_t mx_scan_lines(const mx_kview *in, int dim) {
  int64_t len = in->shape[dim];
  return len ? mx__kview_numel(in) / len : 0;
}

/* Scans line `line` of in (row-major over in's other dims) into the same
 * line of out, which has in's shape. in_size, out_size: their dtypes'
 * bytes. */
MX_HD static inline void mx_scan_line(int code, const mx_kview *out, const mx_kview *in, int64_t in_size,
                                      int64_t out_size, int dim, bool reverse, int64_t line) {
  int64_t len = in->shape[dim], in_off = 0, out_off = 0, rest = line;
  for (int d = in->ndim - 1; d >= 0; d--) {
    if (d == dim) continue;
    int64_t i = rest % in->shape[d];
    rest /= in->shape[d];
    in_off += i * in->strides[d];
    out_off += i * out->strides[d];
  }
  double acc = code == MX_RED_PROD ? 1 : 0;
  int64_t iacc = code == MX_RED_PROD ? 1 : 0;
  for (int64_t s = 0; s < len; s++) {
    int64_t k = reverse ? len - 1 - s : s;
    const char *src = (const char *)in->data + (in_off + k * in->strides[dim]) * in_size;
    char *dst = (char *)out->data + (out_off + k * out->strides[dim]) * out_size;
    if (out->dtype == MX_I64) {
      int64_t v = in->dtype == MX_I64 ? *(const int64_t *)src : (int64_t)mx_element_load(src, in->dtype);
      iacc = code == MX_RED_PROD ? mx_wrap_mul(iacc, v) : mx_wrap_add(iacc, v);
      *(int64_t *)dst = iacc;
    } else {
      double v = mx_element_load(src, in->dtype);
      acc = code == MX_RED_PROD ? acc * v : acc + v;
      mx_element_store(dst, out->dtype, acc);
    }
  }
}

#endif
