/* A stable sort of one line along dim, shared by the CPU (kernels/cpu/sort.c:
 * a loop over the lines) and CUDA (kernels/cuda/sort.cu: a thread per line),
 * so the two give the same values and indices. The order is PyTorch's: NaN
 * counts as larger than every number (last ascending, first descending),
 * and equal elements keep their input order either way. */
#ifndef MX_KERNELS_SORT_LINE_H
#define MX_KERNELS_SORT_LINE_H

#include "kernels/scan_line.h"

/* Whether the element at a goes before the one at b (both of dtype). int64
 * compares as int64 (a double would merge values beyond 2^53); every other
 * dtype is exact as a double. */
MX_HD static inline bool mx_sort_before(const char *a, const char *b, mx_dtype dtype, bool descending) {
  if (descending) {
    const char *t = a;
    a = b;
    b = t;
  }
  if (dtype == MX_I64) return *(const int64_t *)a < *(const int64_t *)b;
  double x = mx_element_load(a, dtype), y = mx_element_load(b, dtype);
  return x < y || (x == x && y != y); /* a number before NaN */
}

/* Sorts line `line` of in (row-major over in's other dims) into the same
 * line of values (in's dtype and shape) and indices (int64, in's shape):
 * values[k] = in[indices[k]] along dim. perm and scratch hold the line's
 * length of int64 each. A bottom-up merge sort: stable, O(n log n), no
 * recursion (a device thread's stack is small). */
MX_HD static inline void mx_sort_line(const mx_kview *values, const mx_kview *indices, const mx_kview *in,
                                      int64_t elem_size, int dim, bool descending, int64_t line, int64_t *perm,
                                      int64_t *scratch) {
  int64_t len = in->shape[dim], in_off = 0, val_off = 0, idx_off = 0, rest = line;
  for (int d = in->ndim - 1; d >= 0; d--) {
    if (d == dim) continue;
    int64_t i = rest % in->shape[d];
    rest /= in->shape[d];
    in_off += i * in->strides[d];
    val_off += i * values->strides[d];
    idx_off += i * indices->strides[d];
  }
  const char *base = (const char *)in->data + in_off * elem_size;
  int64_t step = in->strides[dim] * elem_size;
  for (int64_t k = 0; k < len; k++) perm[k] = k;
  int64_t *src = perm, *dst = scratch;
  for (int64_t width = 1; width < len; width *= 2) {
    for (int64_t lo = 0; lo < len; lo += 2 * width) {
      int64_t mid = lo + width < len ? lo + width : len, hi = lo + 2 * width < len ? lo + 2 * width : len;
      int64_t l = lo, r = mid, o = lo;
      /* the right run's element goes first only when strictly before: stable */
      while (l < mid && r < hi)
        dst[o++] = mx_sort_before(base + src[r] * step, base + src[l] * step, in->dtype, descending) ? src[r++]
                                                                                                  : src[l++];
      while (l < mid) dst[o++] = src[l++];
      while (r < hi) dst[o++] = src[r++];
    }
    int64_t *t = src;
    src = dst;
    dst = t;
  }
  for (int64_t k = 0; k < len; k++) {
    char *v = (char *)values->data + (val_off + k * values->strides[dim]) * elem_size;
    mx_element_convert(v, values->dtype, base + src[k] * step, in->dtype);
    ((int64_t *)indices->data)[idx_off + k * indices->strides[dim]] = src[k];
  }
}

#endif
