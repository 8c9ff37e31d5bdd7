/* A pooling window's geometry as plain numbers, shared by the CPU loops
 * (kernels/cpu/pool.c) and the CUDA kernels (kernels/cuda/pool.cu): shapes
 * padded on the left to 3 spatial dims, window corners and offsets, and
 * MX_POOL_FOR_WINDOW, the walk over a window's elements inside the input. */
#ifndef MX_KERNELS_POOL_GEOM_H
#define MX_KERNELS_POOL_GEOM_H

#include "kernels/backend.h"

typedef struct {
  int64_t planes;              /* N * C */
  int64_t in[3], out[3];       /* D, H, W of input and output */
  int64_t k[3], s[3], p[3], d[3];
} mx_pool_geom;

/* Shapes padded on the left to 3 spatial dims. */
MX_HD static inline mx_pool_geom mx_pool_geom_of(const mx_kview *in, const mx_kview *out,
                                                 const mx_pool_params *params) {
  mx_pool_geom g;
  g.planes = in->shape[0] * in->shape[1];
  int lead = 3 - params->spatial;
  for (int i = 0; i < 3; i++) {
    int j = i - lead;
    bool real = j >= 0;
    g.in[i] = real ? in->shape[2 + j] : 1;
    g.out[i] = real ? out->shape[2 + j] : 1;
    g.k[i] = real ? params->kernel[j] : 1;
    g.s[i] = real ? params->stride[j] : 1;
    g.p[i] = real ? params->padding[j] : 0;
    g.d[i] = real && params->dilation[j] ? params->dilation[j] : 1;
  }
  return g;
}

MX_HD static inline int64_t mx_pool_volume(const int64_t *v) { return v[0] * v[1] * v[2]; }

/* The flat position of the window's (0, 0, 0) element for output (o0, o1, o2);
 * it may lie in the padding, but corner + delta is exact wherever the sum
 * lands inside the input, the flat position being linear in each coordinate. */
MX_HD static inline int64_t mx_pool_window_corner(const mx_pool_geom *g, int64_t o0, int64_t o1, int64_t o2) {
  return ((o0 * g->s[0] - g->p[0]) * g->in[1] + (o1 * g->s[1] - g->p[1])) * g->in[2] + (o2 * g->s[2] - g->p[2]);
}

/* delta[offset]: each window element's flat displacement from the corner. */
MX_HD static inline void mx_pool_window_deltas(const mx_pool_geom *g, int64_t *delta) {
  int64_t r = 0;
  for (int64_t k0 = 0; k0 < g->k[0]; k0++)
    for (int64_t k1 = 0; k1 < g->k[1]; k1++)
      for (int64_t k2 = 0; k2 < g->k[2]; k2++)
        delta[r++] = (k0 * g->d[0] * g->in[1] + k1 * g->d[1]) * g->in[2] + k2 * g->d[2];
}

#define MX_POOL_FOR_WINDOW(g, o0, o1, o2, BODY)                                                    \
  for (int64_t k0 = 0; k0 < (g).k[0]; k0++) {                                                      \
    int64_t i0 = (o0) * (g).s[0] - (g).p[0] + k0 * (g).d[0];                                       \
    if (i0 < 0 || i0 >= (g).in[0]) continue;                                                       \
    for (int64_t k1 = 0; k1 < (g).k[1]; k1++) {                                                    \
      int64_t i1 = (o1) * (g).s[1] - (g).p[1] + k1 * (g).d[1];                                     \
      if (i1 < 0 || i1 >= (g).in[1]) continue;                                                     \
      for (int64_t k2 = 0; k2 < (g).k[2]; k2++) {                                                  \
        int64_t i2 = (o2) * (g).s[2] - (g).p[2] + k2 * (g).d[2];                                   \
        if (i2 < 0 || i2 >= (g).in[2]) continue;                                                   \
        int64_t flat = (i0 * (g).in[1] + i1) * (g).in[2] + i2;                                     \
        BODY                                                                                       \
      }                                                                                            \
    }                                                                                              \
  }

#endif
