/* A convolution's geometry as plain numbers, shared by the CPU loops
 * (kernels/cpu/conv.c) and the CUDA kernels (kernels/cuda/conv.cu): the
 * shapes as 3 spatial dims, the element strides, and which output taps
 * land inside the input. */
#ifndef MX_KERNELS_CONV_GEOM_H
#define MX_KERNELS_CONV_GEOM_H

#include <string.h>

#include "kernels/backend.h"

MX_HD static inline int64_t mx_floor_div(int64_t a, int64_t b) { /* b > 0 */
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

MX_HD static inline int64_t mx_ceil_div(int64_t a, int64_t b) { /* b > 0 */
  return a >= 0 ? (a + b - 1) / b : -(-a / b);
}

/* Everything as 3 spatial dims (D, H, W); missing leading dims have size 1. */
typedef struct {
  int64_t N, G, ICg, OCg;      /* batch, groups, channels per group in and out */
  int64_t in[3], out[3], k[3]; /* x, y and kernel sizes */
  int64_t stride[3], pad[3], dil[3];
  int64_t xs[5], ws[5], ys[5]; /* element strides: (n, c, d, h, w), (o, i, d, h, w) */
  void *x, *w, *y;
  const void *bias; /* forward: NULL or (C_out), contiguous */
} mx_conv_geom;

MX_HD static inline mx_conv_geom mx_conv_geom_of(const mx_kview *x, const mx_kview *w, const mx_kview *y,
                                                 const mx_conv_params *p) {
  mx_conv_geom g;
  memset(&g, 0, sizeof g);
  g.N = x->shape[0];
  g.G = p->groups;
  g.ICg = x->shape[1] / p->groups;
  g.OCg = y->shape[1] / p->groups;
  for (int i = 0; i < 2; i++) g.xs[i] = x->strides[i], g.ws[i] = w->strides[i], g.ys[i] = y->strides[i];
  for (int d = 0; d < 3; d++) g.in[d] = g.out[d] = g.k[d] = g.stride[d] = g.dil[d] = 1;
  for (int j = 0; j < p->spatial; j++) {
    int d = 3 - p->spatial + j;
    g.in[d] = x->shape[2 + j];
    g.out[d] = y->shape[2 + j];
    g.k[d] = w->shape[2 + j];
    g.stride[d] = p->stride[j];
    g.pad[d] = p->padding[j];
    g.dil[d] = p->dilation[j];
    g.xs[2 + d] = x->strides[2 + j];
    g.ws[2 + d] = w->strides[2 + j];
    g.ys[2 + d] = y->strides[2 + j];
  }
  g.x = x->data;
  g.w = w->data;
  g.y = y->data;
  return g;
}

/* The outputs o in [o_begin, o_end) whose tap (at offset off = k*dil - pad)
 * lands inside the input: 0 <= o*stride + off < in. Empty when hi <= lo. */
MX_HD static inline void mx_conv_tap_range(int64_t in, int64_t o_begin, int64_t o_end, int64_t stride, int64_t off,
                                           int64_t *lo, int64_t *hi) {
  int64_t a = mx_ceil_div(-off, stride), b = mx_floor_div(in - 1 - off, stride) + 1;
  *lo = a > o_begin ? a : o_begin;
  *hi = b < o_end ? b : o_end;
}

/* The outputs o in [0, out) whose tap lands in [i_begin, i_end). */
MX_HD static inline void mx_conv_tap_range_into(int64_t i_begin, int64_t i_end, int64_t out, int64_t stride,
                                                int64_t off, int64_t *lo, int64_t *hi) {
  int64_t a = mx_ceil_div(i_begin - off, stride), b = mx_floor_div(i_end - 1 - off, stride) + 1;
  *lo = a > 0 ? a : 0;
  *hi = b < out ? b : out;
}

/* The output o in [0, out) whose tap lands on input i, if there is one. */
MX_HD static inline bool mx_conv_tap_source(int64_t i, int64_t out, int64_t stride, int64_t off, int64_t *o) {
  int64_t r = i - off;
  if (r < 0 || r % stride) return false;
  *o = r / stride;
  return *o < out;
}

#endif
