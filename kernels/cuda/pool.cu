/* Max and average pooling on CUDA, with their backward kernels, by the
 * rules of the CPU's general loops (kernels/cpu/pool.c): values through
 * double, a NaN wins the max (the last one) and a tie keeps the first, the
 * indices in either encoding. Forward kernels run one thread per output,
 * backward ones one thread per input element: it gathers the gradients of
 * the windows that cover it, in the order of the CPU's scatter (outputs in
 * row-major order, each sum rounded to dx's dtype), so overlapping windows
 * sum to the CPU's bits. Tensors are contiguous (N, C, *S) or channels-last
 * (N, C, H, W), every element found through its view's strides, and the
 * threads take the elements in the tensors' memory order. */
#include "kernels/conv_geom.h"
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

/* The element each thread takes: element e of all planes in (n, c, *S)
 * order, or for channels-last tensors in their memory order (n, h, w, c),
 * so that neighbouring threads touch neighbouring bytes, not bytes C
 * elements apart. */
struct element_order {
  int64_t channels;
  bool channels_last;
};

static element_order order_of(const mx_kview &v) {
  element_order order = {v.shape[1], v.ndim == 4 && mx__kview_is_channels_last(&v) && !mx__kview_is_contiguous(&v)};
  return order;
}

/* Element e of tensors of spatial size `size` (padded to 3 dims), taken in
 * that order: its plane and coordinates. */
MX_HD static inline void coords(const element_order &order, const int64_t *size, int64_t e, int64_t *plane,
                                int64_t *q) {
  if (order.channels_last) { /* 2 spatial dims: size[0] is 1 */
    int64_t c = e % order.channels, pixel = e / order.channels;
    q[0] = 0, q[2] = pixel % size[2], q[1] = pixel / size[2] % size[1];
    *plane = pixel / (size[2] * size[1]) * order.channels + c;
    return;
  }
  int64_t volume = mx_pool_volume(size);
  *plane = e / volume;
  int64_t r = e % volume;
  q[2] = r % size[2], q[1] = r / size[2] % size[1], q[0] = r / (size[2] * size[1]);
}

