/* Max and average pooling on CUDA, with their backward kernels, by the
 * rules of the CPU's general loops (kernels/cpu/pool.c): values through
 * double, a NaN wins the max (the last one) and a tie keeps the first, the
 * indices in either encoding. Forward kernels run one thread per output;
 * backward ones one thread per (n, c) plane, adding the plane's outputs in
 * the CPU's order, so overlapping windows sum to the CPU's bits. Tensors
 * are contiguous (N, C, *S) or channels-last (N, C, H, W), every element
 * found through its view's strides. */
#include "kernels/cuda/common.cuh"
#include "kernels/pool_geom.h"

MX_HD static inline const char *at(const void *base, int64_t i, mx_dtype dtype) {
  return (const char *)base + i * dtype_bytes(dtype);
}

/* The element of plane n C + c at spatial position (i0, i1, i2) (padded on
 * the left to 3 dims, as the geometry's) in view v: through v's strides,
 * which serve its layout, contiguous or channels-last. */
MX_HD static inline int64_t element_offset(const mx_kview &v, int64_t plane, int64_t i0, int64_t i1, int64_t i2) {
  const int64_t i[3] = {i0, i1, i2};
  int spatial = v.ndim - 2;
  int64_t offset = plane / v.shape[1] * v.strides[0] + plane % v.shape[1] * v.strides[1];
  for (int j = 0; j < spatial; j++) offset += i[3 - spatial + j] * v.strides[2 + j];
  return offset;
}

/* The same for a flat position in an input plane (the indices' encoding). */
MX_HD static inline int64_t flat_offset(const mx_kview &v, const mx_pool_geom &g, int64_t plane, int64_t flat) {
  return element_offset(v, plane, flat / (g.in[1] * g.in[2]), flat / g.in[2] % g.in[1], flat % g.in[2]);
}

/* Output o of all planes' outputs: its plane and coordinates. */
MX_HD static inline void output_coords(const mx_pool_geom &g, int64_t e, int64_t *plane, int64_t *o) {
  int64_t out_plane = mx_pool_volume(g.out);
  *plane = e / out_plane;
  int64_t r = e % out_plane;
  o[2] = r % g.out[2], o[1] = r / g.out[2] % g.out[1], o[0] = r / (g.out[2] * g.out[1]);
}

struct max_pool_op {
  mx_pool_geom g;
  mx_kview out, indices, x;
  bool relu; /* max_pool_relu: the search sees relu of each input, as the CPU's */
  MX_HD void operator()(int64_t e) const {
    int64_t plane, o[3];
    output_coords(g, e, &plane, o);
    double best = -INFINITY;
    int64_t where = -1, offset = 0;
    MX_POOL_FOR_WINDOW(g, o[0], o[1], o[2], {
      double v = mx_element_load(at(x.data, element_offset(x, plane, i0, i1, i2), x.dtype), x.dtype);
      if (relu) v = mx_relu_f64(v);
      if (where < 0 || v > best || isnan(v)) {
        best = v;
        where = flat;
        offset = (k0 * g.k[1] + k1) * g.k[2] + k2;
      }
    })
    mx_element_store((char *)at(out.data, element_offset(out, plane, o[0], o[1], o[2]), out.dtype), out.dtype, best);
    int64_t i = element_offset(indices, plane, o[0], o[1], o[2]);
    if (indices.dtype == MX_U8) ((uint8_t *)indices.data)[i] = (uint8_t)offset;
    else ((int64_t *)indices.data)[i] = where < 0 ? 0 : where;
  }
};

/* dx[flat] += dy[o] for each output of one plane, in order. */
struct max_pool_backward_op {
  mx_pool_geom g;
  mx_kview dx, dy, indices;
  MX_HD void operator()(int64_t plane) const {
    int64_t in_plane = mx_pool_volume(g.in);
    for (int64_t i = 0; i < in_plane; i++)
      mx_element_store((char *)at(dx.data, flat_offset(dx, g, plane, i), dx.dtype), dx.dtype, 0.0);
    for (int64_t o0 = 0; o0 < g.out[0]; o0++)
      for (int64_t o1 = 0; o1 < g.out[1]; o1++)
        for (int64_t o2 = 0; o2 < g.out[2]; o2++) {
          int64_t e = element_offset(indices, plane, o0, o1, o2), flat;
          if (indices.dtype == MX_U8) { /* the window offset, row-major over the kernel */
            int64_t r = ((const uint8_t *)indices.data)[e];
            int64_t k2 = r % g.k[2], k1 = r / g.k[2] % g.k[1], k0 = r / (g.k[2] * g.k[1]);
            flat = mx_pool_window_corner(&g, o0, o1, o2) + (k0 * g.d[0] * g.in[1] + k1 * g.d[1]) * g.in[2] +
                   k2 * g.d[2];
          } else {
            flat = ((const int64_t *)indices.data)[e];
          }
          char *target = (char *)at(dx.data, flat_offset(dx, g, plane, flat), dx.dtype);
          double grad = mx_element_load(at(dy.data, element_offset(dy, plane, o0, o1, o2), dy.dtype), dy.dtype);
          mx_element_store(target, dx.dtype, mx_element_load(target, dx.dtype) + grad);
        }
  }
};

