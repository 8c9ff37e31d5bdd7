/* Max and average pooling on CUDA, with their backward kernels, by the
 * rules of the CPU's loops (kernels/cpu/pool.c): a NaN wins the max (the
 * last one) and a tie keeps the first, the indices in either encoding,
 * averages summed in double. Forward kernels run one thread per output,
 * backward ones one thread per input element: it gathers the gradients of
 * the windows that cover it, in the order of the CPU's scatter (outputs in
 * row-major order, each sum rounded to dx's dtype), so overlapping windows
 * sum to the CPU's bits. The threads take the elements in the tensors'
 * memory order, contiguous (N, C, *S) or channels-last (N, C, H, W).
 *
 * Two kinds of kernel: the common case (pooling over 1 or 2 dims of dense
 * tensors with fewer than 2^31 elements, one float dtype) has its own
 * kernels, templated on the dtype, with 32-bit positions found by a
 * multiply and a shift per dim, and a backward without a search where the
 * windows do not overlap; everything else (3-d pooling, strided views,
 * mixed dtypes, huge tensors) takes the general kernels, values through
 * double and every element found through its view's strides. */
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

/* --- the common case: 1-d and 2-d pooling of dense tensors ------------------------------------- */

/* Element e of a dense (N, C, H, W) tensor (1-d pooling: H = 1) in memory
 * order is e = ((outer H + h) W + w) lanes + lane: contiguous, outer = n C + c
 * (the plane) and lanes = 1, lane = 0; channels-last, outer = n and lanes = C,
 * lane = c. The call's other tensors share outer, lanes and lane, so an
 * element's position there needs no division. */
struct dense_pos {
  uint32_t outer, h, w, lane;
};

struct dense_walk {
  divider lanes, W, H;
  MX_HD dense_pos at(uint32_t e) const {
    dense_pos q;
    uint32_t pixel = lanes.quotient(e), row = W.quotient(pixel);
    q.lane = e - pixel * lanes.d, q.w = pixel - row * W.d;
    q.outer = H.quotient(row), q.h = row - q.outer * H.d;
    return q;
  }
};

/* The element (outer, h, w, lane) of a dense tensor of H x W pixels. */
MX_HD static inline uint32_t dense_offset(dense_pos q, uint32_t h, uint32_t w, uint32_t H, uint32_t W, uint32_t lanes) {
  return ((q.outer * H + h) * W + w) * lanes + q.lane;
}

/* What the fast kernels share: the sizes, the window and the layout. */
struct planar_geom {
  dense_walk walk; /* over the tensor the threads take: out forward, dx backward */
  uint32_t in_h, in_w, out_h, out_w, lanes;
  int32_t k_h, k_w, s_h, s_w, p_h, p_w, d_h, d_w;
};

/* A view the fast kernels can take: dense in the call's layout, element 0
 * at data, every offset under 2^31. A view both contiguous and
 * channels-last (C = 1, or one pixel) lies the same either way. */
static bool dense_in(const mx_kview *v, bool channels_last) {
  if (mx__kview_numel(v) > INT32_MAX) return false;
  return channels_last ? mx__kview_is_channels_last(v) : mx__kview_is_contiguous(v);
}

/* The fast kernels' case for the pooling of `big` (x, or dx) into `small`
 * (out, or dy) and the indices (or NULL): 1 or 2 pooled dims, every view
 * dense in big's layout (as the CPU, big decides), values of one float
 * dtype. Fills g, walking the threads over `walked`. */
static bool planar_case(const mx_kview *big, const mx_kview *small, const mx_kview *indices, const mx_pool_params *p,
                        const mx_kview *walked, planar_geom *g) {
  bool cl = big->ndim == 4 && mx__kview_is_channels_last(big) && !mx__kview_is_contiguous(big);
  if (p->spatial > 2 || big->dtype != small->dtype || !mx_dtype_floating(big->dtype)) return false;
  if (!dense_in(big, cl) || !dense_in(small, cl) || (indices && !dense_in(indices, cl))) return false;
  mx_pool_geom pg = mx_pool_geom_of(big, small, p); /* dims 1 and 2 are H and W (1-d: H = 1) */
  /* the window in 32 bits too: its offsets, strides, dilations, and positions in the padded input */
  if (pg.k[1] > INT32_MAX / pg.k[2]) return false;
  for (int i = 1; i < 3; i++)
    if (pg.s[i] > INT32_MAX || pg.d[i] > INT32_MAX || pg.p[i] > INT32_MAX - pg.in[i]) return false;
  g->in_h = (uint32_t)pg.in[1], g->in_w = (uint32_t)pg.in[2], g->out_h = (uint32_t)pg.out[1];
  g->out_w = (uint32_t)pg.out[2], g->lanes = cl ? (uint32_t)big->shape[1] : 1;
  g->k_h = (int32_t)pg.k[1], g->k_w = (int32_t)pg.k[2], g->s_h = (int32_t)pg.s[1], g->s_w = (int32_t)pg.s[2];
  g->p_h = (int32_t)pg.p[1], g->p_w = (int32_t)pg.p[2], g->d_h = (int32_t)pg.d[1], g->d_w = (int32_t)pg.d[2];
  bool walks_big = walked == big;
  g->walk.lanes = divider_of(g->lanes);
  g->walk.W = divider_of(walks_big ? g->in_w : g->out_w);
  g->walk.H = divider_of(walks_big ? g->in_h : g->out_h);
  return true;
}