struct max_pool_op {
  mx_pool_geom g;
  mx_kview out, indices, x;
  bool relu; /* max_pool_relu: the search sees relu of each input, as the CPU's */
  element_order order;
  MX_HD void operator()(int64_t e) const {
    int64_t plane, o[3];
    coords(order, g.out, e, &plane, o);
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

/* v rounded to dtype, as storing it and loading it back does. */
MX_HD static inline double rounded(double v, mx_dtype dtype) {
  uint64_t bits = 0;
  mx_element_store(&bits, dtype, v);
  return mx_element_load(&bits, dtype);
}

/* BODY for each window (o0, o1, o2) that covers input (i0, i1, i2) at its
 * element (k0, k1, k2), the outputs in row-major order (k descending). */
#define FOR_COVERING_WINDOW(g, i, BODY)                                                                  \
  for (int64_t k0 = (g).k[0] - 1; k0 >= 0; k0--) {                                                     \
    int64_t o0, o1, o2;                                                                                \
    if (!mx_conv_tap_source(i[0], (g).out[0], (g).s[0], k0 * (g).d[0] - (g).p[0], &o0)) continue;       \
    for (int64_t k1 = (g).k[1] - 1; k1 >= 0; k1--) {                                                   \
      if (!mx_conv_tap_source(i[1], (g).out[1], (g).s[1], k1 * (g).d[1] - (g).p[1], &o1)) continue;     \
      for (int64_t k2 = (g).k[2] - 1; k2 >= 0; k2--) {                                                 \
        if (!mx_conv_tap_source(i[2], (g).out[2], (g).s[2], k2 * (g).d[2] - (g).p[2], &o2)) continue;   \
        BODY                                                                                           \
      }                                                                                                \
    }                                                                                                  \
  }

/* dx at input e: the sum of dy over the windows whose maximum it is. */
struct max_pool_backward_op {
  mx_pool_geom g;
  mx_kview dx, dy, indices;
  element_order order;
  MX_HD void operator()(int64_t e) const {
    int64_t plane, i[3];
    coords(order, g.in, e, &plane, i);
    int64_t flat = (i[0] * g.in[1] + i[1]) * g.in[2] + i[2];
    double sum = 0;
    FOR_COVERING_WINDOW(g, i, {
      int64_t where = element_offset(indices, plane, o0, o1, o2);
      bool chosen = indices.dtype == MX_U8 /* the window offset, row-major over the kernel */
                        ? ((const uint8_t *)indices.data)[where] == (k0 * g.k[1] + k1) * g.k[2] + k2
                        : ((const int64_t *)indices.data)[where] == flat;
      if (chosen)
        sum = rounded(sum + mx_element_load(at(dy.data, element_offset(dy, plane, o0, o1, o2), dy.dtype), dy.dtype),
                      dx.dtype);
    })
    mx_element_store((char *)at(dx.data, element_offset(dx, plane, i[0], i[1], i[2]), dx.dtype), dx.dtype, sum);
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
  element_order order;
  MX_HD void operator()(int64_t e) const {
    int64_t plane, o[3];
    coords(order, g.out, e, &plane, o);
    double sum = 0;
    MX_POOL_FOR_WINDOW(g, o[0], o[1], o[2],
                       { sum += mx_element_load(at(x.data, flat_offset(x, g, plane, flat), x.dtype), x.dtype); })
    mx_element_store((char *)at(out.data, element_offset(out, plane, o[0], o[1], o[2]), out.dtype), out.dtype,
                     sum / divisor(g, count_include_pad, o[0], o[1], o[2]));
  }
};

/* dx at input e: each covering window's dy over its divisor, summed. */
struct avg_pool_backward_op {
  mx_pool_geom g;
  mx_kview dx, dy;
  bool count_include_pad;
  element_order order;
  MX_HD void operator()(int64_t e) const {
    int64_t plane, i[3];
    coords(order, g.in, e, &plane, i);
    double sum = 0;
    FOR_COVERING_WINDOW(g, i, {
      double grad = mx_element_load(at(dy.data, element_offset(dy, plane, o0, o1, o2), dy.dtype), dy.dtype) /
                    divisor(g, count_include_pad, o0, o1, o2);
      sum = rounded(sum + grad, dx.dtype);
    })
    mx_element_store((char *)at(dx.data, element_offset(dx, plane, i[0], i[1], i[2]), dx.dtype), dx.dtype, sum);
  }
};

mx_status mx__cuda_max_pool(const mx_kview *out, const mx_kview *indices, const mx_kview *x,
                            const mx_pool_params *p) {
  max_pool_op op = {mx_pool_geom_of(x, out, p), *out, *indices, *x, p->relu, order_of(*out)};
  return launch_elementwise("launch of kernel max_pool", mx__kview_numel(out), op);
}

mx_status mx__cuda_max_pool_backward(const mx_kview *dx, const mx_kview *dy, const mx_kview *indices,
                                     const mx_pool_params *p) {
  max_pool_backward_op op = {mx_pool_geom_of(dx, dy, p), *dx, *dy, *indices, order_of(*dx)};
  return launch_elementwise("launch of kernel max_pool_backward", mx__kview_numel(dx), op);
}

mx_status mx__cuda_avg_pool(const mx_kview *out, const mx_kview *x, const mx_pool_params *p) {
  avg_pool_op op = {mx_pool_geom_of(x, out, p), *out, *x, p->count_include_pad, order_of(*out)};
  return launch_elementwise("launch of kernel avg_pool", mx__kview_numel(out), op);
}

mx_status mx__cuda_avg_pool_backward(const mx_kview *dx, const mx_kview *dy, const mx_pool_params *p) {
  avg_pool_backward_op op = {mx_pool_geom_of(dx, dy, p), *dx, *dy, p->count_include_pad, order_of(*dx)};
  return launch_elementwise("launch of kernel avg_pool_backward", mx__kview_numel(dx), op);
}