/* The window's divisor: its whole volume when the padding counts, else
 * the elements inside the input (the product of each dim's count). */
MX_HD static double divisor(const mx_pool_geom &g, bool count_include_pad, int64_t o0, int64_t o1,
                            int64_t o2) {
  if (count_include_pad) return (double)mx_pool_volume(g.k);
  const int64_t o[3] = {o0, o1, o2};
  double n = 1;
  for (int i = 0; i < 3; i++) {
    int64_t inside = 0;
    for (int64_t k = 0; k < g.k[i]; k++) {
      int64_t at_k = o[i] * g.s[i] - g.p[i] + k * g.d[i];
      inside += at_k >= 0 && at_k < g.in[i];
    }
    n *= (double)inside;
  }
  return n > 0 ? n : 1;
}

struct avg_pool_op {
  mx_pool_geom g;
  mx_kview out, x;
  bool count_include_pad;
  MX_HD void operator()(int64_t e) const {
    int64_t plane, o[3];
    output_coords(g, e, &plane, o);
    double sum = 0;
    MX_POOL_FOR_WINDOW(g, o[0], o[1], o[2],
                       { sum += mx_element_load(at(x.data, flat_offset(x, g, plane, flat), x.dtype), x.dtype); })
    mx_element_store((char *)at(out.data, element_offset(out, plane, o[0], o[1], o[2]), out.dtype), out.dtype,
                     sum / divisor(g, count_include_pad, o[0], o[1], o[2]));
  }
};

struct avg_pool_backward_op {
  mx_pool_geom g;
  mx_kview dx, dy;
  bool count_include_pad;
  MX_HD void operator()(int64_t plane) const {
    int64_t in_plane = mx_pool_volume(g.in), out_plane = mx_pool_volume(g.out);
    for (int64_t i = 0; i < in_plane; i++)
      mx_element_store((char *)at(dx.data, flat_offset(dx, g, plane, i), dx.dtype), dx.dtype, 0.0);
    for (int64_t o = 0; o < out_plane; o++) {
      int64_t o2 = o % g.out[2], o1 = o / g.out[2] % g.out[1], o0 = o / (g.out[2] * g.out[1]);
      double grad = mx_element_load(at(dy.data, element_offset(dy, plane, o0, o1, o2), dy.dtype), dy.dtype) /
                    divisor(g, count_include_pad, o0, o1, o2);
      MX_POOL_FOR_WINDOW(g, o0, o1, o2, {
        char *target = (char *)at(dx.data, flat_offset(dx, g, plane, flat), dx.dtype);
        mx_element_store(target, dx.dtype, mx_element_load(target, dx.dtype) + grad);
      })
    }
  }
};

mx_status mx__cuda_max_pool(const mx_kview *out, const mx_kview *indices, const mx_kview *x,
                            const mx_pool_params *p) {
  max_pool_op op = {mx_pool_geom_of(x, out, p), *out, *indices, *x, p->relu};
  return launch_elementwise("launch of kernel max_pool", mx__kview_numel(out), op);
}

mx_status mx__cuda_max_pool_backward(const mx_kview *dx, const mx_kview *dy, const mx_kview *indices,
                                     const mx_pool_params *p) {
  max_pool_backward_op op = {mx_pool_geom_of(dx, dy, p), *dx, *dy, *indices};
  return launch_elementwise("launch of kernel max_pool_backward", op.g.planes, op);
}

mx_status mx__cuda_avg_pool(const mx_kview *out, const mx_kview *x, const mx_pool_params *p) {
  avg_pool_op op = {mx_pool_geom_of(x, out, p), *out, *x, p->count_include_pad};
  return launch_elementwise("launch of kernel avg_pool", mx__kview_numel(out), op);
}

mx_status mx__cuda_avg_pool_backward(const mx_kview *dx, const mx_kview *dy, const mx_pool_params *p) {
  avg_pool_backward_op op = {mx_pool_geom_of(dx, dy, p), *dx, *dy, p->count_include_pad};
  return launch_elementwise("launch of kernel avg_pool_backward", op.g.planes, op);
}