/* BODY for each element (h, w) inside the input of output o's window, at
 * the window's (kh, kw), in row-major order. */
#define FOR_PLANAR_WINDOW(g, o, BODY)                                      \
  for (int32_t kh = 0; kh < (g).k_h; kh++) {                               \
    int64_t h = (int64_t)(o).h * (g).s_h - (g).p_h + (int64_t)kh * (g).d_h; \
    if (h < 0 || h >= (g).in_h) continue;                                  \
    for (int32_t kw = 0; kw < (g).k_w; kw++) {                             \
      int64_t w = (int64_t)(o).w * (g).s_w - (g).p_w + (int64_t)kw * (g).d_w; \
      if (w < 0 || w >= (g).in_w) continue;                                \
      BODY                                                                 \
    }                                                                      \
  }

/* max_pool_op's search, a thread per output, any window. */
template <mx_dtype D>
struct max_pool_planar_op {
  typedef float_value<D> V;
  planar_geom g;
  const typename V::storage *x;
  typename V::storage *out;
  void *indices;
  bool offsets, relu;
  MX_HD void operator()(int64_t e) const {
    dense_pos o = g.walk.at((uint32_t)e);
    typename V::compute best = -INFINITY;
    int32_t where = -1, offset = 0;
    FOR_PLANAR_WINDOW(g, o, {
      typename V::compute v = V::load(x[dense_offset(o, (uint32_t)h, (uint32_t)w, g.in_h, g.in_w, g.lanes)]);
      if (relu) v = v < 0 ? 0 : v; /* mx_relu_f32/f64: -0 and NaN stay */
      if (where < 0 || v > best || v != v) {
        best = v;
        where = (int32_t)(h * g.in_w + w);
        offset = kh * g.k_w + kw;
      }
    })
    out[e] = V::store(best);
    if (offsets) ((uint8_t *)indices)[e] = (uint8_t)offset;
    else ((int64_t *)indices)[e] = where < 0 ? 0 : where;
  }
};

/* Windows that do not overlap (stride >= kernel, no dilation): an input
 * element lies in at most one, found by one division per dim, no search.
 * dx is 0 + dy where the window's max came from it, the CPU's scatter of
 * one term (-0 becomes +0, a NaN quiet), and +0 elsewhere: outside every
 * window, in the rows and columns left over. */
template <mx_dtype D>
struct max_pool_backward_planar_op {
  typedef float_value<D> V;
  planar_geom g;
  divider s_h, s_w;
  typename V::storage *dx;
  const typename V::storage *dy;
  const void *indices;
  bool offsets;
  MX_HD void operator()(int64_t e) const {
    dense_pos i = g.walk.at((uint32_t)e);
    uint32_t hp = i.h + g.p_h, wp = i.w + g.p_w; /* positions in the padded input */
    uint32_t oh = s_h.quotient(hp), ow = s_w.quotient(wp), kh = hp - oh * s_h.d, kw = wp - ow * s_w.d;
    typename V::compute grad = 0;
    if (kh < (uint32_t)g.k_h && kw < (uint32_t)g.k_w && oh < g.out_h && ow < g.out_w) {
      uint32_t o = dense_offset(i, oh, ow, g.out_h, g.out_w, g.lanes);
      bool chosen = offsets ? ((const uint8_t *)indices)[o] == kh * g.k_w + kw
                            : ((const int64_t *)indices)[o] == (int64_t)i.h * g.in_w + i.w;
      if (chosen) grad += V::load(dy[o]);
    }
    dx[e] = V::store(grad);
  }
};

/* The windows of dims 1 and 2 do not overlap: each stride at least its kernel, no dilation. */
static bool windows_disjoint(const planar_geom &g) {
  return g.s_h >= g.k_h && g.s_w >= g.k_w && g.d_h == 1 && g.d_w == 1;
}

/* avg_pool_op's sum in double, a thread per output, any window. */
template <mx_dtype D>
struct avg_pool_planar_op {
  typedef float_value<D> V;
  planar_geom g;
  const typename V::storage *x;
  typename V::storage *out;
  bool count_include_pad;
  MX_HD void operator()(int64_t e) const {
    dense_pos o = g.walk.at((uint32_t)e);
    double sum = 0, inside = 0;
    FOR_PLANAR_WINDOW(g, o, {
      sum += V::load(x[dense_offset(o, (uint32_t)h, (uint32_t)w, g.in_h, g.in_w, g.lanes)]);
      inside += 1;
    })
    double n = count_include_pad ? (double)g.k_h * g.k_w : inside > 0 ? inside : 1; /* divisor()'s */
    mx_element_store(&out[e], D, sum / n);
  }
};

/* Disjoint windows, as max_pool_backward_planar_op: dx is 0 + dy / the
 * divisor of the one window covering it, rounded to dx's dtype. */
template <mx_dtype D>
struct avg_pool_backward_planar_op {
  typedef float_value<D> V;
  planar_geom g;
  divider s_h, s_w;
  typename V::storage *dx;
  const typename V::storage *dy;
  bool count_include_pad;
  /* the window's elements inside the input along one dim, from its first at `first` */
  MX_HD static double inside(int64_t first, int32_t k, uint32_t size) {
    int64_t lo = first < 0 ? 0 : first, hi = first + k < size ? first + k : size;
    return (double)(hi - lo);
  }
  MX_HD void operator()(int64_t e) const {
    dense_pos i = g.walk.at((uint32_t)e);
    uint32_t hp = i.h + g.p_h, wp = i.w + g.p_w;
    uint32_t oh = s_h.quotient(hp), ow = s_w.quotient(wp), kh = hp - oh * s_h.d, kw = wp - ow * s_w.d;
    double grad = 0;
    if (kh < (uint32_t)g.k_h && kw < (uint32_t)g.k_w && oh < g.out_h && ow < g.out_w) {
      double n = count_include_pad ? (double)g.k_h * g.k_w
                                   : inside((int64_t)oh * g.s_h - g.p_h, g.k_h, g.in_h) *
                                         inside((int64_t)ow * g.s_w - g.p_w, g.k_w, g.in_w);
      grad += mx_element_load(&dy[dense_offset(i, oh, ow, g.out_h, g.out_w, g.lanes)], D) / n;
    }
    mx_element_store(&dx[e], D, grad);
  }
};

mx_status mx__cuda_max_pool(const mx_kview *out, const mx_kview *indices, const mx_kview *x,
                            const mx_pool_params *p) {
  planar_geom g;
  if (planar_case(x, out, indices, p, out, &g))
    return launch_typed<max_pool_planar_op>("launch of kernel max_pool", x->dtype, mx__kview_numel(out), [&](auto &op) {
      op.g = g, op.x = (decltype(op.x))x->data, op.out = (decltype(op.out))out->data;
      op.indices = indices->data, op.offsets = indices->dtype == MX_U8, op.relu = p->relu;
    });
  max_pool_op op = {mx_pool_geom_of(x, out, p), *out, *indices, *x, p->relu, order_of(*out)};
  return launch_elementwise("launch of kernel max_pool", mx__kview_numel(out), op);
}

mx_status mx__cuda_max_pool_backward(const mx_kview *dx, const mx_kview *dy, const mx_kview *indices,
                                     const mx_pool_params *p) {
  planar_geom g;
  if (planar_case(dx, dy, indices, p, dx, &g) && windows_disjoint(g))
    return launch_typed<max_pool_backward_planar_op>(
        "launch of kernel max_pool_backward", dx->dtype, mx__kview_numel(dx), [&](auto &op) {
          op.g = g, op.s_h = divider_of(g.s_h), op.s_w = divider_of(g.s_w);
          op.dx = (decltype(op.dx))dx->data, op.dy = (decltype(op.dy))dy->data;
          op.indices = indices->data, op.offsets = indices->dtype == MX_U8;
        });
  max_pool_backward_op op = {mx_pool_geom_of(dx, dy, p), *dx, *dy, *indices, order_of(*dx)};
  return launch_elementwise("launch of kernel max_pool_backward", mx__kview_numel(dx), op);
}

mx_status mx__cuda_avg_pool(const mx_kview *out, const mx_kview *x, const mx_pool_params *p) {
  planar_geom g;
  if (planar_case(x, out, NULL, p, out, &g))
    return launch_typed<avg_pool_planar_op>("launch of kernel avg_pool", x->dtype, mx__kview_numel(out), [&](auto &op) {
      op.g = g, op.x = (decltype(op.x))x->data, op.out = (decltype(op.out))out->data;
      op.count_include_pad = p->count_include_pad;
    });
  avg_pool_op op = {mx_pool_geom_of(x, out, p), *out, *x, p->count_include_pad, order_of(*out)};
  return launch_elementwise("launch of kernel avg_pool", mx__kview_numel(out), op);
}

mx_status mx__cuda_avg_pool_backward(const mx_kview *dx, const mx_kview *dy, const mx_pool_params *p) {
  planar_geom g;
  if (planar_case(dx, dy, NULL, p, dx, &g) && windows_disjoint(g))
    return launch_typed<avg_pool_backward_planar_op>(
        "launch of kernel avg_pool_backward", dx->dtype, mx__kview_numel(dx), [&](auto &op) {
          op.g = g, op.s_h = divider_of(g.s_h), op.s_w = divider_of(g.s_w);
          op.dx = (decltype(op.dx))dx->data, op.dy = (decltype(op.dy))dy->data;
          op.count_include_pad = p->count_include_pad;
        });
  avg_pool_backward_op op = {mx_pool_geom_of(dx, dy, p), *dx, *dy, p->count_include_pad, order_of(*dx)};
  return launch_elementwise("launch of kernel avg_pool_backward", mx__kview_numel(dx), op);
}
